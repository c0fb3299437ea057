"""Property tests: random clusters and workloads through the core and the simulator.

Properties:
- no node is ever over-committed in any resource (checked after every step against the
  test's own accounting of applied bindings plus the cache's reservations);
- a Strict gang always holds (bound + reserved + succeeded) 0 or at least minMember members;
- no reservation leaks and no gang is retried before its backoff ends (no hot loop);
- releasing twice equals releasing once (PermitMap.release, ClusterCache.forget);
- the queue pops whole gangs in an order that is total and consistent with the sort key,
  and behaves like a plain reference model (three sets, flush due at next_wakeup());
- the same input gives the same decisions, in this process and under another hash seed;
- no pod is lost: at the end every pod is bound, or pending in its gang with a reason;
- all of it across restarts on the cluster as the API holds it (bindings not yet confirmed
  lost), and a gang the scheduler failed on (``Scheduler.hold_back``, recorded on its pods) is
  not bound before its hold ends.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.model import GangMode, GangSpec, GpuDevice, Node, Pod, PodPhase
from gangsched.core.permit import PermitMap
from gangsched.core.queue import SchedulingQueue, SortKey, Wake
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler
from gangsched.sim.engine import SimResult, Simulation
from tests.property.strategies import (
    JobDef,
    World,
    clusters,
    decision_digest,
    instrumented_simulation,
    ops,
    run_world,
    workloads,
)

ROOT = Path(__file__).resolve().parents[2]

# No explain phase: it re-runs each failure many times, and the shrunk case says enough.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink)
FAST = settings(
    max_examples=150,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SLOW = settings(
    max_examples=60,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    phases=PHASES,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---- hand-driven interleavings -----------------------------------------------------------


@FAST
@given(nodes=clusters(), jobs=workloads(), script=ops())
def test_interleavings_keep_the_invariants(
    nodes: list[Node], jobs: list[JobDef], script: list[tuple[Any, ...]]
) -> None:
    """Arrivals, specs, cycles, late/failed bind confirmations, completions, foreign pods,
    cordons, node deletions, clock jumps, restarts and failures inside the scheduler in any
    order: every invariant holds after every event, and at the end no pod is lost."""
    run_world(nodes, jobs, script)


def _node(name: str, memory_gi: int = 1, gpus: int = 0) -> Node:
    allocatable = {CPU: 1000, MEMORY: memory_gi * 2**30, PODS: 4}
    if gpus:
        allocatable[GPU] = gpus
    return Node(
        name=name,
        allocatable=allocatable,
        gpus=tuple(GpuDevice(index=i, model="", memory=0) for i in range(gpus)),
    )


def test_members_a_preemption_left_unplaced_stay_queued() -> None:
    """Found by the properties: a gang of six (minMember 5) preempts for the five members
    that fit and binds them once the victims are gone; the sixth, which did not fit, was in
    no queue (a lost pod). It is tried again at once."""
    small = ((CPU, 100), (MEMORY, 2**27), (PODS, 1))
    two, four = (*small[:2], (GPU, 2), small[2]), (*small[:2], (GPU, 4), small[2])
    nodes = [_node("n0"), _node("n1"), _node("n2", 2, 5), _node("n3"), _node("n4", 1, 4)]
    jobs = [
        JobDef(
            key="team/g0",
            gang=True,
            min_member=5,
            mode=GangMode.STRICT,
            priority=1,
            arrival=0.0,
            duration=1.0,
            pod_requests=(small, small, small, two, four, four),
            timeout=None,
        )
    ]
    script = [("arrive", 0, 1)] * 11 + [("spec", 0)] * 3 + [("foreign", 2, 2, True)]
    run_world(nodes, jobs, script)


@SLOW
@given(nodes=clusters(), jobs=workloads(), script=ops(max_size=40))
def test_interleavings_are_deterministic(
    nodes: list[Node], jobs: list[JobDef], script: list[tuple[Any, ...]]
) -> None:
    first = run_world(nodes, jobs, script)
    second = run_world(nodes, jobs, script)
    assert first.decisions == second.decisions
    assert first.s.cache.assumed == second.s.cache.assumed


@SLOW
@given(
    nodes=clusters(max_nodes=4),
    jobs=workloads(max_gangs=5, max_plain=2, nonstrict=False),
    script=ops(max_size=30),
)
def test_strict_workloads_with_fast_flush(
    nodes: list[Node], jobs: list[JobDef], script: list[tuple[Any, ...]]
) -> None:
    """The same with a short flush and backoff, so retries interleave densely with events."""
    cfg = CoreConfig(
        backoff_initial_seconds=0.5, backoff_max_seconds=2.0, unschedulable_flush_seconds=3.0
    )
    run_world(nodes, jobs, script, cfg)


# ---- the simulator -----------------------------------------------------------------------


def _check_sim_end(result: SimResult, sim: Simulation) -> None:
    assert result.overcommitted_nodes == set()
    assert result.partial_gangs == set()
    s = sim.scheduler
    for job in result.jobs:
        for p in job.pods:
            now = sim.pods[p.uid]
            if now.node_name:
                continue
            key = job.key if job.spec is not None else "pod:" + p.uid
            gang = s.gangs.get(key)
            assert gang is not None, f"pending pod {p.uid}: gang {key} forgotten"
            assert p.uid in gang.members, f"pending pod {p.uid} dropped from {key}"
            assert p.uid in s.cache.pods, f"pending pod {p.uid} dropped from the cache"
            assert gang.reason, f"pending pod {p.uid}: no reason on {key}"


@FAST
@given(nodes=clusters(), jobs=workloads())
def test_simulation_invariants(nodes: list[Node], jobs: list[JobDef]) -> None:
    sim, _ = instrumented_simulation(nodes, jobs)
    result = sim.run()
    _check_sim_end(result, sim)
    assert result.pods_bound == sum(1 for p in sim.pods.values() if p.node_name)


@SLOW
@given(nodes=clusters(), jobs=workloads())
def test_simulation_is_deterministic(nodes: list[Node], jobs: list[JobDef]) -> None:
    sim1, log1 = instrumented_simulation(nodes, jobs)
    r1 = sim1.run()
    sim2, log2 = instrumented_simulation(nodes, jobs)
    r2 = sim2.run()
    assert log1 == log2
    assert r1.timeline == r2.timeline
    assert (r1.pods_bound, r1.cycles, r1.timeouts) == (r2.pods_bound, r2.cycles, r2.timeouts)


def test_decisions_do_not_depend_on_the_hash_seed() -> None:
    """Set and dict iteration order of strings changes with PYTHONHASHSEED; the decisions
    must not."""
    code = (
        "from tests.property.strategies import decision_digest as d; "
        "print(','.join(d(s) for s in (1, 2, 3)))"
    )
    digests = set()
    for hash_seed in ("0", "1", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        out = subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        assert out.returncode == 0, out.stderr[-2000:]
        digests.add(out.stdout.strip())
    assert len(digests) == 1
    assert digests == {",".join(decision_digest(s) for s in (1, 2, 3))}


# ---- the queue -----------------------------------------------------------------------------

GANG_NAMES = ["ns/a", "ns/b", "ns/c", "pod:d", "pod:e", "ns/f"]
_gang = st.sampled_from(GANG_NAMES)
_key = st.tuples(st.integers(-2, 2), st.sampled_from([0.0, 1.0, 2.5]))
_offset = st.sampled_from([0.0, 0.5, 2.0, 10.0, 100.0])
_wake = st.sampled_from([Wake.GANG, Wake.CLUSTER])
_queue_op = st.one_of(
    st.tuples(st.just("activate"), _gang, _key),
    st.tuples(st.just("requeue"), _gang, _key, _offset, _wake),
    st.tuples(st.just("backoff"), _gang, _key, _offset),
    st.tuples(st.just("remove"), _gang),
    st.tuples(
        st.just("wake"),
        _wake,
        st.none() | st.lists(_gang, unique=True, max_size=3),
    ),
    st.tuples(st.just("flush")),
    st.tuples(st.just("pop")),
    st.tuples(st.just("advance"), st.sampled_from([0.1, 0.25, 1.0, 5.0, 30.0])),
)


@dataclass
class _Entry:
    state: str  # "active" | "backoff" | "unschedulable"
    until: float = 0.0
    wake: Wake | None = None
    since: float = 0.0
    # backing off or parked on cluster events: None (neither), False (no cluster event after
    # it failed), True (capacity freed later: it may jump its backoff if it outranks the head)
    jump: bool | None = None
    failed: float = 0.0  # when it went to backoff or was parked on cluster events
    errored: bool = False  # backing off after an error (a failed binding)


class QueueModel:
    """A reference model of SchedulingQueue: one entry per gang, no heaps. A parked gang is
    due for the flush at ``since + flush_after``, the time ``next_wakeup`` announces. A gang
    backing off or parked on cluster events that saw a cluster wake at a later time than its
    failure is popped before the active head when its (part-bound, priority) outranks the head's;
    with nothing active, the first such gang backing off (not after an error) is popped."""

    def __init__(self, clock: FakeClock, flush_after: float) -> None:
        self.clock = clock
        self.flush_after = flush_after
        self.entries: dict[str, _Entry] = {}
        self.keys: dict[str, SortKey] = {}

    def _ready(self, g: str, until: float) -> None:
        now = self.clock.now()
        e = self.entries[g]
        if until <= now:
            self.entries[g] = _Entry("active")
        else:
            self.entries[g] = _Entry(
                "backoff", until, jump=e.jump, failed=e.failed, errored=e.errored
            )

    def activate(self, g: str, k: SortKey) -> None:
        self.keys[g] = k
        if g not in self.entries or self.entries[g].state == "active":
            self.entries[g] = _Entry("active")

    def requeue(self, g: str, k: SortKey, until: float, wake: Wake) -> None:
        self.keys[g] = k
        now = self.clock.now()
        jump = False if wake is Wake.CLUSTER else None
        self.entries[g] = _Entry("unschedulable", until, wake, now, jump, now)

    def backoff(self, g: str, k: SortKey, until: float) -> None:
        self.keys[g] = k
        self.entries[g] = _Entry(
            "backoff", until, jump=False, failed=self.clock.now(), errored=True
        )

    def remove(self, g: str) -> None:
        self.entries.pop(g, None)
        self.keys.pop(g, None)

    def wake(self, wake: Wake, gangs: list[str] | None) -> int:
        if wake is Wake.CLUSTER:
            for e in self.entries.values():
                if e.jump is False and e.failed < self.clock.now():
                    e.jump = True
        chosen = [
            g
            for g, e in self.entries.items()
            if e.state == "unschedulable" and e.wake is wake and (gangs is None or g in gangs)
        ]
        for g in chosen:
            self._ready(g, self.entries[g].until)
        return len(chosen)

    def flush(self) -> None:
        now = self.clock.now()
        for g, e in list(self.entries.items()):
            if e.state == "backoff" and e.until <= now:
                self.entries[g] = _Entry("active")
            elif e.state == "unschedulable" and now >= e.since + self.flush_after:
                self._ready(g, e.until)

    def active_order(self) -> list[str]:
        return sorted(
            (g for g, e in self.entries.items() if e.state == "active"), key=self.keys.__getitem__
        )

    def pop(self) -> str | None:
        order = self.active_order()
        if not order:
            idle = sorted(
                (
                    g
                    for g, e in self.entries.items()
                    if e.jump is True and e.state == "backoff" and not e.errored
                ),
                key=self.keys.__getitem__,
            )
            if not idle:
                return None
            del self.entries[idle[0]]
            return idle[0]
        jumpers = sorted(
            (g for g, e in self.entries.items() if e.jump is True), key=self.keys.__getitem__
        )
        head = order[0]
        if jumpers and self.keys[jumpers[0]][:2] < self.keys[head][:2]:
            head = jumpers[0]
        del self.entries[head]
        return head

    def next_wakeup(self) -> float | None:
        times = [e.until for e in self.entries.values() if e.state == "backoff"]
        times += [
            e.since + self.flush_after for e in self.entries.values() if e.state == "unschedulable"
        ]
        return min(times) if times else None

    def state_of(self, g: str) -> str:
        e = self.entries.get(g)
        return e.state if e is not None else ""


@FAST
@given(script=st.lists(_queue_op, max_size=80))
# a gang parked on cluster events, filed again under a new key before the event: the event
# after its failure still lets it jump its backoff
@example(
    script=[
        ("activate", "ns/a", (1, 0.0)),
        ("requeue", "ns/b", (0, 1.0), 0.5, Wake.CLUSTER),
        ("advance", 0.1),
        ("activate", "ns/b", (0, 0.0)),
        ("wake", Wake.CLUSTER, None),
    ]
)
def test_queue_matches_a_reference_model(script: list[tuple[Any, ...]]) -> None:
    clock = FakeClock(100.0)
    q = SchedulingQueue(clock, flush_after=20.0)
    m = QueueModel(clock, 20.0)
    for op in script:
        kind = op[0]
        if kind == "advance":
            clock.advance(op[1])
            continue
        if kind in ("activate", "requeue", "backoff"):
            g: str = op[1]
            prio, ts = op[2]
            k: SortKey = (1, prio, ts, g)
            if kind == "activate":
                q.activate(g, k)
                m.activate(g, k)
            elif kind == "requeue":
                until = clock.now() + op[3]
                q.requeue(g, k, until, op[4])
                m.requeue(g, k, until, op[4])
            else:
                until = clock.now() + op[3]
                q.backoff(g, k, until)
                m.backoff(g, k, until)
        elif kind == "remove":
            q.remove(op[1])
            m.remove(op[1])
        elif kind == "wake":
            assert q.wake(op[1], op[2]) == m.wake(op[1], op[2])
        elif kind == "flush":
            q.flush()
            m.flush()
        elif kind == "pop":
            assert q.pop() == m.pop()
        order = q.active_order()
        assert order == m.active_order()
        assert len(set(order)) == len(order)
        assert q.next_wakeup() == m.next_wakeup()
        for name in GANG_NAMES:
            assert q.state_of(name) == m.state_of(name), name
            assert (name in q) == (m.state_of(name) != "")
    drained = []
    while (gang := q.pop()) is not None:
        drained.append(gang)
    expected = []  # the model's own pops: gangs that may jump their backoff come out too
    while (gang := m.pop()) is not None:
        expected.append(gang)
    assert drained == expected


_member = st.tuples(
    st.integers(0, 7),  # gang index
    st.integers(0, 2),  # GPUs
)


@st.composite
def _queue_case(draw: st.DrawFn) -> tuple[list[tuple[bool, int, float, int]], list[Any]]:
    gangs = [
        (
            draw(st.booleans()),  # a group (True) or plain pods
            draw(st.integers(0, 3)),  # priority
            float(draw(st.integers(1, 50))),  # creation
            draw(st.integers(1, 3)),  # minMember
        )
        for _ in range(8)
    ]
    events = draw(
        st.lists(
            st.one_of(
                st.tuples(st.just("pod"), _member),
                st.tuples(st.just("spec"), st.integers(0, 7)),
                st.tuples(st.just("step")),
                st.tuples(st.just("advance"), st.sampled_from([0.5, 3.0, 20.0])),
            ),
            min_size=1,
            max_size=50,
        )
    )
    return gangs, events


@FAST
@given(case=_queue_case(), gpus=st.integers(0, 3))
def test_gangs_are_contiguous_and_ordered_by_the_sort_key(
    case: tuple[list[tuple[bool, int, float, int]], list[tuple[Any, ...]]], gpus: int
) -> None:
    gangs, events = case
    clock = FakeClock(100.0)
    s = Scheduler(CoreConfig(), clock)
    alloc = {CPU: 64_000, MEMORY: 2**38, PODS: 110}
    if gpus:
        alloc[GPU] = gpus
    s.node_upsert(Node("n0", alloc))
    created: dict[str, float] = {}
    priority: dict[str, int] = {}
    n_pods = 0
    for ev in events:
        if ev[0] == "pod":
            gi, g = ev[1]
            is_group, prio, ts, _ = gangs[gi]
            n_pods += 1
            name = f"p{n_pods}"
            p = Pod(
                f"uid-{name}",
                "ns",
                name,
                {CPU: 100, PODS: 1, **({GPU: g} if g else {})},
                created=ts,
                priority=prio,
                group=f"ns/g{gi}" if is_group else "",
            )
            key = p.group or "pod:" + p.uid
            created[key], priority[key] = ts, prio
            s.pod_upsert(p)
        elif ev[0] == "spec":
            gi = ev[1]
            is_group, prio, ts, min_member = gangs[gi]
            if is_group:
                s.gang_upsert(GangSpec(f"ns/g{gi}", min_member, created=ts))
        elif ev[0] == "step":
            s.schedule_one()
        else:
            clock.advance(ev[1])
    # Every backoff expires and every parked gang is flushed back to active.
    clock.advance(CoreConfig().unschedulable_flush_seconds + CoreConfig().backoff_max_seconds)
    s.tick()

    def expected(key: str) -> SortKey:
        # (gangs part-way bound first, higher priority, creation or last failure, key)
        view = s.view(key)
        assert view is not None
        ts = view.last_failure if view.last_failure is not None else created[key]
        part_bound = view.bound > 0 and not view.satisfied_once
        return (0 if part_bound else 1, -priority[key], ts, key)

    order = s.queue.active_order()
    keys = [expected(g) for g in order]
    assert keys == sorted(keys), "active order disagrees with the sort key"
    assert len(set(keys)) == len(keys), "order is not total"
    # Flatten: each gang's pending pods, gang after gang.
    flat: list[tuple[str, str]] = []
    for g in order:
        h = s.holdings(g)
        assert h is not None
        flat += [(g, p.uid) for p in h.pending]
    seen: list[str] = []
    for g, _ in flat:
        if not seen or seen[-1] != g:
            assert g not in seen, f"gang {g} interleaved with another gang"
            seen.append(g)
    # Every pending pod is in exactly one gang, and that gang is queued.
    pending = {
        uid for uid, p in s.cache.pods.items() if not p.node_name and uid not in s.cache.assumed
    }
    assert sorted(uid for _, uid in flat) == sorted(pending)
    popped = []
    while (g := s.queue.pop()) is not None:
        popped.append(g)
    assert popped == order


# ---- idempotent release -------------------------------------------------------------------


@FAST
@given(
    waits=st.lists(
        st.tuples(
            st.sampled_from(["a", "b", "c"]),
            st.dictionaries(
                st.sampled_from(["u1", "u2", "u3", "u4"]), st.sampled_from(["n1", "n2"])
            ),
            st.floats(0, 100, allow_nan=False),
        ),
        max_size=8,
    ),
    drops=st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["u1", "u2"]))),
    victim=st.sampled_from(["a", "b", "c"]),
)
def test_permit_release_twice_equals_once(
    waits: list[tuple[str, dict[str, str], float]],
    drops: list[tuple[str, str]],
    victim: str,
) -> None:
    def build() -> PermitMap:
        pm = PermitMap()
        for k, placements, deadline in waits:
            pm.wait(k, dict(placements), deadline)
        for k, uid in drops:
            pm.drop_pod(k, uid)
        return pm

    def state(pm: PermitMap) -> object:
        return [(k, pm.get(k).deadline, dict(pm.get(k).reserved)) for k in pm.waiting_gangs()]  # type: ignore[union-attr]

    once, twice = build(), build()
    r1 = once.release(victim)
    r2a = twice.release(victim)
    r2b = twice.release(victim)
    assert r1 == r2a
    assert r2b == {}
    assert state(once) == state(twice)
    assert victim not in twice
    assert once.next_deadline() == twice.next_deadline()


_cache_op = st.one_of(
    st.tuples(
        st.just("pod"), st.integers(0, 5), st.integers(0, 3), st.sampled_from(["", "n1", "n2"])
    ),
    st.tuples(st.just("assume"), st.integers(0, 5), st.sampled_from(["n1", "n2"])),
    st.tuples(st.just("phase"), st.integers(0, 5), st.sampled_from(list(PodPhase))),
    st.tuples(st.just("forget"), st.integers(0, 5)),
    st.tuples(st.just("remove"), st.integers(0, 5)),
)


def _cache_state(c: ClusterCache) -> object:
    return (
        sorted((n, sorted(i.requested.items()), sorted(i.pods)) for n, i in c.nodes.items()),
        sorted(c.assumed.items()),
        sorted(c.total_requested.items()),
        sorted(c.total_allocatable.items()),
        sorted(c.gpu_bucket_sizes().items()),
        sorted((u, c.node_of(u)) for u in c.pods),
    )


@FAST
@given(script=st.lists(_cache_op, max_size=30), victim=st.integers(0, 5))
def test_cache_forget_twice_equals_once(script: list[tuple[Any, ...]], victim: int) -> None:
    def build() -> ClusterCache:
        c = ClusterCache()
        c.upsert_node(Node("n1", {GPU: 8, CPU: 8000, PODS: 110}))
        c.upsert_node(Node("n2", {GPU: 4, CPU: 8000, PODS: 110}))
        for op in script:
            uid = f"u{op[1]}"
            if op[0] == "pod":
                req = {CPU: 100, PODS: 1, GPU: op[2]} if op[2] else {CPU: 100, PODS: 1}
                old = c.pods.get(uid)
                phase = old.phase if old is not None else PodPhase.PENDING
                c.upsert_pod(Pod(uid, "ns", uid, req, node_name=op[3], phase=phase))
            elif op[0] == "assume" and uid in c.pods and not c.pods[uid].node_name:
                # The scheduler only reserves pods that are not bound.
                c.assume(uid, op[2])
            elif op[0] == "phase" and uid in c.pods:
                c.upsert_pod(replace(c.pods[uid], phase=op[2]))
            elif op[0] == "forget":
                c.forget(uid)
            elif op[0] == "remove":
                c.remove_pod(uid)
        return c

    once, twice = build(), build()
    assert _cache_state(once) == _cache_state(twice)
    once.forget(f"u{victim}")
    twice.forget(f"u{victim}")
    twice.forget(f"u{victim}")
    assert _cache_state(once) == _cache_state(twice)
    assert f"u{victim}" not in twice.assumed
    # Whatever happened, the counts equal a recount from scratch.
    for name in ("n1", "n2"):
        expected: dict[str, int] = {}
        for uid, pod in twice.pods.items():
            where = pod.node_name if pod.node_name else twice.assumed.get(uid, "")
            if where == name and not pod.terminal:
                for k, v in pod.requests.items():
                    expected[k] = expected.get(k, 0) + v
        got = twice.nodes[name].requested if name in twice.nodes else {}
        assert {k: v for k, v in got.items() if v} == expected


@SLOW
@given(
    nodes=clusters(max_nodes=3), jobs=workloads(max_gangs=4, max_plain=1), script=ops(max_size=30)
)
def test_scheduler_release_twice_equals_once(
    nodes: list[Node], jobs: list[JobDef], script: list[tuple[Any, ...]]
) -> None:
    """Releasing every gang waiting at Permit a second time changes nothing."""
    jobs = [replace(j, mode=GangMode.NON_STRICT, timeout=1000.0) if j.gang else j for j in jobs]
    w = World(nodes, jobs)
    for op in script:
        w.apply(op)
    for key in w.s.permit.waiting_gangs():
        assert w.s.permit_step.release(key, "Released", "test")
        state = (dict(w.s.cache.assumed), _cache_state(w.s.cache), w.s.queue.counts())
        assert w.s.permit_step.release(key, "Released", "test") == []
        assert (dict(w.s.cache.assumed), _cache_state(w.s.cache), w.s.queue.counts()) == state
        w.check()
