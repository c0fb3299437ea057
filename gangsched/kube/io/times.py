"""Timestamps as the API server writes them (RFC 3339, UTC, to the second or the microsecond)."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

__all__ = ["rfc3339"]


def rfc3339(t: float | None = None, micro: bool = False) -> str:
    """``2026-01-02T03:04:05Z`` (or ``...05.123456Z``), UTC. The seconds part is formatted once
    per second: an event and a condition per pod ask for it thousands of times a second."""
    global _last_second
    if t is None:
        t = time.time()
    second = math.floor(t)
    cached = _last_second
    if cached[0] != second:
        text = datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
        cached = _last_second = (second, text)
    if micro:
        return f"{cached[1]}.{min(999_999, int((t - second) * 1_000_000)):06d}Z"
    return f"{cached[1]}Z"


_last_second: tuple[int, str] = (-1, "")
