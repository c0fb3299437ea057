"""The gang-level scheduling queue: ordering, the three sets, waking, flushing, backoff."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, GangUnschedulable
from gangsched.core.model import GangSpec, PodPhase
from gangsched.core.queue import SchedulingQueue, SortKey, Wake
from gangsched.core.scheduler import Scheduler
from tests.core.builders import make_node, make_pod


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


# ---- no priority inversion through backoff -------------------------------------------------


def test_gang_in_backoff_keeps_it_without_a_cluster_event(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    q.requeue("high", key("high", priority=10), clock.now() + 5, Wake.CLUSTER)
    q.activate("low", key("low"))
    assert q.pop() == "low"
    assert q.state_of("high") == "unschedulable"


def test_outranking_gang_jumps_its_backoff_after_capacity_is_freed(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    q.requeue("high", key("high", priority=10), clock.now() + 5, Wake.CLUSTER)
    clock.advance(1)
    q.wake(Wake.CLUSTER)  # capacity freed while high still has 4 s of backoff
    assert q.state_of("high") == "backoff"
    q.activate("low", key("low"))
    assert q.pop() == "high"
    assert q.state_of("high") == ""  # taken: its backoff ended early
    assert q.pop() == "low"
    assert q.pop() is None
    clock.advance(5)
    q.flush()
    assert q.pop() is None  # the expired backoff does not bring it back a second time


def test_gang_parked_on_the_cluster_jumps_as_well(q: SchedulingQueue, clock: FakeClock) -> None:
    """Parked with its retry time already passed, a cluster wake makes it active anyway;
    parked with time left, the wake sends it to backoff, from which it jumps."""
    q.requeue("high", key("high", priority=10), clock.now() + 1, Wake.CLUSTER)
    q.activate("low", key("low"))
    clock.advance(0.5)
    q.wake(Wake.CLUSTER)
    assert q.pop() == "high"
    assert q.pop() == "low"


def test_backoff_after_a_bind_failure_jumps_too(q: SchedulingQueue, clock: FakeClock) -> None:
    q.backoff("high", key("high", priority=10), clock.now() + 2)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("low", key("low"))
    assert drain(q) == ["high", "low"]


def test_a_cluster_event_before_the_failure_does_not_count(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    q.wake(Wake.CLUSTER)
    q.requeue("high", key("high", priority=10), clock.now() + 5, Wake.CLUSTER)
    q.activate("low", key("low"))
    assert q.pop() == "low"
    assert q.state_of("high") == "unschedulable"


def test_capacity_freed_at_the_instant_of_the_failure_does_not_count(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    """A gang that times out at Permit fails and gives its capacity back in one step: that
    wake frees nothing for the gang itself, which keeps its backoff; a later one counts."""
    q.requeue("high", key("high", priority=10), clock.now() + 5, Wake.CLUSTER)
    q.wake(Wake.CLUSTER)
    q.activate("low", key("low"))
    assert q.pop() == "low"
    clock.advance(1)
    q.activate("low", key("low"))
    assert q.pop() == "low"  # still no capacity freed after the failure
    q.wake(Wake.CLUSTER)
    q.activate("low", key("low"))
    assert drain(q) == ["high", "low"]


def test_equal_priority_keeps_its_backoff(q: SchedulingQueue, clock: FakeClock) -> None:
    q.requeue("old", key("old", ts=1.0), clock.now() + 5, Wake.CLUSTER)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("young", key("young", ts=9.0))
    assert q.pop() == "young"
    assert q.state_of("old") == "backoff"


def test_part_bound_gang_outranks_any_priority(q: SchedulingQueue, clock: FakeClock) -> None:
    part_bound: SortKey = (0, 0, 1.0, "part")
    q.backoff("part", part_bound, clock.now() + 5)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("urgent", key("urgent", priority=1000))
    assert q.pop() == "part"


def test_lower_priority_in_backoff_does_not_jump(q: SchedulingQueue, clock: FakeClock) -> None:
    q.requeue("low", key("low", priority=-1), clock.now() + 5, Wake.CLUSTER)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("normal", key("normal"))
    assert q.pop() == "normal"
    assert q.state_of("low") == "backoff"


def test_nothing_active_takes_a_gang_woken_in_backoff(q: SchedulingQueue, clock: FakeClock) -> None:
    """kube-scheduler's SchedulerPopFromBackoffQ: with the active queue empty, a gang that a
    cluster event woke while it backs off is tried at once (idle capacity does not wait out
    a penalty), and only once per event: failing again, it waits for the next one."""
    q.requeue("g", key("g"), clock.now() + 5, Wake.CLUSTER)
    clock.advance(1)
    assert q.pop() is None  # no event since it failed
    q.wake(Wake.CLUSTER)
    assert q.state_of("g") == "backoff"
    assert q.pop() == "g"
    assert q.state_of("g") == ""
    q.requeue("g", key("g"), clock.now() + 10, Wake.CLUSTER)  # failed again
    assert q.pop() is None
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    assert q.pop() == "g"


def test_nothing_active_takes_the_woken_gangs_in_sort_order(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    """Higher priority first, then the gang that waited longest (its timestamp), not the one
    whose backoff happens to end first."""
    q.requeue("old", key("old", ts=1.0), clock.now() + 10, Wake.CLUSTER)
    q.requeue("new", key("new", ts=5.0), clock.now() + 1, Wake.CLUSTER)
    q.requeue("high", key("high", priority=5, ts=9.0), clock.now() + 10, Wake.CLUSTER)
    clock.advance(0.5)
    q.wake(Wake.CLUSTER)
    assert drain(q) == ["high", "old", "new"]


def test_an_active_gang_still_comes_before_a_woken_one_of_equal_priority(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    q.requeue("waited", key("waited", ts=1.0), clock.now() + 5, Wake.CLUSTER)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("arrived", key("arrived", ts=2.0))
    assert drain(q) == ["arrived", "waited"]


def test_an_error_backoff_is_not_cut_short(q: SchedulingQueue, clock: FakeClock) -> None:
    """A gang backing off after a failed binding waits for its time even when nothing is
    active (kube-scheduler does not pop its error backoff queue early either)."""
    q.backoff("bindfail", key("bindfail"), clock.now() + 5)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    assert q.pop() is None
    clock.advance(4)
    q.flush()
    assert q.pop() == "bindfail"


def test_a_gang_parked_on_its_own_events_is_not_taken(q: SchedulingQueue, clock: FakeClock) -> None:
    q.requeue("short", key("short"), clock.now() + 5, Wake.GANG)  # waits for members
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    assert q.pop() is None
    assert q.state_of("short") == "unschedulable"


def test_jumping_is_at_most_once_per_cluster_event(q: SchedulingQueue, clock: FakeClock) -> None:
    """A gang that can never fit is tried once per freed capacity, not at every pop."""
    q.requeue("never", key("never", priority=10), clock.now() + 5, Wake.CLUSTER)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    for i in range(3):
        q.activate(f"low{i}", key(f"low{i}", ts=float(i)))
    assert q.pop() == "never"
    q.requeue("never", key("never", priority=10), clock.now() + 5, Wake.CLUSTER)  # failed again
    assert q.pop() == "low0"
    assert q.pop() == "low1"
    clock.advance(1)
    q.wake(Wake.CLUSTER)  # the next freed capacity
    assert q.pop() == "never"
    q.requeue("never", key("never", priority=10), clock.now() + 5, Wake.CLUSTER)
    assert q.pop() == "low2"
    assert q.pop() is None


def test_gang_parked_on_its_own_events_does_not_jump(q: SchedulingQueue, clock: FakeClock) -> None:
    q.requeue("members", key("members", priority=10), clock.now() + 5, Wake.GANG)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("low", key("low"))
    assert q.pop() == "low"
    assert q.state_of("members") == "unschedulable"


def test_raised_priority_while_backing_off_is_what_jumps(
    q: SchedulingQueue, clock: FakeClock
) -> None:
    q.backoff("a", key("a"), clock.now() + 5)
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("b", key("b", priority=5))
    q.activate("a", key("a", priority=10))  # a member of higher priority arrived
    assert q.state_of("a") == "backoff"
    assert drain(q) == ["a", "b"]


def test_removed_gang_does_not_jump(q: SchedulingQueue, clock: FakeClock) -> None:
    q.requeue("gone", key("gone", priority=10), clock.now() + 5, Wake.CLUSTER)
    q.remove("gone")
    clock.advance(1)
    q.wake(Wake.CLUSTER)
    q.activate("low", key("low"))
    assert drain(q) == ["low"]


def test_jump_candidates_are_compacted(q: SchedulingQueue, clock: FakeClock) -> None:
    gangs = [f"g{i:02d}" for i in range(10)]
    for round_ in range(40):
        for g in gangs:
            q.backoff(g, key(g, priority=1), clock.now() + 5)
        clock.advance(0.25)
        if round_ % 2:
            q.wake(Wake.CLUSTER)
    assert len(q._fresh) <= 4 * len(gangs) + 64
    assert len(q._eligible) <= 4 * len(gangs) + 64
    q.activate("low", key("low"))
    assert drain(q) == [*gangs, "low"]


def test_scheduler_high_priority_gang_in_backoff_keeps_the_freed_node() -> None:
    """The inversion end to end: a gang of priority 100 fails on a full node and backs off
    for 1 s; half a second later the node's pod finishes and a pod of priority 0 arrives.
    The freed node goes to the high-priority gang, not to the pod that happened to be
    active."""
    clock = FakeClock(1000.0)
    s = Scheduler(CoreConfig(preemption=False, reservation_after_seconds=None), clock)
    s.node_upsert(make_node("n").gpus(8).cpu("32").memory("128Gi").node())
    running = replace(
        make_pod("running").gpus(8).obj(), node_name="n", phase=PodPhase.RUNNING, priority=1000
    )
    s.pod_upsert(running)
    s.gang_upsert(GangSpec("default/high", 2, created=1000.0))
    for i in range(2):
        member = make_pod(f"high-{i}").gpus(4).obj()
        s.pod_upsert(replace(member, group="default/high", priority=100, created=1000.0))
    first = s.run_until_idle()
    assert [type(d) for d in first] == [GangUnschedulable]
    assert s.view("default/high") is not None
    clock.advance(0.5)  # still inside the 1 s backoff
    s.pod_upsert(replace(running, phase=PodPhase.SUCCEEDED))
    s.pod_upsert(replace(make_pod("low").gpus(4).obj(), priority=0, created=1000.5))
    second = s.run_until_idle()
    binds = [d for d in second if isinstance(d, BindGang)]
    assert [d.gang for d in binds] == ["default/high"]
    assert len(binds[0].bindings) == 2
    low = [d for d in second if isinstance(d, GangUnschedulable)]
    assert [d.pods[0].name for d in low] == ["low"]


# ---- a gang's retry, given to another queue ---------------------------------------------


def test_a_retry_given_to_another_queue_comes_when_it_would_have(clock: FakeClock) -> None:
    """A parked gang keeps when it was parked (its flush comes as early), a backing-off
    gang its retry time, and each waits for what it waited for: the copy behaves as the
    original at every step."""
    live = SchedulingQueue(clock, flush_after=60.0)
    for g in ("parked", "backing", "eligible"):
        live.activate(g, key(g))
        assert live.pop() == g
        live.requeue(g, key(g), clock.now() + 5, Wake.CLUSTER)
    live.wake(Wake.CLUSTER, ["backing"])  # woken before its retry time: backs off until it
    clock.advance(1)
    live.wake(Wake.CLUSTER, [])  # a cluster event after they failed: they may jump
    live.requeue("members", key("members"), clock.now() + 5, Wake.GANG)
    assert live.retry("members") is None, "waits for its members, not for a retry"
    assert live.retry("unknown") is None
    retry = live.retry("parked")
    assert retry is not None and retry.parked_since == 1000.0 and retry.until == 1005.0
    backing = live.retry("backing")
    assert backing is not None and backing.parked_since is None and backing.until == 1005.0

    twin = SchedulingQueue(clock, flush_after=60.0)
    for g in ("parked", "backing", "eligible"):
        r = live.retry(g)
        assert r is not None
        twin.restore_retry(g, key(g), r)
    for q in (live, twin):
        assert q.next_wakeup() == 1005.0
        assert {g: q.state_of(g) for g in ("parked", "backing")} == {
            "parked": "unschedulable",
            "backing": "backoff",
        }
    clock.set(1005.0)
    for q in (live, twin):
        q.flush()
        assert q.active_order() == ["backing"]
        assert q.next_wakeup() == 1060.0, "the parked ones are flushed a minute after parking"
    clock.set(1060.0)
    for q in (live, twin):
        q.flush()
        assert drain(q) == ["backing", "eligible", "parked"]
