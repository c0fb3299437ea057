"""A deposed leader never binds: two replicas on an API server that keeps an audit log; the
leader is paused (SIGSTOP) past the lease duration while it is binding, the other takes over
and binds, then the paused one resumes. Whatever it had decided or queued, the audit log shows
no binding of it accepted after the takeover, it exits on its own, and no node is
over-committed.

The control plane here is one of its own (it writes an audit log), started for this module.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess, own_control_plane
from .kube import GPU, pod, podgroup, pods, wait_for

AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "Metadata", "resources": [{"group": "", "resources": ["pods/binding"]}]},
        {"level": "None"},
    ],
}

LEASE_NS = "gangsched-system"
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 4, 3, 0.5
NODES, GPUS = 4, 4
GANG = 4  # pods of one GPU each
ROUNDS = 3
HIGH = "fence-high"


@pytest.fixture(scope="module")
def audited() -> Iterator[ControlPlane]:
    with own_control_plane(AUDIT_POLICY) as cp:
        cp.create_namespace(LEASE_NS)
        priority = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": HIGH},
            "value": 1000,
        }
        cp.kubectl("create", "-f", "-", input=json.dumps(priority))
        yield cp


def _lease(cp: ControlPlane, name: str) -> dict[str, Any]:
    out = cp.kubectl("get", "lease", name, "-n", LEASE_NS, "-o", "json", check=False)
    if out.returncode != 0:
        return {}
    spec: dict[str, Any] = json.loads(out.stdout).get("spec") or {}
    return spec


def _time(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _create(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": objects}
    cp.kubectl("create", "-f", "-", input=json.dumps(body), timeout=60)


def _gangs(
    ns: str, prefix: str, count: int, sel: dict[str, str], sched: str, priority: str = ""
) -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = []
    for g in range(count):
        name = f"{prefix}{g}"
        objs.append(podgroup(name, ns, GANG))
        for i in range(GANG):
            p = pod(f"{name}-{i}", ns, group=name, selector=sel, scheduler=sched)
            if priority:
                p["spec"]["priorityClassName"] = priority
            objs.append(p)
    return objs


def _accepted(cp: ControlPlane, ns: str, identity: str) -> list[dict[str, Any]]:
    """Accepted pods/binding requests in ``ns`` from the process that leads as ``identity``
    (its user agent ends with it)."""
    return [
        e
        for e in cp.audit_events()
        if (e.get("objectRef") or {}).get("subresource") == "binding"
        and (e.get("objectRef") or {}).get("namespace") == ns
        and 200 <= int((e.get("responseStatus") or {}).get("code", 0)) < 300
        and str(e.get("userAgent", "")).endswith(f") {identity}")
    ]


def _gpus_per_node(cp: ControlPlane, ns: str) -> Counter[str]:
    used: Counter[str] = Counter()
    for p in pods(cp, ns).values():
        if node := p["spec"].get("nodeName"):
            used[node] += int(p["spec"]["containers"][0]["resources"]["requests"][GPU])
    return used


class Replicas:
    """Scheduler processes under one scheduler name and one lease, each with its own identity
    (so its user agent tells its requests apart in the audit log)."""

    def __init__(self, cp: ControlPlane, logs: Path) -> None:
        self.cp = cp
        self.logs = logs
        self.scheduler = "gs-" + uuid.uuid4().hex[:6]
        self.lease = "gs-" + uuid.uuid4().hex[:6]
        self.procs: dict[str, SchedulerProcess] = {}

    def start(self, identity: str) -> None:
        args = (
            *("--scheduler-name", self.scheduler, "--leader-elect", "--identity", identity),
            *("--lease-duration", str(LEASE_DURATION), "--renew-deadline", str(RENEW_DEADLINE)),
            *("--retry-period", str(RETRY_PERIOD), "--api-qps", "8", "--api-burst", "6"),
            "--no-status-controller",  # not what is tested here, and it slows every exit
        )
        env = {"GANGSCHED_LEASE_NAME": self.lease}
        log = self.logs / f"{identity}.log"
        self.procs[identity] = SchedulerProcess(self.cp, log, *args, env=env).start()

    def holder(self) -> str:
        holder: str = _lease(self.cp, self.lease).get("holderIdentity") or ""
        return holder

    def kill(self) -> None:
        for p in self.procs.values():
            p.kill()


def _pause_the_leader_while_it_binds(cp: ControlPlane, replicas: Replicas, r: int) -> str:
    """One round; returns the identity of the paused (deposed) leader."""
    ns = f"fence-{r}-{uuid.uuid4().hex[:6]}"
    cp.create_namespace(ns)
    sel = {"fence-round": ns}
    for i in range(NODES):
        cp.add_fake_node(f"{ns}-n{i}", "64", "256Gi", GPUS, labels=sel)
    capacity = NODES * GPUS
    holder = wait_for("a leader", replicas.holder, 30)
    leader = replicas.procs[holder]
    assert leader.proc is not None
    wait_for("the leader's caches", lambda: "caches synced" in leader.tail(200), 30)

    _create(cp, _gangs(ns, "w", capacity // GANG, sel, replicas.scheduler))
    wait_for("a first binding", lambda: _accepted(cp, ns, holder), 30, interval=0.02)
    leader.proc.send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        _create(cp, _gangs(ns, "x", capacity // GANG, sel, replicas.scheduler, HIGH))
        new = wait_for(
            "another replica to take the lease",
            lambda: (h := replicas.holder()) != holder and h,
            timeout=20,
        )
        took_over = _time(_lease(cp, replicas.lease)["acquireTime"])
        wait_for(
            "the new leader to fill the nodes",
            lambda: sum(_gpus_per_node(cp, ns).values()) >= capacity,
            timeout=30,
        )
        before = len(_accepted(cp, ns, holder))
    finally:
        paused = time.monotonic() - stopped
        leader.proc.send_signal(signal.SIGCONT)
    resumed = time.monotonic()
    wait_for("the deposed replica to exit", lambda: not leader.alive(), timeout=15)
    exited = time.monotonic() - resumed
    mine = _accepted(cp, ns, holder)
    late = [e for e in mine if _time(e["requestReceivedTimestamp"]) >= took_over]
    used = _gpus_per_node(cp, ns)
    print(
        f"round {r}: {holder} paused {paused:.1f}s after {before} binding(s), {new} took over; "
        f"{len(mine) - before} more of {holder} accepted after it resumed ({len(late)} after "
        f"the takeover), exited {exited:.1f}s after resuming; GPUs per node "
        f"{sorted(used.values())}"
    )
    assert not late, f"round {r}: bindings of the deposed {holder} accepted: {late}"
    assert max(used.values()) <= GPUS, f"round {r}: over-committed: {used}"
    assert "no longer sure to lead" in leader.tail(400), leader.tail(40)
    return holder


def test_a_paused_leader_never_binds_after_it_is_deposed(
    audited: ControlPlane, tmp_path: Path
) -> None:
    """Each round: the leader decides four gangs that fill the nodes, and its client's rate
    limit holds most of their bindings back; it is paused right after the first binding is
    accepted. Meanwhile gangs of a higher priority arrive; the replica that takes over
    completes the gang left part-way and fills the rest with them, so the gangs the paused one
    still holds decisions for no longer fit. When it resumes it sends none of them: the audit
    log shows no binding of it accepted after the takeover, it exits, no node is over-committed.
    """
    replicas = Replicas(audited, tmp_path)
    replicas.start("a0")
    replicas.start("b0")
    try:
        for r in range(ROUNDS):
            deposed = _pause_the_leader_while_it_binds(audited, replicas, r)
            replicas.start(f"{deposed[0]}{r + 1}")  # a fresh standby, under a name of its own
    finally:
        replicas.kill()  # what is left to check is checked
