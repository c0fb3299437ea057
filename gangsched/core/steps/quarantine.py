"""A gang that gangsched failed on is held back for a while, so that one gang cannot stop the
scheduler for every other.

When deciding a gang raises an unexpected error (a bug in gangsched, not the gang's fault), the
scheduler records it on the gang's pending pods (their ``gangsched.io/SchedulerError``
condition, api/schedulererror.py) and exits, so that the next process starts from what the API
server holds rather than from a half-changed cache. Without a record, that process would take
the same gang first and fail again, restart after restart. With it, the gang is not decided
before the record's time, with reason ``SchedulerError`` and the error in its message; each
further failure doubles the hold. Setting the condition to ``False`` on the pods (or recreating
them) tries the gang again at once.
"""

from __future__ import annotations

from datetime import UTC, datetime

from gangsched.core.clock import Clock
from gangsched.core.decisions import GangUnschedulable, pod_ref
from gangsched.core.model import Pod, SchedulerError
from gangsched.core.queue import Wake
from gangsched.core.steps.book import GangBook
from gangsched.core.steps.turn import Turn

__all__ = ["HOLD_MOST", "REASON", "Quarantine", "held_message", "held_until", "record_of"]

REASON = "SchedulerError"
HOLD_MOST = 86400.0  # the longest hold, however often deciding the gang failed (seconds)


def record_of(pods: list[Pod]) -> SchedulerError | None:
    """The record that holds the gang back longest among its pending pods (pods made after
    the failure carry none), None when none carries one."""
    found: SchedulerError | None = None
    for p in pods:
        r = p.scheduler_error
        if r is not None and (found is None or (r.until, r.count) > (found.until, found.count)):
            found = r
    return found


def held_until(record: SchedulerError) -> str:
    """The end of the hold, as the record and the message say it: RFC 3339, UTC, to the
    second, rounded up."""
    second = int(-(-record.until // 1))
    return datetime.fromtimestamp(second, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def held_message(record: SchedulerError) -> str:
    """What the gang's pods and PodGroup say while it is held back."""
    times = "once" if record.count == 1 else f"{record.count} times"
    return (
        f"gangsched failed while deciding this gang ({times}; last: {record.error}); it is "
        f"held back until {held_until(record)} so that other gangs are "
        "scheduled. To try it sooner, set the gangsched.io/SchedulerError condition of its "
        "pods to False; and report the error with the scheduler's log"
    )


class Quarantine:
    """The gang's pending pods record a failure of gangsched's whose hold has not ended: the
    gang waits until then (or until the record is removed), and says why."""

    def __init__(self, book: GangBook, clock: Clock) -> None:
        self._book = book
        self._clock = clock

    def run(self, t: Turn) -> bool:
        record = record_of(t.h.pending)
        if record is None or record.until <= self._clock.now():
            return False
        gang = t.gang
        message = held_message(record)
        gang.reason, gang.message = REASON, message
        self._book.queue.requeue(gang.key, self._book.sort_key(gang), record.until, Wake.GANG)
        t.out.append(
            GangUnschedulable(gang.key, tuple(pod_ref(p) for p in t.h.pending), REASON, message)
        )
        return True
