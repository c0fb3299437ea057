"""Topology-aware gang placement on the real control plane: a gangsched PodGroup with a
required rack, the upstream PodGroup's ``schedulingConstraints.topology``, and Kueue's
podset annotation, each placing the whole gang inside one rack (the tightest that holds it),
and a gang no rack can hold waiting with the level and the shortfall named."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import (
    bound,
    condition,
    create,
    get_pg,
    pod,
    podgroup,
    pods,
    upstream_podgroup,
    wait_for,
)

RACK = "example.com/rack"
Racks = Callable[[dict[str, int]], dict[str, str]]


@pytest.fixture
def racks(control_plane: ControlPlane, ns: str) -> Iterator[Racks]:
    """``racks({"a": 2, "b": 3})``: KWOK nodes with 2 GPUs each, labelled with their rack
    (``<ns>-a``...); returns the node selector that keeps other tests' pods off them."""
    made: list[str] = []

    def make(layout: dict[str, int]) -> dict[str, str]:
        for rack, count in layout.items():
            for i in range(count):
                name = f"{ns}-{rack}{i}"
                labels = {"e2e-test": ns, RACK: f"{ns}-{rack}"}
                control_plane.add_fake_node(name, "16", "64Gi", 2, labels=labels)
                made.append(name)
        return {"e2e-test": ns}

    yield make
    for name in made:
        control_plane.kubectl("delete", "node", name, "--wait=false", check=False)


def rack_of(cp: ControlPlane, node: str) -> str:
    labels: dict[str, str] = cp.kubectl_json("get", "node", node)["metadata"]["labels"]
    return labels[RACK]


def racks_used(cp: ControlPlane, ns: str, prefix: str) -> set[str]:
    return {rack_of(cp, n) for p, n in bound(cp, ns).items() if p.startswith(prefix)}


def test_required_rack_binds_whole_in_the_tightest_rack_or_waits_naming_it(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, racks: Racks
) -> None:
    cp = control_plane
    sel = racks({"a": 2, "b": 3, "c": 1})  # rack a: 4 GPUs, rack b: 6, rack c: 2
    placement = {"topologyPlacement": {"required": RACK}}
    create(cp, podgroup("four", ns, 4, **placement))
    for i in range(4):
        create(cp, pod(f"four-{i}", ns, group="four", selector=sel))
    wait_for("the gang of four bound", lambda: len(bound(cp, ns)) == 4)
    assert racks_used(cp, ns, "four-") == {f"{ns}-a"}  # exactly full: the tightest
    wait_for(
        "the PodGroup to say which rack",
        lambda: (
            (c := condition(get_pg(cp, ns, "four"), "Scheduled"))
            and c.get("message") == f"4 member(s) bound in {RACK}={ns}-a"
        ),
    )

    create(cp, podgroup("five", ns, 5, **placement))
    for i in range(5):
        create(cp, pod(f"five-{i}", ns, group="five", selector=sel))
    wait_for("the gang of five bound", lambda: len(bound(cp, ns)) == 9)
    assert racks_used(cp, ns, "five-") == {f"{ns}-b"}

    # three GPUs left, one in rack b and two in rack c: the cluster has them, no rack does
    create(cp, podgroup("three", ns, 3, **placement))
    for i in range(3):
        create(cp, pod(f"three-{i}", ns, group="three", selector=sel))
    waiting = wait_for(
        "the PodGroup to say no rack holds it",
        lambda: (
            (c := condition(get_pg(cp, ns, "three"), "Scheduled"))
            and RACK in c.get("message", "")
            and c
        ),
    )
    assert waiting["status"] == "False"
    assert f"required {RACK}" in waiting["message"]
    assert f"{RACK}={ns}-c, has 2 nvidia.com/gpu free of 3 needed" in waiting["message"]
    assert not any(p.startswith("three-") for p in bound(cp, ns))


def _upstream_podgroup(ns: str, version: str, name: str, key: str) -> dict[str, Any]:
    body = upstream_podgroup(ns, version, name, {"gang": {"minCount": 3}})
    body["spec"]["schedulingConstraints"] = {"topology": [{"key": key}]}
    return body


def test_upstream_scheduling_constraints_and_kueue_annotations_keep_the_gang_in_one_rack(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, racks: Racks
) -> None:
    cp = control_plane
    sel = racks({"a": 2, "b": 2})
    served = cp.kubectl("api-versions").stdout.split()
    version = next((v for v in ("v1beta1", "v1alpha2") if f"scheduling.k8s.io/{v}" in served), None)
    assert version, f"the control plane serves no scheduling.k8s.io gang API: {served}"
    # rack a has 2 GPUs left, rack b 4: three 1-GPU members fit in rack b only
    filler = pod("filler", ns, gpus=2, scheduler="none")
    filler["spec"]["nodeName"] = f"{ns}-a0"
    create(cp, filler)
    body = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "Workload",
        "metadata": {"name": "up", "namespace": ns},
        "spec": {
            "podGroupTemplates": [
                {
                    "name": "workers",
                    "schedulingPolicy": {"gang": {"minCount": 3}},
                    "schedulingConstraints": {"topology": [{"key": RACK}]},
                }
            ]
        },
    }
    create(cp, body)
    create(cp, _upstream_podgroup(ns, version, "up", RACK))
    for i in range(3):
        member = pod(f"up-{i}", ns, selector=sel)
        member["spec"]["schedulingGroup"] = {"podGroupName": "up"}
        create(cp, member)
    wait_for("the upstream gang bound", lambda: len(bound(cp, ns)) == 4)
    assert racks_used(cp, ns, "up-") == {f"{ns}-b"}

    # Kueue's podset annotation on a gangsched gang: rack a has 2 GPUs free, rack b 1
    create(cp, podgroup("kq", ns, 2))
    annotations = {"kueue.x-k8s.io/podset-required-topology": RACK}
    for i in range(2):
        create(cp, pod(f"kq-{i}", ns, group="kq", selector=sel, annotations=annotations))
    wait_for("the Kueue-annotated gang bound", lambda: len(bound(cp, ns)) == 6)
    assert racks_used(cp, ns, "kq-") == {f"{ns}-a"}
    assert all(p["spec"].get("nodeName") for p in pods(cp, ns).values())
