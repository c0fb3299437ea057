"""What a simulation run reports: a per-gang table, a summary, JSON, and a plot."""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from gangsched.core.gpu import MILLI
from gangsched.core.model import DomainConstraint
from gangsched.core.plugins.task_topology import relations
from gangsched.sim.bound import share_bound
from gangsched.sim.engine import GpuMoment, GpuTally, SimResult
from gangsched.sim.jobs import SimJob
from gangsched.sim.topology import domains_spanned

__all__ = [
    "SIZE_CLASSES",
    "format_summary",
    "format_table",
    "plot",
    "split_gangs",
    "summary",
    "topology_figures",
    "wait_by_topology",
]

# Jobs (a gang, or a plain pod) by the milli-GPUs they ask for in all: (label, lowest,
# highest). "<1" is a share of one GPU; one GPU is the stream of small jobs; 2-8 fits on one
# 8-GPU node; 9-32 spans up to four such nodes; 33+ is a large gang. A job without GPUs is
# in "0".
SIZE_CLASSES: tuple[tuple[str, int, float], ...] = (
    ("0", 0, 0),
    ("<1", 1, MILLI - 1),
    ("1", MILLI, MILLI),
    ("2-8", MILLI + 1, 8 * MILLI),
    ("9-32", 8 * MILLI + 1, 32 * MILLI),
    ("33+", 32 * MILLI + 1, math.inf),
)


def estimate_figures(r: SimResult) -> dict[str, Any]:
    """The start forecasts made at the jobs' first failures (``forecast: true``) beside the
    actual starts: how many were a time and how many unknown, and the error of the times,
    |forecast - actual start| / (actual start - forecast made), over the jobs that started.

    A forecast knows nothing of the jobs submitted after it: the ``_not_overtaken`` figures
    are over the forecasts of jobs that no job submitted later started before (``overtaken``
    counts the others)."""
    made = [j for j in r.jobs if j.estimate is not None and j.estimated_at is not None]
    if not made:
        return {}
    # the earliest start among the jobs submitted after each arrival time
    by_arrival = sorted(r.jobs, key=lambda j: j.arrival)
    arrivals = [j.arrival for j in by_arrival]
    first_after = [math.inf] * (len(by_arrival) + 1)
    for i in range(len(by_arrival) - 1, -1, -1):
        start = by_arrival[i].first_started
        first_after[i] = min(first_after[i + 1], math.inf if start is None else start)
    errors: list[float] = []
    alone: list[float] = []
    late = 0
    known = 0
    for j in made:
        at, since, start = j.estimate.at if j.estimate else None, j.estimated_at, j.first_started
        if at is None or since is None:
            continue
        known += 1
        if start is None:
            late += 1  # forecast a time, never started in the run
        elif start > since:
            error = abs(at - start) / (start - since)
            errors.append(error)
            if first_after[bisect.bisect_right(arrivals, since)] >= start:
                alone.append(error)
    return {
        "estimates_made": len(made),
        "estimates_known": known,
        "estimates_unknown": len(made) - known,
        "estimates_known_never_started": late,
        "estimate_error_p50": round(_pct(errors, 0.5), 4) if errors else None,
        "estimate_error_p90": round(_pct(errors, 0.9), 4) if errors else None,
        "estimate_error_max": round(max(errors), 4) if errors else None,
        "estimates_overtaken": len(errors) - len(alone),
        "estimate_error_p50_not_overtaken": round(_pct(alone, 0.5), 4) if alone else None,
        "estimate_error_p90_not_overtaken": round(_pct(alone, 0.9), 4) if alone else None,
    }


