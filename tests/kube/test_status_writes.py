"""PodGroup status and pod conditions as the adapter writes them, without an API server: the
one rule, the scheduler's status written by server-side apply (one request, its own fields
only, lastTransitionTime kept), the PodGroup controller's ``Accepted`` condition, fenced pod
conditions, a timeout said in the pod's condition rather than annotations, convergence by
relist and resync, per-gang state that goes away with its gang, the controller's health as
the process's, and what ``kubectl gang`` shows."""

from __future__ import annotations

import asyncio
import gc
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration

from gangsched import app as app_module
from gangsched.api.membership import Source, resolve_membership
from gangsched.api.podgroup import podgroup_from
from gangsched.app import App, ControllerStoppedError
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, GangTimedOut, PodRef
from gangsched.core.scheduler import Scheduler
from gangsched.core.status import GroupStatus, MemberCounts, group_status
from gangsched.kube.io.client import ApiError
from gangsched.kube.io.health import HealthServer
from gangsched.kube.io.metrics import Metrics
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.io.times import rfc3339
from gangsched.kube.service import SchedulerService
from gangsched.kube.statuscontroller import StatusController, accepted_status, verdict
from gangsched.kube.write import reporter as reporter_module
from gangsched.kube.write.binder import BindResult
from gangsched.kube.write.podstatus import (
    says,
    scheduler_status,
    transition_time,
    write_pod_condition,
)
from gangsched.kube.write.reporter import Reporter
from gangsched.kubectl_gang import gang_rows, render
from gangsched.settings import Settings
from tests.support.fakekube import APPLY, FakeKube

PODGROUPS = "/apis/gangsched.io/v1alpha1/namespaces/ml/podgroups"

# ---- the rule ------------------------------------------------------------------------------


def test_a_raised_min_member_is_not_scheduled_and_says_why() -> None:
    two_bound = MemberCounts(total=2, scheduled=2, running=2)
    st = group_status(5, two_bound, reason="Scheduled", message="2 member(s) bound", attempted=True)
    assert (st.phase, st.scheduled, st.reason) == ("Scheduling", False, "WaitingForMembers")
    assert st.message == "2 of 5 members exist; waiting for more pods"
    st = group_status(2, two_bound, reason="WaitingForMembers", message="2 of 5 members exist")
    assert (st.phase, st.scheduled, st.reason, st.message) == (
        "Running",
        True,
        "Scheduled",
        "2 member(s) bound",
    )


def test_members_deleted_make_the_counts_and_message_current() -> None:
    st = group_status(4, MemberCounts(total=4, scheduled=2), reason="Scheduled", attempted=True)
    assert (st.phase, st.scheduled, st.reason) == ("Scheduling", False, "Pending")
    assert st.message == "2 of 4 members bound"
    st = group_status(4, MemberCounts(), reason="Scheduled", message="4 member(s) bound")
    assert (st.reason, st.message) == (
        "WaitingForMembers",
        "0 of 4 members exist; waiting for more pods",
    )


def test_binding_stands_only_while_bindings_are_in_flight() -> None:
    counts = MemberCounts(total=2)
    assert group_status(2, counts, reason="Binding", binding=True).reason == "Binding"
    assert group_status(2, counts, reason="Binding", binding=False).reason == "Pending"


def test_the_scheduler_word_stands_when_the_counts_agree() -> None:
    st = group_status(2, MemberCounts(total=2), reason="Unschedulable", message="needs 8 GPUs")
    assert (st.scheduled, st.reason, st.message) == (False, "Unschedulable", "needs 8 GPUs")


# ---- the apply body -------------------------------------------------------------------------


def _podgroup(status: dict[str, Any] | None = None, min_member: int = 2) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "train",
            "namespace": "ml",
            "uid": "pg-uid",
            "generation": 3,
            "resourceVersion": "41",
        },
        "spec": {"minMember": min_member},
        "status": status or {},
    }


def test_the_scheduler_status_carries_every_field_it_owns() -> None:
    st = group_status(2, MemberCounts(total=2, scheduled=2, running=1))
    status = scheduler_status(st, generation=3, waiting=0, start="S", last_failure="", since="T1")
    assert status == {
        "phase": "Scheduled",
        "scheduled": 2,
        "running": 1,
        "succeeded": 0,
        "failed": 0,
        "waiting": 0,
        "message": "2 member(s) bound",
        "observedGeneration": 3,
        "scheduleStartTime": "S",
        "conditions": [
            {
                "type": "Scheduled",
                "status": "True",
                "reason": "Scheduled",
                "message": "2 member(s) bound",
                "observedGeneration": 3,
                "lastTransitionTime": "T1",
            }
        ],
    }
    # what the object says is compared without the transition time, condition by type
    other = {"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok"}
    held = {**status, "conditions": [other, {**status["conditions"][0], "lastTransitionTime": "X"}]}
    assert says(held, status)
    assert not says({**held, "message": "garbled"}, status)
    assert not says({**held, "conditions": [other]}, status)


def test_the_transition_time_moves_only_when_the_status_flips() -> None:
    was = {"type": "Scheduled", "status": "False", "lastTransitionTime": "T1"}
    assert transition_time(was, "False", "T2") == "T1"
    assert transition_time(was, "True", "T2") == "T2"
    assert transition_time(None, "False", "T2") == "T2"
    assert transition_time({"status": "False"}, "False", "T2") == "T2"


# ---- the pod condition ---------------------------------------------------------------------


class FakePods:
    """pods/status with the API server's precondition: a patch whose resourceVersion is not
    the pod's is refused with 409."""

    def __init__(self, version: str, node: str = "") -> None:
        self.version = version
        self.node = node
        self.patches: list[dict[str, Any]] = []
        self.gets = 0

    async def get(self, path: str) -> dict[str, Any]:
        self.gets += 1
        return {
            "metadata": {"uid": "uid-p", "resourceVersion": self.version},
            "spec": {"nodeName": self.node},
        }

    async def strategic_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"]["resourceVersion"] != self.version:
            raise ApiError(409, "Conflict")
        self.patches.append(body)
        return {}


