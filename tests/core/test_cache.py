"""The node cache: what is counted against each node, and the indexes built on it."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangsched.core.cache import ClusterCache
from gangsched.core.model import Node, Pod, PodPhase
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from tests.core.builders import make_node, make_pod

GI = 2**30


def gpu_node(name: str, gpus: int = 8, cpu: str = "32", memory: str = "128Gi") -> Node:
    return make_node(name).gpus(gpus).cpu(cpu).memory(memory).node()


def gpu_pod(name: str, gpus: int = 1, cpu: str = "2", memory: str = "4Gi", **kw: object) -> Pod:
    pod = make_pod(name).gpus(gpus).cpu(cpu).memory(memory).obj()
    return replace(pod, **kw)  # type: ignore[arg-type]


@pytest.fixture
def cache() -> ClusterCache:
    c = ClusterCache()
    c.upsert_node(gpu_node("n1"))
    c.upsert_node(gpu_node("n2", gpus=4))
    return c


def requested(c: ClusterCache, node: str) -> dict[str, int]:
    return dict(c.nodes[node].requested)


def test_empty_nodes_are_free(cache: ClusterCache) -> None:
    assert requested(cache, "n1") == {}
    assert cache.nodes["n1"].free(GPU) == 8
    assert cache.cluster_free(GPU) == 12
    assert cache.cluster_free(CPU) == 64_000
    assert cache.cluster_free(MEMORY) == 256 * GI


def test_bound_pod_counts_on_its_node(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a", gpus=2, node_name="n1", phase=PodPhase.RUNNING))
    assert requested(cache, "n1") == {GPU: 2, CPU: 2000, MEMORY: 4 * GI, PODS: 1}
    assert cache.node_of("uid-a") == "n1"
    assert cache.cluster_free(GPU) == 10
    assert cache.nodes["n1"].pods == {"uid-a"}


def test_pending_pod_counts_nowhere(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a"))
    assert cache.node_of("uid-a") == ""
    assert requested(cache, "n1") == requested(cache, "n2") == {}
    assert "uid-a" in cache.pods


def test_pods_of_other_schedulers_are_counted(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("x", gpus=4, node_name="n2", scheduler_name="default-scheduler"))
    assert cache.nodes["n2"].free(GPU) == 0
    assert cache.cluster_free(GPU) == 8


def test_terminal_pods_free_their_resources(cache: ClusterCache) -> None:
    pod = gpu_pod("a", gpus=3, node_name="n1", phase=PodPhase.RUNNING)
    cache.upsert_pod(pod)
    assert cache.nodes["n1"].free(GPU) == 5
    for phase in (PodPhase.SUCCEEDED, PodPhase.FAILED):
        cache.upsert_pod(replace(pod, phase=phase))
        assert cache.nodes["n1"].free(GPU) == 8
        assert requested(cache, "n1") == {}
        assert cache.node_of("uid-a") == ""
        assert cache.cluster_free(GPU) == 12


def test_assumed_pods_count(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a", gpus=2))
    cache.assume("uid-a", "n2")
    assert cache.assumed == {"uid-a": "n2"}
    assert cache.node_of("uid-a") == "n2"
    assert cache.nodes["n2"].free(GPU) == 2
    assert cache.cluster_free(GPU) == 10


def test_forget_is_idempotent(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a", gpus=2))
    cache.assume("uid-a", "n2")
    cache.forget("uid-a")
    after_once = (requested(cache, "n2"), dict(cache.assumed), cache.cluster_free(GPU))
    cache.forget("uid-a")
    cache.forget("never-assumed")
    after_twice = (requested(cache, "n2"), dict(cache.assumed), cache.cluster_free(GPU))
    assert after_once == after_twice == ({}, {}, 12)


def test_forget_leaves_a_bound_pod_counted(cache: ClusterCache) -> None:
    pod = gpu_pod("a", gpus=2)
    cache.upsert_pod(pod)
    cache.assume("uid-a", "n1")
    cache.upsert_pod(replace(pod, node_name="n1", phase=PodPhase.RUNNING))
    cache.forget("uid-a")
    assert cache.node_of("uid-a") == "n1"
    assert cache.nodes["n1"].free(GPU) == 6


def test_bind_confirmation_replaces_the_assumption(cache: ClusterCache) -> None:
    pod = gpu_pod("a", gpus=2)
    cache.upsert_pod(pod)
    cache.assume("uid-a", "n1")
    cache.upsert_pod(replace(pod, node_name="n1"))
    assert cache.assumed == {}
    assert requested(cache, "n1")[GPU] == 2  # counted once, not twice
    assert cache.cluster_free(GPU) == 10


def test_bind_confirmation_on_another_node_moves_the_count(cache: ClusterCache) -> None:
    pod = gpu_pod("a", gpus=2)
    cache.upsert_pod(pod)
    cache.assume("uid-a", "n1")
    cache.upsert_pod(replace(pod, node_name="n2"))
    assert cache.assumed == {}
    assert requested(cache, "n1") == {}
    assert requested(cache, "n2")[GPU] == 2


def test_pending_update_of_assumed_pod_stays_counted(cache: ClusterCache) -> None:
    pod = gpu_pod("a", gpus=2)
    cache.upsert_pod(pod)
    cache.assume("uid-a", "n1")
    cache.upsert_pod(replace(pod, priority=3))
    assert cache.assumed == {"uid-a": "n1"}
    assert requested(cache, "n1")[GPU] == 2


def test_request_change_is_recounted(cache: ClusterCache) -> None:
    pod = gpu_pod("a", gpus=2, node_name="n1")
    cache.upsert_pod(pod)
    cache.upsert_pod(replace(pod, requests={**pod.requests, GPU: 5}))
    assert requested(cache, "n1")[GPU] == 5


def test_remove_pod_frees(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a", gpus=2, node_name="n1"))
    cache.upsert_pod(gpu_pod("b", gpus=1))
    cache.assume("uid-b", "n1")
    assert cache.remove_pod("uid-a") is not None
    assert cache.remove_pod("uid-b") is not None
    assert cache.remove_pod("uid-b") is None
    assert cache.assumed == {}
    assert requested(cache, "n1") == {}
    assert cache.cluster_free(GPU) == 12


def test_pod_on_unknown_node_is_remembered(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a", gpus=2, node_name="late"))
    info = cache.nodes["late"]
    assert info.node is None
    assert list(cache.gpu_candidates(1)) == [cache.nodes["n2"], cache.nodes["n1"]]
    assert cache.cluster_free(GPU) == 12  # unknown nodes are not in the totals
    cache.upsert_node(gpu_node("late", gpus=4))
    assert cache.nodes["late"].free(GPU) == 2
    assert cache.cluster_free(GPU) == 14


def test_remove_node_with_bound_pods_keeps_them(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a", gpus=2, node_name="n1"))
    cache.upsert_pod(gpu_pod("b", gpus=1))
    cache.assume("uid-b", "n1")
    lost = cache.remove_node("n1")
    assert lost == ["uid-b"]
    # the reservation stays until the caller drops it: a binding may already be on its way
    assert cache.assumed == {"uid-b": "n1"}
    assert cache.nodes["n1"].node is None
    assert cache.node_of("uid-a") == "n1"
    assert cache.cluster_free(GPU) == 4
    cache.forget("uid-b")
    assert cache.assumed == {}
    assert cache.node_of("uid-a") == "n1"


def test_remove_node_holding_only_assumed_pods() -> None:
    """A node whose only pods are reservations: they stay counted on the node's ghost until
    the caller drops them; then the ghost goes too."""
    cache = ClusterCache()
    cache.upsert_node(gpu_node("n1", gpus=2))
    cache.upsert_pod(gpu_pod("a"))
    cache.assume("uid-a", "n1")
    lost = cache.remove_node("n1")
    assert lost == ["uid-a"]
    assert cache.nodes["n1"].node is None
    assert cache.cluster_free(GPU) == 0
    cache.forget("uid-a")
    assert cache.assumed == {}
    assert "n1" not in cache.nodes


def test_remove_empty_and_unknown_nodes(cache: ClusterCache) -> None:
    assert cache.remove_node("n2") == []
    assert "n2" not in cache.nodes
    assert cache.remove_node("n2") == []
    assert cache.remove_node("nope") == []
    assert cache.cluster_free(GPU) == 8


def test_not_ready_nodes_leave_the_totals(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a", gpus=2, node_name="n2"))
    cache.upsert_node(make_node("n1").gpus(8).cpu("32").memory("128Gi").not_ready().node())
    assert cache.cluster_free(GPU) == 2
    assert [i.name for i in cache.gpu_candidates(1)] == ["n2"]
    cache.upsert_node(gpu_node("n1"))
    assert cache.cluster_free(GPU) == 10
    assert [i.name for i in cache.gpu_candidates(1)] == ["n2", "n1"]


def test_cordon_keeps_counts_exact(cache: ClusterCache) -> None:
    """Whether a cordoned node counts in the free totals is a filter's business; what is
    counted on it must not change."""
    cache.upsert_pod(gpu_pod("a", gpus=2, node_name="n2"))
    before = requested(cache, "n2")
    cache.upsert_node(make_node("n2").gpus(4).cpu("32").memory("128Gi").cordon().node())
    assert requested(cache, "n2") == before
    cache.upsert_node(gpu_node("n2", gpus=4))
    assert requested(cache, "n2") == before
    assert cache.cluster_free(GPU) == 10


def test_gpu_candidates_tightest_first(cache: ClusterCache) -> None:
    cache.upsert_node(gpu_node("n3", gpus=2))
    cache.upsert_node(gpu_node("cpu-only", gpus=0))
    assert [i.name for i in cache.gpu_candidates(1)] == ["n3", "n2", "n1"]
    assert [i.name for i in cache.gpu_candidates(3)] == ["n2", "n1"]
    cache.upsert_pod(gpu_pod("a", gpus=7, node_name="n1"))
    assert [i.name for i in cache.gpu_candidates(1)] == ["n1", "n3", "n2"]
    assert [i.name for i in cache.gpu_candidates(2)] == ["n3", "n2"]
    cache.upsert_pod(gpu_pod("b", gpus=1, node_name="n1"))
    assert "n1" not in [i.name for i in cache.gpu_candidates(1)]
    assert cache.gpu_bucket_sizes() == {2: 1, 4: 1}


def test_totals_match_a_recount_after_churn(cache: ClusterCache) -> None:
    pods = [gpu_pod(f"p{i}", gpus=1 + i % 3) for i in range(6)]
    for p in pods:
        cache.upsert_pod(p)
    for i, p in enumerate(pods):
        cache.assume(p.uid, "n1" if i % 2 else "n2")
    cache.upsert_pod(replace(pods[0], node_name="n2", phase=PodPhase.RUNNING))
    cache.forget(pods[1].uid)
    cache.upsert_pod(replace(pods[2], phase=PodPhase.FAILED))
    cache.remove_pod(pods[3].uid)
    expected_used = {"n1": 0, "n2": 0}
    for p in pods:
        node = cache.node_of(p.uid)
        if node:
            expected_used[node] += p.requests[GPU]
    assert cache.nodes["n1"].requested.get(GPU, 0) == expected_used["n1"]
    assert cache.nodes["n2"].requested.get(GPU, 0) == expected_used["n2"]
    assert cache.cluster_free(GPU) == 12 - sum(expected_used.values())


def test_a_terminal_pod_never_counts_even_when_assumed(cache: ClusterCache) -> None:
    """Found by the forget-twice property: a pod that finished before it was assumed."""
    cache.upsert_pod(gpu_pod("t"))
    cache.upsert_pod(replace(cache.pods["uid-t"], phase=PodPhase.SUCCEEDED))
    cache.assume("uid-t", "n1")
    assert cache.node_of("uid-t") == ""
    assert cache.cluster_free(GPU) == 12  # nothing held on n1 (8) or n2 (4)
    cache.forget("uid-t")
    assert cache.assumed == {}


def test_freed_since_names_the_nodes_freed_after_a_point(cache: ClusterCache) -> None:
    """What the queue's idle retries read (Scheduler.freed_could_help): the nodes where a pod
    stopped being counted, or that came or changed, after a point; once each, in order."""
    cache.upsert_pod(gpu_pod("a", node_name="n1", phase=PodPhase.RUNNING))
    cache.upsert_pod(gpu_pod("b", node_name="n2", phase=PodPhase.RUNNING))
    cache.upsert_pod(gpu_pod("c", node_name="n1", phase=PodPhase.RUNNING))
    seen = cache.freed_seq
    assert cache.freed_since(seen) == []
    cache.upsert_pod(gpu_pod("p"))
    cache.assume("uid-p", "n2")  # counting more frees nothing
    cache.lift("uid-a")  # nor does a what-if
    cache.restore("uid-a")
    assert cache.freed_since(seen) == []
    cache.upsert_pod(replace(cache.pods["uid-a"], phase=PodPhase.SUCCEEDED))
    cache.remove_pod("uid-b")
    cache.remove_pod("uid-c")  # n1 again: named once, at its latest
    assert cache.freed_since(seen) == ["n2", "n1"]
    later = cache.freed_seq
    cache.forget("uid-p")  # an assumption dropped frees its node
    assert cache.freed_since(later) == ["n2"]
    cache.upsert_node(gpu_node("n3"))
    assert cache.freed_since(later) == ["n2", "n3"]


def test_the_freed_log_stays_as_small_as_the_nodes(cache: ClusterCache) -> None:
    cache.upsert_pod(gpu_pod("a"))
    for _ in range(500):
        cache.assume("uid-a", "n1")
        cache.forget("uid-a")
    assert cache.freed_since(0) == ["n2", "n1"]  # (the nodes came: freed at first)
    assert len(cache._freed_log) <= 64 + 4 * 2
