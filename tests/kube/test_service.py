"""The scheduler service against the fake API server, with the real core on a fake clock: what
it waits for before it schedules, what it sends (bindings, events, pod conditions, PodGroup
status) and what it refuses to send (anything after it lost the lease), in milliseconds.

Handler-level behaviour (status convergence by relist and resync, per-gang state going away,
slices) is in tests/kube/test_status_writes.py and tests/kube/test_relist_slices.py; here the
service runs whole: its reflectors list and watch the fake, its loop schedules, its binder and
reporter write through the fake."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.forecast import Forecast
from gangsched.core.scheduler import Scheduler
from gangsched.kube import service as service_module
from gangsched.kube.io.firstlists import first_pages
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.service import SchedulerService
from gangsched.kube.write.binder import Binder
from gangsched.kube.write.reporter import Reporter
from tests.support.fakekube import APPLY, FakeKube, Request

NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/ml/pods"
PODGROUPS = "/apis/gangsched.io/v1alpha1/namespaces/ml/podgroups"
XK8S_PODGROUPS = "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ml/podgroups"
EVENTS = "/apis/events.k8s.io/v1/namespaces/ml/events"
GANG_LABEL = "gangsched.io/pod-group"
XK8S_LABEL = "scheduling.x-k8s.io/pod-group"


async def until(what: str, cond: Callable[[], bool], timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0.001)


def node(name: str, gpus: int = 8) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "allocatable": {
                "cpu": "64",
                "memory": "512Gi",
                "nvidia.com/gpu": str(gpus),
                "pods": "110",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    gpus: int = 1,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {
            "schedulerName": "gangsched",
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Pending"},
    }


def podgroup(name: str, min_member: int, api: str = "gangsched.io/v1alpha1") -> dict[str, Any]:
    return {
        "apiVersion": api,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"minMember": min_member},
    }


def members(name: str, n: int, label: str = GANG_LABEL, **kw: Any) -> list[dict[str, Any]]:
    return [pod(f"{name}-{i}", {label: name}, **kw) for i in range(n)]


class Rig:
    """A service as the app composes it, on the fake: a real outbox, reporter and binder."""

    def __init__(self, kube: FakeKube, **service: Any) -> None:
        self.kube = kube
        self.leading = True
        self.fence_checks = 0
        self.clock = FakeClock(1_000.0)
        self.core = Scheduler(CoreConfig(), self.clock)
        self.outbox = Outbox()
        self.reporter = Reporter(kube, self.outbox, "test")
        self.binder = Binder(
            kube,
            self.core.bind_failed,
            retry_delay=0.001,
            volumes=self.core.volumes,
            fence=self.fence,
        )
        self.service = SchedulerService(
            self.core,
            kube,
            self.binder,
            self.reporter,
            fence=self.fence,
            status_resync_seconds=0,
            **service,
        )
        self.task: asyncio.Task[None] | None = None

    def fence(self) -> bool:
        self.fence_checks += 1
        return self.leading

    def start(self) -> None:
        self.outbox.start()
        self.task = asyncio.create_task(self.service.run())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            done, _ = await asyncio.wait([self.task], timeout=service_module.BIND_GRACE + 1)
            assert done, "the service did not stop"
        await self.outbox.stop()

    # ---- what the fake saw ---------------------------------------------------------------
    def bindings(self) -> list[str]:
        """The pods whose binding reached the API server, in order."""
        return [r.path.split("/")[-2] for r in self.kube.sent("create", "/binding$")]

    def node_of(self, name: str) -> str:
        obj = self.kube.get_object(f"{PODS}/{name}") or {}
        return str((obj.get("spec") or {}).get("nodeName") or "")

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [o for o in self.kube.list_objects(EVENTS) if o.get("reason") == reason]

    def event_pods(self, reason: str) -> set[str]:
        return {e["regarding"]["name"] for e in self.events(reason)}

    def condition(self, name: str) -> dict[str, Any] | None:
        obj = self.kube.get_object(f"{PODS}/{name}") or {}
        conds = (obj.get("status") or {}).get("conditions") or []
        return next((c for c in conds if c.get("type") == "PodScheduled"), None)

    def status_writes(self, name: str) -> list[Request]:
        return [
            r
            for r in self.kube.sent("patch", f"/podgroups/{name}/status$")
            if r.content_type == APPLY
        ]

    def status(self, name: str) -> dict[str, Any]:
        obj = self.kube.get_object(f"{PODGROUPS}/{name}") or {}
        return dict(obj.get("status") or {})


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = Rig(FakeKube())
    try:
        yield r
    finally:
        await r.stop()


# ---- the start ---------------------------------------------------------------------------


async def test_scheduling_starts_only_after_every_first_list(rig: Rig) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODGROUPS, podgroup("train", 2))
    kube.seed(PODS, *members("train", 2))
    gate = kube.hold("list", "/csinodes$", times=1)  # one kind's first list is slow
    rig.start()
    await until(
        "the lists but one", lambda: sum(not r.synced.is_set() for r in rig.service.reflectors) == 1
    )
    assert rig.core.group_size("ml/train") == 2, "the service has the gang"
    assert not rig.service.ready.is_set()
    assert rig.bindings() == [] and rig.status_writes("train") == []
    gate.set()
    await until("ready", rig.service.ready.is_set)
    await until("the gang bound", lambda: len(rig.bindings()) == 2)
    assert sorted(rig.bindings()) == ["train-0", "train-1"]


async def test_the_first_lists_are_the_ones_the_start_asks_for_early(rig: Rig) -> None:
    """The start sends each first page before the scheduler is loaded (boot.py); the
    reflectors take those answers only if they ask with the very same path and parameters."""
    rig.kube.seed(NODES, node("n0"))
    rig.start()
    await until("ready", rig.service.ready.is_set)
    lists = [(r.path, r.params) for r in rig.kube.sent("list")]
    for path, params in first_pages():
        assert (path, params) in lists, f"{path}: asked for with other parameters"


async def test_quiet_once_the_backlog_is_decided_and_bound(rig: Rig) -> None:
    """What the PodGroup controller's start waits for (app.py): not before the caches are in,
    nor while a binding is under way."""
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODGROUPS, podgroup("train", 2))
    kube.seed(PODS, *members("train", 2))
    gate = kube.hold("create", "/binding$", times=2)
    assert not rig.service.quiet()
    rig.start()
    await until("the bindings sent", lambda: len(kube.sent("create", "/binding$")) == 2)
    assert not rig.service.quiet(), "bindings under way"
    gate.set()
    await until("quiet", rig.service.quiet)
    assert sorted(rig.bindings()) == ["train-0", "train-1"]


async def test_the_first_pass_is_over_once_the_lists_are_decided_bindings_or_not(
    rig: Rig,
) -> None:
    """What the watches wait for (app.py: KubeClient.hold_watches): not before the caches
    are in; once the loop decided what the lists gave it, even with its bindings under way."""
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODGROUPS, podgroup("train", 2))
    kube.seed(PODS, *members("train", 2))
    bindings = kube.hold("create", "/binding$", times=2)
    lists = kube.hold("list", "/csinodes$", times=1)
    first = asyncio.create_task(rig.service.first_pass())
    rig.start()
    await asyncio.sleep(0.1)
    assert not first.done(), "a first list is still out"
    lists.set()
    await asyncio.wait_for(first, 5)
    assert rig.service.ready.is_set() and not rig.service.quiet(), "bindings under way"
    bindings.set()
    await until("the gang bound", lambda: len(rig.bindings()) == 2)


async def test_a_gang_waits_for_its_members_then_binds_whole(rig: Rig) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"), node("n1"))
    kube.seed(PODGROUPS, podgroup("train", 3))
    pods = members("train", 3, gpus=4)
    kube.seed(PODS, *pods[:2])
    rig.start()
    await until(
        "the status to say it waits",
        lambda: rig.status("train").get("message") == "2 of 3 members exist; waiting for more pods",
    )
    assert rig.bindings() == []
    kube.seed(PODS, pods[2])
    await until("the gang bound", lambda: len(rig.bindings()) == 3)
    for req in kube.sent("create", "/binding$"):
        name = req.body["metadata"]["name"]
        uid = (kube.get_object(f"{PODS}/{name}") or {})["metadata"]["uid"]
        assert req.body["metadata"]["uid"] == uid, "the pod's UID is the precondition"
    assert sorted(rig.node_of(p["metadata"]["name"]) for p in pods) == ["n0", "n0", "n1"]
    await until("every member's Scheduled event", lambda: len(rig.event_pods("Scheduled")) == 3)
    await until("the status to say it", lambda: rig.status("train").get("phase") == "Scheduled")
    assert rig.status("train")["scheduled"] == 3


# ---- start forecasts -------------------------------------------------------------------


async def _next_waits_for_first(rig: Rig) -> dict[str, Any]:
    """ml/first runs on the one node (declared 1h); ml/next, which needs the node, waits.
    Returns first's PodGroup."""
    kube = rig.kube
    kube.seed(NODES, node("n0", gpus=8))
    first = podgroup("first", 1)
    first["spec"]["expectedRuntimeSeconds"] = 3600
    kube.seed(PODGROUPS, first, podgroup("next", 1))
    kube.seed(PODS, *members("first", 1, gpus=8))
    rig.start()
    await until("first bound", lambda: rig.bindings() == ["first-0"])
    await until("first running", lambda: rig.core.view("ml/first").bound == 1)  # type: ignore[union-attr]
    kube.seed(PODS, *members("next", 1, gpus=8))
    await until("next refused", lambda: rig.status("next").get("phase") == "Scheduling")
    return first


