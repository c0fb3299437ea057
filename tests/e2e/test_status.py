"""What users see agrees with the pods, on the real control plane: a pod's PodScheduled
condition never moves back from scheduled; PodGroup phase, counts and the Scheduled condition
agree with each other and with the members through minMember changes, deletions, a restart and
a garbled status; the PodGroup controller's Accepted condition says whether the scheduler can
use the spec, next to the scheduler's fields (two field managers on one status); refused pods
and declarations gangsched does not read are shown, not scheduled silently."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gangsched.core.decisions import PodRef
from gangsched.core.status import SCHEDULED_PHASES
from gangsched.kube.io.client import ApiError, KubeClient, load_configuration
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.write.reporter import Reporter
from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import (
    bound,
    condition,
    create,
    event_reasons,
    events,
    get_pg,
    pod,
    podgroup,
    pods,
    wait_for,
)

Nodes = Callable[..., dict[str, str]]


def _bind(cp: ControlPlane, ns: str, name: str, node: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": node},
    }
    cp.kubectl(
        "create",
        "--raw",
        f"/api/v1/namespaces/{ns}/pods/{name}/binding",
        "-f",
        "-",
        input=json.dumps(body),
    )


async def test_a_condition_decided_before_the_binding_never_lands_after_it(
    control_plane: ControlPlane, ns: str, nodes: Nodes
) -> None:
    """The race of the issue, made certain: the scheduler decided PodScheduled=False while the
    pod was unbound (the watch's view, at the version before the binding); the binding lands
    first; the queued write then goes out. The API server must refuse it."""
    cp = control_plane
    sel = nodes(1, gpus=2)
    for name in ("late", "waiting"):
        create(cp, pod(name, ns, selector=sel, scheduler="nobody"))
    before = {n: p["metadata"] for n, p in pods(cp, ns).items()}
    _bind(cp, ns, "late", f"{ns}-n0")
    assert condition(pods(cp, ns)["late"], "PodScheduled") is not None

    client = KubeClient(await load_configuration(str(cp.kubeconfig)))
    outbox = Outbox()
    outbox.start()
    try:
        # The API server itself refuses a status patch on a version the binding replaced.
        stale = {
            "metadata": {"resourceVersion": before["late"]["resourceVersion"]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False"}]},
        }
        try:
            await client.strategic_patch(f"/api/v1/namespaces/{ns}/pods/late/status", stale)
            raise AssertionError("a patch on a replaced resourceVersion was accepted")
        except ApiError as e:
            assert e.status == 409, e

        reporter = Reporter(client, outbox, "e2e")
        reporter.pod_version = lambda uid: next(
            str(m["resourceVersion"]) for m in before.values() if m["uid"] == uid
        )
        for name in ("late", "waiting"):
            ref = PodRef(before[name]["uid"], ns, name)
            reporter.unschedulable(ref, "WaitingForMembers", "1 of 2 members exist")
        await outbox.drain(10.0)
    finally:
        await outbox.stop()
        await client.close()
    now = pods(cp, ns)
    late = condition(now["late"], "PodScheduled")
    assert late is not None and late["status"] == "True", late
    assert now["late"]["spec"]["nodeName"] == f"{ns}-n0"
    # the same write on a pod still unbound lands
    waiting = condition(now["waiting"], "PodScheduled")
    assert waiting is not None and waiting["status"] == "False", waiting
    assert waiting["message"] == "WaitingForMembers: 1 of 2 members exist"


def _consistent(pg: dict[str, Any]) -> dict[str, Any] | None:
    """The PodGroup's status if it agrees with itself (else fail); None before it has one."""
    status = pg.get("status") or {}
    cond = condition(pg, "Scheduled")
    if cond is None or "phase" not in status:
        return None
    is_true = cond["status"] == "True"
    assert is_true == (status["phase"] in SCHEDULED_PHASES), status
    assert is_true == (cond["reason"] == "Scheduled"), status
    assert status.get("message", "") == cond["message"][:1024], status
    assert "None" not in cond["message"], status
    if status.get("observedGeneration") == pg["metadata"]["generation"]:
        assert is_true == (status.get("scheduled", 0) >= pg["spec"]["minMember"]), status
    return status


def _settles(cp: ControlPlane, ns: str, name: str, want: Callable[[dict[str, Any]], bool]) -> Any:
    """Wait until the status says what ``want`` asks, checking every state seen on the way."""

    def probe() -> dict[str, Any] | None:
        pg = get_pg(cp, ns, name)
        status = _consistent(pg)
        if status is None or status.get("observedGeneration") != pg["metadata"]["generation"]:
            return None
        return pg if want(pg) else None

    return wait_for(f"the status of {name}", probe, timeout=30)


def _says(
    scheduled: int, phase: str, status: str, reason: str, message: str
) -> Callable[[dict[str, Any]], bool]:
    def check(pg: dict[str, Any]) -> bool:
        cond = condition(pg, "Scheduled") or {}
        st = pg.get("status") or {}
        got = (st.get("scheduled"), st.get("phase"), cond.get("status"), cond.get("reason"))
        return got == (scheduled, phase, status, reason) and cond.get("message") == message

    return check


def test_podgroup_status_follows_min_member_and_deleted_members(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=4)
    create(cp, podgroup("g", ns, 2))
    for i in range(2):
        create(cp, pod(f"g-{i}", ns, group="g", selector=sel))
    _settles(cp, ns, "g", _says(2, "Running", "True", "Scheduled", "2 member(s) bound"))

    cp.kubectl(
        "patch",
        "podgroups.gangsched.io",
        "g",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"minMember": 5}}),
    )
    _settles(
        cp,
        ns,
        "g",
        _says(
            2,
            "Scheduling",
            "False",
            "WaitingForMembers",
            "2 of 5 members exist; waiting for more pods",
        ),
    )
    cp.kubectl(
        "patch",
        "podgroups.gangsched.io",
        "g",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"minMember": 2}}),
    )
    _settles(cp, ns, "g", _says(2, "Running", "True", "Scheduled", "2 member(s) bound"))

    # The gang ran: a member deleted now is a member lost (core/lifecycle.py).
    cp.kubectl("delete", "pod", "g-1", "-n", ns, "--grace-period=0", "--force")
    _settles(
        cp,
        ns,
        "g",
        _says(
            1,
            "Unknown",
            "False",
            "MembersLost",
            "the gang lost members (member g-1 was deleted): 1 of minMember 2 bound or "
            "succeeded; waiting for its controller to replace them",
        ),
    )


