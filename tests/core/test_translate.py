"""Kubernetes JSON into the core's model (gangsched.kube.translate), table-driven.

The objects below are shaped like what the API server returns (``kubectl get -o json``): quantities
are strings, defaults that admission fills in are present, unknown fields are left in.

The rule under test: translation never raises. A pod it cannot understand becomes a Pod with
``invalid_reason`` naming the field; a pod asking for what gangsched does not implement (resource
claims, in-tree volumes, node declared features) gets ``unsupported`` naming the field; a
PodGroup it cannot understand becomes a GangSpec with ``invalid_reason``; a node whose
allocatable cannot be read is never a candidate (ready=False). Pod fields follow kube-scheduler
v1.36 and the API server's defaulting and label-key merging.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from gangsched.api.fields import timestamp
from gangsched.api.membership import Source
from gangsched.api.node import namespace_from, node_from
from gangsched.api.pod import pod_from
from gangsched.api.podgroup import podgroup_from, volcano_podgroup_from, xk8s_podgroup_from
from gangsched.core.model import (
    AffinityTerm,
    GangMode,
    GangSpec,
    HostPort,
    LabelSelector,
    Node,
    NodeAffinity,
    Placement,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodPhase,
    PodVolumes,
    PreferredTerm,
    Requirement,
    RoleSpec,
    SpreadConstraint,
    Taint,
    Toleration,
    TopologySpec,
    WeightedPodAffinityTerm,
)

KI = 2**10
MI = 2**20
GI = 2**30
GPU = "nvidia.com/gpu"

CREATED = "2024-05-01T12:00:00Z"
CREATED_TS = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC).timestamp()

DELETE = object()  # a patch value that removes the key

Path = tuple[str | int, ...]


def patched(base: dict[str, Any], *changes: tuple[Path, object]) -> dict[str, Any]:
    """A deep copy of ``base`` with each ``(path, value)`` set (or deleted with DELETE);
    missing intermediate objects are created."""
    obj = copy.deepcopy(base)
    for path, value in changes:
        target: Any = obj
        for k in path[:-1]:
            target = target.setdefault(k, {}) if isinstance(target, dict) else target[k]
        if value is DELETE:
            target.pop(path[-1], None)
        else:
            target[path[-1]] = value
    return obj


# ---- timestamps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (CREATED, CREATED_TS),
        ("2024-05-01T12:00:00.250000Z", CREATED_TS + 0.25),
        ("2024-05-01T14:00:00+02:00", CREATED_TS),
        ("1970-01-01T00:00:00Z", 0.0),
        ("", 0.0),
        (None, 0.0),
        ("yesterday", 0.0),
        ("2024-13-01T00:00:00Z", 0.0),
        (1714564800, 0.0),  # not a string: unreadable
        (["2024-05-01T12:00:00Z"], 0.0),
    ],
)
def test_timestamp(value: object, expected: float) -> None:
    assert timestamp(value) == expected


# ---- nodes --------------------------------------------------------------------------------

NODE: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Node",
    "metadata": {
        "name": "gpu-a100-0",
        "uid": "5b0f6d8e-3c1e-4b47-9d0c-1f6c2a0e8f11",
        "resourceVersion": "918273",
        "creationTimestamp": "2024-04-30T08:15:02Z",
        "labels": {
            "beta.kubernetes.io/arch": "amd64",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": "gpu-a100-0",
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "p4d.24xlarge",
            "topology.kubernetes.io/zone": "us-east-1a",
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
            "nvidia.com/gpu.count": "8",
        },
        "annotations": {
            "node.alpha.kubernetes.io/ttl": "0",
            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
        },
    },
    "spec": {
        "podCIDR": "10.244.3.0/24",
        "podCIDRs": ["10.244.3.0/24"],
        "providerID": "aws:///us-east-1a/i-0a1b2c3d4e5f67890",
        "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
    },
    "status": {
        "capacity": {
            "cpu": "96",
            "ephemeral-storage": "104845292Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": "1176031484Ki",
            "nvidia.com/gpu": "8",
            "pods": "110",
        },
        "allocatable": {
            "cpu": "95690m",
            "ephemeral-storage": "96625420441",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
            "memory": "1163411196Ki",
            "nvidia.com/gpu": "8",
            "pods": "110",
        },
        "conditions": [
            {
                "type": "MemoryPressure",
                "status": "False",
                "reason": "KubeletHasSufficientMemory",
                "lastHeartbeatTime": "2024-05-01T12:00:00Z",
                "lastTransitionTime": "2024-04-30T08:15:02Z",
            },
            {"type": "DiskPressure", "status": "False", "reason": "KubeletHasNoDiskPressure"},
            {"type": "PIDPressure", "status": "False", "reason": "KubeletHasSufficientPID"},
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            },
        ],
        "addresses": [{"type": "InternalIP", "address": "10.0.12.7"}],
        "nodeInfo": {"kubeletVersion": "v1.30.2", "containerRuntimeVersion": "containerd://1.7"},
    },
}

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


# ---- pods ---------------------------------------------------------------------------------

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "train-worker-0",
        "generateName": "train-worker-",
        "namespace": "ml",
        "uid": "7c0e9a52-64d4-4b0b-8f0e-0c2f0d9d6a31",
        "resourceVersion": "1201934",
        "creationTimestamp": CREATED,
        "labels": {
            "gangsched.io/pod-group": "train",
            "gangsched.io/role": "worker",
            "training.kubeflow.org/job-name": "train",
            "training.kubeflow.org/replica-type": "worker",
        },
        "annotations": {"kubectl.kubernetes.io/default-container": "pytorch"},
        "ownerReferences": [
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "name": "train",
                "uid": "0b6f9d3c-1111-4e0e-9b7e-8b2b1c3d4e5f",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    },
    "spec": {
        "schedulerName": "gangsched",
        "priorityClassName": "training-high",
        "priority": 1000,
        "preemptionPolicy": "PreemptLowerPriority",
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 30,
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "enableServiceLinks": True,
        "containers": [
            {
                "name": "pytorch",
                "image": "ghcr.io/example/train:1.4",
                "imagePullPolicy": "IfNotPresent",
                "args": ["--epochs", "10"],
                "resources": {
                    "limits": {"cpu": "8", "memory": "64Gi", GPU: "1"},
                    "requests": {"cpu": "7500m", "memory": "60Gi", GPU: "1"},
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
        ],
    },
    "status": {"phase": "Pending", "qosClass": "Burstable"},
}

POD_TOLERATIONS = (
    Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
)
C0: Path = ("spec", "containers", 0)
C0_REQUESTS: Path = (*C0, "resources", "requests")


def test_pod_realistic() -> None:
    pod, membership = pod_from(POD)
    assert pod == Pod(
        "7c0e9a52-64d4-4b0b-8f0e-0c2f0d9d6a31",
        "ml",
        "train-worker-0",
        {"cpu": 7500, "memory": 60 * GI, GPU: 1, "pods": 1},
        created=CREATED_TS,
        priority=1000,
        scheduler_name="gangsched",
        phase=PodPhase.PENDING,
        node_name="",
        placement=Placement(tolerations=POD_TOLERATIONS),
        group="ml/train",
        role="worker",
        deleting=False,
        invalid_reason="",
        labels=POD["metadata"]["labels"],
        resource_version="1201934",
    )
    assert membership.key == "ml/train"
    assert membership.source == Source.GANGSCHED
    assert membership.role == "worker"
    assert membership.error == ""


def test_pod_identity_defaults() -> None:
    pod, _ = pod_from(
        patched(POD, (("metadata", "namespace"), DELETE), (("metadata", "uid"), DELETE))
    )
    assert pod.namespace == "default"
    assert pod.uid == "default/train-worker-0"
    assert pod.group == "default/train"
    assert pod.key == "default/train-worker-0"


def test_plain_pod_has_no_group() -> None:
    pod, membership = pod_from(patched(POD, (("metadata", "labels"), {"app": "web"})))
    assert (pod.group, pod.role, membership.key, pod.invalid_reason) == ("", "", "", "")


def _spec(**fields: object) -> dict[str, Any]:
    """POD with its spec's resource-related fields replaced."""
    spec = {k: v for k, v in POD["spec"].items() if k != "containers"}
    spec.update(fields)
    return patched(POD, (("spec",), spec))


def _ctr(name: str, requests: dict[str, object] | None = None, **extra: object) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox:1.36", **extra}
    if requests is not None:
        c["resources"] = {"requests": requests}
    return c


def _sidecar(name: str, requests: dict[str, object]) -> dict[str, Any]:
    return _ctr(name, requests, restartPolicy="Always")


