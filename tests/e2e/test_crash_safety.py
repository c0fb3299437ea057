"""Crash safety of preemption on the real control plane: gangsched SIGKILLed at the exact
moments of an eviction (a victim marked, every victim marked, the first delete accepted,
between deletes), then restarted. Whatever the moment, once the restart settles no Strict gang
runs below its minMember, the preemptor binds whole, and no node is over-committed.

The moments are reached through the scheduler's failpoints (``GANGSCHED_FAILPOINTS``,
kube/write/failpoints.py): the process kills itself right after the Nth mark or delete is accepted,
so each trial is exact rather than a race between a test's watch and the scheduler.
"""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, condition, events, get_pg, pods, wait_for
from .test_preemption import (  # noqa: F401 (a fixture)
    HIGH,
    LOW,
    create_all,
    gang,
    gpus_per_node,
    members,
    priority_classes,
)

Nodes = Callable[..., dict[str, str]]


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.stop()


def running_members(state: dict[str, dict[str, Any]], name: str) -> int:
    """Members bound and neither finished nor being deleted."""
    return sum(
        1
        for p in members(state, name).values()
        if p["spec"].get("nodeName")
        and not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    )


def partial(state: dict[str, dict[str, Any]], size: int) -> dict[str, int]:
    """Strict gangs running with some but not all of their members."""
    out = {}
    for name in ("low-a", "low-b"):
        n = running_members(state, name)
        if 0 < n < size:
            out[name] = n
    return out


def fill_then_preempt(cp: ControlPlane, ns: str, sel: dict[str, str], sched: str) -> None:
    """4 nodes x 4 GPUs filled by two Strict gangs of 8 x 1 GPU, then a gang of 2 x 2 GPUs of
    higher priority: one low gang must go, whole."""
    for name in ("low-a", "low-b"):
        create_all(cp, gang(ns, name, 8, sel, LOW, scheduler=sched))
        wait_for(
            f"gang {name} running",
            lambda name=name: running_members(pods(cp, ns), name) == 8,  # type: ignore[misc]
            timeout=60,
        )
    high = gang(ns, "high", 2, sel, HIGH, scheduler=sched)
    for p in high[1:]:
        p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
        p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    create_all(cp, high)


@pytest.mark.parametrize(
    "moment",
    [
        "evict.marked=1",  # the first victim marked
        "evict.marked=8",  # every victim marked, none deleted
        "evict.deleted=1",  # the first delete accepted
        "evict.deleted=4",  # between deletes
    ],
)
def test_a_preemption_interrupted_by_a_crash_is_carried_out_by_the_next_process(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
    moment: str,
) -> None:
    cp = control_plane
    sched = "gs-" + uuid.uuid4().hex[:6]
    sel = nodes(4, gpus=4)
    log = tmp_path / "sched.log"
    first = SchedulerProcess(
        cp, log, "--scheduler-name", sched, env={"GANGSCHED_FAILPOINTS": moment}
    ).start()
    processes.append(first)
    fill_then_preempt(cp, ns, sel, sched)
    assert first.proc is not None
    wait_for("the scheduler to kill itself at " + moment, lambda: not first.alive(), timeout=60)
    assert first.proc.returncode == -9, first.tail()
    state = pods(cp, ns)
    low = {n: p for name in ("low-a", "low-b") for n, p in members(state, name).items()}
    marked = [
        n
        for n, p in low.items()
        if (c := condition(p, "DisruptionTarget")) is not None and c.get("status") == "True"
    ]
    point, _, count = moment.partition("=")
    if point == "evict.marked":
        # killed after ``count`` marks were accepted (others may have been in flight), before
        # any delete: every victim still runs, some of them marked
        assert len(low) == 16 and int(count) <= len(marked) <= 8, (len(low), marked)
    else:
        # killed after ``count`` deletes were accepted (others may have been in flight)
        assert len(low) <= 16 - int(count), len(low)
    second = SchedulerProcess(cp, log, "--scheduler-name", sched).start()
    processes.append(second)
    wait_for(
        "the high gang bound whole after the restart",
        lambda: len(members(bound(cp, ns), "high")) == 2,
        timeout=90,
    )
    # settled: the victim gang is gone whole, the other untouched, and it stays so
    deadline = time.monotonic() + 3
    while True:
        state = pods(cp, ns)
        assert not partial(state, 8), f"a Strict gang left running part-way: {partial(state, 8)}"
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    counts = sorted(running_members(state, name) for name in ("low-a", "low-b"))
    assert counts == [0, 8], counts
    per_node = gpus_per_node(cp, ns)
    assert max(per_node.values()) <= 4, f"over-committed: {per_node}"
    # every pod bound gets one Scheduled event, whichever process wrote it (the restarted one
    # sends them again for pods bound recently, under the same name)
    scheduled = Counter(
        (e.get("regarding") or {}).get("name", "")
        for e in events(cp, ns)
        if e.get("reason") == "Scheduled"
    )
    for name in bound(cp, ns):
        assert scheduled[name] == 1, (name, scheduled[name])
    resumed = re.search(r"^gangsched_evictions_resumed_total (\S+)$", second.metrics(), re.M)
    assert resumed is not None
    left = [n for n in marked if not low[n]["metadata"].get("deletionTimestamp")]
    if left:  # victims left running at the crash: the restarted process evicted them
        assert float(resumed.group(1)) >= len(left), (resumed.group(0), left)


LEASE_NS = "gangsched-system"