BODY = {"status": {"conditions": [{"type": "PodScheduled", "status": "False"}]}}
POD = PodRef("uid-p", "ml", "p")


def _write(client: FakePods, seen: str | None) -> object:
    return asyncio.run(
        write_pod_condition(client, POD, BODY, lambda uid: seen)  # type: ignore[arg-type]
    )


def test_a_condition_is_not_sent_for_a_pod_the_watch_saw_bound() -> None:
    client = FakePods("9", node="n0")
    assert _write(client, None) is None
    assert client.patches == [] and client.gets == 0


def test_a_condition_decided_before_the_binding_is_refused_and_dropped() -> None:
    client = FakePods("9", node="n0")  # bound since the watch last saw it at version 7
    assert _write(client, "7") is None
    assert client.patches == []


def test_a_condition_on_a_pod_changed_otherwise_is_sent_on_its_new_version() -> None:
    client = FakePods("9")  # changed (not bound) since version 7
    _write(client, "7")
    [patch] = client.patches
    assert patch["metadata"] == {"uid": "uid-p", "resourceVersion": "9"}


# ---- the service ---------------------------------------------------------------------------


class NullOutbox:
    dropped = 0

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Callable[[], Awaitable[object]], Hashable | None]] = []

    def put(
        self,
        what: str,
        job: Callable[[], Awaitable[object]],
        key: Hashable | None = None,
        **_: Any,
    ) -> None:
        self.jobs.append((what, job, key))


class DiscardOutbox:
    dropped = 0

    def put(self, what: str, job: Callable[[], Awaitable[object]], *_: Any, **__: Any) -> None:
        pass


class OkBinder:
    async def bind_gang(self, d: BindGang) -> list[BindResult]:
        return [BindResult(b, True) for b in d.bindings]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield loop
    asyncio.set_event_loop(None)
    loop.close()


def _service(
    outbox: NullOutbox | DiscardOutbox | None = None,
) -> tuple[SchedulerService, Reporter, NullOutbox | DiscardOutbox]:
    outbox = outbox or NullOutbox()
    reporter = Reporter(object(), outbox, "test")  # type: ignore[arg-type]
    core = Scheduler(CoreConfig(), FakeClock(1_000.0))
    service = SchedulerService(core, object(), OkBinder(), reporter)  # type: ignore[arg-type]
    service.ready.set()  # as after the first lists
    return service, reporter, outbox


def _node(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"n{i}", "uid": f"n{i}"},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pg(name: str, min_member: int, version: str = "1") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"pg-{name}",
            "generation": 1,
            "resourceVersion": version,
        },
        "spec": {"minMember": min_member},
    }


def _pod(name: str, labels: dict[str, str], node: str = "") -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "uid": f"u-{name}",
            "labels": labels,
            "resourceVersion": "1",
        },
        "spec": {
            "schedulerName": "gangsched",
            "nodeName": node,
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running" if node else "Pending"},
    }


def _status_written(reporter: Reporter, key: str) -> GroupStatus:
    reported = reporter._group_status.get(key)
    assert reported is not None
    return reported.status


async def test_a_raised_min_member_is_reported_though_nothing_is_pending() -> None:
    service, reporter, _ = _service()
    crd = service._crd_handler(Source.GANGSCHED, podgroup_from)
    service._on_node("ADDED", _node(0))
    crd("ADDED", _pg("train", 2))
    pods = [_pod(f"p{i}", {"gangsched.io/pod-group": "train"}) for i in range(2)]
    for p in pods:
        service._on_pod("ADDED", p)
    while (decisions := service.core.schedule_one()) is not None:
        service._handle(decisions)
    await asyncio.sleep(0)  # the bindings
    for p in pods:
        p["spec"]["nodeName"] = service.core.cache.assumed[p["metadata"]["uid"]]
        p["status"]["phase"] = "Running"
        service._on_pod("MODIFIED", p)
    assert _status_written(reporter, "ml/train").scheduled
    crd("MODIFIED", _pg("train", 5, version="2"))
    st = _status_written(reporter, "ml/train")
    assert (st.scheduled, st.reason, st.phase) == (False, "WaitingForMembers", "Scheduling")
    assert st.message == "2 of 5 members exist; waiting for more pods"


def test_a_relist_rewrites_a_status_the_object_no_longer_matches(
    loop: asyncio.AbstractEventLoop,
) -> None:
    service, reporter, outbox = _service()
    assert isinstance(outbox, NullOutbox)
    crd = service._crd_handler(Source.GANGSCHED, podgroup_from)
    crd("ADDED", _pg("train", 2))
    service._on_pod("ADDED", _pod("p0", {"gangsched.io/pod-group": "train"}))
    written = _status_written(reporter, "ml/train")
    status = scheduler_status(
        written, generation=1, waiting=0, start="", last_failure="", since="T"
    )
    body = {**_pg("train", 2), "status": status}
    outbox.jobs.clear()
    loop.run_until_complete(crd("SYNC", {"items": [body]}))
    assert outbox.jobs == [], "the object says what the scheduler would write: no write"
    garbled = {**body, "status": {**body["status"], "message": "garbled"}}
    loop.run_until_complete(crd("SYNC", {"items": [garbled]}))
    assert [what for what, _, _ in outbox.jobs] == ["podgroup-status"]


