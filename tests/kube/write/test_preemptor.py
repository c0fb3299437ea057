"""The preemptor against the fake API server: each victim is marked (a DisruptionTarget
condition), deleted with its UID as a precondition and no grace-period override, and gets a
Preempted event once the delete is accepted; a victim already gone or recreated under its name
is left alone; retriable errors are retried; the fence stops every write; the preemptor's pods
get status.nominatedNodeName."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gangsched.core.decisions import Binding, Evict, PodRef, Preempt, Victim
from gangsched.kube.io.client import FencedError
from gangsched.kube.write.preemptor import Outcome, Preemptor
from tests.kube.test_service import NODES, PODGROUPS, members, node, podgroup, until
from tests.kube.test_service import Rig as ServiceRig
from tests.support.fakekube import FakeKube

PODS = "/api/v1/namespaces/ml/pods"
EVENTS = "/apis/events.k8s.io/v1/namespaces/ml/events"


def _pod(name: str, uid: str, node: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "gangsched"}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "uid": uid}, "spec": spec}


def _decision(victims: int = 2, members: int = 2, gang: str = "ml/high") -> Preempt:
    return Preempt(
        gang=gang,
        priority=1000,
        nominations=tuple(
            Binding(PodRef(f"h{i}", "ml", f"high-{i}"), f"n{i}") for i in range(members)
        ),
        victims=tuple(
            Victim(PodRef(f"l{i}", "ml", f"low-{i}"), f"n{i}", 10, "ml/low") for i in range(victims)
        ),
        deadline=0.0,
        message="preempting 2 pods of ml/low",
    )


class Rig:
    def __init__(self, victims: int = 2, members: int = 2, **kw: Any) -> None:
        self.kube = FakeKube()
        self.kube.seed(PODS, *(_pod(f"low-{i}", f"l{i}", f"n{i}") for i in range(victims)))
        self.kube.seed(PODS, *(_pod(f"high-{i}", f"h{i}") for i in range(members)))
        kw = {"retries": 2, "retry_delay": 0.001, "instance": "test-1", **kw}
        self.preemptor = Preemptor(self.kube, **kw)

    def pod(self, name: str) -> dict[str, Any] | None:
        return self.kube.get_object(f"{PODS}/{name}")

    def order(self, name: str) -> list[str]:
        """What was sent about pod ``name``, in order: status patch, delete, event."""
        out = []
        for r in self.kube.requests:
            if r.path == f"{PODS}/{name}/status" and r.verb == "patch":
                out.append("status")
            elif r.path == f"{PODS}/{name}" and r.verb == "delete":
                out.append("delete")
            elif r.path == EVENTS and r.body["regarding"]["name"] == name:
                out.append(f"event {r.body['reason']}")
        return out


async def test_each_victim_is_marked_then_deleted_then_gets_a_preempted_event() -> None:
    rig = Rig()
    marked: dict[str, dict[str, Any]] = {}

    def keep(name: str) -> Callable[[object], None]:
        def run(_: object) -> None:  # the pod as it was just before its delete
            pod = rig.pod(name)
            assert pod is not None
            marked[name] = pod

        return run

    for i in range(2):
        rig.kube.before("delete", f"/low-{i}$", keep(f"low-{i}"))
    result = await rig.preemptor.preempt(_decision())
    assert [r.outcome for r in result.victims] == [Outcome.EVICTED] * 2
    for i in range(2):
        assert rig.order(f"low-{i}") == ["status", "delete", "event Preempted"]
        assert rig.pod(f"low-{i}") is None
        [cond] = marked[f"low-{i}"]["status"]["conditions"]
        assert cond["type"] == "DisruptionTarget" and cond["status"] == "True"
        assert cond["reason"] == "PreemptionByScheduler"
        assert cond["message"] == (
            "gangsched: preempting to accommodate a higher priority gang ml/high (priority 1000)"
        )
        assert cond["lastTransitionTime"]
    # the status patch names the victim's UID; the delete carries it as a precondition and
    # leaves the grace period to the pod
    patch = rig.kube.sent("patch", "/low-0/status$")[0]
    assert patch.body["metadata"] == {"uid": "l0"}
    assert patch.content_type == "application/strategic-merge-patch+json"
    delete = rig.kube.sent("delete", "/low-1$")[0]
    assert delete.body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "l1"},
    }
    event = rig.kube.sent("create", "/events$")[0].body
    assert (event["type"], event["reason"], event["action"]) == (
        "Normal",
        "Preempted",
        "Preempting",
    )
    assert event["note"] == "Preempted by gang ml/high (priority 1000) on node n0"
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "low-0",
        "uid": "l0",
    }
    assert event["reportingController"] == "gangsched.io/gangsched"
    assert event["reportingInstance"] == "test-1"
    assert (rig.preemptor.evicted, rig.preemptor.failed) == (2, 0)


async def test_the_preemptor_pods_get_their_nominated_node() -> None:
    rig = Rig()
    result = await rig.preemptor.preempt(_decision())
    assert result.nominated == 2
    for i in range(2):
        pod = rig.pod(f"high-{i}")
        assert pod is not None and pod["status"]["nominatedNodeName"] == f"n{i}"
        assert "nodeName" not in pod["spec"]
    # nominations go out before any victim is touched: the gang cannot bind before them
    touched = [i for i, r in enumerate(rig.kube.requests) if "/low-" in r.path]
    nominated = [i for i, r in enumerate(rig.kube.requests) if "/high-" in r.path]
    assert max(nominated) < min(touched)


async def test_a_nomination_can_be_cleared() -> None:
    rig = Rig()
    await rig.preemptor.preempt(_decision())
    assert await rig.preemptor.clear_nomination(PodRef("h0", "ml", "high-0")) == 1
    pod = rig.pod("high-0")
    assert pod is not None and "nominatedNodeName" not in pod["status"]


async def test_a_victim_already_gone_needs_nothing_more() -> None:
    rig = Rig()
    rig.kube.remove(f"{PODS}/low-0")
    result = await rig.preemptor.preempt(_decision())
    assert [r.outcome for r in result.victims] == [Outcome.GONE, Outcome.EVICTED]
    assert rig.order("low-0") == ["status"]  # 404 on the mark: no delete, no event
    assert rig.order("low-1") == ["status", "delete", "event Preempted"]


async def test_a_victim_deleted_between_mark_and_delete_is_gone() -> None:
    rig = Rig(1, 1)

    def gone(_: object) -> None:
        rig.kube.remove(f"{PODS}/low-0")

    rig.kube.before("delete", "/low-0$", gone)
    [result] = (await rig.preemptor.preempt(_decision(1, 1))).victims
    assert result.outcome is Outcome.GONE
    assert rig.order("low-0") == ["status", "delete"], "no event for a delete that was not ours"


async def test_a_pod_recreated_under_the_victims_name_is_left_alone() -> None:
    rig = Rig(1, 1)
    rig.kube.remove(f"{PODS}/low-0")
    rig.kube.seed(PODS, _pod("low-0", "l0-new", "n0"))
    [result] = (await rig.preemptor.preempt(_decision(1, 1))).victims
    assert result.outcome is Outcome.REPLACED
    pod = rig.pod("low-0")
    assert pod is not None and pod["metadata"]["uid"] == "l0-new"
    assert "conditions" not in (pod.get("status") or {}), "the new pod is not marked"
    assert rig.order("low-0") == ["status"]


async def test_a_pod_recreated_between_mark_and_delete_is_not_deleted() -> None:
    """The delete's UID precondition fails (409): the new pod under the name stays."""
    rig = Rig(1, 1)

    def recreate(_: object) -> None:
        rig.kube.remove(f"{PODS}/low-0")
        rig.kube.seed(PODS, _pod("low-0", "l0-new", "n0"))

    rig.kube.before("delete", "/low-0$", recreate)
    [result] = (await rig.preemptor.preempt(_decision(1, 1))).victims
    assert result.outcome is Outcome.REPLACED
    assert "the UID in the precondition (l0) does not match the UID in record" in result.message
    pod = rig.pod("low-0")
    assert pod is not None and pod["metadata"]["uid"] == "l0-new"
    assert rig.order("low-0") == ["status", "delete"]


