"""The gang-level scheduling queue: ordering, the three sets, waking, flushing, backoff."""

from __future__ import annotations

import pytest

from gangsched.core.clock import FakeClock
from gangsched.core.queue import SchedulingQueue, SortKey, Wake


def key(gang: str, priority: int = 0, ts: float = 0.0) -> SortKey:
    return (1, -priority, ts, gang)


def drain(q: SchedulingQueue) -> list[str]:
    out: list[str] = []
    while (g := q.pop()) is not None:
        out.append(g)
    return out


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


@pytest.fixture
def q(clock: FakeClock) -> SchedulingQueue:
    return SchedulingQueue(clock, flush_after=60.0)


# ---- ordering ----------------------------------------------------------------------------


def test_empty_queue_pops_nothing(q: SchedulingQueue) -> None:
    assert q.pop() is None
    assert q.active_order() == []
    assert q.next_wakeup() is None
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0}


def test_higher_priority_first_then_older_then_key(q: SchedulingQueue) -> None:
    q.activate("ns/late-high", key("ns/late-high", priority=10, ts=50.0))
    q.activate("ns/b-old", key("ns/b-old", priority=0, ts=1.0))
    q.activate("ns/a-old", key("ns/a-old", priority=0, ts=1.0))
    q.activate("ns/new", key("ns/new", priority=0, ts=5.0))
    q.activate("pod:x", key("pod:x", priority=-5, ts=0.0))
    expected = ["ns/late-high", "ns/a-old", "ns/b-old", "ns/new", "pod:x"]
    assert q.active_order() == expected
    assert drain(q) == expected


def test_activate_twice_keeps_one_entry_with_the_latest_key(q: SchedulingQueue) -> None:
    q.activate("a", key("a", ts=1.0))
    q.activate("b", key("b", ts=2.0))
    q.activate("a", key("a", ts=3.0))  # a failed since: it now goes behind b
    assert q.active_order() == ["b", "a"]
    assert q.counts()["active"] == 2
    assert drain(q) == ["b", "a"]


def test_priority_raise_moves_gang_ahead(q: SchedulingQueue) -> None:
    q.activate("a", key("a", ts=1.0))
    q.activate("b", key("b", ts=2.0))
    q.activate("b", key("b", priority=100, ts=2.0))
    assert drain(q) == ["b", "a"]


def test_many_reactivations_compact_without_losing_order(q: SchedulingQueue) -> None:
    gangs = [f"g{i:03d}" for i in range(20)]
    for round_ in range(10):
        for i, g in enumerate(gangs):
            q.activate(g, key(g, ts=float((i * 7 + round_) % 20)))
    order = q.active_order()
    assert sorted(order) == sorted(gangs)
    assert len(q._heap) <= 4 * len(gangs) + 1  # lazy entries are compacted
    assert drain(q) == order


# ---- requeue, wake, flush ----------------------------------------------------------------


def test_requeued_gang_is_parked_not_active(q: SchedulingQueue, clock: FakeClock) -> None:
    q.activate("a", key("a"))
    assert q.pop() == "a"
    q.requeue("a", key("a"), clock.now() + 5, Wake.CLUSTER)
    assert q.state_of("a") == "unschedulable"
    assert "a" in q
    assert q.pop() is None
    # New work for a parked gang does not make it active: no hot loop.
    q.activate("a", key("a"))
    assert q.pop() is None
    assert q.state_of("a") == "unschedulable"


def test_wake_kind_must_match(q: SchedulingQueue, clock: FakeClock) -> None:
    now = clock.now()
    q.requeue("members", key("members"), now, Wake.GANG)
    q.requeue("capacity", key("capacity"), now, Wake.CLUSTER)
    assert q.wake(Wake.CLUSTER) == 1
    assert q.active_order() == ["capacity"]
    assert q.state_of("members") == "unschedulable"
    assert q.wake(Wake.GANG) == 1
    assert q.state_of("members") == "active"


def test_wake_named_gangs_only(q: SchedulingQueue, clock: FakeClock) -> None:
    now = clock.now()
    for g in ("a", "b", "c"):
        q.requeue(g, key(g), now, Wake.GANG)
    assert q.wake(Wake.GANG, ["b", "unknown"]) == 1
    assert q.active_order() == ["b"]
    assert q.state_of("a") == q.state_of("c") == "unschedulable"


def test_wake_before_backoff_expires_goes_to_backoff(q: SchedulingQueue, clock: FakeClock) -> None:
    q.requeue("a", key("a"), clock.now() + 4, Wake.CLUSTER)
    q.wake(Wake.CLUSTER)
    assert q.state_of("a") == "backoff"
    assert q.pop() is None
    assert q.next_wakeup() == clock.now() + 4
    clock.advance(3.9)
    q.flush()
    assert q.pop() is None
    clock.advance(0.1)
    q.flush()
    assert q.pop() == "a"


