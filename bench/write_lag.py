"""How late events and conditions reach the API server under a backlog, and how late bindings.

    .venv/bin/python bench/write_lag.py                      # this tree's scheduler
    .venv/bin/python bench/write_lag.py --source ../other    # another checkout's scheduler

A real kube-apiserver with kwok GPU nodes. ``gangsched run`` (from ``--source``, default this
tree) starts with the default API budget (50 qps, burst 100); then ``--stuck`` gangs that can
never fit (each pod asks for more GPUs than a node has) are submitted at once, and while they
keep failing, one gang that fits every ``--interval`` seconds (``--fitting`` of them), each
followed by one more gang that can never fit (``--late`` of them). An observer watches
events, pods and PodGroups in the namespace (its own client, not rate limited) and records
when each write arrives:

- ``failed_scheduling``: a FailedScheduling event (or a series update) after the attempt it
  reports (its ``eventTime``, or ``series.lastObservedTime``);
- ``condition``: a pod's new ``PodScheduled=False`` message after its ``lastTransitionTime``
  (whole seconds: up to 1 s too high);
- ``scheduled``: a Scheduled event after the binding it reports was seen on the pod;
- ``binding``: a pod of a fitting gang bound after the last member of its gang was seen;
- ``first_reason``: for each late gang, its first member's ``PodScheduled=False`` condition
  after the last member of the gang was seen (the gang's first answer: why it waits);
- ``first_podgroup_condition``: the same for its PodGroup's ``Scheduled`` condition with a
  reason (``Pending``, written when the members are counted and before any attempt, is not
  one).

Then the scheduler is stopped (SIGTERM) right after the last binding, and the Scheduled events
stored are counted against the pods bound. Prints one JSON object (seconds). Not a test:
figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gangsched.kube.io.client import ApiError, KubeClient, load_configuration  # noqa: E402
from gangsched_dev.devcluster import ControlPlane  # noqa: E402
from gangsched_dev.devcluster.controlplane import fake_node  # noqa: E402

NS = "lag"


def _list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def _stamp(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _pod(name: str, group: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": {"gangsched.io/pod-group": group}},
        "spec": {
            "schedulerName": "gangsched",
            "nodeSelector": {"bench": "yes"},
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def _gang(name: str, size: int, gpus: int) -> list[dict[str, Any]]:
    group = {
        "apiVersion": "gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"minMember": size},
    }
    return [group, *(_pod(f"{name}-{i}", name, gpus) for i in range(size))]


class Observer:
    """Watches events and pods of the namespace on a thread of its own."""

    def __init__(self, cp: ControlPlane) -> None:
        self.cp = cp
        self.lags: dict[str, list[float]] = {
            "failed_scheduling": [],
            "condition": [],
            "scheduled": [],
            "binding": [],
            "first_reason": [],
            "first_podgroup_condition": [],
        }
        self.first_condition_at: dict[str, float] = {}  # pod -> first PodScheduled=False seen
        self.group_condition_at: dict[str, float] = {}  # PodGroup -> first Scheduled seen
        self.bound_at: dict[str, float] = {}
        self.seen_at: dict[str, float] = {}
        self.conditions: dict[str, str] = {}
        self.scheduled_pending: dict[str, float] = {}  # pod -> event arrival, binding unseen
        self._loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.ready = threading.Event()

    def start(self) -> None:
        self._thread.start()
        self.ready.wait(60)

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _main(self) -> None:
        self._loop.run_until_complete(self._run())

    async def _run(self) -> None:
        cfg = await load_configuration(str(self.cp.kubeconfig))
        client = KubeClient(cfg, qps=0, burst=1)
        tasks = [
            asyncio.create_task(self._watch(client, f"/api/v1/namespaces/{NS}/pods", self._pod)),
            asyncio.create_task(
                self._watch(client, f"/apis/events.k8s.io/v1/namespaces/{NS}/events", self._event)
            ),
            asyncio.create_task(
                self._watch(
                    client, f"/apis/gangsched.io/v1alpha1/namespaces/{NS}/podgroups", self._group
                )
            ),
        ]
        await asyncio.sleep(0.5)
        self.ready.set()
        await self._stop.wait()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()

    async def _watch(self, client: KubeClient, path: str, handle: Any) -> None:
        rv = str((await client.get(path, limit=1)).get("metadata", {}).get("resourceVersion"))
        while True:
            params = {"resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": 600}
            with contextlib.suppress(ApiError):
                async for ev in client.watch(path, params):
                    obj = ev.get("object") or {}
                    rv = str((obj.get("metadata") or {}).get("resourceVersion", rv))
                    if ev.get("type") in ("ADDED", "MODIFIED"):
                        handle(time.time(), obj)

    def _pod(self, now: float, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        self.seen_at.setdefault(name, now)
        if obj["spec"].get("nodeName") and name not in self.bound_at:
            self.bound_at[name] = now
            if name in self.scheduled_pending:  # the event came first
                self.lags["scheduled"].append(self.scheduled_pending.pop(name) - now)
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c.get("type") != "PodScheduled" or c.get("status") != "False":
                continue
            message = str(c.get("message", ""))
            self.first_condition_at.setdefault(name, now)
            if self.conditions.get(name) != message:
                self.conditions[name] = message
                at = _stamp(c.get("lastTransitionTime"))
                if at is not None:
                    self.lags["condition"].append(now - at)

    def _group(self, now: float, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        for c in (obj.get("status") or {}).get("conditions") or []:
            # an answer: bound, or a reason (not "Pending": members counted, not yet tried)
            if c.get("type") == "Scheduled" and c.get("reason") != "Pending":
                self.group_condition_at.setdefault(name, now)

    def _event(self, now: float, obj: dict[str, Any]) -> None:
        reason = obj.get("reason")
        series = obj.get("series") or {}
        if reason == "FailedScheduling":
            at = _stamp(series.get("lastObservedTime")) or _stamp(obj.get("eventTime"))
            if at is not None:
                self.lags["failed_scheduling"].append(now - at)
        elif reason == "Scheduled" and not series:
            pod = (obj.get("regarding") or {}).get("name", "")
            if pod in self.bound_at:
                self.lags["scheduled"].append(now - self.bound_at[pod])
            else:
                self.scheduled_pending[pod] = now


def _summary(values: list[float]) -> dict[str, float | int]:
    if not values:
        return {"n": 0}
    qs = statistics.quantiles(values, n=100) if len(values) > 1 else [values[0]] * 99
    return {
        "n": len(values),
        "p50": round(qs[49], 2),
        "p90": round(qs[89], 2),
        "p99": round(qs[98], 2),
        "max": round(max(values), 2),
    }


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--source", default=str(REPO), help="the checkout whose scheduler runs")
    p.add_argument("--nodes", type=int, default=40)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gang-size", type=int, default=8)
    p.add_argument("--stuck", type=int, default=100, help="gangs that never fit")
    p.add_argument("--fitting", type=int, default=30, help="gangs that fit, one per interval")
    p.add_argument("--late", type=int, default=30, help="gangs that never fit, one per interval")
    p.add_argument("--interval", type=float, default=1.0)
    p.add_argument("--settle", type=float, default=10.0, help="seconds before the stop")
    args = p.parse_args()
    source = Path(args.source).resolve()
    nodes = [
        fake_node(f"lag-{i:03d}", "128", "1024Gi", args.gpus_per_node, {"bench": "yes"})
        for i in range(args.nodes)
    ]
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        cp.apply(REPO / "crds")
        cp.start_kwok()
        cp.create_namespace(NS)
        cp.kubectl("create", "-f", "-", input=_list(nodes), timeout=300)
        log = Path(tmp) / "gangsched.log"
        env = {**os.environ, "PYTHONPATH": str(source)}
        with log.open("wb") as out:
            sched = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "gangsched.cli",
                    "run",
                    "--kubeconfig",
                    str(cp.kubeconfig),
                    "--http-bind-address",
                    "",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(source),
                env=env,
            )
        observer = Observer(cp)
        observer.start()
        try:
            time.sleep(3)
            stuck: list[dict[str, Any]] = []
            for g in range(args.stuck):
                stuck += _gang(f"stuck{g:03d}", args.gang_size, args.gpus_per_node + 1)
            for i in range(0, len(stuck), 500):
                cp.kubectl("create", "-f", "-", input=_list(stuck[i : i + 500]), timeout=300)
            fitting: list[str] = []
            for g in range(max(args.fitting, args.late)):
                if g < args.fitting:
                    name = f"fit{g:03d}"
                    cp.kubectl("create", "-f", "-", input=_list(_gang(name, args.gang_size, 1)))
                    fitting += [f"{name}-{i}" for i in range(args.gang_size)]
                if g < args.late:
                    late = _gang(f"late{g:03d}", args.gang_size, args.gpus_per_node + 1)
                    cp.kubectl("create", "-f", "-", input=_list(late))
                time.sleep(args.interval)
            late_groups = [f"late{g:03d}" for g in range(args.late)]
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not (
                all(p in observer.bound_at for p in fitting)
                and all(g in observer.group_condition_at for g in late_groups)
            ):
                time.sleep(0.5)
            time.sleep(args.settle)
            t0 = time.monotonic()
            sched.terminate()
            code = sched.wait(60)
            stop_seconds = time.monotonic() - t0
        finally:
            if sched.poll() is None:
                sched.kill()
            observer.stop()
        for g in range(args.fitting):  # gang latency: last member seen -> each member bound
            members = [f"fit{g:03d}-{i}" for i in range(args.gang_size)]
            if all(m in observer.seen_at for m in members):
                complete = max(observer.seen_at[m] for m in members)
                for m in members:
                    if m in observer.bound_at:
                        observer.lags["binding"].append(observer.bound_at[m] - complete)
        unanswered = 0
        for g in range(args.late):  # first answer: last member seen -> first condition
            name = f"late{g:03d}"
            members = [f"{name}-{i}" for i in range(args.gang_size)]
            if not all(m in observer.seen_at for m in members):
                continue
            complete = max(observer.seen_at[m] for m in members)
            told = [
                observer.first_condition_at[m] for m in members if m in observer.first_condition_at
            ]
            if told:
                observer.lags["first_reason"].append(min(told) - complete)
            else:
                unanswered += 1
            if name in observer.group_condition_at:
                observer.lags["first_podgroup_condition"].append(
                    observer.group_condition_at[name] - complete
                )
        stored = cp.kubectl_json("get", "events.events.k8s.io", "-n", NS)["items"]
        pods = cp.kubectl_json("get", "pods", "-n", NS)["items"]
        placed = {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName")}
        with_event = {
            (e.get("regarding") or {}).get("name") for e in stored if e.get("reason") == "Scheduled"
        }
        failed_objects = sum(1 for e in stored if e.get("reason") == "FailedScheduling")
    print(
        json.dumps(
            {
                "source": str(source),
                "stuck_gangs": args.stuck,
                "fitting_gangs": args.fitting,
                "late_gangs": args.late,
                "late_gangs_never_told": unanswered,
                "gang_size": args.gang_size,
                "lag_seconds": {k: _summary(v) for k, v in observer.lags.items()},
                "pods_bound": len(placed),
                "scheduled_events_stored_after_stop": len(placed & with_event),
                "failed_scheduling_event_objects": failed_objects,
                "stop_seconds": round(stop_seconds, 1),
                "exit_status": code,
            },
            sort_keys=True,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
