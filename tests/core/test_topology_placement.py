"""Topology-aware gang placement: a gang inside one domain of a level (required or
preferred), slices of a gang each inside one domain, the tightest domain first, and a
why-waiting message that names the level and the best domain's shortfall."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision, GangUnschedulable, Preempt
from gangsched.core.domains import candidate_domains, fallback_levels, slices_of
from gangsched.core.model import (
    DomainConstraint,
    GangMode,
    GangSpec,
    Node,
    Pod,
    PodPhase,
    RoleSpec,
    TopologySpec,
)
from gangsched.core.resources import GPU
from gangsched.core.scheduler import Scheduler
from tests.core.builders import make_node, make_pod

T0 = 1000.0
BLOCK = "example.com/block"
RACK = "example.com/rack"
HOST = "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)


def gpu_node(name: str, rack: str, block: str = "b1", gpus: int = 4) -> Node:
    built = make_node(name).cpu("64").memory("256Gi").gpus(gpus)
    return built.label(BLOCK, block).label(RACK, rack).label(HOST, name).node()


def member(name: str, gang: str, gpus: int = 1, **kw: object) -> Pod:
    pod = replace(make_pod(name).cpu("1").gpus(gpus).obj(), namespace="ml", group=f"ml/{gang}")
    return replace(pod, **kw)  # type: ignore[arg-type]


def scheduler(nodes: Iterable[Node], **config: object) -> Scheduler:
    s = Scheduler(CoreConfig(topology_levels=LEVELS, **config), FakeClock(T0))  # type: ignore[arg-type]
    for n in nodes:
        s.node_upsert(n)
    return s


def run(s: Scheduler, *pods: Pod) -> list[Decision]:
    for p in pods:
        s.pod_upsert(p)
    return s.run_until_idle()


def placed(out: Iterable[Decision]) -> dict[str, str]:
    return {b.pod.name: b.node for d in out if isinstance(d, BindGang) for b in d.bindings}


def racks_of(s: Scheduler, where: dict[str, str]) -> set[str]:
    return {s.cache.nodes[n].node.labels[RACK] for n in where.values()}  # type: ignore[union-attr]


def failures(out: Iterable[Decision]) -> list[str]:
    return [d.message for d in out if isinstance(d, GangUnschedulable)]


def two_racks() -> list[Node]:
    """Rack r1: 2 nodes x 4 GPUs (8); rack r2: 3 nodes x 4 GPUs (12)."""
    return [gpu_node("a1", "r1"), gpu_node("a2", "r1")] + [
        gpu_node(f"b{i}", "r2") for i in range(1, 4)
    ]


def gang(name: str, size: int, **kw: object) -> GangSpec:
    return GangSpec(f"ml/{name}", size, created=T0, **kw)  # type: ignore[arg-type]


# ---- required ----------------------------------------------------------------------------
def test_required_gang_takes_the_tightest_rack_that_holds_it() -> None:
    s = scheduler(two_racks())
    s.gang_upsert(gang("eight", 8, domain=DomainConstraint(required=RACK)))
    where = placed(run(s, *(member(f"e{i}", "eight") for i in range(8))))
    assert len(where) == 8 and racks_of(s, where) == {"r1"}  # r1 is exactly full

    s = scheduler(two_racks())
    s.gang_upsert(gang("ten", 10, domain=DomainConstraint(required=RACK)))
    where = placed(run(s, *(member(f"t{i}", "ten") for i in range(10))))
    assert len(where) == 10 and racks_of(s, where) == {"r2"}  # only r2 holds 10


def test_without_a_constraint_the_same_gang_splits_across_racks() -> None:
    s = scheduler(two_racks())
    s.pod_upsert(replace(make_pod("x").cpu("1").gpus(1).obj(), node_name="b1"))
    s.gang_upsert(gang("ten", 10))
    where = placed(run(s, *(member(f"t{i}", "ten") for i in range(10))))
    assert len(where) == 10 and racks_of(s, where) == {"r1", "r2"}


def test_required_gang_waits_naming_the_level_and_the_best_domains_shortfall() -> None:
    s = scheduler(two_racks())
    # 2 GPUs taken in each rack: 6 + 10 free, 16 in all, yet no rack has 11
    for i, n in enumerate(("a1", "a2", "b1", "b2")):
        s.pod_upsert(replace(make_pod(f"x{i}").cpu("1").gpus(1).obj(), node_name=n))
    s.gang_upsert(gang("eleven", 11, domain=DomainConstraint(required=RACK)))
    out = run(s, *(member(f"e{i}", "eleven") for i in range(11)))
    assert not placed(out)
    (message,) = set(failures(out))
    assert f"required {RACK}" in message
    assert f"the closest, {RACK}=r2, has 10 {GPU} free of 11 needed" in message
    assert all(s.cache.node_of(f"uid-e{i}") == "" for i in range(11))


def test_required_gang_reports_the_best_domain_when_free_totals_mislead() -> None:
    """Rack r1 has 7 GPUs free (too few for 2 x 4); rack r2 has 10 free, but as 4 + 3 + 3:
    its total passes, and it takes one 4-GPU member of two."""
    s = scheduler(two_racks())
    for n in ("a1", "b2", "b3"):
        s.pod_upsert(replace(make_pod(f"x-{n}").cpu("1").gpus(1).obj(), node_name=n))
    s.gang_upsert(gang("big", 2, domain=DomainConstraint(required=RACK)))
    out = run(s, *(member(f"g{i}", "big", gpus=4) for i in range(2)))
    assert not placed(out)
    (message,) = set(failures(out))
    assert f"no {RACK} domain holds the gang: the best, {RACK}=r2, takes 1 of 2" in message
    assert message.endswith("0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")


def test_nodes_without_the_level_take_no_member() -> None:
    unlabelled = make_node("loose").cpu("64").memory("256Gi").gpus(8).node()
    s = scheduler([*two_racks(), unlabelled])
    s.gang_upsert(gang("four", 4, domain=DomainConstraint(required=RACK)))
    where = placed(run(s, *(member(f"f{i}", "four", gpus=2) for i in range(4))))
    assert "loose" not in where.values() and len(racks_of(s, where)) == 1

    s = scheduler([unlabelled])
    s.gang_upsert(gang("four", 4, domain=DomainConstraint(required=RACK)))
    out = run(s, *(member(f"f{i}", "four") for i in range(4)))
    assert not placed(out)
    assert f"no ready node has the label {RACK}" in failures(out)[0]


def test_a_level_on_no_node_is_named_when_capacity_is_short_too() -> None:
    """The cluster lacks the capacity and no node has the level's label: the message says
    the label first (more capacity alone would not help), then the capacity."""
    loose = [make_node(f"loose{i}").cpu("64").memory("256Gi").gpus(2).node() for i in range(2)]
    for domain in (
        DomainConstraint(required=RACK),
        DomainConstraint(slice_required=RACK, slice_size=2),
        DomainConstraint(preferred=BLOCK, slice_required=RACK, slice_size=2),
    ):
        s = scheduler(loose)
        s.gang_upsert(gang("big", 8, domain=domain))
        out = run(s, *(member(f"f{i}", "big") for i in range(8)))
        assert not placed(out)
        [message] = failures(out)
        assert message == (
            f"topology ({domain.describe()}): no ready node has the label {RACK}; "
            "needs 8 nvidia.com/gpu for 8 more member(s) (minMember 8); 4 free in ready nodes"
        )
        assert s.gangs["ml/big"].message.startswith(message)


def test_a_level_asked_for_on_the_pods_is_named_when_capacity_is_short_too() -> None:
    loose = make_node("loose").cpu("64").memory("256Gi").gpus(2).node()
    s = scheduler([loose])
    s.gang_upsert(gang("big", 4))
    asked = DomainConstraint(required=RACK)
    out = run(s, *(member(f"f{i}", "big", domain=asked) for i in range(4)))
    assert failures(out)[0].startswith(
        f"topology (required {RACK}): no ready node has the label {RACK}; needs 4 nvidia.com/gpu"
    )


def test_capacity_alone_is_named_when_the_level_is_on_some_node() -> None:
    s = scheduler(two_racks())
    s.gang_upsert(gang("huge", 40, domain=DomainConstraint(required=RACK)))
    out = run(s, *(member(f"h{i}", "huge") for i in range(40)))
    assert failures(out)[0].startswith("needs 40 nvidia.com/gpu for 40 more member(s)")


def test_a_member_of_a_placed_gang_joins_its_domain() -> None:
    s = scheduler(two_racks())
    s.gang_upsert(gang("g", 4, domain=DomainConstraint(required=RACK)))
    first = placed(run(s, *(member(f"g{i}", "g") for i in range(4))))
    (rack,) = racks_of(s, first)
    for name, node in first.items():  # the API confirms the bindings
        s.pod_upsert(member(name, "g", node_name=node, phase=PodPhase.RUNNING))
    late = placed(run(s, member("g4", "g")))
    assert racks_of(s, late) == {rack}


# ---- preferred ---------------------------------------------------------------------------
def test_preferred_rack_falls_back_to_the_block_then_anywhere() -> None:
    nodes = [
        gpu_node("a1", "r1", "b1"),
        gpu_node("a2", "r2", "b1"),
        gpu_node("c1", "r3", "b2"),
        gpu_node("c2", "r3", "b2"),
    ]
    s = scheduler(nodes)
    s.gang_upsert(gang("eight", 8, domain=DomainConstraint(preferred=RACK)))
    where = placed(run(s, *(member(f"e{i}", "eight") for i in range(8))))
    assert racks_of(s, where) == {"r3"}  # one rack holds it

    s = scheduler([*nodes[:2], gpu_node("c1", "r3", "b2")])
    s.gang_upsert(gang("six", 6, domain=DomainConstraint(preferred=RACK)))
    where = placed(run(s, *(member(f"s{i}", "six") for i in range(6))))
    # no rack holds 6; block b1 (r1 + r2) does
    assert set(where.values()) == {"a1", "a2"}

    s = scheduler([*nodes[:2], gpu_node("c1", "r3", "b2")])
    s.gang_upsert(gang("ten", 10, domain=DomainConstraint(preferred=RACK)))
    where = placed(run(s, *(member(f"t{i}", "ten") for i in range(10))))
    assert len(where) == 10  # no block holds 10: anywhere


def test_fallback_levels() -> None:
    assert fallback_levels(DomainConstraint(required=RACK), LEVELS) == [RACK]
    assert fallback_levels(DomainConstraint(preferred=HOST), LEVELS) == [HOST, RACK, BLOCK, None]
    assert fallback_levels(DomainConstraint(preferred="other"), LEVELS) == ["other", None]
    assert fallback_levels(DomainConstraint(slice_required=RACK), LEVELS) == [None]


# ---- slices ------------------------------------------------------------------------------
def test_slices_by_pod_label_each_take_one_rack() -> None:
    """Two Jobs of 4 pods x 2 GPUs, one gang: each Job inside one rack of 8 GPUs."""
    nodes = [gpu_node(f"{r}n{i}", r) for r in ("r1", "r2", "r3") for i in range(2)]
    s = scheduler(nodes)
    c = DomainConstraint(slice_required=RACK, slice_label="job")
    s.gang_upsert(gang("js", 8, domain=c))
    pods = [
        member(f"{job}-{i}", "js", gpus=2, labels={"job": job})
        for job in ("j0", "j1")
        for i in range(4)
    ]
    where = placed(run(s, *pods))
    assert len(where) == 8
    by_job = {
        job: racks_of(s, {k: v for k, v in where.items() if k.startswith(job)})
        for job in ("j0", "j1")
    }
    assert all(len(r) == 1 for r in by_job.values())
    assert by_job["j0"] != by_job["j1"]


def test_slices_by_size_follow_the_completion_index() -> None:
    nodes = [gpu_node(f"{r}n{i}", r) for r in ("r1", "r2") for i in range(2)]
    s = scheduler(nodes)
    s.gang_upsert(gang("idx", 8, domain=DomainConstraint(slice_required=RACK, slice_size=4)))
    pods = [member(f"p{i}", "idx", gpus=2, index=i) for i in (5, 0, 7, 2, 1, 6, 3, 4)]
    where = placed(run(s, *pods))
    low = racks_of(s, {k: v for k, v in where.items() if int(k[1:]) < 4})
    high = racks_of(s, {k: v for k, v in where.items() if int(k[1:]) >= 4})
    assert len(low) == len(high) == 1 and low != high


def test_a_slice_that_fits_no_rack_holds_the_gang_back() -> None:
    nodes = [gpu_node(f"{r}n{i}", r) for r in ("r1", "r2") for i in range(2)]
    s = scheduler(nodes)
    c = DomainConstraint(slice_required=RACK, slice_label="job")
    s.gang_upsert(gang("js", 10, domain=c))
    pods = [member(f"a{i}", "js", labels={"job": "a"}) for i in range(9)]
    pods.append(member("b0", "js", labels={"job": "b"}))
    out = run(s, *pods)
    assert not placed(out)
    assert f"no {RACK} domain has the free capacity" in failures(out)[0]


def test_slices_of_orders_largest_first() -> None:
    pods = [member("x", "g", labels={"j": "b"}), member("y", "g", labels={"j": "a"})]
    pods.append(member("z", "g", labels={"j": "b"}))
    cut = slices_of(DomainConstraint(slice_required=RACK, slice_label="j"), pods)
    assert [(c.name, [p.name for p in c.pods]) for c in cut] == [("b", ["x", "z"]), ("a", ["y"])]


# ---- NonStrict and Kueue -----------------------------------------------------------------
def test_nonstrict_gang_keeps_the_best_domains_share() -> None:
    s = scheduler(two_racks())
    spec = gang("ns", 14, domain=DomainConstraint(required=RACK), mode=GangMode.NON_STRICT)
    s.gang_upsert(spec)
    out = run(s, *(member(f"n{i}", "ns") for i in range(14)))
    held = dict(s.cache.assumed)
    assert not placed(out) and len(held) == 12
    assert {s.cache.nodes[n].node.labels[RACK] for n in held.values()} == {"r2"}  # type: ignore[union-attr]


def test_kueue_annotation_on_the_members_applies_when_the_podgroup_says_nothing() -> None:
    s = scheduler(two_racks())
    s.gang_upsert(gang("q", 8))
    pods = [member(f"q{i}", "q", domain=DomainConstraint(required=RACK)) for i in range(8)]
    where = placed(run(s, *pods))
    assert len(where) == 8 and racks_of(s, where) == {"r1"}


# ---- the domain index ----------------------------------------------------------------------
def test_candidate_domains_are_tightest_first() -> None:
    free = {"r1": {GPU: 8}, "r2": {GPU: 5}, "r3": {GPU: 3}, "r4": {GPU: 5}}
    assert candidate_domains(RACK, free, {GPU: 4}).order == ["r2", "r4", "r1"]
    assert candidate_domains(RACK, free, {GPU: 4}, allowed=["r1", "r9"]).order == ["r1"]
    none = candidate_domains(RACK, free, {GPU: 9})
    assert not none.order and "the closest, example.com/rack=r1, has 8" in none.why_none


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["assume", "forget", "node"]), st.integers(0, 5), st.integers(0, 3)
        ),
        max_size=40,
    )
)
def test_domain_totals_stay_equal_to_a_fresh_count(ops: list[tuple[str, int, int]]) -> None:
    """Free per domain kept incrementally equals the sum over the domain's ready nodes, after
    any mix of placements, releases and node relabels."""
    cache = ClusterCache()
    for i in range(6):
        cache.upsert_node(gpu_node(f"n{i}", f"r{i % 3}"))
    cache.domain_free(RACK)  # start tracking
    for op, a, b in ops:
        uid = f"p{a}"
        if op == "assume":
            if uid not in cache.assumed:
                cache.upsert_pod(replace(make_pod(uid).cpu("1").gpus(b).obj(), uid=uid))
                cache.assume(uid, f"n{(a + b) % 6}")
        elif op == "forget":
            cache.forget(uid)
        else:
            cache.upsert_node(gpu_node(f"n{a}", f"r{b}"))
    fresh = ClusterCache()
    for info in cache.nodes.values():
        assert info.node is not None
        fresh.upsert_node(info.node)
    for uid, node in cache.assumed.items():
        fresh.upsert_pod(cache.pods[uid])
        fresh.assume(uid, node)
    kept = {k: {r: v for r, v in f.items() if v} for k, f in cache.domain_free(RACK).items()}
    want = {k: {r: v for r, v in f.items() if v} for k, f in fresh.domain_free(RACK).items()}
    assert {k: v for k, v in kept.items() if v} == {k: v for k, v in want.items() if v}


# ---- preemption and reservations go through the same placement -----------------------------
def test_preemption_for_a_required_rack_evicts_in_one_rack_only() -> None:
    """Both racks full of low-priority 1-GPU pods; a high-priority gang of 4 x 2 GPUs with a
    required rack: the victims (and the nominated nodes) are all in one rack."""
    nodes = [gpu_node(f"{r}n{i}", r) for r in ("r1", "r2") for i in range(2)]
    s = scheduler(nodes)
    for n in nodes:
        for d in range(4):
            low = replace(make_pod(f"low-{n.name}-{d}").cpu("1").gpus(1).obj(), priority=1)
            s.pod_upsert(replace(low, node_name=n.name, phase=PodPhase.RUNNING))
    s.gang_upsert(gang("hi", 4, domain=DomainConstraint(required=RACK)))
    out = run(s, *(member(f"h{i}", "hi", gpus=2, priority=100) for i in range(4)))
    (plan,) = [d for d in out if isinstance(d, Preempt)]
    rack_of = {n.name: n.labels[RACK] for n in nodes}
    assert len({rack_of[v.node] for v in plan.victims}) == 1
    assert len(plan.victims) == 8
    assert {rack_of[b.node] for b in plan.nominations} == {rack_of[plan.victims[0].node]}


@settings(max_examples=80, deadline=None)
@given(
    racks=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    used=st.lists(st.integers(0, 4), max_size=12),
    gangs=st.lists(
        st.tuples(st.integers(1, 6), st.integers(1, 3), st.sampled_from(["req", "pref", "slc"])),
        min_size=1,
        max_size=5,
    ),
)
def test_required_gangs_and_slices_never_split(
    racks: list[int], used: list[int], gangs: list[tuple[int, int, str]]
) -> None:
    """Whatever the racks, the GPUs already taken and the gangs: a gang with a required rack
    binds inside one rack or not at all, each slice inside one rack, and no node is
    over-committed."""
    nodes = [gpu_node(f"r{r}n{i}", f"r{r}") for r, count in enumerate(racks) for i in range(count)]
    s = scheduler(nodes)
    taken: dict[str, int] = {}
    for i, gpus in enumerate(used):
        target = nodes[i % len(nodes)].name
        if gpus and taken.get(target, 0) + gpus <= 4:
            taken[target] = taken.get(target, 0) + gpus
            x = make_pod(f"x{i}").cpu("1").gpus(gpus).obj()
            s.pod_upsert(replace(x, node_name=target, phase=PodPhase.RUNNING))
    pods: list[Pod] = []
    kinds: dict[str, str] = {}
    for g, (size, gpus, kind) in enumerate(gangs):
        c = {
            "req": DomainConstraint(required=RACK),
            "pref": DomainConstraint(preferred=RACK),
            "slc": DomainConstraint(slice_required=RACK, slice_size=2),
        }[kind]
        s.gang_upsert(gang(f"g{g}", size, domain=c))
        kinds[f"ml/g{g}"] = kind
        pods += [member(f"g{g}-{i}", f"g{g}", gpus=gpus, index=i) for i in range(size)]
    out = run(s, *pods)
    rack_of = {n.name: n.labels[RACK] for n in nodes}
    for d in out:
        if not isinstance(d, BindGang):
            continue
        kind = kinds[d.gang]
        where = {b.pod.name: rack_of[b.node] for b in d.bindings}
        if kind == "req":
            assert len(set(where.values())) == 1, where
        if kind == "slc":
            for k in range(3):
                part = {r for n, r in where.items() if int(n.rsplit("-", 1)[1]) // 2 == k}
                assert len(part) <= 1, where
    for info in s.cache.nodes.values():
        assert info.requested.get(GPU, 0) <= info.allocatable(GPU)


def test_task_topology_keeps_working_inside_the_chosen_rack() -> None:
    """ps and workers with task-topology affinity, required rack: the gang lands in one rack
    and its roles are bucketed together there (the ps shares a node with workers)."""
    nodes = [gpu_node(f"{r}n{i}", r, gpus=8) for r in ("r1", "r2") for i in range(3)]
    s = scheduler(nodes)
    spec = gang(
        "pw",
        5,
        domain=DomainConstraint(required=RACK),
        roles=(RoleSpec("ps", 1), RoleSpec("worker", 4)),
        topology=TopologySpec(affinity=(("ps", "worker"),)),
    )
    s.gang_upsert(spec)
    pods = [member("ps-0", "pw", gpus=0, role="ps")]
    pods += [member(f"w-{i}", "pw", gpus=2, role="worker") for i in range(4)]
    where = placed(run(s, *pods))
    assert len(where) == 5 and len(racks_of(s, where)) == 1
    workers = {where[f"w-{i}"] for i in range(4)}
    assert where["ps-0"] in workers


def test_a_plain_pod_with_a_required_level_shares_no_failure_with_one_without() -> None:
    """Two identical plain pods, one asking for a rack (Kueue's annotation): the loose node
    has no rack label, so only the pod without the annotation fits there."""
    loose = make_node("loose").cpu("64").memory("256Gi").gpus(1).node()
    s = scheduler([loose])
    with_rack = replace(
        make_pod("a").cpu("1").gpus(1).obj(), domain=DomainConstraint(required=RACK)
    )
    out = run(s, with_rack, make_pod("b").cpu("1").gpus(1).obj())
    assert placed(out) == {"b": "loose"}
    assert any(f"no ready node has the label {RACK}" in m for m in failures(out))


def test_the_podgroup_status_names_the_domain_the_gang_went_to() -> None:
    s = scheduler(two_racks())
    s.gang_upsert(gang("g", 4, domain=DomainConstraint(required=RACK)))
    where = placed(run(s, *(member(f"g{i}", "g") for i in range(4))))
    for name, node in where.items():
        s.pod_upsert(member(name, "g", node_name=node, phase=PodPhase.RUNNING))
    status = s.group_status("ml/g")
    assert status is not None and status.scheduled
    assert status.message == f"4 member(s) bound in {RACK}=r1"
