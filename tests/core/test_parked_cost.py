"""Parked pods that cannot fit cost one search and one diagnosis per class and cluster change.

K identical pods that fail on an unchanged cluster share one failure (core/equivalence.py):
node filter calls grow with the nodes, not with K times the nodes. Every pod still gets its
Unschedulable status and message, any change that could make them fit retries them for real,
and a run with the sharing gives exactly the decisions of a run without it.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial

import pytest

from gangsched.core.cache import NodeInfo
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision, GangUnschedulable, Preempt
from gangsched.core.equivalence import pod_class
from gangsched.core.framework import Status
from gangsched.core.gpu_mix import GpuMix, RequestClass
from gangsched.core.model import (
    LabelSelector,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodPhase,
)
from gangsched.core.plugins import NodeResourcesFit
from gangsched.core.profile import PLACEMENT_PROFILES
from gangsched.core.scheduler import Scheduler
from tests.core.builders import make_node, make_pod

HOSTNAME = "kubernetes.io/hostname"


def _scheduler(nodes: int, cpu: str = "8", config: CoreConfig | None = None) -> Scheduler:
    s = Scheduler(config or CoreConfig(), FakeClock(1000.0))
    for i in range(nodes):
        s.node_upsert(make_node(f"n{i}").cpu(cpu).label(HOSTNAME, f"n{i}").node())
    return s


def _advance(s: Scheduler, seconds: float) -> None:
    assert isinstance(s.clock, FakeClock)
    s.clock.advance(seconds)


def _bind(s: Scheduler, out: list[Decision]) -> list[str]:
    """Confirm every binding as the API would; the names of the pods bound."""
    bound: list[str] = []
    for d in out:
        if isinstance(d, BindGang):
            for b in d.bindings:
                pod = s.cache.pods[b.pod.uid]
                s.pod_upsert(replace(pod, node_name=b.node, phase=PodPhase.RUNNING))
                bound.append(b.pod.name)
    return bound


def _unschedulable(out: list[Decision]) -> dict[str, str]:
    """Pod name -> the message of its latest Unschedulable decision."""
    return {ref.name: d.message for d in out if isinstance(d, GangUnschedulable) for ref in d.pods}


@pytest.fixture
def filter_calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts NodeResourcesFit's Filter calls: one per node a search or a diagnosis visits
    for a pod that fails on resources."""
    calls = [0]
    original = NodeResourcesFit.filter

    def counted(self: NodeResourcesFit, pod: Pod, node: NodeInfo) -> Status:
        calls[0] += 1
        return original(self, pod, node)

    monkeypatch.setattr(NodeResourcesFit, "filter", counted)
    yield calls


def test_k_identical_parked_pods_cost_node_visits_not_k_times_nodes(
    filter_calls: list[int],
) -> None:
    nodes, k = 40, 200
    s = _scheduler(nodes)
    for i in range(k):
        s.pod_upsert(make_pod(f"big{i}").cpu("16").obj())  # more than any node has
    out = s.run_until_idle()
    # every pod has its status and the same kube-scheduler-style message
    messages = _unschedulable(out)
    assert len(messages) == k
    assert set(messages.values()) == {
        f"1/1 pending pods of the gang unschedulable (minMember 1, holding 0): "
        f"0/{nodes} nodes are available: {nodes} Insufficient cpu."
    }
    # one search and one diagnosis over the nodes, whatever k
    assert filter_calls[0] == 2 * nodes
    assert s.failures.stored == 1 and s.failures.hits == k - 1

    # the periodic flush retries every parked pod. They have now waited long enough for a
    # reservation: the first one searches again, and for a reservation (there is none to
    # make); the others share that. Its diagnosis is the one made on the same cluster.
    _advance(s, s.config.unschedulable_flush_seconds + 1)
    before = filter_calls[0]
    out = s.run_until_idle()
    assert len(_unschedulable(out)) == k
    assert filter_calls[0] - before == nodes
    # the next flush: the cluster has not changed, so none of them walks the nodes again
    _advance(s, s.config.unschedulable_flush_seconds + 1)
    before = filter_calls[0]
    out = s.run_until_idle()
    assert len(_unschedulable(out)) == k
    assert filter_calls[0] == before

    # a node that still cannot hold them: retried (a node event may help), one search again
    s.node_upsert(make_node("extra").cpu("12").label(HOSTNAME, "extra").node())
    _advance(s, s.config.backoff_max_seconds + 1)
    before = filter_calls[0]
    out = s.run_until_idle()
    messages = _unschedulable(out)
    assert len(messages) == k
    assert set(messages.values()) == {
        f"1/1 pending pods of the gang unschedulable (minMember 1, holding 0): "
        f"0/{nodes + 1} nodes are available: {nodes + 1} Insufficient cpu."
    }
    assert filter_calls[0] - before == 2 * (nodes + 1)


