"""Items and stock levels."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from stockroom.money import Money
from stockroom.textutil import truncate


class InventoryError(Exception):
    """Base class for the errors raised by :class:`Inventory`."""


class UnknownItemError(InventoryError, LookupError):
    """Raised when a SKU is not in the inventory."""

    def __init__(self, sku: str) -> None:
        super().__init__(f"unknown SKU: {sku!r}")
        self.sku = sku


class InsufficientStockError(InventoryError):
    """Raised when more units are removed than there are in stock."""

    def __init__(self, sku: str, requested: int, available: int) -> None:
        super().__init__(f"cannot remove {requested} x {sku}: only {available} in stock")
        self.sku = sku
        self.requested = requested
        self.available = available


@dataclass
class Item:
    """A stock-keeping unit: what it is, how many we have and what one costs."""

    sku: str
    name: str
    quantity: int = 0
    unit_price: Money = field(default_factory=Money.zero)
    reorder_level: int = 0

    def __post_init__(self) -> None:
        if not self.sku or not self.sku.strip():
            raise ValueError("sku must not be empty")
        if self.quantity < 0:
            raise ValueError(f"quantity must not be negative, got {self.quantity}")
        if self.reorder_level < 0:
            raise ValueError(f"reorder_level must not be negative, got {self.reorder_level}")

    @property
    def total_value(self) -> Money:
        """The value of all units in stock."""
        return self.unit_price * self.quantity

    @property
    def needs_reorder(self) -> bool:
        """True when the quantity is at or below the reorder level."""
        return self.quantity <= self.reorder_level


class Inventory:
    """A collection of :class:`Item` objects keyed by SKU, all in one currency."""

    def __init__(self, currency: str = "USD") -> None:
        self.currency = currency
        self._items: dict[str, Item] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, sku: object) -> bool:
        return sku in self._items

    def __iter__(self) -> Iterator[Item]:
        """Iterate over the items in SKU order."""
        return iter(sorted(self._items.values(), key=lambda item: item.sku))

    def add_item(self, item: Item) -> None:
        """Add a new item; its SKU must not be in the inventory yet."""
        if item.sku in self._items:
            raise ValueError(f"duplicate SKU: {item.sku!r}")
        if item.unit_price.currency != self.currency:
            raise ValueError(
                f"item {item.sku!r} is priced in {item.unit_price.currency}, "
                f"inventory uses {self.currency}"
            )
        self._items[item.sku] = item

    def get(self, sku: str) -> Item:
        """Return the item with this SKU or raise :class:`UnknownItemError`."""
        try:
            return self._items[sku]
        except KeyError:
            raise UnknownItemError(sku) from None

    def add_stock(self, sku: str, quantity: int) -> int:
        """Receive ``quantity`` units of ``sku``; return the new quantity."""
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        item = self.get(sku)
        item.quantity += quantity
        return item.quantity

    def remove_stock(self, sku: str, quantity: int) -> int:
        """Take ``quantity`` units of ``sku`` out of stock; return what is left.

        Raises :class:`InsufficientStockError` when fewer than ``quantity``
        units are in stock.
        """
        if quantity <= 0:
            raise ValueError(f"quantity must be positive, got {quantity}")
        item = self.get(sku)
        item.quantity -= quantity
        return item.quantity

    def total_value(self) -> Money:
        """The value of everything in stock."""
        total = Money.zero(self.currency)
        for item in self._items.values():
            total += item.total_value
        return total

    def low_stock(self, threshold: int | None = None) -> list[Item]:
        """Items that need reordering, fewest units first.

        Without ``threshold`` each item's own reorder level is used; with it,
        every item with at most ``threshold`` units is reported.
        """
        if threshold is None:
            found = [item for item in self._items.values() if item.needs_reorder]
        else:
            found = [item for item in self._items.values() if item.quantity <= threshold]
        return sorted(found, key=lambda item: (item.quantity, item.sku))

    def report(self, name_width: int = 24) -> str:
        """A plain-text table of the stock, one line per item, and a total."""
        lines = []
        for item in self:
            name = truncate(item.name, name_width)
            lines.append(
                f"{item.sku:<12} {name:<{name_width}} {item.quantity:>6} "
                f"{item.total_value.format():>14}"
            )
        lines.append(f"{'TOTAL':<12} {'':<{name_width}} {'':>6} {self.total_value().format():>14}")
        return "\n".join(lines)
