"""The upstream gang API (scheduling.k8s.io PodGroup, v1alpha2 and v1beta1) in the adapter: the
condition written back, and the whole service on the fake API server (three pods of minCount 4
wait and the PodGroup says why; the fourth binds all). How a PodGroup maps to a gang and how a
pod joins one: tests/api/test_workloadapi.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gangsched.api.workloadapi import V1ALPHA2, V1BETA1
from gangsched.core.status import GroupStatus, MemberCounts
from gangsched.kube.write.upstreamstatus import podgroup_condition
from gangsched_dev.devcluster.featuregates import apiserver_args
from tests.api.test_workloadapi import member, upstream_pg
from tests.kube.test_service import NODES, PODS, Rig, node, pod, until
from tests.support.fakekube import FakeKube


# ---- the condition ---------------------------------------------------------------------------
def status(scheduled: bool, reason: str, message: str) -> GroupStatus:
    phase = "Scheduled" if scheduled else "Pending"
    return GroupStatus(4, phase, scheduled, reason, message, MemberCounts(total=3))


def test_waiting_is_unschedulable_with_gangsched_s_reason() -> None:
    waiting = status(False, "WaitingForMembers", "3 of 4 members exist")
    cond = podgroup_condition(V1ALPHA2, waiting, generation=2, previous=None)
    assert cond is not None
    assert {k: cond[k] for k in ("type", "status", "reason", "message", "observedGeneration")} == {
        "type": "PodGroupScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "WaitingForMembers: 3 of 4 members exist",
        "observedGeneration": 2,
    }


def test_scheduled_is_true_and_never_turned_back() -> None:
    done = podgroup_condition(
        V1BETA1, status(True, "Scheduled", "4 member(s) bound"), generation=1, previous=None
    )
    assert done is not None
    assert (done["type"], done["status"], done["reason"]) == (
        "PodGroupInitiallyScheduled",
        "True",
        "Scheduled",
    )
    again = podgroup_condition(
        V1BETA1, status(False, "Unschedulable", "x"), generation=1, previous=done
    )
    assert again is None, "as kube-scheduler: a placed group does not regress to False"


def test_the_transition_time_stays_while_the_status_does() -> None:
    first = {"status": "False", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    cond = podgroup_condition(
        V1ALPHA2, status(False, "Unschedulable", "no room"), generation=1, previous=first
    )
    assert cond is not None and cond["lastTransitionTime"] == "2026-01-01T00:00:00Z"


# ---- the service on the fake API server ----------------------------------------------------
async def eventually(
    read: Callable[[], Awaitable[dict[str, Any]]], ok: Callable[[dict[str, Any]], bool]
) -> dict[str, Any]:
    """What ``read`` gives once ``ok`` says yes (within two seconds), else its last answer."""
    last: dict[str, Any] = {}
    for _ in range(400):
        last = await read()
        if ok(last):
            break
        await asyncio.sleep(0.005)
    return last


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    r = Rig(FakeKube())
    try:
        yield r
    finally:
        await r.stop()


@pytest.mark.parametrize("version", ["v1alpha2", "v1beta1"])
async def test_a_gang_of_the_upstream_api_waits_then_binds_whole(rig: Rig, version: str) -> None:
    kube = rig.kube
    collection = f"/apis/scheduling.k8s.io/{version}/namespaces/ml/podgroups"
    kind = "PodGroupScheduled" if version == "v1alpha2" else "PodGroupInitiallyScheduled"

    async def condition() -> dict[str, Any]:
        pg = await kube.get(f"{collection}/train")
        for c in (pg.get("status") or {}).get("conditions") or []:
            if c.get("type") == kind:
                return dict(c)
        return {}

    kube.seed(NODES, node("n0"))
    kube.seed(collection, upstream_pg("train", {"gang": {"minCount": 4}}, version))
    kube.seed(PODS, *(member(f"train-{i}", "train") for i in range(3)))
    rig.start()
    await until("three refused", lambda: len(rig.event_pods("FailedScheduling")) == 3)
    said = await eventually(condition, lambda c: c.get("status") == "False")
    assert said["reason"] == "Unschedulable" and "3 of 4" in said["message"], said
    assert rig.bindings() == []
    kube.seed(PODS, member("train-3", "train"))
    await until("all four bound", lambda: len(rig.bindings()) == 4)
    said = await eventually(condition, lambda c: c.get("status") == "True")
    assert said["status"] == "True" and said["reason"] == "Scheduled", said
    other = "v1beta1" if version == "v1alpha2" else "v1alpha2"
    assert kube.sent("patch", f"scheduling.k8s.io/{other}") == []


async def test_an_upstream_podgroup_s_condition_carries_the_start_forecast(rig: Rig) -> None:
    """A gang of the upstream API that waits for capacity a running pod holds until its
    activeDeadlineSeconds: the condition's message ends with when it is expected to start."""
    kube = rig.kube
    collection = "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups"

    async def condition() -> dict[str, Any]:
        pg = await kube.get(f"{collection}/train")
        for c in (pg.get("status") or {}).get("conditions") or []:
            if c.get("type") == "PodGroupScheduled":
                return dict(c)
        return {}

    kube.seed(NODES, node("n0", gpus=1))
    holder = pod("holder", gpus=1)
    holder["spec"]["activeDeadlineSeconds"] = 600
    kube.seed(PODS, holder)
    rig.start()
    await until("holder bound", lambda: rig.bindings() == ["holder"])
    kube.seed(collection, upstream_pg("train", {"gang": {"minCount": 1}}, "v1alpha2"))
    kube.seed(PODS, member("train-0", "train"))
    await until("train refused", lambda: "train-0" in rig.event_pods("FailedScheduling"))
    await rig.service.forecast_round()
    said = await eventually(condition, lambda c: "expected to start at" in c.get("message", ""))
    assert said["message"].endswith("after ml/holder ends (activeDeadlineSeconds 10m)"), said


# ---- the dev control plane -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("version", "gates", "runtime"),
    [
        ((1, 36), "GenericWorkload=true,GangScheduling=true,", "scheduling.k8s.io/v1alpha2=true"),
        ((1, 37), "GenericWorkload=true,TopologyAwareWorkloadScheduling", "v1beta1=true"),
    ],
)
def test_the_control_plane_serves_the_api_of_its_version(
    version: tuple[int, int], gates: str, runtime: str
) -> None:
    args = apiserver_args(version)
    assert any(a.startswith("--feature-gates=") and gates in a for a in args), args
    assert any(a.startswith("--runtime-config=") and runtime in a for a in args), args


def test_gang_scheduling_is_not_named_where_it_no_longer_exists() -> None:
    assert not any("GangScheduling" in a for a in apiserver_args((1, 37)))
    assert apiserver_args((1, 34)) == [] and apiserver_args(None) == []
