"""Bad input gets a clear refusal or event, never a crash, and everything else carries on."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, condition, create, event_reasons, pod, podgroup, pods, wait_for

Nodes = Callable[..., dict[str, str]]


def _refused(cp: ControlPlane, obj: dict[str, Any]) -> str:
    out = cp.kubectl("create", "-f", "-", input=json.dumps(obj), check=False)
    assert out.returncode != 0, f"the API server accepted {obj}"
    return out.stderr


def test_invalid_podgroups_are_refused_with_readable_messages(
    control_plane: ControlPlane, ns: str
) -> None:
    cp = control_plane
    assert "minMember" in _refused(cp, podgroup("zero", ns, 0))
    assert "minMember" in _refused(cp, podgroup("neg", ns, -3))
    assert "totalMember" in _refused(cp, podgroup("over", ns, 4, totalMember=3))
    assert "mode" in _refused(cp, podgroup("mode", ns, 2, mode="Sometimes"))
    assert "minResources" in _refused(cp, podgroup("q", ns, 2, minResources={"cpu": "12Qi"}))
    roles = [{"name": "ps", "minMember": 5}]
    assert "role" in _refused(cp, podgroup("roles", ns, 2, roles=roles))
    topo = {"affinity": [["ps", "wrker"]]}
    msg = _refused(
        cp, podgroup("topo", ns, 2, roles=[{"name": "ps", "minMember": 1}], topology=topo)
    )
    assert "wrker" in msg


def test_bad_pods_wait_with_events_and_others_still_schedule(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    huge = pod("huge", ns, selector=sel, cpu="1000000", gpus=0)
    create(cp, huge)
    weird = pod("weird", ns, selector=sel, gpus=0)
    weird["spec"]["containers"][0]["resources"]["requests"]["example.com/fpga"] = "1"
    weird["spec"]["containers"][0]["resources"]["limits"]["example.com/fpga"] = "1"
    create(cp, weird)
    ann = {"scheduling.k8s.io/group-name": "mixed"}
    first = pod(
        "mixed-0", ns, selector=sel, annotations={**ann, "scheduling.k8s.io/group-pod-num": "2"}
    )
    create(cp, first)
    time.sleep(0.5)
    second = pod(
        "mixed-1", ns, selector=sel, annotations={**ann, "scheduling.k8s.io/group-pod-num": "3"}
    )
    create(cp, second)
    for name in ("huge", "weird", "mixed-1"):
        wait_for(
            f"an event on {name}", lambda n=name: "FailedScheduling" in event_reasons(cp, ns, n)
        )
    state = pods(cp, ns)
    huge_msg = (condition(state["huge"], "PodScheduled") or {}).get("message", "")
    assert "needs 1000000 cpu" in huge_msg, huge_msg
    assert "example.com/fpga" in (condition(state["weird"], "PodScheduled") or {}).get(
        "message", ""
    )
    assert "differently" in (condition(state["mixed-1"], "PodScheduled") or {}).get("message", "")
    create(cp, podgroup("good", ns, 2))
    for i in range(2):
        create(cp, pod(f"good-{i}", ns, group="good", selector=sel))
    wait_for("the good gang bound", lambda: {"good-0", "good-1"} <= set(bound(cp, ns)))
    assert not {"huge", "weird", "mixed-0", "mixed-1"} & set(bound(cp, ns))
    assert running_scheduler.alive()
