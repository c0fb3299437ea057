"""Failures shared by a class of identical pods, as steps of the gang cycle: before the
placement, a pod whose class failed on the cache as it stands fails the same way without a
search (``FailureReplay``); after a failed attempt, the failure is told (the gang's status,
its backoff, a GangUnschedulable decision) and remembered for the class (``FailureReport``).
core/equivalence.py has the classes and the memo."""

from __future__ import annotations

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import Clock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import GangUnschedulable, pod_ref
from gangsched.core.equivalence import Failure, FailureMemo, PodClass, pod_class
from gangsched.core.gang import Gang, Holdings
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.permit import PermitMap
from gangsched.core.queue import Wake
from gangsched.core.steps.book import GangBook
from gangsched.core.steps.preempt import Preemption
from gangsched.core.steps.reserve import Reservations
from gangsched.core.steps.turn import Turn

__all__ = ["FailureReplay", "FailureReport"]


class FailureReplay:
    def __init__(
        self,
        book: GangBook,
        config: CoreConfig,
        clock: Clock,
        cache: ClusterCache,
        finder: NodeFinder,
        permit: PermitMap,
        preemption: Preemption,
        reservations: Reservations,
    ) -> None:
        self._book = book
        self._config = config
        self._clock = clock
        self._cache = cache
        self._finder = finder
        self._permit = permit
        self._preemption = preemption
        self._reservations = reservations
        self.memo = FailureMemo()

    def run(self, t: Turn) -> bool:
        self._reservations.filter.begin_cycle()
        t.cls = self.class_of(t.gang, t.h)
        if t.cls is None:
            return False
        replayed = self.replay(t.gang, t.h, t.cls)
        if replayed is None:
            return False
        t.out.append(replayed)
        return True

    def class_of(self, gang: Gang, h: Holdings) -> PodClass | None:
        """The equivalence class of a plain pod whose failure may be shared with the other
        pods of its class, or None. Not for a gang of several pods, nor for a pod that holds
        anything (a reservation, capacity at Permit, victims awaited)."""
        if not gang.plain or len(h.pending) != 1 or h.held or gang.key in self._permit:
            return None
        if h.pending[0].resource_claims:
            return None  # its claims are its own: no other pod fails as it does
        if gang.key in self._preemption.awaiting:
            return None
        r = self._reservations.current
        if r is not None and r.gang == gang.key:
            return None
        labelled = len(self._cache.term_index) > 0 or bool(
            self._config.plugin_settings.default_spread_constraints
        )
        return pod_class(h.pending[0], labelled)

    def replay(self, gang: Gang, h: Holdings, cls: PodClass) -> GangUnschedulable | None:
        """A pod of the same class failed on the cache as it stands (and under the same
        reservation): this one fails the same way, with the same status and message, without
        a search, a diagnosis, or a what-if for preemption. None when there is no such
        failure, or when this gang is due a search for a reservation that the remembered
        failure did not run."""
        failure = self.memo.get(cls, self._cache.generation, self._reservations.current)
        if failure is None:
            return None
        if gang.schedule_start is None:
            gang.schedule_start = self._clock.now()  # as the attempt it stands for would
        due = self._reservations.due(gang, h)
        if due and failure.reserve_searches is None:
            return None
        self._finder.rotate(failure.searches + ((failure.reserve_searches or 0) if due else 0))
        if failure.observed or (due and failure.reserve_observed):
            self._finder.observe(h.pending[0])
        self.memo.hits += 1
        self._book.fail(gang, failure.reason, failure.message, Wake.CLUSTER)
        refs = tuple(pod_ref(p) for p in h.pending)
        return GangUnschedulable(gang.key, refs, failure.reason, failure.message)


class FailureReport:
    """A failed attempt: the gang says why (with the reservation it holds, if any), goes back
    in the queue, its pending members are told; a failure on cluster state of a pod with a
    class is remembered for the class."""

    def __init__(
        self,
        book: GangBook,
        cache: ClusterCache,
        finder: NodeFinder,
        replay: FailureReplay,
        reservations: Reservations,
    ) -> None:
        self._book = book
        self._cache = cache
        self._finder = finder
        self._replay = replay
        self._reservations = reservations

    def run(self, t: Turn) -> bool:
        attempt = t.attempt
        if attempt is None or not attempt.failed:
            return False
        gang, key = t.gang, t.gang.key
        message = attempt.message + self._reservations.message(key)
        self._book.fail(gang, attempt.reason, message, attempt.wake)
        refs = tuple(pod_ref(p) for p in t.h.pending)
        t.out.append(GangUnschedulable(key, refs, attempt.reason, attempt.message))
        if (
            t.cls is not None
            and attempt.reason == "Unschedulable"
            and attempt.wake is Wake.CLUSTER
            and self._reservations.current is t.reservation
        ):
            # A failed attempt leaves the cache as it found it (rolled back, what-ifs
            # restored): the next pod of the class fails the same way until it changes.
            finder = self._finder
            reserved = finder.searches - t.searched if t.reserve_due else None
            failure = Failure(
                attempt.reason,
                attempt.message,
                t.searched - t.searches,
                reserved,
                observed=t.found > t.finds,
                reserve_observed=finder.finds > t.found,
            )
            self._replay.memo.put(
                t.cls, t.generation, self._cache.generation, t.reservation, failure
            )
        return True