def test_a_declaration_that_differs_never_shows_none(loop: asyncio.AbstractEventLoop) -> None:
    service, _, _ = _service()
    volcano = {"scheduling.k8s.io/group-name": "g", "scheduling.k8s.io/group-pod-num": "2"}
    koord = {
        "gang.scheduling.koordinator.sh/name": "g",
        "gang.scheduling.koordinator.sh/min-available": "3",
    }
    first = _pod("a", {})
    first["metadata"]["annotations"] = volcano
    second = _pod("b", {})
    second["metadata"]["annotations"] = koord
    service._on_pod("ADDED", first)
    service._on_pod("ADDED", second)
    reason = service.core.cache.pods["u-b"].invalid_reason
    assert "differently" in reason
    assert "None" not in reason
    assert "timeout 600s vs default" in reason


def _sizes(service: SchedulerService, reporter: Reporter) -> dict[str, int]:
    core = service.core
    return {
        "core.gangs": len(core.gangs),
        "core.specs": len(core.specs),
        "core.group_pods": len(core.group_pods),
        "core.pods": len(core.cache.pods),
        "queue": len(core.queue._keys),
        "core.started": len(core.started),
        "core.evicting": len(core.evicting),
        "core.awaiting": len(core.awaiting) + len(core.awaited_by),
        "core.priorities": len(core.cache.counted_priorities),
        "lifecycle": len(core.lifecycle._episodes) + len(core.lifecycle.restarting),
        **{f"service.specs.{k}": n for k, n in service._specs.sizes().items()},
        "service.podgroups": len(service._podgroups),
        "reporter.group_status": len(reporter._group_status),
        "reporter.conditions": len(reporter._conditions),
    }


def _rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _churn(rounds: int) -> list[tuple[int, dict[str, int], dict[str, int]]]:
    """Each round: 100 PodGroups with 6 pods each and 50 gangs of 6 pods declared by labels
    (900 pods), scheduled, bound, running, then all deleted. New names every round, as
    workloads make them."""
    service, reporter, _ = _service(DiscardOutbox())
    controller = StatusController(Configuration(host="https://127.0.0.1:1"), FakeKube)
    crd = service._crd_handler(Source.GANGSCHED, podgroup_from)
    for i in range(120):
        service._on_node("ADDED", _node(i))
    out = []
    for r in range(rounds):
        pgs = [_pg(f"g{r}-{g}", 6) for g in range(100)]
        pods = [
            _pod(f"p{r}-{g}-{k}", {"gangsched.io/pod-group": f"g{r}-{g}"})
            for g in range(100)
            for k in range(6)
        ]
        seed = {"pod-group/min-available": "6"}
        pods += [
            _pod(f"q{r}-{g}-{k}", {"pod-group/name": f"i{r}-{g}", **seed})
            for g in range(50)
            for k in range(6)
        ]
        for pg in pgs:
            crd("ADDED", pg)
            controller.on_group("ADDED", pg)
        for p in pods:
            service._on_pod("ADDED", p)
        while (decisions := service.core.schedule_one()) is not None:
            service._handle(decisions)
        for _ in range(3):
            await asyncio.sleep(0)
        for p in pods:
            node = service.core.cache.assumed.get(p["metadata"]["uid"])
            assert node, "every pod was placed"
            p["spec"]["nodeName"] = node
            p["status"]["phase"] = "Running"
            service._on_pod("MODIFIED", p)
        for p in pods:
            service._on_pod("DELETED", p)
        for pg in pgs:
            crd("DELETED", pg)
            controller.on_group("DELETED", pg)
        gc.collect()
        sizes = _sizes(service, reporter)
        sizes.update(
            {
                "controller.groups": len(controller.groups),
                "controller.pending": len(controller._pending),
                "controller.failures": len(controller._failures),
            }
        )
        out.append((r, sizes, {"rss_kib": _rss_kib()}))
    return out


def test_per_gang_state_goes_away_with_the_gang_and_memory_stays_flat() -> None:
    rounds = asyncio.run(_churn(20))
    for r, sizes, _ in rounds:
        assert all(n == 0 for n in sizes.values()), (r, sizes)
    rss = [m["rss_kib"] for _, _, m in rounds]
    print(f"RSS (KiB) after each round: {rss}")
    assert rss[-1] - rss[2] < 1024, f"RSS grew {rss[-1] - rss[2]} KiB over rounds 3-20: {rss}"


# ---- the PodGroup controller ---------------------------------------------------------------


def _spec_pg(spec: dict[str, Any], generation: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml", "generation": generation},
        "spec": spec,
    }


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minMember": 2, "minResources": {"nvidia.com/gpu": "0.5"}}, "spec.minResources"),
        ({"minMember": 2, "minResources": {"cpu": "1e40"}}, "spec.minResources.cpu"),
        ({"minMember": 2, "mode": "Sometimes"}, "spec.mode"),
        ({"minMember": 2, "onceSatisfied": "Never"}, "spec.onceSatisfied"),
        ({"minMember": 0}, "spec.minMember"),
        ({"minMember": "two"}, "spec.minMember"),
        ({"minMember": 3, "totalMember": 2}, "spec.totalMember"),
        (
            {"minMember": 2, "roles": [{"name": "ps", "minMember": 3}]},
            "spec.roles[0].minMember",
        ),
        (
            {
                "minMember": 2,
                "roles": [{"name": "ps", "minMember": 1}, {"name": "ps", "minMember": 1}],
            },
            "spec.roles[1].name",
        ),
        (
            {
                "minMember": 2,
                "roles": [{"name": "ps", "minMember": 1}],
                "topology": {"antiAffinity": [["ps", "worker"]]},
            },
            "spec.topology.antiAffinity[0]",
        ),
    ],
)
def test_a_spec_the_scheduler_cannot_use_is_not_accepted_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    v = verdict(_spec_pg(spec))
    assert (v.accepted, v.reason) == (False, "InvalidSpec")
    assert v.message.startswith(field), v.message
    # the one rule: the scheduler refuses the same spec, for the same reason
    assert podgroup_from(_spec_pg(spec)).invalid_reason == v.message


