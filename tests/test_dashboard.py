"""The Grafana dashboard only queries metrics the scheduler exports."""

from __future__ import annotations

import json
import re
from pathlib import Path

from gangsched.kube.io.metrics import KUBE_SCHEDULER_NAMES, OWN_PREFIX, Metrics

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana-dashboard.json"


def test_dashboard_queries_exported_metrics() -> None:
    exported = set()
    for family in Metrics().registry.collect():
        exported.add(family.name)
        if family.type == "counter":
            exported.add(family.name + "_total")
        exported.update(s.name for s in family.samples)
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert exprs
    names = {m for e in exprs for m in re.findall(r"\b((?:scheduler|gangsched)_[a-z0-9_]+)", e)}
    unknown = {n for n in names if n not in exported and n.removesuffix("_bucket") not in exported}
    assert not unknown, f"the dashboard queries metrics nobody exports: {sorted(unknown)}"


def test_metric_names_follow_one_prefix_convention() -> None:
    """kube-scheduler's names where the meaning is the same, ``gangsched_`` for the rest."""
    names = {
        # prometheus_client drops a counter's "_total" from the family name
        f.name + "_total" if f.type == "counter" else f.name
        for f in Metrics().registry.collect()
    }
    assert names >= KUBE_SCHEDULER_NAMES
    wrong = sorted(n for n in names - KUBE_SCHEDULER_NAMES if not n.startswith(OWN_PREFIX))
    assert not wrong, f"neither kube-scheduler's name nor {OWN_PREFIX}*: {wrong}"