def test_classes_are_searched_once_each(filter_calls: list[int]) -> None:
    nodes, k = 30, 60
    s = _scheduler(nodes)
    for i in range(k):
        s.pod_upsert(make_pod(f"p{i}").cpu(str(9 + i % 3)).obj())  # three classes
    out = s.run_until_idle()
    assert len(_unschedulable(out)) == k
    assert filter_calls[0] == 3 * 2 * nodes


def test_a_node_that_fits_some_of_them_takes_as_many_as_fit() -> None:
    s = _scheduler(10)
    for i in range(50):
        s.pod_upsert(make_pod(f"big{i}").cpu("16").obj())
    assert len(_unschedulable(s.run_until_idle())) == 50
    s.node_upsert(make_node("large").cpu("48").label(HOSTNAME, "large").node())
    _advance(s, s.config.backoff_max_seconds + 1)
    out = s.run_until_idle()
    bound = _bind(s, out)
    assert len(bound) == 3  # 48 cores hold three 16-core pods
    left = _unschedulable(out)
    assert len(left) == 47 and not set(bound) & set(left)
    assert all(m.endswith("0/11 nodes are available: 11 Insufficient cpu.") for m in left.values())


def test_capacity_freed_by_a_finished_pod_is_taken_by_a_parked_pod() -> None:
    s = _scheduler(2, cpu="4")
    for i in range(2):
        s.pod_upsert(make_pod(f"run{i}").cpu("3").obj())
    assert len(_bind(s, s.run_until_idle())) == 2
    for i in range(20):
        s.pod_upsert(make_pod(f"wait{i}").cpu("2").obj())
    assert len(_unschedulable(s.run_until_idle())) == 20
    done = s.cache.pods["uid-run0"]
    s.pod_upsert(replace(done, phase=PodPhase.SUCCEEDED))
    _advance(s, s.config.backoff_max_seconds + 1)
    out = s.run_until_idle()
    assert _bind(s, out) == ["wait0", "wait1"]  # 4 cores freed, oldest first
    assert len(_unschedulable(out)) == 18


def test_labels_matter_where_running_pods_repel_by_label() -> None:
    s = _scheduler(1)
    repel = PodAffinity(
        required_anti=(
            PodAffinityTerm(HOSTNAME, LabelSelector((("app", "x"),)), frozenset({"default"})),
        )
    )
    runner = replace(make_pod("runner").cpu("1").obj(), pod_affinity=repel)
    s.pod_upsert(runner)
    assert _bind(s, s.run_until_idle()) == ["runner"]
    x = replace(make_pod("x").cpu("1").obj(), labels={"app": "x"}, created=1.0)
    y = replace(make_pod("y").cpu("1").obj(), labels={"app": "y"}, created=2.0)
    assert x.namespace == "default"
    s.pod_upsert(x)
    s.pod_upsert(y)
    out = s.run_until_idle()
    assert "x" in _unschedulable(out)
    assert _bind(s, out) == ["y"]  # same requests, other labels: not x's failure