def test_a_valid_spec_is_accepted_with_the_generation_it_was_decided_on() -> None:
    spec = {
        "minMember": 3,
        "totalMember": 4,
        "minResources": {"nvidia.com/gpu": "3"},
        "roles": [{"name": "ps", "minMember": 1}, {"name": "worker", "minMember": 2}],
        "topology": {"affinity": [["ps", "worker"]]},
    }
    status = accepted_status(_spec_pg(spec, generation=4), "T1")
    assert status == {
        "conditions": [
            {
                "type": "Accepted",
                "status": "True",
                "reason": "Accepted",
                "message": "the spec is valid",
                "observedGeneration": 4,
                "lastTransitionTime": "T1",
            }
        ]
    }
    # written: nothing more to write, whatever else the status holds
    scheduled = {"type": "Scheduled", "status": "False", "reason": "Pending", "message": "m"}
    obj = {
        **_spec_pg(spec, generation=4),
        "status": {"phase": "Pending", "conditions": [scheduled, *status["conditions"]]},
    }
    assert accepted_status(obj, "T2") is None
    # a new generation is written again, at the same transition time; a flip moves it
    obj["metadata"]["generation"] = 5
    again = accepted_status(obj, "T2")
    assert again is not None and again["conditions"][0]["lastTransitionTime"] == "T1"
    obj["spec"]["mode"] = "Sometimes"
    flipped = accepted_status(obj, "T3")
    assert flipped is not None
    [cond] = flipped["conditions"]
    assert (cond["status"], cond["reason"], cond["lastTransitionTime"]) == (
        "False",
        "InvalidSpec",
        "T3",
    )


def test_the_controller_watches_podgroups_only() -> None:
    controller = StatusController(Configuration(host="https://127.0.0.1:1"), FakeKube)
    watched = {
        (h.selector.group, h.selector.plural or h.selector.any_name)
        for h in controller.registry._watching.get_all_handlers()
        if h.selector is not None
    }
    assert watched == {("gangsched.io", "podgroups")}


async def _controller(kube: FakeKube) -> StatusController:
    controller = StatusController(
        Configuration(host="https://127.0.0.1:1"), lambda: kube, debounce=0.01
    )
    controller._client = kube
    return controller


async def _settle_controller(controller: StatusController) -> None:
    for _ in range(100):
        await asyncio.sleep(0.01)
        if not controller._pending:
            break
    await asyncio.sleep(0.01)


async def test_the_controller_applies_its_condition_alone_and_once() -> None:
    kube = FakeKube()
    [pg] = kube.seed(PODGROUPS, _spec_pg({"minMember": 2}))
    controller = await _controller(kube)
    controller.on_group("ADDED", pg)
    await _settle_controller(controller)
    [req] = kube.sent()
    assert (req.verb, req.path, req.content_type) == ("patch", f"{PODGROUPS}/train/status", APPLY)
    assert req.params == {"fieldManager": "gangsched-controller", "force": "true"}
    assert set(req.body) == {"apiVersion", "kind", "metadata", "status"}
    assert [c["type"] for c in req.body["status"]["conditions"]] == ["Accepted"]
    assert list(req.body["status"]) == ["conditions"], "it owns one field"
    # the watch brings the object back with the condition: nothing more to write
    obj = kube.get_object(f"{PODGROUPS}/train")
    assert obj is not None
    controller.on_group("MODIFIED", obj)
    await _settle_controller(controller)
    assert len(kube.sent()) == 1 and controller.writes == 1


async def test_a_failed_controller_write_is_tried_again_and_a_deleted_group_forgotten() -> None:
    kube = FakeKube()
    [pg] = kube.seed(PODGROUPS, _spec_pg({"minMember": 2}))
    kube.fail("patch", "podgroups", 500, times=2)
    controller = await _controller(kube)
    controller.on_group("ADDED", pg)
    for _ in range(200):
        await asyncio.sleep(0.01)
        if controller.writes:
            break
    assert len(kube.sent("patch")) == 3 and controller.writes == 1
    assert controller._failures == {}
    kube.remove(f"{PODGROUPS}/train")
    controller.on_group("MODIFIED", {**pg, "metadata": {**pg["metadata"], "generation": 9}})
    await _settle_controller(controller)
    assert len(kube.sent("patch")) == 4  # answered 404: not tried again
    assert controller.groups == {} and controller._pending == {}


async def test_both_writers_own_their_fields_and_leave_the_others() -> None:
    """Server-side apply with a field manager each: the scheduler's writes never remove the
    controller's condition, nor the controller's the scheduler's fields."""
    kube = FakeKube()
    [pg] = kube.seed(PODGROUPS, _spec_pg({"minMember": 2}))
    controller = await _controller(kube)
    outbox = Outbox()
    outbox.start()
    reporter = Reporter(kube, outbox, "test")
    st = group_status(2, MemberCounts(total=2), attempted=True)
    reporter.group_status("ml/train", st, waiting=0, start=1.0, last_failure=None, seen=pg)
    await outbox.drain(5)
    controller.on_group("MODIFIED", kube.get_object(f"{PODGROUPS}/train") or {})
    await _settle_controller(controller)
    bound = group_status(2, MemberCounts(total=2, scheduled=2))
    reporter.group_status("ml/train", bound, waiting=0, start=1.0, last_failure=2.0, seen=pg)
    await outbox.drain(5)
    await outbox.stop()
    status = (kube.get_object(f"{PODGROUPS}/train") or {})["status"]
    assert sorted(c["type"] for c in status["conditions"]) == ["Accepted", "Scheduled"]
    assert (status["phase"], status["scheduled"]) == ("Scheduled", 2)
    assert status["scheduleStartTime"] == rfc3339(1.0)
    assert status["lastFailureTime"] == rfc3339(2.0)
    assert kube.sent("get") == [], "no write reads the object first"


# ---- membership ----------------------------------------------------------------------------


