"""Reservations as a step of the gang cycle: a gang that failed for want of capacity and has
waited ``reservation_after_seconds`` since its first attempt gets the nodes where it will fit
soonest set aside (core/reservation.py has the rule and the filter). The step owns the
reservation (at most one) and when this process saw each pod bound (what a reservation's
expected end is counted from)."""

from __future__ import annotations

from typing import Any

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import Clock
from gangsched.core.config import CoreConfig
from gangsched.core.gang import Gang, Holdings
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.preemption import Preemptor, Unit, gang_priority
from gangsched.core.reservation import Reservation, ReservationFilter, need_by_node
from gangsched.core.steps.book import GangBook
from gangsched.core.steps.preempt import Preemption, fits_nowhere
from gangsched.core.steps.turn import Turn

__all__ = ["Reservations"]


def _rank(gang: Gang) -> tuple[int, float, str]:
    """Who comes first for the reservation: higher priority, then the gang that has waited
    longer (its first attempt; not the queue's order, which puts a gang that just failed behind
    the others, so that the reservation would change hands at every attempt)."""
    start = gang.schedule_start if gang.schedule_start is not None else gang.timestamp()
    return (-gang.tally.max_priority(), start, gang.key)


class Reservations:
    def __init__(
        self,
        book: GangBook,
        config: CoreConfig,
        clock: Clock,
        cache: ClusterCache,
        finder: NodeFinder,
        preemptor: Preemptor,
        preemption: Preemption,
    ) -> None:
        self._book = book
        self._config = config
        self._clock = clock
        self._cache = cache
        self._finder = finder
        self._preemptor = preemptor
        self._preemption = preemption
        self.filter = ReservationFilter(
            book.spec_of, clock.now, self._changed, cache.resource_claims
        )
        self.started: dict[str, float] = {}  # pod uid -> when this process saw it bound
        book.on_gone.append(self.unreserve)

    @property
    def current(self) -> Reservation | None:
        return self.filter.current

    # ---- the step ----------------------------------------------------------------------
    def run(self, t: Turn) -> bool:
        if not t.unschedulable:
            return False
        t.reserve_due = self.due(t.gang, t.h)
        if t.reserve_due:
            self.reserve(t.gang, t.h)
        return False

    def due(self, gang: Gang, h: Holdings) -> bool:
        """The gang failed for want of capacity: has it waited long enough for a reservation,
        with no gang before it in queue order holding the reservation?"""
        return bool(h.pending) and self.turn_come(gang)

    def turn_come(self, gang: Gang) -> bool:
        """:meth:`due`, for a gang with members to place: it has waited long enough, and no
        gang that comes before it holds the reservation (no holdings needed: cheap)."""
        after = self._config.reservation_after_seconds
        if after is None or gang.spec is None or gang.schedule_start is None:
            return False
        if self._clock.now() - gang.schedule_start < after:
            return False
        current = self.filter.current
        if current is not None and current.gang != gang.key:
            holder = self._book.gangs.get(current.gang)
            if (
                holder is not None
                and holder.spec is not None
                and holder.tally.queued
                and _rank(holder) <= _rank(gang)
            ):
                return False  # the holder comes first
        return True

    def reserve(self, gang: Gang, h: Holdings) -> None:
        """Reserve the nodes where the gang will fit soonest, or refresh its reservation."""
        now = self._clock.now()
        start = gang.schedule_start
        if start is None or fits_nowhere(self._finder, h.pending):
            return  # (no eviction could make room: the search would find nothing)
        current = self.filter.current
        priority = gang_priority(h.pending)
        runtimes: dict[str, float | None] = {}
        specs = self._book.specs

        started = self.started

        def runtime_of(u: Unit) -> float | None:
            if u.gang not in runtimes:
                s = specs.get(u.gang) if u.gang else None
                runtimes[u.gang] = s.expected_runtime_seconds if s is not None else None
            return runtimes[u.gang]

        def start_of(u: Unit) -> float:
            return max(started.get(p.uid, p.created) for p in u.pods)

        def end_of(u: Unit) -> float | None:
            runtime = runtime_of(u)
            return None if runtime is None else start_of(u) + runtime

        def keep_first(u: Unit) -> tuple[float, ...]:
            # keep (do not wait for) the pods expected to end last: those without a declared
            # run time, youngest first, then the latest declared ends
            runtime = runtime_of(u)
            start = start_of(u)
            return (0.0, -start) if runtime is None else (1.0, -(start + runtime))

        self.filter.current = None  # the search sees the cluster without any reservation
        promised = self._preemption.awaited_by.keys()
        plan = self._preemptor.plan(gang, h, priority + 1, promised, keep_first, evicting=False)
        if plan is None or not (plan.victims or plan.awaited):
            self.filter.current = current
            return
        ends = [end_of(u) for u in plan.victims]
        ready_at = (
            None if any(e is None for e in ends) else max((e or now for e in ends), default=now)
        )
        since = current.since if current is not None and current.gang == gang.key else now
        awaited = sum(len(u.pods) for u in plan.victims)
        waited = now - start
        self.filter.current = Reservation(
            gang.key,
            priority,
            since,
            need_by_node(plan.placements, self._cache.pods, self._cache.resource_claims),
            ready_at,
            f"waited {waited:.0f}s for capacity; waiting for {awaited} running pod(s) to end",
        )

    # ---- the reservation ---------------------------------------------------------------
    def view(self, key: str) -> dict[str, Any]:
        r = self.filter.current
        if r is None or r.gang != key:
            return {}
        return {
            "reserved_nodes": r.nodes,
            "reserved_since": r.since,
            "reservation_reason": r.reason,
        }

    def message(self, key: str) -> str:
        """What a failure message adds for a gang holding the reservation ('' otherwise)."""
        r = self.filter.current
        if r is None or r.gang != key:
            return ""
        nodes = ", ".join(r.nodes[:5]) + (" ..." if len(r.nodes) > 5 else "")
        return (
            f"; holds a reservation on {len(r.nodes)} node(s) ({nodes}) for "
            f"{self._clock.now() - r.since:.0f}s: {r.reason}"
        )

    def unreserve(self, key: str) -> None:
        """The gang starts or goes away: its reservation (if it holds it) ends."""
        r = self.filter.current
        if r is not None and r.gang == key:
            self.filter.current = None

    def _changed(self, exists: bool) -> None:
        if exists:
            self._finder.add_filter(self.filter)
        else:
            self._finder.remove_filter(self.filter)
