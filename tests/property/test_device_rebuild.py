"""Rebuilding GPU device accounting after a restart (core/cache.py): a restarted scheduler lists
the running pods in whatever order the API server gives (by name), and the accounting it builds
is the same whatever that order, and the same as before the restart:

- every pod with a record (Koordinator's ``device-allocated``) is counted on its recorded
  devices, never moved;
- every whole-GPU pod without one is counted on devices the records leave free;
- no device holds more than 1000 milli-GPUs, and no conflict is reported, when the records and
  the pods fit the node;
- a scheduler that placed the pods itself (bindings confirmed with the devices the binder
  records) and a fresh one fed the same pods in any order count the same devices per node.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.gpu import GPU, KOORD_CORE, MILLI
from gangsched.core.model import Node, Pod, PodPhase
from gangsched.core.resources import CPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler

GI = 2**30
T0 = 1000.0

PROPERTY = settings(
    max_examples=150,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def gpu_node(name: str, gpus: int) -> Node:
    return Node(name, {CPU: 64_000, MEMORY: 64 * GI, PODS: 110, GPU: gpus, KOORD_CORE: 100 * gpus})


def share(name: str, percent: int) -> Pod:
    return Pod(name, "ml", name, {CPU: 100, MEMORY: GI, PODS: 1, KOORD_CORE: percent})


def whole(name: str, count: int) -> Pod:
    return Pod(name, "ml", name, {CPU: 100, MEMORY: GI, PODS: 1, GPU: count})


def running(pod: Pod, node: str, devices: tuple[int, ...] = ()) -> Pod:
    return replace(pod, node_name=node, phase=PodPhase.RUNNING, gpu_devices=devices)


@st.composite
def fitting_nodes(draw: st.DrawFn) -> tuple[int, list[Pod]]:
    """A node's device count and running pods that fit it: shares recorded on devices with
    room, whole-GPU pods (no record) on as many devices as the shares leave empty."""
    n = draw(st.integers(1, 6))
    used = [0] * n
    pods: list[Pod] = []
    for i in range(draw(st.integers(0, 10))):
        d = draw(st.integers(0, n - 1))
        percent = draw(st.integers(1, 100))
        if used[d] + percent * 10 <= MILLI:
            used[d] += percent * 10
            pods.append(running(share(f"s{i}", percent), "n", (d,)))
    free = used.count(0)
    left = draw(st.integers(0, free))
    i = 0
    while left:
        count = draw(st.integers(1, left))
        pods.append(running(whole(f"w{i}", count), "n"))
        left -= count
        i += 1
    return n, pods


def rebuilt(n: int, pods: list[Pod]) -> ClusterCache:
    cache = ClusterCache()
    cache.upsert_node(gpu_node("n", n))
    for p in pods:
        cache.upsert_pod(p)
    return cache


@PROPERTY
@given(fitting_nodes(), st.randoms(use_true_random=False))
def test_a_rebuild_honours_records_whatever_the_list_order(
    node: tuple[int, list[Pod]], rnd: object
) -> None:
    n, pods = node
    canonical = rebuilt(n, sorted(pods, key=lambda p: (not p.gpu_devices, p.uid)))
    shuffled = list(pods)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    cache = rebuilt(n, shuffled)
    gpus = cache.nodes["n"].gpus
    assert gpus is not None
    assert max(gpus.used, default=0) <= MILLI
    assert cache.take_conflicts() == {}
    shares_on: set[int] = set()
    for p in pods:
        if p.gpu_devices:
            assert cache.devices_of(p.uid) == p.gpu_devices
            shares_on.update(p.gpu_devices)
    wholes = [d for p in pods if not p.gpu_devices for d in cache.devices_of(p.uid)]
    assert len(wholes) == len(set(wholes)) and not shares_on & set(wholes)
    canonical_gpus = canonical.nodes["n"].gpus
    assert canonical_gpus is not None
    assert sorted(gpus.used) == sorted(canonical_gpus.used)
    assert {p.uid: cache.devices_of(p.uid) for p in pods if p.gpu_devices} == {
        p.uid: canonical.devices_of(p.uid) for p in pods if p.gpu_devices
    }


@st.composite
def workloads(draw: st.DrawFn) -> list[Pod]:
    out: list[Pod] = []
    for i in range(draw(st.integers(1, 14))):
        if draw(st.booleans()):
            out.append(share(f"p{i:02d}", draw(st.sampled_from([10, 25, 40, 50, 60, 75]))))
        else:
            out.append(whole(f"p{i:02d}", draw(st.integers(1, 2))))
    return out


@PROPERTY
@given(st.integers(1, 3), workloads(), st.randoms(use_true_random=False))
def test_a_restart_counts_the_devices_the_running_scheduler_counted(
    nodes: int, pods: list[Pod], rnd: object
) -> None:
    """Pods placed one by one by a running scheduler (bindings confirmed with the binder's
    records), then a restart that lists them in a random order: per node, the same devices
    used as many milli-GPUs, and every recorded share where it was."""
    s = Scheduler(CoreConfig(), FakeClock(T0))
    for i in range(nodes):
        s.node_upsert(gpu_node(f"n{i}", 2))
    for p in pods:
        s.pod_upsert(p)
        for d in s.run_until_idle():
            if isinstance(d, BindGang):
                for b in d.bindings:
                    s.pod_upsert(running(s.cache.pods[b.pod.uid], b.node, b.devices))
    placed = [p for p in s.cache.pods.values() if p.node_name]
    before = {name: sorted(info.gpus.used) for name, info in s.cache.nodes.items() if info.gpus}
    again = Scheduler(CoreConfig(), FakeClock(T0))
    for i in range(nodes):
        again.node_upsert(gpu_node(f"n{i}", 2))
    rnd.shuffle(placed)  # type: ignore[attr-defined]
    for p in placed:
        again.pod_upsert(p)
    after = {name: sorted(info.gpus.used) for name, info in again.cache.nodes.items() if info.gpus}
    assert after == before
    for p in placed:
        if p.gpu_devices:
            assert again.cache.devices_of(p.uid) == p.gpu_devices
    assert again.cache.take_conflicts() == {}
