"""Money amounts stored as integer cents.

Floating point numbers cannot represent most decimal fractions exactly, so
:class:`Money` keeps an integer number of cents and a currency code.  Arithmetic
between two amounts is only allowed when their currencies match.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation

#: Symbols used by :meth:`Money.format`; other currencies are written with their code.
SYMBOLS = {"USD": "$", "EUR": "€", "GBP": "£", "JPY": "¥"}

_CURRENCY_RE = re.compile(r"^[A-Z]{3}$")


class CurrencyMismatchError(ValueError):
    """Raised when two amounts in different currencies are combined."""

    def __init__(self, left: str, right: str) -> None:
        super().__init__(f"cannot combine {left} with {right}")
        self.left = left
        self.right = right


@functools.total_ordering
@dataclass(frozen=True)
class Money:
    """An amount of money: an integer number of ``cents`` in ``currency``.

    >>> Money(1999) + Money(1)
    Money(cents=2000, currency='USD')
    >>> str(Money(123456))
    '$1,234.56'
    """

    cents: int
    currency: str = "USD"

    def __post_init__(self) -> None:
        if isinstance(self.cents, bool) or not isinstance(self.cents, int):
            raise TypeError(f"cents must be an int, not {type(self.cents).__name__}")
        if not isinstance(self.currency, str) or not _CURRENCY_RE.match(self.currency):
            raise ValueError(f"invalid currency code: {self.currency!r}")

    @classmethod
    def zero(cls, currency: str = "USD") -> Money:
        """Return an amount of zero in ``currency``."""
        return cls(0, currency)

    @classmethod
    def from_decimal(cls, value: Decimal | str | int, currency: str = "USD") -> Money:
        """Build an amount from a number of whole units, e.g. ``"12.34"``.

        Fractions of a cent are rounded half to even (banker's rounding).
        """
        try:
            amount = Decimal(value)
        except (InvalidOperation, TypeError, ValueError):
            raise ValueError(f"not a decimal amount: {value!r}") from None
        if not amount.is_finite():
            raise ValueError(f"not a finite amount: {value!r}")
        cents = (amount * 100).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
        return cls(int(cents), currency)

    @property
    def amount(self) -> Decimal:
        """The amount in whole units, as an exact :class:`~decimal.Decimal`."""
        return Decimal(self.cents).scaleb(-2)

    def _check(self, other: Money) -> None:
        if self.currency != other.currency:
            raise CurrencyMismatchError(self.currency, other.currency)

    def __add__(self, other: object) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        self._check(other)
        return Money(self.cents + other.cents, self.currency)

    def __sub__(self, other: object) -> Money:
        if not isinstance(other, Money):
            return NotImplemented
        self._check(other)
        return Money(self.cents - other.cents, self.currency)

    def __neg__(self) -> Money:
        return Money(-self.cents, self.currency)

    def __abs__(self) -> Money:
        return Money(abs(self.cents), self.currency)

    def __mul__(self, factor: object) -> Money:
        """Multiply by an ``int`` or a ``Decimal``; floats are refused on purpose."""
        if isinstance(factor, bool) or not isinstance(factor, (int, Decimal)):
            return NotImplemented
        if isinstance(factor, int):
            return Money(self.cents * factor, self.currency)
        cents = (Decimal(self.cents) * factor).quantize(Decimal(1), rounding=ROUND_HALF_EVEN)
        return Money(int(cents), self.currency)

    __rmul__ = __mul__

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Money):
            return NotImplemented
        self._check(other)
        return self.cents < other.cents

    def __bool__(self) -> bool:
        return self.cents != 0

    def split(self, parts: int) -> list[Money]:
        """Split into ``parts`` amounts that differ by at most one cent.

        The leftover cents go to the first shares, so the shares always add up
        to the original amount.
        """
        if parts < 1:
            raise ValueError("parts must be at least 1")
        share, leftover = divmod(self.cents, parts)
        return [
            Money(share + (1 if index < leftover else 0), self.currency) for index in range(parts)
        ]

    def format(self) -> str:
        """Format for display: currency symbol, thousands separators, two decimals."""
        symbol = SYMBOLS.get(self.currency, self.currency + " ")
        units, cents = divmod(self.cents, 100)
        return f"{symbol}{units:,}.{cents:02d}"

    def __str__(self) -> str:
        return self.format()
