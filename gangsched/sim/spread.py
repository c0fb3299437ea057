"""Mean and spread of the summary figures over several runs (seeds), per profile."""

from __future__ import annotations

import statistics
from typing import Any

__all__ = ["figures", "format_spread", "spread"]

# Figures that describe the run rather than the placement, left out of the side-by-side view.
_NOT_FIGURES = frozenset({"workload"})


def figures(s: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric figures of one summary, nested mappings flattened as ``key.sub.field``;
    figures that are None (not reached in that run) are left out."""
    out: dict[str, float] = {}
    for k, v in s.items():
        if k in _NOT_FIGURES:
            continue
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(figures(v, f"{name}."))
        elif isinstance(v, int | float) and not isinstance(v, bool):
            out[name] = float(v)
    return out


def spread(summaries: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per figure, over the runs that have it: ``n``, ``mean``, ``stdev`` (the sample
    standard deviation, 0 for one run), ``min`` and ``max``."""
    values: dict[str, list[float]] = {}
    for s in summaries:
        for k, v in figures(s).items():
            values.setdefault(k, []).append(v)
    out: dict[str, dict[str, float]] = {}
    for k, vs in values.items():
        out[k] = {
            "n": len(vs),
            "mean": round(statistics.fmean(vs), 4),
            "stdev": round(statistics.stdev(vs), 4) if len(vs) > 1 else 0.0,
            "min": min(vs),
            "max": max(vs),
        }
    return out


def _cell(st: dict[str, float] | None, runs: int) -> str:
    if st is None:
        return "-"
    text = f"{_num(st['mean'])} +- {_num(st['stdev'])} [{_num(st['min'])}, {_num(st['max'])}]"
    if st["n"] < runs:
        text += f" ({int(st['n'])} of {runs} runs)"
    return text


def _num(x: float) -> str:
    return f"{x:.4f}".rstrip("0").rstrip(".") if x != int(x) else str(int(x))


def format_spread(stats: dict[str, dict[str, dict[str, float]]]) -> str:
    """One row per figure, one column per profile."""
    labels = list(stats)
    runs = {
        label: max((int(st["n"]) for st in per.values()), default=0) for label, per in stats.items()
    }
    names: list[str] = []
    for per in stats.values():
        names += [k for k in per if k not in names]
    rows = [("figure", *labels)]
    rows += [(k, *(_cell(stats[lb].get(k), runs[lb]) for lb in labels)) for k in names]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )
