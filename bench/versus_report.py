"""The Markdown tables of the side-by-side benchmark (bench/versus.py), from its run records.

Per scheduler: the mean of the runs, with the range (min-max) when there are several runs and
they differ. A run that timed out or failed counts in "runs" but gives no time to all bound; a
scheduler that could not run at all is listed with the reason.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from typing import Any, Final

__all__ = ["markdown"]

PEERS: Final = ("kube-scheduler", "coscheduling", "binder", "volcano", "kai", "gangsched-base")
Record = dict[str, Any]


def _values(records: Sequence[Record], key: str | Callable[[Record], Any]) -> list[float]:
    get = key if callable(key) else (lambda r: r.get(key))
    return [float(v) for r in records if (v := get(r)) is not None]


def _count(values: Sequence[float]) -> str:
    """A count's mean (min-max), without decimals when the mean is a whole number."""
    whole = all(v.is_integer() for v in values) and statistics.fmean(values or [0]).is_integer()
    return _fmt(values, 0 if whole else 1)


def _fmt(values: Sequence[float], digits: int) -> str:
    """Mean (min-max)."""
    if not values:
        return "-"
    mean = statistics.fmean(values)
    text = f"{mean:,.{digits}f}"
    lo, hi = min(values), max(values)
    if len(values) > 1 and f"{lo:.{digits}f}" != f"{hi:.{digits}f}":
        text += f" ({lo:,.{digits}f}-{hi:,.{digits}f})"
    return text


def _mean(records: Sequence[Record], key: str | Callable[[Record], Any]) -> float | None:
    values = _values(records, key)
    return statistics.fmean(values) if values else None


def _events_per_pod(r: Record) -> str | None:
    bound = r.get("pods_bound_listed")
    return None if bound is None else f"{r.get('scheduled_events', 0)} / {bound}"


