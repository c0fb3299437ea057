"""The scheduler's gangs and their place in the queue: what every step asks of a gang (its
sort key, timeout, backoff, whether it is satisfied) and how a failed attempt puts it back in
the queue. The steps share one book; the scheduler's event intake keeps it up to date."""

from __future__ import annotations

from collections.abc import Callable

from gangsched.core.clock import Clock
from gangsched.core.config import CoreConfig
from gangsched.core.gang import Gang, shortfall
from gangsched.core.model import GangSpec
from gangsched.core.queue import SchedulingQueue, SortKey, Wake

__all__ = ["GangBook"]


class GangBook:
    def __init__(self, config: CoreConfig, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.queue = SchedulingQueue(clock, flush_after=config.unschedulable_flush_seconds)
        self.gangs: dict[str, Gang] = {}
        self.specs: dict[str, GangSpec] = {}
        # Gangs whose reservation or hold must end when they go (set by the steps that keep
        # one): called with the gang's key.
        self.on_gone: list[Callable[[str], None]] = []
        # the cluster cache's ClusterCache.freed_seq (set by the scheduler)
        self.freed_seq: Callable[[], int] = lambda: 0

    def spec_of(self, key: str) -> GangSpec | None:
        gang = self.gangs.get(key)
        return gang.spec if gang is not None else None

    def sort_key(self, gang: Gang) -> SortKey:
        prio = gang.tally.max_priority()
        return (0 if gang.part_bound else 1, -prio, gang.timestamp(), gang.key)

    def timeout(self, spec: GangSpec | None) -> float:
        cfg = self.config
        if cfg.schedule_timeout_override_seconds is not None:
            return cfg.schedule_timeout_override_seconds
        if spec is not None and spec.timeout_seconds is not None:
            return spec.timeout_seconds
        return cfg.default_schedule_timeout_seconds

    def backoff(self, gang: Gang) -> float:
        cfg = self.config
        exp = min(gang.attempts - 1, 30)
        return float(min(cfg.backoff_initial_seconds * (2**exp), cfg.backoff_max_seconds))

    def fail(self, gang: Gang, reason: str, message: str, wake: Wake) -> None:
        """An attempt failed (or could not start): the gang says why, and goes back in the
        queue until ``wake`` (after its backoff, for a failure on cluster state)."""
        now = self.clock.now()
        gang.reason, gang.message = reason, message
        until = now
        if wake is Wake.CLUSTER:
            gang.attempts += 1
            gang.last_failure = now
            gang.freed_seen = self.freed_seq()
            until = now + self.backoff(gang)
        elif reason == "WaitingForMembers":
            # Members arriving one by one retry it at most this often (a gang of thousands is
            # not tried, and its pending pods told why, at every pod); the member that may
            # complete it wakes it at once (``may_complete``).
            until = now + self.config.backoff_initial_seconds
        self.queue.requeue(gang.key, self.sort_key(gang), until, wake)

    def satisfied(self, key: str) -> bool:
        """The gang holds its quorum (reservations included, and the room held for members to
        come: core/leaderfirst.py)."""
        gang = self.gangs.get(key)
        if gang is None or gang.spec is None:
            return False
        t = gang.tally
        held = t.held + (gang.hold.slots if gang.hold is not None else 0)
        need, roles = shortfall(gang.spec, held, t.held_by_role, gang.satisfied_once)
        return need == 0 and not roles

    def group_of(self, gang: Gang) -> tuple[str, ...]:
        """The gang and every gang of its gang group: what one of its events may unblock."""
        siblings = gang.spec.gang_group if gang.spec is not None else ()
        return (gang.key, *(s for s in siblings if s != gang.key))

    def may_complete(self, gang: Gang) -> bool:
        """Enough members exist (overall and per role) for the gang to reach quorum: it no
        longer waits for members (O(roles))."""
        spec = gang.spec
        return spec is not None and spec.quorum(gang.tally.live, gang.tally.live_by_role)

    def gone(self, key: str) -> None:
        """The gang is no more: whatever a step keeps for it ends."""
        for drop in self.on_gone:
            drop(key)
