import pytest

from stockroom.inventory import Inventory, Item, UnknownItemError
from stockroom.money import Money


@pytest.fixture
def inventory():
    inv = Inventory()
    inv.add_item(Item("BOLT-M6", "Hex bolt M6", quantity=120, unit_price=Money(15)))
    inv.add_item(Item("NUT-M6", "Hex nut M6", quantity=8, unit_price=Money(4), reorder_level=50))
    inv.add_item(Item("WASH-M6", "Washer M6", quantity=40, unit_price=Money(2), reorder_level=40))
    return inv


def test_item_total_value():
    item = Item("GLUE", "Wood glue 250 ml", quantity=3, unit_price=Money(649))
    assert item.total_value == Money(1947)


def test_item_validation():
    with pytest.raises(ValueError):
        Item("GLUE", "Wood glue 250 ml", quantity=-1)
    with pytest.raises(ValueError):
        Item("  ", "Nameless")


def test_duplicate_sku_is_rejected(inventory):
    with pytest.raises(ValueError, match="duplicate"):
        inventory.add_item(Item("BOLT-M6", "Another bolt"))


def test_currency_must_match(inventory):
    with pytest.raises(ValueError, match="EUR"):
        inventory.add_item(Item("EU-1", "Euro part", unit_price=Money(100, "EUR")))


def test_lookup(inventory):
    assert len(inventory) == 3
    assert "NUT-M6" in inventory
    assert "NUT-M8" not in inventory
    assert inventory.get("NUT-M6").name == "Hex nut M6"
    assert [item.sku for item in inventory] == ["BOLT-M6", "NUT-M6", "WASH-M6"]


def test_unknown_sku(inventory):
    with pytest.raises(UnknownItemError) as excinfo:
        inventory.get("NUT-M8")
    assert isinstance(excinfo.value, LookupError)
    assert excinfo.value.sku == "NUT-M8"


class TestAdd:
    def test_add_stock(self, inventory):
        assert inventory.add_stock("NUT-M6", 100) == 108
        assert inventory.get("NUT-M6").quantity == 108

    def test_add_stock_must_be_positive(self, inventory):
        with pytest.raises(ValueError):
            inventory.add_stock("NUT-M6", 0)


class TestRemove:
    def test_remove_stock(self, inventory):
        assert inventory.remove_stock("BOLT-M6", 20) == 100
        assert inventory.get("BOLT-M6").quantity == 100

    def test_remove_everything(self, inventory):
        assert inventory.remove_stock("NUT-M6", 8) == 0

    def test_remove_must_be_positive(self, inventory):
        with pytest.raises(ValueError):
            inventory.remove_stock("BOLT-M6", -5)

    def test_remove_unknown_sku(self, inventory):
        with pytest.raises(UnknownItemError):
            inventory.remove_stock("NUT-M8", 1)


def test_total_value(inventory):
    assert inventory.total_value() == Money(120 * 15 + 8 * 4 + 40 * 2)


def test_total_value_of_empty_inventory():
    assert Inventory("EUR").total_value() == Money(0, "EUR")


def test_low_stock_uses_reorder_levels(inventory):
    assert [item.sku for item in inventory.low_stock()] == ["NUT-M6", "WASH-M6"]


def test_low_stock_with_threshold(inventory):
    assert [item.sku for item in inventory.low_stock(threshold=100)] == ["NUT-M6", "WASH-M6"]
    assert [item.sku for item in inventory.low_stock(threshold=5)] == []


def test_report(inventory):
    lines = inventory.report(name_width=8).splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("BOLT-M6      Hex b... ")
    assert lines[0].endswith(" 120         $18.00")
    assert lines[-1].split() == ["TOTAL", "$19.12"]
