"""The binder against the fake API server: a gang's bindings with the pod's UID as a
precondition; retries on retriable errors; a 409 read back ("we bound it" after a lost answer,
or someone else did, or the pod was recreated); the fence that stops sends; and PreBind's
volume writes, read from the API server, before any pod is bound."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from gangsched.core.decisions import BindGang, Binding, ClaimBinding, PodRef
from gangsched.core.volumes import ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE
from gangsched.kube.io.client import FencedError
from gangsched.kube.write.binder import Binder
from tests.support.fakekube import FakeKube, Request

PODS = "/api/v1/namespaces/ml/pods"
CLAIMS = "/api/v1/namespaces/ml/persistentvolumeclaims"
VOLUMES = "/api/v1/persistentvolumes"


def _pod(i: int, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": f"p{i}", "uid": f"u{i}"}, "spec": spec}


def _gang(n: int, *claims: ClaimBinding, node: str = "n1") -> BindGang:
    return BindGang(
        "ml/g", tuple(Binding(PodRef(f"u{i}", "ml", f"p{i}"), node) for i in range(n)), claims
    )


class Rig:
    def __init__(self, pods: int = 4, **kw: Any) -> None:
        self.kube = FakeKube()
        self.kube.seed(PODS, *(_pod(i) for i in range(pods)))
        self.failures: dict[str, str] = {}
        kw = {"retries": 2, "retry_delay": 0.001, "volume_poll": 0.001, **kw}
        kw.setdefault("volume_bind_timeout", 2.0)
        self.binder = Binder(self.kube, self.failures.__setitem__, **kw)

    def node_of(self, i: int) -> str | None:
        pod = self.kube.get_object(f"{PODS}/p{i}")
        assert pod is not None
        node: str | None = pod["spec"].get("nodeName")
        return node

    def bindings(self) -> list[str]:
        return [r.path.split("/")[-2] for r in self.kube.sent("create", "/binding$")]


async def test_a_gang_is_bound_whole_each_binding_with_the_pods_uid() -> None:
    rig = Rig()
    results = await rig.binder.bind_gang(_gang(4))
    assert [r.ok for r in results] == [True] * 4
    assert [rig.node_of(i) for i in range(4)] == ["n1"] * 4
    body = rig.kube.sent("create", "/p2/binding$")[0].body
    assert body["metadata"] == {"name": "p2", "namespace": "ml", "uid": "u2"}
    assert body["target"] == {"apiVersion": "v1", "kind": "Node", "name": "n1"}
    assert (rig.binder.bound, rig.binder.failed, rig.failures) == (4, 0, {})


async def test_a_lost_answer_retried_into_a_conflict_is_read_back_as_ours() -> None:
    rig = Rig(1)
    rig.kube.fail("create", "/p0/binding$", 0, applied=True)  # bound, the answer lost
    [result] = await rig.binder.bind_gang(_gang(1))
    assert result.ok and rig.failures == {}
    assert [r.verb for r in rig.kube.requests] == ["create", "create", "get"]


async def test_a_pod_someone_else_bound_fails_alone_and_the_rest_stay_bound() -> None:
    rig = Rig(3)
    rig.kube.seed(PODS, _pod(1, nodeName="n9"))
    results = await rig.binder.bind_gang(_gang(3))
    assert [r.ok for r in results] == [True, False, True]
    assert set(rig.failures) == {"u1"}
    assert rig.failures["u1"].startswith("already assigned to n9: HTTP 409")
    assert [rig.node_of(i) for i in range(3)] == ["n1", "n9", "n1"], "pods cannot be unbound"
    assert (rig.binder.bound, rig.binder.failed) == (2, 1)


async def test_a_pod_recreated_under_the_same_name_is_never_bound() -> None:
    rig = Rig(1)
    rig.kube.seed(PODS, {"metadata": {"name": "p0", "uid": "u0-new"}, "spec": {}})
    [result] = await rig.binder.bind_gang(_gang(1))
    assert not result.ok and rig.node_of(0) is None
    assert rig.failures["u0"].startswith("pod is gone: recreated under the same name")


async def test_a_pod_being_deleted_says_so() -> None:
    rig = Rig(1)
    rig.kube.seed(PODS, {**_pod(0), "metadata": {**_pod(0)["metadata"], "deletionTimestamp": "x"}})
    [result] = await rig.binder.bind_gang(_gang(1))
    assert not result.ok
    assert "is being deleted" in rig.failures["u0"]
    assert "already assigned" not in rig.failures["u0"]


async def test_a_deleted_pod_is_gone_without_retrying() -> None:
    rig = Rig(1)
    rig.kube.remove(f"{PODS}/p0")
    [result] = await rig.binder.bind_gang(_gang(1))
    assert not result.ok and rig.failures["u0"].startswith("pod is gone: HTTP 404")
    assert len(rig.kube.requests) == 1


@pytest.mark.parametrize("status", [0, 429, 500, 503])
async def test_retriable_errors_are_retried(status: int) -> None:
    rig = Rig(1)
    rig.kube.fail("create", "/binding$", status, times=2)
    [result] = await rig.binder.bind_gang(_gang(1))
    assert result.ok and len(rig.bindings()) == 3


async def test_retries_exhausted_fail_the_pod_and_non_retriable_errors_are_not_retried() -> None:
    rig = Rig(2)
    rig.kube.fail("create", "/p0/binding$", 503, times=None)
    rig.kube.fail("create", "/p1/binding$", 403, times=None)
    results = await rig.binder.bind_gang(_gang(2))
    assert [r.ok for r in results] == [False, False]
    assert rig.bindings().count("p0") == 3, "one try and two retries"
    assert rig.bindings().count("p1") == 1
    assert "HTTP 503" in rig.failures["u0"] and "HTTP 403" in rig.failures["u1"]


async def test_once_the_fence_says_no_nothing_more_is_sent_and_nothing_reported() -> None:
    asked: list[int] = []

    def fence() -> bool:  # the gang's check and two bindings pass, then no
        asked.append(1)
        return len(asked) <= 3

    rig = Rig(4, fence=fence)
    with pytest.raises(FencedError):
        await rig.binder.bind_gang(_gang(4))
    assert len(rig.bindings()) == 2 and len(rig.kube.fenced) == 2
    assert rig.failures == {} and rig.binder.fenced == 1
    with pytest.raises(FencedError):  # and stays so
        await rig.binder.bind_gang(_gang(1))
    assert len(rig.bindings()) == 2


# ---- PreBind -------------------------------------------------------------------------------

STATIC = ClaimBinding("ml", "static", "c-static", "n1", "pv1")
DYNAMIC = ClaimBinding("ml", "dyn", "c-dyn", "n1")


def _claim(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": uid}, "spec": {"storageClassName": "fast"}}


class Volumes(Rig):
    """Pods, a claim for a static volume and one to provision, and a PV controller that binds
    a claim ``bind_after`` seconds after PreBind wrote it (never when None)."""

    def __init__(self, bind_after: float | None = 0.005, **kw: Any) -> None:
        super().__init__(2, **kw)
        self.kube.seed(CLAIMS, _claim("static", "c-static"), _claim("dyn", "c-dyn"))
        self.kube.seed(VOLUMES, {"metadata": {"name": "pv1"}, "spec": {"capacity": {}}})
        self.bind_after = bind_after
        self.kube.before("patch", "/persistentvolumes/pv1$", self._controller("static", "pv1"))
        self.kube.before("patch", "/persistentvolumeclaims/dyn$", self._controller("dyn", "pv-dyn"))

    def _controller(self, claim: str, volume: str) -> Callable[[Request], None]:
        def bind_later(_: Request) -> None:
            if self.bind_after is not None:
                asyncio.get_running_loop().call_later(self.bind_after, bind)

        def bind() -> None:
            obj = self.kube.get_object(f"{CLAIMS}/{claim}")
            assert obj is not None
            obj["spec"]["volumeName"] = volume
            obj["metadata"].setdefault("annotations", {})[ANN_BIND_COMPLETED] = "yes"
            self.kube.seed(CLAIMS, obj)

        return bind_later

    def writes(self) -> list[tuple[str, str]]:
        return [(r.verb, r.path) for r in self.kube.requests if r.verb != "get"]


async def test_prebind_writes_volumes_then_waits_for_the_claims_then_binds() -> None:
    rig = Volumes()
    results = await rig.binder.bind_gang(_gang(2, STATIC, DYNAMIC))
    assert [r.ok for r in results] == [True, True], rig.failures
    assert rig.writes() == [
        ("patch", f"{VOLUMES}/pv1"),
        ("patch", f"{CLAIMS}/dyn"),
        ("create", f"{PODS}/p0/binding"),
        ("create", f"{PODS}/p1/binding"),
    ]
    pv = rig.kube.get_object(f"{VOLUMES}/pv1")
    assert pv is not None
    assert pv["spec"]["claimRef"] == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "namespace": "ml",
        "name": "static",
        "uid": "c-static",
    }
    assert pv["metadata"]["annotations"] == {ANN_BOUND_BY_CONTROLLER: "yes"}
    pv_patch: Request = rig.kube.sent("patch", "/pv1$")[0]
    assert pv_patch.body["metadata"]["resourceVersion"], "written at the version read"
    claim = rig.kube.get_object(f"{CLAIMS}/dyn")
    assert claim is not None and claim["metadata"]["annotations"][ANN_SELECTED_NODE] == "n1"


async def test_a_volume_changed_between_read_and_write_binds_no_pod() -> None:
    rig = Volumes()

    def someone_else_writes(_: Request) -> None:
        pv = rig.kube.get_object(f"{VOLUMES}/pv1")
        assert pv is not None
        pv["metadata"]["labels"] = {"touched": "yes"}
        rig.kube.seed(VOLUMES, pv)

    rig.kube.before("patch", "/pv1$", someone_else_writes)
    results = await rig.binder.bind_gang(_gang(2, STATIC))
    assert not any(r.ok for r in results)
    assert set(rig.failures) == {"u0", "u1"}
    assert "binding persistentvolume" in rig.failures["u0"] and "HTTP 409" in rig.failures["u0"]
    assert rig.bindings() == []


async def test_a_claim_recreated_under_the_same_name_is_not_provisioned() -> None:
    rig = Volumes()
    rig.kube.seed(CLAIMS, _claim("dyn", "c-dyn-new"))
    await rig.binder.bind_gang(_gang(2, DYNAMIC))
    assert "HTTP 422" in rig.failures["u0"] and "selecting node n1" in rig.failures["u0"]
    claim = rig.kube.get_object(f"{CLAIMS}/dyn")
    assert claim is not None and "annotations" not in claim["metadata"]
    assert rig.bindings() == []


async def test_claims_never_bound_time_out_and_no_pod_is_bound() -> None:
    rig = Volumes(bind_after=None, volume_bind_timeout=0.05)
    results = await rig.binder.bind_gang(_gang(2, DYNAMIC))
    assert not any(r.ok for r in results)
    assert rig.failures["u1"].startswith("binding volumes: timed out after 0.05s")
    assert rig.bindings() == []


async def test_a_claim_deleted_while_waiting_fails_the_gang_early() -> None:
    rig = Volumes(bind_after=None, volume_bind_timeout=5.0)

    def delete_soon(_: Request) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, lambda: rig.kube.remove(f"{CLAIMS}/dyn"))

    rig.kube.before("patch", "/persistentvolumeclaims/dyn$", delete_soon)
    await rig.binder.bind_gang(_gang(2, DYNAMIC))
    assert rig.failures["u0"] == 'binding volumes: persistentvolumeclaim "ml/dyn" was deleted'
    assert rig.bindings() == []