def test_released_scheduler_plugins_labels_declare_a_gang() -> None:
    labels = {
        "pod-group.scheduling.sigs.k8s.io/name": "job",
        "pod-group.scheduling.sigs.k8s.io/min-available": "3",
    }
    m = resolve_membership("ml", labels, {}, 0.0)
    assert (m.key, m.source, m.error) == ("ml/job", Source.LABELS, "")
    assert m.implicit is not None and m.implicit.min_member == 3
    both = {**labels, "pod-group/name": "job", "pod-group/min-available": "3"}
    assert resolve_membership("ml", both, {}, 0.0).key == "ml/job"
    disagree = {**labels, "pod-group/name": "job", "pod-group/min-available": "2"}
    assert "disagree" in resolve_membership("ml", disagree, {}, 0.0).error
    other = {**labels, "pod-group/name": "other", "pod-group/min-available": "3"}
    assert "more than one gang" in resolve_membership("ml", other, {}, 0.0).error
    alone = {"pod-group.scheduling.sigs.k8s.io/name": "job"}
    assert "needs pod-group.scheduling.sigs.k8s.io/min-available" in (
        resolve_membership("ml", alone, {}, 0.0).error
    )


@pytest.mark.parametrize(
    ("labels", "annotations", "named"),
    [
        ({"gangsched.io/podgroup": "x"}, {}, "label gangsched.io/podgroup"),
        ({"scheduling.x-k8s.io/podgroup": "x"}, {}, "label scheduling.x-k8s.io/podgroup"),
        ({}, {"pod-group/name": "x"}, "annotation pod-group/name is read as a label"),
        (
            {},
            {"gang.scheduling.koordinator.sh/match-policy": "once-satisfied"},
            "annotation gang.scheduling.koordinator.sh/match-policy",
        ),
        ({"pod-group.scheduling.sigs.k8s.io/min": "2"}, {}, "pod-group.scheduling.sigs.k8s.io/min"),
    ],
)
def test_a_gang_declaration_gangsched_does_not_read_is_refused_by_name(
    labels: dict[str, str], annotations: dict[str, str], named: str
) -> None:
    m = resolve_membership("ml", labels, annotations, 0.0)
    assert m.key == ""
    assert m.error.startswith("unknown gang declaration: ")
    assert named in m.error


def test_keys_gangsched_writes_or_other_prefixes_are_not_refused() -> None:
    annotations = {
        "gangsched.io/timeout": "true",
        "gang.scheduling.koordinator.sh/timeout": "true",
        "volcano.sh/queue-name": "q",
        "scheduling.volcano.sh/queue-name": "q",
        "quota.scheduling.x-k8s.io/name": "q",
    }
    assert resolve_membership("ml", {"app": "x"}, annotations, 0.0).error == ""


# ---- kubectl gang --------------------------------------------------------------------------


def _kpod(
    name: str,
    labels: dict[str, str],
    node: str = "",
    condition: str = "",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    pod = _pod(name, labels, node)
    pod["metadata"]["annotations"] = annotations or {}
    if condition:
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": condition,
            }
        ]
    return pod


def test_kubectl_gang_shows_refused_pods_missing_podgroups_and_documented_sources() -> None:
    gangsched = {"gangsched.io/pod-group": "ddp"}
    pods = [
        _kpod("ddp-0", gangsched, node="n0"),
        _kpod("ddp-1", gangsched, node="n0"),
        _kpod(
            "ddp-2",
            gangsched,
            condition="Unsupported: ml/ddp-2: spec.volumes[0].rbd: not supported",
        ),
        _kpod("typo", {"gangsched.io/podgroup": "ddp"}),
        _kpod(
            "lost-0",
            {"gangsched.io/pod-group": "lost"},
            condition="PodGroupNotFound: PodGroup ml/lost does not exist; "
            "the pods wait until it is created",
        ),
        _kpod("lost-1", {"gangsched.io/pod-group": "lost"}),
        _kpod(
            "sigs-0",
            {
                "pod-group.scheduling.sigs.k8s.io/name": "sigs",
                "pod-group.scheduling.sigs.k8s.io/min-available": "2",
            },
            condition="WaitingForMembers: 1 of 2 members exist; waiting for more pods",
        ),
    ]
    rows = {r.name: r for r in gang_rows([_pg("ddp", 2)], pods)}
    assert rows["ddp"].phase == "Running" and rows["ddp"].source == "PodGroup"
    assert rows["ddp"].why == ""
    refused = rows["pod/ddp-2"]
    assert (refused.phase, refused.gang, refused.pod) == ("Unsupported", "ddp", "ddp-2")
    assert refused.why == "ml/ddp-2: spec.volumes[0].rbd: not supported"
    typo = rows["pod/typo"]
    assert typo.phase == "InvalidPod" and "gangsched.io/podgroup" in typo.why
    lost = rows["lost"]
    assert (lost.phase, lost.min_member, lost.source) == ("Pending", 0, "PodGroup")
    assert lost.why == "PodGroup ml/lost does not exist; the pods wait until it is created"
    sigs = rows["sigs"]
    assert (sigs.phase, sigs.min_member, sigs.source) == ("Pending", 2, "labels")
    assert sigs.why == "1 of 2 members exist; waiting for more pods"
    table = render(list(rows.values()), wide=True, all_namespaces=False)
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["GANG", "SOURCE", "PHASE"]
    assert any(line.split()[:4] == ["lost", "PodGroup", "Pending", "-"] for line in lines)
    assert any(line.split()[:3] == ["pod/ddp-2", "PodGroup", "Unsupported"] for line in lines)
    assert "None" not in table


# ---- no user message shows Python's None ---------------------------------------------------

