"""The built-in filter and score plugins, and the registry the profile is built from."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gangsched.core.framework import (
    FilterPlugin,
    NormalizingScorePlugin,
    PluginContext,
    PreFilterPlugin,
    ScorePlugin,
)
from gangsched.core.plugins.avoid_free_gpus import AvoidFreeGPUs
from gangsched.core.plugins.dynamic_resources import DynamicResources
from gangsched.core.plugins.fgd import FragmentationGradient
from gangsched.core.plugins.gang_locality import GangLocality
from gangsched.core.plugins.gpu_binpack import GPUBinPack
from gangsched.core.plugins.gpu_devices import GPUDevices
from gangsched.core.plugins.gpu_spread import GPUSpread
from gangsched.core.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityScore
from gangsched.core.plugins.least_allocated import LeastAllocated
from gangsched.core.plugins.node_affinity import NodeAffinity, NodeAffinityScore
from gangsched.core.plugins.node_name import NodeName
from gangsched.core.plugins.node_ports import NodePorts
from gangsched.core.plugins.node_unschedulable import NodeUnschedulable
from gangsched.core.plugins.node_volume_limits import NodeVolumeLimits
from gangsched.core.plugins.noderesources_fit import NodeResourcesFit
from gangsched.core.plugins.pod_topology_spread import PodTopologySpread, PodTopologySpreadScore
from gangsched.core.plugins.taint_toleration import TaintToleration, TaintTolerationScore
from gangsched.core.plugins.task_topology import TaskTopology
from gangsched.core.plugins.volume_binding import VolumeBinding
from gangsched.core.plugins.volume_restrictions import VolumeRestrictions
from gangsched.core.plugins.volume_zone import VolumeZone

__all__ = [
    "BINPACK_SCORE_WEIGHTS",
    "DEFAULT_FILTERS",
    "DEFAULT_SCORE_WEIGHTS",
    "FILTERS",
    "PREFERENCE_SCORE_WEIGHTS",
    "SCORERS",
    "AvoidFreeGPUs",
    "DynamicResources",
    "FragmentationGradient",
    "GPUBinPack",
    "GPUDevices",
    "GPUSpread",
    "GangLocality",
    "InterPodAffinity",
    "InterPodAffinityScore",
    "LeastAllocated",
    "NodeAffinity",
    "NodeAffinityScore",
    "NodeName",
    "NodePorts",
    "NodeResourcesFit",
    "NodeUnschedulable",
    "NodeVolumeLimits",
    "PodTopologySpread",
    "PodTopologySpreadScore",
    "TaintToleration",
    "TaintTolerationScore",
    "TaskTopology",
    "VolumeBinding",
    "VolumeRestrictions",
    "VolumeZone",
]

# Factories by plugin name: each gets the PluginContext (cache, gang specs, settings).
FilterFactory = Callable[[PluginContext], FilterPlugin | PreFilterPlugin]
ScoreFactory = Callable[[PluginContext], ScorePlugin | NormalizingScorePlugin]

FILTERS: dict[str, FilterFactory] = {
    NodeUnschedulable.name: lambda ctx: NodeUnschedulable(),
    NodeName.name: lambda ctx: NodeName(),
    TaintToleration.name: lambda ctx: TaintToleration(),
    NodeAffinity.name: lambda ctx: NodeAffinity(),
    NodeResourcesFit.name: lambda ctx: NodeResourcesFit(),
    GPUDevices.name: lambda ctx: GPUDevices(),
    NodePorts.name: lambda ctx: NodePorts(),
    PodTopologySpread.name: lambda ctx: PodTopologySpread(ctx.cache, ctx.settings),
    InterPodAffinity.name: lambda ctx: InterPodAffinity(ctx.cache),
    VolumeRestrictions.name: lambda ctx: VolumeRestrictions(ctx.cache),
    NodeVolumeLimits.name: lambda ctx: NodeVolumeLimits(ctx.cache),
    VolumeBinding.name: lambda ctx: VolumeBinding(ctx.cache),
    VolumeZone.name: lambda ctx: VolumeZone(ctx.cache),
    DynamicResources.name: lambda ctx: DynamicResources(ctx.cache),
}

SCORERS: dict[str, ScoreFactory] = {
    AvoidFreeGPUs.name: lambda ctx: AvoidFreeGPUs(ctx.gangs),
    FragmentationGradient.name: lambda ctx: FragmentationGradient(
        ctx.cache, ctx.settings.gpu_request_window, ctx.settings.gpu_model_label
    ),
    GPUBinPack.name: lambda ctx: GPUBinPack(devices=ctx.cache.resource_claims),
    GangLocality.name: lambda ctx: GangLocality(ctx.cache, ctx.gangs),
    GPUSpread.name: lambda ctx: GPUSpread(),
    InterPodAffinityScore.name: lambda ctx: InterPodAffinityScore(ctx.cache, ctx.settings),
    LeastAllocated.name: lambda ctx: LeastAllocated(),
    NodeAffinityScore.name: lambda ctx: NodeAffinityScore(),
    PodTopologySpreadScore.name: lambda ctx: PodTopologySpreadScore(ctx.cache, ctx.settings),
    TaintTolerationScore.name: lambda ctx: TaintTolerationScore(ctx.cache),
    TaskTopology.name: lambda ctx: TaskTopology(ctx.cache, ctx.gangs),
}

# Cheapest and most decisive first: the static ones are cached per (Placement, node) anyway;
# the ones that look at other pods run last, on the nodes the others let through.
DEFAULT_FILTERS: tuple[str, ...] = (
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "GPUDevices",
    "NodePorts",
    # kube-scheduler's order, which decides whose PreFilter message a pod gets first.
    "VolumeRestrictions",
    "NodeVolumeLimits",
    "VolumeBinding",
    "VolumeZone",
    "PodTopologySpread",
    "InterPodAffinity",
    # kube-scheduler appends it to its defaults (DRA is on by default since v1.34)
    "DynamicResources",
)

# The scorers every placement profile keeps: the pod's own preferences and the gang's task
# topology.
PREFERENCE_SCORE_WEIGHTS: dict[str, int] = {
    "InterPodAffinity": 2,
    "NodeAffinity": 2,
    "PodTopologySpread": 2,
    "TaintToleration": 1,
    "TaskTopology": 20,
}

# Best fit: GPU pods on the fullest nodes and devices (the ``binpack`` profile).
BINPACK_SCORE_WEIGHTS: dict[str, int] = {
    "GPUBinPack": 10,
    "LeastAllocated": 1,
    **PREFERENCE_SCORE_WEIGHTS,
}

# The default (the ``fgd`` profile): each pod where it least raises the expected
# fragmentation of the recent mix of GPU requests; CPU-only pods avoid free GPUs.
DEFAULT_SCORE_WEIGHTS: dict[str, int] = {
    "AvoidFreeGPUs": 2,
    "FragmentationGradient": 10,
    "GangLocality": 15,
    **PREFERENCE_SCORE_WEIGHTS,
}

if TYPE_CHECKING:
    # Structural conformance, checked by mypy: every plugin instance is a protocol instance.
    _filters: tuple[FilterPlugin, ...] = (
        NodeUnschedulable(),
        NodeName(),
        TaintToleration(),
        NodeAffinity(),
        NodeResourcesFit(),
        GPUDevices(),
    )
    _scorers: tuple[ScorePlugin, ...] = (
        AvoidFreeGPUs(),
        GPUBinPack(),
        GPUSpread(),
        LeastAllocated(),
        NodeAffinityScore(),
        TaintTolerationScore(),
    )
