"""Writes that arrive: bindings go before informational writes, events repeat as a series the
API server accepts, and a graceful stop sends the Scheduled event of every binding.

Each test runs its own scheduler process under a scheduler name of its own, with a small API
budget so that a backlog of informational writes builds up quickly.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangsched.core.decisions import PodRef
from gangsched.kube.io.client import KubeClient, load_configuration
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.write.events import EventRecorder
from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, create, events, pod, podgroup, wait_for


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.stop()


def _create_all(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": objects}
    cp.kubectl("create", "-f", "-", input=json.dumps(body), timeout=120)


def _gang(
    ns: str, name: str, size: int, sel: dict[str, str], sched: str, gpus: int
) -> list[dict[str, Any]]:
    return [
        podgroup(name, ns, size),
        *(
            pod(f"{name}-{i}", ns, group=name, selector=sel, scheduler=sched, gpus=gpus)
            for i in range(size)
        ),
    ]


def _scheduled_events(cp: ControlPlane, ns: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in events(cp, ns):
        if e.get("reason") == "Scheduled":
            name = (e.get("regarding") or {}).get("name", "")
            out[name] = out.get(name, 0) + 1
    return out


def test_bindings_go_first_and_a_graceful_stop_sends_every_scheduled_event(
    control_plane: ControlPlane,
    ns: str,
    nodes: Any,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    """With 2 requests per second for everything and a backlog of a minute of events and
    conditions (20 gangs that cannot fit), a gang that fits binds at once: its bindings do not
    queue behind the backlog. Stopped right after (SIGTERM), the scheduler sends the Scheduled
    event of every pod it bound before it exits, within a bounded time."""
    cp = control_plane
    sched = "gs-" + uuid.uuid4().hex[:6]
    sel = nodes(2, gpus=4)
    proc = SchedulerProcess(
        cp,
        tmp_path / "s.log",
        "--scheduler-name",
        sched,
        "--no-status-controller",
        "--api-qps",
        "2",
        "--api-burst",
        "40",
    ).start()
    processes.append(proc)
    backlog: list[dict[str, Any]] = []
    for g in range(20):
        backlog += _gang(ns, f"huge{g:02d}", 4, sel, sched, gpus=8)  # no node has 8 GPUs
    _create_all(cp, backlog)
    wait_for(
        "the first FailedScheduling events",
        lambda: any(e.get("reason") == "FailedScheduling" for e in events(cp, ns)),
        timeout=60,
    )
    time.sleep(2)  # the backlog keeps growing: the first attempts of 20 gangs of 4
    stored = len(events(cp, ns))
    assert stored < 80, f"{stored} events already stored: no backlog to test against"

    t0 = time.monotonic()
    _create_all(cp, _gang(ns, "fits", 8, sel, sched, gpus=1))
    created = time.monotonic() - t0
    wait_for("the gang that fits bound", lambda: len(bound(cp, ns)) == 8, timeout=60, interval=0.1)
    took = time.monotonic() - t0
    print(f"8 bindings behind a backlog: bound {took:.2f}s after the create ({created:.2f}s)")
    # Without priority the 8 bindings queue behind the outbox's requests: (4 + 8) / 2 qps = 6 s.
    assert took < 3.5, f"the bindings took {took:.1f}s behind the backlog"

    assert proc.proc is not None
    t1 = time.monotonic()
    proc.proc.terminate()
    code = proc.proc.wait(40)
    stopped = time.monotonic() - t1
    print(f"stopped in {stopped:.1f}s (exit status {code})")
    assert code == 0, proc.tail()
    assert stopped < 20, f"the graceful stop took {stopped:.1f}s"
    placed = bound(cp, ns)
    scheduled = _scheduled_events(cp, ns)
    assert set(scheduled) == set(placed), (
        f"Scheduled events missing for {set(placed) - set(scheduled)}"
    )
    assert all(n == 1 for n in scheduled.values()), scheduled


def test_event_series_are_accepted_by_the_api_server(control_plane: ControlPlane, ns: str) -> None:
    """The recorder's Events and series updates, as the real API server validates them: one
    Event per pod and message, its repeats counted in ``series``."""
    cp = control_plane
    obj = create(cp, pod("p", ns, scheduler="nobody"))
    ref = PodRef(obj["metadata"]["uid"], ns, "p")

    async def record() -> None:
        cfg = await load_configuration(str(cp.kubeconfig))
        client = KubeClient(cfg)
        outbox = Outbox()
        outbox.start()
        recorder = EventRecorder(client, outbox, "gangsched.io/gangsched", "e2e", refresh=0.2)
        try:
            recorder.record(ref, "Warning", "FailedScheduling", "Scheduling", "needs 8 GPUs")
            await asyncio.sleep(0.5)
            for _ in range(4):
                recorder.record(ref, "Warning", "FailedScheduling", "Scheduling", "needs 8 GPUs")
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.5)
            recorder.record(ref, "Normal", "Scheduled", "Binding", "assigned", urgent=True)
            recorder.flush()
            await outbox.drain(10)
            assert outbox.failed == 0
        finally:
            await outbox.stop()
            await client.close()

    asyncio.run(record())
    stored = events(cp, ns)
    failed = [e for e in stored if e.get("reason") == "FailedScheduling"]
    assert len(failed) == 1, failed
    assert failed[0]["note"] == "needs 8 GPUs"
    assert failed[0]["series"]["count"] == 5
    assert [e.get("series") for e in stored if e.get("reason") == "Scheduled"] == [None]
