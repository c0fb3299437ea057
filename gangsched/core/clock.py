"""Time, injected. The core reads the time only through a Clock."""

from __future__ import annotations

from typing import Protocol

__all__ = ["Clock", "FakeClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds since the epoch (or any fixed origin shared with pod creation times)."""
        ...


class FakeClock:
    """A clock that moves only when told to; for the simulator and tests."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._now += seconds

    def set(self, t: float) -> None:
        if t < self._now:
            raise ValueError("a clock does not go backwards")
        self._now = t
