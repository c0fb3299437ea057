"""PodGroup phase from member counts: one pure function, shared by the status controller, the
CLI and the tests."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PHASES", "MemberCounts", "podgroup_phase"]

PHASES = ("Pending", "Scheduling", "Scheduled", "Running", "Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class MemberCounts:
    total: int = 0  # member pods that exist
    scheduled: int = 0  # bound to a node (including running and finished ones)
    running: int = 0
    succeeded: int = 0
    failed: int = 0


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