@pytest.mark.parametrize("status", [0, 429, 500, 503])
async def test_retriable_errors_are_retried(status: int) -> None:
    rig = Rig(1, 1)
    rig.kube.fail("patch", "/low-0/status$", status)
    rig.kube.fail("delete", "/low-0$", status, times=2)
    [result] = (await rig.preemptor.preempt(_decision(1, 1))).victims
    assert result.outcome is Outcome.EVICTED
    assert rig.order("low-0") == ["status"] * 2 + ["delete"] * 3 + ["event Preempted"]


async def test_a_victim_that_cannot_be_deleted_is_reported_failed() -> None:
    rig = Rig(2, 1)
    rig.kube.fail("delete", "/low-0$", 503, times=None)
    rig.kube.fail("patch", "/low-1/status$", 403, times=None)
    result = await rig.preemptor.preempt(_decision(2, 1))
    assert [r.outcome for r in result.victims] == [Outcome.FAILED, Outcome.FAILED]
    assert result.victims[0].message.startswith("deleting ml/low-0: HTTP 503")
    assert result.victims[1].message.startswith("marking ml/low-1: HTTP 403")
    assert rig.pod("low-0") is not None and rig.pod("low-1") is not None
    assert rig.order("low-1") == ["status"], "403 is not retried, and nothing is deleted"
    assert rig.kube.sent("create", "/events$") == []
    assert (rig.preemptor.evicted, rig.preemptor.failed) == (0, 2)


