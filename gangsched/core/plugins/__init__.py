"""The built-in filter and score plugins, and the registry the profile is built from."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from gangsched.core.framework import FilterPlugin, ScorePlugin
from gangsched.core.plugins.gpu_binpack import GPUBinPack
from gangsched.core.plugins.least_allocated import LeastAllocated
from gangsched.core.plugins.node_affinity import NodeAffinity, NodeAffinityScore
from gangsched.core.plugins.node_name import NodeName
from gangsched.core.plugins.node_unschedulable import NodeUnschedulable
from gangsched.core.plugins.noderesources_fit import NodeResourcesFit
from gangsched.core.plugins.taint_toleration import TaintToleration, TaintTolerationScore

__all__ = [
    "DEFAULT_FILTERS",
    "DEFAULT_SCORE_WEIGHTS",
    "FILTERS",
    "SCORERS",
    "GPUBinPack",
    "LeastAllocated",
    "NodeAffinity",
    "NodeAffinityScore",
    "NodeName",
    "NodeResourcesFit",
    "NodeUnschedulable",
    "TaintToleration",
    "TaintTolerationScore",
]

FILTERS: dict[str, Callable[[], FilterPlugin]] = {
    NodeUnschedulable.name: NodeUnschedulable,
    NodeName.name: NodeName,
    TaintToleration.name: TaintToleration,
    NodeAffinity.name: NodeAffinity,
    NodeResourcesFit.name: NodeResourcesFit,
}

SCORERS: dict[str, Callable[[], ScorePlugin]] = {
    GPUBinPack.name: GPUBinPack,
    LeastAllocated.name: LeastAllocated,
    NodeAffinityScore.name: NodeAffinityScore,
    TaintTolerationScore.name: TaintTolerationScore,
}

# Cheapest and most decisive first: the static ones are cached per (Placement, node) anyway.
DEFAULT_FILTERS: tuple[str, ...] = (
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
)

DEFAULT_SCORE_WEIGHTS: dict[str, int] = {
    "GPUBinPack": 10,
    "LeastAllocated": 1,
    "NodeAffinity": 2,
    "TaintToleration": 1,
    "TaskTopology": 20,  # built by the profile with the scheduler's state (task_topology.py)
}

if TYPE_CHECKING:
    # Structural conformance, checked by mypy: every plugin instance is a protocol instance.
    _filters: tuple[FilterPlugin, ...] = (
        NodeUnschedulable(),
        NodeName(),
        TaintToleration(),
        NodeAffinity(),
        NodeResourcesFit(),
    )
    _scorers: tuple[ScorePlugin, ...] = (
        GPUBinPack(),
        LeastAllocated(),
        NodeAffinityScore(),
        TaintTolerationScore(),
    )
