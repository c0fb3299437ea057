"""A pod's effective requests (gangsched.api.requests), table-driven: containers, init
containers and sidecars, overhead, pod-level requests, and in-place resizes, as kube-scheduler
v1.36 counts them."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.pod import pod_from
from tests.api.objects import GI, GPU, MI, ctr, patched, resources_spec, sidecar

REQUEST_CASES: dict[str, tuple[dict[str, Any], dict[str, int]]] = {
    "one container": (
        {"containers": [ctr("app", {"cpu": "500m", "memory": "1Gi"})]},
        {"cpu": 500, "memory": GI, "pods": 1},
    ),
    "containers are summed": (
        {
            "containers": [
                ctr("app", {"cpu": "250m", "memory": "128Mi"}),
                ctr("proxy", {"cpu": "1.5", "memory": "512M"}),
            ]
        },
        {"cpu": 1750, "memory": 128 * MI + 512 * 10**6, "pods": 1},
    ),
    "no resources at all": (
        {"containers": [ctr("app"), {"name": "b", "image": "x", "resources": {}}]},
        {"pods": 1},
    ),
    "no containers field": ({}, {"pods": 1}),
    "zero requests are dropped": (
        {"containers": [ctr("app", {"cpu": "0", "memory": "0", GPU: "0"})]},
        {"pods": 1},
    ),
    "integer quantities": (
        {"containers": [ctr("app", {"cpu": 2, "memory": 1024, GPU: 2})]},
        {"cpu": 2000, "memory": 1024, GPU: 2, "pods": 1},
    ),
    "sub-milli cpu rounds up": (
        {"containers": [ctr("app", {"cpu": "0.0001", "memory": "100m"})]},
        {"cpu": 1, "memory": 1, "pods": 1},
    ),
    "gpu written in milli-units": (
        {"containers": [ctr("app", {GPU: "2000m"})]},
        {GPU: 2, "pods": 1},
    ),
    "storage and hugepages": (
        {
            "containers": [
                ctr("app", {"ephemeral-storage": "10Gi", "hugepages-2Mi": "100Mi", "memory": "1Gi"})
            ]
        },
        {"ephemeral-storage": 10 * GI, "hugepages-2Mi": 100 * MI, "memory": GI, "pods": 1},
    ),
    "init container larger than the app": (
        {
            "initContainers": [ctr("setup", {"cpu": "2", "memory": "100Mi"})],
            "containers": [ctr("app", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 2000, "memory": GI, "pods": 1},
    ),
    "init containers take the max, not the sum": (
        {
            "initContainers": [ctr("a", {"cpu": "2"}), ctr("b", {"cpu": "3", GPU: "1"})],
            "containers": [ctr("app", {"cpu": "1"})],
        },
        {"cpu": 3000, GPU: 1, "pods": 1},
    ),
    "sidecar adds to the app containers": (
        {
            "initContainers": [sidecar("istio-proxy", {"cpu": "500m", "memory": "128Mi"})],
            "containers": [ctr("app", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 1500, "memory": GI + 128 * MI, "pods": 1},
    ),
    "init step after a sidecar includes the sidecar": (
        {
            "initContainers": [
                sidecar("log-shipper", {"cpu": "500m"}),
                ctr("migrate", {"cpu": "2"}),
            ],
            "containers": [ctr("app", {"cpu": "1"})],
        },
        {"cpu": 2500, "pods": 1},
    ),
    "init step before a sidecar does not include it": (
        {
            "initContainers": [
                ctr("migrate", {"cpu": "2"}),
                sidecar("log-shipper", {"cpu": "500m"}),
            ],
            "containers": [ctr("app", {"cpu": "1"})],
        },
        {"cpu": 2000, "pods": 1},
    ),
    "restartPolicy other than Always is a plain init container": (
        {
            "initContainers": [ctr("setup", {"cpu": "500m"}, restartPolicy="OnFailure")],
            "containers": [ctr("app", {"cpu": "1"})],
        },
        {"cpu": 1000, "pods": 1},
    ),
    "overhead is added": (
        {
            "overhead": {"cpu": "250m", "memory": "120Mi"},
            "containers": [ctr("app", {"cpu": "1", "memory": "1Gi"})],
        },
        {"cpu": 1250, "memory": GI + 120 * MI, "pods": 1},
    ),
    "pod-level requests replace the container figures": (
        {
            "resources": {"requests": {"cpu": "4", "memory": "8Gi"}},
            "containers": [ctr("app", {"cpu": "1", "memory": "1Gi", GPU: "1"})],
        },
        {"cpu": 4000, "memory": 8 * GI, GPU: 1, "pods": 1},
    ),
    "pod-level cpu only keeps container memory": (
        {
            "resources": {"requests": {"cpu": "500m"}},
            "containers": [ctr("a", {"cpu": "1", "memory": "1Gi"}), ctr("b", {"memory": "1Gi"})],
        },
        {"cpu": 500, "memory": 2 * GI, "pods": 1},
    ),
    "pod-level gpu and ephemeral-storage are ignored": (
        {
            "resources": {"requests": {"cpu": "2", GPU: "4", "ephemeral-storage": "100Gi"}},
            "containers": [ctr("app", {"cpu": "1", GPU: "1", "ephemeral-storage": "1Gi"})],
        },
        {"cpu": 2000, GPU: 1, "ephemeral-storage": GI, "pods": 1},
    ),
    "pod-level with only ignored resources": (
        {
            "resources": {"requests": {GPU: "4"}, "limits": {GPU: "4"}},
            "containers": [ctr("app", {"cpu": "1", GPU: "1"})],
        },
        {"cpu": 1000, GPU: 1, "pods": 1},
    ),
    "pod-level limits alone change nothing": (
        {
            "resources": {"limits": {"cpu": "8", "memory": "16Gi"}},
            "containers": [ctr("app", {"cpu": "1"})],
        },
        {"cpu": 1000, "pods": 1},
    ),
    "pod-level requests plus overhead": (
        {
            "resources": {"requests": {"cpu": "2", "memory": "2Gi"}},
            "overhead": {"cpu": "100m", "memory": "64Mi"},
            "containers": [ctr("app", {"cpu": "1"})],
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
    pod, _ = pod_from(resources_spec(**spec))
    assert pod.invalid_reason == ""
    assert pod.requests == expected


def test_pod_level_hugepages_are_honoured() -> None:
    """Pod-level hugepages-<size> requests are accepted by Kubernetes (PodLevelResources,
    v1.34+) and the translator honours them like cpu and memory."""
    pod, _ = pod_from(
        resources_spec(
            resources={"requests": {"hugepages-2Mi": "1Gi"}},
            containers=[ctr("app", {"hugepages-2Mi": "100Mi", "memory": "1Gi"})],
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
        {"containers": [ctr("app", {"cpu": "1"})]},
        {"phase": "Running"},
        {"cpu": 1000, "pods": 1},
    ),
    "status without resources: the spec": (
        {"containers": [ctr("app", {"cpu": "1"})]},
        _status(("app", None, {"cpu": "4"})),
        {"cpu": 1000, "pods": 1},
    ),
    "resize up in progress: the larger actuated": (
        {"containers": [ctr("app", {"cpu": "1", "memory": "1Gi"})]},
        _status(("app", {"cpu": "2", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})),
        {"cpu": 2000, "memory": GI, "pods": 1},
    ),
    "resize up requested: the larger spec": (
        {"containers": [ctr("app", {"cpu": "3"})]},
        _status(("app", {"cpu": "1"}, {"cpu": "1"}), conditions=[DEFERRED]),
        {"cpu": 3000, "pods": 1},
    ),
    "resize down not yet actuated: the larger allocated": (
        {"containers": [ctr("app", {"memory": "1Gi"})]},
        _status(("app", {"memory": "1Gi"}, {"memory": "4Gi"})),
        {"memory": 4 * GI, "pods": 1},
    ),
    "infeasible resize: the spec is left out": (
        {"containers": [ctr("app", {"cpu": "8"})]},
        _status(("app", {"cpu": "2"}, {"cpu": "1"}), conditions=[INFEASIBLE]),
        {"cpu": 2000, "pods": 1},
    ),
    "per container, by name": (
        {"containers": [ctr("a", {"cpu": "1"}), ctr("b", {"cpu": "1"})]},
        _status(("b", {"cpu": "3"}, None), ("other", {"cpu": "9"}, None)),
        {"cpu": 4000, "pods": 1},
    ),
    "sidecar resized; plain init container status ignored": (
        {
            "initContainers": [
                ctr("setup", {"cpu": "500m"}),
                sidecar("proxy", {"cpu": "100m"}),
            ],
            "containers": [ctr("app", {"cpu": "1"})],
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
            "containers": [ctr("app", {"cpu": "1"})],
        },
        {
            "phase": "Running",
            "resources": {"requests": {"cpu": "3", "memory": "1Gi"}},
            "allocatedResources": {"cpu": "2", "memory": "2Gi"},
        },
        {"cpu": 3000, "memory": 2 * GI, "pods": 1},
    ),
    "unreadable status quantities: the spec": (
        {"containers": [ctr("app", {"cpu": "1"})]},
        _status(("app", {"cpu": "lots"}, None)),
        {"cpu": 1000, "pods": 1},
    ),
    "unreadable container statuses: the spec": (
        {"containers": [ctr("app", {"cpu": "1"})]},
        {"phase": "Running", "containerStatuses": "app"},
        {"cpu": 1000, "pods": 1},
    ),
}


@pytest.mark.parametrize("case", RESIZE_CASES.values(), ids=RESIZE_CASES.keys())
def test_pod_requests_during_in_place_resize(
    case: tuple[dict[str, Any], dict[str, Any], dict[str, int]],
) -> None:
    spec, status, expected = case
    obj = patched(
        resources_spec(**spec), (("spec", "nodeName"), "gpu-a100-0"), (("status",), status)
    )
    pod, _ = pod_from(obj)
    assert pod.invalid_reason == ""
    assert pod.requests == expected
