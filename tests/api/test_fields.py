"""The field readers every wire format shares (gangsched.api.fields): timestamps."""

from __future__ import annotations

import pytest

from gangsched.api.fields import timestamp
from tests.api.objects import CREATED, CREATED_TS


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (CREATED, CREATED_TS),
        ("2024-05-01T12:00:00.250000Z", CREATED_TS + 0.25),
        ("2024-05-01T14:00:00+02:00", CREATED_TS),
        ("1970-01-01T00:00:00Z", 0.0),
        ("", 0.0),
        (None, 0.0),
        ("yesterday", 0.0),
        ("2024-13-01T00:00:00Z", 0.0),
        (1714564800, 0.0),  # not a string: unreadable
        (["2024-05-01T12:00:00Z"], 0.0),
    ],
)
def test_timestamp(value: object, expected: float) -> None:
    assert timestamp(value) == expected
