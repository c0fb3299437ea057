"""Per-device GPU accounting: the cache counts each GPU pod on devices (shares of one device
never exceed it, whole devices are exclusive), the GPUDevices filter, the GPU candidates and
the per-device scores."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import pytest

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision, DeviceConflict, GangUnschedulable
from gangsched.core.gpu import GPU, KOORD_CORE, MILLI, GpuDemand, NodeGpus
from gangsched.core.model import GangSpec, Node, Pod, PodPhase
from gangsched.core.plugins import GPUBinPack, GPUDevices, LeastAllocated
from gangsched.core.scheduler import Scheduler
from tests.core.builders import make_node, make_pod

T0 = 1000.0


def node(name: str, gpus: int) -> Node:
    """A node advertising ``gpus`` whole GPUs and the sharing convention's gpu-core."""
    built = make_node(name).cpu("64").memory("256Gi").gpus(gpus)
    return built.resource(KOORD_CORE, 100 * gpus).node()


def whole(name: str, count: int = 1, **kw: object) -> Pod:
    return replace(make_pod(name).cpu("1").gpus(count).obj(), **kw)  # type: ignore[arg-type]


def share(name: str, percent: int, **kw: object) -> Pod:
    pod = make_pod(name).cpu("1").resource(KOORD_CORE, percent).obj()
    return replace(pod, **kw)  # type: ignore[arg-type]


def uid(name: str) -> str:
    """The uid the pod builder gives a pod named ``name``."""
    return make_pod(name).obj().uid


def bound(pod: Pod, node_name: str, devices: tuple[int, ...] = ()) -> Pod:
    return replace(pod, node_name=node_name, phase=PodPhase.RUNNING, gpu_devices=devices)


def used(cache: ClusterCache, name: str) -> list[int]:
    gpus = cache.nodes[name].gpus
    assert gpus is not None
    return list(gpus.used)


def assume(cache: ClusterCache, pod: Pod, node_name: str) -> None:
    cache.upsert_pod(pod)
    cache.assume(pod.uid, node_name)


def names(infos: Iterable[NodeInfo]) -> list[str]:
    return [i.name for i in infos]


# ---- the cache's accounting --------------------------------------------------------------


def test_node_info_has_devices_only_with_a_device_model() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("g", 4))
    cache.upsert_node(make_node("c").cpu("8").node())
    gpus = cache.nodes["g"].gpus
    assert gpus is not None and gpus.used == [0, 0, 0, 0]
    assert cache.nodes["c"].gpus is None


def test_shares_stack_on_the_fullest_device_and_never_exceed_it() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    assume(cache, share("a", 60), "n")
    assert used(cache, "n") == [600, 0]
    assume(cache, share("b", 60), "n")  # 600 + 600 would exceed device 0
    assert used(cache, "n") == [600, 600]
    assume(cache, share("c", 40), "n")  # the fullest device it fits, lowest index
    assert used(cache, "n") == [1000, 600]
    assert [cache.devices_of(uid(u)) for u in ("a", "b", "c")] == [(0,), (1,), (0,)]
    assert cache.nodes["n"].requested[KOORD_CORE] == 160


def test_whole_devices_are_exclusive() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 4))
    assume(cache, share("s", 10), "n")
    assume(cache, whole("w", 3), "n")
    assert cache.devices_of(uid("w")) == (1, 2, 3)
    assert used(cache, "n") == [100, 1000, 1000, 1000]
    # One GPU is left by count (4 - 3), but no whole device: the filter refuses a whole GPU.
    assert cache.nodes["n"].free(GPU) == 1
    assert not GPUDevices().filter(whole("x"), cache.nodes["n"]).ok
    assert cache.cluster_free(GPU) == 0
    assert names(cache.gpu_candidates(GpuDemand(1, MILLI))) == []
    assert names(cache.gpu_candidates(GpuDemand(1, 900))) == ["n"]


def test_recorded_devices_are_honoured() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 4))
    cache.upsert_pod(bound(share("a", 50), "n", (3,)))
    cache.upsert_pod(bound(whole("b", 2), "n", (0, 2)))
    assert cache.devices_of(uid("a")) == (3,)
    assert cache.devices_of(uid("b")) == (0, 2)
    assert used(cache, "n") == [1000, 0, 1000, 500]


