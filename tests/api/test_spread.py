"""A pod's topology spread constraints (gangsched.api.spread), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.pod import pod_from
from gangsched.core.model import LabelSelector, Requirement, SpreadConstraint
from tests.api.objects import APP, DELETE, HOST, JOB, ZONE, spread_term, with_spec

SPREAD_CASES: dict[str, tuple[list[dict[str, Any]], tuple[SpreadConstraint, ...]]] = {
    "defaults": ([spread_term()], (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),)),
    "every field": (
        [
            spread_term(
                maxSkew=2,
                minDomains=3,
                nodeAffinityPolicy="Ignore",
                nodeTaintsPolicy="Honor",
            )
        ],
        (SpreadConstraint(2, ZONE, "DoNotSchedule", APP, 3, "Ignore", "Honor"),),
    ),
    "ScheduleAnyway": (
        [spread_term(whenUnsatisfiable="ScheduleAnyway", topologyKey=HOST)],
        (SpreadConstraint(1, HOST, "ScheduleAnyway", APP),),
    ),
    "policies written out at their defaults": (
        [spread_term(nodeAffinityPolicy="Honor", nodeTaintsPolicy="Ignore")],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),),
    ),
    "null policies and minDomains are the defaults": (
        [spread_term(nodeAffinityPolicy=None, nodeTaintsPolicy=None, minDomains=None)],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),),
    ),
    "two constraints, order kept": (
        [
            spread_term(),
            spread_term(topologyKey=HOST, whenUnsatisfiable="ScheduleAnyway", maxSkew=5),
        ],
        (
            SpreadConstraint(1, ZONE, "DoNotSchedule", APP),
            SpreadConstraint(5, HOST, "ScheduleAnyway", APP),
        ),
    ),
    "same key with both actions": (
        [spread_term(), spread_term(whenUnsatisfiable="ScheduleAnyway")],
        (
            SpreadConstraint(1, ZONE, "DoNotSchedule", APP),
            SpreadConstraint(1, ZONE, "ScheduleAnyway", APP),
        ),
    ),
    "no labelSelector": (
        [spread_term(labelSelector=DELETE)],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", None),),
    ),
    "matchLabelKeys merged as key In (pod's value)": (
        [spread_term(matchLabelKeys=[JOB, "absent"])],
        (
            SpreadConstraint(
                1,
                ZONE,
                "DoNotSchedule",
                LabelSelector((("app", "nccl"),), (Requirement(JOB, "In", ("train",)),)),
            ),
        ),
    ),
    "matchLabelKeys into an empty selector": (
        [spread_term(labelSelector={}, matchLabelKeys=[JOB])],
        (
            SpreadConstraint(
                1, ZONE, "DoNotSchedule", LabelSelector((), (Requirement(JOB, "In", ("train",)),))
            ),
        ),
    ),
    "already merged by the API server: not added twice": (
        [
            spread_term(
                labelSelector={
                    "matchLabels": {"app": "nccl"},
                    "matchExpressions": [{"key": JOB, "operator": "In", "values": ["train"]}],
                },
                matchLabelKeys=[JOB],
            )
        ],
        (
            SpreadConstraint(
                1,
                ZONE,
                "DoNotSchedule",
                LabelSelector((("app", "nccl"),), (Requirement(JOB, "In", ("train",)),)),
            ),
        ),
    ),
    # kube-scheduler merges the current value again on top of the stored selector.
    "merged at creation with a label value changed since: both": (
        [
            spread_term(
                labelSelector={
                    "matchExpressions": [{"key": JOB, "operator": "In", "values": ["old-job"]}]
                },
                matchLabelKeys=[JOB],
            )
        ],
        (
            SpreadConstraint(
                1,
                ZONE,
                "DoNotSchedule",
                LabelSelector(
                    (),
                    (
                        Requirement(JOB, "In", ("old-job",)),
                        Requirement(JOB, "In", ("train",)),
                    ),
                ),
            ),
        ),
    ),
    "matchLabelKeys with no labelSelector: still selects nothing": (
        [spread_term(labelSelector=DELETE, matchLabelKeys=[JOB])],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", None),),
    ),
    "none": ([], ()),
}


@pytest.mark.parametrize("case", SPREAD_CASES.values(), ids=SPREAD_CASES.keys())
def test_pod_topology_spread(
    case: tuple[list[dict[str, Any]], tuple[SpreadConstraint, ...]],
) -> None:
    constraints, expected = case
    pod, _ = pod_from(with_spec(topologySpreadConstraints=constraints))
    assert pod.invalid_reason == ""
    assert pod.spread == expected