def summary(r: SimResult, workload: str) -> dict[str, Any]:
    gangs = [j for j in r.jobs if j.spec is not None]
    bound = [j for j in gangs if j.first_started is not None]
    waits = [j.waited for j in r.jobs if j.first_started is not None]
    alloc_mean = _time_weighted_allocation(r)
    longest, longest_wait, spans = _longest_wait(r)
    return {
        "workload": workload,
        "nodes": None,
        "gangs_total": len(gangs),
        "gangs_bound": len(bound),
        "gangs_failed": len(gangs) - len(bound),
        "plain_pods_total": len(r.jobs) - len(gangs),
        "plain_pods_bound": sum(
            1 for j in r.jobs if j.spec is None and j.first_started is not None
        ),
        "pods_total": sum(len(j.pods) for j in r.jobs) + r.pods_recreated,
        "pods_bound": r.pods_bound,
        "partial_gangs": len(r.partial_gangs),
        "overcommitted_nodes": len(r.overcommitted_nodes),
        "gpu_allocation_mean": round(alloc_mean, 4),
        "gpu_allocation_final": round(r.timeline[-1][1] / r.timeline[-1][2], 4)
        if r.timeline and r.timeline[-1][2]
        else 0.0,
        "gpu_allocation_peak": round(max(u / t for _, u, t, _ in r.timeline), 4)
        if r.timeline and r.timeline[0][2]
        else 0.0,
        "gpu_idle_while_waiting_fraction": round(
            r.gpu_idle_while_waiting / r.gpu_seconds_total if r.gpu_seconds_total else 0.0, 4
        ),
        **(gpu_figures(r.gpu, r.jobs) if r.gpu is not None else {}),
        "wait_seconds_mean": round(statistics.fmean(waits), 3) if waits else 0.0,
        "wait_seconds_p50": round(_pct(waits, 0.5), 3) if waits else 0.0,
        "wait_seconds_p99": round(_pct(waits, 0.99), 3) if waits else 0.0,
        "wait_seconds_max": round(max(waits), 3) if waits else 0.0,
        "wait_by_gpus": _wait_by_class(r),
        "longest_waiting_gang": longest,
        "longest_gang_wait_seconds": round(longest_wait, 3),
        "gpu_allocation_while_longest_gang_waited": round(_allocation_over(r, spans), 4),
        "preemptions": r.preemptions,
        "victim_pods": r.victim_pods,
        "victim_gangs": r.victim_gangs,
        "gpu_seconds_lost": round(r.gpu_seconds_lost, 3),
        "member_failures": r.member_failures,
        "member_losses": r.member_losses,
        "pods_restarted": r.pods_restarted,
        "claims_allocated": r.claims_allocated,
        "permit_timeouts": r.timeouts,
        **estimate_figures(r),
        "cross_node_affine_pairs": cross_node_affine_pairs(r),
        **topology_figures(r),
        "cycles": r.cycles,
        "sim_seconds": round(r.sim_seconds, 3),
        "wall_seconds": round(r.wall_seconds, 3),
        "pods_per_second": round(r.pods_bound / r.wall_seconds, 1) if r.wall_seconds else 0.0,
    }


def gpu_figures(g: GpuTally, jobs: Sequence[SimJob] = ()) -> dict[str, Any]:
    """Where the cluster's GPUs stand: the share of GPU capacity that bound pods asked for,
    the share that arrived, devices handed out, and what was left unallocated when a GPU
    job first failed to place and at the end. With the run's ``jobs``, and when none of
    those that had arrived by full arrival could have ended by then, also the most any
    placement could have allocated at that moment (:mod:`gangsched.sim.bound`)."""
    cap = g.capacity_milli

    def share(milli: int) -> float:
        return round(milli / cap, 4) if cap else 0.0

    def unallocated(m: GpuMoment | None) -> float | None:
        return round((cap - m.bound_milli) / MILLI, 1) if m is not None else None

    end = g.moment(0.0)
    devices = [u for used in g.devices.values() for u in used]
    gpu_nodes = [used for used in g.devices.values() if used]
    first, full = g.first_failure, g.full_arrival
    return {
        "gpus_total": len(devices),
        "gpu_share_arrived": share(g.arrived_milli),
        "gpu_share_allocated": share(g.bound_milli),
        "gpu_share_allocated_at_full_arrival": share(full.bound_milli) if full else None,
        "gpu_share_bound_at_full_arrival": _share_bound_at(full, jobs, cap, share),
        "gpus_handed_out": g.devices_used,
        "gpus_unallocated_first_failure": unallocated(first),
        "gpu_share_allocated_first_failure": share(first.bound_milli) if first else None,
        "gpus_unallocated_final": unallocated(end),
        "gpus_free_whole_final": sum(1 for u in devices if u == 0),
        "nodes_with_free_gpus": sum(1 for used in gpu_nodes if min(used) < MILLI),
        "gpu_nodes_empty": sum(1 for used in gpu_nodes if max(used) == 0),
    }


def _share_bound_at(
    m: GpuMoment | None, jobs: Sequence[SimJob], cap: int, share: Callable[[int], float]
) -> float | None:
    """``gpu_share_bound_at_full_arrival``: None unless every job arrived by then still
    runs (never ends), so that the demand then is all there was to place."""
    if m is None:
        return None
    arrived = [j for j in jobs if j.arrival <= m.t]
    if not arrived or any(math.isfinite(j.duration) for j in arrived):
        return None
    requests = [(d.count, d.milli) for j in arrived for p in j.pods if (d := p.gpu) is not None]
    return share(share_bound(requests, cap).milli)


