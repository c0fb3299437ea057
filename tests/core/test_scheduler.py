"""Gang flows through the Scheduler, driven by hand with a FakeClock.

The harness plays the adapter: it feeds events, runs cycles, and confirms BindGang decisions
by upserting the pods with their node (as the API watch would)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import (
    BindGang,
    Decision,
    GangTimedOut,
    GangUnschedulable,
    GangWaiting,
)
from gangsched.core.model import GangMode, GangSpec, Node, Pod, PodPhase, RoleSpec
from gangsched.core.resources import CPU, GPU
from gangsched.core.scheduler import Scheduler
from tests.core.builders import make_node, make_pod

T0 = 1000.0


def gpu_node(name: str, gpus: int, cpu: str = "32", memory: str = "128Gi") -> Node:
    return make_node(name).gpus(gpus).cpu(cpu).memory(memory).node()


def pod(
    name: str,
    group: str = "",
    gpus: int = 1,
    cpu: str = "1",
    memory: str = "1Gi",
    created: float = T0,
    **kw: object,
) -> Pod:
    built = make_pod(name).cpu(cpu).memory(memory)
    if gpus:
        built = built.gpus(gpus)
    p = built.obj()
    namespace = group.partition("/")[0] if group else "default"
    return replace(p, namespace=namespace, group=group, created=created, **kw)  # type: ignore[arg-type]


def members(group: str, n: int, prefix: str = "", **kw: object) -> list[Pod]:
    base = prefix or group.partition("/")[2]
    return [pod(f"{base}-{i}", group, **kw) for i in range(n)]  # type: ignore[arg-type]


class Harness:
    def __init__(self, config: CoreConfig | None = None, *nodes: Node) -> None:
        self.clock = FakeClock(T0)
        self.s = Scheduler(config or CoreConfig(), self.clock)
        self.decisions: list[Decision] = []
        for n in nodes:
            self.s.node_upsert(n)

    def add(self, *pods: Pod) -> None:
        for p in pods:
            self.s.pod_upsert(p)

    def gang(self, key: str, min_member: int, **kw: object) -> GangSpec:
        spec = GangSpec(key, min_member, created=kw.pop("created", T0), **kw)  # type: ignore[arg-type]
        self.s.gang_upsert(spec)
        return spec

    def run(self, confirm: bool = True) -> list[Decision]:
        out = self.s.run_until_idle()
        self.decisions.extend(out)
        if confirm:
            self.confirm(out)
        return out

    def confirm(self, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            if isinstance(d, BindGang):
                for b in d.bindings:
                    p = self.s.cache.pods[b.pod.uid]
                    self.s.pod_upsert(replace(p, node_name=b.node, phase=PodPhase.RUNNING))

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def finish(self, uid: str, phase: PodPhase = PodPhase.SUCCEEDED) -> None:
        self.s.pod_upsert(replace(self.s.cache.pods[uid], phase=phase))


def binds(decisions: Iterable[Decision]) -> list[BindGang]:
    return [d for d in decisions if isinstance(d, BindGang)]


def unschedulable(decisions: Iterable[Decision]) -> list[GangUnschedulable]:
    return [d for d in decisions if isinstance(d, GangUnschedulable)]


def bound_uids(decisions: Iterable[Decision]) -> set[str]:
    return {b.pod.uid for d in binds(decisions) for b in d.bindings}


def node_load(h: Harness) -> dict[str, int]:
    return {name: info.requested.get(GPU, 0) for name, info in h.s.cache.nodes.items()}


# ---- whole gangs -----------------------------------------------------------------------


def test_gang_of_four_binds_in_one_bind_gang() -> None:
    h = Harness(None, gpu_node("n1", 2), gpu_node("n2", 2))
    h.gang("ml/train", 4)
    h.add(*members("ml/train", 4))
    out = h.run(confirm=False)
    assert len(binds(out)) == 1
    bind = binds(out)[0]
    assert bind.gang == "ml/train"
    assert len(bind.bindings) == 4
    nodes = [b.node for b in bind.bindings]
    assert sorted(nodes) == ["n1", "n1", "n2", "n2"]
    assert len(h.s.cache.assumed) == 4  # reserved until the API confirms
    h.confirm(out)
    assert h.s.cache.assumed == {}
    assert node_load(h) == {"n1": 2, "n2": 2}
    view = h.s.view("ml/train")
    assert view is not None
    assert (view.bound, view.pending, view.reason) == (4, 0, "Scheduled")


def test_gang_that_cannot_fit_binds_nothing_and_holds_nothing() -> None:
    h = Harness(None, gpu_node("n1", 2), gpu_node("n2", 2))
    h.gang("ml/big", 5)
    h.add(*members("ml/big", 5))
    out = h.run()
    assert binds(out) == []
    [fail] = unschedulable(out)
    assert fail.reason == "Unschedulable"
    assert len(fail.pods) == 5
    assert "needs 5 nvidia.com/gpu" in fail.message  # the PreFilter fast fail
    assert h.s.cache.assumed == {}
    assert node_load(h) == {"n1": 0, "n2": 0}
    assert "ml/big" not in h.s.permit


def test_fragmented_gang_is_rolled_back_whole() -> None:
    """Enough GPUs in total (PreFilter passes) but no way to place every member: the members
    placed during the cycle are rolled back."""
    h = Harness(None, gpu_node("n1", 3), gpu_node("n2", 3))
    h.gang("ml/frag", 3)
    h.add(*members("ml/frag", 3, gpus=2))
    out = h.run()
    assert binds(out) == []
    [fail] = unschedulable(out)
    assert fail.reason == "Unschedulable"
    assert "2/3" in fail.message or "1/3" in fail.message
    assert h.s.cache.assumed == {}
    assert node_load(h) == {"n1": 0, "n2": 0}


def test_late_member_binds_all_together() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/late", 3)
    first = members("ml/late", 3)
    h.add(*first[:2])
    out = h.run()
    assert binds(out) == []
    [wait] = unschedulable(out)
    assert wait.reason == "WaitingForMembers"
    assert "2 of 3" in wait.message
    assert h.s.cache.assumed == {}
    assert h.s.queue.state_of("ml/late") == "unschedulable"
    h.add(first[2])
    out = h.run()
    [bind] = binds(out)
    assert {b.pod.uid for b in bind.bindings} == {p.uid for p in first}


def test_missing_podgroup_waits_then_binds() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.add(*members("ml/nopg", 2))
    out = h.run()
    [wait] = unschedulable(out)
    assert wait.reason == "PodGroupNotFound"
    assert binds(out) == []
    view = h.s.view("ml/nopg")
    assert view is not None
    assert view.reason == "PodGroupNotFound"
    h.advance(0.5)  # well inside any backoff: a gang event wakes it at once
    h.gang("ml/nopg", 2)
    out = h.run()
    [bind] = binds(out)
    assert len(bind.bindings) == 2


def test_waiting_for_members_is_not_retried_on_cluster_events() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/w", 3)
    h.add(*members("ml/w", 2))
    h.run()
    cycles = h.s.cycles
    h.s.node_upsert(gpu_node("n2", 4))
    h.advance(5)
    h.run()
    assert h.s.cycles == cycles


def test_roles_each_need_their_minimum() -> None:
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/roles", 3, roles=(RoleSpec("ps", 1), RoleSpec("worker", 2)))
    h.add(*members("ml/roles", 3, prefix="w", role="worker"))
    out = h.run()
    [wait] = unschedulable(out)
    assert wait.reason == "WaitingForMembers"
    h.add(pod("ps-0", "ml/roles", role="ps"))
    out = h.run()
    [bind] = binds(out)
    assert len(bind.bindings) == 4


def test_role_minimum_unmet_rolls_back_even_with_enough_members() -> None:
    """Two workers fit and reach minMember 2, but the ps role (min 1) cannot be placed: the
    Strict gang keeps nothing."""
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/roles", 2, roles=(RoleSpec("ps", 1), RoleSpec("worker", 1)))
    h.add(*members("ml/roles", 2, prefix="w", role="worker"))
    h.add(pod("ps-0", "ml/roles", gpus=8, role="ps"))
    out = h.run()
    assert binds(out) == []
    assert unschedulable(out)[0].reason == "Unschedulable"
    assert h.s.cache.assumed == {}
    assert node_load(h) == {"n1": 0}


# ---- competition and ordering ------------------------------------------------------------


def test_two_gangs_competing_one_binds_whole_other_nothing() -> None:
    h = Harness(None, gpu_node("n1", 2), gpu_node("n2", 2))
    h.gang("ml/a", 3)
    h.gang("ml/b", 3)
    a, b = members("ml/a", 3), members("ml/b", 3)
    for x, y in zip(a, b, strict=True):  # interleaved arrivals
        h.add(x, y)
    out = h.run()
    [bind] = binds(out)
    assert bind.gang == "ml/a"  # same priority and timestamp: the gang key decides
    assert len(bind.bindings) == 3
    assert bound_uids(out) == {p.uid for p in a}
    hb = h.s.holdings("ml/b")
    assert hb is not None
    assert (hb.bound, hb.reserved, len(hb.pending)) == (0, 0, 3)
    assert not any(p.uid in h.s.cache.assumed for p in b)


def test_higher_priority_gang_goes_first() -> None:
    h = Harness(None, gpu_node("n1", 2))
    h.gang("ml/low", 2, created=T0 - 100)
    h.gang("ml/high", 2, created=T0)
    h.add(*members("ml/low", 2, created=T0 - 100, priority=1))
    h.add(*members("ml/high", 2, priority=100))
    out = h.run()
    [bind] = binds(out)
    assert bind.gang == "ml/high"


def test_older_gang_first_at_equal_priority() -> None:
    h = Harness(None, gpu_node("n1", 1))
    h.add(pod("young", created=T0), pod("old", created=T0 - 50))
    out = h.run()
    [bind] = binds(out)
    assert bind.gang == "pod:uid-old"


def test_failed_gang_goes_behind_gangs_created_before_its_failure() -> None:
    h = Harness(None, gpu_node("n1", 2))
    h.gang("ml/first", 2, created=T0 - 10)
    h.add(*members("ml/first", 2, created=T0 - 10, gpus=2))  # cannot fit: fails at T0
    h.run()
    view = h.s.view("ml/first")
    assert view is not None
    assert view.last_failure == T0
    h.gang("ml/second", 1, created=T0 - 1)
    h.add(pod("second-0", "ml/second"))
    h.advance(10)
    h.s.node_upsert(gpu_node("n2", 2))  # both may now run; only order differs
    out = h.run()
    order = [d.gang for d in out if isinstance(d, BindGang | GangUnschedulable)]
    assert order[0] == "ml/second"
    assert "ml/first" in order


def test_plain_pods_are_gangs_of_one() -> None:
    h = Harness(None, gpu_node("n1", 2))
    h.add(pod("a"), pod("b"), pod("c"))
    out = h.run()
    gangs = [d.gang for d in binds(out)]
    assert gangs == ["pod:uid-a", "pod:uid-b"]
    assert all(len(d.bindings) == 1 for d in binds(out))
    [fail] = unschedulable(out)
    assert fail.gang == "pod:uid-c"
    assert h.s.view("pod:uid-c") is not None


def test_other_scheduler_pods_are_accounted_never_scheduled() -> None:
    h = Harness(None, gpu_node("n1", 2), gpu_node("n2", 2))
    h.add(pod("foreign-pending", scheduler_name="default-scheduler"))
    h.add(
        pod(
            "foreign-bound",
            gpus=2,
            scheduler_name="default-scheduler",
            node_name="n1",
            phase=PodPhase.RUNNING,
        )
    )
    h.gang("ml/g", 3)
    h.add(*members("ml/g", 3))
    out = h.run()
    assert binds(out) == []
    assert all(d.gang == "ml/g" for d in out)
    assert "pod:uid-foreign-pending" not in h.s.gangs
    assert "uid-foreign-pending" not in h.s.cache.assumed
    assert node_load(h) == {"n1": 2, "n2": 0}
    # The foreign pod finishes: its GPUs come back and the gang fits.
    h.finish("uid-foreign-bound")
    h.advance(1)
    out = h.run()
    [bind] = binds(out)
    assert bind.gang == "ml/g"
    assert {b.pod.uid for b in bind.bindings} == {f"uid-g-{i}" for i in range(3)}


# ---- backoff -------------------------------------------------------------------------


def test_backoff_doubles_up_to_the_cap_and_needs_an_event() -> None:
    cfg = CoreConfig(backoff_initial_seconds=1.0, backoff_max_seconds=5.0)
    h = Harness(cfg, gpu_node("n1", 1))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    h.run()
    assert h.s.cycles == 1
    waits: list[float] = []
    for _ in range(5):
        start = h.clock.now()
        h.s.node_upsert(gpu_node("n1", 1))  # a cluster event that does not help
        # Step in small increments: the gang is not tried before its backoff expires.
        while h.s.cycles == len(waits) + 1:
            h.advance(0.25)
            h.run()
            assert h.clock.now() - start <= 10, "never retried"
        waits.append(h.clock.now() - start)
    assert waits == [1.0, 2.0, 4.0, 5.0, 5.0]


def test_no_retry_without_event_until_the_flush() -> None:
    cfg = CoreConfig(unschedulable_flush_seconds=30.0)
    h = Harness(cfg, gpu_node("n1", 1))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    h.run()
    assert h.s.cycles == 1
    for _ in range(29):
        h.advance(1)
        h.run()
    assert h.s.cycles == 1
    assert h.s.next_wakeup() == T0 + 30
    h.advance(1)
    h.run()
    assert h.s.cycles == 2


def test_event_during_backoff_with_nothing_else_queued_retries_at_once() -> None:
    """Nothing else to schedule: the gang woken while it backs off is tried at the event (as
    kube-scheduler pops its backoff queue when the active queue is empty)."""
    h = Harness(CoreConfig(backoff_initial_seconds=4.0), gpu_node("n1", 1))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    h.run()
    h.advance(1)
    h.s.node_upsert(gpu_node("n2", 1))  # now it fits, 3 s before its backoff ends
    [bind] = binds(h.run())
    assert len(bind.bindings) == 2


def test_event_during_backoff_retries_at_expiry_when_other_work_took_the_room() -> None:
    """Something active is tried first; the woken gang, failing again, waits for the next
    event or its backoff (no retry at every pop)."""
    h = Harness(CoreConfig(backoff_initial_seconds=4.0), gpu_node("n1", 1))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    h.run()
    h.advance(1)
    h.s.pod_upsert(pod("solo", gpus=1))  # arrives, active
    h.s.node_upsert(gpu_node("n2", 1))  # the room it takes
    out = binds(h.run())
    assert [b.gang for b in out] == ["pod:uid-solo"]
    # failing again without a placement: n2 has room for a member, but the cluster has
    # 1 GPU free for the 2 it needs (the prefilter's answer)
    gang = h.s.gangs["ml/g"]
    assert h.s.cycles == 2 and gang.attempts == 2
    assert h.s.queue.state_of("ml/g") == "unschedulable"


def test_a_gang_that_nothing_freed_could_help_fails_again_without_a_placement() -> None:
    """Nothing else queued: a gang woken while it backs off is taken at once, but when no
    node freed since its failure has room for any of its members, it fails as its placement
    would (its backoff grows), without one; room freed later is tried at once, and a gang
    not placed for backoffMaxSeconds is placed whatever was freed (what else an event
    changes, through other nodes' pods, is covered that often)."""
    h = Harness(
        CoreConfig(backoff_initial_seconds=4.0, backoff_max_seconds=8.0),
        gpu_node("n1", 4),
        gpu_node("n2", 4),
    )
    small = [pod(f"s{i}", gpus=1, node_name="n1", phase=PodPhase.RUNNING) for i in range(4)]
    h.add(*small, pod("t0", gpus=4, node_name="n2", phase=PodPhase.RUNNING))
    h.gang("ml/g", 1)
    h.add(*members("ml/g", 1, gpus=3))
    h.run()
    gang = h.s.gangs["ml/g"]
    assert gang.attempts == 1
    cycles = h.s.cycles
    h.advance(1)
    h.finish(small[0].uid)  # 1 GPU free on n1: not room for 3
    assert binds(h.run()) == []
    assert h.s.cycles == cycles and gang.attempts == 2
    assert h.s.queue.state_of("ml/g") == "unschedulable"
    h.advance(8)  # 9 s since it was placed
    h.finish(small[1].uid)  # 2 free: still not room, but it is placed (and fails)
    assert binds(h.run()) == []
    assert h.s.cycles == cycles + 1 and gang.attempts == 3
    h.advance(1)
    h.finish(small[2].uid)  # now n1 has room
    [bind] = binds(h.run())
    assert bind.bindings[0].node == "n1" and h.s.cycles == cycles + 2


def test_what_an_idle_retry_checks_follows_the_members_as_they_change() -> None:
    """The asks an idle retry checks against the freed nodes are kept on the gang, and taken
    anew when a member changes: a member now asking less fits the room freed."""
    h = Harness(CoreConfig(backoff_initial_seconds=4.0), gpu_node("n1", 4))
    small = [pod(f"s{i}", gpus=1, node_name="n1", phase=PodPhase.RUNNING) for i in range(4)]
    h.add(*small)
    h.gang("ml/g", 1)
    [member] = members("ml/g", 1, gpus=3)
    h.add(member)
    h.run()
    gang = h.s.gangs["ml/g"]
    h.advance(1)
    h.finish(small[0].uid)  # 1 GPU free on n1
    now = h.clock.now()
    assert not h.s.freed_could_help(gang, now)
    assert not h.s.freed_could_help(gang, now), "(the kept asks)"
    h.s.pod_upsert(pod("g-0", "ml/g", gpus=1))  # the member asks 1 GPU now
    assert h.s.freed_could_help(gang, now)


def test_a_gang_whose_room_frees_pod_by_pod_is_placed_once_it_all_is() -> None:
    """A running gang's pods end one at a time: a waiting gang of as many one-GPU pods is
    taken each time, but while the cluster's free total is short of what it needs it fails
    as its prefilter would, without a placement and without a new answer (its message and
    every member's condition stay as written); placed once the last pod ends."""
    h = Harness(CoreConfig(backoff_initial_seconds=4.0), gpu_node("n1", 4))
    running = [pod(f"r{i}", gpus=1, node_name="n1", phase=PodPhase.RUNNING) for i in range(4)]
    h.add(*running)
    h.gang("ml/g", 4)
    h.add(*members("ml/g", 4))
    h.run()
    gang = h.s.gangs["ml/g"]
    message, cycles = gang.message, h.s.cycles
    assert "0 free" in message
    for r in running[:3]:
        h.advance(0.1)
        h.finish(r.uid)
        assert h.run() == []
        assert h.s.cycles == cycles and gang.message == message
    h.advance(0.1)
    h.finish(running[3].uid)
    [bind] = binds(h.run())
    assert bind.gang == "ml/g" and len(bind.bindings) == 4


def test_successful_gang_resets_attempts() -> None:
    h = Harness(None, gpu_node("n1", 1))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    h.run()
    h.advance(2)
    h.s.node_upsert(gpu_node("n1", 2))
    assert binds(h.run())
    assert h.s.gangs["ml/g"].attempts == 0


# ---- Permit: timeouts and gang groups ------------------------------------------------------


def test_nonstrict_partial_is_held_until_the_deadline() -> None:
    h = Harness(None, gpu_node("n1", 2))
    h.gang("ml/ns", 3, mode=GangMode.NON_STRICT, timeout_seconds=30.0)
    h.add(*members("ml/ns", 3))
    out = h.run()
    assert binds(out) == []
    [waiting] = [d for d in out if isinstance(d, GangWaiting)]
    assert waiting.reserved == 2
    assert waiting.deadline == T0 + 30
    assert len(h.s.cache.assumed) == 2
    assert "ml/ns" in h.s.permit
    h.advance(29.9)
    h.run()
    assert len(h.s.cache.assumed) == 2
    h.clock.set(T0 + 30)
    out = h.run()
    [timed_out] = [d for d in out if isinstance(d, GangTimedOut)]
    assert timed_out.gang == "ml/ns"
    assert len(timed_out.released) == 2
    assert h.s.cache.assumed == {}
    assert "ml/ns" not in h.s.permit
    assert node_load(h) == {"n1": 0}
    assert h.s.queue.state_of("ml/ns") in {"backoff", "active"}
    assert h.s.gangs["ml/ns"].reason in {"Timeout", "Waiting", "Unschedulable"}


def test_nonstrict_partial_completes_into_one_bind() -> None:
    h = Harness(None, gpu_node("n1", 2))
    h.gang("ml/ns", 3, mode=GangMode.NON_STRICT)
    h.add(*members("ml/ns", 3))
    h.run()
    h.advance(2)
    h.s.node_upsert(gpu_node("n2", 1))
    out = h.run()
    [bind] = binds(out)
    assert len(bind.bindings) == 3
    assert "ml/ns" not in h.s.permit


@pytest.mark.parametrize(
    ("override", "own", "expected"),
    [(None, None, 300.0), (None, 42.0, 42.0), (7.0, 42.0, 7.0), (7.0, None, 7.0)],
)
def test_timeout_precedence(override: float | None, own: float | None, expected: float) -> None:
    cfg = CoreConfig(schedule_timeout_override_seconds=override)
    h = Harness(cfg, gpu_node("n1", 1))
    h.gang("ml/ns", 2, mode=GangMode.NON_STRICT, timeout_seconds=own)
    h.add(*members("ml/ns", 2))
    out = h.run()
    [waiting] = [d for d in out if isinstance(d, GangWaiting)]
    assert waiting.deadline == T0 + expected
    h.clock.set(T0 + expected - 0.001)
    assert not any(isinstance(d, GangTimedOut) for d in h.run())
    h.clock.set(T0 + expected)
    assert any(isinstance(d, GangTimedOut) for d in h.run())


def test_gang_group_binds_only_when_every_sibling_is_satisfied() -> None:
    h = Harness(None, gpu_node("n1", 4))
    group = ("ml/a", "ml/b")
    h.gang("ml/a", 2, gang_group=group)
    h.gang("ml/b", 2, gang_group=group)
    h.add(*members("ml/a", 2))
    out = h.run()
    assert binds(out) == []  # ml/b has no members yet
    h.add(*members("ml/b", 2))
    out = h.run(confirm=False)
    waiting = [d for d in out if isinstance(d, GangWaiting)]
    assert [w.gang for w in waiting] == ["ml/a"]
    assert "gang group" in waiting[0].message
    # The second sibling's success releases both, in the same cycle.
    assert sorted(d.gang for d in binds(out)) == ["ml/a", "ml/b"]
    assert len(bound_uids(out)) == 4
    assert out.index(waiting[0]) < min(out.index(d) for d in binds(out))
    assert len(h.s.permit) == 0
    h.confirm(out)
    assert h.s.cache.assumed == {}
    assert node_load(h) == {"n1": 4}


def test_gang_group_released_at_the_deadline() -> None:
    """ml/a (a CPU pod) is placed and waits for ml/b, whose two 2-GPU pods fit the cluster's
    free total (4 GPUs) but not its nodes (3 + 1). At the deadline ml/a lets go."""
    h = Harness(None, gpu_node("n1", 3), gpu_node("n2", 1))
    group = ("ml/a", "ml/b")
    h.gang("ml/a", 1, gang_group=group, timeout_seconds=60.0)
    h.gang("ml/b", 2, gang_group=group, timeout_seconds=60.0)
    h.add(pod("a-0", "ml/a", gpus=0))
    h.add(*members("ml/b", 2, gpus=2))
    out = h.run()
    assert binds(out) == []
    assert [d.gang for d in out if isinstance(d, GangWaiting)] == ["ml/a"]
    assert h.s.cache.assumed.keys() == {"uid-a-0"}
    h.advance(59.9)
    assert binds(h.run()) == []
    assert "uid-a-0" in h.s.cache.assumed
    h.clock.set(T0 + 60)
    out = h.s.tick()
    [timed_out] = [d for d in out if isinstance(d, GangTimedOut)]
    assert timed_out.gang == "ml/a"
    assert [r.uid for r in timed_out.released] == ["uid-a-0"]
    assert h.s.cache.assumed == {}
    assert "ml/a" not in h.s.permit
    assert "ml/a" in h.s.queue
    assert node_load(h) == {"n1": 0, "n2": 0}


def test_release_is_idempotent_through_the_scheduler() -> None:
    h = Harness(None, gpu_node("n1", 2))
    h.gang("ml/ns", 3, mode=GangMode.NON_STRICT)
    h.add(*members("ml/ns", 3))
    h.run()
    first = h.s.permit_step.release("ml/ns", "Timeout", "test")
    state = (dict(h.s.cache.assumed), node_load(h), h.s.queue.state_of("ml/ns"))
    second = h.s.permit_step.release("ml/ns", "Timeout", "test")
    assert len(first) == 1
    assert second == []
    assert (dict(h.s.cache.assumed), node_load(h), h.s.queue.state_of("ml/ns")) == state


# ---- nodes, binding failures, finished members -------------------------------------------


def test_node_deleted_while_reserved_releases_the_gang() -> None:
    """A gang waiting at Permit with its reservations on a node that goes away."""
    h = Harness(None, gpu_node("n1", 2), gpu_node("n2", 0))
    h.gang("ml/ns", 3, mode=GangMode.NON_STRICT)
    h.add(*members("ml/ns", 3))
    h.run()
    assert set(h.s.cache.assumed.values()) == {"n1"}
    out = h.s.node_delete("n1")
    [released] = [d for d in out if isinstance(d, GangTimedOut)]
    assert released.gang == "ml/ns"
    assert h.s.cache.assumed == {}
    assert "ml/ns" not in h.s.permit
    assert "ml/ns" in h.s.queue


def test_node_deleted_while_reserved_next_to_a_bound_pod() -> None:
    h = Harness(None, gpu_node("n1", 3))
    h.add(pod("other", scheduler_name="default-scheduler", node_name="n1"))
    h.gang("ml/ns", 3, mode=GangMode.NON_STRICT)
    h.add(*members("ml/ns", 3))
    h.run()
    assert len(h.s.cache.assumed) == 2
    out = h.s.node_delete("n1")
    assert [d.gang for d in out if isinstance(d, GangTimedOut)] == ["ml/ns"]
    assert h.s.cache.assumed == {}
    assert h.s.cache.cluster_free(GPU) == 0
    h.s.node_upsert(gpu_node("n2", 4))
    h.advance(10)
    [bind] = binds(h.run())
    assert {b.node for b in bind.bindings} == {"n2"}


def test_bind_failed_drops_reservation_and_retries_after_backoff() -> None:
    h = Harness(CoreConfig(backoff_initial_seconds=1.0), gpu_node("n1", 2))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    [bind] = binds(h.run(confirm=False))
    ok, bad = bind.bindings
    h.confirm([BindGang("ml/g", (ok,))])
    h.s.bind_failed(bad.pod.uid, "conflict")
    assert bad.pod.uid not in h.s.cache.assumed
    assert node_load(h) == {"n1": 1}
    assert h.s.gangs["ml/g"].reason == "BindFailed"
    assert binds(h.run()) == []  # not before the backoff
    h.advance(1.0)
    out = h.run()
    assert bound_uids(out) == {bad.pod.uid}, "gang not retried once its backoff expired"


def test_bind_failed_for_unknown_pod_is_harmless() -> None:
    h = Harness(None, gpu_node("n1", 2))
    h.s.bind_failed("nope", "gone")
    h.add(pod("a"))
    assert binds(h.run())


def test_succeeded_members_count_toward_the_gang() -> None:
    h = Harness(None, gpu_node("n1", 1))
    h.gang("ml/g", 3)
    done = [pod(f"g-{i}", "ml/g", node_name="n1", phase=PodPhase.SUCCEEDED) for i in range(2)]
    h.add(*done)
    h.add(pod("g-2", "ml/g"))
    out = h.run()
    [bind] = binds(out)
    assert [b.pod.uid for b in bind.bindings] == ["uid-g-2"]
    hold = h.s.holdings("ml/g")
    assert hold is not None
    assert (hold.succeeded, hold.bound) == (2, 1)


def test_failed_members_do_not_count() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/g", 3)
    h.add(pod("g-0", "ml/g", node_name="n1", phase=PodPhase.FAILED))
    h.add(pod("g-1", "ml/g"), pod("g-2", "ml/g"))
    out = h.run()
    assert binds(out) == []
    assert [d.reason for d in unschedulable(out)] == ["WaitingForMembers"]


def test_invalid_pod_is_reported_and_never_placed() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.add(pod("bad", invalid_reason="requests.cpu: invalid quantity 'x'"))
    out = h.run()
    [invalid] = unschedulable(out)
    assert invalid.reason == "InvalidPod"
    assert [r.uid for r in invalid.pods] == ["uid-bad"]
    assert "invalid quantity" in invalid.message
    assert binds(out) == []
    assert h.s.cache.assumed == {}
    assert node_load(h) == {"n1": 0}


def test_invalid_member_does_not_block_valid_ones_from_being_counted() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    h.add(pod("g-bad", "ml/g", invalid_reason="conflicting group"))
    out = h.run()
    assert "InvalidPod" in [d.reason for d in unschedulable(out)]
    [bind] = binds(out)
    assert "uid-g-bad" not in {b.pod.uid for b in bind.bindings}
    assert len(bind.bindings) == 2


def test_prefilter_fails_fast_on_min_resources() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/g", 1, min_resources={GPU: 8})
    h.add(pod("g-0", "ml/g"))
    out = h.run()
    [fail] = unschedulable(out)
    assert fail.reason == "Unschedulable"
    assert "nvidia.com/gpu" in fail.message
    assert h.s.cache.assumed == {}


def test_prefilter_does_not_reject_a_gang_that_fits() -> None:
    """minMember 1 of {a one-GPU pod, a CPU-only pod} on a CPU-only node: the CPU pod alone
    satisfies the gang, so the fast fail must not declare it hopeless."""
    cpu_only = make_node("c1").cpu("4").memory("8Gi").node()
    h = Harness(None, cpu_only)
    h.gang("ml/g", 1)
    h.add(pod("g-gpu", "ml/g", gpus=1, cpu="100m", memory="1Mi"))
    h.add(pod("g-cpu", "ml/g", gpus=0, cpu="2", memory="1Gi"))
    out = h.run()
    assert bound_uids(out) == {"uid-g-cpu"}, [d for d in out if not isinstance(d, BindGang)]


def test_cpu_only_plain_pods_fill_nodes_without_overcommit() -> None:
    h = Harness(None, make_node("c1").cpu("2").node(), make_node("c2").cpu("2").node())
    h.add(*(pod(f"p{i}", gpus=0, cpu="1", memory="0") for i in range(5)))
    out = h.run()
    assert len(binds(out)) == 4
    assert all(info.requested.get(CPU, 0) <= 2000 for info in h.s.cache.nodes.values())


def test_pod_deleted_while_pending_leaves_no_trace() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/g", 3)
    ps = members("ml/g", 2)
    h.add(*ps)
    h.run()
    for p in ps:
        h.s.pod_delete(p.uid)
    assert h.s.gangs["ml/g"].members == set()
    assert h.s.cache.pods == {}


def test_node_deleted_while_binding_in_flight_does_not_bind_twice() -> None:
    """A BindGang was sent and not yet confirmed when its node went away. Until the adapter
    reports the outcome (bind_failed, or the pod bound), those pods must not be placed and
    sent in a second BindGang: the first binding may still land."""
    h = Harness(None, gpu_node("n1", 2), gpu_node("n2", 2))
    h.gang("ml/g", 2)
    h.add(*members("ml/g", 2))
    [bind] = binds(h.run(confirm=False))
    victim = bind.bindings[0].node
    in_flight = {b.pod.uid for b in bind.bindings if b.node == victim}
    h.s.node_delete(victim)
    h.gang("ml/g", 2)  # any event of the gang, e.g. a PodGroup status update
    h.advance(61)
    out = h.run(confirm=False)
    again = bound_uids(out) & in_flight
    assert not again, f"{sorted(again)} sent in a second BindGang while the first is in flight"
    # Once the adapter reports the failures, the gang is free to try again.
    for uid in sorted(in_flight):
        h.s.bind_failed(uid, f"node {victim} not found")
    h.advance(61)
    assert bound_uids(h.run()) == in_flight