REQUEST_CASES: dict[str, tuple[dict[str, Any], dict[str, int]]] = {
    "one container": (
        {"containers": [_ctr("app", {"cpu": "500m", "memory": "1Gi"})]},
        {"cpu": 500, "memory": GI, "pods": 1},
    ),
    "containers are summed": (
        {
            "containers": [
                _ctr("app", {"cpu": "250m", "memory": "128Mi"}),
                _ctr("proxy", {"cpu": "1.5", "memory": "512M"}),
            ]
        },
        {"cpu": 1750, "memory": 128 * MI + 512 * 10**6, "pods": 1},
    ),
    "no resources at all": (
        {"containers": [_ctr("app"), {"name": "b", "image": "x", "resources": {}}]},
        {"pods": 1},
    ),
    "no containers field": ({}, {"pods": 1}),
    "zero requests are dropped": (
        {"containers": [_ctr("app", {"cpu": "0", "memory": "0", GPU: "0"})]},
        {"pods": 1},
    ),
    "integer quantities": (
        {"containers": [_ctr("app", {"cpu": 2, "memory": 1024, GPU: 2})]},
        {"cpu": 2000, "memory": 1024, GPU: 2, "pods": 1},
    ),
    "sub-milli cpu rounds up": (
        {"containers": [_ctr("app", {"cpu": "0.0001", "memory": "100m"})]},
        {"cpu": 1, "memory": 1, "pods": 1},
    ),
    "gpu written in milli-units": (
        {"containers": [_ctr("app", {GPU: "2000m"})]},
        {GPU: 2, "pods": 1},
    ),
    "storage and hugepages": (
        {
            "containers": [
                _ctr(
                    "app", {"ephemeral-storage": "10Gi", "hugepages-2Mi": "100Mi", "memory": "1Gi"}
                )
            ]
        },
        {"ephemeral-storage": 10 * GI, "hugepages-2Mi": 100 * MI, "memory": GI, "pods": 1},
    ),
    "init container larger than the app": (
        {
            "initContainers": [_ctr("setup", {"cpu": "2", "memory": "100Mi"})],
            "containers": [_ctr("app", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 2000, "memory": GI, "pods": 1},
    ),
    "init containers take the max, not the sum": (
        {
            "initContainers": [_ctr("a", {"cpu": "2"}), _ctr("b", {"cpu": "3", GPU: "1"})],
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {"cpu": 3000, GPU: 1, "pods": 1},
    ),
    "sidecar adds to the app containers": (
        {
            "initContainers": [_sidecar("istio-proxy", {"cpu": "500m", "memory": "128Mi"})],
            "containers": [_ctr("app", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 1500, "memory": GI + 128 * MI, "pods": 1},
    ),
    "init step after a sidecar includes the sidecar": (
        {
            "initContainers": [
                _sidecar("log-shipper", {"cpu": "500m"}),
                _ctr("migrate", {"cpu": "2"}),
            ],
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {"cpu": 2500, "pods": 1},
    ),
    "init step before a sidecar does not include it": (
        {
            "initContainers": [
                _ctr("migrate", {"cpu": "2"}),
                _sidecar("log-shipper", {"cpu": "500m"}),
            ],
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {"cpu": 2000, "pods": 1},
    ),
    "restartPolicy other than Always is a plain init container": (
        {
            "initContainers": [_ctr("setup", {"cpu": "500m"}, restartPolicy="OnFailure")],
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {"cpu": 1000, "pods": 1},
    ),
    "overhead is added": (
        {
            "overhead": {"cpu": "250m", "memory": "120Mi"},
            "containers": [_ctr("app", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 1250, "memory": GI + 120 * MI, "pods": 1},
    ),
    "pod-level requests replace the container figures": (
        {
            "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
            "containers": [_ctr("app", {"cpu": "1", "memory": "1Gi", GPU: "1"})],
        },
        {"cpu": 4000, "memory": 8 * GI, GPU: 1, "pods": 1},
    ),
    "pod-level cpu only keeps container memory": (
        {
            "resources": {"requests": {"cpu": "500m"}},
            "containers": [_ctr("a", {"cpu": "1", "memory": "1Gi"}), _ctr("b", {"memory": "1Gi"})],
        },
        {"cpu": 500, "memory": 2 * GI, "pods": 1},
    ),
    "pod-level gpu and ephemeral-storage are ignored": (
        {
            "resources": {"requests": {"cpu": "2", GPU: "4", "ephemeral-storage": "100Gi"}},
            "containers": [_ctr("app", {"cpu": "1", GPU: "1", "ephemeral-storage": "1Gi"})],
        },
        {"cpu": 2000, GPU: 1, "ephemeral-storage": GI, "pods": 1},
    ),
    "pod-level with only ignored resources": (
        {
            "resources": {"requests": {GPU: "4"}, "limits": {GPU: "4"}},
            "containers": [_ctr("app", {"cpu": "1", GPU: "1"})],
        },
        {"cpu": 1000, GPU: 1, "pods": 1},
    ),
    "pod-level limits alone change nothing": (
        {
            "resources": {"limits": {"cpu": "8", "memory": "16Gi"}},
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {"cpu": 1000, "pods": 1},
    ),
    "pod-level requests plus overhead": (
        {
            "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
            "overhead": {"cpu": "100m", "memory": "64Mi"},
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {"cpu": 2100, "memory": 2 * GI + 64 * MI, "pods": 1},
    ),
    # The API server defaults requests from limits at admission, so a limits-only container read
    # back from the API already carries requests; what is read is the requests field alone.
    "limits only: requests absent read as zero": (
        {
            "containers": [
                {"name": "app", "image": "x", "resources": {"limits": {"cpu": "2", GPU: "1"}}}
            ]
        },
        {"pods": 1},
    ),
    "limits defaulted into requests by the API server": (
        {
            "containers": [
                {
                    "name": "app",
                    "image": "x",
                    "resources": {
                        "limits": {"cpu": "2", "memory": "4Gi", GPU: "1"},
                        "requests": {"cpu": "2", "memory": "4Gi", GPU: "1"},
                    },
                }
            ]
        },
        {"cpu": 2000, "memory": 4 * GI, GPU: 1, "pods": 1},
    ),
    "requests below limits: requests are used": (
        {
            "containers": [
                {
                    "name": "app",
                    "image": "x",
                    "resources": {
                        "limits": {"cpu": "4", "memory": "8Gi"},
                        "requests": {"cpu": "1", "memory": "2Gi"},
                    },
                }
            ]
        },
        {"cpu": 1000, "memory": 2 * GI, "pods": 1},
    ),
}


@pytest.mark.parametrize("case", REQUEST_CASES.values(), ids=REQUEST_CASES.keys())
def test_pod_requests(case: tuple[dict[str, Any], dict[str, int]]) -> None:
    spec, expected = case
    pod, _ = pod_from(_spec(**spec))
    assert pod.invalid_reason == ""
    assert pod.requests == expected


def test_pod_level_hugepages_are_honoured() -> None:
    """Pod-level hugepages-<size> requests are accepted by Kubernetes (PodLevelResources,
    v1.34+) and the translator honours them like cpu and memory."""
    pod, _ = pod_from(
        _spec(
            resources={"requests": {"hugepages-2Mi": "1Gi"}},
            containers=[_ctr("app", {"hugepages-2Mi": "100Mi", "memory": "1Gi"})],
        )
    )
    assert pod.requests == {"hugepages-2Mi": GI, "memory": GI, "pods": 1}


def _status(
    *containers: tuple[str, dict[str, str] | None, dict[str, str] | None], **extra: object
) -> dict[str, Any]:
    """A running pod's status: per container (name, actuated requests, allocated)."""
    statuses = []
    for name, actuated, allocated in containers:
        cs: dict[str, Any] = {"name": name, "ready": True, "restartCount": 0, "image": "x"}
        if actuated is not None:
            cs["resources"] = {"requests": actuated, "limits": actuated}
        if allocated is not None:
            cs["allocatedResources"] = allocated
        statuses.append(cs)
    return {"phase": "Running", "containerStatuses": statuses, **extra}


INFEASIBLE = {"type": "PodResizePending", "status": "True", "reason": "Infeasible"}
DEFERRED = {"type": "PodResizePending", "status": "True", "reason": "Deferred"}

RESIZE_CASES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, int]]] = {
    "no container statuses: the spec": (
        {"containers": [_ctr("app", {"cpu": "1"})]},
        {"phase": "Running"},
        {"cpu": 1000, "pods": 1},
    ),
    "status without resources: the spec": (
        {"containers": [_ctr("app", {"cpu": "1"})]},
        _status(("app", None, {"cpu": "4"})),
        {"cpu": 1000, "pods": 1},
    ),
    "resize up in progress: the larger actuated": (
        {"containers": [_ctr("app", {"cpu": "1", "memory": "1Gi"})]},
        _status(("app", {"cpu": "2", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})),
        {"cpu": 2000, "memory": GI, "pods": 1},
    ),
    "resize up requested: the larger spec": (
        {"containers": [_ctr("app", {"cpu": "3"})]},
        _status(("app", {"cpu": "1"}, {"cpu": "1"}), conditions=[DEFERRED]),
        {"cpu": 3000, "pods": 1},
    ),
    "resize down not yet actuated: the larger allocated": (
        {"containers": [_ctr("app", {"memory": "1Gi"})]},
        _status(("app", {"memory": "1Gi"}, {"memory": "4Gi"})),
        {"memory": 4 * GI, "pods": 1},
    ),
    "infeasible resize: the spec is left out": (
        {"containers": [_ctr("app", {"cpu": "8"})]},
        _status(("app", {"cpu": "2"}, {"cpu": "1"}), conditions=[INFEASIBLE]),
        {"cpu": 2000, "pods": 1},
    ),
    "per container, by name": (
        {"containers": [_ctr("a", {"cpu": "1"}), _ctr("b", {"cpu": "1"})]},
        _status(("b", {"cpu": "3"}, None), ("other", {"cpu": "9"}, None)),
        {"cpu": 4000, "pods": 1},
    ),
    "sidecar resized; plain init container status ignored": (
        {
            "initContainers": [
                _ctr("setup", {"cpu": "500m"}),
                _sidecar("proxy", {"cpu": "100m"}),
            ],
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {
            "phase": "Running",
            "initContainerStatuses": [
                {"name": "setup", "resources": {"requests": {"cpu": "5"}}},
                {"name": "proxy", "resources": {"requests": {"cpu": "300m"}}},
            ],
        },
        {"cpu": 1300, "pods": 1},
    ),
    "pod-level resize": (
        {
            "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
            "containers": [_ctr("app", {"cpu": "1"})],
        },
        {
            "phase": "Running",
            "resources": {"requests": {"cpu": "3", "memory": "1Gi"}},
            "allocatedResources": {"cpu": "2", "memory": "2Gi"},
        },
        {"cpu": 3000, "memory": 2 * GI, "pods": 1},
    ),
    "unreadable status quantities: the spec": (
        {"containers": [_ctr("app", {"cpu": "1"})]},
        _status(("app", {"cpu": "lots"}, None)),
        {"cpu": 1000, "pods": 1},
    ),
    "unreadable container statuses: the spec": (
        {"containers": [_ctr("app", {"cpu": "1"})]},
        {"phase": "Running", "containerStatuses": "app"},
        {"cpu": 1000, "pods": 1},
    ),
}


@pytest.mark.parametrize("case", RESIZE_CASES.values(), ids=RESIZE_CASES.keys())
def test_pod_requests_during_in_place_resize(
    case: tuple[dict[str, Any], dict[str, Any], dict[str, int]],
) -> None:
    spec, status, expected = case
    obj = patched(_spec(**spec), (("spec", "nodeName"), "gpu-a100-0"), (("status",), status))
    pod, _ = pod_from(obj)
    assert pod.invalid_reason == ""
    assert pod.requests == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1000, 1000), (0, 0), (-10, -10), (2_000_000_000, 2_000_000_000), (DELETE, 0)],
)
def test_pod_priority(value: object, expected: int) -> None:
    pod, _ = pod_from(patched(POD, (("spec", "priority"), value)))
    assert pod.priority == expected
    assert pod.invalid_reason == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("gangsched", "gangsched"),
        ("my-scheduler", "my-scheduler"),
        (DELETE, "default-scheduler"),
        ("", "default-scheduler"),
        (None, "default-scheduler"),
    ],
)
def test_pod_scheduler_name(value: object, expected: str) -> None:
    pod, _ = pod_from(patched(POD, (("spec", "schedulerName"), value)))
    assert pod.scheduler_name == expected


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Pending", PodPhase.PENDING),
        ("Running", PodPhase.RUNNING),
        ("Succeeded", PodPhase.SUCCEEDED),
        ("Failed", PodPhase.FAILED),
        ("Unknown", PodPhase.UNKNOWN),
        ("Evicted", PodPhase.UNKNOWN),
        ("running", PodPhase.UNKNOWN),  # phases are case-sensitive
        ("", PodPhase.UNKNOWN),
        (DELETE, PodPhase.PENDING),  # a freshly created pod has no status yet
    ],
)
def test_pod_phase(value: object, expected: PodPhase) -> None:
    pod, _ = pod_from(patched(POD, (("status", "phase"), value)))
    assert pod.phase is expected
    assert pod.terminal is (expected in (PodPhase.SUCCEEDED, PodPhase.FAILED))


def test_pod_without_status() -> None:
    pod, _ = pod_from(patched(POD, (("status",), DELETE)))
    assert pod.phase is PodPhase.PENDING


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (CREATED, CREATED_TS),
        ("2024-05-01T12:00:00.250000Z", CREATED_TS + 0.25),
        (DELETE, 0.0),
        ("not a time", 0.0),
    ],
)
def test_pod_creation_timestamp(value: object, expected: float) -> None:
    pod, _ = pod_from(patched(POD, (("metadata", "creationTimestamp"), value)))
    assert pod.created == expected
    assert pod.invalid_reason == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2024-05-01T12:30:00Z", True), (DELETE, False), (None, False), ("", False)],
)
def test_pod_deletion_timestamp(value: object, expected: bool) -> None:
    obj = patched(POD, (("metadata", "deletionTimestamp"), value))
    if value is not DELETE:
        obj["metadata"]["deletionGracePeriodSeconds"] = 30
    pod, _ = pod_from(obj)
    assert pod.deleting is expected


