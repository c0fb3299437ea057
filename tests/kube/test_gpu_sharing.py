"""GPU sharing through Koordinator's convention, as the adapter reads and writes it: a node's
devices from the configured labels, the devices recorded in a bound pod
(``scheduling.koordinator.sh/device-allocated``), the record a binding carries for a pod that
asked for a share, and the refusal of GPU requests that cannot be honoured."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from gangsched.api.gpushare import DEVICE_ALLOCATED, GpuLabels, device_allocated, recorded_devices
from gangsched.api.node import node_from
from gangsched.api.pod import pod_from, read_pod
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Binding, PodRef
from gangsched.core.gpu import GpuDemand, GpuDevice
from gangsched.core.model import Node, Pod
from gangsched.core.scheduler import Scheduler
from gangsched.kube.binder import Binder
from gangsched.kube.gpushare import DeviceRecorder
from gangsched.kube.metrics import Metrics
from gangsched.kube.outbox import Outbox
from gangsched.kube.podreader import PodReader
from gangsched.kube.reporter import Reporter
from gangsched.kube.service import SchedulerService
from gangsched.settings import load_settings
from tests.support.fakekube import FakeKube

MIB = 2**20
# What Koordinator's scheduler wrote on a pod given half of device 1 of a 23040 MiB GPU
# (Koordinator's GPU-sharing user guide).
KOORDINATOR_SAMPLE = (
    '{"gpu":[{"minor":1,"resources":{"koordinator.sh/gpu-core":"50",'
    '"koordinator.sh/gpu-memory":"11520Mi","koordinator.sh/gpu-memory-ratio":"50"}}]}'
)
PODS = "/api/v1/namespaces/ml/pods"


def _node(labels: dict[str, str], allocatable: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "labels": labels},
        "status": {
            "allocatable": {"cpu": "16", **(allocatable or {})},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pod(
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
    obj = _node(
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
    obj = _node(labels, {"nvidia.com/gpu": "1"})
    node = node_from(obj, GpuLabels("example.com/gpu-model", "example.com/gpu-mib"))
    assert node.gpus == (GpuDevice(0, "H100", 81559 * MIB),)
    # Without the configured labels the device has no model and no known memory.
    assert node_from(obj, GpuLabels("example.com/x", "example.com/y")).gpus == (GpuDevice(0),)


@pytest.mark.parametrize("memory", ["", "24Gi", "-1", "lots"])
def test_a_memory_label_that_is_not_mib_leaves_the_memory_unknown(memory: str) -> None:
    obj = _node({"nvidia.com/gpu.memory": memory}, {"nvidia.com/gpu": "1"})
    assert node_from(obj).gpus == (GpuDevice(0),)


def test_a_node_that_only_advertises_shares_has_a_device_per_hundred_percent() -> None:
    obj = _node({}, {"koordinator.sh/gpu-core": "400", "koordinator.sh/gpu-memory-ratio": "400"})
    assert [d.index for d in node_from(obj).gpus or ()] == [0, 1, 2, 3]


def test_a_node_without_gpus_has_no_devices() -> None:
    assert node_from(_node({"nvidia.com/gpu.product": "A10"})).gpus == ()


# ---- the record on a pod -------------------------------------------------------------------
def test_a_bound_pods_recorded_devices_are_read_from_koordinators_annotation() -> None:
    pod, _ = pod_from(_pod(SHARE, node="n1", annotations={DEVICE_ALLOCATED: KOORDINATOR_SAMPLE}))
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


@pytest.mark.parametrize(
    "value",
    [
        "{not json",
        "[1, 2]",
        '{"gpu": {"minor": 0}}',
        '{"gpu": [{"resources": {}}]}',
        '{"gpu": [{"minor": -1}]}',
        '{"gpu": [{"minor": "0"}]}',
        '{"gpu": [{"minor": true}]}',
        '{"gpu": [{"minor": 1}, {"minor": 1}]}',
        '{"gpu": [7]}',
    ],
)
def test_an_unreadable_record_on_a_bound_pod_is_ignored_with_a_log_line(value: str) -> None:
    assert isinstance(recorded_devices(value), str)
    obj = _pod(SHARE, node="n1", annotations={DEVICE_ALLOCATED: value})
    # the reader returns the problem; the adapter's pod reader logs it
    assert read_pod(obj).device_record_error == recorded_devices(value)
    with capture_logs() as logs:
        pod, _ = PodReader().read(obj)
    assert pod.gpu_devices == ()
    assert pod.invalid_reason == "" and pod.gpu == GpuDemand(1, 500, shared=True)
    [line] = [e for e in logs if e["event"] == "ignoring an unreadable GPU device record"]
    assert line["pod"] == "ml/p0" and line["log_level"] == "warning"


@pytest.mark.parametrize("value", ["{not json", KOORDINATOR_SAMPLE])
def test_a_record_on_a_pending_pod_is_ignored(value: str) -> None:
    obj = _pod(SHARE, annotations={DEVICE_ALLOCATED: value})
    assert read_pod(obj).device_record_error == ""
    with capture_logs() as logs:
        pod, _ = PodReader().read(obj)
    assert pod.gpu_devices == () and pod.invalid_reason == ""
    assert logs == []


def test_the_pod_reader_reads_the_record_the_binding_wrote() -> None:
    reader = PodReader()
    pending = _pod(SHARE)
    assert reader.read(pending)[0].gpu_devices == ()
    bound = copy.deepcopy(pending)
    bound["spec"]["nodeName"] = "n1"
    bound["metadata"]["annotations"][DEVICE_ALLOCATED] = KOORDINATOR_SAMPLE
    assert reader.read(bound)[0].gpu_devices == (1,)
    running = copy.deepcopy(bound)
    running["status"]["phase"] = "Running"
    again, _ = reader.read(running)
    assert again.gpu_devices == (1,) and again.gpu == GpuDemand(1, 500, shared=True)
    assert reader.reused == 1


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
    pod, _ = pod_from(_pod({"cpu": "1", **requests}))
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
    pod, _ = pod_from(_pod({"cpu": "1", **requests}))
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
    pod, _ = pod_from(_pod({"cpu": "1", **requests}))
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
    obj = _pod({"koordinator.sh/gpu-core": "150"})
    obj["spec"]["priority"] = "high"
    pod, _ = pod_from(obj)
    assert "koordinator.sh/gpu-core" in pod.invalid_reason
    assert "spec.priority" in pod.invalid_reason


def test_whole_gpus_and_shares_of_several_gpus_are_honoured() -> None:
    assert pod_from(_pod({"nvidia.com/gpu": "2"}))[0].gpu == GpuDemand(2, 1000)
    two = pod_from(_pod({"koordinator.sh/gpu-core": "200"}))[0]
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


class _Rig:
    def __init__(self, requests: dict[str, str], labels: dict[str, str]) -> None:
        self.pod, _ = pod_from(_pod(requests))
        self.node = node_from(_node(labels, {"nvidia.com/gpu": "2"}))
        self.kube = FakeKube()
        self.kube.seed(PODS, {"metadata": {"name": "p0", "uid": "u0"}, "spec": {}})
        recorder = DeviceRecorder(self._pod_of, self._node_of)
        self.binder = Binder(self.kube, lambda uid, why: None, annotations=recorder)

    def _pod_of(self, uid: str) -> Pod | None:
        return self.pod if uid == self.pod.uid else None

    def _node_of(self, name: str) -> Node | None:
        return self.node if name == self.node.name else None

    async def bind(self, devices: tuple[int, ...], uid: str = "u0") -> dict[str, Any]:
        binding = Binding(PodRef(uid, "ml", "p0"), "n1", devices)
        [result] = await self.binder.bind_gang(BindGang("ml/g", (binding,)))
        assert result.ok, result.message
        pod = self.kube.get_object(f"{PODS}/p0")
        assert pod is not None and pod["spec"]["nodeName"] == "n1"
        return pod


async def test_a_share_is_bound_with_its_devices_recorded_in_the_same_write() -> None:
    rig = _Rig(SHARE, {"nvidia.com/gpu.memory": "23040"})
    pod = await rig.bind((1,))
    assert pod["metadata"]["annotations"] == {DEVICE_ALLOCATED: KOORDINATOR_SAMPLE}
    [sent] = rig.kube.sent("create", "/binding$")
    assert sent.body["metadata"]["annotations"] == {DEVICE_ALLOCATED: KOORDINATOR_SAMPLE}
    # What the watch then brings back reads as the devices the binding recorded.
    assert pod_from({**pod, "status": {"phase": "Running"}})[0].gpu_devices == (1,)


async def test_a_share_on_a_node_without_the_memory_label_records_no_memory() -> None:
    rig = _Rig({"koordinator.sh/gpu-core": "30"}, {})
    pod = await rig.bind((0,))
    doc = json.loads(pod["metadata"]["annotations"][DEVICE_ALLOCATED])
    assert doc["gpu"] == [
        {
            "minor": 0,
            "resources": {"koordinator.sh/gpu-core": "30", "koordinator.sh/gpu-memory-ratio": "30"},
        }
    ]


async def test_whole_gpus_are_bound_without_a_record() -> None:
    rig = _Rig({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu.memory": "23040"})
    pod = await rig.bind((0,))
    assert "annotations" not in pod["metadata"]
    [sent] = rig.kube.sent("create", "/binding$")
    assert "annotations" not in sent.body["metadata"]


async def test_a_binding_without_devices_or_an_unknown_pod_carries_no_record() -> None:
    rig = _Rig(SHARE, {})
    assert "annotations" not in (await rig.bind(()))["metadata"]
    recorder = DeviceRecorder(lambda uid: None, lambda name: None)
    assert recorder(Binding(PodRef("gone", "ml", "p9"), "n1", (0,))) == {}


# ---- settings ----------------------------------------------------------------------------------
def test_the_label_settings_default_to_gpu_feature_discovery_and_can_be_changed() -> None:
    settings = load_settings(None, {}, env={})
    assert (settings.gpu_model_label, settings.gpu_memory_label) == (
        "nvidia.com/gpu.product",
        "nvidia.com/gpu.memory",
    )
    env = {"GANGSCHED_GPU_MODEL_LABEL": "example.com/gpu-model"}
    assert load_settings(None, {}, env=env).gpu_model_label == "example.com/gpu-model"


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


# ---- the service as the app composes it ------------------------------------------------------
class _Service:
    """gangsched's service on the fake API server, wired as app.py wires it, with the node
    labels the settings name."""

    def __init__(self, kube: FakeKube, labels: GpuLabels) -> None:
        self.kube = kube
        self.core = Scheduler(CoreConfig(), FakeClock(1_000.0))
        self.outbox = Outbox()
        recorder = DeviceRecorder(self.core.pod, self.core.node)
        binder = Binder(kube, self.core.bind_failed, retry_delay=0.001, annotations=recorder)
        self.metrics = Metrics()
        self.service = SchedulerService(
            self.core,
            kube,
            binder,
            Reporter(kube, self.outbox, "test"),
            self.metrics,
            status_resync_seconds=0,
            gpu_labels=labels,
        )
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> _Service:
        self.outbox.start()
        self.task = asyncio.create_task(self.service.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.task is not None
        self.task.cancel()
        await asyncio.wait([self.task], timeout=10)
        await self.outbox.stop()

    def pod(self, name: str) -> dict[str, Any]:
        obj = self.kube.get_object(f"{PODS}/{name}")
        assert obj is not None
        return dict(obj)

    def minors(self, name: str) -> list[int]:
        value = self.pod(name)["metadata"]["annotations"][DEVICE_ALLOCATED]
        return [g["minor"] for g in json.loads(value)["gpu"]]

    def gauge(self, state: str) -> float | None:
        return self.metrics.registry.get_sample_value("gangsched_gpus", {"state": state})

    async def until(self, what: str, cond: Callable[[], bool]) -> None:
        deadline = asyncio.get_running_loop().time() + 5
        while not cond():
            assert asyncio.get_running_loop().time() < deadline, f"never: {what}"
            await asyncio.sleep(0.002)


def _named(name: str, obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["metadata"].update(name=name, uid=f"uid-{name}")
    return obj


async def test_the_service_places_shares_per_device_records_them_and_counts_them() -> None:
    kube = FakeKube()
    labels = {"example.com/model": "NVIDIA-A10", "example.com/mib": "23040"}
    node = _node(
        labels,
        {"nvidia.com/gpu": "2", "koordinator.sh/gpu-core": "200", RATIO: "200", "pods": "110"},
    )
    kube.seed("/api/v1/nodes", node)
    kube.seed(
        PODS,
        _named("half-a", _pod(SHARE)),
        _named("half-b", _pod(SHARE)),
        _named("sixty", _pod({"koordinator.sh/gpu-core": "60", RATIO: "60"})),
    )
    async with _Service(kube, GpuLabels("example.com/model", "example.com/mib")) as svc:
        await svc.until(
            "three shares bound",
            lambda: all(svc.pod(n)["spec"].get("nodeName") for n in ("half-a", "half-b", "sixty")),
        )
        [minor] = svc.minors("half-a")
        assert svc.minors("half-b") == [minor] and svc.minors("sixty") == [1 - minor]
        record = svc.pod("half-a")["metadata"]["annotations"][DEVICE_ALLOCATED]
        assert record == device_allocated((minor,), 50, {minor: 23040 * MIB})
        assert svc.core.node("n1") is not None
        assert [d.model for d in svc.core.node("n1").gpus or ()] == ["NVIDIA-A10"] * 2
        # Two devices; one full, 60% of the other: 1.6 GPUs allocated, not 2 nor 0.
        assert (svc.gauge("total"), svc.gauge("allocated")) == (2.0, 1.6)
        # A whole GPU: both devices hold shares, so none is free although 40% is.
        kube.seed(PODS, _named("whole", _pod({"nvidia.com/gpu": "1"})))
        await svc.until(
            "the whole-GPU pod refused",
            lambda: any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in (svc.pod("whole").get("status") or {}).get("conditions") or []
            ),
        )
        assert not svc.pod("whole")["spec"].get("nodeName")
        assert not svc.pod("whole")["metadata"].get("annotations")


async def test_the_service_never_binds_a_share_spread_over_zero_gpus() -> None:
    kube = FakeKube()
    allocatable = {"nvidia.com/gpu": "2", "koordinator.sh/gpu-core": "200", RATIO: "200"}
    kube.seed("/api/v1/nodes", _node({}, {**allocatable, "pods": "110"}))
    zero = _pod({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu.shared": "0"})
    kube.seed(PODS, _named("zero", zero), _named("half", _pod(SHARE)))
    async with _Service(kube, GpuLabels()) as svc:
        await svc.until(
            "the valid share bound", lambda: bool(svc.pod("half")["spec"].get("nodeName"))
        )

        def refused() -> str:
            for c in (svc.pod("zero").get("status") or {}).get("conditions") or []:
                if c.get("type") == "PodScheduled" and c.get("status") == "False":
                    return str(c.get("message", ""))
            return ""

        await svc.until("the zero share refused", lambda: bool(refused()))
        assert "koordinator.sh/gpu.shared: must be at least 1" in refused()
        assert not svc.pod("zero")["spec"].get("nodeName")
