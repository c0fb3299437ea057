"""Fragmentation-aware placement: the mix of recent GPU requests (core/gpu_mix.py), the
FragmentationGradient scorer and its device policy (plugins/fgd.py), CPU-only pods avoiding
free GPUs, GPU spreading, and the placement profiles (binpack, fgd, spread)."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gangsched.cli import build_parser
from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.framework import Code, CycleState
from gangsched.core.gpu import KOORD_CORE, MILLI, MODEL_LABEL, GpuDemand, best_fit
from gangsched.core.gpu_mix import GpuMix, RequestClass, accepted_models, bucket, request_class
from gangsched.core.model import Node, Placement, Pod, PodPhase
from gangsched.core.plugins import AvoidFreeGPUs, FragmentationGradient, GPUSpread
from gangsched.core.plugins.fgd import usable
from gangsched.core.profile import PLACEMENT_PROFILES
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler
from gangsched.settings import ConfigError, Settings, load_settings
from gangsched_dev.bench import run_bench
from tests.core.builders import make_pod, req, term

GI = 2**30


# ---- helpers -------------------------------------------------------------------------------


def gpu_node(name: str, devices: int, model: str = "G2", cpu: int = 64_000) -> Node:
    return Node(
        name,
        {CPU: cpu, MEMORY: 256 * GI, PODS: 110, GPU: devices, KOORD_CORE: 100 * devices},
        labels={MODEL_LABEL: model},
    )


def cpu_node(name: str, cpu: int = 64_000) -> Node:
    return Node(name, {CPU: cpu, MEMORY: 256 * GI, PODS: 110})


def share(name: str, percent: int, cpu: str = "1", models: Sequence[str] = ()) -> Pod:
    b = make_pod(name).cpu(cpu).resource(KOORD_CORE, percent)
    if models:
        b = b.require(term(req(MODEL_LABEL, "In", *models)))
    return b.obj()


def whole(name: str, count: int, cpu: str = "1", models: Sequence[str] = ()) -> Pod:
    b = make_pod(name).cpu(cpu).gpus(count)
    if models:
        b = b.require(term(req(MODEL_LABEL, "In", *models)))
    return b.obj()


class Cluster:
    """A Scheduler with a placement profile; ``place`` schedules one pod and confirms its
    binding, returning (node, devices) or None."""

    def __init__(self, profile: str, *nodes: Node, **settings: object) -> None:
        config = Settings.model_validate({"placementProfile": profile, **settings}).core()
        self.sched = Scheduler(config, FakeClock(0.0))
        for n in nodes:
            self.sched.node_upsert(n)

    def place(self, pod: Pod) -> tuple[str, tuple[int, ...]] | None:
        self.sched.pod_upsert(pod)
        out = None
        while (decisions := self.sched.schedule_one()) is not None:
            for d in decisions:
                if isinstance(d, BindGang):
                    for b in d.bindings:
                        p = self.sched.pod(b.pod.uid)
                        assert p is not None
                        self.sched.pod_upsert(replace(p, node_name=b.node, phase=PodPhase.RUNNING))
                        out = (b.node, b.devices)
        return out

    @property
    def cache(self) -> ClusterCache:
        return self.sched.cache

    def usage(self, node: str) -> list[int]:
        gpus = self.cache.nodes[node].gpus
        assert gpus is not None
        return list(gpus.used)


def scorer(cluster: Cluster) -> FragmentationGradient:
    for plugin, _ in cluster.sched.finder._normalizing:
        if isinstance(plugin, FragmentationGradient):
            return plugin
    raise AssertionError("no FragmentationGradient scorer")


# ---- the mix of requests -------------------------------------------------------------------


def test_bucket_rounds_up_to_a_grid_about_nine_percent_apart() -> None:
    assert bucket(0) == 0
    values = [1, 7, 999, 1000, 3152, 11_300, 16 * GI, 393_216 * 2**20]
    for v in values:
        assert v <= bucket(v) < v * 1.1 + 1
    assert bucket(1024) == 1024  # a grid point stays
    assert bucket(11_300) == bucket(11_400)  # near-equal requests share a bucket
    assert bucket(bucket(3152)) == bucket(3152)


def test_accepted_models_from_node_selector_and_required_affinity() -> None:
    assert accepted_models(Placement()) is None
    assert accepted_models(make_pod("p").selector(MODEL_LABEL, "T4").obj().placement) == frozenset(
        {"T4"}
    )
    one = make_pod("p").require(term(req(MODEL_LABEL, "In", "V100M16", "V100M32"))).obj()
    assert accepted_models(one.placement) == frozenset({"V100M16", "V100M32"})
    # Terms are ORed: the union; a term without a model requirement allows any model.
    two = make_pod("p").require(
        term(req(MODEL_LABEL, "In", "A10")), term(req(MODEL_LABEL, "In", "T4"))
    )
    assert accepted_models(two.obj().placement) == frozenset({"A10", "T4"})
    anyof = make_pod("p").require(term(req(MODEL_LABEL, "In", "A10")), term(req("zone", "In", "a")))
    assert accepted_models(anyof.obj().placement) is None
    # Selector and affinity both hold: the intersection.
    both = (
        make_pod("p").selector(MODEL_LABEL, "T4").require(term(req(MODEL_LABEL, "In", "T4", "A10")))
    )
    assert accepted_models(both.obj().placement) == frozenset({"T4"})
    # Another label key is no model constraint.
    assert accepted_models(one.placement, "example.com/gpu-model") is None


def test_request_class_of_whole_share_and_cpu_pods() -> None:
    assert request_class(make_pod("c").cpu("2").obj()) is None
    w = request_class(whole("w", 2, cpu="4", models=["T4"]))
    assert w == RequestClass(2, MILLI, frozenset({"T4"}), bucket(4000), 0)
    s = request_class(share("s", 35, cpu="3152m"))
    assert s == RequestClass(1, 350, None, bucket(3152), 0)


def test_mix_counts_each_pod_once_and_forgets_beyond_the_window() -> None:
    a = RequestClass(1, 500, None, 1000, 0)
    b = RequestClass(1, MILLI, None, 1000, 0)
    mix = GpuMix(window=3)
    mix.record("p1", a)
    mix.record("p1", a)  # the same pod again: counted once
    mix.record("p2", b)
    mix.record("p3", b)
    assert dict(mix.counts) == {a: 1, b: 2}
    mix.record("p4", b)  # p1 leaves the window
    assert dict(mix.counts) == {b: 3}
    assert len(mix) == 3
    mix.record("p1", a)  # no longer in the window: counted again
    assert dict(mix.counts) == {a: 1, b: 2}


def test_mix_snapshot_moves_only_when_the_mix_drifts() -> None:
    a = RequestClass(1, 500, None, 1000, 0)
    b = RequestClass(1, MILLI, None, 1000, 0)
    mix = GpuMix(window=1000, drift=0.05)
    assert mix.weights().shares == ()
    for i in range(200):
        mix.record(f"a{i}", a)
    first = mix.weights()
    assert first.shares == ((a, 1.0),)
    mix.record("b0", b)  # half a percent of the mix: the snapshot stands
    assert mix.weights() is first
    for i in range(1, 30):
        mix.record(f"b{i}", b)
    moved = mix.weights()
    assert moved.generation > first.generation
    shares = dict(moved.shares)
    assert shares[b] == pytest.approx(30 / 230)
    assert sum(shares.values()) == pytest.approx(1.0)


# ---- fragmentation, by the definition ------------------------------------------------------


def test_usable_counts_the_devices_with_room_for_one_device_of_the_class() -> None:
    usage = (0, 0, 500, 800)
    assert usable(usage, 500, 1) == 1000 + 1000 + 500
    assert usable(usage, 300, 1) == 2500  # the 800 device has 200 left: too little
    assert usable(usage, 200, 1) == 2700
    assert usable(usage, MILLI, 2) == 2000
    assert usable(usage, MILLI, 3) == 0  # two empty devices: a 3-GPU class cannot run
    assert usable(usage, 500, 4) == 0
    assert usable((), 100, 1) == 0


def reference_frag(
    usage: Sequence[int],
    cpu_free: int,
    mem_free: int,
    model: str,
    shares: Sequence[tuple[RequestClass, float]],
) -> float:
    """The expected fragmentation of one node, straight from the definition."""
    free = [max(0, MILLI - u) for u in usage]
    total = sum(free)
    out = 0.0
    for cls, p in shares:
        need = cls.milli
        room = [f for f in free if f >= need]
        runs = (
            cls.cpu <= cpu_free
            and cls.memory <= mem_free
            and (cls.models is None or model in cls.models)
            and len(room) >= cls.count
        )
        out += p * (total - sum(room) if runs else total)
    return out


def reference_best(
    usage: Sequence[int],
    cpu_free: int,
    mem_free: int,
    model: str,
    shares: Sequence[tuple[RequestClass, float]],
    demand: GpuDemand,
    cpu: int,
) -> float:
    """The least increase over every choice of devices."""
    before = reference_frag(usage, cpu_free, mem_free, model, shares)
    best = None
    milli = min(demand.milli, MILLI)
    for combo in itertools.combinations(range(len(usage)), demand.count):
        if any(usage[i] + milli > MILLI for i in combo):
            continue
        after = list(usage)
        for i in combo:
            after[i] += milli
        f = reference_frag(after, cpu_free - cpu, mem_free, model, shares)
        best = f if best is None else min(best, f)
    assert best is not None
    return best - before


@pytest.mark.parametrize("seed", range(6))
def test_score_is_the_least_increase_of_expected_fragmentation(seed: int) -> None:
    """Random mixes and node states: the raw score is minus the least increase over every
    device choice, and the device policy gives devices that achieve it."""
    rng = random.Random(seed)
    cache = ClusterCache()
    plugin = FragmentationGradient(cache, window=500)
    models = ["G2", "T4", "V100M32"]
    for i in range(120):
        count, milli = rng.choice([(1, 1000), (2, 1000), (1, 500), (1, 300), (1, 800), (1, 150)])
        cores = str(rng.choice([1, 8, 24]))
        only = [rng.choice(models)] if rng.random() < 0.2 else []
        pod = (
            whole(f"m{i}", count, cpu=cores, models=only)
            if milli == MILLI
            else share(f"m{i}", milli // 10, cpu=cores, models=only)
        )
        cls = request_class(pod)
        assert cls is not None
        plugin.mix.record(pod.uid, cls)
    shares = plugin.mix.weights().shares
    levels = [0, 0, 0, 150, 300, 500, 700, 850, 1000]
    checked = 0
    for k in range(40):
        model = rng.choice(models)
        devices = rng.choice([2, 4, 8])
        name = f"n{k}"
        cache.upsert_node(gpu_node(name, devices, model, cpu=rng.choice([16_000, 32_000])))
        info = cache.nodes[name]
        assert info.gpus is not None
        info.gpus.used[:] = [rng.choice(levels) for _ in range(devices)]
        info.requested[CPU] = rng.choice([0, 8_000, 12_000])
        info.relist()  # (written here directly, not counted through the cache)
        cpu_free = info.node.allocatable[CPU] - info.requested[CPU]  # type: ignore[union-attr]
        mem_free = 256 * GI
        demand_pod = rng.choice(
            [whole("p", 1), whole("p", 2), share("p", 50), share("p", 30), share("p", 15)]
        )
        demand = demand_pod.gpu
        assert demand is not None
        if not info.gpus.fits(demand):
            continue
        state = CycleState()
        before_len = len(plugin.mix)
        assert plugin.pre_score(demand_pod, state).ok
        shares = plugin.mix.weights().shares
        raw = plugin.raw_score(demand_pod, info, state)
        cpu = demand_pod.requests[CPU]
        expected = reference_best(info.gpus.used, cpu_free, mem_free, model, shares, demand, cpu)
        assert -raw == pytest.approx(expected, abs=1e-6), (info.gpus.used, demand)
        chosen = plugin.device_policy(info.gpus, demand)
        assert chosen is not None and len(chosen) == demand.count
        after = list(info.gpus.used)
        for i in chosen:
            after[i] += min(demand.milli, MILLI)
        got = reference_frag(after, cpu_free - cpu, mem_free, model, shares) - reference_frag(
            info.gpus.used, cpu_free, mem_free, model, shares
        )
        assert got == pytest.approx(expected, abs=1e-6)
        assert len(plugin.mix) >= before_len
        checked += 1
    assert checked >= 15


def test_a_share_keeps_the_device_that_serves_the_mix() -> None:
    """Best fit puts a small share on the fullest device it fits; FGD keeps that device
    usable for the large shares the mix is made of, and the pod gets the device the score
    assumed."""
    # One node, two devices: device 0 holds a 10% share.
    fgd = Cluster("fgd", gpu_node("n", 2))
    binpack = Cluster("binpack", gpu_node("n", 2))
    for c in (fgd, binpack):
        first = Pod(
            "first", "default", "first", {CPU: 1000, PODS: 1, KOORD_CORE: 10}, gpu_devices=(0,)
        )
        c.sched.pod_upsert(replace(first, node_name="n", phase=PodPhase.RUNNING))
        assert c.usage("n") == [100, 0]
    # The mix: mostly 80% shares.
    plugin = scorer(fgd)
    for i in range(50):
        cls = request_class(share(f"big{i}", 80))
        assert cls is not None
        plugin.mix.record(f"big{i}", cls)
    assert fgd.place(share("small", 15)) == ("n", (1,))
    assert fgd.usage("n") == [100, 150]  # both devices still take an 80% share
    assert binpack.place(share("small", 15)) == ("n", (0,))
    assert binpack.usage("n") == [250, 0]  # device 0 is lost to 80% shares


def test_a_pod_that_accepts_any_model_leaves_the_scarce_model_alone() -> None:
    """Spending the only V100M32 on a pod that accepts any model raises the fragmentation of
    the classes that need V100M32."""
    nodes = (gpu_node("v100", 1, "V100M32"), gpu_node("g2", 1, "G2"))
    fgd = Cluster("fgd", *nodes)
    plugin = scorer(fgd)
    for i in range(30):
        for pod in (whole(f"need{i}", 1, models=["V100M32"]), whole(f"any{i}", 1)):
            cls = request_class(pod)
            assert cls is not None
            plugin.mix.record(pod.uid, cls)
    assert fgd.place(whole("any", 1)) == ("g2", (0,))
    assert fgd.place(whole("needs-v100", 1, models=["V100M32"])) == ("v100", (0,))
    # Binpack ties the two nodes and takes the first one found.
    binpack = Cluster("binpack", *nodes)
    assert binpack.place(whole("any", 1)) == ("v100", (0,))
    assert binpack.place(whole("needs-v100", 1, models=["V100M32"])) is None


def test_cpu_only_pods_avoid_nodes_with_free_gpus() -> None:
    nodes = (gpu_node("free", 2), gpu_node("full", 2), cpu_node("cpu"))
    for profile in ("fgd", "spread"):
        c = Cluster(profile, *nodes)
        assert c.place(whole("fill", 2)) is not None
        assert c.usage("full") == [MILLI, MILLI] or c.usage("free") == [MILLI, MILLI]
        full = "full" if c.usage("full") == [MILLI, MILLI] else "free"
        placed = c.place(make_pod("web").cpu("2").obj())
        assert placed is not None and placed[0] in {"cpu", full}, profile
    plugin = AvoidFreeGPUs()
    pod = make_pod("web").cpu("1").obj()
    cache = ClusterCache()
    for n in nodes:
        cache.upsert_node(n)
    info = cache.nodes
    assert plugin.score(pod, info["cpu"]) == 100.0
    assert plugin.score(pod, info["free"]) == 0.0
    gpus = info["full"].gpus
    assert gpus is not None
    gpus.used[:] = [MILLI, 500]
    assert plugin.score(pod, info["full"]) == 75.0
    assert plugin.score(whole("g", 1), info["cpu"]) == 0.0  # GPU pods: no opinion
    # A node without a device model: by its free nvidia.com/gpu.
    counted = NodeInfo("counted", Node("counted", {CPU: 8000, GPU: 4}, gpus=()))
    counted.requested[GPU] = 3
    counted.relist()
    assert plugin.score(pod, counted) == 75.0


def test_spread_puts_gpu_pods_on_the_emptiest_nodes_and_devices() -> None:
    nodes = (gpu_node("a", 2), gpu_node("b", 2))
    spread = Cluster("spread", *nodes)
    assert [spread.place(whole(f"w{i}", 1)) for i in range(2)] == [("a", (0,)), ("b", (0,))]
    binpack = Cluster("binpack", *nodes)
    assert [binpack.place(whole(f"w{i}", 1)) for i in range(2)] == [("a", (0,)), ("a", (1,))]
    # Shares go to the emptiest device.
    s = Cluster("spread", gpu_node("n", 2))
    assert s.place(share("s1", 30)) == ("n", (0,))
    assert s.place(share("s2", 30)) == ("n", (1,))
    assert s.place(share("s3", 30)) == ("n", (0,))
    scorer_ = GPUSpread()
    info = s.cache.nodes["n"]
    assert scorer_.score(share("x", 40), info) == pytest.approx(100 * (2000 - 900 - 400) / 2000)
    assert scorer_.score(make_pod("cpu").cpu("1").obj(), info) == 0.0


# ---- normalizing, memoising, the device policy -----------------------------------------------


def test_normalize_maps_to_0_100_and_unfit_nodes_to_0() -> None:
    plugin = FragmentationGradient(ClusterCache())
    scores = [-300.0, -100.0, -200.0, -1e19]
    plugin.normalize(scores, CycleState())
    assert scores == [0.0, 100.0, 50.0, 0.0]
    equal = [-5.0, -5.0]
    plugin.normalize(equal, CycleState())
    assert equal == [100.0, 100.0]


def test_nothing_to_measure_against_skips_the_scorer() -> None:
    plugin = FragmentationGradient(ClusterCache())
    assert plugin.pre_score(make_pod("cpu").cpu("1").obj(), CycleState()).code is Code.SKIP
    assert plugin.pre_score(whole("g", 1), CycleState()).ok
    assert plugin.pre_score(make_pod("cpu").cpu("1").obj(), CycleState()).ok


def test_equal_nodes_cost_one_computation(monkeypatch: pytest.MonkeyPatch) -> None:
    cache = ClusterCache()
    for i in range(200):
        cache.upsert_node(gpu_node(f"n{i:03d}", 8))
    plugin = FragmentationGradient(cache)
    calls = 0
    evaluate = plugin._evaluate

    def counting(*args: object) -> object:
        nonlocal calls
        calls += 1
        return evaluate(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(plugin, "_evaluate", counting)
    state = CycleState()
    pod = whole("p", 1)
    assert plugin.pre_score(pod, state).ok
    for info in cache.nodes.values():
        plugin.raw_score(pod, info, state)
    assert calls == 1
    # Another pod of the same shape reuses it; a node in another state costs one more.
    other = whole("q", 1)
    assert plugin.pre_score(other, state).ok
    changed = cache.nodes["n000"]
    gpus = changed.gpus
    assert gpus is not None
    gpus.used[3] = 400
    changed.relist()  # (written here behind the cache's back: the node's version moves)
    for info in cache.nodes.values():
        plugin.raw_score(other, info, state)
    assert calls == 2


def test_device_policy_outside_a_scored_placement() -> None:
    """A pod counted without having been scored (bound by the API, a what-if) gets the
    devices that raise fragmentation least, CPU aside; with no mix yet, the best fit."""
    cache = ClusterCache()
    cache.upsert_node(gpu_node("n", 3))
    gpus = cache.nodes["n"].gpus
    assert gpus is not None
    plugin = FragmentationGradient(cache)
    gpus.used[:] = [100, 0, 0]
    demand = GpuDemand(1, 150, shared=True)
    assert plugin.device_policy(gpus, demand) == (0,)  # best fit: nothing measured yet
    for i in range(40):
        cls = request_class(share(f"big{i}", 80))
        assert cls is not None
        plugin.mix.record(f"big{i}", cls)
    assert plugin.pre_score(share("x", 80), CycleState()).ok
    assert plugin.device_policy(gpus, demand) == (1,)
    assert plugin.device_policy(gpus, GpuDemand(2, MILLI)) == (1, 2)
    assert plugin.device_policy(gpus, GpuDemand(1, 950, shared=True)) == (1,)
    gpus.used[:] = [1000, 1000, 1000]
    assert plugin.device_policy(gpus, demand) is None


# ---- profiles and settings -----------------------------------------------------------------


def test_profiles_name_their_scorers_and_candidate_order() -> None:
    assert Settings.model_validate({}).core().score_weights == CoreConfig().score_weights
    fgd = Settings.model_validate({"placementProfile": "fgd"}).core()
    assert fgd.score_weights == dict(PLACEMENT_PROFILES["fgd"].score_weights)
    assert fgd.score_weights["FragmentationGradient"] > 0
    assert "GPUBinPack" not in fgd.score_weights
    assert fgd.gpu_candidate_order == "tightest"
    spread = Settings.model_validate({"placementProfile": "spread"}).core()
    assert spread.score_weights["GPUSpread"] > 0
    assert spread.gpu_candidate_order == "emptiest"
    # scoreWeights, when given, replaces the profile's mapping whole.
    own = Settings.model_validate(
        {"placementProfile": "fgd", "scoreWeights": {"FragmentationGradient": 3}}
    ).core()
    assert own.score_weights == {"FragmentationGradient": 3}
    window = Settings.model_validate({"gpuRequestWindow": 50}).core()
    assert window.plugin_settings.gpu_request_window == 50


def test_placement_profile_from_file_and_environment(tmp_path: Path) -> None:
    assert (
        load_settings(None, {}, env={"GANGSCHED_PLACEMENT_PROFILE": "spread"}).placement_profile
        == "spread"
    )
    path = tmp_path / "config.yaml"
    path.write_text("placementProfile: fgd\ngpuRequestWindow: 200\n")
    s = load_settings(str(path), {}, env={})
    assert (s.placement_profile, s.gpu_request_window) == ("fgd", 200)
    path.write_text("placementProfile: tetris\n")
    with pytest.raises(ConfigError, match="placementProfile"):
        load_settings(str(path), {}, env={})
    path.write_text("gpuRequestWindow: 0\n")
    with pytest.raises(ConfigError, match="gpuRequestWindow"):
        load_settings(str(path), {}, env={})


def test_the_fgd_scorer_installs_its_device_policy_and_binpack_does_not() -> None:
    fgd = Cluster("fgd", gpu_node("n", 2))
    assert fgd.cache.device_policy == scorer(fgd).device_policy
    spread = Cluster("spread", gpu_node("n", 2))
    assert getattr(spread.cache.device_policy, "__func__", None) is GPUSpread.device_policy
    binpack = Cluster("binpack", gpu_node("n", 2))
    assert binpack.cache.device_policy is best_fit


def test_bench_takes_a_profile() -> None:
    argv = [
        "bench",
        "--nodes",
        "20",
        "--gang-size",
        "4",
        "--pods",
        "40",
        "--profile",
        "binpack",
        "--json",
    ]
    args = build_parser().parse_args(argv)
    result = json.loads(run_bench(args))
    assert result["profile"] == "binpack"
    assert result["pods_bound"] == 40
    assert result["command"].endswith("--profile binpack --json")
    default = json.loads(run_bench(build_parser().parse_args(["bench", "--nodes", "20", "--json"])))
    assert default["profile"] == "fgd"  # the default profile, named in no command
    assert "--profile" not in default["command"]


# ---- GPUs through Dynamic Resource Allocation ----------------------------------------------


def test_pods_whose_gpus_come_through_claims_are_placed_as_counted_gpus_are() -> None:
    """The fragmentation score rates a pod whose claims ask n devices of one class as n whole
    GPUs on the node's devices of that class: the same workload on the same nodes, once with
    counted GPUs and once with DRA devices, lands on the same nodes pod for pod."""
    from gangsched.core.resourceclaims import (
        Claim,
        Device,
        DeviceClass,
        DeviceId,
        DeviceRequest,
        ExactRequest,
    )

    shapes = [
        (f"n{i}", 8, "A100" if i % 3 else "V100", 64_000 if i % 2 else 16_000) for i in range(6)
    ]
    counted = Cluster("fgd", *(gpu_node(n, d, m, cpu) for n, d, m, cpu in shapes))
    dra = Cluster(
        "fgd",
        *(
            Node(n, {CPU: cpu, MEMORY: 256 * GI, PODS: 110}, labels={MODEL_LABEL: m})
            for n, _, m, cpu in shapes
        ),
    )
    dra.sched.device_class_upsert(DeviceClass("gpu.example.com"))
    for n, d, _, _ in shapes:
        dra.sched.resource_slice_upsert(
            n, [Device(DeviceId("gpu.example.com", n, f"g{j}"), n) for j in range(d)]
        )
    rng = random.Random(7)
    placed = 0
    for i in range(30):
        count = rng.choice([1, 1, 2, 4, 8])
        cpu = rng.choice(["1", "4", "12"])
        models = ["V100"] if rng.random() < 0.2 else []
        on_counted = counted.place(whole(f"p{i}", count, cpu, models))
        claim = Claim(
            "default",
            f"c{i}",
            f"cu{i}",
            (DeviceRequest("gpu", ExactRequest("gpu.example.com", count=count)),),
        )
        dra.sched.resource_claim_upsert(claim)
        pod = replace(whole(f"p{i}", 0, cpu, models), resource_claims=(claim.key,))
        on_dra = dra.place(pod)
        assert (on_counted is None) == (on_dra is None), i
        if on_counted is not None and on_dra is not None:
            assert on_counted[0] == on_dra[0], (i, count, cpu, models)
            placed += 1
    assert placed >= 15
    assert len(scorer(dra).mix) == len(scorer(counted).mix)


def test_a_pod_with_claims_that_accepts_any_model_leaves_the_scarce_model_alone() -> None:
    """As for counted GPUs (above): the score sees the DRA devices, so the pod's one device
    is not taken from the only V100 the mix needs."""
    from gangsched.core.resourceclaims import (
        Claim,
        Device,
        DeviceClass,
        DeviceId,
        DeviceRequest,
        ExactRequest,
    )

    def dra_cluster(profile: str) -> Cluster:
        c = Cluster(
            profile,
            *(
                Node(n, {CPU: 64_000, MEMORY: 256 * GI, PODS: 110}, labels={MODEL_LABEL: m})
                for n, m in (("v100", "V100M32"), ("g2", "G2"))
            ),
        )
        c.sched.device_class_upsert(DeviceClass("gpu.example.com"))
        for n in ("v100", "g2"):
            c.sched.resource_slice_upsert(n, [Device(DeviceId("gpu.example.com", n, "g0"), n)])
        return c

    def claimed(c: Cluster, name: str, models: Sequence[str] = ()) -> Pod:
        claim = Claim(
            "default", name, f"u-{name}", (DeviceRequest("gpu", ExactRequest("gpu.example.com")),)
        )
        c.sched.resource_claim_upsert(claim)
        return replace(whole(name, 0, models=models), resource_claims=(claim.key,))

    fgd = dra_cluster("fgd")
    plugin = scorer(fgd)
    for i in range(30):
        for pod in (whole(f"need{i}", 1, models=["V100M32"]), whole(f"any{i}", 1)):
            cls = request_class(pod)
            assert cls is not None
            plugin.mix.record(pod.uid, cls)
    assert fgd.place(claimed(fgd, "any"))[0] == "g2"  # type: ignore[index]
    assert fgd.place(claimed(fgd, "needs-v100", ["V100M32"]))[0] == "v100"  # type: ignore[index]
    binpack = dra_cluster("binpack")
    assert binpack.place(claimed(binpack, "any"))[0] == "v100"  # type: ignore[index]
    assert binpack.place(claimed(binpack, "needs-v100", ["V100M32"])) is None


def test_a_copied_mix_says_what_the_original_said_and_then_goes_its_own_way() -> None:
    """What a start forecast's twin is given: the live scorer's mix, as it was."""
    one, two = RequestClass(1, MILLI, None, 0, 0), RequestClass(2, MILLI, None, 0, 0)
    mix = GpuMix(window=3)
    for i, cls in enumerate((one, one, two)):
        mix.record(f"p{i}", cls)
    copy = mix.copy()
    assert copy.weights() == mix.weights() and dict(copy.counts) == {one: 2, two: 1}
    copy.record("p3", two)  # the window drops p0
    assert dict(copy.counts) == {one: 1, two: 2}
    assert dict(mix.counts) == {one: 2, two: 1}, "the original is left as it was"
    copy.record("p1", one)  # still in the copy's window: counted once
    assert dict(copy.counts) == {one: 1, two: 2}
