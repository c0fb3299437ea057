"""``gangsched simulate``: load a workload, run it through the core, report."""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError

from gangsched.core.config import CoreConfig
from gangsched.core.resources import GPU
from gangsched.settings import Settings
from gangsched.sim.engine import SimResult, Simulation
from gangsched.sim.jobs import build_jobs, build_nodes
from gangsched.sim.report import format_summary, format_table, plot, summary
from gangsched.sim.workload import WorkloadError, load_workload

__all__ = ["core_config_from", "simulate"]

_SETTING_NAMES = {
    "defaultScheduleTimeoutSeconds": "default_schedule_timeout_seconds",
    "scheduleTimeoutOverrideSeconds": "schedule_timeout_override_seconds",
    "backoffInitialSeconds": "backoff_initial_seconds",
    "backoffMaxSeconds": "backoff_max_seconds",
    "unschedulableFlushSeconds": "unschedulable_flush_seconds",
    "preemption": "preemption",
    "preemptionHoldSeconds": "preemption_hold_seconds",
    "reservationAfterSeconds": "reservation_after_seconds",
    "nodesToScore": "nodes_to_score",
    "scoreWeights": "score_weights",
    "filters": "filters",
}


def core_config_from(settings: dict[str, Any]) -> CoreConfig:
    """CoreConfig from a workload's ``settings``: the scheduling settings of the configuration
    file (camelCase keys), validated as the daemon validates them."""
    unknown = sorted(set(settings) - set(_SETTING_NAMES))
    if unknown:
        raise WorkloadError(f"settings: unknown {unknown}; known: {sorted(_SETTING_NAMES)}")
    try:
        return Settings.model_validate(settings).core()
    except ValidationError as e:
        lines = [
            f"  {'.'.join(['settings', *(str(x) for x in err['loc'])])}: {err['msg']}"
            for err in e.errors()
        ]
        raise WorkloadError("invalid settings:\n" + "\n".join(lines)) from None


def simulate(
    path: str, *, as_json: bool, plot_path: str | None, show_all: bool, until: float | None
) -> tuple[int, str, SimResult]:
    w, base = load_workload(path)
    nodes = build_nodes(w, base)
    jobs = build_jobs(w, base, sum(n.allocatable.get(GPU, 0) for n in nodes))
    sim = Simulation(
        nodes,
        jobs,
        core_config_from(w.settings),
        until=until,
        grace=w.termination_grace_period_seconds,
    )
    result = sim.run()
    s = summary(result, w.name)
    s["nodes"] = len(nodes)
    if plot_path:
        plot(result, plot_path, f"{w.name}: GPU allocation over time")
    if as_json:
        text = json.dumps(s, sort_keys=True)
    else:
        text = format_table(result, None if show_all else 50) + "\n\n" + format_summary(s)
    ok = s["partial_gangs"] == 0 and s["overcommitted_nodes"] == 0
    return (0 if ok else 3), text, result
