"""Counts over a gang's pods, kept up to date one pod event at a time.

The queue's sort key, the quorum checks and the status report are needed on every pod event of
a gang; walking every member there would make a gang of n pods cost O(n^2) to take in. These
tallies hold the sums instead: each pod's contribution is recorded when it arrives, replaced
when it changes and taken back when it leaves, so an event costs O(1) whatever the gang's size.

- :class:`MemberTally`: this scheduler's members of one gang, by :func:`member_state` (the one
  classification :func:`gangsched.core.gang.holdings` walks with too), by role and by priority;
- :class:`GroupTally`: every pod that names a group, whatever its scheduler, counted by
  :func:`gangsched.core.status.count_members` (the one counting rule), pod by pod.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Hashable, Iterator, KeysView
from dataclasses import astuple, fields
from typing import NamedTuple, TypeVar

from gangsched.core.model import Pod, PodPhase
from gangsched.core.status import MemberCounts, count_members

__all__ = ["HELD", "LIVE", "UP", "GroupTally", "MemberState", "MemberTally", "member_state"]

K = TypeVar("K", bound=Hashable)


class MemberState(enum.Enum):
    PENDING = "pending"  # waiting for a node
    RESERVED = "reserved"  # assumed by this scheduler, binding not yet confirmed
    BOUND = "bound"  # bound by the API, not (yet) Running
    RUNNING = "running"  # bound and Running
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INVALID = "invalid"  # refused: unreadable, or asks for what gangsched does not implement
    GATED = "gated"  # pending behind spec.schedulingGates
    DELETING = "deleting"  # being deleted: counts for nothing (a bound one keeps its node)


# Members a gang holds (toward its quorum), and those that exist and can still count.
HELD = frozenset(
    {MemberState.RESERVED, MemberState.BOUND, MemberState.RUNNING, MemberState.SUCCEEDED}
)
LIVE = HELD | {MemberState.PENDING}
# Members that are up (the gang lifecycle, core/lifecycle.py): bound and neither failed nor
# being deleted, or succeeded.
UP = frozenset({MemberState.BOUND, MemberState.RUNNING, MemberState.SUCCEEDED})


def member_state(pod: Pod, assumed: bool) -> MemberState:
    """What a member is to its gang. ``assumed``: this scheduler has reserved a node for it.
    Finished members count first (a Succeeded member still counts toward the gang), then a
    node (bound by the API; a bound member being deleted no longer counts toward its gang),
    then a reservation."""
    if pod.phase is PodPhase.SUCCEEDED:
        return MemberState.SUCCEEDED
    if pod.phase is PodPhase.FAILED:
        return MemberState.FAILED
    if pod.node_name:
        if pod.deleting:
            return MemberState.DELETING
        return MemberState.RUNNING if pod.phase is PodPhase.RUNNING else MemberState.BOUND
    if assumed:
        return MemberState.RESERVED
    if pod.refused:
        return MemberState.INVALID
    if pod.deleting:
        return MemberState.DELETING
    if pod.gates:
        return MemberState.GATED
    return MemberState.PENDING


def _bump(counter: Counter[K], key: K, delta: int) -> None:
    """Add ``delta``; a count that reaches 0 is removed, so the keys are what is there."""
    n = counter[key] + delta
    if n:
        counter[key] = n
    else:
        del counter[key]


class _Member(NamedTuple):
    state: MemberState
    role: str
    priority: int
    queued: bool  # pending, phase Pending, not assumed: what the queue waits to place
    assumed: bool
    gates: tuple[str, ...]  # while gated


class MemberTally:
    """This scheduler's members of one gang and the sums over them. :meth:`put` records a
    member (or replaces what it was), :meth:`remove` takes it back; both are O(1), and so is
    every sum but :meth:`max_priority` after the last member of the highest priority left
    (O(distinct priorities))."""

    __slots__ = (
        "_max_priority",
        "_members",
        "_priorities",
        "assumed",
        "gates",
        "held_by_role",
        "live_by_role",
        "queued",
        "states",
        "up_by_role",
        "version",
    )

    def __init__(self) -> None:
        self._members: dict[str, _Member] = {}
        self.states: Counter[MemberState] = Counter()
        self.held_by_role: Counter[str] = Counter()
        self.live_by_role: Counter[str] = Counter()
        self.up_by_role: Counter[str] = Counter()  # members up (UP), by role
        self.gates: Counter[str] = Counter()  # scheduling gate name -> gated members with it
        self.queued = 0
        self.assumed = 0  # members reserved by this scheduler, whatever their state
        self._priorities: Counter[int] = Counter()
        self._max_priority: int | None = None  # None: recompute
        # Counts every put and remove: what is derived from the members' pods (and not
        # only from these sums) is current while it has not moved.
        self.version = 0

    # ---- members -----------------------------------------------------------------------
    def put(self, pod: Pod, assumed: bool) -> bool:
        """Record ``pod`` as a member as it is now. True when it was not a member before."""
        self.version += 1  # (the pod itself is new, whether or not what it counts changed)
        old = self._members.get(pod.uid)
        state = member_state(pod, assumed)
        queued = state is MemberState.PENDING and pod.phase is PodPhase.PENDING
        gates = pod.gates if state is MemberState.GATED else ()
        new = _Member(state, pod.role, pod.priority, queued, assumed, gates)
        if old == new:
            return False
        if old is not None:
            self._count(old, -1)
        self._members[pod.uid] = new
        self._count(new, 1)
        return old is None

    def refresh(self, pod: Pod, assumed: bool) -> None:
        """Record what a member is now; nothing when ``pod`` is not a member."""
        if pod.uid in self._members:
            self.put(pod, assumed)

    def remove(self, uid: str) -> None:
        self.version += 1
        old = self._members.pop(uid, None)
        if old is not None:
            self._count(old, -1)

    def __contains__(self, uid: object) -> bool:
        return uid in self._members

    def __len__(self) -> int:
        return len(self._members)

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def uids(self) -> KeysView[str]:
        return self._members.keys()

    # ---- sums --------------------------------------------------------------------------
    def count(self, state: MemberState) -> int:
        return self.states[state]

    @property
    def bound(self) -> int:
        """Bound by the API and not finished."""
        return self.states[MemberState.BOUND] + self.states[MemberState.RUNNING]

    @property
    def held(self) -> int:
        return sum(self.states[s] for s in HELD)

    @property
    def live(self) -> int:
        """Members that exist and can still count: held or pending."""
        return sum(self.states[s] for s in LIVE)

    def max_priority(self) -> int:
        """The highest priority of a member (0 without members)."""
        if self._max_priority is None:
            self._max_priority = max(self._priorities, default=0)
        return self._max_priority

    # ---- internals ---------------------------------------------------------------------
    def _count(self, m: _Member, sign: int) -> None:
        _bump(self.states, m.state, sign)
        if m.state in HELD:
            _bump(self.held_by_role, m.role, sign)
        if m.state in LIVE:
            _bump(self.live_by_role, m.role, sign)
        if m.state in UP:
            _bump(self.up_by_role, m.role, sign)
        for gate in m.gates:
            _bump(self.gates, gate, sign)
        self.queued += sign * m.queued
        self.assumed += sign * m.assumed
        _bump(self._priorities, m.priority, sign)
        top = self._max_priority  # None: unknown until asked
        if top is not None:
            if sign > 0 and m.priority > top:
                self._max_priority = m.priority
            elif sign < 0 and m.priority == top and top not in self._priorities:
                self._max_priority = None


# The counts one pod adds, by (phase, bound): count_members' rule for a single member, as
# a tuple of MemberCounts' fields (the counts of a group are their sums).
_CONTRIBUTIONS: dict[tuple[str, bool], tuple[int, ...]] = {}


def _contribution(phase: str, bound: bool) -> tuple[int, ...]:
    c = _CONTRIBUTIONS.get((phase, bound))
    if c is None:
        c = _CONTRIBUTIONS[(phase, bound)] = astuple(count_members([(phase, bound)]))
    return c


class GroupTally:
    """Every pod that names one group, whatever its scheduler, and the member counts of
    :func:`gangsched.core.status.count_members` summed over them, pod by pod."""

    __slots__ = ("_pods", "_sums", "ours")

    def __init__(self) -> None:
        self._pods: dict[str, tuple[str, bool, bool]] = {}  # uid -> (phase, bound, ours)
        self._sums = [0] * len(fields(MemberCounts))  # MemberCounts' fields, in order
        self.ours = 0  # pods of this scheduler

    def put(self, uid: str, phase: str, bound: bool, ours: bool) -> None:
        old = self._pods.get(uid)
        new = (phase, bound, ours)
        if old == new:
            return
        if old is not None:
            self._add(old, -1)
        self._pods[uid] = new
        self._add(new, 1)

    def remove(self, uid: str) -> None:
        old = self._pods.pop(uid, None)
        if old is not None:
            self._add(old, -1)

    def __len__(self) -> int:
        return len(self._pods)

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def counts(self) -> MemberCounts:
        return MemberCounts(*self._sums)

    def _add(self, entry: tuple[str, bool, bool], sign: int) -> None:
        phase, bound, ours = entry
        sums = self._sums
        for i, n in enumerate(_contribution(phase, bound)):
            sums[i] += sign * n
        self.ours += sign * ours
