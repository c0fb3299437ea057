"""gangsched on a real kube-apiserver + etcd, with kwok running the bound pods."""

from __future__ import annotations

import time
from collections.abc import Callable

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


def test_gang_of_four_binds_whole_and_runs(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    create(cp, podgroup("ddp", ns, 4))
    for i in range(4):
        create(cp, pod(f"ddp-{i}", ns, group="ddp", selector=sel))
    placed = wait_for("all four pods bound", lambda: len(bound(cp, ns)) == 4 and bound(cp, ns))
    assert sorted(set(placed.values())) == [f"{ns}-n0", f"{ns}-n1"]
    assert sorted(placed.values()).count(f"{ns}-n0") == 2
    wait_for(
        "PodGroup Running",
        lambda: (get_pg(cp, ns, "ddp").get("status") or {}).get("phase") == "Running",
    )
    status = get_pg(cp, ns, "ddp")["status"]
    assert (status["scheduled"], status["running"], status["failed"]) == (4, 4, 0)
    cond = condition(get_pg(cp, ns, "ddp"), "Scheduled")
    assert cond is not None and cond["status"] == "True"
    wait_for("Scheduled events", lambda: "Scheduled" in event_reasons(cp, ns, "ddp-0"))
    # kwok moved every pod to Running
    assert {p["status"].get("phase") for p in pods(cp, ns).values()} == {"Running"}


def test_kubectl_get_podgroups_columns(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, podgroup("cols", ns, 2))
    for i in range(2):
        create(cp, pod(f"cols-{i}", ns, group="cols", selector=sel))
    wait_for(
        "PodGroup Running",
        lambda: (get_pg(cp, ns, "cols").get("status") or {}).get("phase") == "Running",
    )
    out = cp.kubectl("get", "podgroups.gangsched.io", "-n", ns).stdout.splitlines()
    assert out[0].split() == [
        "NAME",
        "PHASE",
        "MIN",
        "SCHEDULED",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "AGE",
    ]
    row = out[1].split()
    assert row[:7] == ["cols", "Running", "2", "2", "2", "0", "0"]
    wide = cp.kubectl("get", "pg", "-n", ns, "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-1] == "MESSAGE"


def test_gang_that_cannot_fit_waits_whole_then_binds_when_a_node_arrives(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, podgroup("wide", ns, 4))
    for i in range(4):
        create(cp, pod(f"wide-{i}", ns, group="wide", selector=sel))

    def unschedulable_everywhere() -> bool:
        ps = pods(cp, ns)
        return len(ps) == 4 and all(
            (c := condition(p, "PodScheduled")) is not None and c["status"] == "False"
            for p in ps.values()
        )

    wait_for("PodScheduled=False on every member", unschedulable_everywhere)
    assert bound(cp, ns) == {}
    # The PodGroup's status says why too. Its update is a write of its own, queued behind any
    # backlog of status writes (a pod's first condition goes ahead of it: write/reporter.py),
    # as after an earlier test's API server outage: wait for it rather than read it once.
    pg = wait_for(
        "the PodGroup's status to name the GPU shortfall",
        lambda: (
            (g := get_pg(cp, ns, "wide"))
            and "nvidia.com/gpu" in (g.get("status") or {}).get("message", "")
            and g
        ),
    )
    assert pg["status"]["phase"] in ("Pending", "Scheduling")
    assert "FailedScheduling" in event_reasons(cp, ns, "wide-0")
    time.sleep(2)
    assert bound(cp, ns) == {}, "nothing may bind while the gang cannot fit"
    nodes(1, gpus=2)
    placed = wait_for("the gang to bind", lambda: len(bound(cp, ns)) == 4 and bound(cp, ns))
    assert len(set(placed.values())) == 2


def test_two_gangs_compete_one_binds_whole_other_waits_whole(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)  # 4 GPUs: room for one gang of 3, never two
    for g in ("a", "b"):
        create(cp, podgroup(g, ns, 3))
    for i in range(3):  # interleaved creation
        for g in ("a", "b"):
            create(cp, pod(f"{g}-{i}", ns, group=g, selector=sel))
    wait_for("one gang bound", lambda: len(bound(cp, ns)) >= 3)
    placed = bound(cp, ns)
    loser = "b" if "a-0" in placed else "a"
    wait_for(
        "the other gang refused as a whole",
        lambda: refused(cp, ns, [f"{loser}-{i}" for i in range(3)]),
    )
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        placed = bound(cp, ns)
        per_gang = {g: sum(1 for n in placed if n.startswith(f"{g}-")) for g in ("a", "b")}
        assert sorted(per_gang.values()) == [0, 3], f"partial gang: {per_gang}"
        time.sleep(0.3)


def test_late_member_binds_all_together(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    create(cp, podgroup("late", ns, 3))
    for i in range(2):
        create(cp, pod(f"late-{i}", ns, group="late", selector=sel))
    wait_for(
        "both members told they wait for the third",
        lambda: refused(cp, ns, ["late-0", "late-1"], "2 of 3 members exist"),
    )
    wait_for(
        "a waiting-for-members event",
        lambda: "FailedScheduling" in event_reasons(cp, ns, "late-0"),
    )
    assert bound(cp, ns) == {}, "two of three members must not bind"
    create(cp, pod("late-2", ns, group="late", selector=sel))
    wait_for("all three bound", lambda: len(bound(cp, ns)) == 3)


def test_gang_group_waits_at_permit_and_releases_at_deadline(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """A gang whose gang-group sibling never reaches quorum holds its reservations only until
    its deadline; then everything is released and its pods say they timed out (PodScheduled
    False, with a GangTimeout event)."""
    cp = control_plane
    sel = nodes(4, gpus=2)  # 8 GPUs: the group's 2 + 6 fit the totals, not the nodes
    create(cp, podgroup("left", ns, 2, timeout=3, gangGroup=["left", "right"]))
    create(cp, podgroup("right", ns, 2, timeout=3, gangGroup=["left", "right"]))
    for i in range(2):
        create(cp, pod(f"left-{i}", ns, group="left", selector=sel))
    for i in range(2):  # right has its members, but each asks for more GPUs than any node has
        create(cp, pod(f"right-{i}", ns, group="right", selector=sel, gpus=3))

    def left_waiting() -> bool:
        pg = get_pg(cp, ns, "left")
        return (pg.get("status") or {}).get("waiting") == 2

    wait_for("left to hold two reservations at Permit", left_waiting, timeout=15)

    def timed_out() -> bool:
        ps = pods(cp, ns)
        return all(
            (c := condition(ps[n], "PodScheduled")) is not None
            and c["status"] == "False"
            and c["message"].startswith("Timeout: timed out after 3s")
            for n in ("left-0", "left-1")
        )

    wait_for("the left gang to time out", timed_out, timeout=30)
    assert bound(cp, ns) == {}
    assert "GangTimeout" in event_reasons(cp, ns, "left-0")


def test_plain_pods_and_other_schedulers(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, pod("theirs", ns, selector=sel, scheduler="default-scheduler"))
    create(cp, pod("plain", ns, selector=sel))
    # the pod watch delivers in order: once "plain" is bound, "theirs" was seen before it
    wait_for("the plain pod bound", lambda: "plain" in bound(cp, ns))
    time.sleep(1)  # for a binding of "theirs" that would be in flight beside "plain"'s
    assert "theirs" not in bound(cp, ns), "pods of another scheduler are never bound"
    assert condition(pods(cp, ns)["theirs"], "PodScheduled") is None
    assert event_reasons(cp, ns, "theirs") == [], "nor written to"


def test_pods_of_other_schedulers_hold_resources(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    node = f"{ns}-n0"
    other = pod("other", ns, selector=sel, gpus=2, scheduler="default-scheduler")
    other["spec"]["nodeName"] = node  # placed by someone else
    create(cp, other)
    create(cp, pod("mine", ns, selector=sel, gpus=1))
    wait_for(
        "mine refused for want of GPUs",
        lambda: refused(cp, ns, ["mine"], "nvidia.com/gpu"),
    )
    assert "mine" not in bound(cp, ns), "the node's GPUs are held by another scheduler's pod"
    cp.kubectl("delete", "pod", "other", "-n", ns, "--grace-period=0", "--force")
    wait_for("mine bound once the GPUs are free", lambda: bound(cp, ns).get("mine") == node)


def test_malformed_podgroup_is_refused(control_plane: ControlPlane, ns: str) -> None:
    cp = control_plane
    bad = podgroup("bad", ns, 0)
    out = cp.kubectl("create", "-f", "-", input=__import__("json").dumps(bad), check=False)
    assert out.returncode != 0
    assert "minMember" in out.stderr


def test_pod_naming_a_missing_group_waits_with_an_event(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, pod("orphan", ns, group="nowhere", selector=sel))
    wait_for("FailedScheduling", lambda: "FailedScheduling" in event_reasons(cp, ns, "orphan"))
    cond = condition(pods(cp, ns)["orphan"], "PodScheduled")
    assert cond is not None and "PodGroupNotFound" in cond["message"]
    assert bound(cp, ns) == {}
    create(cp, podgroup("nowhere", ns, 1))
    wait_for("bound once the PodGroup exists", lambda: "orphan" in bound(cp, ns))
