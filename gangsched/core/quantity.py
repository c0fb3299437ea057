"""Kubernetes resource quantities, parsed exactly.

Grammar (as in k8s.io/apimachinery resource.Quantity)::

    quantity := sign? number suffix?
    number   := digits ('.' digits?)? | '.' digits
    suffix   := binarySI (Ki Mi Gi Ti Pi Ei) | decimalSI (n u m '' k M G T P E)
              | decimalExponent ('e' | 'E') sign? digits

Values are kept as exact fractions; callers round up the way Kubernetes does
(``MilliValue`` and ``Value`` both round towards +infinity).
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

__all__ = ["QuantityError", "parse_quantity", "to_milli", "to_units"]

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction] = {
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "": Fraction(1),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
}
_RE = re.compile(
    r"^(?P<sign>[+-]?)(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)"
    r"(?:(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E)|[eE](?P<exp>[+-]?[0-9]+))?$"
)
# Kubernetes refuses quantities whose magnitude exceeds what an int64 of nano-units can carry
# once scaled; exponents beyond this bound are certainly absurd.
_MAX_EXPONENT = 30


# No real quantity is longer than this; longer strings are refused before any conversion
# (Python also refuses int conversions of more than 4,300 digits).
_MAX_LENGTH = 64


def _shown(value: object) -> str:
    """A bounded repr for messages (a huge int cannot even be printed); JSON's words for null
    and booleans, as the user wrote them."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
        return f"<integer of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except ValueError:  # a container holding an integer too long to print
        return f"<unprintable {type(value).__name__}>"
    return text if len(text) <= _MAX_LENGTH + 2 else text[:_MAX_LENGTH] + "...'"


def _json_type(value: object) -> str:
    """The JSON name of a value's type, for messages about what a user wrote."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class QuantityError(ValueError):
    """A quantity that Kubernetes would not accept. ``field`` names where it came from."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field = field
        self.value = value
        self.reason = reason
        super().__init__(f"{field}: invalid quantity {_shown(value)}: {reason}")


def parse_quantity(value: object, field: str = "quantity") -> Fraction:
    """Parse a quantity (a string such as ``"500Mi"``, or an int) into an exact Fraction."""
    if isinstance(value, bool):
        raise QuantityError(field, value, "a boolean is not a quantity")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(field, value, "not a finite number")
        value = repr(value)
    if not isinstance(value, str):
        raise QuantityError(field, value, f"expected a string or number, got {_json_type(value)}")
    text = value.strip()
    if not text:
        raise QuantityError(field, value, "empty string")
    if len(text) > _MAX_LENGTH:
        raise QuantityError(field, value, f"longer than {_MAX_LENGTH} characters")
    m = _RE.match(text)
    if m is None:
        raise QuantityError(
            field, value, "expected a number with an optional suffix such as 100m, 2Gi, 1e3 or 1k"
        )
    number = Fraction(m.group("num"))
    suffix = m.group("suffix")
    exp = m.group("exp")
    if exp is not None:
        e = int(exp)
        if abs(e) > _MAX_EXPONENT:
            raise QuantityError(field, value, f"exponent {e} is out of range")
        number *= Fraction(10) ** e
    elif suffix is not None:
        number *= _BINARY[suffix] if suffix in _BINARY else _DECIMAL[suffix]
    return -number if m.group("sign") == "-" else number


def to_milli(q: Fraction) -> int:
    """Milli-units, rounded up (as ``Quantity.MilliValue``)."""
    return math.ceil(q * 1000)


def to_units(q: Fraction) -> int:
    """Whole units, rounded up (as ``Quantity.Value``)."""
    return math.ceil(q)
