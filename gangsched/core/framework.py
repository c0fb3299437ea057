"""Extension points, on kube-scheduler's model. Expected failures are Status values, never
exceptions.

For one pod, the node finder runs:

1. **PreFilter** (``PreFilterPlugin.pre_filter``): once per pod, before any node is looked at.
   It may compute per-pod state into the ``CycleState`` its Filter reads, fail the pod on every
   node at once, or return ``SKIP`` when its Filter has nothing to check for this pod.
2. **Filter** (``FilterPlugin.filter``): whether the pod may go on one node. A filter marked
   ``static`` looks only at the pod's Placement and the node's labels, taints and flags (never
   at resources or other pods), so its verdict is cached per (Placement, node) until a node
   changes; the others run on every candidate.
3. **PreScore / Score / NormalizeScore**: a plain ``ScorePlugin`` rates a node from 0 to 100 by
   itself. A ``NormalizingScorePlugin`` computes per-pod state in ``pre_score`` (or returns
   ``SKIP``), gives every feasible node a raw score, and ``normalize`` maps the raw scores of
   all feasible nodes to 0..100 (kube-scheduler's NormalizeScore).

AddPod / RemovePod: in a gang cycle each member's placement is assumed into the cluster cache
before the next member is placed (``CycleSnapshot.place``), and rolled back with
``CycleSnapshot.rollback``. The cache keeps the indexes plugins read (pods by label and
namespace, affinity terms of counted pods, host ports per node) up to date on every assume and
forget, and PreFilter runs for each member against that state, so members reserved earlier in
the cycle count for the later ones exactly as AddPod makes them count in kube-scheduler.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.gpu import MODEL_LABEL
from gangsched.core.model import GangSpec, Pod, SpreadConstraint

__all__ = [
    "SKIP",
    "SUCCESS",
    "Code",
    "CycleState",
    "FilterPlugin",
    "GangLookup",
    "NormalizingScorePlugin",
    "PluginContext",
    "PluginSettings",
    "PreFilterPlugin",
    "ScorePlugin",
    "Status",
]


class Code(enum.IntEnum):
    SUCCESS = 0
    UNSCHEDULABLE = 1  # may fit later, when the cluster changes
    UNRESOLVABLE = 2  # will not fit on this node whatever happens to other pods
    WAIT = 3
    ERROR = 4
    SKIP = 5  # PreFilter/PreScore: nothing for this plugin to do for this pod


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""
    # (a field, not a property: read for every filter of every node on the hot path)
    ok: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ok", self.code is Code.SUCCESS)


SUCCESS = Status()
SKIP = Status(Code.SKIP)


class CycleState:
    """Per-pod state written by PreFilter/PreScore and read by Filter/Score, keyed by plugin
    name."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data: dict[str, object] = {}

    def write(self, key: str, value: object) -> None:
        self._data[key] = value

    def read(self, key: str) -> object:
        return self._data.get(key)


GangLookup = Callable[[str], GangSpec | None]


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """Plugin arguments from the configuration (kube-scheduler's pluginConfig)."""

    # InterPodAffinity: the score weight of an existing pod's *required* affinity term that
    # selects the incoming pod (kube-scheduler's hardPodAffinityWeight, 0 to 100).
    hard_pod_affinity_weight: int = 1
    # PodTopologySpread: constraints for pods that set none of their own (off when empty).
    default_spread_constraints: tuple[SpreadConstraint, ...] = ()
    # FragmentationGradient: how many recent GPU pods the mix of request classes holds.
    gpu_request_window: int = 1000
    # The node label that gives the GPU model (pods constrain it through node affinity).
    gpu_model_label: str = MODEL_LABEL


@dataclass(frozen=True, slots=True)
class PluginContext:
    """What a plugin factory may use: the cluster cache, gang specs, plugin settings."""

    cache: ClusterCache
    gangs: GangLookup
    settings: PluginSettings = PluginSettings()


class FilterPlugin(Protocol):
    name: str
    static: bool

    def filter(self, pod: Pod, node: NodeInfo) -> Status: ...


@runtime_checkable
class PreFilterPlugin(Protocol):
    """A filter with a PreFilter step: ``filter_with`` is called with the state its
    ``pre_filter`` wrote, and only when ``pre_filter`` returned SUCCESS."""

    name: str
    static: bool

    def pre_filter(self, pod: Pod, state: CycleState) -> Status: ...

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status: ...


class ScorePlugin(Protocol):
    """A scorer may also have ``constant(pod) -> bool``: True when it scores every node the
    same for this pod, so that the search need not ask it (the ranking does not change)."""

    name: str

    def score(self, pod: Pod, node: NodeInfo) -> float:
        """0 (worst) to 100 (best)."""
        ...


@runtime_checkable
class NormalizingScorePlugin(Protocol):
    name: str

    def pre_score(self, pod: Pod, state: CycleState) -> Status: ...

    def raw_score(self, pod: Pod, node: NodeInfo, state: CycleState) -> float: ...

    def normalize(self, scores: list[float], state: CycleState) -> None:
        """Map the raw scores of every feasible node, in place, to 0..100."""
        ...