def test_pod_node_name() -> None:
    pod, _ = pod_from(patched(POD, (("spec", "nodeName"), "gpu-a100-0")))
    assert pod.node_name == "gpu-a100-0"
    assert pod.placement.node_name == ""  # spec.nodeName is where the pod runs, not a filter


def test_pod_node_selector() -> None:
    pod, _ = pod_from(
        patched(
            POD,
            (
                ("spec", "nodeSelector"),
                {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "kubernetes.io/os": "linux"},
            ),
        )
    )
    assert pod.placement.node_selector == (
        ("kubernetes.io/os", "linux"),
        ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
    )


REQUIRED_TERMS = [
    {
        "matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]},
            {"key": "node-role", "operator": "NotIn", "values": ["control-plane"]},
            {"key": "nvidia.com/gpu.product", "operator": "Exists"},
            {"key": "spot", "operator": "DoesNotExist"},
            {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["3"]},
            {"key": "nvidia.com/gpu.memory", "operator": "Lt", "values": ["90000"]},
        ]
    },
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a100-0"]}]},
    {
        "matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}],
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}],
    },
]
EXPECTED_REQUIRED = (
    AffinityTerm(
        (
            Requirement("topology.kubernetes.io/zone", "In", ("a", "b")),
            Requirement("node-role", "NotIn", ("control-plane",)),
            Requirement("nvidia.com/gpu.product", "Exists", ()),
            Requirement("spot", "DoesNotExist", ()),
            Requirement("nvidia.com/gpu.count", "Gt", ("3",)),
            Requirement("nvidia.com/gpu.memory", "Lt", ("90000",)),
        )
    ),
    AffinityTerm((), (Requirement("metadata.name", "In", ("gpu-a100-0",)),)),
    AffinityTerm(
        (Requirement("pool", "In", ("batch",)),),
        (Requirement("metadata.name", "NotIn", ("bad-node",)),),
    ),
)
PREFERRED_TERMS = [
    {
        "weight": 80,
        "preference": {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}
            ]
        },
    },
    {
        "weight": 1,
        "preference": {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]},
    },
]
EXPECTED_PREFERRED = (
    PreferredTerm(80, AffinityTerm((Requirement("nvidia.com/gpu.product", "In", ("H100",)),))),
    PreferredTerm(1, AffinityTerm((), (Requirement("metadata.name", "Exists", ()),))),
)


@pytest.mark.parametrize(
    ("node_affinity", "expected"),
    [
        ({}, NodeAffinity(None, ())),
        (
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": REQUIRED_TERMS
                }
            },
            NodeAffinity(EXPECTED_REQUIRED, ()),
        ),
        (
            {"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_TERMS},
            NodeAffinity(None, EXPECTED_PREFERRED),
        ),
        (
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": REQUIRED_TERMS
                },
                "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_TERMS,
            },
            NodeAffinity(EXPECTED_REQUIRED, EXPECTED_PREFERRED),
        ),
        # required with no terms matches nothing (distinct from no requirement)
        (
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
            NodeAffinity((), ()),
        ),
        (
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}},
            NodeAffinity((AffinityTerm(),), ()),
        ),
    ],
    ids=["empty", "required", "preferred", "both", "required-no-terms", "required-empty-term"],
)
def test_pod_node_affinity(node_affinity: dict[str, Any], expected: NodeAffinity) -> None:
    obj = patched(POD, (("spec", "affinity"), {"nodeAffinity": node_affinity}))
    pod, _ = pod_from(obj)
    assert pod.invalid_reason == ""
    assert pod.placement.affinity == expected


def test_pod_without_affinity() -> None:
    pod, _ = pod_from(POD)
    assert pod.placement.affinity == NodeAffinity(None, ())
    pod, _ = pod_from(patched(POD, (("spec", "affinity"), {"podAntiAffinity": {}})))
    assert pod.placement.affinity == NodeAffinity(None, ())


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        (DELETE, ()),
        ([], ()),
        ([{"operator": "Exists"}], (Toleration("", "Exists", "", ""),)),
        (
            [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}],
            (Toleration("dedicated", "Equal", "training", "NoSchedule"),),
        ),
        (
            [{"key": "dedicated", "operator": "Equal", "value": "training"}],
            (Toleration("dedicated", "Equal", "training", ""),),
        ),
        (
            [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}],
            (Toleration("k", "Exists", "", "NoExecute"),),
        ),
    ],
    ids=["absent", "empty", "tolerate-everything", "equal-default", "any-effect", "seconds"],
)
def test_pod_tolerations(tolerations: object, expected: tuple[Toleration, ...]) -> None:
    pod, _ = pod_from(patched(POD, (("spec", "tolerations"), tolerations)))
    assert pod.placement.tolerations == expected


# ---- invalid pods -------------------------------------------------------------------------

AFFINITY: Path = ("spec", "affinity")
REQUIRED_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Matches", "values": ["a"]}]}
            ]
        }
    }
}