RICH_POD: dict[str, Any] = {
    "metadata": {
        "name": "w-0",
        "namespace": "ml",
        "uid": "u-w-0",
        "labels": {"gangsched.io/pod-group": "train", "app": "nccl"},
        "annotations": {},
    },
    "spec": {
        "schedulerName": "gangsched",
        "priority": 10,
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "gpu", "operator": "Equal", "value": "x", "effect": "NoSchedule"}],
        "schedulingGates": [{"name": "example.com/quota"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "preference": {"matchExpressions": [{"key": "rack", "operator": "Exists"}]},
                    }
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {
                            "matchExpressions": [
                                {"key": "app", "operator": "In", "values": ["nccl"]}
                            ]
                        },
                    }
                ]
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 1,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "minDomains": 2,
                "labelSelector": {"matchLabels": {"app": "nccl"}},
            }
        ],
        "containers": [
            {
                "name": "c",
                "ports": [{"containerPort": 80, "hostPort": 8080, "protocol": "TCP"}],
                "resources": {
                    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                    "limits": {"nvidia.com/gpu": "1"},
                },
            }
        ],
        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
    },
    "status": {"phase": "Pending"},
}

RICH_PODGROUP: dict[str, Any] = {
    "metadata": {"name": "train", "namespace": "ml"},
    "spec": {
        "minMember": 2,
        "minResources": {"nvidia.com/gpu": "2"},
        "scheduleTimeoutSeconds": 60,
        "mode": "NonStrict",
        "onceSatisfied": "Gang",
        "roles": [{"name": "ps", "minMember": 1}],
        "gangGroup": ["other"],
        "topology": {"affinity": [["ps"]]},
    },
}


def _paths(obj: object, path: tuple[object, ...] = ()) -> Iterator[tuple[object, ...]]:
    yield path
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*path, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*path, i))


def _nulled(obj: Any, path: tuple[object, ...]) -> Any:
    if not path:
        return None
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        return {k: (_nulled(v, rest) if k == head else v) for k, v in obj.items()}
    return [(_nulled(v, rest) if i == head else v) for i, v in enumerate(obj)]


def test_no_field_set_to_null_makes_a_message_that_shows_none() -> None:
    """JSON null in any field of a pod or a PodGroup: whatever is refused says ``null``, never
    Python's ``None``."""
    from gangsched.api.pod import pod_from

    checked = 0
    for path in _paths(RICH_POD):
        if not path or path[:2] in (("metadata", "name"), ("metadata", "namespace")):
            continue
        pod, membership = pod_from(_nulled(RICH_POD, path))
        for text in (pod.invalid_reason, pod.unsupported, membership.error):
            assert "None" not in text, (path, text)
        checked += 1
    for path in _paths(RICH_PODGROUP):
        if not path or path[:2] in (("metadata", "name"), ("metadata", "namespace")):
            continue
        spec = podgroup_from(_nulled(RICH_PODGROUP, path))
        assert "None" not in spec.invalid_reason, (path, spec.invalid_reason)
        checked += 1
    assert checked > 60


def test_no_status_is_written_before_every_list_is_in(loop: asyncio.AbstractEventLoop) -> None:
    """At a start, PodGroups listed before the pods must not be written with no members."""
    service, reporter, outbox = _service()
    assert isinstance(outbox, NullOutbox)
    service.ready.clear()
    crd = service._crd_handler(Source.GANGSCHED, podgroup_from)
    loop.run_until_complete(crd("SYNC", {"items": [_pg("train", 2)]}))
    service._on_pod("ADDED", _pod("p0", {"gangsched.io/pod-group": "train"}, node="n0"))
    assert outbox.jobs == [] and reporter._group_status == {}


# ---- the scheduler's status writes ----------------------------------------------------------


class Clock:
    """rfc3339 with a settable now, for the reporter's lastTransitionTime."""

    def __init__(self) -> None:
        self.now = "T0"

    def __call__(self, t: float | None = None, micro: bool = False) -> str:
        return self.now if t is None else rfc3339(t, micro)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(reporter_module, "rfc3339", c)
    return c


async def _report(
    reporter: Reporter, outbox: Outbox, st: GroupStatus, seen: dict[str, Any], **kw: Any
) -> None:
    args: dict[str, Any] = {"waiting": 0, "start": None, "last_failure": None, **kw}
    reporter.group_status("ml/train", st, seen=seen, **args)
    await outbox.drain(5)


async def test_the_status_is_one_apply_that_keeps_its_transition_time(clock: Clock) -> None:
    kube = FakeKube()
    [pg] = kube.seed(PODGROUPS, _pg("train", 2))
    outbox = Outbox()
    outbox.start()
    reporter = Reporter(kube, outbox, "test")
    path = f"{PODGROUPS}/train"

    def scheduled() -> dict[str, Any]:
        obj = kube.get_object(path) or {}
        cond = next(c for c in obj["status"]["conditions"] if c["type"] == "Scheduled")
        return {**cond, "phase": obj["status"]["phase"]}

    clock.now = "T1"
    await _report(reporter, outbox, group_status(2, MemberCounts(total=2)), pg, start=5.0)
    [req] = kube.sent()
    assert (req.verb, req.path, req.content_type) == ("patch", f"{path}/status", APPLY)
    assert req.params == {"fieldManager": "gangsched-scheduler", "force": "true"}
    assert req.body["metadata"] == {"name": "train", "namespace": "ml"}
    assert req.body["status"]["observedGeneration"] == 1
    assert req.body["status"]["scheduleStartTime"] == rfc3339(5.0)
    assert scheduled()["lastTransitionTime"] == "T1"
    # the same report again: nothing sent
    await _report(reporter, outbox, group_status(2, MemberCounts(total=2)), pg, start=5.0)
    assert len(kube.sent()) == 1
    clock.now = "T2"  # bound: the condition flips
    two = group_status(2, MemberCounts(total=2, scheduled=2))
    await _report(reporter, outbox, two, pg, start=5.0)
    assert (scheduled()["status"], scheduled()["lastTransitionTime"]) == ("True", "T2")
    clock.now = "T3"  # running: a new phase and message, no flip
    running = group_status(2, MemberCounts(total=3, scheduled=3, running=3))
    await _report(reporter, outbox, running, pg, start=5.0)
    assert (scheduled()["phase"], scheduled()["lastTransitionTime"]) == ("Running", "T2")
    # a restarted scheduler knows neither the transition nor the times: the object does
    seen = kube.get_object(path) or {}
    fresh = Reporter(kube, outbox, "test")
    clock.now = "T4"
    await _report(fresh, outbox, group_status(2, MemberCounts(total=3, scheduled=2)), seen)
    last = kube.sent()[-1].body["status"]
    assert last["conditions"][0]["lastTransitionTime"] == "T2"
    assert last["scheduleStartTime"] == rfc3339(5.0), "a time is never cleared"
    assert len(kube.sent()) == 4 and kube.sent("get") == []
    await outbox.stop()