async def test_a_fenced_preemptor_sends_nothing() -> None:
    rig = Rig(fence=lambda: False)
    with pytest.raises(FencedError):
        await rig.preemptor.preempt(_decision())
    assert rig.kube.requests == [] and rig.kube.fenced == []
    assert rig.preemptor.fenced == 1
    assert all(rig.pod(f"low-{i}") is not None for i in range(2))


async def test_a_fence_that_closes_mid_way_stops_the_deletes() -> None:
    """Deposed between the marks and the deletes: the marks went out, no delete does."""
    sure = [True]
    rig = Rig(fence=lambda: sure[0])

    def deposed(_: object) -> None:
        sure[0] = False

    rig.kube.before("patch", "/low-0/status$", deposed)
    with pytest.raises(FencedError):
        await rig.preemptor.preempt(_decision())
    assert rig.kube.sent("delete") == []
    assert {r.verb for r in rig.kube.fenced} <= {"patch", "delete"}
    assert all(rig.pod(f"low-{i}") is not None for i in range(2))
    assert rig.kube.sent("create", "/events$") == []


async def test_every_victim_is_marked_before_any_is_deleted() -> None:
    """The marks are the durable record of the decision: all of them are written first."""
    rig = Rig(4, 1)
    await rig.preemptor.preempt(_decision(4, 1))
    verbs = [
        r.verb
        for r in rig.kube.requests
        if r.path.startswith(f"{PODS}/low-") and r.verb in ("patch", "delete")
    ]
    assert verbs == ["patch"] * 4 + ["delete"] * 4


async def test_a_victim_whose_mark_failed_is_not_deleted_and_the_others_are() -> None:
    rig = Rig(2, 1)
    rig.kube.fail("patch", "/low-1/status$", 403, times=99)
    result = await rig.preemptor.preempt(_decision(2, 1))
    assert [r.outcome for r in result.victims] == [Outcome.EVICTED, Outcome.FAILED]
    assert rig.pod("low-0") is None and rig.pod("low-1") is not None


async def test_an_eviction_carried_out_later_keeps_existing_marks_and_marks_the_rest() -> None:
    rig = Rig(3, 0)
    mark = "gangsched: preempting to accommodate a higher priority gang ml/high (priority 1000)"
    d = Evict(
        "ml/low",
        tuple(
            Victim(PodRef(f"l{i}", "ml", f"low-{i}"), f"n{i}", 10, "ml/low", marked=i == 0)
            for i in range(3)
        ),
        f"carrying out an eviction decided earlier ({mark}): evicting 3 pod(s) of gang ml/low",
    )
    results = await rig.preemptor.evict(d)
    assert [r.outcome for r in results] == [Outcome.EVICTED] * 3
    assert rig.order("low-0") == ["delete", "event Preempted"]
    for i in (1, 2):
        assert rig.order(f"low-{i}") == ["status", "delete", "event Preempted"]
    patch = rig.kube.sent("patch", "/low-1/status$")[0].body
    [cond] = patch["status"]["conditions"]
    assert cond["reason"] == "PreemptionByScheduler"
    assert cond["message"] == f"gangsched: {d.message}"
    note = rig.kube.sent("create", "/events$")[0].body["note"]
    assert note.startswith("carrying out an eviction decided earlier") and " on node n" in note


async def test_a_fenced_eviction_sends_nothing() -> None:
    rig = Rig(1, 0, fence=lambda: False)
    d = Evict("ml/low", (Victim(PodRef("l0", "ml", "low-0"), "n0", 10, "ml/low"),), "why")
    with pytest.raises(FencedError):
        await rig.preemptor.evict(d)
    assert rig.kube.requests == [] and rig.preemptor.fenced == 1


async def test_a_plain_pod_preemptor_is_named_as_a_pod() -> None:
    rig = Rig(1, 1)
    d = _decision(1, 1, gang="pod:h0")
    await rig.preemptor.preempt(d)
    event = rig.kube.sent("create", "/events$")[0].body
    assert event["note"] == "Preempted by pod ml/high-0 (priority 1000) on node n0"


