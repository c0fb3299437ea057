"""Volumes on the real control plane: PersistentVolumes with node affinity steer a gang, a
WaitForFirstConsumer class is provisioned only for a gang that is committed whole, a member
whose claim is missing holds the gang with kube-scheduler's message, and a ReadWriteOncePod
claim is never mounted by two pods.

The control plane runs no kube-controller-manager, and no CSI driver: the test itself plays the
PV controller and an external provisioner (``FakeStorage``), as they behave in a real cluster.
It marks new PersistentVolumes Available; when a claim carries
``volume.kubernetes.io/selected-node`` for its provisioner, it creates a volume pinned to that
node with a ``claimRef`` to the claim; and it binds every claim a volume's ``claimRef`` points
at (``spec.volumeName``, ``pv.kubernetes.io/bind-completed``, ``Bound`` phases through the
status subresource). Playing them here, rather than building kube-controller-manager into the
control plane, keeps the one Go build as it is (a provisioner is a separate component in a
real cluster anyway: the PV controller never provisions for a CSI driver), and lets the test
record what it saw when: that no pod of a gang was bound before its claims were.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, condition, create, pod, podgroup, pods, wait_for

Nodes = Callable[..., dict[str, str]]

SELECTED_NODE = "volume.kubernetes.io/selected-node"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
HOSTNAME = "kubernetes.io/hostname"
PROVISIONER = "fake-csi.e2e.gangsched.io"
NO_PROVISIONER = "kubernetes.io/no-provisioner"


def _patch(cp: ControlPlane, kind: str, name: str, body: dict[str, Any], *extra: str) -> None:
    cp.kubectl("patch", kind, name, *extra, "--type=merge", "-p", json.dumps(body))


def _pv_status(cp: ControlPlane, name: str, phase: str) -> None:
    _patch(cp, "pv", name, {"status": {"phase": phase}}, "--subresource=status")


class FakeStorage:
    """The PV controller's binding and an external provisioner, for one namespace."""

    def __init__(self, cp: ControlPlane, ns: str) -> None:
        self.cp = cp
        self.ns = ns
        # claim -> (selected node, pods of the namespace bound at that moment), when first seen
        self.selected: dict[str, tuple[str, int]] = {}
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> FakeStorage:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception as e:  # reported by the test, not lost in a thread
                self.errors.append(repr(e))
            self._stop.wait(0.3)

    def step(self) -> None:
        cp, ns = self.cp, self.ns
        claims = cp.kubectl_json("get", "pvc", "-n", ns)["items"]
        volumes = cp.kubectl_json("get", "pv")["items"]
        classes = {
            c["metadata"]["name"]: c.get("provisioner", "")
            for c in cp.kubectl_json("get", "storageclass")["items"]
        }
        for pv in volumes:  # the PV controller: a new volume becomes Available
            phase = (pv.get("status") or {}).get("phase")
            if phase not in ("Available", "Bound") and not pv["spec"].get("claimRef"):
                _pv_status(cp, pv["metadata"]["name"], "Available")
        by_claim = {
            (ref["namespace"], ref["name"]): pv
            for pv in volumes
            if (ref := pv["spec"].get("claimRef"))
        }
        for claim in claims:
            meta, spec = claim["metadata"], claim["spec"]
            name = meta["name"]
            annotations = meta.get("annotations") or {}
            if spec.get("volumeName") and BIND_COMPLETED in annotations:
                continue
            pv = by_claim.get((ns, name))
            node = annotations.get(SELECTED_NODE)
            if pv is None and node and classes.get(spec.get("storageClassName", "")) == PROVISIONER:
                if name not in self.selected:
                    self.selected[name] = (node, len(bound(cp, ns)))
                pv = self._provision(claim, node)
            if pv is not None:
                ref = pv["spec"]["claimRef"]
                if not ref.get("uid") or ref["uid"] == meta["uid"]:
                    self._bind(claim, pv["metadata"]["name"])

    def _provision(self, claim: dict[str, Any], node: str) -> dict[str, Any]:
        meta, spec = claim["metadata"], claim["spec"]
        name = f"{self.ns}-{meta['name']}"
        pv = {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {
                "name": name,
                "annotations": {"pv.kubernetes.io/provisioned-by": PROVISIONER},
            },
            "spec": {
                "capacity": {"storage": spec["resources"]["requests"]["storage"]},
                "accessModes": spec["accessModes"],
                "storageClassName": spec["storageClassName"],
                "persistentVolumeReclaimPolicy": "Delete",
                "claimRef": {
                    "apiVersion": "v1",
                    "kind": "PersistentVolumeClaim",
                    "namespace": self.ns,
                    "name": meta["name"],
                    "uid": meta["uid"],
                },
                "csi": {"driver": PROVISIONER, "volumeHandle": name},
                "nodeAffinity": _pinned(node),
            },
        }
        return create(self.cp, pv)

    def _bind(self, claim: dict[str, Any], volume: str) -> None:
        cp, name = self.cp, claim["metadata"]["name"]
        meta = {"annotations": {BIND_COMPLETED: "yes", BOUND_BY_CONTROLLER: "yes"}}
        _patch(cp, "pvc", name, {"metadata": meta, "spec": {"volumeName": volume}}, "-n", self.ns)
        capacity = {"storage": claim["spec"]["resources"]["requests"]["storage"]}
        status = {
            "phase": "Bound",
            "accessModes": claim["spec"]["accessModes"],
            "capacity": capacity,
        }
        _patch(cp, "pvc", name, {"status": status}, "-n", self.ns, "--subresource=status")
        _pv_status(cp, volume, "Bound")


