"""One gang scheduling cycle: PreFilter, place every pending member, then keep all or nothing.

1. PreFilter: the gang must exist as a spec, be valid, and have enough live members to reach
   quorum; the requests of the members still needed (and minResources) must fit in the
   cluster's free totals. A hopeless gang fails here in O(resources).
2. Place the pending members one after another against the snapshot; each placement is
   assumed before the next member is placed.
3. Strict (default): if what the gang holds plus what was placed reaches quorum, keep the
   placements as reservations; otherwise roll every one back. NonStrict keeps partial
   placements (the Permit deadline bounds how long they are held).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from gangsched.core.cache import ClusterCache
from gangsched.core.gang import Gang, Holdings, shortfall
from gangsched.core.model import GangMode, Pod
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.queue import Wake
from gangsched.core.resources import ResourceList, format_amount
from gangsched.core.snapshot import CycleSnapshot

__all__ = ["Attempt", "GangCycle", "gated_message", "least_requests", "shortage"]

# Orders a gang's pending members before placement (task topology plugs in here).
MemberOrder = Callable[[Gang, Sequence[Pod]], Sequence[Pod]]


@dataclass(slots=True)
class Attempt:
    placements: dict[str, str] = field(default_factory=dict)  # kept: pod uid -> node
    satisfied: bool = False  # the gang holds quorum with these placements
    reason: str = ""  # empty on success
    message: str = ""
    wake: Wake = Wake.CLUSTER
    unplaced: list[Pod] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.reason)


def _default_order(gang: Gang, pods: Sequence[Pod]) -> Sequence[Pod]:
    return pods


class GangCycle:
    def __init__(
        self, cache: ClusterCache, finder: NodeFinder, order: MemberOrder = _default_order
    ) -> None:
        self._cache = cache
        self._finder = finder
        self._order = order

    def run(self, gang: Gang, h: Holdings) -> Attempt:
        spec = gang.spec
        if spec is None:
            return Attempt(
                reason="PodGroupNotFound",
                message=f"PodGroup {gang.key} does not exist; the pods wait until it is created",
                wake=Wake.GANG,
            )
        if spec.invalid_reason:
            return Attempt(
                reason="InvalidSpec",
                message=f"PodGroup {gang.key} is invalid: {spec.invalid_reason}",
                wake=Wake.GANG,
            )
        need, need_roles = shortfall(spec, h.held, h.held_by_role, gang.satisfied_once)
        if (need or need_roles) and (
            h.live < spec.min_member
            or any(h.live_by_role[r.name] < r.min_member for r in spec.roles)
        ):
            if h.gated:
                return Attempt(
                    reason="SchedulingGated",
                    message=gated_message(
                        spec.min_member,
                        len(h.gated),
                        (g for p in h.gated for g in p.gates),
                        h.live,
                    ),
                    wake=Wake.GANG,
                )
            return Attempt(
                reason="WaitingForMembers",
                message=_members_message(spec.min_member, h, bool(spec.roles)),
                wake=Wake.GANG,
            )
        if not h.pending:
            return Attempt(satisfied=need == 0 and not need_roles)
        strict = spec.mode is GangMode.STRICT
        if need > 0 and strict:
            short = self._prefilter(gang, h, need)
            if short:
                return Attempt(reason="Unschedulable", message=short)

        snapshot = CycleSnapshot(self._cache)
        placed_by_role: Counter[str] = Counter()
        unplaced: list[Pod] = []
        first_failure = ""
        members = self._order(gang, h.pending)
        total = len(members)
        for i, pod in enumerate(members):
            info = self._finder.find(pod)
            if info is not None:
                snapshot.place(pod.uid, info.name)
                placed_by_role[pod.role] += 1
                continue
            unplaced.append(pod)
            if not first_failure:
                first_failure = self._finder.diagnose(pod)
            if strict and len(snapshot) + (total - i - 1) < need:
                unplaced.extend(members[i + 1 :])
                break  # quorum is out of reach this cycle

        held_by_role = h.held_by_role + placed_by_role
        left, left_roles = shortfall(
            spec, h.held + len(snapshot), held_by_role, gang.satisfied_once
        )
        satisfied = left == 0 and not left_roles
        if satisfied or (not strict and len(snapshot) > 0):
            placements = snapshot.commit()
            attempt = Attempt(placements=placements, satisfied=satisfied, unplaced=unplaced)
            if unplaced:
                # what the gang holds now includes the placements it keeps
                attempt.message = _unplaced_message(
                    len(unplaced), total, spec.min_member, h.held + len(placements), first_failure
                )
            return attempt
        snapshot.rollback()
        return Attempt(
            reason="Unschedulable",
            message=_unplaced_message(len(unplaced), total, spec.min_member, h.held, first_failure),
            unplaced=unplaced,
        )

    def _prefilter(self, gang: Gang, h: Holdings, need: int) -> str:
        """Could the ``need`` members still missing (and minResources) fit in the cluster's
        free totals? Returns the shortage, or '' when they might."""
        spec = gang.spec
        assert spec is not None
        wanted = least_requests(h.pending, need)
        if h.held == 0:
            for k, v in spec.min_resources.items():
                if v > wanted.get(k, 0):
                    wanted[k] = v
        short = shortage(self._cache, wanted, {})
        if not short:
            return ""
        res, amount, free = short
        return (
            f"needs {format_amount(res, amount)} {res} for {need} more member(s) "
            f"(minMember {spec.min_member}); {format_amount(res, max(free, 0))} free "
            f"in ready nodes"
        )


def least_requests(pods: Sequence[Pod], count: int) -> ResourceList:
    """A lower bound on what any ``count`` of ``pods`` request together: per resource, the
    sum of the ``count`` smallest requests of that resource."""
    if count <= 0:
        return {}
    names = {k for p in pods for k in p.requests}
    out: ResourceList = {}
    for name in names:
        amounts = sorted(p.requests.get(name, 0) for p in pods)[:count]
        total = sum(amounts)
        if total:
            out[name] = total
    return out


def shortage(
    cache: ClusterCache, wanted: ResourceList, reusable: ResourceList
) -> tuple[str, int, int] | None:
    """The first resource for which ``wanted`` exceeds the cluster's free total (plus what the
    asker already holds and may reuse): (resource, wanted, free), or None."""
    for res, amount in wanted.items():
        free = cache.cluster_free(res) + reusable.get(res, 0)
        if amount > free:
            return res, amount, free
    return None


def gated_message(min_member: int, gated: int, gates: Iterable[str], live: int) -> str:
    """Why a gang waits for its gated members: ``gated`` members wait, behind ``gates``, and
    ``live`` members are ready."""
    return (
        f"{gated} member(s) wait for scheduling gates "
        f"(spec.schedulingGates: {', '.join(sorted(set(gates)))}); "
        f"{live} of {min_member} members are ready to schedule"
    )


def _members_message(min_member: int, h: Holdings, roles: bool) -> str:
    msg = f"{h.live} of {min_member} members exist; waiting for more pods"
    if roles:
        have = ", ".join(f"{r}={n}" for r, n in sorted(h.live_by_role.items()))
        msg += f" (by role: {have})"
    return msg


def _unplaced_message(unplaced: int, total: int, min_member: int, held: int, why: str) -> str:
    return (
        f"{unplaced}/{total} pending pods of the gang unschedulable "
        f"(minMember {min_member}, holding {held}): {why}"
    )