# ---- the service carries a Preempt out, and the preemptor binds once the victims are gone -----
async def test_the_service_evicts_a_low_gang_whole_then_binds_the_high_one() -> None:
    kube = FakeKube()
    rig = ServiceRig(kube)
    kube.seed(NODES, node("n0", gpus=4))
    kube.seed(PODGROUPS, podgroup("low", 4), podgroup("high", 4))
    low = members("low", 4)
    for p in low:
        p["spec"].update(priority=10, nodeName="n0")
        p["status"]["phase"] = "Running"
    kube.seed(PODS, *low)
    rig.start()
    try:
        await until("ready", rig.service.ready.is_set)
        high = members("high", 4)
        for p in high:
            p["spec"]["priority"] = 1000
        kube.seed(PODS, *high)
        await until("the high gang bound", lambda: len(rig.bindings()) == 4, timeout=5.0)
        assert sorted(rig.bindings()) == [f"high-{i}" for i in range(4)]
        assert all(rig.node_of(f"high-{i}") == "n0" for i in range(4))
        assert [p["metadata"]["name"] for p in kube.list_objects(PODS)] == [
            f"high-{i}" for i in range(4)
        ], "the low gang was deleted whole"
        deletes = sorted(r.path.rsplit("/", 1)[-1] for r in kube.sent("delete"))
        assert deletes == [f"low-{i}" for i in range(4)]
        marks = kube.sent("patch", "/low-./status$")
        assert len(marks) == 4
        assert all(
            m.body["status"]["conditions"][0]["reason"] == "PreemptionByScheduler" for m in marks
        )
        nominations = [
            r.body["status"]["nominatedNodeName"]
            for r in kube.sent("patch", "/high-./status$")
            if "nominatedNodeName" in r.body["status"]
        ]
        assert nominations == ["n0"] * 4
        await until("the events", lambda: len(rig.event_pods("Preempting")) == 4)
        assert rig.event_pods("Preempted") == {f"low-{i}" for i in range(4)}
        note = rig.events("Preempting")[0]["note"]
        assert note.startswith("preempting 4 pod(s) of lower priority (ml/low) for gang ml/high")
        evicted = 'gangsched_preemption_victims_total{result="evicted"} 4.0'
        await until("the victims counted", lambda: evicted in rig.service.metrics.render().decode())
        assert "gangsched_preemptions_total 1.0" in rig.service.metrics.render().decode()
        # the nominations went out before the bindings (which clear them in a real API server)
        requests = kube.requests
        last_nomination = max(
            i
            for i, r in enumerate(requests)
            if "/high-" in r.path and "nominatedNodeName" in (r.body or {}).get("status", {})
        )
        first_binding = min(i for i, r in enumerate(requests) if r.path.endswith("/binding"))
        assert last_nomination < first_binding
    finally:
        await rig.stop()


async def test_a_hold_given_back_clears_the_nominations() -> None:
    """The victims could not be deleted (403): at the hold's deadline the core gives the
    capacity back, and the service clears the nominations it wrote."""
    kube = FakeKube()
    rig = ServiceRig(kube)
    kube.seed(NODES, node("n0", gpus=2))
    kube.seed(PODGROUPS, podgroup("low", 2), podgroup("high", 2))
    low = members("low", 2)
    for p in low:
        p["spec"].update(priority=10, nodeName="n0")
        p["status"]["phase"] = "Running"
    kube.seed(PODS, *low)
    kube.fail("delete", "/low-", 403, times=None)
    rig.start()
    try:
        await until("ready", rig.service.ready.is_set)
        high = members("high", 2)
        for p in high:
            p["spec"]["priority"] = 1000
        kube.seed(PODS, *high)
        uids = [str(o["metadata"]["uid"]) for o in kube.list_objects(PODS)]
        high_uids = uids[:2]  # listed by name: high-0, high-1, low-0, low-1

        def core_nominated() -> bool:
            pods = [rig.core.pod(uid) for uid in high_uids]
            return all(p is not None and p.nominated_node == "n0" for p in pods)

        await until("the nominations seen by the watch", core_nominated)
        failed = 'gangsched_preemption_victims_total{result="failed"} 2.0'
        await until("the victims failed", lambda: failed in rig.service.metrics.render().decode())
        assert rig.bindings() == []
        rig.clock.advance(rig.core.config.preemption_hold_seconds + 1)
        rig.service.poke()

        def cleared() -> set[str]:
            return {
                r.path.rsplit("/", 2)[-2]
                for r in kube.sent("patch", "/high-./status$")
                if "nominatedNodeName" in r.body["status"]
                and r.body["status"]["nominatedNodeName"] is None
            }

        await until("the nominations cleared", lambda: cleared() == {"high-0", "high-1"})
        await until(
            "the release said", lambda: rig.event_pods("GangReleased") == {"high-0", "high-1"}
        )
        assert rig.bindings() == []
        assert {o["metadata"]["name"] for o in kube.list_objects(PODS)} >= {"low-0", "low-1"}
    finally:
        await rig.stop()
