"""A scheduling cycle's view of the cluster, with transactional placements.

Placements made during a cycle are assumed into the cache at once, so the next member of the
gang sees them (two members never claim the same GPU). At the end of the cycle they are either
kept as reservations (``commit``) or all undone (``rollback``), so nothing of a failed attempt
stays reserved. The core is single-threaded, so no event interleaves with a cycle and the
cache itself is a consistent snapshot for its duration; this class adds the undo log.
"""

from __future__ import annotations

from gangsched.core.cache import ClusterCache

__all__ = ["CycleSnapshot"]


class CycleSnapshot:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self._placed: dict[str, str] = {}

    def place(self, uid: str, node: str) -> None:
        self.cache.assume(uid, node)
        self._placed[uid] = node

    def adopt(self, uid: str, node: str) -> None:
        """Take over a placement another snapshot made and committed (already assumed)."""
        self._placed[uid] = node

    def __len__(self) -> int:
        return len(self._placed)

    def commit(self) -> dict[str, str]:
        placed, self._placed = self._placed, {}
        return placed

    def rollback(self) -> None:
        for uid in reversed(list(self._placed)):
            self.cache.forget(uid)
        self._placed = {}