async def test_a_resync_writes_only_where_the_object_says_something_else(clock: Clock) -> None:
    kube = FakeKube()
    [pg] = kube.seed(PODGROUPS, _pg("train", 2))
    outbox = Outbox()
    outbox.start()
    reporter = Reporter(kube, outbox, "test")
    st = group_status(2, MemberCounts(total=1), attempted=True)
    await _report(reporter, outbox, st, pg)
    seen = kube.get_object(f"{PODGROUPS}/train") or {}
    await _report(reporter, outbox, st, seen, force=True)
    assert len(kube.sent()) == 1, "the object says it: no write"
    garbled = {**seen, "status": {**seen["status"], "message": "garbled"}}
    await _report(reporter, outbox, st, garbled, force=True)
    assert len(kube.sent()) == 2
    assert (kube.get_object(f"{PODGROUPS}/train") or {})["status"]["message"] == st.message
    await outbox.stop()


async def test_a_failed_status_write_is_sent_again_at_the_next_report(clock: Clock) -> None:
    kube = FakeKube()
    [pg] = kube.seed(PODGROUPS, _pg("train", 2))
    kube.fail("patch", "podgroups", 500)
    outbox = Outbox()
    outbox.start()
    reporter = Reporter(kube, outbox, "test")
    st = group_status(2, MemberCounts(total=1))
    await _report(reporter, outbox, st, pg)
    assert "ml/train" not in reporter._group_status
    await _report(reporter, outbox, st, pg)
    assert len(kube.sent("patch")) == 2
    assert (kube.get_object(f"{PODGROUPS}/train") or {})["status"]["phase"] == "Pending"
    await outbox.stop()


