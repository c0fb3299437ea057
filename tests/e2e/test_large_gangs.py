"""A gang of thousands on the real control plane, with leader election: the scheduler starts
with every member already pending (its first list holds them all), binds the gang whole, and
renews its lease on time throughout: the Lease never changes hands, and no two renewals seen
are further apart than the renew deadline.

The control plane is one of its own, started for this module: the 4,000 pods (and kwok
running them) stay out of the shared one.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import REPO, SchedulerProcess
from .kube import bound, pod, podgroup, wait_for

MEMBERS = 4000
NODES = 40  # 110 pods each
LEASE_NS = "gangsched-system"
# Tighter than the defaults (15 s, 10 s, 2 s): a loop held for seconds would show.
LEASE_DURATION, RENEW_DEADLINE, RETRY_PERIOD = 6, 4, 1


@pytest.fixture(scope="module")
def cluster() -> Iterator[ControlPlane]:
    cp = ControlPlane()
    cp.start()
    try:
        cp.apply(REPO / "crds")
        wait_for(
            "the PodGroup CRD to be served",
            lambda: cp.kubectl("get", "podgroups.gangsched.io", "-A", check=False).returncode == 0,
            timeout=30,
        )
        cp.start_kwok()
        cp.create_namespace(LEASE_NS)
        yield cp
    finally:
        cp.stop()


def _stamp(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LeaseWatch:
    """Reads the Lease every half second on a thread: who holds it and when it was renewed."""

    def __init__(self, cp: ControlPlane, name: str) -> None:
        self.cp = cp
        self.name = name
        self.seen: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            out = self.cp.kubectl(
                "get", "lease", self.name, "-n", LEASE_NS, "-o", "json", check=False
            )
            if out.returncode == 0:
                self.seen.append(json.loads(out.stdout).get("spec") or {})

    def start(self) -> LeaseWatch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def holders(self) -> set[str]:
        return {str(s.get("holderIdentity") or "") for s in self.seen}

    def renewals(self) -> list[float]:
        return sorted({_stamp(s["renewTime"]) for s in self.seen if s.get("renewTime")})


def _unbound(cp: ControlPlane, ns: str) -> int:
    """Pods of the namespace with no node (names only: 4,000 whole pods are megabytes)."""
    out = cp.kubectl(
        "get", "pods", "-n", ns, "--field-selector", "spec.nodeName=", "-o", "name"
    ).stdout
    return len(out.split())


def _phase(cp: ControlPlane, ns: str, name: str) -> str:
    out = cp.kubectl("get", "podgroups.gangsched.io", name, "-n", ns, "-o", "json").stdout
    phase: str = (json.loads(out).get("status") or {}).get("phase", "")
    return phase


def _create(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    for i in range(0, len(objects), 500):
        body = {"apiVersion": "v1", "kind": "List", "items": objects[i : i + 500]}
        cp.kubectl("create", "-f", "-", input=json.dumps(body), timeout=300)


def test_a_gang_of_thousands_binds_whole_and_the_lease_is_renewed_on_time(
    cluster: ControlPlane, tmp_path: Path
) -> None:
    cp = cluster
    ns = "big-" + uuid.uuid4().hex[:6]
    cp.create_namespace(ns)
    sel = {"large-gang": ns}
    for i in range(NODES):
        cp.add_fake_node(f"{ns}-n{i}", "128", "1Ti", 110, labels=sel)
    members = [
        pod(f"w-{i}", ns, group="big", selector=sel, cpu="100m", memory="64Mi")
        for i in range(MEMBERS)
    ]
    started = time.monotonic()
    _create(cp, [podgroup("big", ns, MEMBERS), *members])
    created = time.monotonic() - started

    lease = "gs-" + uuid.uuid4().hex[:6]
    sched = SchedulerProcess(
        cp,
        tmp_path / "gangsched.log",
        *("--leader-elect", "--identity", "big-0"),
        *("--lease-duration", str(LEASE_DURATION), "--renew-deadline", str(RENEW_DEADLINE)),
        *("--retry-period", str(RETRY_PERIOD)),
        *("--api-qps", "1000", "--api-burst", "1000"),  # 4,000 bindings, not the test's subject
        env={"GANGSCHED_LEASE_NAME": lease},
    )
    lease_watch = LeaseWatch(cp, lease).start()
    sched.start()
    try:
        t0 = time.monotonic()
        wait_for("the scheduler to lead", lambda: "big-0" in lease_watch.holders(), 60)
        wait_for(
            f"all {MEMBERS} members bound",
            lambda: _unbound(cp, ns) == 0,
            timeout=300,
            interval=1.0,
        )
        scheduled = time.monotonic() - t0
        wait_for(
            "the PodGroup to say Running", lambda: _phase(cp, ns, "big") == "Running", 300, 2.0
        )
        seen = len(lease_watch.renewals())
        wait_for("one more renewal", lambda: len(lease_watch.renewals()) > seen, 10)
        assert sched.alive(), sched.tail()
    finally:
        lease_watch.stop()  # before the scheduler stops and gives the lease up
        sched.stop()
    log = sched.tail(2000)
    renewals = lease_watch.renewals()
    gaps = [b - a for a, b in itertools.pairwise(renewals)]
    print(
        f"created {MEMBERS} pods in {created:.1f}s; bound whole in {scheduled:.1f}s from the "
        f"start; {len(renewals)} renewals seen, longest gap {max(gaps):.2f}s "
        f"(renew deadline {RENEW_DEADLINE}s)"
    )
    assert lease_watch.holders() == {"big-0"}, lease_watch.holders()
    assert {s.get("leaseTransitions") for s in lease_watch.seen} == {0}
    assert len(renewals) >= 5, renewals
    assert max(gaps) < RENEW_DEADLINE, gaps
    assert "lost the leader lease" not in log and "no longer sure to lead" not in log
    nodes = bound(cp, ns)
    assert len(nodes) == MEMBERS and all(n.startswith(f"{ns}-n") for n in nodes.values())
