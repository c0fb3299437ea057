"""Builds the filter and score pipeline named by the configuration."""

from __future__ import annotations

from gangsched.core.cache import ClusterCache
from gangsched.core.config import CoreConfig
from gangsched.core.framework import FilterPlugin, ScorePlugin
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.plugins import FILTERS, SCORERS
from gangsched.core.plugins.task_topology import GangLookup, TaskTopology

__all__ = ["UnknownPluginError", "build_finder"]


class UnknownPluginError(ValueError):
    pass


# Score plugins that need the scheduler's state, built with it.
CONTEXT_SCORERS = frozenset({TaskTopology.name})


def build_finder(cache: ClusterCache, config: CoreConfig, gangs: GangLookup) -> NodeFinder:
    filters: list[FilterPlugin] = []
    for name in config.filters:
        if name not in FILTERS:
            raise UnknownPluginError(f"filters: unknown plugin {name!r}; known: {sorted(FILTERS)}")
        filters.append(FILTERS[name]())
    scorers: list[tuple[ScorePlugin, int]] = []
    for name, weight in sorted(config.score_weights.items()):
        if name in CONTEXT_SCORERS:
            scorers.append((TaskTopology(cache, gangs), weight))
            continue
        if name not in SCORERS:
            raise UnknownPluginError(
                f"scoreWeights: unknown plugin {name!r}; known: {sorted(SCORERS)}"
            )
        if weight < 0:
            raise UnknownPluginError(f"scoreWeights.{name}: weight must be >= 0, got {weight}")
        scorers.append((SCORERS[name](), weight))
    return NodeFinder(cache, filters, scorers, nodes_to_score=config.nodes_to_score)