def test_invalid_recorded_devices_fall_back_to_the_best_fit() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    cache.upsert_pod(bound(share("a", 70), "n", (9,)))  # no device 9 on this node
    assert cache.devices_of(uid("a")) == (0,)
    # b's record names device 0, where a (whose record is invalid) was guessed: the record
    # wins and the guess moves aside
    cache.upsert_pod(bound(share("b", 50), "n", (0,)))
    assert cache.devices_of(uid("b")) == (0,)
    assert cache.devices_of(uid("a")) == (1,)
    assert used(cache, "n") == [500, 700]
    assert cache.take_conflicts() == {}


def test_records_that_over_commit_a_device_are_kept_and_reported() -> None:
    """Two valid records that do not fit one device: neither share is moved (the records are
    what the devices run), and the conflict is reported."""
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    cache.upsert_pod(bound(share("a", 70), "n", (0,)))
    cache.upsert_pod(bound(share("b", 50), "n", (0,)))
    assert cache.devices_of(uid("a")) == (0,) and cache.devices_of(uid("b")) == (0,)
    assert used(cache, "n") == [1200, 0]
    assert cache.take_conflicts() == {uid("b"): ("n", (0,))}
    assert cache.take_conflicts() == {}


def test_devices_recorded_after_the_binding_move_the_count() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    pod = share("a", 50)
    assume(cache, pod, "n")
    assert cache.devices_of(uid("a")) == (0,)
    cache.upsert_pod(bound(pod, "n", (1,)))  # the device daemon's record says device 1
    assert cache.devices_of(uid("a")) == (1,)
    assert used(cache, "n") == [0, 500]


def test_restart_rebuilds_the_devices_from_the_records_in_any_order() -> None:
    pods = [
        bound(share("a", 60), "n", (1,)),
        bound(share("b", 40), "n", (1,)),
        bound(share("c", 30), "n", (0,)),
        bound(whole("d"), "n", (2,)),
    ]
    for order in (pods, pods[::-1]):
        cache = ClusterCache()
        for p in order:  # pods before their node, as a relist may deliver them
            cache.upsert_pod(p)
        assert cache.nodes["n"].gpus is None
        cache.upsert_node(node("n", 4))
        assert used(cache, "n") == [300, 1000, 1000, 0]
        assert [cache.devices_of(p.uid) for p in pods] == [(1,), (1,), (0,), (2,)]


def test_device_policy_chooses_at_assume_time() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 4))

    def last_device(gpus: NodeGpus, demand: GpuDemand) -> tuple[int, ...] | None:
        return (len(gpus.used) - 1,)

    cache.device_policy = last_device
    assume(cache, share("a", 50), "n")
    assert cache.devices_of(uid("a")) == (3,)
    cache.upsert_pod(bound(cache.pods[uid("a")], "n"))  # bound: counted where it was assumed
    assert cache.devices_of(uid("a")) == (3,)
    cache.upsert_pod(bound(share("b", 50), "n"))  # bound elsewhere, nothing recorded
    assert cache.devices_of(uid("b")) == (3,)  # the best fit: the fullest device it fits


def test_forget_lift_restore_and_remove_give_devices_back() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    assume(cache, share("a", 50), "n")
    cache.forget(uid("a"))
    assert used(cache, "n") == [0, 0] and cache.devices_of(uid("a")) == ()
    cache.upsert_pod(bound(share("b", 30), "n", (1,)))
    cache.lift(uid("b"))
    assert used(cache, "n") == [0, 0]
    cache.restore(uid("b"))
    assert used(cache, "n") == [0, 300] and cache.devices_of(uid("b")) == (1,)
    cache.upsert_pod(replace(cache.pods[uid("b")], phase=PodPhase.SUCCEEDED))
    assert used(cache, "n") == [0, 0]
    cache.remove_pod(uid("b"))
    assert used(cache, "n") == [0, 0] and cache.devices_of(uid("b")) == ()


def test_a_running_pod_keeps_its_devices_under_a_preemptor_assumed_over_it() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    cache.upsert_pod(bound(whole("keep"), "n"))
    cache.upsert_pod(bound(whole("victim"), "n"))
    assert cache.devices_of(uid("victim")) == (1,)
    cache.lift(uid("victim"))
    assume(cache, whole("preemptor"), "n")
    cache.restore(uid("victim"))
    assert cache.devices_of(uid("preemptor")) == (1,)
    assert cache.devices_of(uid("victim")) == (1,)
    assert cache.devices_of(uid("keep")) == (0,)
    cache.remove_pod(uid("victim"))
    assert used(cache, "n") == [1000, 1000]