def test_a_member_held_terminating_is_lost_and_not_counted_bound(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """A running member whose deletion is asked for stays terminating while a finalizer and
    its grace period hold it: from that moment the gang has lost it, and the counts say so
    too (every status seen on the way is checked to agree with itself)."""
    cp = control_plane
    sel = nodes(1, gpus=4)
    create(cp, podgroup("t", ns, 2))
    for i in range(2):
        member = pod(f"t-{i}", ns, group="t", selector=sel)
        member["metadata"]["finalizers"] = ["e2e.gangsched.io/hold"]
        create(cp, member)
    _settles(cp, ns, "t", _says(2, "Running", "True", "Scheduled", "2 member(s) bound"))

    cp.kubectl("delete", "pod", "t-1", "-n", ns, "--grace-period=60", "--wait=false")
    try:
        pg = _settles(
            cp,
            ns,
            "t",
            _says(
                1,
                "Unknown",
                "False",
                "MembersLost",
                "the gang lost members (member t-1 was deleted): 1 of minMember 2 bound or "
                "succeeded; waiting for its controller to replace them",
            ),
        )
        assert (pg["status"]["running"], pods(cp, ns)["t-1"]["status"]["phase"]) == (
            1,
            "Running",
        )
    finally:
        for name in ("t-0", "t-1"):
            cp.kubectl(
                "patch",
                "pod",
                name,
                "-n",
                ns,
                "--type",
                "merge",
                "-p",
                json.dumps({"metadata": {"finalizers": None}}),
            )


def test_members_left_over_say_what_the_gang_holds(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """Two of four members fit and are bound; the other two say the gang holds two."""
    cp = control_plane
    sel = nodes(1, gpus=2)
    for i in range(4):
        create(cp, pod(f"h-{i}", ns, group="h", selector=sel))
    create(cp, podgroup("h", ns, 2))  # all four are pending when the gang is first tried
    wait_for("two members bound", lambda: len(bound(cp, ns)) == 2)
    left = sorted(set(pods(cp, ns)) - set(bound(cp, ns)))

    def notes() -> dict[str, list[str]] | None:
        found: dict[str, list[str]] = {name: [] for name in left}
        for e in events(cp, ns):
            name = (e.get("regarding") or {}).get("name")
            if name in found and e.get("reason") == "FailedScheduling" and "holding" in e["note"]:
                found[name].append(e["note"])
        return found if all(found.values()) else None

    # every attempt's message, the first one included, counts the members the gang keeps
    said = wait_for("the members left over to say why", notes)
    assert all("(minMember 2, holding 2)" in n for ns_ in said.values() for n in ns_), said
    for name in left:
        msg = (condition(pods(cp, ns)[name], "PodScheduled") or {}).get("message", "")
        assert "holding 0" not in msg, msg
    _settles(cp, ns, "h", _says(2, "Running", "True", "Scheduled", "2 member(s) bound"))


def _own_scheduler(
    cp: ControlPlane, log: Path, name: str, env: dict[str, str] | None = None
) -> SchedulerProcess:
    return SchedulerProcess(cp, log, "--scheduler-name", name, env=env).start()


def test_status_converges_after_members_are_deleted_while_the_scheduler_is_stopped(
    control_plane: ControlPlane, ns: str, nodes: Nodes, tmp_path: Path
) -> None:
    cp = control_plane
    sched = "gs-" + uuid.uuid4().hex[:6]
    sel = nodes(1, gpus=2)
    first = _own_scheduler(cp, tmp_path / "first.log", sched)
    try:
        create(cp, podgroup("r", ns, 2))
        for i in range(2):
            create(cp, pod(f"r-{i}", ns, group="r", selector=sel, scheduler=sched))
        _settles(cp, ns, "r", _says(2, "Running", "True", "Scheduled", "2 member(s) bound"))
    finally:
        first.stop()
    cp.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force")
    wait_for("the members gone", lambda: not pods(cp, ns))
    second = _own_scheduler(cp, tmp_path / "second.log", sched)
    try:
        _settles(
            cp,
            ns,
            "r",
            _says(
                0,
                "Scheduling",
                "False",
                "WaitingForMembers",
                "0 of 2 members exist; waiting for more pods",
            ),
        )
    finally:
        second.stop()


def test_a_garbled_status_is_repaired_by_the_periodic_recompute(
    control_plane: ControlPlane, ns: str, nodes: Nodes, tmp_path: Path
) -> None:
    """A status that agrees with itself but not with the scheduler (a lost write, someone
    else's write) is rewritten within statusResyncSeconds, with nothing else happening."""
    cp = control_plane
    sched = "gs-" + uuid.uuid4().hex[:6]
    sel = nodes(1, gpus=2)
    env = {"GANGSCHED_STATUS_RESYNC_SECONDS": "2"}
    proc = _own_scheduler(cp, tmp_path / "resync.log", sched, env)
    try:
        create(cp, podgroup("w", ns, 3))
        create(cp, pod("w-0", ns, group="w", selector=sel, scheduler=sched))
        truth = "1 of 3 members exist; waiting for more pods"
        _settles(cp, ns, "w", _says(0, "Pending", "False", "WaitingForMembers", truth))
        cond = condition(get_pg(cp, ns, "w"), "Scheduled")
        assert cond is not None
        garbled = {"status": {"message": "garbled", "conditions": [{**cond, "message": "garbled"}]}}
        cp.kubectl(
            "patch",
            "podgroups.gangsched.io",
            "w",
            "-n",
            ns,
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            json.dumps(garbled),
        )
        assert (get_pg(cp, ns, "w").get("status") or {}).get("message") == "garbled"
        _settles(cp, ns, "w", _says(0, "Pending", "False", "WaitingForMembers", truth))
        # the merge patch replaced the conditions: the PodGroup controller puts its own back
        wait_for(
            "the Accepted condition back",
            lambda: (condition(get_pg(cp, ns, "w"), "Accepted") or {}).get("status") == "True",
        )
    finally:
        proc.stop()


def test_the_accepted_condition_says_whether_the_scheduler_can_use_the_spec(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """A spec the CRD's schema accepts and the scheduler cannot use (half a GPU): Accepted
    False naming the field, and the scheduler's Scheduled condition says InvalidSpec; fixed,
    Accepted True at the new generation, and the gang binds."""
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, podgroup("half", ns, 1, minResources={"nvidia.com/gpu": "0.5"}))
    create(cp, pod("half-0", ns, group="half", selector=sel))

    def accepted(status: str) -> dict[str, Any] | None:
        pg = get_pg(cp, ns, "half")
        cond = condition(pg, "Accepted")
        if cond is None or cond["status"] != status:
            return None
        return cond if cond["observedGeneration"] == pg["metadata"]["generation"] else None

    refused = wait_for("Accepted=False", lambda: accepted("False"))
    assert refused["reason"] == "InvalidSpec", refused
    assert refused["message"].startswith("spec.minResources.nvidia.com/gpu: "), refused
    _settles(
        cp,
        ns,
        "half",
        lambda pg: (condition(pg, "Scheduled") or {}).get("reason") == "InvalidSpec",
    )
    assert bound(cp, ns) == {}
    cp.kubectl(
        "patch",
        "podgroups.gangsched.io",
        "half",
        "-n",
        ns,
        "--type",
        "merge",
        "-p",
        json.dumps({"spec": {"minResources": {"nvidia.com/gpu": "1"}}}),
    )
    fixed = wait_for("Accepted=True", lambda: accepted("True"))
    assert (fixed["reason"], fixed["message"]) == ("Accepted", "the spec is valid")
    wait_for("the gang bound", lambda: "half-0" in bound(cp, ns))
    _settles(cp, ns, "half", _says(1, "Running", "True", "Scheduled", "1 member(s) bound"))


def _kubectl_gang(cp: ControlPlane, ns: str, *args: str) -> str:
    run = [
        sys.executable,
        "-m",
        "gangsched.kubectl_gang",
        "-n",
        ns,
        "--kubeconfig",
        str(cp.kubeconfig),
        *args,
    ]
    return subprocess.run(run, capture_output=True, text=True, check=True, timeout=60).stdout


def test_refused_pods_and_unread_declarations_are_shown_not_scheduled(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    sigs = {
        "pod-group.scheduling.sigs.k8s.io/name": "sigs",
        "pod-group.scheduling.sigs.k8s.io/min-available": "2",
    }
    create(cp, pod("sigs-0", ns, selector=sel, labels=sigs))
    create(cp, podgroup("ddp", ns, 1))
    create(cp, pod("ddp-0", ns, group="ddp", selector=sel))
    legacy = pod("ddp-1", ns, group="ddp", selector=sel)
    legacy["spec"]["volumes"] = [
        {"name": "legacy", "rbd": {"monitors": ["10.0.0.1"], "image": "i"}}
    ]
    create(cp, legacy)
    create(cp, pod("typo", ns, selector=sel, labels={"gangsched.io/podgroup": "ddp"}))
    create(cp, pod("lost-0", ns, group="lost", selector=sel))

    wait_for("ddp-0 bound", lambda: "ddp-0" in bound(cp, ns))
    time_to_say = "a Warning event on the pod that declares what gangsched does not read"
    wait_for(time_to_say, lambda: "FailedScheduling" in event_reasons(cp, ns, "typo"))
    typo = condition(pods(cp, ns)["typo"], "PodScheduled")
    assert typo is not None and "gangsched.io/podgroup" in typo["message"], typo
    assert typo["message"].startswith("InvalidPod: "), typo
    assert "sigs-0" not in bound(cp, ns), "one of two members of a labelled gang must not bind"
    create(cp, pod("sigs-1", ns, selector=sel, labels=sigs))
    wait_for("the labelled gang bound", lambda: {"sigs-0", "sigs-1"} <= set(bound(cp, ns)))
    wait_for(
        "the refused pod to say why",
        lambda: (
            (condition(pods(cp, ns)["ddp-1"], "PodScheduled") or {})
            .get("message", "")
            .startswith("Unsupported: ")
        ),
    )
    wait_for(
        "the pods of a missing PodGroup to say so",
        lambda: (
            "PodGroupNotFound"
            in (condition(pods(cp, ns)["lost-0"], "PodScheduled") or {}).get("message", "")
        ),
    )
    assert set(bound(cp, ns)) == {"ddp-0", "sigs-0", "sigs-1"}

    rows = {
        line.split()[0]: line.split() for line in _kubectl_gang(cp, ns, "-o", "wide").splitlines()
    }
    assert rows["GANG"][:3] == ["GANG", "SOURCE", "PHASE"]
    assert rows["ddp"][1:3] == ["PodGroup", "Running"]
    assert rows["sigs"][1:4] == ["labels", "Running", "2"]
    assert rows["lost"][1:4] == ["PodGroup", "Pending", "-"]
    assert "does not exist" in " ".join(rows["lost"])
    assert rows["pod/ddp-1"][1:3] == ["PodGroup", "Unsupported"]
    assert "spec.volumes[0].rbd" in " ".join(rows["pod/ddp-1"])
    assert rows["pod/typo"][1:3] == ["-", "InvalidPod"]
    assert "gangsched.io/podgroup" in " ".join(rows["pod/typo"])
    data = json.loads(_kubectl_gang(cp, ns, "-o", "json"))
    refused = {r["pod"]: r for r in data if r["pod"]}
    assert refused["ddp-1"]["gang"] == "ddp" and refused["ddp-1"]["phase"] == "Unsupported"
    assert refused["typo"]["phase"] == "InvalidPod"
