"""Quantity parsing (gangsched.core.quantity) against Kubernetes resource.Quantity rules."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest

from gangsched.core.quantity import QuantityError, parse_quantity, to_milli, to_units

KI = 2**10
MI = 2**20
GI = 2**30


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100m", Fraction(1, 10)),
        ("1.5", Fraction(3, 2)),
        ("2Gi", 2 * GI),
        ("500Mi", 500 * MI),
        ("1Ki", KI),
        ("1Ti", 2**40),
        ("1Pi", 2**50),
        ("1Ei", 2**60),
        ("1k", 1000),
        ("1M", 10**6),
        ("1G", 10**9),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1E", 10**18),  # a bare E is the exa suffix ...
        ("1E3", 1000),  # ... but E followed by digits is an exponent
        ("1e3", 1000),
        ("1e+3", 1000),
        ("1e-3", Fraction(1, 1000)),
        ("1.5e3", 1500),
        ("5n", Fraction(5, 10**9)),
        ("5u", Fraction(5, 10**6)),
        ("0.1", Fraction(1, 10)),
        ("+1", 1),
        ("-1", -1),
        (".5", Fraction(1, 2)),
        ("1.", 1),
        ("0", 0),
        ("1.5Gi", 3 * GI // 2),
        ("0.5Ki", 512),
        ("007", 7),
        (" 2Gi ", 2 * GI),  # outer whitespace is stripped
        ("\t100m\n", Fraction(1, 10)),
        ("1e30", 10**30),  # the largest exponent accepted
    ],
)
def test_parse_valid_strings(text: str, expected: Fraction | int) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (3, 3),
        (-2, -2),
        (1.5, Fraction(3, 2)),
        (0.1, Fraction(1, 10)),  # parsed from its shortest repr, not its binary expansion
        (2.0, 2),
        (1e-05, Fraction(1, 100000)),
        (1e20, 10**20),
    ],
)
def test_parse_numbers(value: int | float, expected: Fraction | int) -> None:
    assert parse_quantity(value) == expected


def test_result_is_exact_fraction() -> None:
    q = parse_quantity("1.1")
    assert isinstance(q, Fraction)
    assert q == Fraction(11, 10)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "abc",
        "1.2.3",
        "1Q",
        "--1",
        "+-1",
        "1e",
        "1E+",
        "1 Gi",  # inner whitespace is not stripped
        "1K",  # kilo is lower-case k only
        "1ki",
        "1mi",
        "Gi",
        ".",
        "-",
        "1e3Ki",
        "1Gi3",
        "0x10",
        "1_000",
        "1/2",
        "\u0661",  # ARABIC-INDIC DIGIT ONE: not an ASCII digit
        "1e31",  # exponent out of range
        "1e-31",
        "inf",
        "nan",
    ],
)
def test_parse_invalid_strings(text: str) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(text, "spec.containers[0].resources.requests.cpu")
    assert info.value.field == "spec.containers[0].resources.requests.cpu"
    assert info.value.value == text
    assert str(info.value).startswith("spec.containers[0].resources.requests.cpu: ")


@pytest.mark.parametrize(
    "value",
    [True, False, None, math.nan, math.inf, -math.inf, [1], {"a": 1}, b"1", Fraction(1, 2)],
)
def test_parse_invalid_types(value: object) -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity(value, "minResources.cpu")
    assert info.value.field == "minResources.cpu"
    assert "minResources.cpu" in str(info.value)
    assert info.value.reason


def test_error_is_a_value_error() -> None:
    with pytest.raises(ValueError, match=re.escape("my.field: ")):
        parse_quantity("bogus", "my.field")


def test_default_field_name() -> None:
    with pytest.raises(QuantityError) as info:
        parse_quantity("bogus")
    assert info.value.field == "quantity"


@pytest.mark.parametrize(
    "text",
    [
        "1" * 5000,  # more digits than Python converts to int by default
        "0." + "0" * 5000 + "1",
        "1e" + "0" * 5000,
    ],
)
def test_overlong_digit_strings_are_quantity_errors(text: str) -> None:
    # A quantity the parser cannot handle must still fail as a QuantityError naming the
    # field, so the adapters can mark the pod invalid instead of crashing.
    with pytest.raises(QuantityError) as info:
        parse_quantity(text, "spec.minResources.memory")
    assert info.value.field == "spec.minResources.memory"


# ---- rounding ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("q", "milli"),
    [
        (Fraction(0), 0),
        (Fraction(1, 10000), 1),  # 0.0001 -> 0.1m -> rounds up to 1m
        (Fraction(1, 10**9), 1),  # 1n
        (Fraction(1, 1000), 1),
        (Fraction(1001, 1_000_000), 2),  # 1.001m -> 2m
        (Fraction(3, 2), 1500),
        (Fraction(7), 7000),
        (Fraction(-1, 10000), 0),  # towards +infinity, as MilliValue
    ],
)
def test_to_milli_rounds_up(q: Fraction, milli: int) -> None:
    assert to_milli(q) == milli


@pytest.mark.parametrize(
    ("q", "units"),
    [
        (Fraction(0), 0),
        (Fraction(1, 10), 1),
        (Fraction(1, 10**9), 1),
        (Fraction(3, 2), 2),
        (Fraction(2), 2),
        (Fraction(-3, 2), -1),  # towards +infinity, as Value
    ],
)
def test_to_units_rounds_up(q: Fraction, units: int) -> None:
    assert to_units(q) == units


def test_rounding_of_parsed_quantities() -> None:
    assert to_milli(parse_quantity("0.0001")) == 1
    assert to_milli(parse_quantity("100m")) == 100
    assert to_milli(parse_quantity("1")) == 1000
    assert to_units(parse_quantity("100m")) == 1
    assert to_units(parse_quantity("1Mi")) == MI
    assert to_units(parse_quantity("1.5k")) == 1500
    assert isinstance(to_milli(parse_quantity("1.5")), int)
