"""Drop-in compatibility and the seeds' gang behaviours, on the real control plane."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import (
    bound,
    condition,
    create,
    event_reasons,
    get_pg,
    pod,
    podgroup,
    pods,
    refused,
    wait_for,
)

Nodes = Callable[..., dict[str, str]]


def _member(name: str, ns: str, sel: dict[str, str], **meta: Any) -> dict[str, Any]:
    body = pod(name, ns, selector=sel)
    body["metadata"]["labels"].update(meta.pop("labels", {}))
    body["metadata"]["annotations"].update(meta.pop("annotations", {}))
    return body


def test_scheduler_plugins_podgroup(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """A Kubeflow-style operator that creates scheduler-plugins PodGroups works unchanged."""
    cp = control_plane
    sel = nodes(2, gpus=2)
    create(
        cp,
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "job", "namespace": ns},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 60},
        },
    )
    for i in range(2):
        create(cp, _member(f"job-{i}", ns, sel, labels={"scheduling.x-k8s.io/pod-group": "job"}))
    wait_for(
        "both members told they wait for a third",
        lambda: bool(refused(cp, ns, ["job-0", "job-1"], "2 of 3 members exist")),
    )
    assert "FailedScheduling" in event_reasons(cp, ns, "job-0")
    assert bound(cp, ns) == {}, "2 of minMember 3 must not bind"
    create(cp, _member("job-2", ns, sel, labels={"scheduling.x-k8s.io/pod-group": "job"}))
    wait_for("the gang of three bound", lambda: len(bound(cp, ns)) == 3)


def test_volcano_podgroup_with_task_minimums(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    create(
        cp,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "tf", "namespace": ns},
            "spec": {"minMember": 3, "minTaskMember": {"ps": 1, "worker": 2}},
        },
    )
    ann = {"scheduling.k8s.io/group-name": "tf"}
    for i in range(3):  # three workers, but no ps yet: the ps minimum is not met
        create(
            cp, _member(f"w-{i}", ns, sel, annotations={**ann, "volcano.sh/task-spec": "worker"})
        )
    wait_for(
        "the workers told they wait for the ps role",
        lambda: bool(refused(cp, ns, [f"w-{i}" for i in range(3)], "(by role: worker=3)")),
    )
    assert bound(cp, ns) == {}, "the ps role's minimum is not met"
    create(cp, _member("ps-0", ns, sel, annotations={**ann, "volcano.sh/task-spec": "ps"}))
    wait_for("all four bound", lambda: len(bound(cp, ns)) == 4)


def test_annotation_gang_without_podgroup(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """Annotation-only gangs: group-name + group-pod-num annotations declare the gang."""
    cp = control_plane
    sel = nodes(1, gpus=2)
    ann = {"scheduling.k8s.io/group-name": "qj-1", "scheduling.k8s.io/group-pod-num": "3"}
    for i in range(3):  # three one-GPU pods on a two-GPU node: never place two of three
        create(cp, _member(f"qj-{i}", ns, sel, annotations=ann))
    wait_for(
        "a FailedScheduling event", lambda: "FailedScheduling" in event_reasons(cp, ns, "qj-0")
    )
    assert bound(cp, ns) == {}
    nodes(1, gpus=2)
    wait_for("all three bound", lambda: len(bound(cp, ns)) == 3)


def test_koordinator_annotations_and_seed_labels(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    koord = {
        "gang.scheduling.koordinator.sh/name": "k",
        "gang.scheduling.koordinator.sh/min-available": "2",
        "gang.scheduling.koordinator.sh/waiting-time": "60s",
    }
    for i in range(2):
        create(cp, _member(f"k-{i}", ns, sel, annotations=koord))
    seed = {"pod-group/name": "s", "pod-group/min-available": "2"}
    for i in range(2):
        create(cp, _member(f"s-{i}", ns, sel, labels=seed))
    wait_for("both gangs bound", lambda: len(bound(cp, ns)) == 4)


def test_conflicting_declarations_get_an_event_and_stay_pending(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(
        cp,
        _member(
            "two",
            ns,
            sel,
            labels={"gangsched.io/pod-group": "a"},
            annotations={
                "gang.scheduling.koordinator.sh/name": "b",
                "gang.scheduling.koordinator.sh/min-available": "1",
            },
        ),
    )
    create(
        cp,
        _member("bad", ns, sel, labels={"pod-group/name": "x", "pod-group/min-available": "0"}),
    )
    for name in ("two", "bad"):
        wait_for(
            f"an event on {name}", lambda n=name: "FailedScheduling" in event_reasons(cp, ns, n)
        )
    msg = condition(pods(cp, ns)["two"], "PodScheduled")
    assert msg is not None and "more than one gang" in msg["message"]
    create(cp, pod("fine", ns, selector=sel))  # the scheduler carries on with everything else
    wait_for("an unrelated pod bound", lambda: "fine" in bound(cp, ns))
    assert set(bound(cp, ns)) == {"fine"}


def test_nonstrict_gang_holds_partial_placements_until_its_deadline(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, podgroup("ns-gang", ns, 3, timeout=4, mode="NonStrict"))
    for i in range(3):
        create(cp, pod(f"m-{i}", ns, group="ns-gang", selector=sel))
    wait_for(
        "two reservations held",
        lambda: (get_pg(cp, ns, "ns-gang").get("status") or {}).get("waiting") == 2,
        timeout=15,
    )
    assert bound(cp, ns) == {}, "reservations are not bindings"
    wait_for(
        "the deadline to release them",
        lambda: (
            "GangTimeout" in event_reasons(cp, ns, "m-0")
            or "GangTimeout" in event_reasons(cp, ns, "m-1")
            or "GangTimeout" in event_reasons(cp, ns, "m-2")
        ),
        timeout=20,
    )
    cond = wait_for(
        "the Scheduled condition to say Timeout",
        lambda: (
            (c := condition(get_pg(cp, ns, "ns-gang"), "Scheduled")) is not None
            and c.get("reason") in ("Timeout", "Waiting", "Unschedulable")
            and c
        ),
    )
    assert cond["status"] == "False"
    assert bound(cp, ns) == {}


def test_kubectl_gang_plugin_lists_gangs(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, podgroup("ok", ns, 2, roles=[{"name": "worker", "minMember": 2}]))
    for i in range(2):
        body = pod(f"ok-{i}", ns, group="ok", selector=sel, labels={"gangsched.io/role": "worker"})
        create(cp, body)
    create(cp, podgroup("stuck", ns, 4))
    for i in range(4):
        create(cp, pod(f"stuck-{i}", ns, group="stuck", selector=sel))
    wait_for("ok bound", lambda: len([n for n in bound(cp, ns) if n.startswith("ok-")]) == 2)
    wait_for(
        "stuck to have a message",
        lambda: (get_pg(cp, ns, "stuck").get("status") or {}).get("message"),
    )
    run = [
        sys.executable,
        "-m",
        "gangsched.kubectl_gang",
        "-n",
        ns,
        "--kubeconfig",
        str(cp.kubeconfig),
    ]
    out = subprocess.run(run, capture_output=True, text=True, check=True, timeout=60).stdout
    lines = out.splitlines()
    assert lines[0].split()[:4] == ["GANG", "PHASE", "MIN", "MEMBERS(bound/total)"]
    ok = next(line for line in lines if line.startswith("ok "))
    assert "worker=2/2" in ok and f"{ns}-n0(2)" in ok
    stuck = next(line for line in lines if line.startswith("stuck "))
    assert "nvidia.com/gpu" in stuck
    data = json.loads(
        subprocess.run([*run, "-o", "json"], capture_output=True, text=True, check=True).stdout
    )
    assert {r["name"] for r in data} == {"ok", "stuck"}
