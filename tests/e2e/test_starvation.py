"""No starvation on the real control plane: a large gang behind a steady stream of small jobs.

Two KWOK nodes of 4 GPUs; a plain 1-GPU pod arrives every 0.4 s and runs 4 s once running, so
the stream alone asks for 10 GPUs of the 8 there are and some of it is always pending. At
t=2 s a gang of 2 pods x 4 GPUs (the whole cluster) arrives, of the same priority. Without a
reservation it needs a moment when all 8 GPUs are free at once, which the stream never leaves.
With ``reservationAfterSeconds: 5`` it reserves both nodes once it has waited 5 s, nothing of
the stream is placed there any more (it needs every GPU: there is no capacity to backfill), the
running stream pods end, and the gang binds whole. The second test is the contrast: the same
workload with reservations off, and the gang is still waiting after the same time.

KWOK's stock stages do not finish pods after a duration (its pod-complete stage is for Job pods
only), so the test plays the kubelet: it sets ``status.phase: Succeeded`` (the status
subresource) on a pod some seconds after it was seen running, then deletes it so the cluster
does not fill with finished pods. The test talks to the API server directly (bearer token, the
cluster CA) rather than through kubectl: it makes several calls a second.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import GPU, condition, pod, podgroup, wait_for

Nodes = Callable[..., dict[str, str]]
T = TypeVar("T")

NODE_GPUS = 4
ARRIVAL_INTERVAL = 0.4  # one 1-GPU pod of the stream every 0.4 s ...
STREAM_RUN = 4.0  # ... running 4 s: 10 GPUs asked for of 8, so some of the stream always waits
GANG_AT = 2.0  # the gang arrives 2 s into the stream
GANG_RUN = 3.0  # and, once it runs, ends after 3 s (the stream then takes the nodes back)
RESERVE_AFTER = 5.0
# Expected: the gang reserves the nodes 5 s after its first attempt (plus up to one 2 s
# backoff), the stream pods running there end within 4 s (plus the test's kubelet loop), then
# it binds: about 12 s. 40 s leaves room for a loaded two-core machine.
BOUND_WITHIN = 40.0
RESERVATION = "holds a reservation"
STREAM, GANG = "stream", "gang"
ROLE = "e2e-role"


class Api:
    """The few REST calls the workload makes, straight to the API server."""

    def __init__(self, cp: ControlPlane) -> None:
        self.server = cp.server
        self.headers = {"Authorization": f"Bearer {cp.token}", "Accept": "application/json"}
        self.context = ssl.create_default_context(cafile=str(cp.ca_file))

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, dict[str, Any]]:
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.server + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=20, context=self.context) as resp:
                return int(resp.status), json.loads(resp.read() or b"{}")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"{}")

    def ok(self, method: str, path: str, body: Any = None, content_type: str = "") -> Any:
        status, out = self.call(method, path, body, content_type or "application/json")
        assert 200 <= status < 300, f"{method} {path}: {status} {out.get('message', out)}"
        return out


def gpus(p: dict[str, Any]) -> int:
    return sum(
        int(((c.get("resources") or {}).get("requests") or {}).get(GPU, 0))
        for c in p["spec"]["containers"]
    )


def terminal(p: dict[str, Any]) -> bool:
    return (p.get("status") or {}).get("phase") in ("Succeeded", "Failed")


@dataclass
class Observed:
    """What the workload saw, sample by sample (each a consistent list of the namespace)."""

    samples: int = 0
    overcommits: list[str] = field(default_factory=list)
    peak: Counter[str] = field(default_factory=Counter)  # most GPUs in use per node
    created: dict[str, float] = field(default_factory=dict)  # pod -> when created
    bound_at: dict[str, float] = field(default_factory=dict)  # pod -> when first seen bound
    finished: dict[str, float] = field(default_factory=dict)  # pod -> when the test ended it
    gang_created: float | None = None
    gang_bound: float | None = None  # when both members were first seen bound
    gang_nodes: dict[str, str] = field(default_factory=dict)
    gang_refusals: list[str] = field(default_factory=list)  # PodScheduled=False messages
    pod_reservation: str = ""  # first gang pod message naming the reservation, while unbound
    group_reservation: str = ""  # the first such message of the PodGroup's Scheduled condition
    status_reservation: dict[str, Any] | None = None  # status.reservation, first seen
    errors: list[str] = field(default_factory=list)


class Workload:
    """The stream of small pods, the gang, and the test playing the kubelet."""

    def __init__(self, cp: ControlPlane, ns: str, sel: dict[str, str], scheduler: str) -> None:
        self.api = Api(cp)
        self.ns = ns
        self.sel = sel
        self.scheduler = scheduler
        self.seen = Observed()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.running_since: dict[str, float] = {}
        self.t0 = time.monotonic()
        self.threads = [
            threading.Thread(target=self._guard(self._arrivals), daemon=True),
            threading.Thread(target=self._guard(self._kubelet), daemon=True),
        ]

    def now(self) -> float:
        return time.monotonic() - self.t0

    def start(self) -> Workload:
        self.t0 = time.monotonic()
        for t in self.threads:
            t.start()
        return self

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)

    def _guard(self, body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except Exception as e:  # reported by check(), never lost in a thread
                with self.lock:
                    self.seen.errors.append(f"{body.__name__}: {e!r}")
                self.stop.set()

        return run

    def check(self) -> None:
        with self.lock:
            assert not self.seen.errors, self.seen.errors

    def probe(self, read: Callable[[Observed], T]) -> Callable[[], T]:
        """A probe for wait_for: what ``read`` finds in a snapshot; fails at once if a thread
        of the workload failed."""

        def run() -> T:
            self.check()
            return read(self.snapshot())

        return run

    def _create_pod(self, name: str, role: str, gpus: int, group: str | None = None) -> None:
        obj = pod(
            name,
            self.ns,
            group=group,
            gpus=gpus,
            cpu="100m",
            memory="64Mi",
            selector=self.sel,
            scheduler=self.scheduler,
            labels={ROLE: role},
        )
        self.api.ok("POST", f"/api/v1/namespaces/{self.ns}/pods", obj)
        with self.lock:
            self.seen.created[name] = self.now()

    def _arrivals(self) -> None:
        i = 0
        gang_sent = False
        while not self.stop.is_set():
            due = i * ARRIVAL_INTERVAL
            if not gang_sent and self.now() >= GANG_AT:
                self.api.ok(
                    "POST",
                    f"/apis/gangsched.io/v1alpha1/namespaces/{self.ns}/podgroups",
                    podgroup("big", self.ns, 2),
                )
                for m in range(2):
                    self._create_pod(f"big-{m}", GANG, NODE_GPUS, group="big")
                with self.lock:
                    self.seen.gang_created = self.now()
                gang_sent = True
            if self.now() >= due:
                self._create_pod(f"s-{i:04d}", STREAM, 1)
                i += 1
            self.stop.wait(max(0.0, min(i * ARRIVAL_INTERVAL - self.now(), 0.1)))

    def _kubelet(self) -> None:
        while not self.stop.is_set():
            items = self.api.ok("GET", f"/api/v1/namespaces/{self.ns}/pods")["items"]
            code, group = self.api.call(
                "GET", f"/apis/gangsched.io/v1alpha1/namespaces/{self.ns}/podgroups/big"
            )
            self._observe({p["metadata"]["name"]: p for p in items}, group if code == 200 else {})
            self.stop.wait(0.2)

    def _observe(self, state: dict[str, dict[str, Any]], group: dict[str, Any]) -> None:
        now = self.now()
        in_use: Counter[str] = Counter()
        due: list[str] = []
        with self.lock:
            seen = self.seen
            seen.samples += 1
            for name, p in state.items():
                node = p["spec"].get("nodeName")
                if node and not terminal(p):
                    in_use[node] += gpus(p)
                if node:
                    seen.bound_at.setdefault(name, now)
                phase = (p.get("status") or {}).get("phase")
                if phase == "Running" and name not in seen.finished:
                    since = self.running_since.setdefault(name, now)
                    run = GANG_RUN if p["metadata"]["labels"].get(ROLE) == GANG else STREAM_RUN
                    if now - since >= run:
                        due.append(name)
            for node, used in in_use.items():
                seen.peak[node] = max(seen.peak[node], used)
                if used > NODE_GPUS:
                    seen.overcommits.append(f"t={now:.1f}s {node}: {used} GPUs")
            gang: dict[str, dict[str, Any]] = {
                n: state[n] for n in ("big-0", "big-1") if n in state
            }
            placed = {
                n: p["spec"]["nodeName"] for n, p in gang.items() if p["spec"].get("nodeName")
            }
            if len(placed) == 2 and seen.gang_bound is None:
                seen.gang_bound, seen.gang_nodes = now, placed
            if seen.gang_bound is None:
                for p in gang.values():
                    cond = condition(p, "PodScheduled") or {}
                    message = str(cond.get("message", ""))
                    if cond.get("status") == "False" and message:
                        if not seen.gang_refusals or seen.gang_refusals[-1] != message:
                            seen.gang_refusals.append(message)
                        if RESERVATION in message and not seen.pod_reservation:
                            seen.pod_reservation = message
                message = str((condition(group, "Scheduled") or {}).get("message", ""))
                if RESERVATION in message and not seen.group_reservation:
                    seen.group_reservation = message
                held = (group.get("status") or {}).get("reservation")
                if held and seen.status_reservation is None:
                    seen.status_reservation = held
        # One pod ended per sample at most: a slow sample never frees a whole node at once.
        for name in sorted(due, key=lambda n: self.running_since[n])[:1]:
            self._finish(name)

    def _finish(self, name: str) -> None:
        path = f"/api/v1/namespaces/{self.ns}/pods/{name}"
        self.api.ok(
            "PATCH",
            path + "/status",
            {"status": {"phase": "Succeeded"}},
            "application/merge-patch+json",
        )
        with self.lock:
            self.seen.finished[name] = self.now()
        status, out = self.api.call("DELETE", path, {"gracePeriodSeconds": 0})
        assert status in (200, 202, 404), f"DELETE {name}: {status} {out.get('message', out)}"

    def snapshot(self) -> Observed:
        with self.lock:
            return Observed(**{k: _copy(v) for k, v in vars(self.seen).items()})


def _copy(v: Any) -> Any:
    return type(v)(v) if isinstance(v, (dict, list, Counter)) else v


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.stop()


def start_scheduler(
    cp: ControlPlane, log: Path, reserve_after: str, processes: list[SchedulerProcess]
) -> tuple[str, SchedulerProcess]:
    """A gangsched of its own (its own schedulerName), backoffs of 0.5-2 s (conftest's)."""
    name = "gs-" + uuid.uuid4().hex[:6]
    env = {"GANGSCHED_RESERVATION_AFTER_SECONDS": reserve_after}
    proc = SchedulerProcess(cp, log, "--scheduler-name", name, env=env).start()
    processes.append(proc)
    return name, proc


def overtaken(seen: Observed) -> list[str]:
    """Stream pods created after the gang that were bound while it waited."""
    assert seen.gang_created is not None
    end = seen.gang_bound if seen.gang_bound is not None else float("inf")
    return [
        n
        for n, at in seen.bound_at.items()
        if n.startswith("s-") and seen.created.get(n, 0.0) > seen.gang_created and at < end
    ]


def test_a_gang_behind_a_stream_of_small_jobs_reserves_the_nodes_and_binds_whole(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=NODE_GPUS)
    name, proc = start_scheduler(cp, tmp_path / "gangsched.log", str(RESERVE_AFTER), processes)
    work = Workload(cp, ns, sel, name).start()
    try:
        wait_for(
            "the stream filling the cluster",
            work.probe(lambda s: sum(s.peak.values()) == 2 * NODE_GPUS),
            timeout=60,
        )
        created = wait_for("the gang created", work.probe(lambda s: s.gang_created))
        seen = wait_for(
            "the gang bound whole",
            work.probe(lambda s: s if s.gang_bound is not None else None),
            timeout=BOUND_WITHIN + 10,
            interval=0.5,
        )
        # It ran and ended; the stream takes the nodes back.
        wait_for(
            "a stream pod created before the gang ended bound after it",
            work.probe(_resumed),
            timeout=60,
            interval=0.5,
        )
        final = work.snapshot()
        work.check()
    finally:
        work.close()
    assert seen.gang_bound is not None
    waited = seen.gang_bound - created
    print(
        f"gang bound {waited:.1f}s after it arrived; {len(seen.created)} pods created, "
        f"{len(overtaken(seen))} stream pods bound meanwhile; {final.samples} samples; "
        f"peak GPUs per node {dict(final.peak)}"
    )
    print(f"PodGroup: {seen.group_reservation}\npods: {seen.gang_refusals[-3:]}")
    assert waited <= BOUND_WITHIN, f"the gang waited {waited:.1f}s\n{proc.tail()}"
    assert sorted(seen.gang_nodes.values()) == sorted(f"{ns}-n{i}" for i in range(2))
    # The PodGroup's Scheduled condition names the reservation while the gang waits. (The
    # members' PodScheduled message carries the attempt's message only.)
    assert f"{RESERVATION} on 2 node(s) ({ns}-n0, {ns}-n1)" in seen.group_reservation, (
        f"no reservation named before it bound: {seen.gang_refusals}"
    )
    held = seen.status_reservation
    assert held is not None, "status.reservation never written while the gang waited"
    assert sorted(held["nodes"]) == [f"{ns}-n0", f"{ns}-n1"] and held["since"], held
    assert not final.overcommits, final.overcommits
    assert final.samples >= 20, "sampled while the workload ran"
    assert proc.alive(), proc.tail()


def _resumed(seen: Observed) -> bool:
    gang_end = max((seen.finished.get(n, 0.0) for n in ("big-0", "big-1")), default=0.0)
    if not all(n in seen.finished for n in ("big-0", "big-1")):
        return False
    return any(
        n.startswith("s-") and at > gang_end and seen.created[n] < gang_end
        for n, at in seen.bound_at.items()
    )


def test_contrast_without_reservations_the_gang_is_still_waiting(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    """The contrast: the same workload with ``reservationAfterSeconds: null``. After the time
    the test above allows, the gang has not bound and the stream keeps overtaking it."""
    cp = control_plane
    sel = nodes(2, gpus=NODE_GPUS)
    name, proc = start_scheduler(cp, tmp_path / "gangsched.log", "null", processes)
    work = Workload(cp, ns, sel, name).start()
    try:
        created = wait_for("the gang created", work.probe(lambda s: s.gang_created), timeout=60)
        wait_for(
            "the gang refused",
            work.probe(lambda s: s.gang_refusals),
            timeout=BOUND_WITHIN,
        )
        wait_for(
            f"{BOUND_WITHIN:g}s since the gang arrived",
            work.probe(lambda s: work.now() - created >= BOUND_WITHIN),
            timeout=BOUND_WITHIN + 30,
            interval=0.5,
        )
        seen = work.snapshot()
        work.check()
    finally:
        work.close()
    later = overtaken(seen)
    print(f"after {BOUND_WITHIN:g}s: gang bound {seen.gang_bound}; {len(later)} pods overtook it")
    assert seen.gang_bound is None, "the contrast did not hold: the stream left room"
    assert not seen.pod_reservation and not seen.group_reservation
    assert len(later) >= 20, f"the stream kept running past the gang: {len(later)} overtook it"
    assert not seen.overcommits, seen.overcommits
    assert proc.alive(), proc.tail()
