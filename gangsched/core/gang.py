"""Gangs: who belongs to which group, what each group holds, and when it is satisfied.

A gang holds a member when the member is bound (and not terminal), reserved by this scheduler,
or has Succeeded: finished members still count toward the gang. A gang is satisfied when it
holds at least minMember members and every role holds at least its own minimum.

A gang's members and their counts are kept in a :class:`~gangsched.core.tally.MemberTally`,
up to date on every member event (O(1)); :func:`holdings` walks the members for what a cycle
needs besides counts (the pending pods themselves), with the same classification.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import KeysView
from dataclasses import dataclass, field

from gangsched.core.cache import ClusterCache
from gangsched.core.model import GangSpec, Pod, PodPhase
from gangsched.core.tally import MemberState, MemberTally, member_state

__all__ = ["PLAIN_PREFIX", "Gang", "Hold", "Holdings", "holdings", "is_pending", "shortfall"]

PLAIN_PREFIX = "pod:"


@dataclass(slots=True)
class Hold:
    """The room held for a leader-first gang's members to come (core/leaderfirst.py): its
    stand-in pods and the nodes they are assumed on."""

    placements: dict[str, str]  # stand-in uid -> node
    domain: str  # "level=value"
    leader: str  # the leader's uid
    deadline: float
    pods: tuple[Pod, ...] = ()

    @property
    def slots(self) -> int:
        return len(self.placements)


@dataclass(slots=True)
class Gang:
    key: str
    spec: GangSpec | None
    first_seen: float
    tally: MemberTally = field(default_factory=MemberTally)
    attempts: int = 0
    last_failure: float | None = None
    reason: str = ""
    message: str = ""
    satisfied_once: bool = False
    schedule_start: float | None = None
    has_bound: bool = False  # some member is or was bound (a hint for queue order)
    placed_in: str = ""  # "level=value": the topology domain its last binding went to
    # The room held for members to come (a leader-first gang, core/leaderfirst.py).
    hold: Hold | None = None
    # ClusterCache.freed_seq when it last failed on the cluster: the nodes freed since could
    # help it (Scheduler.freed_could_help)
    freed_seen: int = 0
    tried_at: float | None = None  # when it was last placed (a gang cycle past the gates)
    # (tally.version, one pending member for each distinct ask): what an idle retry checks
    # against the nodes freed (Scheduler.freed_could_help), kept while the members are
    asks: tuple[int, tuple[Pod, ...]] | None = None

    @property
    def members(self) -> KeysView[str]:
        """The uids of this scheduler's pods in the gang (change them through ``tally``)."""
        return self.tally.uids()

    @property
    def plain(self) -> bool:
        return self.key.startswith(PLAIN_PREFIX)

    @property
    def part_bound(self) -> bool:
        """Some members bound, quorum not (yet) reached: finish this gang first."""
        return self.has_bound and not self.satisfied_once

    def timestamp(self) -> float:
        """The queue's time for this gang: the last failure, else its creation."""
        if self.last_failure is not None:
            return self.last_failure
        if self.spec is not None and self.spec.created:
            return self.spec.created
        return self.first_seen


def is_pending(pod: Pod, cache: ClusterCache) -> bool:
    """Waiting for a node from this scheduler."""
    return (
        not pod.node_name
        and pod.phase is PodPhase.PENDING
        and not pod.deleting
        and not pod.refused
        and not pod.gates
        and pod.uid not in cache.assumed
    )


@dataclass(slots=True)
class Holdings:
    pending: list[Pod] = field(default_factory=list)
    invalid: list[Pod] = field(default_factory=list)  # refused: unreadable or unsupported
    gated: list[Pod] = field(default_factory=list)  # pending behind spec.schedulingGates
    bound: int = 0  # bound by the API, not terminal
    reserved: int = 0  # assumed by this scheduler, binding not yet confirmed
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    held_by_role: Counter[str] = field(default_factory=Counter)
    live_by_role: Counter[str] = field(default_factory=Counter)

    @property
    def held(self) -> int:
        return self.bound + self.reserved + self.succeeded

    @property
    def live(self) -> int:
        """Members that exist and can still count: everything but failed ones."""
        return self.held + len(self.pending)


def holdings(gang: Gang, cache: ClusterCache) -> Holdings:
    """What the gang holds and which members wait, walking its members (a cycle needs the
    pending pods; for counts alone, ``gang.tally`` has them without a walk)."""
    h = Holdings()
    for uid in gang.members:
        pod = cache.pods.get(uid)
        if pod is None:
            continue
        role = pod.role
        state = member_state(pod, uid in cache.assumed)
        if state is MemberState.SUCCEEDED:
            h.succeeded += 1
        elif state is MemberState.FAILED:
            h.failed += 1
            continue
        elif state is MemberState.BOUND or state is MemberState.RUNNING:
            h.bound += 1
            if state is MemberState.RUNNING:
                h.running += 1
        elif state is MemberState.RESERVED:
            h.reserved += 1
        elif state is MemberState.INVALID:
            h.invalid.append(pod)
            continue
        elif state is MemberState.DELETING:
            continue
        elif state is MemberState.GATED:
            h.gated.append(pod)
            continue
        else:
            h.pending.append(pod)
            h.live_by_role[role] += 1
            continue
        h.held_by_role[role] += 1
        h.live_by_role[role] += 1
    h.pending.sort(key=lambda p: (p.created, p.name))
    return h


def shortfall(
    spec: GangSpec, held: int, held_by_role: Counter[str], satisfied_once: bool
) -> tuple[int, dict[str, int]]:
    """Members still needed for quorum: (overall, per role). (0, {}) means satisfied."""
    if satisfied_once and spec.once_satisfied_alone:
        return 0, {}
    return spec.missing(held, held_by_role)
