"""Watches recover at once: after an API server outage the scheduler sees (and binds) a new
pod within a few seconds of the server being ready again, whatever the outage's length."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, create, pod, wait_for

# A little over 20 s, so that retries doubling to 30 s (from 0.5 s, with jitter) are sure to
# have made their last attempt before the server is back, and the next comes 7 s or more late.
OUTAGE = 22.0


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.stop()


def test_a_pod_created_right_after_an_outage_binds_within_seconds(
    control_plane: ControlPlane,
    ns: str,
    nodes: Any,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    """The API server is down for 22 s. A pod created as soon as /readyz answers 200 is bound
    within a few seconds: the watches retried every second or so while the server refused
    connections. (Backing off by doubling to 30 s, they came back 12-20 s late.)"""
    cp = control_plane
    sched = "gs-" + uuid.uuid4().hex[:6]
    sel = nodes(1, gpus=4)
    proc = SchedulerProcess(cp, tmp_path / "s.log", "--scheduler-name", sched).start()
    processes.append(proc)
    create(cp, pod("before", ns, selector=sel, scheduler=sched))
    wait_for("the first pod bound", lambda: "before" in bound(cp, ns), timeout=60)

    cp.stop_apiserver()
    time.sleep(OUTAGE)
    cp.start_apiserver()  # returns once /readyz answers 200
    ready = time.monotonic()
    create(cp, pod("after", ns, selector=sel, scheduler=sched))
    created = time.monotonic() - ready
    wait_for("the new pod bound", lambda: "after" in bound(cp, ns), timeout=60, interval=0.1)
    took = time.monotonic() - ready
    print(f"after a {OUTAGE:g}s outage: created {created:.2f}s, bound {took:.2f}s after /readyz")
    assert proc.alive(), proc.tail()
    assert took < 4.0, f"bound {took:.1f}s after the API server was ready again\n{proc.tail()}"
