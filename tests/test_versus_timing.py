"""The side-by-side benchmark's exact binding times from audit events (bench/versus_timing.py)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from versus_timing import BINDING_AUDIT, binding_times

START = 1_800_000_000.0  # 2027-01-15T08:00:00Z


def _event(at: str, code: int = 201, **over: Any) -> dict[str, Any]:
    e: dict[str, Any] = {
        "stage": "ResponseComplete",
        "verb": "create",
        "objectRef": {"resource": "pods", "subresource": "binding", "name": "p"},
        "responseStatus": {"code": code},
        "stageTimestamp": at,
    }
    e.update(over)
    return e


def test_first_and_last_successful_binding_after_the_start() -> None:
    events = [
        _event("2027-01-15T07:59:59.900000Z"),  # before the start: another run's
        _event("2027-01-15T08:00:00.512345Z"),
        _event("2027-01-15T08:00:02.000001Z", code=409),  # refused: not a binding
        _event("2027-01-15T08:00:01.250000Z"),
        _event("2027-01-15T08:00:03.000000Z", stage="ResponseStarted"),
        _event("2027-01-15T08:00:03.000000Z", objectRef={"resource": "pods", "name": "p"}),
        _event("2027-01-15T08:00:03.000000Z", verb="update"),
    ]
    t = binding_times(events, START)
    assert t.bound == 2
    assert t.first is not None and abs(t.first - 0.512345) < 1e-6
    last = t.nth(2)
    assert last is not None and abs(last - 1.25) < 1e-6
    assert t.nth(3) is None and t.nth(0) is None


def test_no_binding_no_times() -> None:
    assert binding_times([], START) == binding_times([_event("x", code=500)], START)
    assert binding_times([], START).first is None
    assert binding_times([], START).bound == 0


def test_the_policy_logs_binding_creates_only() -> None:
    rules = BINDING_AUDIT["rules"]
    assert rules[0]["resources"] == [{"group": "", "resources": ["pods/binding"]}]
    assert rules[-1] == {"level": "None"}
    assert "RequestReceived" in BINDING_AUDIT["omitStages"]
