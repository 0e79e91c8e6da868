import io

import pytest

from stockroom.csvio import CsvFormatError, load_inventory, read_inventory, save_inventory
from stockroom.inventory import Inventory, Item
from stockroom.money import Money

SAMPLE = """\
sku,name,quantity,unit_price,reorder_level
BOLT-M6,Hex bolt M6,120,0.15,50
NUT-M6,Hex nut M6,8,0.04,50
"""


def test_read_inventory():
    inventory = read_inventory(io.StringIO(SAMPLE))
    assert len(inventory) == 2
    bolt = inventory.get("BOLT-M6")
    assert bolt.name == "Hex bolt M6"
    assert bolt.quantity == 120
    assert bolt.unit_price == Money(15)
    assert bolt.reorder_level == 50


def test_read_inventory_in_another_currency():
    inventory = read_inventory(io.StringIO(SAMPLE), currency="EUR")
    assert inventory.get("NUT-M6").unit_price == Money(4, "EUR")


def test_blank_lines_and_optional_columns():
    text = "sku,name,quantity,unit_price\n\nGLUE,Wood glue,3,6.49\n\n"
    inventory = read_inventory(io.StringIO(text))
    assert inventory.get("GLUE").reorder_level == 0
    assert inventory.total_value() == Money(1947)


def test_missing_column_or_empty_file():
    with pytest.raises(CsvFormatError, match="unit_price"):
        read_inventory(io.StringIO("sku,name,quantity\nA,B,1\n"))
    with pytest.raises(CsvFormatError, match="empty"):
        read_inventory(io.StringIO("\n"))


def test_bad_quantity_reports_the_line():
    text = SAMPLE + "WASH-M6,Washer M6,lots,0.02,40\n"
    with pytest.raises(CsvFormatError) as excinfo:
        read_inventory(io.StringIO(text))
    assert excinfo.value.line == 4
    assert "quantity" in str(excinfo.value)


def test_save_then_load(tmp_path):
    inventory = Inventory()
    inventory.add_item(Item("BOLT-M6", "Hex bolt M6", quantity=120, unit_price=Money(15)))
    inventory.add_item(
        Item("GLUE", "Wood glue", quantity=3, unit_price=Money(649), reorder_level=2)
    )
    path = tmp_path / "stock.csv"
    save_inventory(inventory, path)
    assert path.read_text(encoding="utf-8").splitlines() == [
        "sku,name,quantity,unit_price,reorder_level",
        "BOLT-M6,Hex bolt M6,120,0.15,0",
        "GLUE,Wood glue,3,6.49,2",
    ]
    loaded = load_inventory(path)
    assert [(item.sku, item.quantity, item.unit_price) for item in loaded] == [
        ("BOLT-M6", 120, Money(15)),
        ("GLUE", 3, Money(649)),
    ]
