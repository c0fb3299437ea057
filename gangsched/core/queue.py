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

No priority inversion through backoff: a gang backing off, or parked on cluster events, is
tried ahead of its retry time when capacity was freed after it failed (a ``Wake.CLUSTER``
event at a later time; the capacity a gang gives back as it fails, at a Permit timeout, is not
freed for it) and it outranks the head of the active heap (it is part-way bound and the head is not,
or its priority is higher). Otherwise a gang of lower priority that happens to be active
would take the capacity the outranking gang was waiting for. Each such gang is tried at most
once per cluster event: failing again, it waits for the next one, so a gang that can never
fit is no hot loop. Gangs of equal priority keep their backoff while others are active
(first come, first served among them is not worth a retry at every freed GPU).

Nothing active: a gang backing off after a cluster event woke it is tried at once, first in
sort order (higher priority, then older), its backoff ended early, as kube-scheduler does
since v1.33 (``SchedulerPopFromBackoffQ``, on by default: it pops the backoff queue when the
active queue is empty). A backoff is a penalty for failing, not a reason to leave capacity
idle: without this, freed capacity waits for the backoff to end and goes to whatever arrives
first, so a gang that has waited longest is overtaken by newer ones (and its forecast start,
core/forecast.py, is missed). A gang backing off after an error (a failed binding) waits for
its time, as in kube-scheduler's error backoff queue; a gang parked with no cluster event
since it failed waits for one. Each gang is taken this way at most once per cluster event
(one that nothing freed since its failure could help fails again at once, without a
placement: core/scheduler.py, ``freed_could_help``).