def _pinned(node: str) -> dict[str, Any]:
    return {
        "required": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}
            ]
        }
    }


@pytest.fixture
def storage(control_plane: ControlPlane, ns: str) -> Iterator[FakeStorage]:
    fake = FakeStorage(control_plane, ns).start()
    yield fake
    fake.stop()
    assert not fake.errors, fake.errors


@pytest.fixture
def cluster_objects(control_plane: ControlPlane) -> Iterator[list[tuple[str, str]]]:
    """Cluster-scoped objects a test creates, deleted at its end."""
    made: list[tuple[str, str]] = []
    yield made
    for kind, name in made:
        control_plane.kubectl("delete", kind, name, "--wait=false", check=False)


def storage_class(
    cp: ControlPlane, made: list[tuple[str, str]], name: str, provisioner: str
) -> str:
    create(
        cp,
        {
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {"name": name},
            "provisioner": provisioner,
            "volumeBindingMode": "WaitForFirstConsumer",
        },
    )
    made.append(("storageclass", name))
    return name


def claim(
    name: str, ns: str, cls: str, modes: tuple[str, ...] = ("ReadWriteOnce",)
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "accessModes": list(modes),
            "storageClassName": cls,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def with_claims(obj: dict[str, Any], *claims: str) -> dict[str, Any]:
    obj["spec"]["volumes"] = [
        {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)
    ]
    return obj


def claims_of(cp: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in cp.kubectl_json("get", "pvc", "-n", ns)["items"]}


def volume_node(cp: ControlPlane, volume: str) -> str:
    pv = cp.kubectl_json("get", "pv", volume)
    terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    node: str = terms[0]["matchExpressions"][0]["values"][0]
    return node


def all_bound(cp: ControlPlane, ns: str, count: int) -> dict[str, str] | None:
    placed = bound(cp, ns)
    return placed if len(placed) == count else None


def unschedulable_message(cp: ControlPlane, ns: str, name: str) -> str:
    c = condition(pods(cp, ns).get(name, {}), "PodScheduled")
    if c is None or c.get("status") != "False" or c.get("reason") != "Unschedulable":
        return ""
    return str(c.get("message", ""))


def test_volumes_with_node_affinity_steer_a_gang(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    storage: FakeStorage,
    cluster_objects: list[tuple[str, str]],
) -> None:
    cp = control_plane
    sel = nodes(4, gpus=2)
    local = storage_class(cp, cluster_objects, f"{ns}-local", NO_PROVISIONER)
    for i in (2, 3):  # local volumes on the last two nodes only
        name = f"{ns}-local-{i}"
        create(
            cp,
            {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": name},
                "spec": {
                    "capacity": {"storage": "10Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": local,
                    "local": {"path": "/mnt/disks/ssd0"},
                    "nodeAffinity": _pinned(f"{ns}-n{i}"),
                },
            },
        )
        cluster_objects.append(("pv", name))
    wait_for(
        "the volumes to be Available",
        lambda: all(
            (cp.kubectl_json("get", "pv", f"{ns}-local-{i}").get("status") or {}).get("phase")
            == "Available"
            for i in (2, 3)
        ),
    )
    create(cp, podgroup("steer", ns, 2))
    for i in range(2):
        create(cp, claim(f"data-{i}", ns, local))
        create(cp, with_claims(pod(f"steer-{i}", ns, group="steer", selector=sel), f"data-{i}"))
    placed = wait_for("both members bound", lambda: all_bound(cp, ns, 2))
    assert sorted(placed.values()) == [f"{ns}-n2", f"{ns}-n3"]
    found = claims_of(cp, ns)
    for i in range(2):
        volume = found[f"data-{i}"]["spec"]["volumeName"]
        assert volume in (f"{ns}-local-2", f"{ns}-local-3")
        assert volume_node(cp, volume) == placed[f"steer-{i}"]
    assert found["data-0"]["spec"]["volumeName"] != found["data-1"]["spec"]["volumeName"]


def test_wait_for_first_consumer_is_provisioned_only_once_the_gang_is_committed(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    storage: FakeStorage,
    cluster_objects: list[tuple[str, str]],
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    fast = storage_class(cp, cluster_objects, f"{ns}-fast", PROVISIONER)
    create(cp, podgroup("ckpt", ns, 4))
    for i in range(4):
        create(cp, claim(f"ckpt-{i}", ns, fast))
        create(cp, with_claims(pod(f"ckpt-{i}", ns, group="ckpt", selector=sel), f"ckpt-{i}"))
    wait_for(
        "every member unschedulable (4 GPUs asked, 2 there)",
        lambda: all(unschedulable_message(cp, ns, f"ckpt-{i}") for i in range(4)),
    )
    time.sleep(2)
    assert bound(cp, ns) == {}
    annotated = [
        n
        for n, c in claims_of(cp, ns).items()
        if SELECTED_NODE in (c["metadata"].get("annotations") or {})
    ]
    assert annotated == [], "a gang that cannot be placed must not get volumes provisioned"
    assert storage.selected == {}

    nodes(1, gpus=2)
    placed = wait_for("the gang to bind", lambda: all_bound(cp, ns, 4))
    assert len(set(placed.values())) == 2
    found = claims_of(cp, ns)
    for i in range(4):
        c = found[f"ckpt-{i}"]
        assert c["metadata"]["annotations"][SELECTED_NODE] == placed[f"ckpt-{i}"]
        assert c["status"]["phase"] == "Bound"
        assert volume_node(cp, c["spec"]["volumeName"]) == placed[f"ckpt-{i}"]
    assert set(storage.selected) == {f"ckpt-{i}" for i in range(4)}
    # every claim was handed to the provisioner before any member of the gang was bound
    assert [seen for _, seen in storage.selected.values()] == [0, 0, 0, 0]


def test_member_with_a_missing_claim_holds_the_gang_with_a_message(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    storage: FakeStorage,
    cluster_objects: list[tuple[str, str]],
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    fast = storage_class(cp, cluster_objects, f"{ns}-fast", PROVISIONER)
    # minMember 2 of 3: the two members whose claims exist could run, but the third waits
    create(cp, podgroup("held", ns, 2))
    for i in range(2):
        create(cp, claim(f"held-{i}", ns, fast))
    # the member with the missing claim first: the gang never has quorum without it
    for i, c in reversed(list(enumerate(("held-0", "held-1", "late")))):
        create(cp, with_claims(pod(f"held-{i}", ns, group="held", selector=sel), c))
    missing = 'persistentvolumeclaim "late" not found'
    wait_for(
        "the members to wait for the missing claim",
        lambda: all(missing in unschedulable_message(cp, ns, f"held-{i}") for i in range(3)),
    )
    time.sleep(2)
    assert bound(cp, ns) == {}
    assert storage.selected == {}, "no volume is provisioned for a gang that waits"

    create(cp, claim("late", ns, fast))
    placed = wait_for("the gang to bind", lambda: all_bound(cp, ns, 3))
    assert set(storage.selected) == {"held-0", "held-1", "late"}
    assert {storage.selected[c][0] for c in ("held-0", "held-1", "late")} <= set(placed.values())


def test_read_write_once_pod_claim_is_never_used_twice(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    storage: FakeStorage,
    cluster_objects: list[tuple[str, str]],
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    fast = storage_class(cp, cluster_objects, f"{ns}-fast", PROVISIONER)
    create(cp, claim("solo", ns, fast, ("ReadWriteOncePod",)))
    create(cp, with_claims(pod("first", ns, selector=sel), "solo"))
    first = wait_for("the first pod to bind", lambda: bound(cp, ns).get("first"))
    wait_for("the claim to be bound", lambda: claims_of(cp, ns)["solo"]["spec"].get("volumeName"))

    create(cp, with_claims(pod("second", ns, selector=sel), "solo"))
    message = wait_for(
        "the second pod to be refused", lambda: unschedulable_message(cp, ns, "second")
    )
    assert (
        "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod "
        "access mode"
    ) in message
    time.sleep(1)
    assert "second" not in bound(cp, ns)

    cp.kubectl("delete", "pod", "first", "-n", ns, "--wait=false")
    placed = wait_for(
        "the second pod to bind once the first is gone", lambda: bound(cp, ns).get("second")
    )
    assert placed == first  # where the claim's volume is
