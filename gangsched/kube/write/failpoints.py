"""Crash injection for the crash-safety tests: the process kills itself (SIGKILL, no cleanup),
or stops itself (SIGSTOP: a paused process that loses its lease meanwhile), the Nth time it
reaches a named moment.

``GANGSCHED_FAILPOINTS="evict.marked=1"`` (a comma-separated list of ``name=N`` to be killed, or
``name=N:stop`` to be stopped until a SIGCONT) is read once,
when this module is first imported; unset, as in every real deployment, each check is one
dictionary look-up that finds nothing. The moments:

- ``evict.marked``: a victim's ``DisruptionTarget`` mark was accepted (kube/write/preemptor.py);
- ``evict.deleted``: a victim's delete was accepted;
- ``claims.written``: a resource claim's allocation or reservation was accepted
  (kube/write/claims.py), before the gang's pods are bound.

The end-to-end tests (tests/e2e/test_crash_safety.py) kill the scheduler at these exact moments
and check that the next process carries the eviction out (core/eviction.py).
"""

from __future__ import annotations

import os
import signal

__all__ = ["reached"]

ENV = "GANGSCHED_FAILPOINTS"


def _parse(text: str) -> dict[str, list[int]]:
    """name -> [times left, the signal]."""
    out: dict[str, list[int]] = {}
    for item in text.split(","):
        name, _, when = item.strip().partition("=")
        count, _, action = when.partition(":")
        if name:
            sig = signal.SIGSTOP if action == "stop" else signal.SIGKILL
            out[name] = [int(count or "1"), sig]
    return out


_armed = _parse(os.environ.get(ENV, ""))


def reached(name: str) -> None:
    """The process reached moment ``name``: die (or stop) here if it is armed and this is its
    Nth time."""
    armed = _armed.get(name)
    if armed is None:
        return
    armed[0] -= 1
    if armed[0] == 0:
        os.kill(os.getpid(), armed[1])
