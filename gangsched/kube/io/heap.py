"""The garbage collector around bulk loads.

A list of 50,000 pods creates millions of long-lived objects at once. CPython's cyclic
collector runs a full collection each time the long-lived objects have grown by a quarter, so
loading them scans the whole heap several times over; in a profile of the first list at 5,000
nodes and 40,000 pods that was more than half of the time spent handling it. Nothing a list
creates is cyclic garbage (reference counting frees what is dropped), so the collector is paused
while any list is being read and handled (:func:`collector_paused`, which nests across the
reflectors listing at once). When the first lists end, everything loaded is moved out of the
collector's reach before it runs again (``gc.freeze``): it never scans the cluster state loaded
at the start, now or later. A later relist is handled paused too, then collected as usual, so
what it replaced is freed. A round of start forecasts (kube/service.py) is run paused too: its
twin of the core is a copy of the whole cluster state.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["collector_paused"]

_paused = 0
_freeze = False


@contextlib.contextmanager
def collector_paused(*, freeze: bool = False) -> Iterator[None]:
    """No cyclic garbage collection inside (reference counting still frees as it goes).
    Nests, across tasks: the collector runs again when the last one leaves; if any of them
    asked to ``freeze`` (a first list), everything there is then is frozen first."""
    global _paused, _freeze
    _paused += 1
    _freeze = _freeze or freeze
    if _paused == 1:
        gc.disable()
    try:
        yield
    finally:
        _paused -= 1
        if _paused == 0:
            if _freeze:
                _freeze = False
                gc.freeze()
            gc.enable()