def test_a_timeout_is_said_in_the_pod_condition_not_in_annotations(
    loop: asyncio.AbstractEventLoop,
) -> None:
    """No ``patch`` on pods: the released pods of a gang that timed out get the GangTimeout
    event and ``PodScheduled=False`` saying so, through ``pods/status``."""
    kube = FakeKube()
    outbox = NullOutbox()
    reporter = Reporter(kube, outbox, "test")  # type: ignore[arg-type]
    core = Scheduler(CoreConfig(), FakeClock(1_000.0))
    service = SchedulerService(core, kube, OkBinder(), reporter)  # type: ignore[arg-type]
    service.ready.set()
    [obj] = kube.seed("/api/v1/namespaces/ml/pods", _pod("p0", {"gangsched.io/pod-group": "t"}))
    service._on_pod("ADDED", obj)
    outbox.jobs.clear()
    message = "timed out after 3s waiting for quorum"
    service._handle([GangTimedOut("ml/t", (PodRef("u-p0", "ml", "p0"),), message)])
    assert sorted(what for what, _, _ in outbox.jobs) == ["condition", "event GangTimeout"]
    [job] = [job for what, job, _ in outbox.jobs if what == "condition"]
    loop.run_until_complete(job())
    [req] = kube.sent()
    assert (req.verb, req.path) == ("patch", "/api/v1/namespaces/ml/pods/p0/status")
    pod = kube.get_object("/api/v1/namespaces/ml/pods/p0") or {}
    [cond] = pod["status"]["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    assert cond["message"] == f"Timeout: {message}"
    assert not pod["metadata"].get("annotations")


# ---- the controller's health is the process's -------------------------------------------


class IdleService:
    """The scheduler service, doing nothing until it is stopped."""

    def __init__(self, sync: bool = True) -> None:
        self.ready = asyncio.Event()
        self.running = asyncio.Event()
        self.last_turn = time.monotonic()
        self.metrics = Metrics()
        self.reporter = Reporter(FakeKube(), Outbox(), "test")
        self._sync = sync
        self.busy = False  # deciding or binding a backlog

    def quiet(self) -> bool:
        return self.ready.is_set() and not self.busy

    async def until_quiet(self, most: float) -> None:
        deadline = time.monotonic() + most
        while not self.quiet() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    async def run(self) -> None:
        self.running.set()
        if self._sync:
            self.ready.set()  # its caches are in
        await asyncio.Event().wait()


class BrokenController(StatusController):
    """A PodGroup controller whose run fails when the test says so."""

    def __init__(self) -> None:
        super().__init__(Configuration(host="https://127.0.0.1:1"), FakeKube)
        self.started = threading.Event()
        self.fail_now = threading.Event()

    async def run(self, stop: threading.Event | None = None) -> None:
        self.started.set()
        # until told to fail, or stopped as the app stops its controller (a test that ends
        # leaves no thread behind to fail later, with its traceback on the terminal)
        while not self.fail_now.is_set():
            if stop is not None and stop.is_set():
                return
            await asyncio.sleep(0.01)
        raise RuntimeError("kopf crashed")


def _app(controller: StatusController, service: IdleService | None = None) -> App:
    service = service or IdleService()
    return App(
        Settings(),
        FakeKube(),  # type: ignore[arg-type]
        service,  # type: ignore[arg-type]
        Outbox(),
        controller,
        None,
        None,
    )


async def test_a_controller_that_stops_fails_healthz_and_ends_the_app(
    caplog: pytest.LogCaptureFixture,
) -> None:
    controller = BrokenController()
    app = _app(controller)
    health = HealthServer("127.0.0.1:0", lambda: b"", app.ready, app.live)
    running = asyncio.create_task(app.run())
    assert await asyncio.to_thread(controller.started.wait, 10)
    assert app.live()
    assert health._answer("GET", "/healthz")[0] == 200
    controller.fail_now.set()
    with pytest.raises(ControllerStoppedError, match="RuntimeError: kopf crashed"):
        await asyncio.wait_for(running, 10)
    assert app._status_thread is not None and not app._status_thread.is_alive()
    stopped = [r for r in caplog.records if r.getMessage() == "the PodGroup controller stopped"]
    assert len(stopped) == 1 and stopped[0].levelno == logging.ERROR
    assert stopped[0].exc_info is not None and "kopf crashed" in str(stopped[0].exc_info[1])


async def test_the_controller_starts_once_the_caches_are_in_and_the_backlog_bound() -> None:
    """kopf's start-up would compete with the first lists and the first bindings for the
    interpreter: the PodGroup controller's thread starts only when the scheduler is ready and
    quiet."""
    controller = BrokenController()
    service = IdleService(sync=False)
    service.busy = True
    app = _app(controller, service)
    running = asyncio.create_task(app.run())
    try:
        await asyncio.wait_for(service.running.wait(), 10)
        for _ in range(20):
            await asyncio.sleep(0)
        assert app._status_thread is None and not controller.started.is_set()
        service.ready.set()
        await asyncio.sleep(0.3)
        assert app._status_thread is None, "the backlog is still being bound"
        service.busy = False
        assert await asyncio.to_thread(controller.started.wait, 10)
    finally:
        app.stop.set()
        await asyncio.wait_for(running, 20)


async def test_the_controller_starts_on_a_scheduler_that_is_never_quiet(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(app_module, "CONTROLLER_START_WAIT", 0.3)
    controller = BrokenController()
    service = IdleService()
    service.busy = True
    app = _app(controller, service)
    running = asyncio.create_task(app.run())
    try:
        assert await asyncio.to_thread(controller.started.wait, 10)
        assert service.busy
    finally:
        app.stop.set()
        await asyncio.wait_for(running, 20)


async def test_healthz_fails_once_the_controller_thread_has_ended() -> None:
    app = _app(BrokenController())
    health = HealthServer("127.0.0.1:0", lambda: b"", app.ready, app.live)
    app.service.last_turn = time.monotonic()
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    app._status_thread = ended  # the scheduler runs on, the controller is gone
    assert not app.live()
    assert health._answer("GET", "/healthz")[0] == 500


def test_a_reservation_is_written_while_the_gang_holds_one_and_dropped_after() -> None:
    st = group_status(2, MemberCounts(total=2), reason="Unschedulable", message="no room")
    held = {"nodes": ["n0", "n1"], "since": "S", "reason": "waited 61s for capacity"}
    status = scheduler_status(
        st, generation=1, waiting=0, start="S", last_failure="", since="T", reservation=held
    )
    assert status["reservation"] == held
    without = scheduler_status(st, generation=1, waiting=0, start="S", last_failure="", since="T")
    assert "reservation" not in without, "server-side apply drops the field it no longer sends"


# ---- first reports -------------------------------------------------------------------------


class RankingOutbox:
    """Records which writes the reporter marks as first reports."""

    dropped = 0

    def __init__(self) -> None:
        self.puts: list[tuple[str, Hashable | None, bool]] = []
        self.drops: list[Callable[[], None] | None] = []

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
        self.puts.append((what, key, first))
        self.drops.append(on_drop)


def test_a_pods_and_a_gangs_first_report_go_before_the_backlog() -> None:
    """The first PodScheduled condition of a pod, and the first Scheduled condition of a
    PodGroup, are first reports; what follows for them is not."""
    outbox = RankingOutbox()
    reporter = Reporter(FakeKube(), outbox, "test")  # type: ignore[arg-type]
    pod = PodRef("uid-a", "ml", "a")
    reporter.unschedulable(pod, "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.")
    reporter.unschedulable(pod, "Unschedulable", "0/3 nodes are available: 3 Insufficient gpu.")
    conditions = [first for what, _, first in outbox.puts if what == "condition"]
    assert conditions == [True, False]
    # the pod's first FailedScheduling Event too (none of its series written yet)
    assert next(first for what, _, first in outbox.puts if what.startswith("event")) is True
    # dropped unsent (the outbox full): the same report is sent again, as a first report
    drop = outbox.drops[-1]
    assert drop is not None
    drop()
    reporter.unschedulable(pod, "Unschedulable", "0/3 nodes are available: 3 Insufficient gpu.")
    assert outbox.puts[-1] == ("condition", ("cond", "uid-a"), False)
    failing = group_status(2, MemberCounts(total=2), attempted=True)
    reporter.group_status("ml/train", failing, waiting=0, start=1.0, last_failure=1.0)
    bound = group_status(2, MemberCounts(total=2, scheduled=2))
    reporter.group_status("ml/train", bound, waiting=0, start=1.0, last_failure=1.0)
    statuses = [first for what, _, first in outbox.puts if what == "podgroup-status"]
    assert statuses == [True, False]
    # a PodGroup that already carries a Scheduled condition (from a predecessor) is updated
    seen = {"status": {"conditions": [{"type": "Scheduled", "status": "False"}]}}
    reporter.group_status("ml/other", failing, waiting=0, start=1.0, last_failure=1.0, seen=seen)
    assert outbox.puts[-1] == ("podgroup-status", ("podgroup", "ml/other"), False)
