"""Builds the filter and score pipeline named by the configuration."""

from __future__ import annotations

from gangsched.core.cache import ClusterCache
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
from gangsched.core.plugins import FILTERS, SCORERS

__all__ = ["UnknownPluginError", "build_finder"]


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
    return NodeFinder(cache, filters, scorers, nodes_to_score=config.nodes_to_score)
