"""The upstream gang API (scheduling.k8s.io Workload and PodGroup) on the real control plane,
in whichever version it serves: v1alpha2 (Kubernetes 1.36) or v1beta1 (1.37). Pods join a
PodGroup through ``spec.schedulingGroup.podGroupName`` and have ``schedulerName: gangsched``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane, featuregates

from .conftest import SchedulerProcess
from .kube import bound, create, pod, pods, upstream_podgroup, wait_for

Nodes = Callable[..., dict[str, str]]

# version -> (the PodGroup's reference to its Workload, the condition kube-scheduler sets)
_VERSIONS = {
    "v1beta1": ("workloadRef", "PodGroupInitiallyScheduled"),
    "v1alpha2": ("podGroupTemplateRef", "PodGroupScheduled"),
}


@pytest.fixture
def version(control_plane: ControlPlane) -> str:
    served = control_plane.kubectl("api-versions").stdout.split()
    for v in _VERSIONS:
        if f"scheduling.k8s.io/{v}" in served:
            return v
    pytest.fail(f"the control plane serves no scheduling.k8s.io gang API: {served}")


def _workload(ns: str, version: str, name: str, policy: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"podGroupTemplates": [{"name": "workers", "schedulingPolicy": policy}]},
    }


def _member(name: str, ns: str, group: str, sel: dict[str, str]) -> dict[str, Any]:
    body = pod(name, ns, selector=sel)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


def _condition(cp: ControlPlane, ns: str, name: str, version: str) -> dict[str, Any] | None:
    pg = cp.kubectl_json("get", f"podgroups.{version}.scheduling.k8s.io", name, "-n", ns)
    for c in (pg.get("status") or {}).get("conditions") or []:
        if c.get("type") == _VERSIONS[version][1]:
            return dict(c)
    return None


def test_gang_min_count_binds_whole(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    version: str,
) -> None:
    """gang minCount 4: three pods wait (nothing binds, the PodGroup says why), the fourth
    lets all four bind together, and the PodGroup's condition turns True."""
    cp = control_plane
    sel = nodes(2, gpus=2)
    policy = {"gang": {"minCount": 4}}
    create(cp, _workload(ns, version, "train", policy))
    create(cp, upstream_podgroup(ns, version, "train", policy))
    for i in range(3):
        create(cp, _member(f"train-{i}", ns, "train", sel))
    waiting = wait_for(
        "the PodGroup to say it waits for a fourth member",
        lambda: (c := _condition(cp, ns, "train", version)) and "3 of 4" in c["message"] and c,
    )
    assert waiting["status"] == "False"
    assert waiting["reason"] == "Unschedulable"
    assert waiting["message"].startswith("WaitingForMembers: ")
    assert bound(cp, ns) == {}, "3 of minCount 4 must not bind"
    # the pods say so too, as for every other convention
    scheduled = [
        c
        for p in pods(cp, ns).values()
        for c in (p.get("status") or {}).get("conditions") or []
        if c.get("type") == "PodScheduled"
    ]
    assert len(scheduled) == 3 and all("3 of 4" in c["message"] for c in scheduled)

    create(cp, _member("train-3", ns, "train", sel))
    wait_for("the gang of four bound", lambda: len(bound(cp, ns)) == 4)
    done = wait_for(
        "the PodGroup's condition True",
        lambda: (c := _condition(cp, ns, "train", version)) and c["status"] == "True" and c,
    )
    assert done["reason"] == "Scheduled"


def test_basic_policy_pods_bind_one_by_one(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    version: str,
) -> None:
    """basic: no gang. A lone pod binds; of three more on a node with room for two, two bind
    and one stays pending, whatever the others do."""
    cp = control_plane
    sel = nodes(1, gpus=3)
    policy: dict[str, Any] = {"basic": {}}
    create(cp, _workload(ns, version, "serve", policy))
    create(cp, upstream_podgroup(ns, version, "serve", policy))
    create(cp, _member("serve-0", ns, "serve", sel))
    wait_for("a lone basic pod bound", lambda: "serve-0" in bound(cp, ns))
    for i in range(1, 4):
        create(cp, _member(f"serve-{i}", ns, "serve", sel))
    wait_for("two more bound, up to the node's three GPUs", lambda: len(bound(cp, ns)) == 3)
    pending = wait_for(
        "the fourth told it does not fit",
        lambda: [
            n
            for n, p in pods(cp, ns).items()
            if not p["spec"].get("nodeName")
            and any(
                c.get("type") == "PodScheduled" and c.get("status") == "False"
                for c in (p.get("status") or {}).get("conditions") or []
            )
        ],
    )
    assert len(pending) == 1
    assert len(bound(cp, ns)) == 3


@pytest.fixture
def job_controller(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """kube-controller-manager with the gate under which the Job controller makes a Job's
    Workload and PodGroup itself; only for this test (the other tests' Jobs use gangsched's
    PodGroup, and their pods would then join two gangs)."""
    cp = control_plane
    cp.stop_controller_manager()  # another module's, if one is still running
    version = featuregates.server_version(cp.bin_dir / "kube-apiserver")
    cp.start_controller_manager(extra_args=featuregates.controller_manager_args(version))
    try:
        yield cp
    finally:
        cp.stop_controller_manager()


def test_the_job_controller_makes_the_gang_and_gangsched_binds_it_whole(
    job_controller: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    version: str,
) -> None:
    """An indexed Job (parallelism = completions = 4) with ``schedulerName: gangsched`` (and on
    1.37 ``spec.scheduling.schedulingPolicy.gang``): the Job controller creates the Workload
    and a gang PodGroup of minCount 4, its pods join it, gangsched binds all four together and
    the Job completes."""
    cp = job_controller
    sel = nodes(2, gpus=2)
    body = pod("template", ns, selector=sel)
    body["spec"]["restartPolicy"] = "Never"
    spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": 4,
        "parallelism": 4,
        "backoffLimit": 0,
        "template": {"metadata": {"labels": {"app": "train"}}, "spec": body["spec"]},
    }
    if version != "v1alpha2":
        # 1.37: the Job asks for a gang (minCount defaults to its parallelism); 1.36 makes
        # one for every indexed Job with parallelism = completions
        spec["scheduling"] = {"schedulingPolicy": {"gang": {}}}
    create(
        cp,
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "train", "namespace": ns},
            "spec": spec,
        },
    )
    made = wait_for("the Job's four pods", lambda: len(pods(cp, ns)) == 4 and pods(cp, ns), 90)
    groups = {(p["spec"].get("schedulingGroup") or {}).get("podGroupName") for p in made.values()}
    assert len(groups) == 1 and None not in groups, groups
    group = groups.pop()
    pg = cp.kubectl_json("get", f"podgroups.{version}.scheduling.k8s.io", group, "-n", ns)
    assert pg["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
    wait_for("the gang of four bound", lambda: len(bound(cp, ns)) == 4, 90)
    done = wait_for(
        "the PodGroup's condition True",
        lambda: (c := _condition(cp, ns, group, version)) and c["status"] == "True" and c,
    )
    assert done["reason"] == "Scheduled"
    wait_for(
        "the Job complete",
        lambda: any(
            c.get("type") == "Complete" and c.get("status") == "True"
            for c in (cp.kubectl_json("get", "job", "train", "-n", ns).get("status") or {}).get(
                "conditions"
            )
            or []
        ),
        90,
    )
