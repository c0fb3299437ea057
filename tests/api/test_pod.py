"""A pod into the core's Pod (gangsched.api.pod), table-driven: identity, status, labels,
host ports, scheduling gates and the gang membership. Pod fields follow kube-scheduler v1.36 and
the API server's defaulting."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.membership import Source
from gangsched.api.pod import pod_from
from gangsched.core.model import ExtendedAsk, HostPort, Placement, Pod, PodPhase, Toleration
from tests.api.objects import (
    CREATED,
    CREATED_TS,
    DELETE,
    GI,
    GPU,
    POD,
    ctr,
    patched,
    port_term,
    resources_spec,
)

POD_TOLERATIONS = (
    Toleration("node.kubernetes.io/not-ready", "Exists", "", "NoExecute"),
    Toleration("node.kubernetes.io/unreachable", "Exists", "", "NoExecute"),
    Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),
)


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
        # as a claim would ask the GPU, should a DeviceClass serve nvidia.com/gpu
        extended=(
            ExtendedAsk(
                GPU, (("container-0-request-2", 1),), (("pytorch", "container-0-request-2"),)
            ),
        ),
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


def test_pod_labels() -> None:
    pod, _ = pod_from(POD)
    assert pod.labels == POD["metadata"]["labels"]
    pod, _ = pod_from(patched(POD, (("metadata", "labels"), DELETE)))
    assert pod.labels == {}


HOST_PORT_CASES: dict[str, tuple[dict[str, Any], tuple[HostPort, ...]]] = {
    "hostPort": (
        {"containers": [ctr("a", ports=[port_term(29500, hostPort=29500)])]},
        (HostPort(29500, "TCP", ""),),
    ),
    "containerPort alone is no host port": (
        {"containers": [ctr("a", ports=[port_term(8080), port_term(9090, hostPort=0)])]},
        (),
    ),
    "protocol and hostIP": (
        {
            "containers": [
                ctr(
                    "a",
                    ports=[
                        port_term(53, hostPort=53, protocol="UDP", hostIP="10.0.0.1"),
                        port_term(38412, hostPort=38412, protocol="SCTP"),
                        port_term(80, hostPort=8080, protocol="TCP", hostIP="0.0.0.0"),
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
                ctr("a", ports=[port_term(1, hostPort=1001)]),
                ctr("b"),
                ctr("c", ports=[port_term(2, hostPort=1002)]),
            ]
        },
        (HostPort(1001), HostPort(1002)),
    ),
    "sidecars count, before the app containers; plain init containers do not": (
        {
            "initContainers": [
                ctr("setup", ports=[port_term(1, hostPort=7001)]),
                ctr("proxy", restartPolicy="Always", ports=[port_term(2, hostPort=7002)]),
            ],
            "containers": [ctr("app", ports=[port_term(3, hostPort=7003)])],
        },
        (HostPort(7002), HostPort(7003)),
    ),
    "hostNetwork: container ports are host ports": (
        {
            "hostNetwork": True,
            "containers": [
                ctr("a", ports=[port_term(29500), port_term(29501, hostPort=29501, protocol="UDP")])
            ],
        },
        (HostPort(29500), HostPort(29501, "UDP")),
    ),
    "hostNetwork false: no defaulting": (
        {"hostNetwork": False, "containers": [ctr("a", ports=[port_term(29500)])]},
        (),
    ),
    "no ports": ({"containers": [ctr("a", ports=[])]}, ()),
}


@pytest.mark.parametrize("case", HOST_PORT_CASES.values(), ids=HOST_PORT_CASES.keys())
def test_pod_host_ports(case: tuple[dict[str, Any], tuple[HostPort, ...]]) -> None:
    spec, expected = case
    pod, _ = pod_from(resources_spec(**spec))
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


# ---- preemption ----------------------------------------------------------------------------
def small_pod(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> Any:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u", "generation": 1},
        "spec": {"schedulerName": "gangsched", "containers": [{"name": "c"}], **(spec or {})},
        "status": status or {"phase": "Pending"},
    }


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, "PreemptLowerPriority"),
        ("PreemptLowerPriority", "PreemptLowerPriority"),
        ("Never", "Never"),
        ("never", "Never"),  # refused by the API server; read safely as Never
        (3, "Never"),
    ],
)
def test_a_pods_preemption_policy(policy: object, expected: str) -> None:
    spec = {} if policy is None else {"preemptionPolicy": policy}
    pod, _ = pod_from(small_pod(spec))
    assert pod.preemption_policy == expected
    assert not pod.invalid_reason


@pytest.mark.parametrize(
    ("deadline", "expected"),
    [(None, None), (3600, 3600.0), (0, None), (-5, None), ("60", None), (1.5, None), (True, None)],
)
def test_a_pods_active_deadline_is_read_as_the_forecast_bound(
    deadline: object, expected: float | None
) -> None:
    """spec.activeDeadlineSeconds: a positive integer, as the API server allows; anything else
    is taken as not set (it can only shorten a start forecast), and never refuses the pod."""
    spec = {} if deadline is None else {"activeDeadlineSeconds": deadline}
    pod, _ = pod_from(small_pod(spec))
    assert pod.active_deadline_seconds == expected
    assert not pod.invalid_reason
