"""A simulated gang embeds its PodGroup's spec as written (gangsched.io/v1alpha1), read by the
scheduler's own reader (gangsched.api.podgroup); the shorthand fields go through the same
reader, so both give the same gang, and the simulator refuses what the scheduler would."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from gangsched.core.model import GangMode, RoleSpec
from gangsched.sim.jobs import build_jobs
from gangsched.sim.workload import Workload, WorkloadError

PODS = [{"count": 4, "gpus": 1, "role": "worker"}, {"count": 1, "role": "ps"}]


def _gang(**fields: Any) -> Workload:
    return Workload.model_validate({"gangs": [{"name": "g", "arrival": 7, "pods": PODS} | fields]})


def test_an_embedded_spec_and_the_shorthand_give_the_same_gang() -> None:
    embedded = _gang(
        spec={
            "minMember": 4,
            "mode": "NonStrict",
            "scheduleTimeoutSeconds": 30,
            "roles": [{"name": "ps", "minMember": 1}, {"name": "worker", "minMember": 3}],
            "topology": {"affinity": [["ps", "worker"]]},
            "onMemberLoss": "RestartGang",
            "topologyPlacement": {"preferred": "example.com/rack"},
        }
    )
    shorthand = _gang(
        minMember=4,
        mode="NonStrict",
        timeoutSeconds=30,
        roles={"worker": 3, "ps": 1},
        topology={"affinity": [["ps", "worker"]]},
        onMemberLoss="RestartGang",
        topologyPlacement={"preferred": "example.com/rack"},
    )
    [a] = build_jobs(embedded, Path("."))
    [b] = build_jobs(shorthand, Path("."))
    assert a.spec == b.spec
    assert a.spec is not None
    assert a.spec.mode is GangMode.NON_STRICT and a.spec.timeout_seconds == 30.0
    assert a.spec.roles == (RoleSpec("ps", 1), RoleSpec("worker", 3))
    assert a.spec.on_member_loss == "RestartGang" and a.spec.created == 7.0
    assert a.spec.domain.preferred == "example.com/rack"


def test_a_spec_the_scheduler_would_refuse_is_a_workload_error_naming_the_field() -> None:
    bad = _gang(spec={"minMember": 2, "roles": [{"name": "ps", "minMember": 3}]})
    with pytest.raises(WorkloadError, match=r"gangs\.0 \(default/g\).*spec\.roles\[0\]\.minMember"):
        build_jobs(bad, Path("."))


def test_spec_and_shorthand_together_are_refused() -> None:
    with pytest.raises(ValidationError, match="with spec, set minMember, mode in the spec"):
        _gang(spec={"minMember": 2}, minMember=2, mode="Strict")
