"""GPU sharing through Koordinator's convention, as the readers see it: a node's devices from
the configured labels, the devices recorded in a bound pod
(``scheduling.koordinator.sh/device-allocated``) and the record written for a binding
(gangsched.api.gpushare), and the refusal of GPU requests that cannot be honoured."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched.api.gpushare import DEVICE_ALLOCATED, GpuLabels, device_allocated, recorded_devices
from gangsched.api.node import node_from
from gangsched.api.pod import pod_from
from gangsched.core.gpu import GpuDemand, GpuDevice
from gangsched.core.model import Pod

MIB = 2**20
# What Koordinator's scheduler wrote on a pod given half of device 1 of a 23040 MiB GPU
# (Koordinator's GPU-sharing user guide).
KOORDINATOR_SAMPLE = (
    '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"50",'
    '"koordinator.sh/gpu-memory":"11520Mi","koordinator.sh/gpu-memory-ratio":"50"}}]}'
)


def gpu_node(labels: dict[str, str], allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": labels},
        "status": {
            "allocatable": {"cpu": "16", **(allocatable or {})},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def gpu_pod(
    requests: dict[str, str], *, node: str = "", annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gangsched",
        "containers": [{"name": "c", "resources": {"requests": requests, "limits": requests}}],
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": "p0",
            "namespace": "ml",
            "uid": "u0",
            "generation": 1,
            "annotations": dict(annotations or {}),
        },
        "spec": spec,
        "status": {"phase": "Running" if node else "Pending"},
    }


RATIO = "koordinator.sh/gpu-memory-ratio"
SHARE = {"cpu": "1", "koordinator.sh/gpu-core": "50", RATIO: "50"}


# ---- nodes ---------------------------------------------------------------------------------
def test_a_nodes_devices_carry_the_gpu_feature_discovery_model_and_memory() -> None:
    obj = gpu_node(
        {"nvidia.com/gpu.product": "NVIDIA-A10", "nvidia.com/gpu.memory": "23040"},
        {"nvidia.com/gpu": "2", "koordinator.sh/gpu-core": "200"},
    )
    node = node_from(obj)
    assert node.gpus == (
        GpuDevice(0, "NVIDIA-A10", 23040 * MIB),
        GpuDevice(1, "NVIDIA-A10", 23040 * MIB),
    )


def test_the_model_and_memory_labels_are_the_configured_ones() -> None:
    labels = {
        "nvidia.com/gpu.product": "ignored",
        "example.com/gpu-model": "H100",
        "example.com/gpu-mib": "81559",
    }
    obj = gpu_node(labels, {"nvidia.com/gpu": "1"})
    node = node_from(obj, GpuLabels("example.com/gpu-model", "example.com/gpu-mib"))
    assert node.gpus == (GpuDevice(0, "H100", 81559 * MIB),)
    # Without the configured labels the device has no model and no known memory.
    assert node_from(obj, GpuLabels("example.com/x", "example.com/y")).gpus == (GpuDevice(0),)


@pytest.mark.parametrize("memory", ["", "24Gi", "-1", "lots"])
def test_a_memory_label_that_is_not_mib_leaves_the_memory_unknown(memory: str) -> None:
    obj = gpu_node({"nvidia.com/gpu.memory": memory}, {"nvidia.com/gpu": "1"})
    assert node_from(obj).gpus == (GpuDevice(0),)


def test_a_node_that_only_advertises_shares_has_a_device_per_hundred_percent() -> None:
    obj = gpu_node({}, {"koordinator.sh/gpu-core": "400", "koordinator.sh/gpu-memory-ratio": "400"})
    assert [d.index for d in node_from(obj).gpus or ()] == [0, 1, 2, 3]


def test_a_node_without_gpus_has_no_devices() -> None:
    assert node_from(gpu_node({"nvidia.com/gpu.product": "A10"})).gpus == ()


# ---- the record on a pod -------------------------------------------------------------------
def test_a_bound_pods_recorded_devices_are_read_from_koordinators_annotation() -> None:
    pod, _ = pod_from(gpu_pod(SHARE, node="n1", annotations={DEVICE_ALLOCATED: KOORDINATOR_SAMPLE}))
    assert pod.gpu_devices == (1,)
    assert pod.gpu == GpuDemand(1, 500, shared=True)
    assert pod.invalid_reason == ""


def test_a_record_of_several_devices_and_other_device_kinds() -> None:
    value = json.dumps(
        {
            "gpu": [{"minor": 3, "resources": {}}, {"minor": 0, "resources": {}}],
            "rdma": [{"minor": 0, "resources": {"koordinator.sh/rdma": "1"}}],
        }
    )
    assert recorded_devices(value) == (3, 0)
    assert recorded_devices('{"rdma":[{"minor":0}]}') == ()


# ---- requests that cannot be honoured --------------------------------------------------------
@pytest.mark.parametrize(
    ("requests", "says"),
    [
        ({"koordinator.sh/gpu-core": "150"}, "resources.koordinator.sh/gpu-core: 150 percent"),
        (
            {"nvidia.com/gpu": "1", "koordinator.sh/gpu-core": "50"},
            "nvidia.com/gpu and koordinator.sh/gpu-* ask for GPUs two ways",
        ),
        (
            {"koordinator.sh/gpu-memory": "8Gi"},
            "resources.koordinator.sh/gpu-memory: an absolute GPU memory request",
        ),
        (
            {"koordinator.sh/gpu-core": "150", "koordinator.sh/gpu.shared": "4"},
            "not divisible over koordinator.sh/gpu.shared=4",
        ),
    ],
)
def test_a_gpu_request_that_cannot_be_honoured_refuses_the_pod(
    requests: dict[str, str], says: str
) -> None:
    pod, _ = pod_from(gpu_pod({"cpu": "1", **requests}))
    assert says in pod.invalid_reason
    assert pod.gpu is None


@pytest.mark.parametrize(
    ("requests", "says"),
    [
        # The memory ratio is the field at fault, not gpu-core (which the pod does not set).
        (
            {RATIO: "250"},
            "resources.koordinator.sh/gpu-memory-ratio: 250 percent is more than one GPU and "
            "not a whole number of GPUs",
        ),
        (
            {"koordinator.sh/gpu-core": "50", RATIO: "250"},
            "resources.koordinator.sh/gpu-memory-ratio: 250 percent",
        ),
        (
            {"koordinator.sh/gpu-core": "250", RATIO: "250"},
            "resources.koordinator.sh/gpu-core, resources.koordinator.sh/gpu-memory-ratio: 250",
        ),
        (
            {RATIO: "150", "koordinator.sh/gpu.shared": "4"},
            "resources.koordinator.sh/gpu-memory-ratio: 150 is not divisible over "
            "koordinator.sh/gpu.shared=4",
        ),
        # gpu.shared is set: the message says what is wrong with it, not to set it.
        (
            {"koordinator.sh/gpu-core": "300", "koordinator.sh/gpu.shared": "2"},
            "resources.koordinator.sh/gpu-core: 300 percent over koordinator.sh/gpu.shared=2 "
            "GPUs is 150 percent of each GPU, more than one GPU holds; spread it over at least "
            "3 GPUs",
        ),
    ],
)
def test_a_refused_gpu_share_names_the_field_at_fault_and_the_situation(
    requests: dict[str, str], says: str
) -> None:
    pod, _ = pod_from(gpu_pod({"cpu": "1", **requests}))
    assert says in pod.invalid_reason
    if "koordinator.sh/gpu.shared" in requests:
        assert "set koordinator.sh/gpu.shared" not in pod.invalid_reason
    assert pod.gpu is None


@pytest.mark.parametrize(
    "requests",
    [
        {"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu.shared": "0"},
        {"koordinator.sh/gpu-core": "0", "koordinator.sh/gpu.shared": "0"},
        {"koordinator.sh/gpu.shared": "0"},
    ],
)
def test_a_gpu_share_spread_over_zero_gpus_is_refused(requests: dict[str, str]) -> None:
    pod, _ = pod_from(gpu_pod({"cpu": "1", **requests}))
    assert pod.invalid_reason == (
        "spec.containers[c].resources.requests.koordinator.sh/gpu.shared: must be at least 1 "
        "(the number of GPUs the share is spread over), got 0"
    )
    assert pod.gpu is None and pod.refused


def test_a_zero_gpu_shared_in_the_cores_requests_is_refused() -> None:
    pod = Pod("u", "ml", "p", {"koordinator.sh/gpu-core": 50, "koordinator.sh/gpu.shared": 0})
    assert pod.invalid_reason == (
        "resources.koordinator.sh/gpu.shared: must be at least 1 "
        "(the number of GPUs the share is spread over), got 0"
    )
    assert pod.gpu is None


def test_a_bad_gpu_request_is_reported_with_the_pods_other_problems() -> None:
    obj = gpu_pod({"koordinator.sh/gpu-core": "150"})
    obj["spec"]["priority"] = "high"
    pod, _ = pod_from(obj)
    assert "koordinator.sh/gpu-core" in pod.invalid_reason
    assert "spec.priority" in pod.invalid_reason


def test_whole_gpus_and_shares_of_several_gpus_are_honoured() -> None:
    assert pod_from(gpu_pod({"nvidia.com/gpu": "2"}))[0].gpu == GpuDemand(2, 1000)
    two = pod_from(gpu_pod({"koordinator.sh/gpu-core": "200"}))[0]
    assert two.gpu == GpuDemand(2, 1000, shared=True) and two.invalid_reason == ""


# ---- the record a binding writes ---------------------------------------------------------------
def test_the_record_is_written_as_koordinators_scheduler_writes_it() -> None:
    assert device_allocated((1,), 50, {0: 23040 * MIB, 1: 23040 * MIB}) == KOORDINATOR_SAMPLE
    assert recorded_devices(KOORDINATOR_SAMPLE) == (1,)


def test_the_record_leaves_the_memory_out_when_it_is_unknown() -> None:
    doc = json.loads(device_allocated((0, 2), 100, {}))
    assert doc == {
        "gpu": [
            {
                "minor": m,
                "resources": {
                    "koordinator.sh/gpu-core": "100",
                    "koordinator.sh/gpu-memory-ratio": "100",
                },
            }
            for m in (0, 2)
        ]
    }


# ---- the example -------------------------------------------------------------------------------
def test_the_examples_pods_ask_for_what_their_comments_say() -> None:
    path = Path(__file__).resolve().parents[2] / "examples" / "gpu-sharing.yaml"
    read = {}
    for obj in yaml.safe_load_all(path.read_text()):
        pod, _ = pod_from(obj)
        assert pod.invalid_reason == "" and pod.unsupported == "", pod.name
        read[pod.name] = pod.gpu
    assert read == {
        "infer-a": GpuDemand(1, 500, shared=True),
        "infer-b": GpuDemand(1, 500, shared=True),
        "train": GpuDemand(1, 1000),
        "split": GpuDemand(2, 250, shared=True),
    }
