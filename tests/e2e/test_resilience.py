"""What production does to a scheduler, done to gangsched on the real control plane: replicas
fighting for the lease, crashes at random points while gangs bind, an API server restart.

Each test runs its own scheduler processes under a scheduler name of its own, so the
session's scheduler never touches its pods.
"""

from __future__ import annotations

import json
import random
import socket
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess, own_control_plane
from .kube import (
    GPU,
    bound,
    condition,
    create,
    event_reasons,
    get_pg,
    pod,
    podgroup,
    pods,
    wait_for,
)

Nodes = Callable[..., dict[str, str]]


@pytest.fixture
def processes(tmp_path: Path) -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.stop()


def _name() -> str:
    return "gs-" + uuid.uuid4().hex[:6]


def _create_all(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    """One request stream for many objects (kubectl create of a List)."""
    for i in range(0, len(objects), 200):
        body = {"apiVersion": "v1", "kind": "List", "items": objects[i : i + 200]}
        cp.kubectl("create", "-f", "-", input=json.dumps(body), timeout=120)


def _gang(
    ns: str, name: str, size: int, sel: dict[str, str], scheduler: str
) -> list[dict[str, Any]]:
    objs = [podgroup(name, ns, size)]
    objs += [
        pod(f"{name}-{i}", ns, group=name, selector=sel, scheduler=scheduler) for i in range(size)
    ]
    return objs


def _lease_holder(cp: ControlPlane, name: str) -> str:
    out = cp.kubectl("get", "lease", name, "-n", "gangsched-system", "-o", "json", check=False)
    if out.returncode != 0:
        return ""
    holder: str = (json.loads(out.stdout).get("spec") or {}).get("holderIdentity") or ""
    return holder


def _ensure_lease_namespace(cp: ControlPlane) -> None:
    cp.kubectl("create", "namespace", "gangsched-system", check=False)


def test_leader_election_hands_over_and_only_the_leader_binds(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    cp = control_plane
    _ensure_lease_namespace(cp)
    sched, lease = _name(), _name()
    sel = nodes(2, gpus=4)
    common = (
        "--scheduler-name",
        sched,
        "--leader-elect",
        "--lease-duration",
        "4",
        "--renew-deadline",
        "3",
        "--retry-period",
        "0.5",
    )
    env = {"GANGSCHED_LEASE_NAME": lease}
    a = SchedulerProcess(cp, tmp_path / "a.log", *common, "--identity", "a", env=env).start()
    b = SchedulerProcess(cp, tmp_path / "b.log", *common, "--identity", "b", env=env).start()
    processes += [a, b]
    holder = wait_for("a leader", lambda: _lease_holder(cp, lease), timeout=30)
    leader, follower = (a, b) if holder == "a" else (b, a)
    _create_all(cp, _gang(ns, "first", 4, sel, sched))
    wait_for("the first gang bound", lambda: len(bound(cp, ns)) == 4)
    assert "leading" in leader.tail(200)
    assert "leading" not in follower.tail(200), "the follower must not lead"

    leader.kill()
    killed_at = time.monotonic()
    new = wait_for(
        "the follower to take the lease",
        lambda: (h := _lease_holder(cp, lease)) and h != holder and h,
        timeout=20,
    )
    took = time.monotonic() - killed_at
    assert new == ("b" if holder == "a" else "a")
    assert took < 4 + 3, f"hand-over took {took:.1f}s, lease duration is 4s"
    _create_all(cp, _gang(ns, "second", 4, sel, sched))
    placed = wait_for("the second gang bound", lambda: len(bound(cp, ns)) == 8 and bound(cp, ns))
    per_node = Counter(placed.values())
    assert all(n <= 4 for n in per_node.values()), per_node


def test_crashes_at_random_points_leave_every_gang_whole(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    """200 gangs are scheduled while the scheduler is killed (SIGKILL) at random moments.
    After the last restart every gang ends whole and no node is over-committed."""
    cp = control_plane
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"random seed {seed}")
    sched = _name()
    sel = nodes(75, gpus=8)  # 600 GPUs: room for the largest draw (200 gangs of 3)
    objects: list[dict[str, Any]] = []
    sizes = {}
    for g in range(200):
        size = rng.choice((1, 2, 2, 3))
        sizes[f"g{g:03d}"] = size
        objects += _gang(ns, f"g{g:03d}", size, sel, sched)
    total = sum(sizes.values())
    log = tmp_path / "sched.log"
    proc = SchedulerProcess(cp, log, "--scheduler-name", sched).start()
    processes.append(proc)
    _create_all(cp, objects)
    kills = 0
    at_kill: list[int] = []
    while kills < 4 and len(bound(cp, ns)) < total:
        time.sleep(rng.uniform(0.3, 2.0))
        proc.kill()
        kills += 1
        at_kill.append(len(bound(cp, ns)))
        proc = SchedulerProcess(cp, log, "--scheduler-name", sched).start()
        processes.append(proc)
    wait_for("every pod bound", lambda: len(bound(cp, ns)) == total, timeout=120)
    placed = bound(cp, ns)
    by_gang: dict[str, int] = defaultdict(int)
    for name in placed:
        by_gang[name.rsplit("-", 1)[0]] += 1
    assert dict(by_gang) == sizes, f"seed {seed}: partial gangs"
    node_gpus: Counter[str] = Counter()
    for p in pods(cp, ns).values():
        node = p["spec"].get("nodeName")
        node_gpus[node] += int(p["spec"]["containers"][0]["resources"]["requests"][GPU])
    assert max(node_gpus.values()) <= 8, f"seed {seed}: over-committed {node_gpus}"
    print(f"killed {kills} times with {at_kill} of {total} pods bound; all gangs ended whole")


def test_api_server_restart_mid_run(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    cp = control_plane
    sched = _name()
    sel = nodes(2, gpus=4)
    proc = SchedulerProcess(cp, tmp_path / "s.log", "--scheduler-name", sched).start()
    processes.append(proc)
    _create_all(cp, _gang(ns, "before", 4, sel, sched))
    wait_for("the first gang bound", lambda: len(bound(cp, ns)) == 4)
    cp.restart_apiserver(downtime=2.0)
    _create_all(cp, _gang(ns, "after", 4, sel, sched))
    wait_for("the second gang bound after the restart", lambda: len(bound(cp, ns)) == 8, 60)
    assert proc.alive(), proc.tail()
    text = proc.metrics()
    assert 'gangsched_bindings_total{result="success"} 8.0' in text, text


def test_watch_expiry_relists_without_losing_or_double_counting(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    """The scheduler is frozen while a pod holding all GPUs is deleted and a new gang is
    created, and the API server restarts (its watch cache starts afresh). When the scheduler
    resumes, its watches cannot continue from their resourceVersion (410 Gone): it relists,
    sees the freed GPUs (nothing double-counted, nothing lost) and binds the new gang."""
    import signal

    cp = control_plane
    sched = _name()
    sel = nodes(1, gpus=4)
    proc = SchedulerProcess(cp, tmp_path / "s.log", "--scheduler-name", sched).start()
    processes.append(proc)
    _create_all(cp, _gang(ns, "hog", 4, sel, sched))
    wait_for("the first gang bound", lambda: len(bound(cp, ns)) == 4)
    assert proc.proc is not None
    proc.proc.send_signal(signal.SIGSTOP)
    try:
        for i in range(4):
            cp.kubectl("delete", "pod", f"hog-{i}", "-n", ns, "--grace-period=0", "--force")
        _create_all(cp, _gang(ns, "next", 4, sel, sched))
        cp.restart_apiserver(downtime=1.0)
    finally:
        proc.proc.send_signal(signal.SIGCONT)
    wait_for("the new gang bound after the relist", lambda: len(bound(cp, ns)) == 4, 60)
    assert set(bound(cp, ns)) == {f"next-{i}" for i in range(4)}
    text = wait_for(
        "a relist in the metrics",
        lambda: (t := proc.metrics()) and "gangsched_watch_relists_total{" in t and t,
        timeout=30,
    )
    relists = [
        line for line in text.splitlines() if line.startswith("gangsched_watch_relists_total{")
    ]
    assert any(float(line.rsplit(" ", 1)[1]) >= 1 for line in relists), relists


def test_node_deleted_while_reserved_releases_the_gang(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
) -> None:
    """A gang holding reservations at Permit loses the node they are on: everything it holds
    is released (GangReleased, not a timeout), nothing stays reserved for it, and it binds
    elsewhere once its group can."""
    cp = control_plane
    sel = nodes(4, gpus=2)  # the group's 2 + 6 GPUs fit the totals, the 3-GPU pods no node
    create(cp, podgroup("left", ns, 2, timeout=600, gangGroup=["left", "right"]))
    create(cp, podgroup("right", ns, 2, timeout=600, gangGroup=["left", "right"]))
    for i in range(2):
        create(cp, pod(f"left-{i}", ns, group="left", selector=sel))
    for i in range(2):
        create(cp, pod(f"right-{i}", ns, group="right", selector=sel, gpus=3))
    wait_for(
        "left to hold its reservations at Permit",
        lambda: (get_pg(cp, ns, "left").get("status") or {}).get("waiting") == 2,
        timeout=30,
    )
    # delete every node of the test: whichever holds the reservations goes
    for i in range(4):
        cp.kubectl("delete", "node", f"{ns}-n{i}", "--wait=false")
    wait_for(
        "a GangReleased event",
        lambda: (
            "GangReleased" in event_reasons(cp, ns, "left-0")
            or "GangReleased" in event_reasons(cp, ns, "left-1")
        ),
        timeout=30,
    )
    wait_for(
        "the PodGroup to hold nothing",
        lambda: (get_pg(cp, ns, "left").get("status") or {}).get("waiting") == 0,
    )
    state = pods(cp, ns)
    for name in ("left-0", "left-1"):
        said = (condition(state[name], "PodScheduled") or {}).get("message", "")
        assert not said.startswith("Timeout:"), "a release is not a timeout"
        assert "GangTimeout" not in event_reasons(cp, ns, name), "a release is not a timeout"
    assert bound(cp, ns) == {}
    # the right gang gives up its impossible demand: the group can now complete on what is left
    for i in range(2):
        cp.kubectl("delete", "pod", f"right-{i}", "-n", ns, "--grace-period=0", "--force")
    for i in range(2):
        create(cp, pod(f"right-new-{i}", ns, group="right", selector=sel, gpus=0))
    nodes(1, gpus=2)  # a new node, n4
    wait_for("the whole group bound on the new node", lambda: len(bound(cp, ns)) == 4, 30)
    assert set(bound(cp, ns).values()) == {f"{ns}-n4"}


# Every request at Metadata level: the audit log tells the scheduler's requests apart by their
# user agent and says when the API server received each.
AUDIT_ALL: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata"}],
}


def _received(event: dict[str, Any]) -> float:
    stamp = str(event["requestReceivedTimestamp"]).replace("Z", "+00:00")
    return datetime.fromisoformat(stamp).timestamp()


def test_client_side_rate_limit_holds_under_a_burst(tmp_path: Path) -> None:
    """A burst of pending pods does not flood the API server: every request the scheduler
    sends (reads, watches and writes alike: bindings, events, conditions) is within its token
    bucket (burst + qps per second) in any window of the API server's own arrival times.

    On a control plane of this test's own, with an audit log: the scheduler's requests are
    those whose user agent ends with its identity (host and process id), its leader election's
    and status controller's clients being named apart; other clients (kwok, the test itself)
    do not count, and no other test's scheduler writes there."""
    qps, burst = 10, 10
    sched, ns = _name(), "rate-limit"
    with own_control_plane(AUDIT_ALL) as cp:
        cp.create_namespace(ns)
        for i in range(13):
            cp.add_fake_node(f"rl-{i}", "16", "64Gi", 8, labels={"e2e-test": ns})
        sel = {"e2e-test": ns}
        _create_all(cp, [pod(f"p-{i}", ns, selector=sel, scheduler=sched) for i in range(100)])
        proc = SchedulerProcess(
            cp,
            tmp_path / "s.log",
            "--scheduler-name",
            sched,
            "--no-status-controller",
            "--api-qps",
            str(qps),
            "--api-burst",
            str(burst),
        ).start()
        try:
            wait_for("every pod bound", lambda: len(bound(cp, ns)) == 100, timeout=120)
            assert proc.proc is not None
            identity = f" {socket.gethostname()}-{proc.proc.pid}"
            # what it sends right after the last binding (its events) lands too
            time.sleep(3)
        finally:
            proc.stop()
        # one entry per request (a watch has one at its start and one at its end)
        mine = {
            e["auditID"]: e
            for e in cp.audit_events()
            if str(e.get("userAgent", "")).endswith(identity)
        }
        stamps = sorted(_received(e) for e in mine.values())
    assert len(stamps) >= 100, f"the scheduler's requests in the audit log: {len(stamps)}"
    worst, where = 0.0, ""
    for i, t0 in enumerate(stamps):
        for j in range(i, len(stamps)):
            # a token taken at t reaches the API server a little later, by a delay that varies
            # from request to request (more on a loaded machine): 1 s of slack for it
            allowed = burst + qps * (stamps[j] - t0 + 1.0)
            if (j - i + 1) / allowed > worst:
                worst = (j - i + 1) / allowed
                where = f"{j - i + 1} in [{t0 - stamps[0]:.2f}, {stamps[j] - stamps[0]:.2f}] s"
    took = stamps[-1] - stamps[0]
    print(f"{len(stamps)} requests in {took:.1f}s; worst window {worst:.2f}: {where}")
    assert worst <= 1.0, f"the API server saw more requests than {qps} qps / burst {burst} allow"
