"""PodGroup status and pod conditions as the adapter writes them, without an API server: the
one rule in every writer, fenced writes, convergence by relist and resync, per-gang state that
goes away with its gang, and what ``kubectl gang`` shows."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Awaitable, Callable, Hashable, Iterator
from typing import Any

import pytest
from kubernetes_asyncio.client import Configuration

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, PodRef
from gangsched.core.scheduler import Scheduler
from gangsched.core.status import MemberCounts, group_status
from gangsched.kube.binder import BindResult
from gangsched.kube.client import ApiError, KubeClient
from gangsched.kube.membership import Source, resolve_membership
from gangsched.kube.podstatus import group_status_patch, write_pod_condition
from gangsched.kube.reporter import Reporter
from gangsched.kube.service import SchedulerService
from gangsched.kube.statuscontroller import StatusController
from gangsched.kube.translate import podgroup_from
from gangsched.kubectl_gang import gang_rows, render

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


# ---- the patch -----------------------------------------------------------------------------


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


def test_the_patch_carries_every_field_and_the_resource_version() -> None:
    st = group_status(2, MemberCounts(total=2, scheduled=2, running=1))
    patch = group_status_patch(_podgroup(), st, {"waiting": 0}, now="T1")
    assert patch is not None
    assert patch["metadata"] == {"resourceVersion": "41"}
    status = patch["status"]
    assert {k: status[k] for k in ("phase", "scheduled", "running", "message")} == {
        "phase": "Scheduled",
        "scheduled": 2,
        "running": 1,
        "message": "2 member(s) bound",
    }
    assert status["observedGeneration"] == 3
    [cond] = status["conditions"]
    assert cond == {
        "type": "Scheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "2 member(s) bound",
        "observedGeneration": 3,
        "lastTransitionTime": "T1",
    }
    written = _podgroup(status)
    assert group_status_patch(written, st, {"waiting": 0}, now="T2") is None
    # a new message keeps the transition time; a flip changes it
    more = group_status(2, MemberCounts(total=3, scheduled=3))
    again = group_status_patch(written, more, {"waiting": 0}, now="T2")
    assert again is not None and again["status"]["conditions"][0]["lastTransitionTime"] == "T1"
    flipped = group_status_patch(written, group_status(2, MemberCounts(total=2)), now="T3")
    assert flipped is not None and flipped["status"]["conditions"][0]["lastTransitionTime"] == "T3"


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


def _status_written(reporter: Reporter, key: str) -> Any:
    signature = reporter._group_status.get(key)
    assert isinstance(signature, tuple)
    return signature[0]


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
    extra = {"waiting": 0, "scheduleStartTime": None, "lastFailureTime": None}
    patch = group_status_patch(_pg("train", 2), written, extra, now="T")
    assert patch is not None
    body = {**_pg("train", 2), "status": patch["status"]}
    outbox.jobs.clear()
    crd("SYNC", {"items": [body]})
    assert outbox.jobs == [], "the object says what the scheduler would write: no write"
    garbled = {**body, "status": {**body["status"], "message": "garbled"}}
    crd("SYNC", {"items": [garbled]})
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
        "service.gang_source": len(service._gang_source),
        "service.implicit": len(service._implicit),
        "service.declarers": len(service._declarers),
        "service.applied": len(service._applied),
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
    controller = StatusController(
        Configuration(host="https://127.0.0.1:1"), lambda: KubeClient(Configuration())
    )
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
            controller.on_pod("ADDED", p)
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
            controller.on_pod("MODIFIED", p)
        for p in pods:
            service._on_pod("DELETED", p)
            controller.on_pod("DELETED", p)
        for pg in pgs:
            crd("DELETED", pg)
            controller.on_group("DELETED", pg)
        gc.collect()
        sizes = _sizes(service, reporter)
        sizes.update(
            {
                "controller.members": len(controller.members),
                "controller.key_of": len(controller._key_of),
                "controller.groups": len(controller.groups),
                "controller.pending": len(controller._pending),
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


# ---- the status controller -----------------------------------------------------------------


class ListingClient:
    def __init__(self, groups: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        self.groups, self.pods = groups, pods

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        items = self.pods if path == "/api/v1/pods" else self.groups
        return {"metadata": {}, "items": items}


def test_the_controller_resync_drops_a_member_whose_deletion_it_missed() -> None:
    async def run() -> StatusController:
        controller = StatusController(
            Configuration(host="https://127.0.0.1:1"), lambda: KubeClient(Configuration())
        )
        pg = _pg("train", 2)
        member = _pod("p0", {"gangsched.io/pod-group": "train"}, node="n0")
        controller.on_group("ADDED", pg)
        controller.on_pod("ADDED", member)
        assert controller.desired("ml/train") is not None
        st = controller.desired("ml/train")
        assert st is not None and st.counts.scheduled == 1
        # the pod is deleted while the watch is down: no DELETED event, the list lacks it
        controller._client = ListingClient([pg], [])  # type: ignore[assignment]
        await controller.resync()
        controller._client = None
        return controller

    controller = asyncio.run(run())
    st = controller.desired("ml/train")
    assert st is not None
    assert st.counts == MemberCounts()
    assert (st.scheduled, st.reason) == (False, "WaitingForMembers")
    assert controller.members == {} and controller._key_of == {}


def test_the_controller_uses_the_scheduler_rule_on_the_object() -> None:
    async def run() -> StatusController:
        controller = StatusController(
            Configuration(host="https://127.0.0.1:1"), lambda: KubeClient(Configuration())
        )
        status = {
            "conditions": [
                {"type": "Scheduled", "status": "True", "reason": "Scheduled", "message": "x"}
            ]
        }
        controller.on_group("ADDED", {**_pg("train", 3), "status": status})
        for i in range(2):
            controller.on_pod("ADDED", _pod(f"p{i}", {"gangsched.io/pod-group": "train"}, "n0"))
        return controller

    st = asyncio.run(run()).desired("ml/train")
    assert st is not None
    assert (st.scheduled, st.reason, st.message) == (
        False,
        "WaitingForMembers",
        "2 of 3 members exist; waiting for more pods",
    )


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
            condition="Unsupported: ml/ddp-2: spec.resourceClaims: not supported",
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
    assert refused.why == "ml/ddp-2: spec.resourceClaims: not supported"
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
    from gangsched.kube.translate import pod_from

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
    crd("SYNC", {"items": [_pg("train", 2)]})
    service._on_pod("ADDED", _pod("p0", {"gangsched.io/pod-group": "train"}, node="n0"))
    assert outbox.jobs == [] and reporter._group_status == {}


class FakePodGroups:
    """A PodGroup whose status someone else changes between our read and our write, once."""

    def __init__(self) -> None:
        self.obj = _podgroup()
        self.meddle = True
        self.patches: list[dict[str, Any]] = []

    async def get(self, path: str) -> dict[str, Any]:
        obj = {**self.obj, "metadata": dict(self.obj["metadata"])}
        if self.meddle:  # the status controller writes right after our read
            self.meddle = False
            self.obj["metadata"]["resourceVersion"] = "42"
        return obj

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        if body["metadata"]["resourceVersion"] != self.obj["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict")
        self.patches.append(body)
        return body


def test_a_status_write_on_a_changed_podgroup_reads_it_again() -> None:
    from gangsched.kube.podstatus import write_group_status

    client = FakePodGroups()
    st = group_status(2, MemberCounts(total=2, scheduled=2))
    asyncio.run(
        write_group_status(client, "/pg", st, {"waiting": 0}, lambda: "T")  # type: ignore[arg-type]
    )
    [patch] = client.patches
    assert patch["metadata"] == {"resourceVersion": "42"}
    assert patch["status"]["phase"] == "Scheduled"
