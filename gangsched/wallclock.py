"""The real clock, for the daemon. The core only ever sees it through the Clock protocol."""

from __future__ import annotations

import time

__all__ = ["WallClock"]


class WallClock:
    def now(self) -> float:
        return time.time()