def test_pods_bound_over_capacity_are_counted_on_the_least_used_devices() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    cache.upsert_pod(bound(whole("a", 2), "n"))
    cache.upsert_pod(bound(share("b", 50), "n"))  # placed by someone else on full devices
    cache.upsert_pod(bound(whole("c", 3), "n"))  # more devices than the node has
    assert cache.devices_of(uid("b")) == (0,)
    assert sorted(cache.devices_of(uid("c"))) == [0, 1, 1]
    assert sum(used(cache, "n")) == 2000 + 500 + 3000
    for name in ("a", "b", "c"):
        cache.remove_pod(uid(name))
    assert used(cache, "n") == [0, 0]


def test_node_device_change_recounts_its_pods() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 4))
    cache.upsert_pod(bound(share("a", 50), "n", (3,)))
    cache.upsert_pod(bound(whole("b"), "n"))
    assert used(cache, "n") == [1000, 0, 0, 500]
    cache.upsert_node(node("n", 2))  # device 3 is gone: its share moves to a device left
    assert used(cache, "n") == [1000, 500]
    assert cache.devices_of(uid("a")) == (1,) and cache.devices_of(uid("b")) == (0,)
    cache.upsert_node(node("n", 4))  # back: the record is honoured again
    assert used(cache, "n") == [1000, 0, 0, 500]
    cache.upsert_node(make_node("n").cpu("64").memory("256Gi").node())  # no GPUs left
    assert cache.nodes["n"].gpus is None and cache.devices_of(uid("a")) == ()
    assert names(cache.gpu_candidates(1)) == []


def test_cluster_free_stays_an_upper_bound_with_shares() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n1", 2))
    cache.upsert_node(node("n2", 2))
    assume(cache, share("a", 30), "n1")
    assume(cache, share("b", 30), "n1")  # stacks on device 0
    assert cache.cluster_free(GPU) == 3  # n1 has one whole device left, n2 two
    assert cache.cluster_free(KOORD_CORE) == 400 - 60
    assume(cache, share("c", 80), "n1")
    assert cache.cluster_free(GPU) == 2


# ---- candidates --------------------------------------------------------------------------


@pytest.fixture
def three() -> ClusterCache:
    cache = ClusterCache()
    for n in ("n1", "n2", "n3"):
        cache.upsert_node(node(n, 2))
    cache.upsert_pod(bound(share("a", 50), "n1", (0,)))  # n1: one whole device, 500 free on 0
    cache.upsert_pod(bound(share("b", 80), "n2", (0,)))  # n2: one whole device, 200 free on 0
    cache.upsert_pod(bound(share("c", 80), "n2", (1,)))  # n2: 200 free on both
    return cache


def test_whole_candidates_tightest_or_emptiest_first(three: ClusterCache) -> None:
    assert names(three.gpu_candidates(GpuDemand(1, MILLI))) == ["n1", "n3"]
    assert names(three.gpu_candidates(GpuDemand(1, MILLI), emptiest_first=True)) == ["n3", "n1"]
    assert names(three.gpu_candidates(GpuDemand(2, MILLI))) == ["n3"]
    assert names(three.gpu_candidates(2)) == ["n3"]  # a count alone: whole GPUs


def test_share_candidates_by_largest_free_share(three: ClusterCache) -> None:
    # n2's largest free share is 200; n1 and n3 have a whole device (1000) each.
    tightest = names(three.gpu_candidates(GpuDemand(1, 200)))
    assert tightest[0] == "n2" and sorted(tightest[1:]) == ["n1", "n3"]
    assert sorted(names(three.gpu_candidates(GpuDemand(1, 300)))) == ["n1", "n3"]
    assert names(three.gpu_candidates(GpuDemand(1, 200), emptiest_first=True))[-1] == "n2"
    # Two devices with 400 each: n1 has 500 and 1000 free, n2 200 and 200, n4 1000 and 200.
    three.upsert_node(node("n4", 2))
    three.upsert_pod(bound(share("d", 80), "n4", (1,)))
    assert sorted(names(three.gpu_candidates(GpuDemand(2, 400, shared=True)))) == ["n1", "n3"]
    assert "n4" in names(three.gpu_candidates(GpuDemand(1, 400, shared=True)))


