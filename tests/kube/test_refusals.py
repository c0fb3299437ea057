"""The adapter's side of refused and held-back pods, without an API server: namespace labels
reach the core from the namespace watch, pods gangsched refuses (InvalidPod, Unsupported) and
gangs held back by scheduling gates reach the pods' PodScheduled condition and event and the
PodGroup status with the field named, through the same path as kube-scheduler's reports."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any

import pytest

from gangsched.api.membership import Source
from gangsched.api.podgroup import podgroup_from
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import PodRef
from gangsched.core.scheduler import Scheduler
from gangsched.core.status import GroupStatus
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.service import SchedulerService
from gangsched.kube.write.reporter import Reporter


class RecordingReporter:
    """Stands in for Reporter: what the service asked it to write."""

    def __init__(self) -> None:
        self.unschedulable_calls: list[tuple[str, str, str]] = []
        self.groups: dict[str, dict[str, Any]] = {}
        self.events: list[tuple[str, str, str]] = []
        self.dropped = 0
        self.outbox = Outbox()  # where the upstream PodGroup condition writer queues

    def unschedulable(self, pod: PodRef, reason: str, message: str, gang: str = "") -> None:
        self.unschedulable_calls.append((pod.name, reason, message))

    def forecast(self, gang: str, expected: tuple[str, str] | None) -> None:
        pass

    def group_status(self, key: str, status: GroupStatus, **fields: Any) -> None:
        self.groups[key] = {
            "scheduled": status.scheduled,
            "reason": status.reason,
            "message": status.message,
            "phase": status.phase,
            **fields,
        }

    def forget_group(self, key: str) -> None:
        self.groups.pop(key, None)

    def event(self, pod: PodRef, kind: str, reason: str, action: str, note: str) -> None:
        self.events.append((pod.name, reason, note))

    def forget_pod(self, uid: str) -> None:
        pass


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def service(loop: asyncio.AbstractEventLoop) -> SchedulerService:
    core = Scheduler(CoreConfig(), FakeClock())
    service = SchedulerService(core, object(), object(), RecordingReporter())  # type: ignore[arg-type]
    service.ready.set()  # as after the first lists
    return service


def _namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}


def test_namespace_watch_feeds_namespace_labels(service: SchedulerService) -> None:
    cache = service.core.cache
    service._on_namespace("SYNC", {"items": [_namespace("ml", team="a"), _namespace("web")]})
    assert cache.namespace_labels("ml") == {"kubernetes.io/metadata.name": "ml", "team": "a"}
    assert cache.namespace_labels("web") == {"kubernetes.io/metadata.name": "web"}
    service._on_namespace("MODIFIED", _namespace("ml", team="b"))
    assert cache.namespace_labels("ml") == {"kubernetes.io/metadata.name": "ml", "team": "b"}
    service._on_namespace("ADDED", _namespace("batch"))
    assert cache.namespace_labels("batch") is not None
    service._on_namespace("DELETED", _namespace("web"))
    assert cache.namespace_labels("web") is None
    # A relist drops what disappeared while the watch was down.
    service._on_namespace("SYNC", {"items": [_namespace("ml", team="b")]})
    assert cache.namespace_labels("batch") is None
    assert cache.namespace_labels("ml") == {"kubernetes.io/metadata.name": "ml", "team": "b"}


def test_namespace_reflector_is_part_of_the_initial_sync(service: SchedulerService) -> None:
    names = {r.name for r in service.reflectors}
    assert "namespaces" in names


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"uid-{name}",
            "labels": {"gangsched.io/pod-group": "train"},
        },
        "spec": {"schedulerName": "gangsched", "containers": [{"name": "c"}], **spec},
        "status": {"phase": "Pending"},
    }


def _podgroup(min_member: int) -> dict[str, Any]:
    return {"metadata": {"name": "train", "namespace": "ml"}, "spec": {"minMember": min_member}}


def _schedule(service: SchedulerService) -> None:
    while (decisions := service.core.schedule_one()) is not None:
        service._handle(decisions)


@pytest.mark.parametrize(
    ("spec", "reason", "field"),
    [
        (
            {"hostNetwork": True, "hostUsers": False},
            "Unsupported",
            "spec.hostUsers: a user namespace with hostNetwork needs a node that declares",
        ),
        (
            {"volumes": [{"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1"}}]},
            "Unsupported",
            "spec.volumes[0].awsElasticBlockStore",
        ),
        (
            {"topologySpreadConstraints": [{"maxSkew": 0, "topologyKey": "z"}]},
            "InvalidPod",
            "spec.topologySpreadConstraints[0].maxSkew",
        ),
    ],
    ids=["node declared feature", "in-tree volume", "bad spread constraint"],
)
def test_refused_pod_is_reported_on_the_pod_and_the_podgroup(
    service: SchedulerService, spec: dict[str, Any], reason: str, field: str
) -> None:
    reporter = service.reporter
    assert isinstance(reporter, RecordingReporter)
    service._crd_handler(Source.GANGSCHED, podgroup_from)("ADDED", _podgroup(1))
    service._on_pod("ADDED", _pod("p-0", **spec))
    _schedule(service)
    [(name, got_reason, message)] = reporter.unschedulable_calls
    assert (name, got_reason) == ("p-0", reason)
    assert message.startswith("ml/p-0: ")
    assert field in message
    status = reporter.groups["ml/train"]
    assert status["scheduled"] is False
    assert status["reason"] == reason
    assert field in status["message"]
    assert service.core.cache.node_of("uid-p-0") == ""


def test_gated_gang_is_reported_as_scheduling_gated(service: SchedulerService) -> None:
    reporter = service.reporter
    assert isinstance(reporter, RecordingReporter)
    service._crd_handler(Source.GANGSCHED, podgroup_from)("ADDED", _podgroup(2))
    service._on_pod("ADDED", _pod("p-0"))
    service._on_pod("ADDED", _pod("p-1", schedulingGates=[{"name": "example.com/hold"}]))
    _schedule(service)
    status = reporter.groups["ml/train"]
    assert status["reason"] == "SchedulingGated"
    assert "example.com/hold" in status["message"]
    # The member that is not gated waits with its gang, and says why.
    assert [(n, r) for n, r, _ in reporter.unschedulable_calls] == [("p-0", "SchedulingGated")]


class RecordingOutbox:
    def __init__(self) -> None:
        self.jobs: list[tuple[str, Callable[[], Awaitable[object]], Hashable | None]] = []

    def put(
        self,
        what: str,
        job: Callable[[], Awaitable[object]],
        key: Hashable | None = None,
        *,
        urgent: bool = False,
        first: bool = False,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        self.jobs.append((what, job, key))


class RecordingClient:
    def __init__(self) -> None:
        self.patches: list[tuple[str, dict[str, Any]]] = []
        self.posts: list[tuple[str, dict[str, Any]]] = []

    async def get(self, path: str) -> dict[str, Any]:
        return {"metadata": {"uid": "uid-p", "resourceVersion": "7"}, "spec": {}}

    async def strategic_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.patches.append((path, body))
        return {}

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.posts.append((path, body))
        return {}


def _written_condition(reason: str, message: str) -> tuple[dict[str, Any], dict[str, Any]]:
    client, outbox = RecordingClient(), RecordingOutbox()
    reporter = Reporter(client, outbox, "test")  # type: ignore[arg-type]
    reporter.unschedulable(PodRef("uid-p", "ml", "p"), reason, message)
    for _, job, _ in outbox.jobs:
        asyncio.run(job())  # type: ignore[arg-type]
    [(path, body)] = client.patches
    assert path == "/api/v1/namespaces/ml/pods/p/status"
    # sent only on the unbound pod it was decided for
    assert body["metadata"] == {"uid": "uid-p", "resourceVersion": "7"}
    [(_, event)] = client.posts
    [condition] = body["status"]["conditions"]
    return condition, event


@pytest.mark.parametrize(
    ("reason", "condition_reason"),
    [
        ("Unsupported", "Unschedulable"),
        ("InvalidPod", "Unschedulable"),
        ("Unschedulable", "Unschedulable"),
        ("SchedulingGated", "SchedulingGated"),
    ],
)
def test_pod_condition_and_event(reason: str, condition_reason: str) -> None:
    message = "ml/p: spec.volumes[0].rbd: in-tree volumes are not supported by gangsched"
    condition, event = _written_condition(reason, message)
    assert condition["type"] == "PodScheduled"
    assert condition["status"] == "False"
    assert condition["reason"] == condition_reason
    assert condition["message"] == f"{reason}: {message}"
    assert (event["reason"], event["type"], event["note"]) == (
        "FailedScheduling",
        "Warning",
        message,
    )
