"""``gangsched simulate``: load a workload, run it through the core, report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gangsched.core.config import CoreConfig
from gangsched.settings import SIMULATED_SETTINGS, Settings
from gangsched.sim.engine import SimResult, Simulation
from gangsched.sim.jobs import (
    build_devices,
    build_jobs,
    build_nodes,
    capacity_milli,
    declare_runtimes,
)
from gangsched.sim.report import format_summary, format_table, plot, summary
from gangsched.sim.spread import format_spread, spread
from gangsched.sim.workload import (
    TopologyPlacementDef,
    Workload,
    WorkloadError,
    load_workload,
)

__all__ = [
    "core_config_from",
    "gang_topology_variant",
    "settings_of",
    "simulate",
    "simulate_many",
]


def core_config_from(settings: dict[str, Any]) -> CoreConfig:
    """CoreConfig from a workload's ``settings``: the scheduling settings of the configuration
    file (camelCase keys, settings.SIMULATED_SETTINGS), validated as the daemon validates
    them."""
    unknown = sorted(set(settings) - SIMULATED_SETTINGS)
    if unknown:
        raise WorkloadError(f"settings: unknown {unknown}; known: {sorted(SIMULATED_SETTINGS)}")
    try:
        return Settings.model_validate(settings).core()
    except ValidationError as e:
        lines = [
            f"  {'.'.join(['settings', *(str(x) for x in err['loc'])])}: {err['msg']}"
            for err in e.errors()
        ]
        raise WorkloadError("invalid settings:\n" + "\n".join(lines)) from None


def settings_of(w: Workload, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """The scheduling settings of a run: ``settings`` (else the workload's own), with
    ``topologyLevels`` from the synthesised racks when they do not name the levels."""
    out = dict(w.settings if settings is None else settings)
    if w.node_topology is not None and "topologyLevels" not in out:
        out["topologyLevels"] = list(w.node_topology.racks().levels)
    return out


def _run(
    w: Workload, base: Path, until: float | None, settings: dict[str, Any] | None = None
) -> tuple[SimResult, dict[str, Any]]:
    """One run of the workload (with ``settings`` in place of its own); its result and
    summary."""
    nodes = build_nodes(w, base)
    jobs = build_jobs(w, base, capacity_milli(nodes))
    if w.declare_runtimes:
        declare_runtimes(jobs)
    classes, slices = build_devices(w)
    sim = Simulation(
        nodes,
        jobs,
        core_config_from(settings_of(w, settings)),
        until=until,
        grace=w.termination_grace_period_seconds,
        device_classes=classes,
        slices=slices,
        forecast=w.forecast,
    )
    result = sim.run()
    s = summary(result, w.name)
    s["nodes"] = len(nodes)
    return result, s


def _violated(s: dict[str, Any]) -> bool:
    return bool(s["partial_gangs"] or s["overcommitted_nodes"])


def _load(path: str, forecast: bool, declare_runtimes: bool) -> tuple[Workload, Path]:
    """The workload, with the command line's ``--forecast`` and ``--declare-runtimes``."""
    w, base = load_workload(path)
    update = {
        "forecast": w.forecast or forecast,
        "declare_runtimes": w.declare_runtimes or declare_runtimes,
    }
    return w.model_copy(update=update), base


def simulate(
    path: str,
    *,
    as_json: bool,
    plot_path: str | None,
    show_all: bool,
    until: float | None,
    forecast: bool = False,
    declare_runtimes: bool = False,
) -> tuple[int, str, SimResult]:
    w, base = _load(path, forecast, declare_runtimes)
    result, s = _run(w, base, until)
    if plot_path:
        plot(result, plot_path, f"{w.name}: GPU allocation over time")
    if as_json:
        text = json.dumps(s, sort_keys=True)
    else:
        text = format_table(result, None if show_all else 50) + "\n\n" + format_summary(s)
    return (3 if _violated(s) else 0), text, result


def gang_topology_variant(text: str) -> tuple[str, TopologyPlacementDef | None]:
    """One ``--gang-topology`` variant: ``none``, ``required=LEVEL`` or ``preferred=LEVEL``;
    its label and the ``topologyPlacement`` every gang gets in that run."""
    text = text.strip()
    if text == "none":
        return text, None
    kind, eq, level = text.partition("=")
    if not eq or kind not in ("required", "preferred") or not level:
        raise WorkloadError(
            f"--gang-topology: {text!r}: expected none, required=LEVEL or preferred=LEVEL"
        )
    try:
        return text, TopologyPlacementDef.model_validate({kind: level})
    except ValidationError as e:
        raise WorkloadError(f"--gang-topology: {text!r}: {e.errors()[0]['msg']}") from None


def _with_gang_topology(w: Workload, tp: TopologyPlacementDef | None) -> Workload:
    gangs = [g.model_copy(update={"topology_placement": tp}) for g in w.gangs]
    return w.model_copy(update={"gangs": gangs})


def simulate_many(
    path: str,
    *,
    seeds: int | None,
    profiles: list[str] | None,
    as_json: bool,
    until: float | None,
    gang_topology: list[str] | None = None,
    forecast: bool = False,
    declare_runtimes: bool = False,
) -> tuple[int, str]:
    """Runs the workload once per seed (``tracePods.seed`` 1..``seeds``; the workload's own
    seed when None), per placement profile (``placementProfile`` in its settings; its own
    settings when None) and per gang topology variant (every gang's ``topologyPlacement``
    replaced; see gang_topology_variant), and reports each summary figure's mean and spread
    per profile and variant."""
    w, base = _load(path, forecast, declare_runtimes)
    tp = w.trace_pods
    if seeds is not None and (tp is None or tp.replay != "sample"):
        raise WorkloadError(
            "--seeds draws tasks from a pod list: it needs tracePods with replay: sample"
        )
    seed_list = list(range(1, seeds + 1)) if seeds is not None else [tp.seed if tp else 0]
    by_profile: list[tuple[str, dict[str, Any]]] = [
        (name, w.settings | {"placementProfile": name}) for name in profiles or ()
    ] or [(str(w.settings.get("placementProfile", "settings")), w.settings)]
    variants = [gang_topology_variant(v) for v in gang_topology or ()]
    columns: list[tuple[str, dict[str, Any], Workload]] = []
    for name, settings in by_profile:
        if not variants:
            columns.append((name, settings, w))
        for label, placement in variants:
            both = f"{name} {label}" if profiles else label
            columns.append((both, settings, _with_gang_topology(w, placement)))
    code = 0
    runs: dict[str, list[dict[str, Any]]] = {}
    for label, settings, col_w in columns:
        core_config_from(settings_of(col_w, settings))  # refuse bad settings before any run
        for seed in seed_list:
            run_w = col_w
            if tp is not None and seeds is not None:
                run_w = col_w.model_copy(
                    update={"trace_pods": tp.model_copy(update={"seed": seed})}
                )
            _, s = _run(run_w, base, until, settings)
            if _violated(s):
                code = 3
            runs.setdefault(label, []).append(s)
    stats = {label: spread(ss) for label, ss in runs.items()}
    if as_json:
        doc = {"workload": w.name, "seeds": seed_list, "profiles": stats}
        return code, json.dumps(doc, sort_keys=True)
    head = (
        f"{w.name}: {len(seed_list)} run(s) per profile "
        f"(seeds {', '.join(map(str, seed_list))}); mean +- sample standard deviation "
        "[min, max]"
    )
    return code, head + "\n\n" + format_spread(stats)