def cross_node_affine_pairs(r: SimResult) -> int:
    """Pairs of members of one gang whose roles are affine (task topology) but that were bound
    to different nodes. Counted over gangs that declare a topology."""
    total = 0
    for j in r.jobs:
        if j.spec is None or not j.spec.topology.affinity:
            continue
        affine, _ = relations(j.spec.topology)
        placed = [(p, r.placements[p.uid]) for p in j.pods if p.uid in r.placements]
        for i, (a, na) in enumerate(placed):
            for b, nb in placed[i + 1 :]:
                if na != nb and b.role in affine.get(a.role, set()):
                    total += 1
    return total


def topology_figures(r: SimResult) -> dict[str, Any]:
    """The topology figures, when levels are configured or a gang asks for a domain."""
    if not r.topology_levels and not any(j.spec and j.spec.domain for j in r.jobs):
        return {}
    return {"split_gangs": split_gangs(r), "wait_by_topology": wait_by_topology(r)}


def split_gangs(r: SimResult) -> dict[str, dict[str, float]]:
    """Per configured topology level: the gangs bound (started at least once), how many of
    them have members in more than one domain of the level, and that share. A gang's
    members are counted where they were last bound."""
    placed: list[list[str]] = []
    for j in r.jobs:
        if j.spec is None or j.first_started is None:
            continue
        placed.append([r.placements[u] for u in j.bound_pods if u in r.placements])
    out: dict[str, dict[str, float]] = {}
    for level in r.topology_levels:
        split = sum(1 for ns in placed if domains_spanned(ns, r.node_labels, level) > 1)
        out[level] = {
            "gangs": len(placed),
            "split": split,
            "share": round(split / len(placed), 4) if placed else 0.0,
        }
    return out


def wait_by_topology(r: SimResult) -> dict[str, dict[str, float]]:
    """Over all gangs (``all``) and per kind of topology placement they asked for
    (``required``, ``preferred``, ``slices`` for slices alone, ``none``): how many gangs,
    how many started, their mean and p50/p99/max wait (over the started ones), and how many
    were still waiting at the end of the run. Keyed by kind, not level."""
    gangs = [j for j in r.jobs if j.spec is not None]
    groups: dict[str, list[SimJob]] = {"all": gangs} if gangs else {}
    for j in gangs:
        assert j.spec is not None
        groups.setdefault(_placement_kind(j.spec.domain), []).append(j)
    out: dict[str, dict[str, float]] = {}
    for kind, jobs in groups.items():
        waits = [j.waited for j in jobs if j.first_started is not None]
        mean = round(statistics.fmean(waits), 3) if waits else 0.0
        figures = _wait_of(jobs)
        out[kind] = {"jobs": figures.pop("jobs"), "wait_mean": mean, **figures}
    return out


def _placement_kind(d: DomainConstraint) -> str:
    if d.required:
        return "required"
    if d.preferred:
        return "preferred"
    return "slices" if d.slice_required else "none"


def _wait_of(jobs: list[SimJob]) -> dict[str, float]:
    waits = [j.waited for j in jobs if j.first_started is not None]
    return {
        "jobs": len(jobs),
        "started": len(waits),
        "wait_p50": round(_pct(waits, 0.5), 3) if waits else 0.0,
        "wait_p99": round(_pct(waits, 0.99), 3) if waits else 0.0,
        "wait_max": round(max(waits), 3) if waits else 0.0,
        "still_waiting": sum(1 for j in jobs if j.started is None and j.finished is None),
    }


def _wait_by_class(r: SimResult) -> dict[str, dict[str, float]]:
    """Per size class with jobs: how many, how many started, their wait p50/p99/max (over
    the started ones), and how many were still waiting at the end of the run."""
    out: dict[str, dict[str, float]] = {}
    for label, lo, hi in SIZE_CLASSES:
        jobs = [j for j in r.jobs if lo <= j.gpu_milli <= hi]
        if jobs:
            out[label] = _wait_of(jobs)
    return out


