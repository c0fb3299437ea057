"""The gang lifecycle on the real control plane: a gang with onMemberLoss RestartGang runs, one
member is deleted, gangsched deletes the rest (a GangRestart event on each), the PodGroup's
status says the gang lost members, and the recreated members are scheduled again whole."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, condition, create, events, get_pg, pod, podgroup, pods, wait_for

Nodes = Callable[..., dict[str, str]]


def _running(cp: ControlPlane, ns: str, names: list[str]) -> bool:
    got = pods(cp, ns)
    return all(
        n in got
        and got[n]["spec"].get("nodeName")
        and (got[n].get("status") or {}).get("phase") == "Running"
        for n in names
    )


def test_restart_gang_deletes_the_members_left_and_the_status_says_why(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    create(cp, podgroup("train", ns, 4, onMemberLoss="RestartGang"))
    first = [f"train-{i}" for i in range(4)]
    for name in first:
        create(cp, pod(name, ns, group="train", selector=sel))
    wait_for("the gang running", lambda: _running(cp, ns, first))
    assert get_pg(cp, ns, "train")["spec"]["onMemberLoss"] == "RestartGang"

    cp.kubectl("delete", "pod", "train-0", "-n", ns, "--wait=false")
    wait_for("every member gone", lambda: not pods(cp, ns), timeout=30)

    def lost() -> dict[str, Any] | None:
        pg = get_pg(cp, ns, "train")
        cond = condition(pg, "Scheduled") or {}
        status = pg.get("status") or {}
        ok = status.get("phase") == "Unknown" and cond.get("reason") == "MembersLost"
        return pg if ok and cond.get("status") == "False" else None

    pg = wait_for("the PodGroup to say the gang lost members", lost)
    message = condition(pg, "Scheduled")["message"]  # type: ignore[index]
    assert "member train-0" in message and "of minMember 4" in message, message
    assert "restarting the whole gang" in message, message

    def restarted() -> dict[str, str] | None:
        found = {
            e["regarding"]["name"]: e["note"]
            for e in events(cp, ns)
            if e.get("reason") == "GangRestart"
        }
        return found if set(found) == {"train-1", "train-2", "train-3"} else None

    notes = wait_for("a GangRestart event on each member deleted", restarted)
    assert all(n.startswith(f"Deleted to restart gang {ns}/train") for n in notes.values())
    assert all(e["type"] == "Warning" for e in events(cp, ns) if e["reason"] == "GangRestart")

    # The controller (here: the test) recreates the members; they are scheduled whole.
    again = [f"train-b{i}" for i in range(4)]
    create(cp, pod(again[0], ns, group="train", selector=sel))
    for name in again[1:]:
        create(cp, pod(name, ns, group="train", selector=sel))
    wait_for("the new members running", lambda: _running(cp, ns, again))
    assert sorted(bound(cp, ns)) == again

    def whole() -> bool:
        pg = get_pg(cp, ns, "train")
        cond = condition(pg, "Scheduled") or {}
        return (pg.get("status") or {}).get("phase") == "Running" and cond.get("status") == "True"

    wait_for("the PodGroup running again", whole)
