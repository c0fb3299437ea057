"""Permit as a step of the gang cycle, and the holds it keeps: a gang placed (or holding
capacity at Permit) binds whole once it, and every gang of its gang group, holds its quorum,
and a preemptor only once its victims are gone; otherwise its reservations wait at Permit
until a deadline, when everything it holds is released. Members that could not be placed
(NonStrict) are told and retried after a backoff."""

from __future__ import annotations

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import Clock
from gangsched.core.decisions import (
    BindGang,
    Binding,
    Decision,
    GangTimedOut,
    GangUnschedulable,
    GangWaiting,
    pod_ref,
)
from gangsched.core.gang import Gang
from gangsched.core.leaderfirst import Holds
from gangsched.core.permit import PermitMap
from gangsched.core.queue import Wake
from gangsched.core.steps.book import GangBook
from gangsched.core.steps.preempt import Preemption
from gangsched.core.steps.reserve import Reservations
from gangsched.core.steps.turn import Turn

__all__ = ["Permit"]


class Permit:
    def __init__(
        self,
        book: GangBook,
        clock: Clock,
        cache: ClusterCache,
        permit: PermitMap,
        preemption: Preemption,
        reservations: Reservations,
        holds: Holds,
    ) -> None:
        self._holds = holds
        self._book = book
        self._clock = clock
        self._cache = cache
        self._permit = permit
        self._preemption = preemption
        self._reservations = reservations

    # ---- the step ----------------------------------------------------------------------
    def run(self, t: Turn) -> bool:
        attempt = t.attempt
        if attempt is None:
            return True
        gang, key, out = t.gang, t.gang.key, t.out
        book = self._book
        now = self._clock.now()
        if attempt.hold is not None:
            # A leader-first gang's leader placed alone: its members' room is held from now
            # on, and counts toward its quorum (core/leaderfirst.py).
            attempt.hold.deadline = now + book.timeout(gang.spec)
            self._holds.install(gang, attempt.hold)
        if attempt.placements or key in self._permit:
            if self.gate(gang):
                out.append(self.bind(gang, attempt.placements, attempt.domain))
                siblings = gang.spec.gang_group if gang.spec else ()
                for s in siblings:
                    sg = book.gangs.get(s)
                    if s != key and sg is not None and s in self._permit and self.gate(sg):
                        out.append(self.bind(sg, {}))
            else:
                deadline = now + book.timeout(gang.spec)
                wg = self._permit.wait(key, attempt.placements, deadline)
                why = (
                    "waiting for its gang group"
                    if attempt.satisfied
                    else "holding a partial gang (NonStrict) until quorum"
                )
                out.append(GangWaiting(key, len(wg.reserved), wg.deadline, why))
                gang.reason, gang.message = "Waiting", why
        if attempt.unplaced:
            gang.reason, gang.message = "Unschedulable", attempt.message
            out.append(
                GangUnschedulable(
                    key,
                    tuple(pod_ref(p) for p in attempt.unplaced),
                    "Unschedulable",
                    attempt.message,
                )
            )
            gang.attempts += 1
            until = now + book.backoff(gang)
            book.queue.requeue(key, book.sort_key(gang), until, Wake.CLUSTER)
        elif key not in self._permit:
            gang.attempts = 0  # bound: the backoff starts afresh
        return True

    # ---- the gate, and what a hold ends with -------------------------------------------
    def gate(self, gang: Gang) -> bool:
        """May this gang bind? Its own quorum, and every gang of its gang group; a preemptor
        only once its victims are gone."""
        book = self._book
        if self._preemption.waits(gang.key) or not book.satisfied(gang.key):
            return False
        siblings = gang.spec.gang_group if gang.spec else ()
        return all(book.satisfied(s) for s in siblings if s != gang.key)

    def bind(
        self, gang: Gang, placements: dict[str, str], where: str = ""
    ) -> BindGang | GangUnschedulable:
        """Bind the gang whole: what it holds at Permit and ``placements``. A member whose
        resource claims have no allocation serving its node (a defect: the filter said they
        fit) keeps the whole gang from binding: it is released and tried again."""
        reserved = dict(self._permit.release(gang.key))
        reserved.update(placements)
        pods_ = self._cache.pods
        unserved = self._cache.resource_claims.unserved(
            (pods_[uid], node)
            for uid, node in sorted(reserved.items())
            if uid in pods_ and pods_[uid].resource_claims
        )
        if unserved:
            for uid in reserved:
                self._cache.forget(uid)
            self._book.fail(gang, "Unschedulable", unserved, Wake.CLUSTER)
            refs = tuple(pod_ref(pods_[u]) for u in sorted(reserved) if u in pods_)
            return GangUnschedulable(gang.key, refs, "Unschedulable", unserved)
        self._reservations.unreserve(gang.key)  # it starts: the reservation has done its work
        if where:
            gang.placed_in = where  # the topology domain, for the PodGroup's status
        gang.reason = "Binding"
        gang.message = f"binding {len(reserved)} pod(s)" + (f" in {where}" if where else "")
        cache = self._cache
        pods = cache.pods
        bindings = tuple(
            Binding(pod_ref(pods[uid]), node, cache.devices_of(uid))
            for uid, node in sorted(reserved.items())
            if uid in pods
        )
        members = [uid for uid in sorted(reserved) if uid in pods]
        volumes = cache.volumes.prebind(members)
        claims = cache.resource_claims.prebind(members)
        return BindGang(gang.key, bindings, volumes, claims)

    def release(self, key: str, reason: str, message: str) -> list[Decision]:
        """Give back everything a waiting gang holds. Idempotent."""
        self._preemption.release(key)
        self._holds.release_key(key)
        reserved = self._permit.release(key)
        if not reserved:
            return []
        pods = self._cache.pods
        refs = tuple(pod_ref(pods[u]) for u in sorted(reserved) if u in pods)
        for uid in reserved:
            self._cache.forget(uid)
        gang = self._book.gangs.get(key)
        if gang is not None:
            self._book.fail(gang, reason, message, Wake.CLUSTER)
        self._book.queue.wake(Wake.CLUSTER)
        return [GangTimedOut(key, refs, message, reason)]

    def expire(self, now: float, hold_seconds: float) -> list[Decision]:
        """Holds past their deadline are released: a preemptor's whose victims still run,
        and a gang's that did not reach quorum in its timeout."""
        out: list[Decision] = []
        book = self._book
        for key in self._permit.expired(now):
            awaited = self._preemption.awaiting.get(key)
            if awaited is not None:
                out.extend(
                    self.release(
                        key,
                        "Released",
                        f"{len(awaited)} pod(s) evicted for it still running after "
                        f"{hold_seconds:g}s; the capacity held for it is given back",
                    )
                )
                continue
            gang = book.gangs.get(key)
            timeout = book.timeout(gang.spec if gang else None)
            out.extend(
                self.release(key, "Timeout", f"timed out after {timeout:g}s waiting for quorum")
            )
        return out