def test_pods_whose_fit_depends_on_themselves_have_no_class() -> None:
    plain = make_pod("a").cpu("1").obj()
    assert pod_class(plain, labelled=False) == pod_class(
        make_pod("b").cpu("1").obj(), labelled=False
    )
    assert pod_class(plain, labelled=False) != pod_class(
        make_pod("c").cpu("2").obj(), labelled=False
    )
    anti = PodAffinity(required_anti=(PodAffinityTerm(HOSTNAME, LabelSelector()),))
    assert pod_class(replace(plain, pod_affinity=anti), labelled=False) is None
    labelled = replace(plain, labels={"app": "a"})
    assert pod_class(labelled, labelled=False) == pod_class(plain, labelled=False)
    assert pod_class(labelled, labelled=True) != pod_class(plain, labelled=True)


# ---- differential: sharing failures changes no decision ------------------------------------


def _workload(seed: int) -> Iterator[Callable[[Scheduler], None]]:
    """Steps of a random workload: nodes come and go, pods of a few shapes (cores, GPUs) and
    priorities arrive (many never fit), running pods finish, time passes past backoffs,
    flushes and the reservation delay."""
    rng = random.Random(seed)
    # (cores, GPUs); nodes have 4, 8 or 16 cores, and 8 GPUs or none
    shapes = [("1", 0), ("2", 0), ("3", 0), ("6", 0), ("12", 0), ("40", 0)]
    shapes += [("1", 1), ("1", 4), ("2", 8), ("1", 16)]
    uid = 0

    def add_node(name: str, cpu: str, gpus: int) -> Callable[[Scheduler], None]:
        node = make_node(name).cpu(cpu).gpus(gpus).label(HOSTNAME, name).node()
        return partial(Scheduler.node_upsert, node=node)

    for i in range(6):
        yield add_node(f"n{i}", rng.choice(["4", "8"]), rng.choice([0, 8]))
    for _ in range(160):
        roll = rng.random()
        if roll < 0.55:
            uid += 1
            cpu, gpus = rng.choice(shapes)
            pod = replace(
                make_pod(f"p{uid}").cpu(cpu).gpus(gpus).obj(),
                priority=rng.choice([0, 0, 0, 10]),
                created=float(uid),
            )
            yield partial(Scheduler.pod_upsert, pod=pod)
        elif roll < 0.75:
            pick = rng.random()

            def finish(s: Scheduler, pick: float = pick) -> None:
                running = sorted(u for u, p in s.cache.pods.items() if p.node_name)
                if running:
                    done = s.cache.pods[running[int(pick * len(running))]]
                    s.pod_upsert(replace(done, phase=PodPhase.SUCCEEDED))

            yield finish
        elif roll < 0.8:
            yield add_node(f"m{uid}", rng.choice(["4", "8", "16"]), rng.choice([0, 8]))
        elif roll < 0.83:
            victim = f"n{rng.randrange(6)}"
            yield partial(_delete_node, name=victim)
        else:
            step = rng.choice([0.5, 2.0, 11.0, 61.0])
            yield partial(_advance, seconds=step)


def _delete_node(s: Scheduler, name: str) -> None:
    s.node_delete(name)  # nothing waits at Permit here: no decisions to pass on


def _run(
    seed: int, profile: str, share: bool, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[object, ...]]:
    config = CoreConfig(
        reservation_after_seconds=30.0,
        score_weights=dict(PLACEMENT_PROFILES[profile].score_weights),
        gpu_candidate_order=PLACEMENT_PROFILES[profile].gpu_candidate_order,
    )
    s = Scheduler(config, FakeClock(1000.0))
    if not share:
        monkeypatch.setattr(s.replay, "class_of", lambda gang, h: None)
    trace: list[tuple[object, ...]] = []
    for step in _workload(seed):
        step(s)
        out = s.run_until_idle()
        for d in out:
            if isinstance(d, BindGang):
                trace.append(("bind", tuple((b.pod.uid, b.node, b.devices) for b in d.bindings)))
            elif isinstance(d, GangUnschedulable):
                trace.append(("unsched", d.gang, d.reason, d.message))
            elif isinstance(d, Preempt):
                trace.append(("preempt", d.gang, tuple(v.pod.uid for v in d.victims)))
            else:
                trace.append((type(d).__name__, getattr(d, "gang", "")))
        for d in out:
            if isinstance(d, Preempt):
                for v in d.victims:  # the victims go
                    if v.pod.uid in s.cache.pods:
                        s.pod_delete(v.pod.uid)
        _bind(s, out)
        trace.append(("state", tuple(sorted(s.queue.counts().items()))))
    if share:
        assert s.failures.hits > 0  # the workload does exercise the sharing
    return trace


