"""Crash injection for the crash-safety tests: the process kills itself (SIGKILL, no cleanup)
the Nth time it reaches a named moment.

``GANGSCHED_FAILPOINTS="evict.marked=1"`` (a comma-separated list of ``name=N``) is read once,
when this module is first imported; unset, as in every real deployment, each check is one
dictionary look-up that finds nothing. The moments:

- ``evict.marked``: a victim's ``DisruptionTarget`` mark was accepted (kube/write/preemptor.py);
- ``evict.deleted``: a victim's delete was accepted.

The end-to-end tests (tests/e2e/test_crash_safety.py) kill the scheduler at these exact moments
and check that the next process carries the eviction out (core/eviction.py).
"""

from __future__ import annotations

import os
import signal

__all__ = ["reached"]

ENV = "GANGSCHED_FAILPOINTS"


def _parse(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in text.split(","):
        name, _, count = item.strip().partition("=")
        if name:
            out[name] = int(count or "1")
    return out


_armed = _parse(os.environ.get(ENV, ""))


def reached(name: str) -> None:
    """The process reached moment ``name``: die here if it is armed and this is its Nth time."""
    if name not in _armed:
        return
    _armed[name] -= 1
    if _armed[name] <= 0:
        os.kill(os.getpid(), signal.SIGKILL)
