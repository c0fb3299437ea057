"""The gang lifecycle: a gang that ran and then lost members (the kube-batch PodGroup KEP's
"Lifecycle Management", and Volcano's ``Unknown`` phase).

The rule, one pod event at a time (O(roles) per event, from the gang's member tally):

- a member is **up** while it is bound to a node and has neither failed nor started being
  deleted, and once it has succeeded. A pending member is not up, nor is one reserved by this
  scheduler whose binding is not confirmed: a member its controller recreated counts as lost
  until it is bound;
- a gang is **whole** while at least minMember members are up and every role of its PodGroup
  has at least its own minimum up;
- a gang that has been satisfied once (``Gang.satisfied_once``) **loses members** when a member
  that was up stops being up other than by succeeding (it failed, it is being deleted or is
  gone, or it left the gang) and the gang is no longer whole. That starts a **loss episode**:
  one :class:`~gangsched.core.decisions.MemberLoss` decision, whatever else happens to the gang
  until it ends. A succeeded member that is deleted (cleanup after the run) never starts one;
- the episode ends when the gang is whole again (its replacements are bound), or when the gang
  itself goes away. While it lasts, the PodGroup's status says so (:meth:`Lifecycle.lost`;
  phase ``Unknown``, reason ``MembersLost``: :func:`gangsched.core.status.group_status`).

What follows is the PodGroup's policy (``GangSpec.on_member_loss``):

- ``None`` (the default): nothing more; the job's controller decides (replaces the member, or
  fails the job). With ``onceSatisfied: Independent`` the replacements are scheduled on their
  own as they come, and the episode ends once enough of them are bound;
- ``RestartGang``: every member left that holds a node (bound, or reserved with its binding in
  flight) and has not finished is in ``MemberLoss.restart``, for the adapter to delete; the core
  counts them as being deleted from that moment (the watch confirms it; ``delete_failed``
  undoes it), and the gang is no longer satisfied, so its replacements are placed again as one
  gang: nothing of it binds before minMember of them can. Pending members are left alone: they
  are what the controller would create anyway.

Plain pods (no gang) and gangs without a spec have no lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import Clock
from gangsched.core.decisions import Decision, MemberLoss, pod_ref
from gangsched.core.gang import Gang
from gangsched.core.model import GangSpec, Pod
from gangsched.core.tally import UP, MemberState, MemberTally, member_state

__all__ = [
    "NONE",
    "POLICIES",
    "RESTART_GANG",
    "Lifecycle",
    "is_up",
    "up_count",
    "whole",
]

NONE = "None"
RESTART_GANG = "RestartGang"
POLICIES = (NONE, RESTART_GANG)

# Members that still take part in the gang: an event about the loss goes on each.
_REMAINING = frozenset(
    {
        MemberState.PENDING,
        MemberState.RESERVED,
        MemberState.BOUND,
        MemberState.RUNNING,
        MemberState.GATED,
        MemberState.INVALID,
    }
)
# Members that hold a node: what RestartGang deletes.
_HOLDING = frozenset({MemberState.RESERVED, MemberState.BOUND, MemberState.RUNNING})


def is_up(pod: Pod) -> bool:
    """Bound and neither failed nor being deleted, or succeeded. (A reservation never makes a
    member up, so whether the pod is assumed does not matter.)"""
    return member_state(pod, False) in UP


def up_count(tally: MemberTally) -> int:
    return tally.bound + tally.count(MemberState.SUCCEEDED)


def whole(spec: GangSpec, tally: MemberTally) -> bool:
    """At least minMember members up, and every role's own minimum."""
    return spec.quorum(up_count(tally), tally.up_by_role)


@dataclass(slots=True)
class _Episode:
    gang: Gang  # the gang object it is about (a gang deleted and made anew starts afresh)
    since: float
    cause: str


