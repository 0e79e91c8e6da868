from decimal import Decimal

import pytest

from stockroom.money import CurrencyMismatchError, Money


@pytest.mark.parametrize("cents", [1.5, "100", True])
def test_cents_must_be_int(cents):
    with pytest.raises(TypeError):
        Money(cents)


def test_currency_code():
    assert Money(250) == Money(250, "USD")
    assert Money.zero("EUR") == Money(0, "EUR")
    with pytest.raises(ValueError):
        Money(100, "usd")
    with pytest.raises(ValueError):
        Money(100, "EURO")


@pytest.mark.parametrize(
    "value, cents",
    [("12.34", 1234), ("0.125", 12), ("0.135", 14), (Decimal("-1.5"), -150)],
)
def test_from_decimal(value, cents):
    assert Money.from_decimal(value).cents == cents


def test_from_decimal_rejects_garbage():
    with pytest.raises(ValueError):
        Money.from_decimal("twelve")
    with pytest.raises(ValueError):
        Money.from_decimal("NaN")


def test_amount_is_exact():
    assert Money(1999).amount == Decimal("19.99")
    assert str(Money(100).amount) == "1.00"


def test_add_and_subtract():
    assert Money(150) + Money(275) == Money(425)
    assert Money(150) - Money(275) == Money(-125)
    assert -Money(30) == Money(-30)
    assert abs(Money(-30)) == Money(30)


def test_mixing_currencies_raises():
    with pytest.raises(CurrencyMismatchError):
        Money(100, "USD") + Money(100, "EUR")
    with pytest.raises(CurrencyMismatchError):
        _ = Money(100, "USD") < Money(100, "EUR")


def test_multiply_by_int():
    assert Money(125) * 4 == Money(500)
    assert 3 * Money(125) == Money(375)


def test_multiply_by_decimal_rounds_half_even():
    assert Money(10) * Decimal("0.25") == Money(2)
    assert Money(10) * Decimal("0.35") == Money(4)
    assert Money(1999) * Decimal("1.5") == Money(2998)


def test_multiply_by_float_is_refused():
    with pytest.raises(TypeError):
        Money(100) * 1.5


def test_ordering():
    assert Money(100) < Money(101)
    assert Money(100) >= Money(100)
    assert max(Money(5), Money(50), Money(20)) == Money(50)
    assert sorted([Money(3), Money(1), Money(2)]) == [Money(1), Money(2), Money(3)]


def test_split_keeps_the_total():
    shares = Money(1000).split(3)
    assert shares == [Money(334), Money(333), Money(333)]
    assert sum(share.cents for share in shares) == 1000


def test_split_needs_a_positive_count():
    with pytest.raises(ValueError):
        Money(1000).split(0)


@pytest.mark.parametrize(
    "cents, expected",
    [
        (0, "$0.00"),
        (5, "$0.05"),
        (1234, "$12.34"),
        (123456789, "$1,234,567.89"),
    ],
)
def test_format(cents, expected):
    assert Money(cents).format() == expected


def test_format_other_currencies():
    assert str(Money(250, "EUR")) == "€2.50"
    assert str(Money(250, "CHF")) == "CHF 2.50"