INVALID_POD_CASES: dict[str, tuple[tuple[Path, object], str]] = {
    "unparsable quantity": (
        ((*C0_REQUESTS, "memory"), "12Qi"),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "fractional gpu": (
        ((*C0_REQUESTS, GPU), "0.5"),
        "spec.containers[pytorch].resources.requests.nvidia.com/gpu",
    ),
    "gpu in milli-units that is not whole": (
        ((*C0_REQUESTS, GPU), "500m"),
        "spec.containers[pytorch].resources.requests.nvidia.com/gpu",
    ),
    "negative cpu": (
        ((*C0_REQUESTS, "cpu"), "-1"),
        "spec.containers[pytorch].resources.requests.cpu",
    ),
    "negative memory": (
        ((*C0_REQUESTS, "memory"), "-500Mi"),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "quantity with a space": (
        ((*C0_REQUESTS, "cpu"), "1 core"),
        "spec.containers[pytorch].resources.requests.cpu",
    ),
    "boolean quantity": (
        ((*C0_REQUESTS, "cpu"), True),
        "spec.containers[pytorch].resources.requests.cpu",
    ),
    "null quantity": (
        ((*C0_REQUESTS, "memory"), None),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "quantity too large": (
        ((*C0_REQUESTS, "memory"), "10E"),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "unnamed container uses its index": (
        (C0, {"image": "x", "resources": {"requests": {"memory": "12Qi"}}}),
        "spec.containers[0].resources.requests.memory",
    ),
    "string priority": ((("spec", "priority"), "100"), "spec.priority"),
    "float priority": ((("spec", "priority"), 1.5), "spec.priority"),
    "boolean priority": ((("spec", "priority"), True), "spec.priority"),
    "unknown affinity operator": (
        (AFFINITY, REQUIRED_AFFINITY),
        "nodeSelectorTerms[0].matchExpressions[0].operator",
    ),
    "lowercase affinity operator": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "in"}]}
                        ]
                    }
                }
            },
        ),
        "nodeSelectorTerms[0].matchFields[0].operator",
    ),
    "unknown operator in a preferred term": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 10,
                            "preference": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
                        }
                    ]
                }
            },
        ),
        "matchExpressions[0].operator",
    ),
    "affinity values not a list": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}
                        ]
                    }
                }
            },
        ),
        "nodeSelectorTerms[0].matchExpressions[0].values",
    ),
    "nodeSelectorTerms not a list": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {}}
                }
            },
        ),
        "nodeSelectorTerms",
    ),
    "preferred weight not a number": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": "heavy", "preference": {}}
                    ]
                }
            },
        ),
        "weight",
    ),
    "affinity not an object": ((AFFINITY, ["nodeAffinity"]), "spec.affinity"),
    "containers not a list": ((("spec", "containers"), {"name": "pytorch"}), "spec.containers"),
    "container not an object": ((("spec", "containers"), ["pytorch"]), "spec.containers[0]"),
    "resources not an object": (((*C0, "resources"), "big"), "spec.containers[0].resources"),
    "requests not an object": ((C0_REQUESTS, ["cpu", "1"]), "requests"),
    "initContainers not a list": ((("spec", "initContainers"), "setup"), "spec.initContainers"),
    "bad init container quantity": (
        (("spec", "initContainers"), [_ctr("setup", {"cpu": "2 cores"})]),
        "spec.initContainers[setup].resources.requests.cpu",
    ),
    "bad sidecar quantity": (
        (("spec", "initContainers"), [_sidecar("proxy", {GPU: "0.5"})]),
        "spec.initContainers[proxy].resources.requests.nvidia.com/gpu",
    ),
    "bad overhead": ((("spec", "overhead"), {"cpu": "12Qi"}), "spec.overhead.cpu"),
    "overhead not an object": ((("spec", "overhead"), "250m"), "spec.overhead"),
    "bad pod-level request": (
        (("spec", "resources"), {"requests": {"memory": "-1Gi"}}),
        "spec.resources.requests.memory",
    ),
    "pod-level resources not an object": ((("spec", "resources"), ["cpu"]), "spec.resources"),
    "tolerations not a list": ((("spec", "tolerations"), {"key": "a"}), "spec.tolerations"),
    "nodeSelector not an object": ((("spec", "nodeSelector"), "gpu=true"), "nodeSelector"),
}


@pytest.mark.parametrize("case", INVALID_POD_CASES.values(), ids=INVALID_POD_CASES.keys())
def test_invalid_pod(case: tuple[tuple[Path, object], str]) -> None:
    change, field = case
    pod, membership = pod_from(patched(POD, change))
    assert field in pod.invalid_reason
    # Identity, gang and phase are still known, so the pod is reported and accounted.
    assert (pod.uid, pod.key, pod.group, pod.role) == (
        "7c0e9a52-64d4-4b0b-8f0e-0c2f0d9d6a31",
        "ml/train-worker-0",
        "ml/train",
        "worker",
    )
    assert membership.key == "ml/train"
    assert pod.requests.get("pods") == 1


def test_invalid_pod_is_accounted_where_it_runs() -> None:
    obj = patched(
        POD,
        ((*C0_REQUESTS, "memory"), "12Qi"),
        (("spec", "nodeName"), "gpu-a100-0"),
        (("status", "phase"), "Running"),
    )
    pod, _ = pod_from(obj)
    assert pod.invalid_reason
    assert pod.node_name == "gpu-a100-0"
    assert pod.phase is PodPhase.RUNNING
    assert pod.requests == {"pods": 1}  # its requests are unknown; it still takes a pod slot


def test_invalid_reason_names_the_quantity() -> None:
    pod, _ = pod_from(patched(POD, ((*C0_REQUESTS, "memory"), "12Qi")))
    assert "12Qi" in pod.invalid_reason


def test_pod_declaring_two_gangs_is_invalid() -> None:
    obj = patched(POD, (("metadata", "labels", "scheduling.x-k8s.io/pod-group"), "other"))
    pod, membership = pod_from(obj)
    assert "ml/train" in pod.invalid_reason
    assert "ml/other" in pod.invalid_reason
    assert pod.group == ""
    assert pod.role == "worker"
    assert membership.error and membership.error in pod.invalid_reason
    assert pod.requests == {"cpu": 7500, "memory": 60 * GI, GPU: 1, "pods": 1}


def test_pod_with_two_problems_reports_both() -> None:
    obj = patched(
        POD,
        (("metadata", "labels", "scheduling.x-k8s.io/pod-group"), "other"),
        ((*C0_REQUESTS, "cpu"), "-1"),
    )
    pod, _ = pod_from(obj)
    assert "more than one gang" in pod.invalid_reason
    assert "spec.containers[pytorch].resources.requests.cpu" in pod.invalid_reason


def test_pod_gang_from_annotations() -> None:
    obj = patched(
        POD,
        (("metadata", "labels"), {"app": "train"}),
        (
            ("metadata", "annotations"),
            {
                "scheduling.k8s.io/group-name": "train",
                "scheduling.k8s.io/group-pod-num": "4",
                "volcano.sh/task-spec": "ps",
            },
        ),
    )
    pod, membership = pod_from(obj)
    assert (pod.group, pod.role) == ("ml/train", "ps")
    assert membership.implicit == GangSpec("ml/train", 4, created=CREATED_TS)


# ---- pods: labels, inter-pod affinity, topology spread, host ports, gates, volumes --------

JOB = "training.kubeflow.org/job-name"  # a label POD has, value "train"
ROLE = "gangsched.io/role"  # a label POD has, value "worker"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ML = frozenset({"ml"})
REQUIRED_KEY = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_KEY = "preferredDuringSchedulingIgnoredDuringExecution"
HUGE_NAME = 10**5000  # more digits than Python will turn into a string


def _with_spec(**fields: object) -> dict[str, Any]:
    return patched(POD, *((("spec", k), v) for k, v in fields.items()))


def test_pod_labels() -> None:
    pod, _ = pod_from(POD)
    assert pod.labels == POD["metadata"]["labels"]
    pod, _ = pod_from(patched(POD, (("metadata", "labels"), DELETE)))
    assert pod.labels == {}


def _term(**extra: object) -> dict[str, Any]:
    return {"topologyKey": HOST, **extra}


APP_SELECTOR = {"matchLabels": {"app": "nccl"}}
APP = LabelSelector((("app", "nccl"),))

