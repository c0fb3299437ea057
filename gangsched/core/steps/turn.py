"""One gang's turn at the head of the queue, as the steps see it, and what a step is."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from gangsched.core.cycle import Attempt
from gangsched.core.decisions import Decision
from gangsched.core.equivalence import PodClass
from gangsched.core.gang import Gang, Holdings
from gangsched.core.reservation import Reservation

__all__ = ["Step", "Turn"]


@dataclass(slots=True)
class Turn:
    """The gang, what it holds and which members wait (``h``), and what the steps so far
    found and decided (``out``)."""

    gang: Gang
    h: Holdings
    out: list[Decision] = field(default_factory=list)
    # The failure-replay step: the pod class whose failure the attempt may share.
    cls: PodClass | None = None
    # The placement step: the attempt, and what the node finder had done before it and after
    # it (the failure memo remembers what a failure cost).
    attempt: Attempt | None = None
    searches: int = 0
    finds: int = 0
    generation: int = 0
    searched: int = 0
    found: int = 0
    # The reservation as the attempt found it, and whether the gang was due one.
    reservation: Reservation | None = None
    reserve_due: bool = False

    @property
    def failed(self) -> bool:
        return self.attempt is not None and self.attempt.failed

    @property
    def unschedulable(self) -> bool:
        """The attempt failed for want of capacity (what preemption and reservations help)."""
        return self.failed and self.attempt is not None and self.attempt.reason == "Unschedulable"


class Step(Protocol):
    """A step of the gang cycle: it reads and adds to the turn, and returns True when the
    cycle ends with it."""

    def run(self, t: Turn) -> bool: ...
