"""The garbage collector around bulk loads.

A list of 50,000 pods creates millions of long-lived objects at once. CPython's cyclic
collector runs a full collection each time the long-lived objects have grown by a quarter, so
loading them scans the whole heap several times over; in a profile of the first list at 5,000
nodes and 40,000 pods that was more than half of the time spent handling it. Nothing a list
creates is cyclic garbage (reference counting frees what is dropped), so the collector is paused
while any list is being read and handled (:func:`collector_paused`, which nests), and once the
first lists are in, everything loaded is moved out of the collector's reach
(:func:`settle`, ``gc.freeze``): later collections scan only what changed since.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused", "settle"]

_paused = 0


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside (reference counting still frees as it goes).
    Nests, across tasks: the collector runs again when the last one leaves."""
    global _paused
    _paused += 1
    if _paused == 1:
        gc.disable()
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0:
            gc.enable()


def settle() -> None:
    """Collect once, then move every object that survives into the permanent generation, so
    later collections never scan the cluster state loaded so far."""
    gc.collect()
    gc.freeze()