POD_AFFINITY_CASES: dict[str, tuple[dict[str, Any], PodAffinity]] = {
    "required anti-affinity on the hostname": (
        {"podAntiAffinity": {REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR)]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, APP, ML),)),
    ),
    "required affinity by zone": (
        {"podAffinity": {REQUIRED_KEY: [{"topologyKey": ZONE, "labelSelector": APP_SELECTOR}]}},
        PodAffinity(required=(PodAffinityTerm(ZONE, APP, ML),)),
    ),
    "preferred terms carry their weight": (
        {
            "podAffinity": {
                PREFERRED_KEY: [
                    {"weight": 100, "podAffinityTerm": _term(labelSelector=APP_SELECTOR)}
                ]
            },
            "podAntiAffinity": {
                PREFERRED_KEY: [{"weight": 1, "podAffinityTerm": _term(labelSelector={})}]
            },
        },
        PodAffinity(
            preferred=(WeightedPodAffinityTerm(100, PodAffinityTerm(HOST, APP, ML)),),
            preferred_anti=(
                WeightedPodAffinityTerm(1, PodAffinityTerm(HOST, LabelSelector(), ML)),
            ),
        ),
    ),
    "all four lists at once": (
        {
            "podAffinity": {
                REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR)],
                PREFERRED_KEY: [{"weight": 5, "podAffinityTerm": _term(labelSelector={})}],
            },
            "podAntiAffinity": {
                REQUIRED_KEY: [{"topologyKey": ZONE, "labelSelector": APP_SELECTOR}],
                PREFERRED_KEY: [{"weight": 7, "podAffinityTerm": _term(labelSelector={})}],
            },
        },
        PodAffinity(
            required=(PodAffinityTerm(HOST, APP, ML),),
            preferred=(WeightedPodAffinityTerm(5, PodAffinityTerm(HOST, LabelSelector(), ML)),),
            required_anti=(PodAffinityTerm(ZONE, APP, ML),),
            preferred_anti=(
                WeightedPodAffinityTerm(7, PodAffinityTerm(HOST, LabelSelector(), ML)),
            ),
        ),
    ),
    "no labelSelector selects no pod": (
        {"podAntiAffinity": {REQUIRED_KEY: [_term()]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, None, ML),)),
    ),
    "an empty labelSelector selects every pod": (
        {"podAntiAffinity": {REQUIRED_KEY: [_term(labelSelector={})]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, LabelSelector(), ML),)),
    ),
    "every selector operator": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [
                    _term(
                        labelSelector={
                            "matchLabels": {"b": "2", "a": "1"},
                            "matchExpressions": [
                                {"key": "tier", "operator": "In", "values": ["x", "y"]},
                                {"key": "env", "operator": "NotIn", "values": ["dev"]},
                                {"key": "gpu", "operator": "Exists"},
                                {"key": "spot", "operator": "DoesNotExist", "values": []},
                            ],
                        }
                    )
                ]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector(
                        (("a", "1"), ("b", "2")),
                        (
                            Requirement("tier", "In", ("x", "y")),
                            Requirement("env", "NotIn", ("dev",)),
                            Requirement("gpu", "Exists"),
                            Requirement("spot", "DoesNotExist"),
                        ),
                    ),
                    ML,
                ),
            )
        ),
    ),
    "namespaces replace the pod's own": (
        {
            "podAffinity": {
                REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR, namespaces=["a", "b", "a"])]
            }
        },
        PodAffinity(required=(PodAffinityTerm(HOST, APP, frozenset({"a", "b"})),)),
    ),
    "an empty namespaceSelector selects every namespace": (
        {"podAffinity": {REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR, namespaceSelector={})]}},
        PodAffinity(required=(PodAffinityTerm(HOST, APP, frozenset(), LabelSelector()),)),
    ),
    "namespaceSelector and namespaces together": (
        {
            "podAffinity": {
                REQUIRED_KEY: [
                    _term(
                        labelSelector=APP_SELECTOR,
                        namespaces=["shared"],
                        namespaceSelector={"matchLabels": {"team": "ml"}},
                    )
                ]
            }
        },
        PodAffinity(
            required=(
                PodAffinityTerm(HOST, APP, frozenset({"shared"}), LabelSelector((("team", "ml"),))),
            )
        ),
    ),
    "an empty namespaces list is the pod's own namespace": (
        {"podAffinity": {REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR, namespaces=[])]}},
        PodAffinity(required=(PodAffinityTerm(HOST, APP, ML),)),
    ),
    "matchLabelKeys merged as key In (pod's value)": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR, matchLabelKeys=[JOB])]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector((("app", "nccl"),), (Requirement(JOB, "In", ("train",)),)),
                    ML,
                ),
            )
        ),
    ),
    "mismatchLabelKeys merged as key NotIn (pod's value)": (
        {
            "podAffinity": {
                REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR, mismatchLabelKeys=[ROLE])]
            }
        },
        PodAffinity(
            required=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector((("app", "nccl"),), (Requirement(ROLE, "NotIn", ("worker",)),)),
                    ML,
                ),
            )
        ),
    ),
    "label keys the pod does not have add nothing": (
        {
            "podAffinity": {
                REQUIRED_KEY: [
                    _term(
                        labelSelector=APP_SELECTOR,
                        matchLabelKeys=["absent"],
                        mismatchLabelKeys=["also-absent"],
                    )
                ]
            }
        },
        PodAffinity(required=(PodAffinityTerm(HOST, APP, ML),)),
    ),
    "already merged by the API server: not added twice": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [
                    _term(
                        labelSelector={
                            "matchLabels": {"app": "nccl"},
                            "matchExpressions": [
                                {"key": JOB, "operator": "In", "values": ["train"]},
                                {"key": ROLE, "operator": "NotIn", "values": ["worker"]},
                            ],
                        },
                        matchLabelKeys=[JOB],
                        mismatchLabelKeys=[ROLE],
                    )
                ]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector(
                        (("app", "nccl"),),
                        (
                            Requirement(JOB, "In", ("train",)),
                            Requirement(ROLE, "NotIn", ("worker",)),
                        ),
                    ),
                    ML,
                ),
            )
        ),
    ),
    # The API server merged the value the pod had when it was created; kube-scheduler reads
    # that selector as stored, whatever the pod's labels became since.
    "merged at creation with a label value changed since: kept as stored": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [
                    _term(
                        labelSelector={
                            "matchExpressions": [
                                {"key": JOB, "operator": "In", "values": ["old-job"]}
                            ]
                        },
                        matchLabelKeys=[JOB],
                    )
                ]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST, LabelSelector((), (Requirement(JOB, "In", ("old-job",)),)), ML
                ),
            )
        ),
    ),
    "label keys with no labelSelector: still selects nothing": (
        {"podAntiAffinity": {REQUIRED_KEY: [_term(matchLabelKeys=[JOB])]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, None, ML),)),
    ),
    "empty lists": (
        {"podAffinity": {REQUIRED_KEY: [], PREFERRED_KEY: []}, "podAntiAffinity": {}},
        PodAffinity(),
    ),
}


@pytest.mark.parametrize("case", POD_AFFINITY_CASES.values(), ids=POD_AFFINITY_CASES.keys())
def test_pod_affinity(case: tuple[dict[str, Any], PodAffinity]) -> None:
    affinity, expected = case
    pod, _ = pod_from(patched(POD, (AFFINITY, affinity)))
    assert pod.invalid_reason == ""
    assert pod.unsupported == ""
    assert pod.pod_affinity == expected
    assert pod.placement.affinity == NodeAffinity()


def test_pod_affinity_next_to_node_affinity() -> None:
    obj = patched(
        POD,
        (
            AFFINITY,
            {
                "nodeAffinity": {REQUIRED_KEY: {"nodeSelectorTerms": REQUIRED_TERMS}},
                "podAntiAffinity": {REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR)]},
            },
        ),
    )
    pod, _ = pod_from(obj)
    assert pod.placement.affinity == NodeAffinity(EXPECTED_REQUIRED, ())
    assert pod.pod_affinity == PodAffinity(required_anti=(PodAffinityTerm(HOST, APP, ML),))


def test_pod_without_pod_affinity() -> None:
    pod, _ = pod_from(POD)
    assert pod.pod_affinity == PodAffinity()
    assert not pod.pod_affinity


def _spread(**fields: object) -> dict[str, Any]:
    """A topology spread constraint; a field given as DELETE is left out."""
    c = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": APP_SELECTOR,
        **fields,
    }
    return {k: v for k, v in c.items() if v is not DELETE}


SPREAD_CASES: dict[str, tuple[list[dict[str, Any]], tuple[SpreadConstraint, ...]]] = {
    "defaults": ([_spread()], (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),)),
    "every field": (
        [
            _spread(
                maxSkew=2,
                minDomains=3,
                nodeAffinityPolicy="Ignore",
                nodeTaintsPolicy="Honor",
            )
        ],
        (SpreadConstraint(2, ZONE, "DoNotSchedule", APP, 3, "Ignore", "Honor"),),
    ),
    "ScheduleAnyway": (
        [_spread(whenUnsatisfiable="ScheduleAnyway", topologyKey=HOST)],
        (SpreadConstraint(1, HOST, "ScheduleAnyway", APP),),
    ),
    "policies written out at their defaults": (
        [_spread(nodeAffinityPolicy="Honor", nodeTaintsPolicy="Ignore")],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),),
    ),
    "null policies and minDomains are the defaults": (
        [_spread(nodeAffinityPolicy=None, nodeTaintsPolicy=None, minDomains=None)],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),),
    ),
    "two constraints, order kept": (
        [_spread(), _spread(topologyKey=HOST, whenUnsatisfiable="ScheduleAnyway", maxSkew=5)],
        (
            SpreadConstraint(1, ZONE, "DoNotSchedule", APP),
            SpreadConstraint(5, HOST, "ScheduleAnyway", APP),
        ),
    ),
    "same key with both actions": (
        [_spread(), _spread(whenUnsatisfiable="ScheduleAnyway")],
        (
            SpreadConstraint(1, ZONE, "DoNotSchedule", APP),
            SpreadConstraint(1, ZONE, "ScheduleAnyway", APP),
        ),
    ),
    "no labelSelector": (
        [_spread(labelSelector=DELETE)],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", None),),
    ),
    "matchLabelKeys merged as key In (pod's value)": (
        [_spread(matchLabelKeys=[JOB, "absent"])],
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
        [_spread(labelSelector={}, matchLabelKeys=[JOB])],
        (
            SpreadConstraint(
                1, ZONE, "DoNotSchedule", LabelSelector((), (Requirement(JOB, "In", ("train",)),))
            ),
        ),
    ),
    "already merged by the API server: not added twice": (
        [
            _spread(
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
            _spread(
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
        [_spread(labelSelector=DELETE, matchLabelKeys=[JOB])],
        (SpreadConstraint(1, ZONE, "DoNotSchedule", None),),
    ),
    "none": ([], ()),
}


@pytest.mark.parametrize("case", SPREAD_CASES.values(), ids=SPREAD_CASES.keys())
def test_pod_topology_spread(
    case: tuple[list[dict[str, Any]], tuple[SpreadConstraint, ...]],
) -> None:
    constraints, expected = case
    pod, _ = pod_from(_with_spec(topologySpreadConstraints=constraints))
    assert pod.invalid_reason == ""
    assert pod.spread == expected


def _port(container_port: int, **extra: object) -> dict[str, Any]:
    return {"containerPort": container_port, **extra}


HOST_PORT_CASES: dict[str, tuple[dict[str, Any], tuple[HostPort, ...]]] = {
    "hostPort": (
        {"containers": [_ctr("a", ports=[_port(29500, hostPort=29500)])]},
        (HostPort(29500, "TCP", ""),),
    ),
    "containerPort alone is no host port": (
        {"containers": [_ctr("a", ports=[_port(8080), _port(9090, hostPort=0)])]},
        (),
    ),
    "protocol and hostIP": (
        {
            "containers": [
                _ctr(
                    "a",
                    ports=[
                        _port(53, hostPort=53, protocol="UDP", hostIP="10.0.0.1"),
                        _port(38412, hostPort=38412, protocol="SCTP"),
                        _port(80, hostPort=8080, protocol="TCP", hostIP="0.0.0.0"),
                    ],
                )
            ]
        },
        (
            HostPort(53, "UDP", "10.0.0.1"),
            HostPort(38412, "SCTP", ""),
            HostPort(8080, "TCP", ""),
        ),
    ),
    "every container": (
        {
            "containers": [
                _ctr("a", ports=[_port(1, hostPort=1001)]),
                _ctr("b"),
                _ctr("c", ports=[_port(2, hostPort=1002)]),
            ]
        },
        (HostPort(1001), HostPort(1002)),
    ),
    "sidecars count, before the app containers; plain init containers do not": (
        {
            "initContainers": [
                _ctr("setup", ports=[_port(1, hostPort=7001)]),
                _ctr("proxy", restartPolicy="Always", ports=[_port(2, hostPort=7002)]),
            ],
            "containers": [_ctr("app", ports=[_port(3, hostPort=7003)])],
        },
        (HostPort(7002), HostPort(7003)),
    ),
    "hostNetwork: container ports are host ports": (
        {
            "hostNetwork": True,
            "containers": [
                _ctr("a", ports=[_port(29500), _port(29501, hostPort=29501, protocol="UDP")])
            ],
        },
        (HostPort(29500), HostPort(29501, "UDP")),
    ),
    "hostNetwork false: no defaulting": (
        {"hostNetwork": False, "containers": [_ctr("a", ports=[_port(29500)])]},
        (),
    ),
    "no ports": ({"containers": [_ctr("a", ports=[])]}, ()),
}


@pytest.mark.parametrize("case", HOST_PORT_CASES.values(), ids=HOST_PORT_CASES.keys())
def test_pod_host_ports(case: tuple[dict[str, Any], tuple[HostPort, ...]]) -> None:
    spec, expected = case
    pod, _ = pod_from(_spec(**spec))
    assert pod.invalid_reason == ""
    assert pod.host_ports == expected


@pytest.mark.parametrize(
    ("gates", "expected"),
    [
        (DELETE, ()),
        ([], ()),
        ([{"name": "kueue.x-k8s.io/admission"}], ("kueue.x-k8s.io/admission",)),
        ([{"name": "b"}, {"name": "a"}], ("b", "a")),
    ],
    ids=["absent", "empty", "one", "two"],
)
def test_pod_scheduling_gates(gates: object, expected: tuple[str, ...]) -> None:
    pod, _ = pod_from(patched(POD, (("spec", "schedulingGates"), gates)))
    assert pod.invalid_reason == ""
    assert pod.gates == expected


VOLUME_CASES: dict[str, tuple[list[dict[str, Any]], PodVolumes]] = {
    "claims": (
        [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
            {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt", "readOnly": True}},
        ],
        PodVolumes(("data-0", "ckpt")),
    ),
    "generic ephemeral volume: the claim <pod>-<volume>": (
        [
            {
                "name": "scratch",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "local",
                            "resources": {"requests": {"storage": "1Gi"}},
                        }
                    }
                },
            }
        ],
        PodVolumes(("train-worker-0-scratch",), (), ("train-worker-0-scratch",)),
    ),
    "inline CSI volumes": (
        [
            {"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True}},
            {"name": "cache", "csi": {"driver": "local.csi.example.com"}},
        ],
        PodVolumes((), ("secrets-store.csi.k8s.io", "local.csi.example.com")),
    ),
    "volumes the scheduler does not look at": (
        [
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "host", "hostPath": {"path": "/dev/infiniband", "type": ""}},
            {"name": "tok", "projected": {"sources": []}},
            {"name": "nfs", "nfs": {"server": "nfs.example.com", "path": "/data"}},
        ],
        PodVolumes(),
    ),
    "a mix": (
        [
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "s", "csi": {"driver": "d"}},
        ],
        PodVolumes(("data", "train-worker-0-tmp"), ("d",), ("train-worker-0-tmp",)),
    ),
    "none": ([], PodVolumes()),
}


