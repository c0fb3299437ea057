"""PodGroup status from member pods: one pure rule, shared by the scheduler's status writer,
the status controller, ``kubectl gang`` and the tests.

:func:`group_status` gives the phase, the member counts and the ``Scheduled`` condition
(status, reason, message) together, so they agree in every state: the condition is True,
with reason ``Scheduled``, exactly when ``minMember`` members are bound (or finished), which is
exactly when the phase is ``Scheduled``, ``Running`` or ``Succeeded``. The scheduler's own
word on the gang (its last reason and message) is used only while the counts do not
contradict it: a reason that speaks of a bound gang is replaced, from the counts, once the gang
no longer has ``minMember`` members bound (``minMember`` raised, members deleted or failed).

A gang that ran and lost members (core/lifecycle.py: fewer than ``minMember`` members bound
or succeeded, counting a member being deleted as lost) says so until it is whole again: the
phase ``Unknown`` (kube-batch's and Volcano's phase for a gang with part of ``minMember``
running; ``Failed`` when the counts say that), and the condition False with the reason
``MembersLost`` and the lifecycle's message (the counts). This overrides the counts only in the
moment a lost member is being deleted but still bound.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "MEMBERS_LOST",
    "PHASES",
    "SCHEDULED_PHASES",
    "Expected",
    "GroupStatus",
    "MemberCounts",
    "count_members",
    "counted",
    "group_status",
    "podgroup_phase",
    "split_forecast",
    "with_forecast",
]

PHASES = ("Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed", "Unknown")
# The phases of a gang that holds minMember bound (or finished) members.
SCHEDULED_PHASES = frozenset({"Scheduled", "Running", "Succeeded"})

# The reason of a gang that ran and lost members (core/lifecycle.py).
MEMBERS_LOST = "MembersLost"

# Reasons that say the gang was bound (or say nothing): true only while the counts agree.
_BOUND_REASONS = frozenset({"", "Scheduled"})


@dataclass(frozen=True, slots=True)
class MemberCounts:
    total: int = 0  # member pods that exist
    scheduled: int = 0  # bound to a node (or Running or Succeeded), and not Failed
    running: int = 0
    succeeded: int = 0
    failed: int = 0


# How a member being deleted (and not finished) counts: it exists, and is neither bound nor
# running (the gang lifecycle counts it as lost from the moment its deletion is asked for).
TERMINATING = "Terminating"


def counted(phase: str, bound: bool, deleting: bool) -> tuple[str, bool]:
    """The ``(phase, bound)`` a member pod counts as in :func:`count_members`: its pod phase
    and whether it has a node, except that a member being deleted that has not finished
    counts as ``Terminating`` without a node. Every place that counts members (the
    scheduler's tallies, ``kubectl gang``) builds its pairs here, so they agree."""
    if deleting and phase not in ("Succeeded", "Failed"):
        return TERMINATING, False
    return phase, bound


def count_members(members: Iterable[tuple[str, bool]]) -> MemberCounts:
    """Counts from each member pod's ``(phase, bound)`` as :func:`counted` gives them: its
    pod phase and whether it has a node. A Running or Succeeded pod counts as scheduled even
    if its node is not known; a ``Terminating`` one counts only as existing."""
    total = scheduled = running = succeeded = failed = 0
    for phase, bound in members:
        total += 1
        if phase == "Failed":
            failed += 1
            continue
        if phase == "Running":
            running += 1
        elif phase == "Succeeded":
            succeeded += 1
        if bound or phase in ("Running", "Succeeded"):
            scheduled += 1
    return MemberCounts(total, scheduled, running, succeeded, failed)


def podgroup_phase(min_member: int, c: MemberCounts, attempted: bool) -> str:
    """Failed: too many members failed for minMember to be reached. Succeeded: every member
    finished and at least minMember succeeded. Running: minMember running or succeeded.
    Scheduled: minMember bound. Scheduling: the scheduler has tried. Pending: otherwise."""
    if c.failed and c.total - c.failed < min_member:
        return "Failed"
    if c.total and c.succeeded >= min_member and c.succeeded + c.failed == c.total:
        return "Succeeded"
    if c.running + c.succeeded >= min_member:
        return "Running"
    if c.scheduled >= min_member:
        return "Scheduled"
    if attempted:
        return "Scheduling"
    return "Pending"


@dataclass(frozen=True, slots=True)
class GroupStatus:
    """What a PodGroup's status says: phase, counts and the ``Scheduled`` condition."""

    min_member: int
    phase: str
    scheduled: bool  # the Scheduled condition's status
    reason: str
    message: str
    counts: MemberCounts


def group_status(
    min_member: int,
    counts: MemberCounts,
    *,
    reason: str = "",
    message: str = "",
    attempted: bool = False,
    binding: bool = False,
    lost: str = "",
    placed_in: str = "",
) -> GroupStatus:
    """The status of a gang with these member counts.

    ``reason`` and ``message`` are the scheduler's last word on the gang, ``attempted`` whether
    it has tried to place it, ``binding`` whether bindings it sent are still unconfirmed (the
    reason ``Binding`` stands only while they are). With ``minMember`` members bound the
    condition is True (``Scheduled``, ``<n> member(s) bound``); otherwise it is False, with
    the scheduler's reason unless that reason says the gang is bound (or nothing): then the
    reason comes from the counts, ``WaitingForMembers`` when fewer than ``minMember`` members
    are left that have not failed, else ``Pending`` with how many are bound.

    ``lost``: the gang lifecycle's message while the gang has lost members and is not whole
    again ('' otherwise; ``kubectl gang`` passes the written message when the written reason is
    ``MembersLost``): the phase is ``Unknown`` (``Failed`` if the counts say so), the
    condition False with the reason ``MembersLost`` and that message."""
    min_member = max(1, min_member)
    phase = podgroup_phase(min_member, counts, attempted)
    if lost:
        phase = "Failed" if phase == "Failed" else "Unknown"
        return GroupStatus(min_member, phase, False, MEMBERS_LOST, lost, counts)
    if counts.scheduled >= min_member:
        where = f" in {placed_in}" if placed_in else ""
        return GroupStatus(
            min_member,
            phase,
            True,
            "Scheduled",
            f"{counts.scheduled} member(s) bound{where}",
            counts,
        )
    if reason in _BOUND_REASONS or (reason == "Binding" and not binding):
        live = counts.total - counts.failed
        if live < min_member:
            reason = "WaitingForMembers"
            message = f"{live} of {min_member} members exist; waiting for more pods"
        else:
            reason = "Pending"
            message = f"{counts.scheduled} of {min_member} members bound"
    return GroupStatus(min_member, phase, False, reason, message, counts)


# A start forecast as the scheduler says it: (the time, or '' when unknown; the basis).
Expected = tuple[str, str]

# How a waiting gang's message ends with its start forecast (the status of its PodGroup, and
# its pods' PodScheduled condition, say it so).
_AT = "; expected to start at "
_UNKNOWN = "; expected start unknown: "


def with_forecast(message: str, expected: Expected) -> str:
    """A waiting gang's message with its start forecast (time or '' when unknown, basis)."""
    at, basis = expected
    if at:
        return f"{message}{_AT}{at}, {basis}"
    return f"{message}{_UNKNOWN}{basis}"


def split_forecast(message: str) -> tuple[str, Expected | None]:
    """The message without the forecast :func:`with_forecast` put at its end, and that
    forecast ((time or '', basis), None when it has none)."""
    cut = message.rfind(_AT)
    if cut >= 0:
        at, sep, basis = message[cut + len(_AT) :].partition(", ")
        if sep and at:
            return message[:cut], (at, basis)
    cut = message.rfind(_UNKNOWN)
    if cut >= 0:
        return message[:cut], ("", message[cut + len(_UNKNOWN) :])
    return message, None
