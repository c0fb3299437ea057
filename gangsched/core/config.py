"""The core's settings: plain values, validated by the adapters' configuration layer."""

from __future__ import annotations

from dataclasses import dataclass, field

from gangsched.core.framework import PluginSettings
from gangsched.core.plugins import DEFAULT_FILTERS, DEFAULT_SCORE_WEIGHTS

__all__ = ["CoreConfig"]


def _default_weights() -> dict[str, int]:
    return dict(DEFAULT_SCORE_WEIGHTS)


def _default_filters() -> tuple[str, ...]:
    return DEFAULT_FILTERS


@dataclass(frozen=True, slots=True)
class CoreConfig:
    scheduler_name: str = "gangsched"
    # Permit timeout for gangs whose PodGroup does not set scheduleTimeoutSeconds.
    default_schedule_timeout_seconds: float = 300.0
    # When set, replaces every gang's own timeout (an operator's override).
    schedule_timeout_override_seconds: float | None = None
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 10.0
    # A gang parked as unschedulable is retried at least this often, event or not.
    unschedulable_flush_seconds: float = 60.0
    # Stop searching after this many feasible nodes and take the best of them.
    nodes_to_score: int = 100
    filters: tuple[str, ...] = field(default_factory=_default_filters)
    score_weights: dict[str, int] = field(default_factory=_default_weights)
    # The order GPU pods walk candidate nodes in: "tightest" (fewest free devices first,
    # packing) or "emptiest" (most free first, spreading).
    gpu_candidate_order: str = "tightest"
    plugin_settings: PluginSettings = field(default_factory=PluginSettings)
    # Whole-gang preemption of gangs of strictly lower priority.
    preemption: bool = True
    # How long capacity freed by a preemption is held for the preemptor while its victims
    # terminate; then it is given back and the gang tries again.
    preemption_hold_seconds: float = 120.0
    # The nodes' topology levels, node label keys from the largest domain to the smallest
    # (for example block, rack, hostname). A gang's preferred level falls back to the larger
    # levels listed before it; a required level need not be listed.
    topology_levels: tuple[str, ...] = ()
    # A gang that has waited this long for capacity gets a reservation (None: never).
    reservation_after_seconds: float | None = 60.0
