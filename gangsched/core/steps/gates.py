"""The gates a gang passes before any placement is tried: its refused members are told (and
the rest goes on without them), a gang group waits for every sibling and for room for all of
them together, and a member whose volumes keep it from scheduling holds the whole gang
back."""

from __future__ import annotations

from gangsched.core.cache import ClusterCache
from gangsched.core.config import CoreConfig
from gangsched.core.cycle import least_requests, shortage
from gangsched.core.decisions import GangUnschedulable, pod_ref
from gangsched.core.gang import Gang, holdings, shortfall
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.permit import PermitMap
from gangsched.core.queue import Wake
from gangsched.core.resources import ResourceList, add_into, format_amount
from gangsched.core.steps.book import GangBook
from gangsched.core.steps.turn import Turn

__all__ = ["GroupGate", "Intake", "VolumeGate"]


class Intake:
    """Refused members (unreadable: InvalidPod; asking for what gangsched does not implement:
    Unsupported) are told, with the field named, and leave the attempt; a gang whose bound
    members alone reach quorum is satisfied (once); with nothing pending the cycle ends."""

    def run(self, t: Turn) -> bool:
        gang, h = t.gang, t.h
        if h.invalid:
            reason = "InvalidPod" if any(p.invalid_reason for p in h.invalid) else "Unsupported"
            message = "; ".join(f"{p.key}: {p.refused}" for p in h.invalid)
            t.out.append(
                GangUnschedulable(gang.key, tuple(pod_ref(p) for p in h.invalid), reason, message)
            )
            for p in h.invalid:
                gang.tally.remove(p.uid)
            gang.reason = reason
            gang.message = message
        # bound (or finished) members alone satisfy the gang, and each role's minimum (held
        # counts by role include reservations, bound or released within a cycle or two)
        if gang.spec is not None and gang.spec.quorum(h.bound + h.succeeded, h.held_by_role):
            gang.satisfied_once = True
        return not h.pending


class GroupGate:
    """A gang group cannot complete yet: every sibling must exist with enough members, and
    what the whole group still needs must fit in the cluster's free totals (plus what the
    group already reserved), so members of a group that can never fit together do not take
    turns holding reservations."""

    def __init__(self, book: GangBook, cache: ClusterCache, permit: PermitMap) -> None:
        self._book = book
        self._cache = cache
        self._permit = permit

    def run(self, t: Turn) -> bool:
        reason, blocked = self.waiting(t.gang)
        if not blocked:
            return False
        wake = Wake.GANG if reason == "WaitingForMembers" else Wake.CLUSTER
        self._book.fail(t.gang, reason, blocked, wake)
        refs = tuple(pod_ref(p) for p in t.h.pending)
        t.out.append(GangUnschedulable(t.gang.key, refs, reason, blocked))
        return True

    def waiting(self, gang: Gang) -> tuple[str, str]:
        """(reason, message), or ('', '') when the group might complete."""
        spec = gang.spec
        if spec is None or not spec.gang_group:
            return "", ""
        wanted: ResourceList = {}
        reusable: ResourceList = {}
        for key in spec.gang_group:
            member = self._book.gangs.get(key)
            if member is None or member.spec is None:
                return "WaitingForMembers", f"gang group member {key} does not exist yet"
            h = holdings(member, self._cache)
            need, roles = shortfall(member.spec, h.held, h.held_by_role, member.satisfied_once)
            if (need or roles) and h.live < member.spec.min_member:
                return "WaitingForMembers", (
                    f"gang group member {key} has {h.live} of {member.spec.min_member} members"
                )
            add_into(wanted, least_requests(h.pending, need))
            wg = self._permit.get(key)
            if wg is not None:
                for uid in wg.reserved:
                    pod = self._cache.pods.get(uid)
                    if pod is not None:
                        add_into(reusable, pod.requests)
        short = shortage(self._cache, wanted, reusable)
        if short is None:
            return "", ""
        res, amount, free = short
        return "Unschedulable", (
            f"gang group {', '.join(spec.gang_group)} needs {format_amount(res, amount)} {res} "
            f"together; {format_amount(res, max(free, 0))} free in ready nodes"
        )


class VolumeGate:
    """A member whose claims keep it from being scheduled at all (missing, or unbound and
    not WaitForFirstConsumer) holds the whole gang back: no member is placed or bound until
    it can be. The message is kube-scheduler's for that pod."""

    def __init__(
        self, book: GangBook, config: CoreConfig, cache: ClusterCache, finder: NodeFinder
    ) -> None:
        self._book = book
        self._config = config
        self._cache = cache
        self._finder = finder

    def run(self, t: Turn) -> bool:
        gang, pending = t.gang, t.h.pending
        spec = gang.spec
        if spec is None or spec.invalid_reason or "VolumeBinding" not in self._config.filters:
            return False
        volumes = self._cache.volumes
        waiting = [p for p in pending if p.volumes.claims and volumes.waiting(p)]
        if not waiting:
            return False
        first = waiting[0]
        message = (
            f"{len(waiting)}/{len(pending)} pending pods of the gang wait for their volumes, "
            f"so no member is bound: {first.key}: {self._finder.diagnose(first)}"
        )
        self._book.fail(gang, "Unschedulable", message, Wake.CLUSTER)
        t.out.append(
            GangUnschedulable(
                gang.key, tuple(pod_ref(p) for p in pending), "Unschedulable", message
            )
        )
        return True
