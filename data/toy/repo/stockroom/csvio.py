"""Reading and writing an inventory as CSV.

The file has a header line and one row per item::

    sku,name,quantity,unit_price,reorder_level
    BOLT-M6,Hex bolt M6,120,0.15,50

``unit_price`` is written in whole units with two decimals (``0.15`` is 15
cents); the currency is not stored in the file and is given when loading.
"""

from __future__ import annotations

import csv
import os
from typing import IO

from stockroom.inventory import Inventory, Item
from stockroom.money import Money

FIELDS = ("sku", "name", "quantity", "unit_price", "reorder_level")
REQUIRED_FIELDS = ("sku", "name", "quantity", "unit_price")

PathLike = str | os.PathLike[str]


class CsvFormatError(ValueError):
    """Raised when a CSV file cannot be read as an inventory."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(f"line {line}: {message}" if line is not None else message)
        self.line = line


def _split_row(line: str) -> list[str]:
    """Split one CSV line into its fields."""
    return [value.strip() for value in line.split(",")]


def _parse_int(row: dict[str, str], name: str, line: int) -> int:
    value = row.get(name, "").strip()
    if not value:
        return 0
    try:
        return int(value)
    except ValueError:
        raise CsvFormatError(f"{name} is not an integer: {value!r}", line) from None


def _item_from_row(row: dict[str, str], currency: str, line: int) -> Item:
    try:
        price = Money.from_decimal(row["unit_price"].strip() or "0", currency)
    except ValueError:
        raise CsvFormatError(f"unit_price is not a number: {row['unit_price']!r}", line) from None
    try:
        return Item(
            sku=row["sku"].strip(),
            name=row["name"].strip(),
            quantity=_parse_int(row, "quantity", line),
            unit_price=price,
            reorder_level=_parse_int(row, "reorder_level", line),
        )
    except ValueError as exc:
        raise CsvFormatError(str(exc), line) from None


def read_inventory(stream: IO[str], currency: str = "USD") -> Inventory:
    """Read an inventory from an open text stream."""
    inventory = Inventory(currency)
    rows = [
        (number, line)
        for number, line in enumerate(stream.read().splitlines(), start=1)
        if line.strip()
    ]
    if not rows:
        raise CsvFormatError("the file is empty")
    header = _split_row(rows[0][1])
    missing = [name for name in REQUIRED_FIELDS if name not in header]
    if missing:
        raise CsvFormatError(f"missing column(s): {', '.join(missing)}", rows[0][0])
    for number, line in rows[1:]:
        values = _split_row(line)
        if len(values) != len(header):
            raise CsvFormatError(f"expected {len(header)} fields, got {len(values)}", number)
        item = _item_from_row(dict(zip(header, values, strict=True)), currency, number)
        if item.sku in inventory:
            raise CsvFormatError(f"duplicate SKU: {item.sku!r}", number)
        inventory.add_item(item)
    return inventory


def load_inventory(path: PathLike, currency: str = "USD") -> Inventory:
    """Load an inventory from the CSV file at ``path``."""
    with open(path, encoding="utf-8", newline="") as stream:
        return read_inventory(stream, currency)


def write_inventory(inventory: Inventory, stream: IO[str]) -> None:
    """Write ``inventory`` to an open text stream, items in SKU order."""
    writer = csv.writer(stream, lineterminator="\n")
    writer.writerow(FIELDS)
    for item in inventory:
        writer.writerow(
            [
                item.sku,
                item.name,
                item.quantity,
                f"{item.unit_price.amount:.2f}",
                item.reorder_level,
            ]
        )


def save_inventory(inventory: Inventory, path: PathLike) -> None:
    """Save ``inventory`` to the CSV file at ``path`` (overwritten if it exists)."""
    with open(path, "w", encoding="utf-8", newline="") as stream:
        write_inventory(inventory, stream)