Every operation costs O(log n) or what it moves, never a walk over every queued gang: the
backoff times and the park times are heaps (entries superseded since are skipped when they
reach the top), parked gangs are filed by what wakes them, and the gangs that may jump their
backoff are a heap by sort key, fed at each cluster event with the gangs that failed since
(each entry moves once).
"""

from __future__ import annotations

import bisect
import enum
import heapq
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from gangsched.core.clock import Clock

__all__ = ["Retry", "SchedulingQueue", "SortKey", "Wake"]

# (0 for a gang part-way bound, else 1; -priority; timestamp; gang key)
SortKey = tuple[int, int, float, str]


@dataclass(frozen=True, slots=True)
class Retry:
    """A gang waiting for its retry after failing on the cluster (``SchedulingQueue.retry``)."""

    until: float  # not tried before then
    parked_since: float | None  # parked on cluster events since then; None: backing off
    failed_at: float | None  # when it failed, while no cluster event has come since
    eligible: bool  # a cluster event came since it failed (it may jump its backoff)


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
        # gangs backing off after an error (a failed binding): not tried before their time
        self._errored: set[str] = set()
        # whether the last gang popped was taken from the backoff with nothing active
        self.popped_idle = False
        # Gangs backing off or parked on cluster events: gang -> (entry sequence, whether a
        # cluster event happened after it entered). Entries that did not see one yet are in
        # _fresh, in the order they came (so by entry time); those that did, in the _eligible
        # heap by sort key. Both lazy.
        self._waiting: dict[str, tuple[int, bool]] = {}
        self._fresh: deque[tuple[float, SortKey, int, str]] = deque()
        # gang -> when it failed, while it waits in ``_fresh`` (not yet eligible to jump)
        self._failed_at: dict[str, float] = {}
        self._eligible: list[tuple[SortKey, int, str]] = []
        self._cluster_events = 0
        self._seq = 0

    # ---- adding ------------------------------------------------------------------------
    def activate(self, gang: str, key: SortKey) -> None:
        """The gang has work. It becomes active unless it is backing off or parked."""
        if gang in self._active and self._keys.get(gang) == key:
            return  # already active with this key
        old = self._keys.get(gang)
        self._keys[gang] = key
        if gang in self._backoff_until or gang in self._parked:
            entry = self._waiting.get(gang)
            if entry is not None and old != key:
                # re-filed under its new key
                self._enter_waiting(gang, entry[1], self._failed_at.get(gang))
            return
        self._push(gang, key)

    def requeue(self, gang: str, key: SortKey, until: float, wake: Wake) -> None:
        """After a failed attempt: park the gang; it retries after ``until`` once woken."""
        self._keys[gang] = key
        self._active.pop(gang, None)
        self._end_backoff(gang)
        self._park(gang, wake, until)
        if wake is Wake.CLUSTER:
            self._enter_waiting(gang, eligible=False)
        else:
            self._waiting.pop(gang, None)
            self._failed_at.pop(gang, None)

    def backoff(self, gang: str, key: SortKey, until: float) -> None:
        """Retry unconditionally once ``until`` passes."""
        self._keys[gang] = key
        self._active.pop(gang, None)
        self._unpark(gang)
        self._to_backoff(gang, until)
        self._errored.add(gang)
        self._enter_waiting(gang, eligible=False)

    def remove(self, gang: str) -> None:
        self._active.pop(gang, None)
        self._end_backoff(gang)
        self._unpark(gang)
        self._waiting.pop(gang, None)
        self._failed_at.pop(gang, None)
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
        their retry time (a backoff after failing on the cluster still holds).

        A ``Wake.CLUSTER`` wake also makes every gang that failed on the cluster before it
        eligible to jump its backoff (see ``pop``)."""
        if wake is Wake.CLUSTER:
            self._cluster_event()
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
        """The next gang to try: the head of the active heap, unless a gang backing off (or
        parked on cluster events) saw capacity freed since it failed and outranks that head:
        then that gang, its backoff ended early."""
        self.popped_idle = False
        head = self._active_top()
        if head is None:
            return self._pop_backing_off()
        jump = self._eligible_top()
        if jump is not None and jump[0][:2] < head[0][:2]:
            heapq.heappop(self._eligible)
            g = jump[2]
            del self._waiting[g]
            self._failed_at.pop(g, None)
            self._end_backoff(g)
            self._unpark(g)
            return g
        heapq.heappop(self._heap)
        del self._active[head[2]]
        return head[2]

    def _pop_backing_off(self) -> str | None:
        """Nothing is active: the first gang, in sort order, backing off after a cluster event
        woke it (not after an error), its backoff ended early (``popped_idle`` says so)."""
        heap = self._eligible
        skipped: list[tuple[SortKey, int, str]] = []
        found: str | None = None
        while (top := self._eligible_top()) is not None:
            g = top[2]
            if g in self._backoff_until and g not in self._errored:
                found = g
                break
            skipped.append(heapq.heappop(heap))
        for e in skipped:
            heapq.heappush(heap, e)
        if found is None:
            return None
        heapq.heappop(heap)
        self.popped_idle = True
        del self._waiting[found]
        self._failed_at.pop(found, None)
        self._end_backoff(found)
        return found

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

    @property
    def flush_after(self) -> float:
        """How long a gang parked on events waits before it is tried anyway."""
        return self._flush_after

    def retry(self, gang: str) -> Retry | None:
        """Where a gang that failed on the cluster waits for its retry (backing off, or
        parked on cluster events), to be given to another queue (:meth:`restore_retry`);
        None for any other gang."""
        entry = self._waiting.get(gang)
        if entry is None:
            return None
        parked = self._parked.get(gang)
        if parked is not None:
            if parked[0] is not Wake.CLUSTER:
                return None
            until, since = parked[2], parked[1]
        elif gang in self._backoff_until:
            until, since = self._backoff_until[gang], None
        else:
            return None
        return Retry(until, since, self._failed_at.get(gang), entry[1])

    def restore_retry(self, gang: str, key: SortKey, r: Retry) -> None:
        """The gang waits for its retry as ``r`` says (from another queue's :meth:`retry`)."""
        self._keys[gang] = key
        self._active.pop(gang, None)
        self._end_backoff(gang)
        self._unpark(gang)
        if r.parked_since is not None:
            self._park(gang, Wake.CLUSTER, r.until, since=r.parked_since)
        else:
            self._to_backoff(gang, r.until)
        self._enter_waiting(gang, r.eligible, r.failed_at)

    def state_of(self, gang: str) -> str:
        if gang in self._active:
            return "active"
        if gang in self._backoff_until:
            return "backoff"
        if gang in self._parked:
            return "unschedulable"
        return ""

    @property
    def cluster_events(self) -> int:
        """How many ``Wake.CLUSTER`` wakes there have been: a gang retried ahead of its
        backoff failed before one of them (earlier than it, in time)."""
        return self._cluster_events

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
        self._waiting.pop(gang, None)
        self._failed_at.pop(gang, None)
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
        self._errored.discard(gang)

    def _park(self, gang: str, wake: Wake, until: float, since: float | None = None) -> None:
        self._unpark(gang)
        self._seq += 1
        since = self._clock.now() if since is None else since
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

    def _active_top(self) -> tuple[SortKey, int, str] | None:
        heap = self._heap
        while heap and self._active.get(heap[0][2]) != heap[0][1]:
            heapq.heappop(heap)  # superseded
        return heap[0] if heap else None

    def _enter_waiting(self, gang: str, eligible: bool, failed_at: float | None = None) -> None:
        """File a gang that is backing off or parked on cluster events under its sort key;
        ``failed_at``: when it failed, if before now (a gang filed again under a new key keeps
        the time of its failure: a cluster event after that still lets it jump)."""
        self._seq += 1
        self._waiting[gang] = (self._seq, eligible)
        entry = (self._keys[gang], self._seq, gang)
        if eligible:
            heapq.heappush(self._eligible, entry)
            self._failed_at.pop(gang, None)
        else:
            when = self._clock.now() if failed_at is None else failed_at
            self._failed_at[gang] = when
            if self._fresh and when < self._fresh[-1][0]:
                # kept in time order: the cluster event takes them from the front
                at = bisect.bisect_right(self._fresh, when, key=_first)
                self._fresh.insert(at, (when, *entry))
            else:
                self._fresh.append((when, *entry))
        live = len(self._waiting)
        if len(self._fresh) > 64 and len(self._fresh) > 4 * live:
            self._fresh = deque(e for e in self._fresh if self._waiting.get(e[3]) == (e[2], False))
        if len(self._eligible) > 64 and len(self._eligible) > 4 * live:
            self._eligible = [e for e in self._eligible if self._waiting.get(e[2]) == (e[1], True)]
            heapq.heapify(self._eligible)

    def _cluster_event(self) -> None:
        """Capacity changed: the gangs that failed before now may jump their backoff."""
        self._cluster_events += 1
        now = self._clock.now()
        fresh = self._fresh
        while fresh and fresh[0][0] < now:
            _, k, seq, g = fresh.popleft()
            if self._waiting.get(g) == (seq, False):
                self._waiting[g] = (seq, True)
                self._failed_at.pop(g, None)
                heapq.heappush(self._eligible, (k, seq, g))

    def _eligible_top(self) -> tuple[SortKey, int, str] | None:
        heap = self._eligible
        while heap and self._waiting.get(heap[0][2]) != (heap[0][1], True):
            heapq.heappop(heap)  # superseded
        return heap[0] if heap else None

    def _compact(self) -> None:
        self._heap = [e for e in self._heap if self._active.get(e[2]) == e[1]]
        heapq.heapify(self._heap)


def _first(entry: tuple[float, SortKey, int, str]) -> float:
    return entry[0]
