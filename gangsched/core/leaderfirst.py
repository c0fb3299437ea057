"""Leader-first gangs: a gang whose other members are created only once its leader is bound.

A LeaderWorkerSet group with ``leaderworkerset.sigs.k8s.io/exclusive-topology: <level>`` is
one: LWS creates the group's workers only once the leader has a node, and pins them to the
leader's domain of ``<level>``; the group's gang (``minMember`` = its size) would wait for those
workers before binding the leader, for ever. All-or-nothing in effect, without the deadlock:

- The leader binds alone only when one domain of the level holds the **whole** group: the leader
  where the finder puts it, and ``size - 1`` workers of the worker shape (the PodGroup's
  ``minResources`` less the leader's requests, shared evenly; the leader's requests when it
  has none) each where the finder would put it, with the leader's constraints, inside the same
  domain. The tightest such domain wins, as for any gang placed in one domain.
- With the leader, the workers' room is **held**: a stand-in pod for each worker stays assumed on
  the node it was placed on (a pod no one binds or evicts: never a member, never a victim), so
  that nothing else takes the room, and the stand-ins count toward the gang's quorum.
- When every worker exists, the stand-ins go and the workers are placed as the rest of the
  gang, in the room just given back. If they do not come within the gang's schedule timeout,
  the room is given back; a worker that comes later is placed with the room there is.

After a restart (the hold lived in the old process only), a leader found bound alone, its
members not come and its gang's timeout since its binding not over, gets its room held again
where the finder still finds it in the leader's domain (:meth:`Holds.rebuild`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from gangsched.core.cache import ClusterCache
from gangsched.core.gang import Gang, Hold, Holdings
from gangsched.core.model import GangMode, LeaderFirst, Pod
from gangsched.core.resources import ResourceList

__all__ = ["STAND_IN", "Hold", "Holds", "applies", "stand_ins", "worker_shape"]

PODS = "pods"
# Stand-in pods' uids begin so: they are in the cache only, never in the API.
STAND_IN = "stand-in:"


def applies(gang: Gang, h: Holdings) -> LeaderFirst | None:
    """The gang's leader-first request, when this is the moment for it: its one pending pod is
    a leader-first leader of a group the size of the gang's minMember, nothing of the gang is
    held yet, and it has no roles, gang group or earlier satisfaction to complicate it."""
    spec = gang.spec
    if (
        spec is None
        or gang.hold is not None
        or gang.satisfied_once
        or h.held
        or len(h.pending) != 1
        or spec.mode is not GangMode.STRICT
        or spec.roles
        or spec.gang_group
    ):
        return None
    lf = h.pending[0].leader_first
    if lf is None or lf.size != spec.min_member:
        return None
    return lf


def worker_shape(leader: Pod, size: int, min_resources: Mapping[str, int]) -> ResourceList:
    """What each of the ``size - 1`` workers asks for: ``min_resources`` (the whole group's)
    less the leader's requests, shared evenly and rounded up; the leader's requests when the
    gang declares none."""
    if not min_resources:
        return dict(leader.requests)
    workers = size - 1
    out: ResourceList = {}
    for res, total in min_resources.items():
        rest = max(0, total - leader.requests.get(res, 0))
        if rest:
            out[res] = -(-rest // workers)
    if PODS in leader.requests:
        out[PODS] = leader.requests[PODS]  # each is a pod on its node
    return out


def stand_ins(leader: Pod, shape: ResourceList, count: int, level: str, value: str) -> list[Pod]:
    """``count`` stand-ins for the workers: the leader's constraints (its labels, so its
    group's affinity holds), the worker shape, pinned to the domain as LWS pins the workers;
    in no gang."""
    selector = tuple(sorted({**dict(leader.placement.node_selector), level: value}.items()))
    placement = dataclasses.replace(leader.placement, node_selector=selector, node_name="")
    return [
        dataclasses.replace(
            leader,
            uid=f"{STAND_IN}{leader.uid}:{i}",
            name=f"{leader.name}-worker-{i + 1}",
            requests=dict(shape),
            placement=placement,
            group="",
            node_name="",
            host_ports=(),
            volumes=dataclasses.replace(leader.volumes, claims=()),
            resource_claims=(),
            extended=(),
            extended_key="",
            requests_asked=None,
            leader_first=None,
        )
        for i in range(count)
    ]


class Holds:
    """The gangs that hold room for members to come, and their stand-ins in the cache."""

    def __init__(self, cache: ClusterCache, wake: Callable[[], object]) -> None:
        self._cache = cache
        self._wake = wake  # the room given back may let other gangs fit
        self.gangs: dict[str, Gang] = {}

    def install(self, gang: Gang, hold: Hold) -> None:
        """Hold the room: the stand-ins go in the cache, assumed where they were placed."""
        self.release(gang)
        for pod in hold.pods:
            self._cache.upsert_pod(pod)
            self._cache.assume(pod.uid, hold.placements[pod.uid])
        gang.hold = hold
        self.gangs[gang.key] = gang

    def release(self, gang: Gang) -> bool:
        """Give the room back (the members came, the time is up, or the leader is gone).
        Whether there was any."""
        hold, gang.hold = gang.hold, None
        self.gangs.pop(gang.key, None)
        if hold is None:
            return False
        for uid in hold.placements:
            self._cache.forget(uid)
            self._cache.remove_pod(uid)
        self._wake()
        return True

    def leader_gone(self, gang: Gang | None, uid: str) -> None:
        """The pod ``uid`` ended, went or did not bind: if it is the leader the gang holds room
        for, no member will come for that room."""
        if gang is not None and gang.hold is not None and gang.hold.leader == uid:
            self.release(gang)

    def release_key(self, key: str) -> None:
        gang = self.gangs.get(key)
        if gang is not None:
            self.release(gang)

    def rebuild(
        self,
        gang: Gang,
        h: Holdings,
        leader: Pod,
        deadline: float,
        beside: Callable[[Pod, LeaderFirst, Mapping[str, int], str], Hold | None],
    ) -> bool:
        """Hold the room again for a leader-first gang whose leader was bound (by an earlier
        process) and whose members have not come: where ``beside`` (the cycle's
        ``hold_beside``) finds it in the leader's domain, until ``deadline``. Whether it did."""
        spec, lf = gang.spec, leader.leader_first
        if (
            spec is None
            or lf is None
            or gang.hold is not None
            or gang.satisfied_once
            or h.pending
            or h.held != 1
            or lf.size != spec.min_member
        ):
            return False
        hold = beside(leader, lf, spec.min_resources, leader.node_name)
        if hold is None:
            return False
        hold.deadline = deadline
        self.install(gang, hold)
        return True

    def expired(self, now: float) -> list[Gang]:
        return [g for g in self.gangs.values() if g.hold is not None and g.hold.deadline <= now]

    def next_deadline(self) -> float | None:
        return min((g.hold.deadline for g in self.gangs.values() if g.hold), default=None)
