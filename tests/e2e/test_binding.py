"""The binder against the real pods/binding API: every conflict is reported, none crashes,
and a retried binding that already happened counts as done."""

from __future__ import annotations

import json

import pytest

from gangsched.core.decisions import BindGang, Binding, PodRef
from gangsched.kube.io.client import KubeClient, load_configuration
from gangsched.kube.write.binder import Binder
from gangsched_dev.devcluster import ControlPlane

from .kube import create, pod, pods


def _ref(cp: ControlPlane, ns: str, name: str) -> PodRef:
    obj = pods(cp, ns)[name]
    return PodRef(obj["metadata"]["uid"], ns, name)


@pytest.fixture
async def client(control_plane: ControlPlane) -> KubeClient:
    return KubeClient(await load_configuration(str(control_plane.kubeconfig)))


async def test_binding_conflicts(
    control_plane: ControlPlane, ns: str, nodes: object, client: KubeClient
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)  # type: ignore[operator]
    n0, n1 = f"{ns}-n0", f"{ns}-n1"
    for name in ("fresh", "gone", "taken", "again", "reborn"):
        create(cp, pod(name, ns, selector=sel, scheduler="nobody"))
    refs = {name: _ref(cp, ns, name) for name in ("fresh", "gone", "taken", "again", "reborn")}
    cp.kubectl("delete", "pod", "gone", "-n", ns, "--grace-period=0", "--force")
    # someone else binds "taken" to n1 first
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "taken"},
        "target": {"kind": "Node", "name": n1},
    }
    cp.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{ns}/pods/taken/binding",
        "-f",
        "-",
        input=json.dumps(body),
    )
    # "again" is already bound where we mean to bind it (a retry after a lost response)
    body["metadata"] = {"name": "again"}
    body["target"] = {"kind": "Node", "name": n0}
    cp.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{ns}/pods/again/binding",
        "-f",
        "-",
        input=json.dumps(body),
    )
    # "reborn" is deleted and recreated under the same name: our decision holds the old UID
    cp.kubectl("delete", "pod", "reborn", "-n", ns, "--grace-period=0", "--force")
    create(cp, pod("reborn", ns, selector=sel, scheduler="nobody"))

    failures: dict[str, str] = {}
    binder = Binder(client, lambda uid, msg: failures.__setitem__(uid, msg), retries=1)
    try:
        results = await binder.bind_gang(BindGang("g", tuple(Binding(refs[n], n0) for n in refs)))
    finally:
        await client.close()
    ok = {r.binding.pod.name: r.ok for r in results}
    assert ok == {"fresh": True, "gone": False, "taken": False, "again": True, "reborn": False}
    assert set(failures) == {refs["gone"].uid, refs["taken"].uid, refs["reborn"].uid}
    assert "already assigned" in failures[refs["taken"].uid]
    now = pods(cp, ns)
    assert now["fresh"]["spec"]["nodeName"] == n0
    assert now["taken"]["spec"]["nodeName"] == n1, "someone else's binding stands"
    assert not now["reborn"]["spec"].get("nodeName"), "a recreated pod is never bound by mistake"
