"""The fake API server itself: the few semantics the adapters' tests rely on, checked against
what kube-apiserver does, so a test that passes on the fake means something."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import ApiError
from tests.support.fakekube import FakeKube

PODS = "/api/v1/namespaces/ml/pods"


def _pod(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def test_the_fake_is_a_kube_api() -> None:
    api: KubeApi = FakeKube()
    assert api is not None


async def test_create_get_and_the_errors_of_the_api_server() -> None:
    kube = FakeKube()
    made = await kube.post(PODS, _pod("a", nodeName=""))
    assert made["metadata"]["namespace"] == "ml" and made["metadata"]["uid"]
    with pytest.raises(ApiError) as taken:
        await kube.post(PODS, _pod("a"))
    assert taken.value.status == 409 and not taken.value.retriable
    with pytest.raises(ApiError) as missing:
        await kube.get(f"{PODS}/b")
    assert missing.value.status == 404 and 'pods "b" not found' in str(missing.value)
    assert [(r.verb, r.path) for r in kube.requests] == [
        ("create", PODS),
        ("create", PODS),
        ("get", f"{PODS}/b"),
    ]


async def test_patches_with_preconditions() -> None:
    kube = FakeKube()
    [pod] = kube.seed(PODS, {**_pod("a"), "status": {"conditions": [{"type": "Ready"}]}})
    path = f"{PODS}/a"
    rv = pod["metadata"]["resourceVersion"]
    cond = {"type": "PodScheduled", "status": "False"}
    out = await kube.strategic_patch(
        f"{path}/status", {"metadata": {"resourceVersion": rv}, "status": {"conditions": [cond]}}
    )
    assert [c["type"] for c in out["status"]["conditions"]] == ["Ready", "PodScheduled"]
    with pytest.raises(ApiError) as stale:  # the same resourceVersion again: changed since
        await kube.strategic_patch(f"{path}/status", {"metadata": {"resourceVersion": rv}})
    assert stale.value.status == 409
    with pytest.raises(ApiError) as other:
        await kube.merge_patch(path, {"metadata": {"uid": "someone-else"}})
    assert other.value.status == 422 and "immutable" in str(other.value)
    await kube.merge_patch(path, {"metadata": {"labels": {"a": "b"}}, "status": {"x": 1}})
    now = kube.get_object(path)
    assert now is not None and now["metadata"]["labels"] == {"a": "b"}
    assert "x" not in now["status"], "a write to the object leaves its status alone"


async def test_strategic_merge_is_refused_for_custom_resources() -> None:
    kube = FakeKube()
    groups = "/apis/gangsched.io/v1alpha1/namespaces/ml/podgroups"
    kube.seed(groups, {"metadata": {"name": "g"}, "spec": {"minMember": 2}})
    with pytest.raises(ApiError) as refused:
        await kube.strategic_patch(f"{groups}/g/status", {"status": {}})
    assert refused.value.status == 415


async def test_server_side_apply_owns_fields_per_manager() -> None:
    kube = FakeKube()
    groups = "/apis/gangsched.io/v1alpha1/namespaces/ml/podgroups"
    kube.seed(groups, {"metadata": {"name": "g"}, "spec": {"minMember": 2}})
    path = f"{groups}/g/status"

    def status(**st: Any) -> dict[str, Any]:
        return {
            "apiVersion": "gangsched.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ml"},
            "status": st,
        }

    a = {"type": "Scheduled", "status": "False", "reason": "Unschedulable"}
    await kube.apply(path, status(phase="Pending", conditions=[a]), field_manager="scheduler")
    await kube.apply(path, status(running=1), field_manager="controller")
    out = await kube.apply(path, status(phase="Running"), field_manager="scheduler")
    # the scheduler's condition is gone (it no longer sends it); the controller's field stays
    assert out["status"] == {"phase": "Running", "running": 1}
    assert out["spec"] == {"minMember": 2}
    with pytest.raises(ApiError) as missing:
        await kube.apply(f"{groups}/h/status", status(), field_manager="scheduler")
    assert missing.value.status in (400, 404)


async def test_binding_checks_as_the_api_server_does() -> None:
    kube = FakeKube()
    [pod] = kube.seed(PODS, _pod("a"), _pod("gated", schedulingGates=[{"name": "x"}]))[:1]
    uid = pod["metadata"]["uid"]

    def binding(name: str, uid: str, node: str) -> dict[str, Any]:
        meta = {"name": name, "namespace": "ml", "uid": uid}
        return {"kind": "Binding", "metadata": meta, "target": {"kind": "Node", "name": node}}

    with pytest.raises(ApiError) as recreated:
        await kube.post(f"{PODS}/a/binding", binding("a", "old-uid", "n1"))
    assert recreated.value.status == 409 and "UID in precondition" in str(recreated.value)
    await kube.post(f"{PODS}/a/binding", binding("a", uid, "n1"))
    with pytest.raises(ApiError) as again:
        await kube.post(f"{PODS}/a/binding", binding("a", uid, "n2"))
    assert again.value.status == 409 and 'already assigned to node "n1"' in str(again.value)
    with pytest.raises(ApiError) as gated:
        await kube.post(f"{PODS}/gated/binding", binding("gated", "", "n1"))
    assert gated.value.status == 409
    bound = kube.get_object(f"{PODS}/a")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"
    with pytest.raises(ApiError) as gone:
        await kube.post(f"{PODS}/zz/binding", binding("zz", "", "n1"))
    assert gone.value.status == 404


async def test_lists_page_and_watches_resume_from_a_resource_version() -> None:
    kube = FakeKube()
    kube.seed(PODS, *(_pod(f"p{i}") for i in range(5)))
    first = await kube.get("/api/v1/pods", limit=2)
    names = [p["metadata"]["name"] for p in first["items"]]
    second = await kube.get("/api/v1/pods", limit=2, **{"continue": first["metadata"]["continue"]})
    names += [p["metadata"]["name"] for p in second["items"]]
    assert names == ["p0", "p1", "p2", "p3"]
    rv = first["metadata"]["resourceVersion"]
    assert second["metadata"]["resourceVersion"] == rv
    await kube.merge_patch(f"{PODS}/p0", {"metadata": {"labels": {"x": "y"}}})
    kube.remove(f"{PODS}/p1")
    seen: list[tuple[str, str]] = []

    async def watch() -> None:
        async for e in kube.watch("/api/v1/pods", {"resourceVersion": rv}):
            seen.append((e["type"], e["object"]["metadata"]["name"]))

    task = asyncio.create_task(watch())
    await asyncio.sleep(0.01)
    kube.seed(PODS, _pod("p9"))
    await asyncio.sleep(0.01)
    kube.end_watches()
    await task
    assert seen == [("MODIFIED", "p0"), ("DELETED", "p1"), ("ADDED", "p9")]
    kube.compact()
    expired = [e async for e in kube.watch("/api/v1/pods", {"resourceVersion": rv})]
    assert [(e["type"], e["object"]["code"]) for e in expired] == [("ERROR", 410)]


async def test_programmed_failures() -> None:
    kube = FakeKube()
    kube.seed(PODS, _pod("a"))
    kube.fail("get", r"/pods/a$", 503, skip=1, times=2)
    await kube.get(f"{PODS}/a")
    for _ in range(2):
        with pytest.raises(ApiError) as down:
            await kube.get(f"{PODS}/a")
        assert down.value.status == 503 and down.value.retriable
    await kube.get(f"{PODS}/a")
    kube.fail("patch", r"/pods/a$", 0, applied=True)  # written, then the answer was lost
    with pytest.raises(ApiError) as lost:
        await kube.merge_patch(f"{PODS}/a", {"metadata": {"labels": {"k": "v"}}})
    assert lost.value.status == 0
    now = kube.get_object(f"{PODS}/a")
    assert now is not None and now["metadata"]["labels"] == {"k": "v"}
