"""Crash injection for the crash-safety tests: the process kills itself (SIGKILL, no cleanup),
or stops itself (SIGSTOP: a paused process that loses its lease meanwhile), the Nth time it
reaches a named moment.

``GANGSCHED_FAILPOINTS="evict.marked=1"`` (a comma-separated list of ``name=N`` to be killed,
``name=N:stop`` to be stopped until a SIGCONT, or ``name=N:raise`` for the code there to raise
:class:`FailpointError`) is read once,
when this module is first imported; unset, as in every real deployment, each check is one
dictionary look-up that finds nothing. The moments:

- ``evict.marked``: a victim's ``DisruptionTarget`` mark was accepted (kube/write/preemptor.py);
- ``evict.deleted``: a victim's delete was accepted;
- ``claims.written``: a resource claim's allocation or reservation was accepted
  (kube/write/claims.py), before the gang's pods are bound.
- ``decide``: the core takes a gang's turn (the first step of its cycle: ``DecideFailpoint``,
  put there by the composition root only when this moment is armed).

The end-to-end tests (tests/e2e/test_crash_safety.py) kill the scheduler at these exact moments
and check that the next process carries the eviction out (core/eviction.py); with
``decide=1:raise`` they check that a gang the scheduler failed on is held back by the next
process while the others are scheduled (core/steps/quarantine.py).
"""

from __future__ import annotations

import os
import signal

from gangsched.core.steps.turn import Turn

__all__ = ["DecideFailpoint", "FailpointError", "armed", "reached"]

ENV = "GANGSCHED_FAILPOINTS"
RAISE = 0  # the action that raises FailpointError (the others are signals)


class FailpointError(RuntimeError):
    """Raised on purpose at an armed moment (``name=N:raise``)."""


def _parse(text: str) -> dict[str, list[int]]:
    """name -> [times left, the signal or RAISE]."""
    out: dict[str, list[int]] = {}
    for item in text.split(","):
        name, _, when = item.strip().partition("=")
        count, _, action = when.partition(":")
        if name:
            act = {"stop": signal.SIGSTOP, "raise": RAISE}.get(action, signal.SIGKILL)
            out[name] = [int(count or "1"), act]
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
        if armed[1] == RAISE:
            raise FailpointError(f"failpoint {name} reached")
        os.kill(os.getpid(), armed[1])


def armed(name: str) -> bool:
    """Whether moment ``name`` is armed in this process."""
    return name in _armed


class DecideFailpoint:
    """A first step for the core's gang cycle (core/steps/) that reaches ``decide``."""

    def run(self, t: Turn) -> bool:
        reached("decide")
        return False
