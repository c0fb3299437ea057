"""Builds the filter and score pipeline named by the configuration, and the placement
profiles (binpack, fgd, spread) that name its default scorers."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gangsched.core import gpu
from gangsched.core.cache import ClusterCache, DevicePolicy
from gangsched.core.config import CoreConfig
from gangsched.core.framework import (
    FilterPlugin,
    GangLookup,
    NormalizingScorePlugin,
    PluginContext,
    PreFilterPlugin,
    ScorePlugin,
)
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.plugins import (
    BINPACK_SCORE_WEIGHTS,
    DEFAULT_SCORE_WEIGHTS,
    FILTERS,
    PREFERENCE_SCORE_WEIGHTS,
    SCORERS,
)

__all__ = ["PLACEMENT_PROFILES", "PlacementProfile", "UnknownPluginError", "build_finder"]


@dataclass(frozen=True, slots=True)
class PlacementProfile:
    """The scorers and weights a placement profile uses (unless ``scoreWeights`` is given),
    and the order GPU candidates are walked in ("tightest" or "emptiest" first)."""

    name: str
    score_weights: Mapping[str, int]
    gpu_candidate_order: str = "tightest"


PLACEMENT_PROFILES: dict[str, PlacementProfile] = {
    # Fragmentation gradient descent, the default: place each pod where it least raises the
    # expected fragmentation of the recent mix of GPU requests; CPU-only pods avoid free GPUs.
    "fgd": PlacementProfile("fgd", DEFAULT_SCORE_WEIGHTS),
    # Pack GPU pods onto the fullest nodes and devices (best fit).
    "binpack": PlacementProfile("binpack", BINPACK_SCORE_WEIGHTS),
    # Spread GPU pods: the emptiest nodes and devices first.
    "spread": PlacementProfile(
        "spread",
        {"GPUSpread": 10, "AvoidFreeGPUs": 2, "LeastAllocated": 1, **PREFERENCE_SCORE_WEIGHTS},
        gpu_candidate_order="emptiest",
    ),
}


class UnknownPluginError(ValueError):
    pass


def build_finder(cache: ClusterCache, config: CoreConfig, gangs: GangLookup) -> NodeFinder:
    ctx = PluginContext(cache, gangs, config.plugin_settings)
    filters: list[FilterPlugin | PreFilterPlugin] = []
    for name in config.filters:
        if name not in FILTERS:
            raise UnknownPluginError(f"filters: unknown plugin {name!r}; known: {sorted(FILTERS)}")
        filters.append(FILTERS[name](ctx))
    scorers: list[tuple[ScorePlugin | NormalizingScorePlugin, int]] = []
    for name, weight in sorted(config.score_weights.items()):
        if name not in SCORERS:
            raise UnknownPluginError(
                f"scoreWeights: unknown plugin {name!r}; known: {sorted(SCORERS)}"
            )
        if weight < 0:
            raise UnknownPluginError(f"scoreWeights.{name}: weight must be >= 0, got {weight}")
        scorers.append((SCORERS[name](ctx), weight))
    _install_device_policy(cache, scorers)
    return NodeFinder(
        cache,
        filters,
        scorers,
        nodes_to_score=config.nodes_to_score,
        emptiest_first=config.gpu_candidate_order == "emptiest",
    )


def _install_device_policy(
    cache: ClusterCache, scorers: list[tuple[ScorePlugin | NormalizingScorePlugin, int]]
) -> None:
    """The device choice of the enabled scorer that has one (the highest weight wins), so the
    devices a pod gets are the ones its score assumed; best fit when none has."""
    policy: DevicePolicy = gpu.best_fit
    best = 0
    for plugin, weight in scorers:
        choose = getattr(plugin, "device_policy", None)
        if choose is not None and weight > best:
            policy, best = choose, weight
    cache.device_policy = policy
