"""Hostile input never makes a reader raise: a node it cannot read is never a candidate, a
PodGroup it cannot read is invalid, a pod it cannot read is refused."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gangsched.api.node import node_from
from gangsched.api.pod import pod_from
from gangsched.api.podgroup import podgroup_from, volcano_podgroup_from, xk8s_podgroup_from
from gangsched.core.model import GangSpec, Node, Pod
from tests.api.objects import NODE, POD, PREFERRED_KEY, REQUIRED_KEY, Path, patched

HUGE = 10**5000  # more digits than Python will turn into a string
MINIMAL_POD = {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": []}}
MINIMAL_PG = {"metadata": {"name": "g", "namespace": "ns"}, "spec": {"minMember": 2}}
PREFERRED: Path = (
    "spec",
    "affinity",
    "nodeAffinity",
    "preferredDuringSchedulingIgnoredDuringExecution",
)

HOSTILE: dict[str, tuple[Callable[[Any], Any], dict[str, Any]]] = {
    "node metadata not an object": (node_from, patched(NODE, (("metadata",), 5))),
    "node labels not an object": (node_from, patched(NODE, (("metadata", "labels"), "gpu=1"))),
    "node name a huge integer": (node_from, patched(NODE, (("metadata", "name"), HUGE))),
    "node label value a huge integer": (
        node_from,
        patched(NODE, (("metadata", "labels", "a"), HUGE)),
    ),
    "node spec not an object": (node_from, patched(NODE, (("spec",), "x"))),
    "node taints not a list": (node_from, patched(NODE, (("spec", "taints"), {"key": "a"}))),
    "node taint key a huge integer": (
        node_from,
        patched(NODE, (("spec", "taints"), [{"key": HUGE, "effect": "NoSchedule"}])),
    ),
    "node status not an object": (node_from, patched(NODE, (("status",), []))),
    "node conditions not a list": (node_from, patched(NODE, (("status", "conditions"), "Ready"))),
    "node allocatable holding a huge integer in a list": (
        node_from,
        patched(NODE, (("status", "allocatable", "cpu"), [HUGE])),
    ),
    "pod metadata not an object": (pod_from, patched(POD, (("metadata",), 5))),
    "pod labels not an object": (pod_from, patched(POD, (("metadata", "labels"), "app=x"))),
    "pod annotations not an object": (pod_from, patched(POD, (("metadata", "annotations"), []))),
    "pod namespace a huge integer": (pod_from, patched(POD, (("metadata", "namespace"), HUGE))),
    "pod schedulerName a huge integer": (pod_from, patched(POD, (("spec", "schedulerName"), HUGE))),
    "pod spec not an object": (pod_from, patched(POD, (("spec",), "x"))),
    "pod status not an object": (pod_from, patched(POD, (("status",), 5))),
    "pod preferred weight infinite": (
        pod_from,
        patched(POD, (PREFERRED, [{"weight": float("inf"), "preference": {}}])),
    ),
    "pod preferred entry null": (pod_from, patched(POD, (PREFERRED, [None]))),
    "pod koordinator groups nested 100000 deep": (
        pod_from,
        patched(
            MINIMAL_POD,
            (
                ("metadata", "annotations"),
                {
                    "gang.scheduling.koordinator.sh/name": "g",
                    "gang.scheduling.koordinator.sh/min-available": "1",
                    "gang.scheduling.koordinator.sh/groups": "[" * 100_000,
                },
            ),
        ),
    ),
    "pod selector value a huge integer": (
        pod_from,
        patched(
            MINIMAL_POD,
            (
                ("spec", "affinity"),
                {
                    "podAntiAffinity": {
                        REQUIRED_KEY: [
                            {"topologyKey": "h", "labelSelector": {"matchLabels": {"a": HUGE}}}
                        ]
                    }
                },
            ),
        ),
    ),
    "pod affinity weight a huge integer": (
        pod_from,
        patched(
            MINIMAL_POD,
            (
                ("spec", "affinity"),
                {"podAffinity": {PREFERRED_KEY: [{"weight": HUGE, "podAffinityTerm": {}}]}},
            ),
        ),
    ),
    "pod maxSkew infinite": (
        pod_from,
        patched(
            MINIMAL_POD,
            (
                ("spec", "topologySpreadConstraints"),
                [{"maxSkew": float("inf"), "topologyKey": "z", "whenUnsatisfiable": "x"}],
            ),
        ),
    ),
    "pod hostPort a huge integer": (
        pod_from,
        patched(
            MINIMAL_POD,
            (("spec", "containers"), [{"name": "c", "ports": [{"hostPort": HUGE}]}]),
        ),
    ),
    "pod scheduling gate a huge integer": (
        pod_from,
        patched(MINIMAL_POD, (("spec", "schedulingGates"), [{"name": HUGE}])),
    ),
    "pod volume claim name nested": (
        pod_from,
        patched(
            MINIMAL_POD,
            (("spec", "volumes"), [{"persistentVolumeClaim": {"claimName": [[HUGE]]}}]),
        ),
    ),
    "podgroup metadata not an object": (podgroup_from, patched(MINIMAL_PG, (("metadata",), 5))),
    "podgroup name a huge integer": (
        podgroup_from,
        patched(MINIMAL_PG, (("metadata", "name"), HUGE)),
    ),
    "podgroup spec not an object": (podgroup_from, patched(MINIMAL_PG, (("spec",), "x"))),
    "podgroup role null": (podgroup_from, patched(MINIMAL_PG, (("spec", "roles"), [None]))),
    "podgroup role name a huge integer": (
        podgroup_from,
        patched(MINIMAL_PG, (("spec", "roles"), [{"name": HUGE, "minMember": 1}])),
    ),
    "podgroup timeout a huge integer": (
        podgroup_from,
        patched(MINIMAL_PG, (("spec", "scheduleTimeoutSeconds"), 10**400)),
    ),
    "podgroup minResources holding a huge integer in a list": (
        podgroup_from,
        patched(MINIMAL_PG, (("spec", "minResources"), {"cpu": [HUGE]})),
    ),
    "x-k8s podgroup spec not an object": (
        xk8s_podgroup_from,
        patched(MINIMAL_PG, (("spec",), "x")),
    ),
    "x-k8s podgroup metadata not an object": (
        xk8s_podgroup_from,
        patched(MINIMAL_PG, (("metadata",), 5)),
    ),
    "volcano podgroup spec not an object": (
        volcano_podgroup_from,
        patched(MINIMAL_PG, (("spec",), "x")),
    ),
    "volcano minTaskMember not an object": (
        volcano_podgroup_from,
        patched(MINIMAL_PG, (("spec", "minTaskMember"), ["worker"])),
    ),
    "volcano minTaskMember value null": (
        volcano_podgroup_from,
        patched(MINIMAL_PG, (("spec", "minTaskMember"), {"worker": None})),
    ),
}


@pytest.mark.parametrize("case", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_input_never_raises(case: tuple[Callable[[Any], Any], dict[str, Any]]) -> None:
    translate, obj = case
    result = translate(obj)
    if isinstance(result, Node):
        assert result.ready is False  # a node we cannot read is never a candidate
    elif isinstance(result, GangSpec):
        assert result.invalid_reason
    else:
        pod, _ = result
        assert isinstance(pod, Pod)
        assert pod.invalid_reason
