"""The gang restarter (RestartGang) against the fake API server: each member in
``MemberLoss.restart`` is deleted with its UID as a precondition and no grace-period override,
then gets a GangRestart event; a member already gone or recreated under its name is left
alone; retriable errors are retried, others reported; the fence stops every delete."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.core.decisions import MemberLoss, PodRef
from gangsched.kube.io.client import FencedError
from gangsched.kube.write.restarter import Deleted, GangRestarter
from tests.support.fakekube import FakeKube

PODS = "/api/v1/namespaces/ml/pods"


def _pod(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid}, "spec": {"nodeName": "n0"}}


def _loss(n: int = 3) -> MemberLoss:
    refs = tuple(PodRef(f"u{i}", "ml", f"w-{i}") for i in range(n))
    return MemberLoss("ml/train", 3, 4, "gang ml/train lost members", refs, refs)


def _rig(**kw: Any) -> tuple[FakeKube, GangRestarter]:
    kube = FakeKube()
    kube.seed(PODS, *(_pod(f"w-{i}", f"u{i}") for i in range(3)))
    return kube, GangRestarter(kube, retries=2, retry_delay=0.001, instance="test-1", **kw)


async def test_each_member_is_deleted_with_its_uid_then_gets_an_event() -> None:
    kube, restarter = _rig()
    results = await restarter.restart(_loss())
    assert [r.outcome for r in results] == [Deleted.DELETED] * 3
    assert kube.list_objects(PODS) == []
    delete = kube.sent("delete", "/w-1$")[0]
    assert delete.body == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u1"},
    }
    events = [r.body for r in kube.sent("create", "/events$")]
    assert sorted(e["regarding"]["name"] for e in events) == ["w-0", "w-1", "w-2"]
    e = events[0]
    assert (e["type"], e["reason"], e["action"]) == ("Warning", "GangRestart", "Deleting")
    assert e["note"].startswith("Deleted to restart gang ml/train (onMemberLoss RestartGang)")
    assert e["reportingInstance"] == "test-1"
    assert (restarter.deleted, restarter.failed) == (3, 0)


async def test_gone_replaced_retried_and_failed_members() -> None:
    kube, restarter = _rig()
    kube.remove(f"{PODS}/w-0")  # already gone
    kube.remove(f"{PODS}/w-1")
    kube.seed(PODS, _pod("w-1", "other"))  # recreated under the same name
    kube.fail("delete", "/w-2$", 503, times=1)  # retried, then deleted
    results = await restarter.restart(_loss())
    assert [r.outcome for r in results] == [Deleted.GONE, Deleted.REPLACED, Deleted.DELETED]
    assert kube.get_object(f"{PODS}/w-1") is not None  # the other pod is left alone
    assert len(kube.sent("delete", "/w-2$")) == 2
    assert [r.body["regarding"]["name"] for r in kube.sent("create", "/events$")] == ["w-2"]

    kube, restarter = _rig()
    kube.fail("delete", "/w-0$", 403, times=None)
    results = await restarter.restart(_loss(1))
    assert results[0].outcome is Deleted.FAILED and "403" in results[0].message
    assert restarter.failed == 1 and kube.get_object(f"{PODS}/w-0") is not None


async def test_a_fenced_restart_deletes_nothing() -> None:
    kube, restarter = _rig(fence=lambda: False)
    with pytest.raises(FencedError):
        await restarter.restart(_loss())
    assert kube.sent("delete") == [] and len(kube.list_objects(PODS)) == 3