def test_a_leader_paused_after_marking_its_victims_is_replaced_and_the_eviction_finished(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    """Two replicas under one lease. The leader marks every victim of a preemption and is
    then paused (SIGSTOP, the failpoint ``evict.marked=8:stop``) past its lease: the other
    takes over, finds the marks, and carries the eviction out; the gang binds whole. When the
    paused one resumes it deletes nothing more (its writes are fenced) and exits."""
    cp = control_plane
    cp.kubectl("create", "namespace", LEASE_NS, check=False)
    sched = "gs-" + uuid.uuid4().hex[:6]
    env = {"GANGSCHED_LEASE_NAME": "gs-" + uuid.uuid4().hex[:6]}
    sel = nodes(4, gpus=4)

    def replica(identity: str, extra: dict[str, str]) -> SchedulerProcess:
        args = (
            *("--scheduler-name", sched, "--leader-elect", "--identity", identity),
            *("--lease-duration", "4", "--renew-deadline", "3", "--retry-period", "0.5"),
            "--no-status-controller",
        )
        p = SchedulerProcess(cp, tmp_path / f"{identity}.log", *args, env=env | extra)
        processes.append(p.start())
        return p

    first = replica("a", {"GANGSCHED_FAILPOINTS": "evict.marked=8:stop"})
    wait_for("the first replica's caches", lambda: "caches synced" in first.tail(200), 60)
    second = replica("b", {})
    fill_then_preempt(cp, ns, sel, sched)
    assert first.proc is not None

    def marked() -> int:
        return sum(
            1
            for p in pods(cp, ns).values()
            if (c := condition(p, "DisruptionTarget")) is not None and c.get("status") == "True"
        )

    wait_for("every victim marked", lambda: marked() == 8, timeout=60)
    try:
        wait_for(
            "the high gang bound whole by the other replica",
            lambda: len(members(bound(cp, ns), "high")) == 2,
            timeout=90,
        )
    finally:
        first.proc.send_signal(signal.SIGCONT)
    wait_for("the paused replica to exit", lambda: not first.alive(), timeout=30)
    assert "no longer sure to lead" in first.tail(400), first.tail(40)
    deadline = time.monotonic() + 3
    while True:
        state = pods(cp, ns)
        assert not partial(state, 8), f"a Strict gang left running part-way: {partial(state, 8)}"
        if time.monotonic() > deadline:
            break
        time.sleep(0.5)
    counts = sorted(running_members(state, name) for name in ("low-a", "low-b"))
    assert counts == [0, 8], counts
    assert max(gpus_per_node(cp, ns).values()) <= 4
    resumed = re.search(r"^gangsched_evictions_resumed_total (\S+)$", second.metrics(), re.M)
    assert resumed is not None and float(resumed.group(1)) == 8, second.tail(40)


def test_a_gang_the_scheduler_fails_on_is_held_back_and_every_other_gang_scheduled(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    """An error inside gangsched while it decides a gang (the failpoint ``decide=1:raise``
    stands for a bug) stops the process, which first records the error in the status of the
    gang's pods. The next process holds that gang back, with reason SchedulerError, and binds
    the others; setting the record's condition to False tries the gang at once."""
    cp = control_plane
    sched = "gs-" + uuid.uuid4().hex[:6]
    sel = nodes(2, gpus=4)
    log = tmp_path / "sched.log"
    create_all(cp, gang(ns, "poison", 2, sel, LOW, scheduler=sched))
    first = SchedulerProcess(
        cp,
        log,
        "--scheduler-name",
        sched,
        env={
            "GANGSCHED_FAILPOINTS": "decide=1:raise",
            "GANGSCHED_SCHEDULER_ERROR_HOLD_SECONDS": "3600",
        },
    ).start()
    processes.append(first)
    wait_for("the scheduler to stop on the failure", lambda: not first.alive(), timeout=60)
    assert first.proc is not None and first.proc.returncode == 1, first.tail()
    text = log.read_text(errors="replace")
    assert "deciding a gang failed inside gangsched" in text, first.tail()
    assert "FailpointError: failpoint decide reached" in text, first.tail()

    state = members(pods(cp, ns), "poison")
    assert len(state) == 2
    for name, p in state.items():
        assert not p["spec"].get("nodeName"), name
        record = condition(p, "gangsched.io/SchedulerError")
        assert record is not None and record["status"] == "True", (name, p["status"])
        value = json.loads(record["message"])
        assert value["count"] == 1 and value["error"] == "FailpointError: failpoint decide reached"
        scheduled = condition(p, "PodScheduled")
        assert scheduled is not None and scheduled["reason"] == "SchedulerError", scheduled

    second = SchedulerProcess(cp, log, "--scheduler-name", sched).start()
    processes.append(second)
    create_all(cp, gang(ns, "healthy", 2, sel, LOW, scheduler=sched))
    wait_for(
        "the other gang bound whole",
        lambda: len(members(bound(cp, ns), "healthy")) == 2,
        timeout=60,
    )
    wait_for(
        "the held gang's PodGroup says why",
        lambda: (
            (c := condition(get_pg(cp, ns, "poison"), "Scheduled")) is not None
            and c.get("reason") == "SchedulerError"
        ),
        timeout=30,
    )
    assert members(bound(cp, ns), "poison") == {}
    assert second.alive(), second.tail()

    # try it now: the record set to False on each pod (through pods/status, as it was written)
    for name in state:
        cp.kubectl(
            "patch",
            "pod",
            name,
            "-n",
            ns,
            "--subresource=status",
            "--type=strategic",
            "-p",
            json.dumps(
                {
                    "status": {
                        "conditions": [{"type": "gangsched.io/SchedulerError", "status": "False"}]
                    }
                }
            ),
        )
    wait_for(
        "the held gang bound once released",
        lambda: len(members(bound(cp, ns), "poison")) == 2,
        timeout=60,
    )
    assert second.alive(), second.tail()