def _by_scheduler(records: Sequence[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for r in records:
        groups.setdefault(str(r["scheduler"]), []).append(r)
    return groups


def _runs(group: Sequence[Record]) -> str:
    ok = sum(1 for r in group if r["status"] == "ok")
    return f"{ok}/{len(group)}"


def _events_cell(group: Sequence[Record]) -> str:
    cells = sorted({c for r in group if (c := _events_per_pod(r)) is not None})
    return ", ".join(cells) if cells else "-"


def _fill_table(groups: dict[str, list[Record]]) -> list[str]:
    lines = [
        "| scheduler | runs ok | s to all bound | pods/s | binding rate pods/s | first binding s "
        "| CPU s | CPU ms/pod | peak RSS MB | partial gangs | Scheduled events / pods bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, group in groups.items():
        lines.append(
            f"| {name} | {_runs(group)} | {_fmt(_values(group, 'seconds_to_all_bound'), 2)} "
            f"| {_fmt(_values(group, 'pods_per_second'), 1)} "
            f"| {_fmt(_values(group, 'binding_rate'), 1)} "
            f"| {_fmt(_values(group, 'seconds_to_first_binding'), 2)} "
            f"| {_fmt(_values(group, 'cpu_seconds'), 2)} "
            f"| {_fmt(_values(group, 'cpu_ms_per_pod'), 3)} "
            f"| {_fmt(_values(group, 'peak_rss_mb'), 1)} "
            f"| {_count(_values(group, 'partial_gangs'))} | {_events_cell(group)} |"
        )
    return lines


def _contention_table(groups: dict[str, list[Record]]) -> list[str]:
    lines = [
        "| scheduler | runs ok | pods bound | gangs whole | partial gangs | GPUs held by partial "
        "gangs | first binding s | last binding s | CPU s | peak RSS MB "
        "| Scheduled events / pods bound |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, group in groups.items():
        lines.append(
            f"| {name} | {_runs(group)} | {_count(_values(group, 'pods_bound_listed'))} "
            f"| {_count(_values(group, 'gangs_whole'))} "
            f"| {_count(_values(group, 'partial_gangs'))} "
            f"| {_count(_values(group, 'gpus_held_by_partial_gangs'))} "
            f"| {_fmt(_values(group, 'seconds_to_first_binding'), 2)} "
            f"| {_fmt(_values(group, 'seconds_to_last_binding'), 2)} "
            f"| {_fmt(_values(group, 'cpu_seconds'), 2)} "
            f"| {_fmt(_values(group, 'peak_rss_mb'), 1)} | {_events_cell(group)} |"
        )
    return lines


def _requests_table(groups: dict[str, list[Record]]) -> list[str]:
    names = list(groups)
    keys = sorted({k for g in groups.values() for r in g for k in r.get("requests") or {}})
    if not keys:
        return []
    verbs = sorted({k.split()[0] for k in keys})
    lines = [
        "| requests (mean per run) | " + " | ".join(names) + " |",
        "|---|" + "---|" * len(names),
    ]

    def row(label: str, verb: str = "", key: str = "") -> str:
        cells = []
        for name in names:
            counts = [
                sum(n for k, n in r["requests"].items() if k == key or k.split()[0] == verb)
                for r in groups[name]
                if r.get("requests") is not None
            ]
            cells.append(_count([float(c) for c in counts]))
        return f"| {label} | " + " | ".join(cells) + " |"

    lines += [row(f"**{verb}, all**", verb=verb) for verb in verbs]
    lines += [row(key, key=key) for key in keys]
    return lines


def _ratios(groups: dict[str, list[Record]]) -> list[str]:
    mine = groups.get("gangsched")
    if not mine:
        return []
    lines = []
    g_time = _mean(mine, "seconds_to_all_bound")
    g_rate = _mean(mine, "pods_per_second")
    g_bind = _mean(mine, "binding_rate")
    for peer in PEERS:
        theirs = groups.get(peer)
        if not theirs:
            continue
        p_time = _mean(theirs, "seconds_to_all_bound")
        p_rate = _mean(theirs, "pods_per_second")
        parts = []
        if g_time and p_time:
            parts.append(f"time to all bound {g_time / p_time:.2f}x")
        if g_rate and p_rate:
            parts.append(f"pods/s {g_rate / p_rate:.2f}x")
        p_bind = _mean(theirs, "binding_rate")
        if peer == "binder" and g_bind and p_bind:
            parts.append(f"binding rate {g_bind / p_bind:.2f}x")
        lines.append(f"- gangsched / {peer}: " + ("; ".join(parts) if parts else "n/a"))
    return lines


def _unschedulable(groups: dict[str, list[Record]]) -> list[str]:
    """Per scheduler, the seconds until a job that cannot fit was reported (kai-unschedulable)."""
    rows = []
    for name, group in groups.items():
        samples = [s for r in group for s in r.get("unschedulable_samples") or []]
        if not samples and not any("unschedulable_reported" in r for r in group):
            continue
        times = _values(samples, "seconds_to_unschedulable")
        firsts = _values(samples, "seconds_to_first_pod_reported")
        server = _values(samples, "seconds_by_apiserver_clock")
        how = next((r["unschedulable_report"] for r in group if "unschedulable_report" in r), "")
        bound = sum(int(s.get("pods_bound") or 0) for s in samples)
        errors = "; ".join(e for r in group if (e := r.get("unschedulable_probe_error")))
        rows.append(
            f"| {name} | {len(times)}/{len(samples)} | {_fmt(times, 2)} | {_fmt(firsts, 2)} "
            f"| {_fmt(server, 0)} | {bound} | {how}{' (' + errors + ')' if errors else ''} |"
        )
    if not rows:
        return []
    return [
        "| scheduler | jobs reported | s to reported unschedulable | s to first pod reported "
        "| s by the API server's clock (KAI's way) | job pods bound | what counts as reported |",
        "|---|---|---|---|---|---|---|",
        *rows,
    ]


def _topology(groups: dict[str, list[Record]]) -> list[str]:
    """Per scheduler, the topology domains its bound pods span, run by run (kai-big-job)."""
    lines = []
    for name, group in groups.items():
        runs = [r["topology_domains_used"] for r in group if r.get("topology_domains_used")]
        if runs:
            cells = [", ".join(f"{k.rsplit('-', 1)[-1]}s {n}" for k, n in u.items()) for u in runs]
            lines.append(f"- {name}: the pods span " + "; ".join(cells))
    return lines


def markdown(
    records: Sequence[Record], skipped: dict[str, str], workload: str, header: str, command: str
) -> str:
    """The tables and ratios of one workload's run records, and how to reproduce them.

    A run that failed before it measured anything has only a status and a reason: it counts in
    "runs" and is listed below the table."""
    ran = [r for r in records if r["status"] != "skipped"]
    groups = _by_scheduler(ran)
    lines: list[str] = [header, ""]
    if groups:
        lines += (_fill_table if workload != "contention" else _contention_table)(groups)
    for name, reason in skipped.items():
        lines.append(f"- {name}: skipped: {reason}")
    for r in ran:
        if r["status"] != "ok":
            lines.append(f"- {r['scheduler']} rep {r['rep']}: {r['status']}: {r['reason'][:300]}")
    if workload != "contention" and (ratios := _ratios(groups)):
        lines += ["", *ratios]
    if topology := _topology(groups):
        lines += ["", *topology]
    if unschedulable := _unschedulable(groups):
        lines += ["", *unschedulable]
    if requests := _requests_table(groups):
        scope = next((r["requests_scope"] for r in ran if "requests_scope" in r), "")
        lines += ["", *requests, "", f"Requests: {scope}."]
    lines += ["", f"Command: `{command}`"]
    return "\n".join(lines)
