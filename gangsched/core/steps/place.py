"""Placement as a step of the gang cycle: the whole gang placed against the cache in one
attempt (core/cycle.py), with what the node finder did before and after it noted for the
failure memo."""

from __future__ import annotations

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import Clock
from gangsched.core.cycle import GangCycle
from gangsched.core.leaderfirst import Holds
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.steps.reserve import Reservations
from gangsched.core.steps.turn import Turn

__all__ = ["Placement"]

# Reasons for which no placement was tried: the gang has not started scheduling yet.
_NOT_ATTEMPTED = frozenset(
    {"WaitingForMembers", "PodGroupNotFound", "InvalidSpec", "SchedulingGated"}
)


class Placement:
    def __init__(
        self,
        clock: Clock,
        cache: ClusterCache,
        finder: NodeFinder,
        cycle: GangCycle,
        reservations: Reservations,
        holds: Holds,
    ) -> None:
        self._holds = holds
        self._clock = clock
        self._cache = cache
        self._finder = finder
        self._cycle = cycle
        self._reservations = reservations

    def run(self, t: Turn) -> bool:
        gang, h = t.gang, t.h
        if (
            gang.hold is not None
            and h.pending
            and gang.spec is not None
            and h.live >= gang.spec.min_member
        ):
            # Every member a leader-first gang held room for has come: the room is given
            # back, and they are placed in it now, before anything else is (core/leaderfirst.py).
            self._holds.release(gang)
        finder = self._finder
        # What a failure of a pod of a class is remembered with (core/equivalence.py): the
        # cache generation it failed on, and what its searches moved in the finder.
        t.searches, t.generation = finder.searches, self._cache.generation
        t.finds = finder.finds
        attempt = t.attempt = self._cycle.run(t.gang, t.h)
        if attempt.reason not in _NOT_ATTEMPTED and t.gang.schedule_start is None:
            t.gang.schedule_start = self._clock.now()
        if attempt.failed:
            t.reservation = self._reservations.current
            t.searched, t.found = finder.searches, finder.finds
        return False