def test_nodes_without_a_device_model_keep_the_count(three: ClusterCache) -> None:
    big = make_node("big").cpu("64").gpus(2000).node()  # more than a device list is kept for
    assert big.gpus == ()
    three.upsert_node(big)
    assert three.nodes["big"].gpus is None
    three.upsert_pod(bound(whole("w", 1500), "big"))
    assert names(three.gpu_candidates(GpuDemand(600, MILLI))) == []
    assert names(three.gpu_candidates(GpuDemand(500, MILLI))) == ["big"]
    assert GPUDevices().filter(whole("x", 600), three.nodes["big"]).ok


# ---- the filter and the scores -----------------------------------------------------------


def test_filter_reasons() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("n", 2))
    cache.upsert_pod(bound(share("a", 60), "n", (0,)))
    cache.upsert_pod(bound(share("b", 60), "n", (1,)))
    info = cache.nodes["n"]
    f = GPUDevices()
    assert f.filter(make_pod("cpu").cpu("1").obj(), info).ok
    assert f.filter(share("fits", 40), info).ok
    assert (
        f.filter(share("no", 50), info).reason == "Insufficient GPU share (koordinator.sh/gpu-core)"
    )
    assert f.filter(whole("w"), info).reason == "Insufficient nvidia.com/gpu"


def test_binpack_share_prefers_the_device_it_fills_most() -> None:
    cache = ClusterCache()
    for n in ("half", "most", "empty"):
        cache.upsert_node(node(n, 2))
    cache.upsert_pod(bound(share("a", 50), "half", (0,)))
    cache.upsert_pod(bound(share("b", 70), "most", (1,)))
    plugin = GPUBinPack()
    pod = share("p", 30)
    scores = {n: plugin.score(pod, cache.nodes[n]) for n in ("half", "most", "empty")}
    assert scores == {"half": 80.0, "most": 100.0, "empty": 30.0}


def test_binpack_whole_prefers_fewest_whole_devices_left() -> None:
    cache = ClusterCache()
    cache.upsert_node(node("shared", 4))
    cache.upsert_node(node("empty", 4))
    cache.upsert_pod(bound(share("a", 10), "shared", (0,)))
    plugin = GPUBinPack()
    pod = whole("p", 2)
    assert plugin.score(pod, cache.nodes["shared"]) == 75.0  # one whole device left of 4
    assert plugin.score(pod, cache.nodes["empty"]) == 50.0
    assert plugin.score(whole("q", 3), cache.nodes["shared"]) == 100.0
    assert plugin.score(make_pod("cpu").cpu("1").obj(), cache.nodes["empty"]) == 0.0


def test_least_allocated_leaves_shares_to_the_gpu_scorers() -> None:
    info = make_node("n").cpu("8").memory("8Gi").info()
    assert LeastAllocated().score(share("p", 50), info) == 0.0
    assert LeastAllocated().score(make_pod("c").cpu("2").obj(), info) > 0.0


# ---- through the scheduler ---------------------------------------------------------------


def run(s: Scheduler, *pods: Pod) -> list[Decision]:
    for p in pods:
        s.pod_upsert(p)
    return s.run_until_idle()


def test_a_gang_of_shares_holds_per_device_within_its_cycle() -> None:
    """Three 60% shares: 180% fits the node's gpu-core total (200) but only two devices."""
    s = Scheduler(CoreConfig(), FakeClock(T0))
    s.node_upsert(node("n", 2))
    s.gang_upsert(GangSpec("ml/three", 3, created=T0))
    out = run(s, *(share(f"t{i}", 60, namespace="ml", group="ml/three") for i in range(3)))
    assert not [d for d in out if isinstance(d, BindGang)]
    failed = [d for d in out if isinstance(d, GangUnschedulable)]
    assert failed and "Insufficient GPU share (koordinator.sh/gpu-core)" in failed[0].message
    assert s.cache.nodes["n"].gpus is not None and s.cache.nodes["n"].gpus.used == [0, 0]

    s.gang_upsert(GangSpec("ml/two", 2, created=T0))
    out = run(s, *(share(f"w{i}", 60, namespace="ml", group="ml/two") for i in range(2)))
    bindings = [b for d in out if isinstance(d, BindGang) for b in d.bindings]
    assert sorted(b.devices for b in bindings) == [(0,), (1,)]


