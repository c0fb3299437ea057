"""The scheduling queue, gang by gang.

The unit of the queue is a gang (a plain pod is a gang of one), so a gang's pods are always
contiguous. Three sets, as in kube-scheduler:

- active: a heap ordered by (gangs part-way bound first, higher priority first, gang
  timestamp, gang key). A gang with some members bound and fewer than minMember (its binding
  was interrupted by a crash, or some bindings failed) is completed before anything else can
  take its capacity: pods cannot be unbound, so what was committed is finished;
- backoff: gangs that failed and may retry once their backoff expires;
- unschedulable: gangs parked until an event that could help them. Each parked gang says what
  wakes it: its own events (a member or its PodGroup arrived) or cluster events (capacity freed
  or added). A periodic flush returns long-parked gangs, so nothing waits forever on a missed
  event, and backoff bounds how often any gang is tried: there is no hot loop.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable

from gangsched.core.clock import Clock

__all__ = ["SchedulingQueue", "SortKey", "Wake"]

# (0 for a gang part-way bound, else 1; -priority; timestamp; gang key)
SortKey = tuple[int, int, float, str]


class Wake(enum.Enum):
    GANG = "gang"  # woken by events of the gang itself (new member, PodGroup change)
    CLUSTER = "cluster"  # woken by capacity changes (node added, pod finished or deleted)


class SchedulingQueue:
    def __init__(self, clock: Clock, flush_after: float = 60.0) -> None:
        self._clock = clock
        self._flush_after = flush_after
        self._heap: list[tuple[SortKey, int, str]] = []
        self._active: dict[str, int] = {}  # gang -> entry sequence (lazy deletion)
        self._keys: dict[str, SortKey] = {}
        self._backoff: list[tuple[float, int, str]] = []
        self._backoff_until: dict[str, float] = {}
        self._parked: dict[str, tuple[Wake, float, float]] = {}  # gang -> (wake, since, until)
        self._seq = 0

    # ---- adding ------------------------------------------------------------------------
    def activate(self, gang: str, key: SortKey) -> None:
        """The gang has work. It becomes active unless it is backing off or parked."""
        self._keys[gang] = key
        if gang in self._backoff_until or gang in self._parked:
            return
        self._push(gang, key)

    def requeue(self, gang: str, key: SortKey, until: float, wake: Wake) -> None:
        """After a failed attempt: park the gang; it retries after ``until`` once woken."""
        self._keys[gang] = key
        self._active.pop(gang, None)
        self._backoff_until.pop(gang, None)
        self._parked[gang] = (wake, self._clock.now(), until)

    def backoff(self, gang: str, key: SortKey, until: float) -> None:
        """Retry unconditionally once ``until`` passes."""
        self._keys[gang] = key
        self._active.pop(gang, None)
        self._parked.pop(gang, None)
        self._to_backoff(gang, until)

    def remove(self, gang: str) -> None:
        self._active.pop(gang, None)
        self._backoff_until.pop(gang, None)
        self._parked.pop(gang, None)
        self._keys.pop(gang, None)

    # ---- waking ------------------------------------------------------------------------
    def wake(self, wake: Wake | None, gangs: Iterable[str] | None = None) -> int:
        """Move parked gangs woken by this kind of event (all, or only ``gangs``). With
        ``wake`` None, the named gangs move whatever they wait for: an event of the gang itself
        (a new member, a PodGroup change) may help it whatever it last failed on."""
        if gangs is None:
            chosen = [g for g, (w, _, _) in self._parked.items() if w is wake]
        else:
            chosen = [
                g
                for g in dict.fromkeys(gangs)
                if g in self._parked and (wake is None or self._parked[g][0] is wake)
            ]
        now = self._clock.now()
        for g in chosen:
            _, _, until = self._parked.pop(g)
            if until <= now:
                self._push(g, self._keys[g])
            else:
                self._to_backoff(g, until)
        return len(chosen)

    def flush(self) -> None:
        """Backoffs that expired become active; gangs parked too long go to backoff/active."""
        now = self._clock.now()
        while self._backoff and self._backoff[0][0] <= now:
            until, _, g = heapq.heappop(self._backoff)
            if self._backoff_until.get(g) == until:
                del self._backoff_until[g]
                self._push(g, self._keys[g])
        # the same sum next_wakeup() announces, so the flush happens exactly when announced
        stale = [g for g, (_, since, _) in self._parked.items() if since + self._flush_after <= now]
        for g in stale:
            _, _, until = self._parked.pop(g)
            if until <= now:
                self._push(g, self._keys[g])
            else:
                self._to_backoff(g, until)

    # ---- taking ------------------------------------------------------------------------
    def pop(self) -> str | None:
        while self._heap:
            _, seq, g = heapq.heappop(self._heap)
            if self._active.get(g) == seq:
                del self._active[g]
                return g
        return None

    def next_wakeup(self) -> float | None:
        times: list[float] = []
        if self._backoff_until:
            times.append(min(self._backoff_until.values()))
        if self._parked:
            times.append(min(since for _, since, _ in self._parked.values()) + self._flush_after)
        return min(times) if times else None

    # ---- views -------------------------------------------------------------------------
    def active_order(self) -> list[str]:
        """Active gangs in the order they would be popped."""
        entries = [(k, s, g) for k, s, g in self._heap if self._active.get(g) == s]
        return [g for _, _, g in sorted(entries)]

    def state_of(self, gang: str) -> str:
        if gang in self._active:
            return "active"
        if gang in self._backoff_until:
            return "backoff"
        if gang in self._parked:
            return "unschedulable"
        return ""

    def counts(self) -> dict[str, int]:
        return {
            "active": len(self._active),
            "backoff": len(self._backoff_until),
            "unschedulable": len(self._parked),
        }

    def __contains__(self, gang: object) -> bool:
        return gang in self._active or gang in self._backoff_until or gang in self._parked

    # ---- internals ---------------------------------------------------------------------
    def _push(self, gang: str, key: SortKey) -> None:
        self._seq += 1
        self._active[gang] = self._seq
        heapq.heappush(self._heap, (key, self._seq, gang))
        if len(self._heap) > 64 and len(self._heap) > 4 * len(self._active):
            self._compact()

    def _to_backoff(self, gang: str, until: float) -> None:
        self._seq += 1
        self._backoff_until[gang] = until
        heapq.heappush(self._backoff, (until, self._seq, gang))

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if self._active.get(e[2]) == e[1]]
        heapq.heapify(self._heap)