@pytest.mark.parametrize("profile", ["binpack", "fgd", "spread"])
@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_sharing_failures_changes_no_decision(
    seed: int, profile: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with monkeypatch.context() as m:
        plain = _run(seed, profile, share=False, monkeypatch=m)
    shared = _run(seed, profile, share=True, monkeypatch=monkeypatch)
    assert shared == plain


def test_the_fragmentation_score_sees_every_parked_pod(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fgd profile's mix of GPU requests counts each pod it is shown: a pod whose failure
    was shared is shown to it as its search would have."""
    shown: set[str] = set()
    original = GpuMix.record

    def record(self: GpuMix, uid: str, cls: RequestClass) -> None:
        shown.add(uid)
        original(self, uid, cls)

    monkeypatch.setattr(GpuMix, "record", record)
    profile = PLACEMENT_PROFILES["fgd"]
    s = _scheduler(0, config=CoreConfig(score_weights=dict(profile.score_weights)))
    for i in range(4):
        s.node_upsert(make_node(f"g{i}").cpu("8").gpus(8).label(HOSTNAME, f"g{i}").node())
    s.pod_upsert(make_pod("small").cpu("1").gpus(1).obj())  # the mix is not empty
    for i in range(30):
        s.pod_upsert(make_pod(f"wide{i}").cpu("1").gpus(16).obj())  # more than any node
    out = s.run_until_idle()
    assert len(_unschedulable(out)) == 30
    assert s.failures.hits == 29
    assert shown >= {f"uid-wide{i}" for i in range(30)}


def test_a_pod_larger_than_any_node_costs_no_search_for_victims() -> None:
    """Evicting pods cannot make room for a pod that asks more than any node has: no what-if
    placement runs for preemption or for a reservation, and the message is the one the
    search would have given. A pod that fits an empty node still preempts."""
    s = _scheduler(3, cpu="4", config=CoreConfig(reservation_after_seconds=0.0))
    for i in range(3):
        s.pod_upsert(make_pod(f"low{i}").cpu("3").obj())
    assert len(_bind(s, s.run_until_idle())) == 3
    for i in range(5):
        s.pod_upsert(replace(make_pod(f"huge{i}").cpu("6").obj(), priority=10))
    out = s.run_until_idle()
    assert s.preemptor.trials == 0
    assert set(_unschedulable(out).values()) == {
        "needs 6 cpu for 1 more member(s) (minMember 1); 3 free in ready nodes; preemption: "
        "no running pods of lower priority (below 10) whose eviction would make room for the "
        "whole gang"
    }
    assert s.reserve.current is None
    s.pod_upsert(replace(make_pod("fits").cpu("2").obj(), priority=10, created=5.0))
    out = s.run_until_idle()
    assert s.preemptor.trials > 0
    [preempt] = [d for d in out if isinstance(d, Preempt)]
    assert preempt.gang == "pod:uid-fits"


def test_fits_nowhere_walks_the_nodes_once_per_shape_until_a_node_changes() -> None:
    """Gangs that can never fit are checked for it before every search for victims or for a
    reservation; a backlog of identical ones costs one walk of the nodes, and a node whose
    allocatable grows makes the answer be looked for again."""
    s = _scheduler(20, cpu="8")
    finder = s.finder
    calls = 0
    static = finder._static_verdict

    def counting(*args: object) -> Status:
        nonlocal calls
        calls += 1
        return static(*args)  # type: ignore[arg-type]

    finder._static_verdict = counting  # type: ignore[method-assign]
    big = [make_pod(f"big-{i}").cpu("16").obj() for i in range(50)]
    assert all(finder.fits_nowhere(p) for p in big)
    assert calls == 20  # one walk for the fifty
    assert not finder.fits_nowhere(make_pod("small").cpu("1").obj())
    s.node_upsert(make_node("large").cpu("32").node())
    assert not finder.fits_nowhere(big[0])  # a node that can take it arrived