async def test_a_waiting_gang_says_when_it_is_expected_to_start(rig: Rig) -> None:
    """ml/first runs (declared 1h); ml/next, which needs its node, is expected when it ends:
    in expectedStart, expectedStartBasis and the Scheduled condition's message. Once it is
    bound, the forecast is gone from its status."""
    kube = rig.kube
    await _next_waits_for_first(rig)
    await rig.service.forecast_round()
    expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_000.0 + 3600))
    await until("the forecast written", lambda: "expectedStart" in rig.status("next"))
    st = rig.status("next")
    assert st["expectedStart"] == expected
    assert st["expectedStartBasis"] == "after ml/first ends (declared run time 1h0m)"
    cond = next(c for c in st["conditions"] if c["type"] == "Scheduled")
    assert cond["message"].endswith(
        f"; expected to start at {expected}, after ml/first ends (declared run time 1h0m)"
    )
    await until(
        "the pod's condition says it too",
        lambda: (
            (rig.condition("next-0") or {})
            .get("message", "")
            .endswith(
                f"; expected to start at {expected}, after ml/first ends (declared run time 1h0m)"
            )
        ),
    )
    assert rig.service.metrics.forecasts.labels("known")._value.get() == 1
    # nothing changed: no new round of forecasts
    assert await rig.service.forecast_round() == 0.0
    kube.remove(f"{PODS}/first-0")
    rig.clock.advance(60)  # past its backoff
    rig.service.poke()
    await until("next bound", lambda: "next-0" in rig.bindings())
    await rig.service.forecast_round()
    await until("the forecast gone", lambda: "expectedStart" not in rig.status("next"))
    assert "expectedStartBasis" not in rig.status("next")