def test_unwoken_gang_waits_for_the_flush(q: SchedulingQueue, clock: FakeClock) -> None:
    start = clock.now()
    q.requeue("a", key("a"), start + 1, Wake.CLUSTER)
    assert q.next_wakeup() == start + 60
    clock.advance(30)
    q.flush()
    assert q.pop() is None  # backoff long expired, but no event and no flush yet
    clock.advance(30)
    q.flush()
    assert q.pop() == "a"


def test_flush_of_parked_gang_with_pending_backoff(clock: FakeClock) -> None:
    q2 = SchedulingQueue(clock, flush_after=5.0)
    q2.requeue("a", key("a"), clock.now() + 8, Wake.CLUSTER)
    clock.advance(5)
    q2.flush()
    assert q2.state_of("a") == "backoff"
    assert q2.next_wakeup() == clock.now() + 3
    clock.advance(3)
    q2.flush()
    assert q2.pop() == "a"


def test_backoff_retries_without_an_event(q: SchedulingQueue, clock: FakeClock) -> None:
    q.activate("a", key("a"))
    q.backoff("a", key("a"), clock.now() + 2)
    assert q.state_of("a") == "backoff"
    assert q.pop() is None
    clock.advance(2)
    q.flush()
    assert q.pop() == "a"


def test_backoff_replaced_by_requeue_does_not_fire(q: SchedulingQueue, clock: FakeClock) -> None:
    q.backoff("a", key("a"), clock.now() + 1)
    q.requeue("a", key("a"), clock.now() + 1, Wake.GANG)
    clock.advance(2)
    q.flush()
    assert q.pop() is None
    assert q.state_of("a") == "unschedulable"


def test_requeue_with_new_key_is_used_when_reactivated(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    q.activate("a", key("a", ts=1.0))
    q.activate("b", key("b", ts=2.0))
    assert q.pop() == "a"
    q.requeue("a", key("a", ts=clock.now()), clock.now(), Wake.CLUSTER)
    q.wake(Wake.CLUSTER)
    assert q.active_order() == ["b", "a"]


def test_remove_forgets_gang_everywhere(q: SchedulingQueue, clock: FakeClock) -> None:
    q.activate("a", key("a"))
    q.backoff("b", key("b"), clock.now() + 1)
    q.requeue("c", key("c"), clock.now(), Wake.GANG)
    for g in ("a", "b", "c"):
        q.remove(g)
        assert g not in q
        assert q.state_of(g) == ""
    clock.advance(100)
    q.flush()
    assert q.wake(Wake.GANG) == 0
    assert q.pop() is None
    assert q.counts() == {"active": 0, "backoff": 0, "unschedulable": 0}


def test_counts_and_next_wakeup(q: SchedulingQueue, clock: FakeClock) -> None:
    now = clock.now()
    q.activate("a", key("a"))
    q.backoff("b", key("b"), now + 7)
    q.requeue("c", key("c"), now, Wake.GANG)
    assert q.counts() == {"active": 1, "backoff": 1, "unschedulable": 1}
    assert q.next_wakeup() == now + 7
    q.backoff("b", key("b"), now + 90)
    assert q.next_wakeup() == now + 60  # the flush of c comes first


def test_activate_while_backing_off_does_not_skip_backoff(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    q.backoff("a", key("a"), clock.now() + 3)
    q.activate("a", key("a", priority=5))
    assert q.pop() is None
    clock.advance(3)
    q.flush()
    assert q.pop() == "a"
    assert q.pop() is None


def test_wake_tolerates_duplicate_names(q: SchedulingQueue, clock: FakeClock) -> None:
    """Waking the same gang twice in one call is the same as waking it once."""
    q.requeue("a", key("a"), clock.now(), Wake.GANG)
    assert q.wake(Wake.GANG, ["a", "a"]) == 1
    assert q.active_order() == ["a"]


@pytest.mark.parametrize("since", [60.1, 0.3, 1234.567, 1e6 + 0.1])
def test_flush_is_due_at_next_wakeup(since: float) -> None:
    """An adapter sleeps until next_wakeup() and then flushes: the parked gang must be due
    exactly then, whatever the floating-point rounding of since + flush_after."""
    clock = FakeClock(since)
    q = SchedulingQueue(clock, flush_after=60.0)
    q.requeue("a", key("a"), since, Wake.CLUSTER)
    t = q.next_wakeup()
    assert t is not None
    clock.set(t)
    q.flush()
    assert q.pop() == "a", f"parked at {since!r}, woken at {t!r}: not flushed"