@pytest.mark.parametrize("case", VOLUME_CASES.values(), ids=VOLUME_CASES.keys())
def test_pod_volumes(case: tuple[list[dict[str, Any]], PodVolumes]) -> None:
    volumes, expected = case
    pod, _ = pod_from(patched(POD, (("spec", "volumes"), volumes)))
    assert (pod.invalid_reason, pod.unsupported) == ("", "")
    assert pod.volumes == expected


# ---- pods gangsched refuses ---------------------------------------------------------------

RESOURCE_CLAIMS = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]

UNSUPPORTED_CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "resource claims": (
        _with_spec(resourceClaims=RESOURCE_CLAIMS),
        [
            "spec.resourceClaims: resource claims (Dynamic Resource Allocation) are not "
            "supported by gangsched"
        ],
    ),
    **{
        f"inline {source}": (
            _with_spec(
                volumes=[
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "disk", source: {"volumeID": "x"}},
                ]
            ),
            [f"spec.volumes[1].{source}: inline {source} volumes are not supported by gangsched"],
        )
        for source in (
            "gcePersistentDisk",
            "awsElasticBlockStore",
            "rbd",
            "iscsi",
            "azureDisk",
            "azureFile",
            "cinder",
            "vsphereVolume",
            "portworxVolume",
        )
    },
    "RestartAllContainers rule (NodeDeclaredFeatures)": (
        _with_spec(
            containers=[
                _ctr("a"),
                _ctr(
                    "b",
                    restartPolicy="Never",
                    restartPolicyRules=[
                        {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}},
                        {"action": "RestartAllContainers"},
                    ],
                ),
            ]
        ),
        [
            "spec.containers[1].restartPolicyRules[1].action: RestartAllContainers needs a node "
            "that declares the feature RestartAllContainersOnContainerExits"
        ],
    ),
    "RestartAllContainers rule on an init container": (
        _with_spec(
            initContainers=[_ctr("i", restartPolicyRules=[{"action": "RestartAllContainers"}])]
        ),
        ["spec.initContainers[0].restartPolicyRules[0].action"],
    ),
    "user namespace with hostNetwork (NodeDeclaredFeatures)": (
        _with_spec(hostNetwork=True, hostUsers=False),
        ["spec.hostUsers: a user namespace with hostNetwork needs a node that declares"],
    ),
    "several fields, each named": (
        _with_spec(
            resourceClaims=RESOURCE_CLAIMS,
            volumes=[{"name": "d", "rbd": {"image": "i"}}, {"name": "e", "cinder": {}}],
        ),
        ["spec.resourceClaims", "spec.volumes[0].rbd", "spec.volumes[1].cinder"],
    ),
}


@pytest.mark.parametrize("case", UNSUPPORTED_CASES.values(), ids=UNSUPPORTED_CASES.keys())
def test_unsupported_pod(case: tuple[dict[str, Any], list[str]]) -> None:
    obj, expected = case
    pod, membership = pod_from(obj)
    assert pod.invalid_reason == ""
    for text in expected:
        assert text in pod.unsupported
    assert pod.refused == pod.unsupported
    # Everything else is read: it is reported and accounted like any other pod.
    assert (pod.key, pod.group, membership.key) == ("ml/train-worker-0", "ml/train", "ml/train")
    assert pod.labels == POD["metadata"]["labels"]


@pytest.mark.parametrize(
    "spec",
    [
        {"resourceClaims": []},
        {"resourceClaims": None},
        {"hostUsers": False},
        {"hostNetwork": True, "hostUsers": True},
        {"containers": [_ctr("a", restartPolicyRules=[{"action": "Restart"}])]},
        {"volumes": [{"name": "d", "gcePersistentDisk": None}]},
    ],
    ids=repr,
)
def test_supported_lookalikes_are_not_refused(spec: dict[str, Any]) -> None:
    pod, _ = pod_from(_with_spec(**spec))
    assert (pod.invalid_reason, pod.unsupported) == ("", "")


def test_unsupported_bound_pod_still_counts_its_ports_and_terms() -> None:
    obj = _with_spec(
        nodeName="gpu-a100-0",
        resourceClaims=RESOURCE_CLAIMS,
        containers=[_ctr("a", {"cpu": "1"}, ports=[_port(80, hostPort=80)])],
        affinity={"podAntiAffinity": {REQUIRED_KEY: [_term(labelSelector=APP_SELECTOR)]}},
        topologySpreadConstraints=[_spread()],
    )
    obj = patched(obj, (("status", "phase"), "Running"))
    pod, _ = pod_from(obj)
    assert pod.unsupported.startswith("spec.resourceClaims")
    assert pod.node_name == "gpu-a100-0"
    assert pod.requests == {"cpu": 1000, "pods": 1}
    assert pod.host_ports == (HostPort(80),)
    assert pod.pod_affinity.required_anti == (PodAffinityTerm(HOST, APP, ML),)
    assert pod.spread == (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),)


def _affinity_term(kind: str, term: object) -> tuple[Path, object]:
    return (AFFINITY, {kind: {REQUIRED_KEY: [term]}})


ANTI_TERM = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
SPREAD0 = "spec.topologySpreadConstraints[0]"
TSC: Path = ("spec", "topologySpreadConstraints")