async def test_a_round_of_forecasts_runs_with_the_collector_paused(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round's twin is a copy of the cluster state: the cyclic collector is paused while
    the twin is built and run (every step of the round), and runs again after it."""
    await _next_waits_for_first(rig)
    seen: list[bool] = []
    steps = Forecast.steps

    def recording(self: Any) -> Any:
        for step in steps(self):
            seen.append(gc.isenabled())
            yield step

    monkeypatch.setattr(Forecast, "steps", recording)
    assert gc.isenabled()
    await rig.service.forecast_round()
    assert seen and not any(seen)
    assert gc.isenabled()


async def test_a_forecast_that_moved_by_little_is_not_written_again(rig: Rig) -> None:
    """ml/first declares 1h, then 1h0m30s: ml/next's estimate moved by 30 s of an hour's
    wait, and its status and pod stay as written; at 2h it is written anew."""
    kube = rig.kube
    first = await _next_waits_for_first(rig)
    await rig.service.forecast_round()
    expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_000.0 + 3600))
    await until("the forecast written", lambda: rig.status("next").get("expectedStart") == expected)

    for runtime, written in ((3630, expected), (7200, None)):
        first["spec"]["expectedRuntimeSeconds"] = runtime
        kube.seed(PODGROUPS, first)
        await until(
            f"first's runtime {runtime}",
            lambda r=runtime: rig.core.gangs["ml/first"].spec.expected_runtime_seconds == r,  # type: ignore[misc,union-attr]
        )
        await rig.service.forecast_round()
        fresh = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_000.0 + runtime))
        if written is None:
            await until(
                "the new forecast", lambda f=fresh: rig.status("next")["expectedStart"] == f
            )  # type: ignore[misc]
        else:
            await asyncio.sleep(0.2)  # what a write would have taken
            assert rig.status("next")["expectedStart"] == written
            assert expected in (rig.condition("next-0") or {}).get("message", "")


async def test_the_pods_of_a_gang_of_another_convention_say_when_it_is_expected_to_start(
    rig: Rig,
) -> None:
    """A scheduler-plugins gang has no status of gangsched's to carry its forecast: its pods'
    PodScheduled condition says it, after the reason, and says a new one when it changes.
    The FailedScheduling event does not (events are history, counted by their message)."""
    kube = rig.kube
    kube.seed(NODES, node("n0", gpus=8))
    first = podgroup("first", 1)
    first["spec"]["expectedRuntimeSeconds"] = 3600
    kube.seed(PODGROUPS, first)
    kube.seed(XK8S_PODGROUPS, podgroup("next", 2, api="scheduling.x-k8s.io/v1alpha1"))
    kube.seed(PODS, *members("first", 1, gpus=8))
    rig.start()
    await until("first bound", lambda: rig.bindings() == ["first-0"])
    await until("first running", lambda: rig.core.view("ml/first").bound == 1)  # type: ignore[union-attr]
    kube.seed(PODS, *members("next", 2, gpus=4, label=XK8S_LABEL))
    await until("next refused", lambda: rig.condition("next-1") is not None)
    await rig.service.forecast_round()
    expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_000.0 + 3600))
    said = f"; expected to start at {expected}, after ml/first ends (declared run time 1h0m)"
    for name in ("next-0", "next-1"):
        await until(
            f"{name}'s forecast",
            lambda n=name: ((rig.condition(n) or {}).get("message") or "").endswith(said),  # type: ignore[misc]
        )
        cond = rig.condition(name) or {}
        assert cond["reason"] == "Unschedulable"
        assert cond["message"].startswith("Unschedulable: ")
    assert all("expected" not in e["note"] for e in rig.events("FailedScheduling"))
    assert kube.sent("patch", "scheduling.x-k8s.io") == [], "another project's status is not ours"

    # first declares an hour more: the pods say the new time
    first["spec"]["expectedRuntimeSeconds"] = 7200
    kube.seed(PODGROUPS, first)
    await until(
        "first's new spec",
        lambda: rig.core.gangs["ml/first"].spec.expected_runtime_seconds == 7200,
    )
    await rig.service.forecast_round()
    later = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_000.0 + 7200))
    await until(
        "the new forecast",
        lambda: f"expected to start at {later}," in (rig.condition("next-0") or {})["message"],
    )

    kube.remove(f"{PODS}/first-0")
    rig.clock.advance(60)  # past its backoff
    rig.service.poke()
    await until("next bound", lambda: sorted(rig.bindings()) == ["first-0", "next-0", "next-1"])


JOBS = "/apis/batch/v1/namespaces/ml/jobs"


def job(name: str, uid: str, deadline: int | None, started: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {}}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": uid},
        "spec": spec,
        "status": {"startTime": started} if started else {},
    }


async def test_a_jobs_active_deadline_bounds_when_its_pods_end() -> None:
    """A pod whose Job declares activeDeadlineSeconds ends, at the latest, that long after
    the Job started: the gang waiting for its node is expected then. The Job may come after
    its pods, and its deadline may change; the scheduler does not wait for Jobs to schedule."""
    rig = Rig(FakeKube(), job_deadlines=True)
    try:
        kube = rig.kube
        kube.seed(NODES, node("n0", gpus=8))
        kube.seed(PODGROUPS, podgroup("next", 1))
        batch = pod("batch-0", gpus=8)
        batch["metadata"]["ownerReferences"] = [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "batch", "uid": "job-1",
             "controller": True}
        ]  # fmt: skip
        kube.seed(PODS, batch)
        rig.start()
        await until("batch bound", lambda: rig.bindings() == ["batch-0"])
        kube.seed(PODS, *members("next", 1, gpus=8))
        await until("next refused", lambda: rig.status("next").get("phase") == "Scheduling")
        await rig.service.forecast_round()
        await until(
            "no end known",
            lambda: "waits for" in rig.status("next").get("expectedStartBasis", ""),
        )
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_000.0))
        kube.seed(JOBS, job("batch", "job-1", 600, started))
        await until(
            "the deadline read",
            lambda: any(p.job_deadline == 1_600.0 for p in rig.core.cache.pods.values()),
        )
        await rig.service.forecast_round()
        expected = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_600.0))
        await until("the forecast", lambda: rig.status("next").get("expectedStart") == expected)
        assert rig.status("next")["expectedStartBasis"] == (
            "after ml/batch-0 ends (its Job's activeDeadlineSeconds)"
        )
    finally:
        await rig.stop()


async def test_the_scheduler_does_not_wait_for_jobs_it_may_not_list() -> None:
    rig = Rig(FakeKube(), job_deadlines=True)
    try:
        rig.kube.fail("list", "/apis/batch/v1/jobs", 403, times=1000)
        rig.kube.seed(NODES, node("n0", gpus=8))
        rig.kube.seed(PODGROUPS, podgroup("a", 1))
        rig.kube.seed(PODS, *members("a", 1, gpus=8))
        rig.start()
        await until("a bound", lambda: rig.bindings() == ["a-0"])
    finally:
        await rig.stop()


# ---- shutdown ----------------------------------------------------------------------------


async def _idle(rig: Rig) -> None:
    """Until the scheduling loop waits for work: it clears its wake-up just before it waits,
    with no await in between."""
    rig.service.poke()
    await until("the loop to wait for work", lambda: not rig.service._wake.is_set())


async def test_shutdown_ends_though_a_wake_up_comes_with_it(rig: Rig) -> None:
    """A watch event and the cancellation in the same turn of the loop: the scheduling loop
    must not take the wake-up and go on waiting (asyncio.wait_for on Python 3.11 did)."""
    rig.kube.seed(NODES, node("n0"))
    rig.start()
    await until("ready", rig.service.ready.is_set)
    await _idle(rig)
    assert rig.task is not None
    rig.service.poke()
    rig.task.cancel()
    done, _ = await asyncio.wait([rig.task], timeout=1.0)
    assert done, "the service never stopped"
    assert rig.task.cancelled()


async def test_shutdown_sees_bindings_under_way_through(rig: Rig) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODGROUPS, podgroup("train", 2))
    kube.seed(PODS, *members("train", 2))
    gate = kube.hold("create", "/binding$")
    rig.start()
    await until("both bindings sent", lambda: len(rig.bindings()) == 2)
    assert rig.task is not None
    rig.task.cancel()  # SIGTERM while the API server has not answered yet
    await until("the watches stopped", lambda: kube.watching == 0)
    assert not rig.task.done(), "the service waits for its bindings"
    gate.set()
    await asyncio.wait([rig.task], timeout=1.0)
    assert rig.task.cancelled()
    assert [rig.node_of("train-0"), rig.node_of("train-1")] == ["n0", "n0"]
    await rig.outbox.drain(1.0)
    assert rig.event_pods("Scheduled") == {"train-0", "train-1"}, "what they bound is reported"


async def test_shutdown_waits_for_bindings_no_longer_than_the_grace(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(service_module, "BIND_GRACE", 0.05)
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODS, pod("solo"))
    kube.hold("create", "/binding$")  # an API server that never answers
    rig.start()
    await until("the binding sent", lambda: rig.bindings() == ["solo"])
    assert rig.task is not None
    began = time.monotonic()
    rig.task.cancel()
    done, _ = await asyncio.wait([rig.task], timeout=1.0)
    assert done and rig.task.cancelled()
    assert 0.05 <= time.monotonic() - began < 0.5
    assert rig.node_of("solo") == ""


# ---- relists -----------------------------------------------------------------------------


def bound(name: str, node_name: str) -> dict[str, Any]:
    obj = pod(name)
    obj["spec"]["nodeName"] = node_name
    obj["status"]["phase"] = "Running"
    return obj


async def test_a_relist_deletes_from_the_core_what_went_away_unseen(rig: Rig) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"), node("n1"))
    [a, _] = kube.seed(PODS, bound("a", "n1"), bound("b", "n0"))
    rig.start()
    await until("ready", rig.service.ready.is_set)
    core = rig.core
    assert core.gauges().allocatable["nvidia.com/gpu"] == 16
    assert core.gauges().requested["nvidia.com/gpu"] == 2
    relisted = {r.name: r for r in rig.service.reflectors}
    await until("every watch", lambda: kube.watching == len(relisted))
    pods_and_nodes = "^/api/v1/(pods|nodes)$"
    back = kube.hold("watch", pods_and_nodes, times=2)
    kube.end_watches()
    await until("their watches back, held", lambda: len(kube.sent("watch", pods_and_nodes)) == 4)
    kube.remove(f"{PODS}/a")  # seen by no watch
    kube.remove(f"{NODES}/n1")
    [c] = kube.seed(PODS, bound("c", "n0"))
    kube.compact()  # and the watches cannot resume from where they were
    back.set()
    await until("both relisted", lambda: relisted["pods"].relists == relisted["nodes"].relists == 1)
    assert core.pod(a["metadata"]["uid"]) is None
    assert core.pod(c["metadata"]["uid"]) is not None
    assert core.gauges().allocatable["nvidia.com/gpu"] == 8, "n1 is gone"
    assert core.gauges().requested["nvidia.com/gpu"] == 2, "b and c on n0"


# ---- PodGroup conventions ----------------------------------------------------------------


def min_member(rig: Rig, key: str) -> int | None:
    view = rig.core.view(key)
    return None if view is None else view.min_member


async def test_a_gangsched_podgroup_stands_over_a_scheduler_plugins_one_of_the_same_name(
    rig: Rig,
) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(XK8S_PODGROUPS, podgroup("train", 3, api="scheduling.x-k8s.io/v1alpha1"))
    kube.seed(PODS, *members("train", 2, label=XK8S_LABEL))
    rig.start()
    await until(
        "the gang refused", lambda: rig.event_pods("FailedScheduling") == {"train-0", "train-1"}
    )
    assert min_member(rig, "ml/train") == 3 and rig.bindings() == []
    kube.seed(PODGROUPS, podgroup("train", 2))
    await until("the gang bound", lambda: sorted(rig.bindings()) == ["train-0", "train-1"])
    assert min_member(rig, "ml/train") == 2
    await until("its status", lambda: rig.status("train").get("phase") == "Scheduled")
    kube.remove(f"{PODGROUPS}/train")
    await until("the scheduler-plugins one again", lambda: min_member(rig, "ml/train") == 3)
    assert kube.sent("patch", "scheduling.x-k8s.io") == [], "another project's status is not ours"


async def test_a_pod_that_declares_its_gang_differently_is_refused_with_an_event(
    rig: Rig,
) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    volcano = {"scheduling.k8s.io/group-name": "g", "scheduling.k8s.io/group-pod-num": "2"}
    koordinator = {
        "gang.scheduling.koordinator.sh/name": "g",
        "gang.scheduling.koordinator.sh/min-available": "3",
    }
    # listed in this order: "first" declares the gang, then "other" differently
    kube.seed(PODS, pod("first", annotations=volcano), pod("other", annotations=koordinator))
    rig.start()
    await until("the refusal", lambda: "other" in rig.event_pods("FailedScheduling"))
    [event] = [e for e in rig.events("FailedScheduling") if e["regarding"]["name"] == "other"]
    assert "declares gang ml/g differently from its other members" in event["note"]
    assert "minMember 3 vs 2" in event["note"]
    await until("its condition", lambda: rig.condition("other") is not None)
    cond = rig.condition("other") or {}
    assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
    assert "differently" in cond["message"]
    assert min_member(rig, "ml/g") == 2, "the first declaration stands"
    kube.seed(PODS, pod("second", annotations=volcano))
    await until("the gang bound", lambda: sorted(rig.bindings()) == ["first", "second"])
    assert rig.node_of("other") == ""


# ---- what people see ---------------------------------------------------------------------


async def test_an_unschedulable_gang_says_so_on_every_member_and_once(rig: Rig) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODGROUPS, podgroup("big", 2))
    kube.seed(PODS, *members("big", 2, gpus=8))  # 16 GPUs, the cluster has 8
    rig.start()
    names = {"big-0", "big-1"}
    await until("the events", lambda: rig.event_pods("FailedScheduling") == names)
    await until("the conditions", lambda: all(rig.condition(n) for n in names))
    for n in names:
        cond = rig.condition(n) or {}
        assert (cond["status"], cond["reason"]) == ("False", "Unschedulable")
        assert cond["message"].startswith("Unschedulable: ")

    def scheduled() -> dict[str, Any]:
        conds = rig.status("big").get("conditions") or []
        return next((c for c in conds if c["type"] == "Scheduled"), {})

    await until("the status", lambda: scheduled().get("reason") == "Unschedulable")
    assert (rig.status("big")["phase"], scheduled()["status"]) == ("Scheduling", "False")
    await rig.outbox.drain(1.0)
    writes = len(kube.sent())
    [*_, last] = rig.status_writes("big")
    # Tried again with the same outcome: only the time of the failure is new.
    attempts = rig.service.stats.unschedulable
    rig.clock.advance(600)
    rig.service.poke()
    await until("another attempt", lambda: rig.service.stats.unschedulable > attempts)
    await rig.outbox.drain(1.0)
    [again] = kube.sent()[writes:]
    assert again.path == last.path and again.content_type == APPLY
    was, now = last.body["status"], again.body["status"]
    assert now.pop("lastFailureTime") > was.pop("lastFailureTime")
    assert now == was, "no event, no pod condition, the status the same but for the time"
    # A member changed in a way that changes nothing said: nothing is written.
    obj = kube.get_object(f"{PODS}/big-0") or {}
    obj["metadata"]["labels"]["team"] = "a"
    [changed] = kube.seed(PODS, obj)
    rv = changed["metadata"]["resourceVersion"]
    uid = changed["metadata"]["uid"]
    await until("the change seen", lambda: getattr(rig.core.pod(uid), "resource_version", "") == rv)
    await rig.outbox.drain(1.0)
    assert len(kube.sent()) == writes + 1


# ---- the fence ---------------------------------------------------------------------------


async def test_a_deposed_service_decides_and_sends_nothing_more(rig: Rig) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODGROUPS, podgroup("first", 2), podgroup("later", 2))
    kube.seed(PODS, *members("first", 2))
    rig.start()
    await until("the first gang bound", lambda: len(rig.bindings()) == 2)
    rig.leading = False  # the lease could not be renewed in time
    checks = rig.fence_checks
    [later, _] = kube.seed(PODS, *members("later", 2))
    await until("the new gang seen", lambda: rig.core.group_size("ml/later") == 2)
    await until("the fence consulted", lambda: rig.fence_checks > checks)
    await rig.outbox.drain(1.0)
    assert len(rig.bindings()) == 2 and kube.fenced == []
    assert rig.service.stats.bind_gangs == 1
    pod_ = rig.core.pod(later["metadata"]["uid"])
    assert pod_ is not None and not pod_.node_name


async def test_bindings_of_a_gang_not_sent_when_the_lease_is_lost_midway(rig: Rig) -> None:
    kube = rig.kube
    kube.seed(NODES, node("n0"))
    kube.seed(PODGROUPS, podgroup("train", 4))
    kube.seed(PODS, *members("train", 4))

    def lose(_: Request) -> None:
        rig.leading = False

    kube.before("create", "/binding$", lose)  # lost just as the first binding is sent
    rig.start()
    await until("the rest fenced", lambda: len(kube.fenced) == 3)
    assert len(rig.bindings()) == 1
    assert all(r.path.endswith("/binding") for r in kube.fenced)
    await rig.outbox.drain(1.0)
    assert rig.events("Scheduled") == [], "a deposed scheduler reports nothing"
