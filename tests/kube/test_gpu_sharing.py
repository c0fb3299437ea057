"""GPU sharing through Koordinator's convention in the adapter: an unreadable record logged by
the pod reader, the record a binding carries for a pod that asked for a share, the label
settings, and the service as the app composes it. What the readers make of nodes, records and
requests: tests/api/test_gpushare.py."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from structlog.testing import capture_logs

from gangsched.api.gpushare import DEVICE_ALLOCATED, GpuLabels, device_allocated, recorded_devices
from gangsched.api.node import node_from
from gangsched.api.pod import pod_from, read_pod
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Binding, PodRef
from gangsched.core.gpu import GpuDemand
from gangsched.core.model import Node, Pod
from gangsched.core.scheduler import Scheduler
from gangsched.kube.io.metrics import Metrics
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.podreader import PodReader
from gangsched.kube.service import SchedulerService
from gangsched.kube.write.binder import Binder
from gangsched.kube.write.gpushare import DeviceRecorder
from gangsched.kube.write.reporter import Reporter
from gangsched.settings import load_settings
from tests.api.test_gpushare import KOORDINATOR_SAMPLE, MIB, RATIO, SHARE, gpu_node, gpu_pod
from tests.support.fakekube import FakeKube

PODS = "/api/v1/namespaces/ml/pods"


# ---- the record on a pod, through the pod reader --------------------------------------------
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
    obj = gpu_pod(SHARE, node="n1", annotations={DEVICE_ALLOCATED: value})
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
    obj = gpu_pod(SHARE, annotations={DEVICE_ALLOCATED: value})
    assert read_pod(obj).device_record_error == ""
    with capture_logs() as logs:
        pod, _ = PodReader().read(obj)
    assert pod.gpu_devices == () and pod.invalid_reason == ""
    assert logs == []


def test_the_pod_reader_reads_the_record_the_binding_wrote() -> None:
    reader = PodReader()
    pending = gpu_pod(SHARE)
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


# ---- the record a binding carries -----------------------------------------------------------
class _Rig:
    def __init__(self, requests: dict[str, str], labels: dict[str, str]) -> None:
        self.pod, _ = pod_from(gpu_pod(requests))
        self.node = node_from(gpu_node(labels, {"nvidia.com/gpu": "2"}))
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
    node = gpu_node(
        labels,
        {"nvidia.com/gpu": "2", "koordinator.sh/gpu-core": "200", RATIO: "200", "pods": "110"},
    )
    kube.seed("/api/v1/nodes", node)
    kube.seed(
        PODS,
        _named("half-a", gpu_pod(SHARE)),
        _named("half-b", gpu_pod(SHARE)),
        _named("sixty", gpu_pod({"koordinator.sh/gpu-core": "60", RATIO: "60"})),
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
        kube.seed(PODS, _named("whole", gpu_pod({"nvidia.com/gpu": "1"})))
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
    kube.seed("/api/v1/nodes", gpu_node({}, {**allocatable, "pods": "110"}))
    zero = gpu_pod({"koordinator.sh/gpu-core": "50", "koordinator.sh/gpu.shared": "0"})
    kube.seed(PODS, _named("zero", zero), _named("half", gpu_pod(SHARE)))
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
