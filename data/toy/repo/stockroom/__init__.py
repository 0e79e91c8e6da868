"""stockroom: a tiny inventory library.

Amounts of money are kept in integer cents (:class:`Money`), stock lives in an
:class:`Inventory` of :class:`Item` objects, and inventories can be read from and
written to CSV files with :func:`load_inventory` and :func:`save_inventory`.
"""

from stockroom.csvio import (
    CsvFormatError,
    load_inventory,
    read_inventory,
    save_inventory,
    write_inventory,
)
from stockroom.inventory import (
    InsufficientStockError,
    Inventory,
    InventoryError,
    Item,
    UnknownItemError,
)
from stockroom.money import CurrencyMismatchError, Money
from stockroom.textutil import normalize_whitespace, slugify, truncate, wrap

__version__ = "0.1.0"

__all__ = [
    "CsvFormatError",
    "CurrencyMismatchError",
    "InsufficientStockError",
    "Inventory",
    "InventoryError",
    "Item",
    "Money",
    "UnknownItemError",
    "load_inventory",
    "normalize_whitespace",
    "read_inventory",
    "save_inventory",
    "slugify",
    "truncate",
    "wrap",
    "write_inventory",
]