class Lifecycle:
    """Loss episodes of the scheduler's gangs, and the decisions they made that the scheduler
    has not returned yet (``drain``)."""

    def __init__(
        self,
        cache: ClusterCache,
        clock: Clock,
        preempted: Callable[[str], bool] = lambda uid: False,
    ) -> None:
        self._cache = cache
        self._clock = clock
        # Whether a pod is the victim of a preemption under way: it is not restarted (it is
        # being deleted already), and a loss it causes says so.
        self._preempted = preempted
        # Members a restart counts as being deleted before the watch says so.
        self.restarting: set[str] = set()
        self._episodes: dict[str, _Episode] = {}
        self._out: list[Decision] = []

    # ---- events ------------------------------------------------------------------------
    def changed(self, gang: Gang | None, old: Pod | None, new: Pod | None) -> MemberLoss | None:
        """A member of ``gang`` changed: ``old`` as it was in the gang (None: it was not a
        member), ``new`` as it is now (None: deleted; a pod no longer in the gang's tally has
        left it). Called after the gang's tally took the event in. Returns the
        ``MemberLoss`` when this event started a loss episode (it is also queued for
        ``drain``); the caller carries out what it asks of the core (``restart``)."""
        if gang is None or gang.plain or gang.spec is None:
            return None
        spec = gang.spec
        episode = self._episodes.get(gang.key)
        if episode is not None and episode.gang is not gang:
            del self._episodes[gang.key]  # about a gang that no longer exists
            episode = None
        if episode is not None:
            if whole(spec, gang.tally):
                del self._episodes[gang.key]
            return None
        if not gang.satisfied_once or old is None or not is_up(old):
            return None
        if member_state(old, False) is MemberState.SUCCEEDED:
            return None  # a finished member cleaned up: its part is done
        if new is not None and new.uid in gang.tally and is_up(new):
            return None
        if whole(spec, gang.tally):
            return None
        cause = _cause(gang, old, new)
        if self._preempted(old.uid):
            cause = f"member {old.name} was preempted"
        return self._start(gang, spec, cause)

    def forget(self, key: str) -> None:
        """The gang went away (no members, no spec): its episode (if any) ends, and a decision
        about it not returned yet is dropped (there is no one left to tell)."""
        self._episodes.pop(key, None)
        if self._out:
            self._out = [d for d in self._out if d.gang != key]

    def drain(self) -> list[Decision]:
        """The decisions made since the last call, oldest first."""
        out, self._out = self._out, []
        return out

    # ---- reads -------------------------------------------------------------------------
    def lost(self, gang: Gang | None) -> str:
        """While the gang is in a loss episode and not whole: what its status says (counts as
        they are now); '' otherwise."""
        if gang is None or gang.spec is None:
            return ""
        episode = self._episodes.get(gang.key)
        if episode is None or episode.gang is not gang or whole(gang.spec, gang.tally):
            return ""
        spec = gang.spec
        up = up_count(gang.tally)
        then = (
            "restarting the whole gang"
            if spec.on_member_loss == RESTART_GANG
            else "waiting for its controller to replace them"
        )
        short = [
            f"{r.name} {gang.tally.up_by_role[r.name]}/{r.min_member}"
            for r in spec.roles
            if gang.tally.up_by_role[r.name] < r.min_member
        ]
        roles = f" (roles short: {', '.join(short)})" if short else ""
        return (
            f"the gang lost members ({episode.cause}): {up} of minMember {spec.min_member} "
            f"bound or succeeded{roles}; {then}"
        )

    def in_episode(self, key: str) -> bool:
        return key in self._episodes

    # ---- internals ---------------------------------------------------------------------
    def _start(self, gang: Gang, spec: GangSpec, cause: str) -> MemberLoss:
        cache = self._cache
        members: list[Pod] = []
        restart: list[Pod] = []
        for uid in gang.members:
            pod = cache.pods.get(uid)
            if pod is None:
                continue
            state = member_state(pod, uid in cache.assumed)
            if state in _REMAINING:
                members.append(pod)
            if (
                state in _HOLDING
                and spec.on_member_loss == RESTART_GANG
                and not self._preempted(uid)
            ):
                restart.append(pod)
        members.sort(key=lambda p: p.name)
        restart.sort(key=lambda p: p.name)
        self._episodes[gang.key] = _Episode(gang, self._clock.now(), cause)
        if spec.on_member_loss == RESTART_GANG:
            # Scheduled again as one gang: its replacements bind only together, and it no
            # longer counts as partly bound (which would put it before every priority).
            gang.satisfied_once = False
            gang.has_bound = False
        up = up_count(gang.tally)
        message = (
            f"gang {gang.key} lost members: {cause}; {up} of minMember {spec.min_member} "
            "bound or succeeded"
        )
        if spec.on_member_loss == RESTART_GANG:
            message += (
                f"; restarting the whole gang (onMemberLoss RestartGang): deleting "
                f"{len(restart)} member(s) that hold a node"
            )
        decision = MemberLoss(
            gang.key,
            up,
            spec.min_member,
            message,
            tuple(pod_ref(p) for p in restart),
            tuple(pod_ref(p) for p in members),
        )
        self._out.append(decision)
        return decision


def _cause(gang: Gang, old: Pod, new: Pod | None) -> str:
    if new is None:
        return f"member {old.name} was deleted"
    if new.uid not in gang.tally:
        return f"member {old.name} left the gang"
    if member_state(new, False) is MemberState.FAILED:
        return f"member {old.name} failed"
    return f"member {old.name} was deleted"  # deletion requested: it is terminating
