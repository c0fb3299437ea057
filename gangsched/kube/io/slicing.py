"""Long work on the event loop, in slices that yield to it.

Everything the daemon does runs on one event loop: watches, bindings, status writes, the
health server, the lease renewal. A relist of 50,000 pods handled in one go would hold that
loop for seconds, long enough for the lease to miss its renew deadline. Loops over many items
(a relist, a status report of every gang) go through :func:`in_slices` instead: it yields to
the loop whenever its time budget is spent, so nothing else waits longer than about one
budget.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from typing import TypeVar

__all__ = ["SLICE_SECONDS", "in_slices"]

T = TypeVar("T")

SLICE_SECONDS = 0.02  # the longest the loop is held before others get a turn


async def in_slices(
    items: Iterable[T],
    fn: Callable[[T], object],
    budget: float = SLICE_SECONDS,
    *,
    on_yield: Callable[[], None] | None = None,
) -> int:
    """Call ``fn`` on each item in order, yielding to the event loop whenever ``budget``
    seconds have passed since the last yield (and calling ``on_yield`` after each). Returns
    how many times it yielded."""
    clock = time.perf_counter
    deadline = clock() + budget
    yields = 0
    for item in items:
        fn(item)
        if clock() >= deadline:
            await asyncio.sleep(0)
            yields += 1
            if on_yield is not None:
                on_yield()
            deadline = clock() + budget
    return yields
