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
  event, and backoff bounds how often any gang is tried: there is no hot loop. A gang parked
  on its own events may also have a time before which it is not retried (a gang waiting for
  its members, so that a gang of thousands arriving pod by pod is not tried at every pod):
  woken earlier, it backs off until then, unless the wake says ``at_once`` (the member that
  may complete it arrived).

Every operation costs O(log n) or what it moves, never a walk over every queued gang: the
backoff times and the park times are heaps (entries superseded since are skipped when they
reach the top), and parked gangs are filed by what wakes them.
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
        # gang -> (wake, since, until, entry sequence in _parked_heap)
        self._parked: dict[str, tuple[Wake, float, float, int]] = {}
        self._parked_heap: list[tuple[float, int, str]] = []  # (since, seq, gang), lazy
        self._parked_by: dict[Wake, dict[str, None]] = {w: {} for w in Wake}
        # gangs backing off only until their retry time after a wake by their own events
        self._spaced: set[str] = set()
        self._seq = 0

    # ---- adding ------------------------------------------------------------------------
    def activate(self, gang: str, key: SortKey) -> None:
        """The gang has work. It becomes active unless it is backing off or parked."""
        if gang in self._active and self._keys.get(gang) == key:
            return  # already active with this key
        self._keys[gang] = key
        if gang in self._backoff_until or gang in self._parked:
            return
        self._push(gang, key)

    def requeue(self, gang: str, key: SortKey, until: float, wake: Wake) -> None:
        """After a failed attempt: park the gang; it retries after ``until`` once woken."""
        self._keys[gang] = key
        self._active.pop(gang, None)
        self._end_backoff(gang)
        self._park(gang, wake, until)

    def backoff(self, gang: str, key: SortKey, until: float) -> None:
        """Retry unconditionally once ``until`` passes."""
        self._keys[gang] = key
        self._active.pop(gang, None)
        self._unpark(gang)
        self._to_backoff(gang, until)

    def remove(self, gang: str) -> None:
        self._active.pop(gang, None)
        self._end_backoff(gang)
        self._unpark(gang)
        self._keys.pop(gang, None)

    # ---- waking ------------------------------------------------------------------------
    def wake(
        self, wake: Wake | None, gangs: Iterable[str] | None = None, *, at_once: bool = False
    ) -> int:
        """Move parked gangs woken by this kind of event (all, or only ``gangs``). With
        ``wake`` None, the named gangs move whatever they wait for: an event of the gang itself
        (a new member, a PodGroup change) may help it whatever it last failed on. A woken gang
        is active if its retry time has passed, else it backs off until then; with
        ``at_once``, the named gangs that wait on their own events are active now, whatever
        their retry time (a backoff after failing on the cluster still holds)."""
        if gangs is None:
            chosen = list(self._parked_by[wake]) if wake is not None else []
        else:
            gangs = list(dict.fromkeys(gangs))
            chosen = [
                g
                for g in gangs
                if g in self._parked and (wake is None or self._parked[g][0] is wake)
            ]
        now = self._clock.now()
        for g in chosen:
            self._release(g, now, at_once)
        if at_once and gangs is not None:
            for g in gangs:
                if g in self._spaced:  # woken earlier, backing off until its retry time
                    self._end_backoff(g)
                    self._push(g, self._keys[g])
        return len(chosen)

    def flush(self) -> None:
        """Backoffs that expired become active; gangs parked too long go to backoff/active."""
        now = self._clock.now()
        while self._backoff and self._backoff[0][0] <= now:
            until, _, g = heapq.heappop(self._backoff)
            if self._backoff_until.get(g) == until:
                self._end_backoff(g)
                self._push(g, self._keys[g])
        # the same sum next_wakeup() announces, so the flush happens exactly when announced
        while (top := self._parked_top()) is not None and top[0] + self._flush_after <= now:
            self._release(top[2], now)

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
        while self._backoff and self._backoff_until.get(self._backoff[0][2]) != self._backoff[0][0]:
            heapq.heappop(self._backoff)  # superseded
        if self._backoff:
            times.append(self._backoff[0][0])
        if (top := self._parked_top()) is not None:
            times.append(top[0] + self._flush_after)
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
        self._spaced.discard(gang)
        self._seq += 1
        self._backoff_until[gang] = until
        heapq.heappush(self._backoff, (until, self._seq, gang))

    def _end_backoff(self, gang: str) -> None:
        self._backoff_until.pop(gang, None)
        self._spaced.discard(gang)

    def _park(self, gang: str, wake: Wake, until: float) -> None:
        self._unpark(gang)
        self._seq += 1
        since = self._clock.now()
        self._parked[gang] = (wake, since, until, self._seq)
        self._parked_by[wake][gang] = None
        heapq.heappush(self._parked_heap, (since, self._seq, gang))
        if len(self._parked_heap) > 64 and len(self._parked_heap) > 4 * len(self._parked):
            self._parked_heap = [e for e in self._parked_heap if self._parked_live(e)]
            heapq.heapify(self._parked_heap)

    def _unpark(self, gang: str) -> float | None:
        """Take the gang out of the parked set; its retry time, or None if it was not there."""
        entry = self._parked.pop(gang, None)
        if entry is None:
            return None
        del self._parked_by[entry[0]][gang]
        return entry[2]

    def _release(self, gang: str, now: float, at_once: bool = False) -> None:
        """A parked gang is woken: active if its retry time has passed (or ``at_once`` and it
        waits on its own events), else backing off until then."""
        entry = self._parked.get(gang)
        if entry is None:
            return
        wake, _, until, _ = entry
        self._unpark(gang)
        own = wake is Wake.GANG
        if until <= now or (at_once and own):
            self._push(gang, self._keys[gang])
        else:
            self._to_backoff(gang, until)
            if own:
                self._spaced.add(gang)

    def _parked_live(self, entry: tuple[float, int, str]) -> bool:
        p = self._parked.get(entry[2])
        return p is not None and p[3] == entry[1]

    def _parked_top(self) -> tuple[float, int, str] | None:
        """The parked gang parked longest ago, skipping superseded entries."""
        heap = self._parked_heap
        while heap and not self._parked_live(heap[0]):
            heapq.heappop(heap)
        return heap[0] if heap else None

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if self._active.get(e[2]) == e[1]]
        heapq.heapify(self._heap)
