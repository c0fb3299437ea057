"""The default profile keeps a gang's members together (GangLocality) while fragmentation
(FragmentationGradient) picks the nodes; the pod's own preferences and task topology still
decide where they apply."""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.cache import ClusterCache
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.gpu import MILLI
from gangsched.core.gpu_mix import RequestClass
from gangsched.core.model import (
    GangSpec,
    PodAffinity,
    PodAffinityTerm,
    PodPhase,
    RoleSpec,
    TopologySpec,
    WeightedPodAffinityTerm,
)
from gangsched.core.plugins import AvoidFreeGPUs, FragmentationGradient, GangLocality
from tests.core.builders import make_pod
from tests.core.test_fgd import gpu_node as device_node
from tests.core.test_scheduler import Harness, gpu_node, members, pod

GI = 1 << 30


def _placements(h: Harness) -> dict[str, str]:
    return {b.pod.name: b.node for d in h.decisions if isinstance(d, BindGang) for b in d.bindings}


def _small_gang_on_partly_used_nodes(config: CoreConfig) -> dict[str, str]:
    h = Harness(config, *(device_node(f"n{i}", 8) for i in range(5)))
    # n0 and n1 hold 6 GPUs (2 free), n2 holds 5 (3 free), n3 and n4 are empty
    for i, used in enumerate((6, 6, 5)):
        h.add(replace(pod(f"busy-{i}", gpus=used), node_name=f"n{i}", phase=PodPhase.RUNNING))
    # the recent mix: as many 2-GPU requests as 1-GPU ones
    for plugin, _ in h.s.finder._normalizing:
        if isinstance(plugin, FragmentationGradient):
            for i in range(10):
                plugin.mix.record(f"two-{i}", RequestClass(2, MILLI, None, 1000, GI))
    h.gang("ml/small", 3)
    h.add(*members("ml/small", 3))
    h.run()
    return _placements(h)


def test_a_gang_of_one_gpu_members_shares_a_node_under_the_default_profile() -> None:
    """Fragmentation alone sends the first member to n2 (3 free GPUs leave 2, still a home
    for a 2-GPU request), the second to an empty node (on n2 it would strand one GPU), the
    third back to n2 (closing it): two nodes. With GangLocality the members after the first
    fill the first member's node."""
    where = _small_gang_on_partly_used_nodes(CoreConfig())
    assert sorted(where.values()) == ["n2", "n2", "n2"], where
    weights = {k: v for k, v in CoreConfig().score_weights.items() if k != "GangLocality"}
    scattered = _small_gang_on_partly_used_nodes(CoreConfig(score_weights=weights))
    assert len(set(scattered.values())) == 2, scattered


def test_members_go_elsewhere_once_the_node_is_full() -> None:
    h = Harness(CoreConfig(), device_node("a", 2), device_node("b", 8), device_node("c", 8))
    h.gang("ml/six", 6)
    h.add(*members("ml/six", 6))
    h.run()
    where = _placements(h)
    assert len(where) == 6
    assert len(set(where.values())) <= 2, where  # never three nodes for six GPUs here


def test_the_scorer_is_not_asked_for_the_first_member_plain_pods_or_own_preferences() -> None:
    cache = ClusterCache()
    cache.upsert_node(gpu_node("a", 8))
    cache.upsert_node(gpu_node("b", 8))
    gangs: dict[str, GangSpec] = {"ml/g": GangSpec("ml/g", 2)}
    plugin = GangLocality(cache, gangs.get)
    first = pod("g-0", "ml/g")
    assert plugin.constant(first)  # no member counted yet
    cache.upsert_pod(replace(first, node_name="a", phase=PodPhase.RUNNING))
    second = pod("g-1", "ml/g")
    assert not plugin.constant(second)
    assert plugin.score(second, cache.nodes["a"]) == 100.0
    assert plugin.score(second, cache.nodes["b"]) == 0.0
    assert plugin.constant(pod("plain"))
    term = WeightedPodAffinityTerm(1, PodAffinityTerm("kubernetes.io/hostname", None))
    spread = replace(second, pod_affinity=PodAffinity(preferred_anti=(term,)))
    assert plugin.constant(spread)  # the pod's own soft anti-affinity decides
    gangs["ml/g"] = GangSpec(
        "ml/g",
        2,
        roles=(RoleSpec("ps", 1), RoleSpec("worker", 1)),
        topology=TopologySpec(affinity=(("ps", "worker"),)),
    )
    assert plugin.constant(second)  # TaskTopology decides
    # a member that leaves takes its node out of the gang's
    cache.remove_pod(first.uid)
    assert "ml/g" not in cache.gang_nodes


def test_avoid_free_gpus_leaves_affine_roles_to_task_topology() -> None:
    """A parameter server (CPU only) of a PS/worker job belongs with its workers, on nodes
    with free GPUs: AvoidFreeGPUs does not push it away."""
    spec = GangSpec(
        "ml/tf",
        3,
        roles=(RoleSpec("ps", 1), RoleSpec("worker", 2)),
        topology=TopologySpec(affinity=(("ps", "worker"),)),
    )
    plugin = AvoidFreeGPUs({"ml/tf": spec}.get)
    ps = replace(make_pod("ps").cpu("1").obj(), group="ml/tf", role="ps")
    assert plugin.constant(ps)
    alone = make_pod("cpu").cpu("1").obj()
    assert not plugin.constant(alone)
