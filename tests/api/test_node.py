"""Nodes and Namespaces into the core's model (gangsched.api.node), table-driven: a node whose
allocatable cannot be read is never a candidate (ready=False)."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.node import namespace_from, node_from
from gangsched.core.model import Node, Taint
from tests.api.objects import DELETE, GI, GPU, KI, NODE, Path, patched

READY = ("status", "conditions", 3, "status")
NODE_ALLOCATABLE = {
    "cpu": 95690,
    "ephemeral-storage": 96625420441,
    "hugepages-1Gi": 0,
    "hugepages-2Mi": 0,
    "memory": 1163411196 * KI,
    GPU: 8,
    "pods": 110,
}


def test_node_realistic() -> None:
    node = node_from(NODE)
    assert node == Node(
        "gpu-a100-0",
        NODE_ALLOCATABLE,
        labels=NODE["metadata"]["labels"],
        taints=(Taint("nvidia.com/gpu", "present", "NoSchedule"),),
        unschedulable=False,
        ready=True,
    )


@pytest.mark.parametrize(
    ("changes", "ready"),
    [
        ((), True),
        (((READY, "False"),), False),
        (((READY, "Unknown"),), False),
        (((("status", "conditions", 3), {"type": "Ready"}),), False),  # no status
        (((("status", "conditions"), [NODE["status"]["conditions"][0]]),), False),  # no Ready
        (((("status", "conditions"), DELETE),), False),
        (((("status", "conditions"), []),), False),
    ],
    ids=["Ready", "NotReady", "ReadyUnknown", "no-status", "no-Ready", "no-conditions", "empty"],
)
def test_node_readiness(changes: tuple[tuple[Path, object], ...], ready: bool) -> None:
    assert node_from(patched(NODE, *changes)).ready is ready


@pytest.mark.parametrize(
    ("value", "expected"), [(True, True), (False, False), (DELETE, False)], ids=str
)
def test_node_unschedulable(value: object, expected: bool) -> None:
    node = node_from(patched(NODE, (("spec", "unschedulable"), value)))
    assert node.unschedulable is expected
    assert node.ready  # cordoning is a separate flag, not readiness


@pytest.mark.parametrize(
    ("taints", "expected"),
    [
        (DELETE, ()),
        ([], ()),
        (
            [
                {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                {
                    "key": "node.kubernetes.io/unschedulable",
                    "effect": "NoSchedule",
                    "timeAdded": "2024-05-01T12:00:00Z",
                },
                {"key": "dedicated", "value": "training", "effect": "PreferNoSchedule"},
                {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"},
            ],
            (
                Taint("nvidia.com/gpu", "present", "NoSchedule"),
                Taint("node.kubernetes.io/unschedulable", "", "NoSchedule"),
                Taint("dedicated", "training", "PreferNoSchedule"),
                Taint("node.kubernetes.io/not-ready", "", "NoExecute"),
            ),
        ),
    ],
    ids=["absent", "empty", "four"],
)
def test_node_taints(taints: object, expected: tuple[Taint, ...]) -> None:
    assert node_from(patched(NODE, (("spec", "taints"), taints))).taints == expected


def test_node_labels_are_strings() -> None:
    node = node_from(patched(NODE, (("metadata", "labels"), {"a": "1", "b": ""})))
    assert node.labels == {"a": "1", "b": ""}
    assert node_from(patched(NODE, (("metadata", "labels"), DELETE))).labels == {}


def test_node_capacity_used_when_allocatable_absent() -> None:
    node = node_from(patched(NODE, (("status", "allocatable"), DELETE)))
    assert node.allocatable == {
        "cpu": 96000,
        "ephemeral-storage": 104845292 * KI,
        "hugepages-1Gi": 0,
        "hugepages-2Mi": 0,
        "memory": 1176031484 * KI,
        GPU: 8,
        "pods": 110,
    }
    assert node.ready


@pytest.mark.parametrize(
    ("allocatable", "expected"),
    [
        (
            {"cpu": "4", "memory": "16Gi", "pods": "110"},
            {"cpu": 4000, "memory": 16 * GI, "pods": 110},
        ),
        ({"cpu": "3.5", "memory": "15.5Gi"}, {"cpu": 3500, "memory": 31 * GI // 2}),
        ({"cpu": "1500m", "memory": "8G"}, {"cpu": 1500, "memory": 8 * 10**9}),
        ({GPU: "4", "amd.com/gpu": "2"}, {GPU: 4, "amd.com/gpu": 2}),
        ({GPU: 4}, {GPU: 4}),  # an integer is a quantity too
        ({GPU: "0"}, {GPU: 0}),
        ({"memory": "1e9"}, {"memory": 10**9}),
    ],
)
def test_node_allocatable(allocatable: dict[str, object], expected: dict[str, int]) -> None:
    node = node_from(patched(NODE, (("status", "allocatable"), allocatable)))
    assert node.allocatable == expected
    assert node.ready


@pytest.mark.parametrize(
    "allocatable",
    [
        {"cpu": "4", "memory": "12Qi"},
        {"cpu": "4", GPU: "0.5"},
        {"cpu": "-1"},
        {"cpu": "4", "memory": None},
        {"cpu": True},
        {"cpu": "4 cores"},
        {"cpu": "4", "memory": ""},
        {"cpu": "1e400"},
        "lots",
        ["cpu", "4"],
    ],
    ids=repr,
)
def test_node_with_unreadable_allocatable_is_never_a_candidate(allocatable: object) -> None:
    node = node_from(patched(NODE, (("status", "allocatable"), allocatable)))
    assert node.allocatable == {}
    assert node.ready is False
    assert node.name == "gpu-a100-0"


HUGE_NAME = 10**5000  # more digits than Python will turn into a string


# ---- namespaces ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (
            {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": "ml",
                    "labels": {"kubernetes.io/metadata.name": "ml", "team": "research"},
                },
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            },
            ("ml", {"kubernetes.io/metadata.name": "ml", "team": "research"}),
        ),
        ({"metadata": {"name": "bare"}}, ("bare", {})),
        ({"metadata": {"name": "odd", "labels": ["team"]}}, ("odd", {})),
        ({"metadata": {"name": HUGE_NAME}}, ("", {})),
        ({"metadata": "x"}, ("", {})),
        ({}, ("", {})),
    ],
    ids=["realistic", "no labels", "labels not an object", "huge name", "bad metadata", "empty"],
)
def test_namespace(obj: dict[str, Any], expected: tuple[str, dict[str, str]]) -> None:
    assert namespace_from(obj) == expected