def test_bindings_name_the_devices_of_every_gpu_pod() -> None:
    s = Scheduler(CoreConfig(), FakeClock(T0))
    s.node_upsert(node("n", 4))
    out = run(s, whole("w", 2), share("s", 25), make_pod("c").cpu("1").obj())
    devices = {b.pod.name: b.devices for d in out if isinstance(d, BindGang) for b in d.bindings}
    assert devices["c"] == ()
    assert len(set(devices["w"])) == 2 and len(devices["s"]) == 1
    assert not set(devices["w"]) & set(devices["s"])
    gpus = s.cache.nodes["n"].gpus
    assert gpus is not None and sorted(gpus.used) == [0, 250, 1000, 1000]


def test_diagnose_aggregates_device_reasons() -> None:
    """Both nodes have the gpu-core total for the pod (200 - 120 >= 50) but no device with
    half a GPU free; then one whole device each, and a pod that needs two on one node."""
    s = Scheduler(CoreConfig(), FakeClock(T0))
    for n in ("n1", "n2"):
        s.node_upsert(node(n, 2))
        s.pod_upsert(bound(share(f"{n}-0", 60), n, (0,)))
        s.pod_upsert(bound(share(f"{n}-1", 60), n, (1,)))
    out = run(s, share("p", 50))
    messages = [d.message for d in out if isinstance(d, GangUnschedulable)]
    expected = "0/2 nodes are available: 2 Insufficient GPU share (koordinator.sh/gpu-core)."
    assert len(messages) == 1 and messages[0].endswith(expected), messages

    s = Scheduler(CoreConfig(), FakeClock(T0))
    for n in ("n1", "n2"):
        s.node_upsert(node(n, 2))
        s.pod_upsert(bound(share(f"{n}-0", 60), n, (0,)))
    out = run(s, whole("w", 2))
    messages = [d.message for d in out if isinstance(d, GangUnschedulable)]
    expected = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    assert len(messages) == 1 and messages[0].endswith(expected), messages


def test_spread_order_walks_the_emptiest_nodes_first() -> None:
    for order, expected in (("tightest", "busy"), ("emptiest", "idle")):
        config = CoreConfig(gpu_candidate_order=order, nodes_to_score=1)
        s = Scheduler(config, FakeClock(T0))
        s.node_upsert(node("busy", 2))
        s.node_upsert(node("idle", 2))
        s.pod_upsert(bound(whole("x"), "busy"))
        found = s.finder.find(whole("p"))
        assert found is not None and found.name == expected


@pytest.mark.parametrize("whole_first", [True, False])
def test_after_a_restart_a_new_share_goes_where_the_records_leave_room(whole_first: bool) -> None:
    """A 60% share recorded on device 0 and a whole GPU without a record run on a 2-GPU node;
    a restarted scheduler lists them in either order: the whole GPU is counted on device 1,
    and a new 40% share goes on device 0 (never both devices shared while a whole GPU runs)."""
    s = Scheduler(CoreConfig(), FakeClock(T0))
    s.node_upsert(node("n", 2))
    running = [bound(share("s60", 60), "n", (0,)), bound(whole("w"), "n")]
    for p in running if not whole_first else running[::-1]:
        s.pod_upsert(p)
    assert s.cache.devices_of(uid("w")) == (1,)
    s.pod_upsert(share("s40", 40))
    [d] = [d for d in s.run_until_idle() if isinstance(d, BindGang)]
    assert [b.devices for b in d.bindings] == [(0,)]
    assert used(s.cache, "n") == [1000, 1000]


def test_records_that_conflict_are_reported_once_as_a_decision() -> None:
    s = Scheduler(CoreConfig(), FakeClock(T0))
    s.node_upsert(node("n", 1))
    s.pod_upsert(bound(share("a", 70), "n", (0,)))
    s.pod_upsert(bound(whole("w"), "n"))
    [d] = [d for d in s.run_until_idle() if isinstance(d, DeviceConflict)]
    assert d.pod.name == "w" and d.node == "n" and d.devices == (0,)
    assert "device 0 at 170%" in d.message and "records are kept" in d.message
    assert not [d for d in s.run_until_idle() if isinstance(d, DeviceConflict)]
