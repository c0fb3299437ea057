"""Start forecasts on a real API server: a gang that waits for a running gang whose PodGroup
declares its run time says when it is expected to start (status.expectedStart, the basis, the
Scheduled condition's message, the metric), and once bound the forecast is gone from its
status; one that waits for a gang that declared nothing says the start is unknown and names
it."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, condition, create, get_pg, pod, podgroup, pods, wait_for

pytestmark = pytest.mark.e2e

Nodes = Callable[..., dict[str, str]]


@pytest.fixture
def forecasting(
    control_plane: ControlPlane, tmp_path: Path
) -> Iterator[tuple[SchedulerProcess, str]]:
    name = "gs-" + uuid.uuid4().hex[:6]
    proc = SchedulerProcess(
        control_plane,
        tmp_path / "sched.log",
        "--scheduler-name",
        name,
        env={"GANGSCHED_START_FORECAST_SECONDS": "1"},
    ).start()
    try:
        yield proc, name
    finally:
        proc.stop()


def _status(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    return dict(get_pg(cp, ns, name).get("status") or {})


def _scheduled_message(st: dict[str, Any]) -> str:
    cond: dict[str, Any] = next(
        (c for c in st.get("conditions") or [] if c.get("type") == "Scheduled"), {}
    )
    return str(cond.get("message") or "")


def test_a_waiting_gang_says_when_it_is_expected_to_start(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    forecasting: tuple[SchedulerProcess, str],
) -> None:
    cp = control_plane
    proc, sched = forecasting
    sel = nodes(1, gpus=4)
    create(cp, podgroup("first", ns, 1, expectedRuntimeSeconds=7200))
    create(cp, pod("first-0", ns, group="first", gpus=4, selector=sel, scheduler=sched))
    wait_for("first bound", lambda: "first-0" in bound(cp, ns), timeout=60)
    bound_at = time.time()
    create(cp, podgroup("next", ns, 1))
    create(cp, pod("next-0", ns, group="next", gpus=4, selector=sel, scheduler=sched))
    st = wait_for(
        "the forecast on next's status",
        lambda: (s := _status(cp, ns, "next")).get("expectedStart") and s,
        timeout=60,
    )
    at = datetime.fromisoformat(str(st["expectedStart"]).replace("Z", "+00:00")).timestamp()
    # declared: two hours from the binding of first (the scheduler saw it bound just before)
    assert abs(at - (bound_at + 7200)) < 30, (st["expectedStart"], bound_at)
    assert st["expectedStartBasis"] == f"after {ns}/first ends (declared run time 2h0m)"
    assert f"; expected to start at {st['expectedStart']}, after {ns}/first" in (
        _scheduled_message(st)
    )
    assert 'gangsched_start_forecasts{result="known"} 1.0' in proc.metrics()

    # first goes: next binds, and its status no longer carries a forecast
    cp.kubectl("delete", "pod", "first-0", "-n", ns, "--grace-period=0", "--force")
    wait_for("next bound", lambda: "next-0" in bound(cp, ns), timeout=60)
    wait_for(
        "the forecast gone from next's status",
        lambda: "expectedStartBasis" not in _status(cp, ns, "next"),
        timeout=60,
    )


def test_a_gang_waiting_for_one_that_declared_no_end_is_told_so(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    forecasting: tuple[SchedulerProcess, str],
) -> None:
    cp = control_plane
    _, sched = forecasting
    sel = nodes(1, gpus=4)
    create(cp, podgroup("forever", ns, 1))
    create(cp, pod("forever-0", ns, group="forever", gpus=4, selector=sel, scheduler=sched))
    wait_for("forever bound", lambda: "forever-0" in bound(cp, ns), timeout=60)
    create(cp, podgroup("after", ns, 1))
    create(cp, pod("after-0", ns, group="after", gpus=4, selector=sel, scheduler=sched))
    st = wait_for(
        "the unknown forecast on after's status",
        lambda: (s := _status(cp, ns, "after")).get("expectedStartBasis") and s,
        timeout=60,
    )
    assert "expectedStart" not in st
    assert st["expectedStartBasis"] == f"waits for {ns}/forever, which declared no end"
    assert _scheduled_message(st).endswith(
        f"; expected start unknown: waits for {ns}/forever, which declared no end"
    )


def test_a_volcano_gang_says_it_on_its_pods_and_kubectl_gang_shows_it(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    forecasting: tuple[SchedulerProcess, str],
) -> None:
    """A gang of Volcano's convention has no status of gangsched's: the start forecast ends
    its pods' PodScheduled message, and ``kubectl gang`` shows it in EXPECTED-START."""
    cp = control_plane
    _, sched = forecasting
    sel = nodes(1, gpus=4)
    create(cp, podgroup("first", ns, 1, expectedRuntimeSeconds=3600))
    create(cp, pod("first-0", ns, group="first", gpus=4, selector=sel, scheduler=sched))
    wait_for("first bound", lambda: "first-0" in bound(cp, ns), timeout=60)
    create(
        cp,
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "tf", "namespace": ns},
            "spec": {"minMember": 2},
        },
    )
    ann = {"scheduling.k8s.io/group-name": "tf"}
    for i in range(2):
        create(cp, pod(f"tf-{i}", ns, gpus=2, selector=sel, scheduler=sched, annotations=ann))
    said = f"after {ns}/first ends (declared run time 1h0m)"

    def messages() -> list[str]:
        found = pods(cp, ns)
        return [
            str((condition(found[n], "PodScheduled") or {}).get("message") or "")
            for n in ("tf-0", "tf-1")
            if n in found
        ]

    def forecast_on_both() -> list[str] | None:
        m = messages()
        return m if len(m) == 2 and all(said in x for x in m) else None

    got = wait_for("the forecast on both pods", forecast_on_both, timeout=60)
    at = got[0].rpartition("; expected to start at ")[2].partition(",")[0]
    assert all(x.endswith(f"; expected to start at {at}, {said}") for x in got), got
    table = subprocess.run(
        [sys.executable, "-m", "gangsched.kubectl_gang", "-n", ns, "--kubeconfig",
         str(cp.kubeconfig)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    header, *rows = table.splitlines()
    column = header.split().index("EXPECTED-START")
    row = next(r.split() for r in rows if r.split()[0] == "tf")
    assert row[column] == at, table
