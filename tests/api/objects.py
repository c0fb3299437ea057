"""Kubernetes objects for the reader tests, shaped like what the API server returns
(``kubectl get -o json``): quantities are strings, defaults that admission fills in are present,
unknown fields are left in; and the helpers that vary them."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

from gangsched.core.model import LabelSelector

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


C0: Path = ("spec", "containers", 0)
C0_REQUESTS: Path = (*C0, "resources", "requests")


def resources_spec(**fields: object) -> dict[str, Any]:
    """POD with its spec's resource-related fields replaced."""
    spec = {k: v for k, v in POD["spec"].items() if k != "containers"}
    spec.update(fields)
    return patched(POD, (("spec",), spec))


def ctr(name: str, requests: dict[str, object] | None = None, **extra: object) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "busybox:1.36", **extra}
    if requests is not None:
        c["resources"] = {"requests": requests}
    return c


def sidecar(name: str, requests: dict[str, object]) -> dict[str, Any]:
    return ctr(name, requests, restartPolicy="Always")


# ---- parts of a pod spec: affinity terms, topology spread constraints, ports ---------------
AFFINITY: Path = ("spec", "affinity")

JOB = "training.kubeflow.org/job-name"  # a label POD has, value "train"
ROLE = "gangsched.io/role"  # a label POD has, value "worker"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ML = frozenset({"ml"})
REQUIRED_KEY = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED_KEY = "preferredDuringSchedulingIgnoredDuringExecution"


def with_spec(**fields: object) -> dict[str, Any]:
    return patched(POD, *((("spec", k), v) for k, v in fields.items()))


def pod_term(**extra: object) -> dict[str, Any]:
    return {"topologyKey": HOST, **extra}


APP_SELECTOR = {"matchLabels": {"app": "nccl"}}
APP = LabelSelector((("app", "nccl"),))


def spread_term(**fields: object) -> dict[str, Any]:
    """A topology spread constraint; a field given as DELETE is left out."""
    c = {
        "maxSkew": 1,
        "topologyKey": ZONE,
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": APP_SELECTOR,
        **fields,
    }
    return {k: v for k, v in c.items() if v is not DELETE}


def port_term(container_port: int, **extra: object) -> dict[str, Any]:
    return {"containerPort": container_port, **extra}
