"""The Permit waiting map: gangs holding reservations until they may bind.

A gang waits here when its reserved members do not yet make it bindable (a NonStrict gang
still short of quorum, or a gang whose gang-group siblings are not yet satisfied). Each waiting
gang has a deadline from the injected clock; at the deadline everything it holds is released.
Release is idempotent: releasing a gang that is not waiting returns nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["PermitMap", "WaitingGang"]


@dataclass(slots=True)
class WaitingGang:
    key: str
    deadline: float
    reserved: dict[str, str] = field(default_factory=dict)  # pod uid -> node


class PermitMap:
    def __init__(self) -> None:
        self._waiting: dict[str, WaitingGang] = {}

    def wait(self, key: str, placements: dict[str, str], deadline: float) -> WaitingGang:
        """Add reservations for a gang; the first reservation sets the deadline."""
        wg = self._waiting.get(key)
        if wg is None:
            wg = WaitingGang(key, deadline)
            self._waiting[key] = wg
        wg.reserved.update(placements)
        return wg

    def release(self, key: str) -> dict[str, str]:
        """Stop waiting; returns what was reserved (empty when nothing was)."""
        wg = self._waiting.pop(key, None)
        return wg.reserved if wg is not None else {}

    def drop_pod(self, key: str, uid: str) -> None:
        wg = self._waiting.get(key)
        if wg is not None:
            wg.reserved.pop(uid, None)
            if not wg.reserved:
                del self._waiting[key]

    def get(self, key: str) -> WaitingGang | None:
        return self._waiting.get(key)

    def expired(self, now: float) -> list[str]:
        return sorted(k for k, wg in self._waiting.items() if wg.deadline <= now)

    def next_deadline(self) -> float | None:
        return min((wg.deadline for wg in self._waiting.values()), default=None)

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)

    def waiting_gangs(self) -> list[str]:
        return sorted(self._waiting)