INVALID_CONSTRAINT_CASES: dict[str, tuple[tuple[Path, object], str]] = {
    "unknown selector operator": (
        _affinity_term(
            "podAntiAffinity",
            _term(labelSelector={"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].operator",
    ),
    "In without values": (
        _affinity_term(
            "podAntiAffinity",
            _term(labelSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].values",
    ),
    "Exists with values": (
        _affinity_term(
            "podAntiAffinity",
            _term(
                labelSelector={
                    "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]
                }
            ),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].values",
    ),
    "selector value not a string": (
        _affinity_term(
            "podAntiAffinity",
            _term(
                labelSelector={"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}
            ),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].values[0]",
    ),
    "matchLabels value not a string": (
        _affinity_term("podAntiAffinity", _term(labelSelector={"matchLabels": {"app": None}})),
        f"{ANTI_TERM}.labelSelector.matchLabels.app",
    ),
    "no topologyKey": (
        _affinity_term("podAntiAffinity", {"labelSelector": APP_SELECTOR}),
        f"{ANTI_TERM}.topologyKey",
    ),
    "empty topologyKey": (
        _affinity_term("podAffinity", _term(topologyKey="", labelSelector=APP_SELECTOR)),
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
    ),
    "namespaces not a list": (
        _affinity_term("podAntiAffinity", _term(labelSelector=APP_SELECTOR, namespaces="ml")),
        f"{ANTI_TERM}.namespaces",
    ),
    "bad namespaceSelector": (
        _affinity_term(
            "podAntiAffinity",
            _term(
                labelSelector=APP_SELECTOR,
                namespaceSelector={"matchExpressions": [{"key": "t", "operator": "Near"}]},
            ),
        ),
        f"{ANTI_TERM}.namespaceSelector.matchExpressions[0].operator",
    ),
    "matchLabelKeys not strings": (
        _affinity_term("podAntiAffinity", _term(labelSelector={}, matchLabelKeys=[7])),
        f"{ANTI_TERM}.matchLabelKeys[0]",
    ),
    "preferred weight 0": (
        (
            AFFINITY,
            {"podAffinity": {PREFERRED_KEY: [{"weight": 0, "podAffinityTerm": _term()}]}},
        ),
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    "preferred weight 101": (
        (
            AFFINITY,
            {"podAntiAffinity": {PREFERRED_KEY: [{"weight": 101, "podAffinityTerm": _term()}]}},
        ),
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    "preferred weight a string": (
        (
            AFFINITY,
            {"podAntiAffinity": {PREFERRED_KEY: [{"weight": "5", "podAffinityTerm": _term()}]}},
        ),
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    "preferred without a term": (
        (AFFINITY, {"podAntiAffinity": {PREFERRED_KEY: [{"weight": 5}]}}),
        "preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm",
    ),
    "podAntiAffinity not an object": (
        (AFFINITY, {"podAntiAffinity": [_term()]}),
        "spec.affinity.podAntiAffinity",
    ),
    "required terms not a list": (
        (AFFINITY, {"podAffinity": {REQUIRED_KEY: _term()}}),
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    ),
    "maxSkew 0": ((TSC, [_spread(maxSkew=0)]), f"{SPREAD0}.maxSkew"),
    "maxSkew a string": ((TSC, [_spread(maxSkew="1")]), f"{SPREAD0}.maxSkew"),
    "maxSkew a float": ((TSC, [_spread(maxSkew=1.5)]), f"{SPREAD0}.maxSkew"),
    "maxSkew missing": (
        (TSC, [{"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]),
        f"{SPREAD0}.maxSkew",
    ),
    "unknown whenUnsatisfiable": (
        (TSC, [_spread(whenUnsatisfiable="Sometimes")]),
        f"{SPREAD0}.whenUnsatisfiable",
    ),
    "whenUnsatisfiable missing": (
        (TSC, [{"maxSkew": 1, "topologyKey": ZONE}]),
        f"{SPREAD0}.whenUnsatisfiable",
    ),
    "spread without a topologyKey": ((TSC, [_spread(topologyKey="")]), f"{SPREAD0}.topologyKey"),
    "minDomains 0": ((TSC, [_spread(minDomains=0)]), f"{SPREAD0}.minDomains"),
    "minDomains with ScheduleAnyway": (
        (TSC, [_spread(minDomains=2, whenUnsatisfiable="ScheduleAnyway")]),
        f"{SPREAD0}.minDomains",
    ),
    "unknown nodeAffinityPolicy": (
        (TSC, [_spread(nodeAffinityPolicy="Always")]),
        f"{SPREAD0}.nodeAffinityPolicy",
    ),
    "unknown nodeTaintsPolicy": (
        (TSC, [_spread(nodeTaintsPolicy="honor")]),
        f"{SPREAD0}.nodeTaintsPolicy",
    ),
    "duplicate topologyKey and whenUnsatisfiable": (
        (TSC, [_spread(), _spread(maxSkew=2)]),
        "spec.topologySpreadConstraints[1]: duplicate",
    ),
    "bad spread selector": (
        (TSC, [_spread(labelSelector={"matchExpressions": [{"key": "a", "operator": "Lt"}]})]),
        f"{SPREAD0}.labelSelector.matchExpressions[0].operator",
    ),
    "topologySpreadConstraints not a list": ((TSC, _spread()), "spec.topologySpreadConstraints"),
    "hostPort above 65535": (
        ((*C0, "ports"), [_port(80, hostPort=70000)]),
        "spec.containers[0].ports[0].hostPort",
    ),
    "negative hostPort": (
        ((*C0, "ports"), [_port(80, hostPort=-1)]),
        "spec.containers[0].ports[0].hostPort",
    ),
    "hostPort a string": (
        ((*C0, "ports"), [_port(80, hostPort="80")]),
        "spec.containers[0].ports[0].hostPort",
    ),
    "unknown protocol": (
        ((*C0, "ports"), [_port(80, hostPort=80, protocol="tcp")]),
        "spec.containers[0].ports[0].protocol",
    ),
    "hostIP not a string": (
        ((*C0, "ports"), [_port(80, hostPort=80, hostIP=["10.0.0.1"])]),
        "spec.containers[0].ports[0].hostIP",
    ),
    "ports not a list": (((*C0, "ports"), {"containerPort": 80}), "spec.containers[0].ports"),
    "scheduling gate without a name": (
        (("spec", "schedulingGates"), [{"name": ""}]),
        "spec.schedulingGates[0].name",
    ),
    "scheduling gate not an object": (
        (("spec", "schedulingGates"), ["kueue"]),
        "spec.schedulingGates[0]",
    ),
    "claim without a name": (
        (("spec", "volumes"), [{"name": "d", "persistentVolumeClaim": {}}]),
        "spec.volumes[0].persistentVolumeClaim.claimName",
    ),
    "ephemeral volume without a name": (
        (("spec", "volumes"), [{"ephemeral": {"volumeClaimTemplate": {}}}]),
        "spec.volumes[0].name",
    ),
    "inline CSI volume without a driver": (
        (("spec", "volumes"), [{"name": "s", "csi": {"readOnly": True}}]),
        "spec.volumes[0].csi.driver",
    ),
    "volumes not a list": ((("spec", "volumes"), {"name": "d"}), "spec.volumes"),
    "resourceClaims not a list": (
        (("spec", "resourceClaims"), {"name": "gpu"}),
        "spec.resourceClaims",
    ),
}


@pytest.mark.parametrize(
    "case", INVALID_CONSTRAINT_CASES.values(), ids=INVALID_CONSTRAINT_CASES.keys()
)
def test_invalid_constraint(case: tuple[tuple[Path, object], str]) -> None:
    change, field = case
    pod, membership = pod_from(patched(POD, change))
    assert field in pod.invalid_reason
    assert pod.refused == pod.invalid_reason
    assert (pod.key, pod.group, membership.key) == ("ml/train-worker-0", "ml/train", "ml/train")
    assert pod.labels == POD["metadata"]["labels"]


def test_each_bad_part_is_reported_and_the_others_still_read() -> None:
    obj = _with_spec(
        containers=[_ctr("a", {"cpu": "2"}, ports=[_port(80, hostPort=80)])],
        topologySpreadConstraints=[_spread(maxSkew=0)],
        schedulingGates=[{"name": 5}],
        volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
    )
    pod, _ = pod_from(obj)
    assert f"{SPREAD0}.maxSkew" in pod.invalid_reason
    assert "spec.schedulingGates[0].name" in pod.invalid_reason
    assert pod.requests == {"cpu": 2000, "pods": 1}
    assert pod.host_ports == (HostPort(80),)
    assert pod.volumes == PodVolumes(("data",))


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


# ---- hostile input never raises -----------------------------------------------------------

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


# ---- gangsched.io PodGroups ---------------------------------------------------------------

PODGROUP: dict[str, Any] = {
    "apiVersion": "gangsched.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "uid": "d7c1a3f0-2222-4a4a-9e9e-123456789abc",
        "resourceVersion": "55501",
        "generation": 1,
        "creationTimestamp": CREATED,
        "labels": {"app": "train"},
    },
    "spec": {
        "minMember": 4,
        "totalMember": 5,
        "minResources": {"cpu": "16", "memory": "64Gi", GPU: "4"},
        "scheduleTimeoutSeconds": 120,
        "mode": "NonStrict",
        "onceSatisfied": "Gang",
        "roles": [{"name": "ps", "minMember": 1}, {"name": "worker", "minMember": 3}],
        "gangGroup": ["eval", "ml/train", "data/loader"],
        "topology": {"affinity": [["ps", "worker"]], "antiAffinity": [["worker"]]},
    },
    "status": {"phase": "Pending", "running": 0, "succeeded": 0, "failed": 0},
}


def test_podgroup_every_field() -> None:
    assert podgroup_from(PODGROUP) == GangSpec(
        key="ml/train",
        min_member=4,
        min_resources={"cpu": 16000, "memory": 64 * GI, GPU: 4},
        timeout_seconds=120.0,
        created=CREATED_TS,
        mode=GangMode.NON_STRICT,
        roles=(RoleSpec("ps", 1), RoleSpec("worker", 3)),
        gang_group=("data/loader", "ml/eval", "ml/train"),
        topology=TopologySpec(affinity=(("ps", "worker"),), anti_affinity=(("worker",),)),
        once_satisfied_alone=False,
        invalid_reason="",
    )


def test_podgroup_defaults() -> None:
    pg = {
        "apiVersion": "gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "solo", "namespace": "ml", "creationTimestamp": CREATED},
        "spec": {"minMember": 2},
    }
    assert podgroup_from(pg) == GangSpec(key="ml/solo", min_member=2, created=CREATED_TS)
    spec = podgroup_from(pg)
    assert spec.timeout_seconds is None
    assert spec.mode is GangMode.STRICT
    assert spec.once_satisfied_alone is True
    assert spec.gang_group == ()
    assert spec.roles == ()
    assert spec.topology == TopologySpec()


def test_podgroup_namespace_defaults() -> None:
    pg = patched(PODGROUP, (("metadata", "namespace"), DELETE), (("spec", "gangGroup"), ["a"]))
    spec = podgroup_from(pg)
    assert spec.key == "default/train"
    assert spec.gang_group == ("default/a", "default/train")


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        (DELETE, ()),
        ([], ()),
        (["eval"], ("ml/eval", "ml/train")),  # the gang's own key is always included
        (["train"], ("ml/train",)),  # naming itself is fine
        (["ml/train", "train"], ("ml/train",)),
        (["other/eval", "eval", "eval"], ("ml/eval", "ml/train", "other/eval")),
        (["z", "a"], ("ml/a", "ml/train", "ml/z")),  # sorted
    ],
)
def test_podgroup_gang_group(group: object, expected: tuple[str, ...]) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "gangGroup"), group)))
    assert spec.invalid_reason == ""
    assert spec.gang_group == expected


@pytest.mark.parametrize(
    ("value", "alone"), [("Independent", True), ("Gang", False), (DELETE, True)]
)
def test_podgroup_once_satisfied(value: object, alone: bool) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "onceSatisfied"), value)))
    assert spec.invalid_reason == ""
    assert spec.once_satisfied_alone is alone