def _longest_wait(r: SimResult) -> tuple[str, float, list[tuple[float, float]]]:
    """The gang (a job with a PodGroup) that spent longest pending (its waits that ended in a
    start, plus the one still open at the end of the run, if any), that time, and its
    waiting spans. Ties go to the gang asking for more GPUs, then to the first in the
    workload. Plain pods are left out: their waits are in ``wait_by_gpus``."""
    best: tuple[str, float, list[tuple[float, float]]] = ("", 0.0, [])
    best_rank: tuple[float, int] = (0.0, -1)
    for j in r.jobs:
        if j.spec is None:
            continue
        spans = list(j.waits)
        if j.started is None and j.finished is None:
            since = j.arrival if j.pending_since is None else j.pending_since
            if r.sim_seconds > since:
                spans.append((since, r.sim_seconds))
        total = sum(b - a for a, b in spans)
        rank = (total, j.gpu_milli)
        if total > 0 and rank > best_rank:
            best, best_rank = (j.key, total, spans), rank
    return best


def _allocation_over(r: SimResult, spans: list[tuple[float, float]]) -> float:
    """Share of GPUs allocated, weighted by time, over the given spans of simulated time."""
    tl = r.timeline
    if not tl or tl[0][2] == 0:
        return 0.0
    ends = [t for t, *_ in tl[1:]] + [max(r.sim_seconds, tl[-1][0])]
    area = length = 0.0
    for a, b in spans:
        length += b - a
        for (t0, used, total, _), t1 in zip(tl, ends, strict=True):
            lo, hi = max(a, t0), min(b, t1)
            if hi > lo:
                area += (hi - lo) * used / total
    return area / length if length > 0 else 0.0


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def _time_weighted_allocation(r: SimResult) -> float:
    """Mean share of GPUs allocated, weighted by time, from the first to the last event."""
    tl = r.timeline
    if len(tl) < 2 or tl[0][2] == 0:
        return 0.0
    area = 0.0
    for (t0, used, total, _), (t1, _, _, _) in itertools.pairwise(tl):
        area += (t1 - t0) * used / total
    span = tl[-1][0] - tl[0][0]
    return area / span if span > 0 else tl[-1][1] / tl[-1][2]


def format_table(r: SimResult, limit: int | None = 50) -> str:
    rows = [("GANG", "MIN", "SUBMITTED", "BOUND", "WAITED", "OUTCOME", "REASON")]
    jobs = [j for j in r.jobs if j.spec is not None]
    shown = jobs if limit is None else jobs[:limit]
    for j in shown:
        outcome = "finished" if j.finished else ("running" if j.started is not None else "pending")
        if j.evictions:
            outcome += f" (evicted {j.evictions}x)"
        first = j.first_started
        waited = f"{j.waited:.1f}s" if first is not None else "-"
        bound = f"{first:.1f}" if first is not None else "-"
        reason = "" if j.started is not None else f"{j.reason}: {j.message}"[:90]
        rows.append((j.key, str(j.min_member), f"{j.arrival:.1f}", bound, waited, outcome, reason))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [
        "  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True)) + "  " + row[-1]
        for row in rows
    ]
    if limit is not None and len(jobs) > limit:
        lines.append(f"... {len(jobs) - limit} more gangs (use --all)")
    return "\n".join(lines)


def format_summary(s: dict[str, Any]) -> str:
    """The summary as ``key value`` lines; a mapping value (the wait per size class) as one
    line per entry, ``key.entry field=value ...``."""
    rows: list[tuple[str, str]] = []
    for k, v in s.items():
        if isinstance(v, dict):
            for sub, fields in v.items():
                rows.append((f"{k}.{sub}", " ".join(f"{f}={x}" for f, x in fields.items())))
        else:
            rows.append((k, str(v)))
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:{width}}  {v}" for k, v in rows)


def plot(r: SimResult, path: str, title: str) -> None:
    """GPU allocation and waiting GPU jobs over simulated time, as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tl = r.timeline
    ts = [t for t, *_ in tl]
    alloc = [u / tot if tot else 0.0 for _, u, tot, _ in tl]
    waiting = [w for *_, w in tl]
    fig, ax1 = plt.subplots(figsize=(10, 4.5))
    ax1.step(ts, alloc, where="post", color="tab:blue", label="GPU share allocated")
    ax1.set_ylim(0, 1.05)
    ax1.set_xlabel("simulated time (s)")
    ax1.set_ylabel("GPU allocation")
    ax2 = ax1.twinx()
    ax2.step(ts, waiting, where="post", color="tab:orange", alpha=0.7, label="GPU jobs waiting")
    ax2.set_ylabel("jobs waiting")
    lines = ax1.get_legend_handles_labels()[0] + ax2.get_legend_handles_labels()[0]
    labels = ax1.get_legend_handles_labels()[1] + ax2.get_legend_handles_labels()[1]
    ax1.legend(lines, labels, loc="upper right")
    ax1.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
