"""Large gangs in the core: a pod event costs the same whatever the size of its gang (no walk
over the members outside a cycle), and a gang arriving pod by pod is not attempted at every
pod: while it waits for members it is retried at most once per initial backoff, and the member
that may complete it wakes it at once."""

from __future__ import annotations

from dataclasses import replace

import pytest

import gangsched.core.gang as gang_module
import gangsched.core.scheduler as scheduler_module
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, GangUnschedulable
from gangsched.core.model import GangSpec, Node, Pod, PodPhase, RoleSpec
from gangsched.core.queue import SchedulingQueue, Wake
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler

GI = 2**30
KEY = "ml/big"


def _scheduler(clock: FakeClock, nodes: int = 4) -> Scheduler:
    s = Scheduler(CoreConfig(backoff_initial_seconds=1.0), clock)
    for i in range(nodes):
        s.node_upsert(Node(f"n{i}", {CPU: 64_000, MEMORY: 256 * GI, PODS: 110, GPU: 8}))
    return s


def _pod(i: int, role: str = "") -> Pod:
    return Pod(f"u{i}", "ml", f"p{i}", {CPU: 100, GPU: 1, PODS: 1}, group=KEY, role=role)


def _attempts(decisions: list[object] | None) -> int:
    return sum(isinstance(d, GangUnschedulable | BindGang) for d in decisions or [])


def test_pod_events_never_walk_the_gang(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock(100.0)
    s = _scheduler(clock, nodes=1)
    s.gang_upsert(GangSpec(KEY, 2000))
    walks = 0
    real = gang_module.holdings

    def counting(*args: object, **kwargs: object) -> object:
        nonlocal walks
        walks += 1
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(scheduler_module, "holdings", counting)
    pods = [_pod(i) for i in range(1000)]
    for p in pods:
        s.pod_upsert(p)
        s.view(KEY)
        s.group_status(KEY)
    for p in pods:  # bound by another scheduler's hand, Running, then gone
        s.pod_upsert(replace(p, node_name="n0", phase=PodPhase.RUNNING))
        s.view(KEY)
        s.group_status(KEY)
    for p in pods:
        s.pod_delete(p.uid)
    assert walks == 0


def test_a_gang_arriving_pod_by_pod_is_not_attempted_at_every_pod() -> None:
    clock = FakeClock(100.0)
    s = _scheduler(clock)
    s.gang_upsert(GangSpec(KEY, 30))
    attempts = 0
    for i in range(29):
        s.pod_upsert(_pod(i))
        attempts += _attempts(s.run_until_idle())
    assert attempts == 1, "the first member's attempt only: the others came within a second"
    clock.advance(1.0)
    attempts += _attempts(s.run_until_idle())
    assert attempts == 2, "once the second has passed, one attempt tells every member"
    view = s.view(KEY)
    assert view is not None and (view.pending, view.queue_state) == (29, "unschedulable")
    status = s.group_status(KEY)
    assert status is not None and status.message.startswith("29 of 30 members exist")
    s.pod_upsert(_pod(29))  # the member that completes it: at once, whatever the time
    out = s.run_until_idle()
    [bind] = [d for d in out if isinstance(d, BindGang)]
    assert len(bind.bindings) == 30


def test_roles_must_be_complete_too_before_it_is_woken_at_once() -> None:
    clock = FakeClock(100.0)
    s = _scheduler(clock)
    s.gang_upsert(GangSpec(KEY, 3, roles=(RoleSpec("ps", 1),)))
    s.pod_upsert(_pod(0, "worker"))
    assert _attempts(s.run_until_idle()) == 1
    for i in (1, 2):
        s.pod_upsert(_pod(i, "worker"))  # 3 members, but no ps: still waiting
    assert _attempts(s.run_until_idle()) == 0
    s.pod_upsert(_pod(3, "ps"))
    out = s.run_until_idle()
    assert any(isinstance(d, BindGang) for d in out), out


def test_a_lowered_min_member_wakes_a_waiting_gang_at_once() -> None:
    clock = FakeClock(100.0)
    s = _scheduler(clock)
    s.gang_upsert(GangSpec(KEY, 10))
    for i in range(4):
        s.pod_upsert(_pod(i))
    s.run_until_idle()
    s.gang_upsert(GangSpec(KEY, 4))
    assert any(isinstance(d, BindGang) for d in s.run_until_idle())


# ---- the queue -------------------------------------------------------------------------------


def _key(gang: str) -> tuple[int, int, float, str]:
    return (1, 0, 0.0, gang)


def test_a_woken_gang_waits_for_its_retry_time_unless_woken_at_once() -> None:
    clock = FakeClock(100.0)
    q = SchedulingQueue(clock, flush_after=60.0)
    q.requeue("g", _key("g"), until=101.0, wake=Wake.GANG)
    assert q.state_of("g") == "unschedulable"
    q.wake(None, ["g"])
    assert q.state_of("g") == "backoff"
    assert q.next_wakeup() == 101.0
    q.wake(None, ["g"], at_once=True)
    assert q.state_of("g") == "active"
    assert q.pop() == "g"
    # parked and woken at once directly
    q.requeue("g", _key("g"), until=105.0, wake=Wake.GANG)
    q.wake(None, ["g"], at_once=True)
    assert q.pop() == "g"
    # a backoff after failing on the cluster holds, at once or not
    q.requeue("h", _key("h"), until=110.0, wake=Wake.CLUSTER)
    q.wake(None, ["h"], at_once=True)
    assert q.state_of("h") == "backoff"
    q.wake(None, ["h"], at_once=True)
    assert q.state_of("h") == "backoff"
    clock.advance(10.0)
    q.flush()
    assert q.pop() == "h"


def test_cluster_wakes_and_flushes_touch_only_what_they_move() -> None:
    clock = FakeClock(0.0)
    q = SchedulingQueue(clock, flush_after=60.0)
    for i in range(100):
        q.requeue(f"w{i}", _key(f"w{i}"), until=0.0, wake=Wake.GANG)
    q.requeue("c", _key("c"), until=0.0, wake=Wake.CLUSTER)
    assert q.wake(Wake.CLUSTER) == 1
    assert q.wake(Wake.CLUSTER) == 0
    assert q.pop() == "c" and q.pop() is None
    assert q.next_wakeup() == 60.0
    clock.advance(30.0)
    q.requeue("w0", _key("w0"), until=30.0, wake=Wake.GANG)  # parked again: its time restarts
    clock.advance(30.0)
    q.flush()
    assert q.counts() == {"active": 99, "backoff": 0, "unschedulable": 1}
    assert q.next_wakeup() == 90.0