@pytest.mark.parametrize(
    ("value", "mode"),
    [("Strict", GangMode.STRICT), ("NonStrict", GangMode.NON_STRICT), (DELETE, GangMode.STRICT)],
)
def test_podgroup_mode(value: object, mode: GangMode) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "mode"), value)))
    assert spec.invalid_reason == ""
    assert spec.mode is mode


@pytest.mark.parametrize(
    ("value", "expected"), [(1, 1.0), (300, 300.0), (86400, 86400.0), (DELETE, None)]
)
def test_podgroup_timeout(value: object, expected: float | None) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "scheduleTimeoutSeconds"), value)))
    assert spec.timeout_seconds == expected


def test_podgroup_roles_and_topology() -> None:
    pg = patched(
        PODGROUP,
        (("spec", "roles"), [{"name": "launcher", "minMember": 0}, {"name": "worker"}]),
        (("spec", "topology"), {"antiAffinity": [["launcher", "worker"], []]}),
    )
    spec = podgroup_from(pg)
    assert spec.invalid_reason == ""
    assert spec.roles == (RoleSpec("launcher", 0), RoleSpec("worker", 0))
    assert spec.topology == TopologySpec(affinity=(), anti_affinity=(("launcher", "worker"), ()))


INVALID_PODGROUP_CASES: dict[str, tuple[tuple[Path, object], str]] = {
    "minMember 0": ((("spec", "minMember"), 0), "spec.minMember"),
    "minMember negative": ((("spec", "minMember"), -1), "spec.minMember"),
    "minMember a string": ((("spec", "minMember"), "3"), "spec.minMember"),
    "minMember a float": ((("spec", "minMember"), 2.5), "spec.minMember"),
    "minMember a boolean": ((("spec", "minMember"), True), "spec.minMember"),
    "minMember null": ((("spec", "minMember"), None), "spec.minMember"),
    "unknown mode": ((("spec", "mode"), "Lenient"), "spec.mode"),
    "lowercase mode": ((("spec", "mode"), "strict"), "spec.mode"),
    "bad quantity": ((("spec", "minResources", "memory"), "12Qi"), "spec.minResources.memory"),
    "fractional gpu": ((("spec", "minResources", GPU), "0.5"), "spec.minResources.nvidia.com/gpu"),
    "negative cpu": ((("spec", "minResources", "cpu"), "-2"), "spec.minResources.cpu"),
    "minResources not an object": ((("spec", "minResources"), "16 cpus"), "spec.minResources"),
    "timeout 0": ((("spec", "scheduleTimeoutSeconds"), 0), "spec.scheduleTimeoutSeconds"),
    "timeout a string": ((("spec", "scheduleTimeoutSeconds"), "60"), "spec.scheduleTimeoutSeconds"),
    "timeout a float": ((("spec", "scheduleTimeoutSeconds"), 1.5), "spec.scheduleTimeoutSeconds"),
    "role minMember negative": (
        (("spec", "roles"), [{"name": "worker", "minMember": -1}]),
        "role",
    ),
    "role minMember a string": (
        (("spec", "roles"), [{"name": "worker", "minMember": "3"}]),
        "role",
    ),
    "roles not a list": ((("spec", "roles"), {"worker": 3}), "spec.roles"),
    "role not an object": ((("spec", "roles"), ["worker"]), "role"),
    "gangGroup not a list": ((("spec", "gangGroup"), "eval"), "spec.gangGroup"),
    "topology not an object": ((("spec", "topology"), [["ps"]]), "spec.topology"),
    "topology affinity not a list": ((("spec", "topology", "affinity"), "ps"), "topology.affinity"),
    "topology affinity group not a list": (
        (("spec", "topology", "antiAffinity"), ["worker"]),
        "antiAffinity",
    ),
    "spec not an object": ((("spec",), ["minMember", 4]), "spec"),
}


@pytest.mark.parametrize("case", INVALID_PODGROUP_CASES.values(), ids=INVALID_PODGROUP_CASES.keys())
def test_invalid_podgroup(case: tuple[tuple[Path, object], str]) -> None:
    change, field = case
    spec = podgroup_from(patched(PODGROUP, change))
    assert field in spec.invalid_reason
    assert spec.key == "ml/train"
    assert spec.created == CREATED_TS


# ---- scheduler-plugins PodGroups ----------------------------------------------------------

XK8S_PODGROUP: dict[str, Any] = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {
        "name": "nginx",
        "namespace": "web",
        "creationTimestamp": CREATED,
        "uid": "8a7b6c5d-3333-4f4f-8e8e-abcdefabcdef",
    },
    "spec": {
        "minMember": 3,
        "minResources": {"cpu": "3", "memory": "3Gi", GPU: "3"},
        "scheduleTimeoutSeconds": 10,
    },
    "status": {"phase": "Pending", "occupiedBy": "web/nginx-job", "scheduled": 0},
}


def test_xk8s_podgroup() -> None:
    assert xk8s_podgroup_from(XK8S_PODGROUP) == GangSpec(
        key="web/nginx",
        min_member=3,
        min_resources={"cpu": 3000, "memory": 3 * GI, GPU: 3},
        timeout_seconds=10.0,
        created=CREATED_TS,
    )


def test_xk8s_podgroup_reads_only_its_own_fields() -> None:
    pg = patched(
        XK8S_PODGROUP,
        (("spec", "mode"), "NonStrict"),
        (("spec", "roles"), [{"name": "w", "minMember": 1}]),
        (("spec", "gangGroup"), ["other"]),
        (("spec", "topology"), {"affinity": [["w"]]}),
        (("spec", "onceSatisfied"), "Gang"),
    )
    assert xk8s_podgroup_from(pg) == xk8s_podgroup_from(XK8S_PODGROUP)
    # Fields it does not read cannot make it invalid either.
    bogus = patched(XK8S_PODGROUP, (("spec", "mode"), "Bogus"), (("spec", "roles"), "x"))
    assert xk8s_podgroup_from(bogus).invalid_reason == ""


def test_xk8s_podgroup_minimal() -> None:
    pg = patched(
        XK8S_PODGROUP,
        (("spec", "minResources"), DELETE),
        (("spec", "scheduleTimeoutSeconds"), DELETE),
    )
    assert xk8s_podgroup_from(pg) == GangSpec("web/nginx", 3, created=CREATED_TS)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ((("spec", "minMember"), 0), "spec.minMember"),
        ((("spec", "minMember"), "3"), "spec.minMember"),
        ((("spec", "minResources", "cpu"), "12Qi"), "spec.minResources.cpu"),
        ((("spec", "scheduleTimeoutSeconds"), -1), "spec.scheduleTimeoutSeconds"),
        ((("spec", "scheduleTimeoutSeconds"), "60"), "spec.scheduleTimeoutSeconds"),
    ],
)
def test_invalid_xk8s_podgroup(change: tuple[Path, object], field: str) -> None:
    spec = xk8s_podgroup_from(patched(XK8S_PODGROUP, change))
    assert field in spec.invalid_reason
    assert spec.key == "web/nginx"


# ---- Volcano PodGroups --------------------------------------------------------------------

VOLCANO_PODGROUP: dict[str, Any] = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {
        "name": "tf-job",
        "namespace": "research",
        "creationTimestamp": CREATED,
        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}],
    },
    "spec": {
        "minMember": 3,
        "minTaskMember": {"worker": 2, "ps": 1},
        "minResources": {"cpu": "3", "memory": "6Gi", GPU: 2},
        "queue": "default",
        "priorityClassName": "high",
    },
    "status": {"phase": "Inqueue"},
}


def test_volcano_podgroup() -> None:
    assert volcano_podgroup_from(VOLCANO_PODGROUP) == GangSpec(
        key="research/tf-job",
        min_member=3,
        min_resources={"cpu": 3000, "memory": 6 * GI, GPU: 2},
        timeout_seconds=None,
        created=CREATED_TS,
        roles=(RoleSpec("ps", 1), RoleSpec("worker", 2)),  # sorted by task name
    )


@pytest.mark.parametrize(
    ("change", "roles"),
    [
        ((("spec", "minTaskMember"), DELETE), ()),
        ((("spec", "minTaskMember"), {}), ()),
        ((("spec", "minTaskMember"), {"worker": 0}), (RoleSpec("worker", 0),)),
    ],
)
def test_volcano_task_minimums(change: tuple[Path, object], roles: tuple[RoleSpec, ...]) -> None:
    spec = volcano_podgroup_from(patched(VOLCANO_PODGROUP, change))
    assert spec.invalid_reason == ""
    assert spec.roles == roles


def test_volcano_podgroup_minimal() -> None:
    pg = {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": 2}}
    assert volcano_podgroup_from(pg) == GangSpec("ns/pg", 2)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ((("spec", "minMember"), 0), "spec.minMember"),
        ((("spec", "minTaskMember"), {"worker": -1}), "role"),
        ((("spec", "minTaskMember"), {"worker": "2"}), "role"),
        ((("spec", "minResources", "memory"), "6Gb"), "spec.minResources.memory"),
    ],
)
def test_invalid_volcano_podgroup(change: tuple[Path, object], field: str) -> None:
    spec = volcano_podgroup_from(patched(VOLCANO_PODGROUP, change))
    assert field in spec.invalid_reason
    assert spec.key == "research/tf-job"
