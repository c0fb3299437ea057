"""One run of the side-by-side benchmark: one scheduler on a fresh control plane.

1. Start etcd + kube-apiserver + kwok; install gangsched's CRDs and scheduler-plugins'
   PodGroup CRD (and Volcano's or KAI's CRDs for those).
2. Create the namespace, the nodes (wait until kwok reports them Ready), the PodGroups and the
   pods, concurrently over HTTP.
3. Start the scheduler and time from its start: the API server's count of successful
   pods/binding POSTs, polled from its /metrics every 0.2 s, says when every pod is bound (fill)
   or counts the bindings within a fixed window (contention); the API server's audit log of
   those POSTs (and nothing else) then gives the first and the last binding to the
   microsecond (versus_timing.py), the polls' figures being kept as ``polled_*``.
4. Wait until the scheduler's writes settle (no event or PodGroup write for 2 s, bounded),
   read its CPU seconds and peak RSS, take the request counts, stop it.
5. List the pods (bound pods per gang: whole and partial gangs) and the Scheduled events.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

from versus_api import (
    Api,
    Credentials,
    RequestTotals,
    binding_count,
    request_key,
)
from versus_procs import (
    REPO,
    Launch,
    SchedulerProcess,
    binder_launch,
    coscheduling_launch,
    gangsched_launch,
    kai_launch,
    kube_scheduler_launch,
    profiled,
    volcano_launch,
)
from versus_timing import BINDING_AUDIT, binding_times
from versus_unschedulable import probe_unschedulable
from versus_workload import GANG_LABEL, NAMESPACE, NODE_PATH, PEER_GANGS, POD_PATH, Workload

from gangsched_dev.devcluster import ControlPlane, KubectlError

__all__ = ["RunConfig", "run_one"]

POLL_S: Final = 0.2
QUIET_S: Final = 2.0
STOPPED_S: Final = 1.0
CURVE_STEP_S: Final = 1.0
KAI_CRD_WAITS: Final = 10
WRITE_VERBS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE", "APPLY"})
SETTLE_RESOURCES: Final = frozenset({"events", "podgroups"})  # (Volcano's and KAI's too)
REQUESTS_SCOPE: Final = (
    "all clients, from the scheduler's start until 1 s after it stopped (apiserver_request_total "
    "has no client label, and counts a WATCH when it ends): kwok's writes (pods/status, "
    "nodes/status, leases) are included; the benchmark itself only reads /metrics meanwhile"
)


@dataclass(frozen=True, slots=True)
class RunConfig:
    workload: Workload
    qps: int
    timeout: float  # fill: give up after this many seconds
    window: float  # contention: run each scheduler this long
    settle_max: float
    create_concurrency: int
    binder_concurrency: int
    podgroup_crd: Path
    peer_dir: Path | None
    log_dir: Path | None
    volcano_dir: Path | None = None
    kai_dir: Path | None = None
    # gangsched-base: the checkout it runs from (another commit's gangsched)
    base_source: Path | None = None
    # py-spy record's raw profile of gangsched's process, one file per repetition, here
    py_spy_dir: Path | None = None
    # kai-unschedulable: jobs that cannot fit, one after another once the cluster is full
    samples: int = 3


def _launch(cfg: RunConfig, scheduler: str, cp: ControlPlane, workdir: Path) -> Launch:
    launch = _scheduler_launch(cfg, scheduler, cp, workdir)
    levels = cfg.workload.topology_levels()
    if levels and scheduler in ("gangsched", "gangsched-base"):
        # gangsched's topologyLevels: what a preferred level falls back through
        env = {**(launch.env or os.environ), "GANGSCHED_TOPOLOGY_LEVELS": ",".join(levels)}
        launch = replace(launch, env=env)
    return launch


def _scheduler_launch(cfg: RunConfig, scheduler: str, cp: ControlPlane, workdir: Path) -> Launch:
    if scheduler == "gangsched":
        launch = gangsched_launch(cp.kubeconfig, cfg.qps)
        if cfg.py_spy_dir is not None:
            launch = profiled(launch, cfg.py_spy_dir / f"gangsched-{time.strftime('%H%M%S')}.txt")
        return launch
    if scheduler == "gangsched-base":
        if cfg.base_source is None:
            raise ValueError("gangsched-base needs --base-source")
        return gangsched_launch(cp.kubeconfig, cfg.qps, cfg.base_source)
    if scheduler == "kube-scheduler":
        return kube_scheduler_launch(cp.bin_dir, cp.kubeconfig, cfg.qps, workdir)
    if scheduler == "coscheduling":
        if cfg.peer_dir is None:
            raise ValueError("coscheduling needs the scheduler-plugins build")
        return coscheduling_launch(cfg.peer_dir, cp.kubeconfig, cfg.qps, workdir)
    if scheduler == "binder":
        return binder_launch(cp.kubeconfig, cfg.qps, cfg.binder_concurrency)
    if scheduler == "volcano":
        if cfg.volcano_dir is None:
            raise ValueError("volcano needs the Volcano build (bench/peers.sh volcano)")
        return volcano_launch(cfg.volcano_dir, cp.kubeconfig, cfg.qps)
    if scheduler == "kai":
        if cfg.kai_dir is None:
            raise ValueError("kai needs KAI's build (bench/peers.sh kai)")
        return kai_launch(cfg.kai_dir, cp.kubeconfig, cfg.qps, workdir)
    raise ValueError(f"unknown scheduler {scheduler!r}")


def run_one(cfg: RunConfig, scheduler: str, rep: int) -> dict[str, Any]:
    """Run one scheduler once on a fresh control plane; return the run's record."""
    with (
        ControlPlane(audit_policy=BINDING_AUDIT) as cp,
        tempfile.TemporaryDirectory(prefix="versus-") as tmp,
    ):
        workdir = Path(tmp)
        cp.apply(REPO / "crds")
        cp.apply(cfg.podgroup_crd)
        cp.kubectl(
            "wait",
            "--for=condition=Established",
            "crd/podgroups.scheduling.x-k8s.io",
            "crd/podgroups.gangsched.io",
            "--timeout=60s",
        )
        if scheduler == "volcano" and cfg.volcano_dir is not None:
            cp.apply(cfg.volcano_dir / "crds")
            cp.kubectl(
                "wait",
                "--for=condition=Established",
                "crd/podgroups.scheduling.volcano.sh",
                "crd/queues.scheduling.volcano.sh",
                "--timeout=60s",
            )
        if scheduler == "kai" and cfg.kai_dir is not None:
            _install_kai_crds(cp, cfg.kai_dir)
        cp.start_kwok()
        launch = _launch(cfg, scheduler, cp, workdir)
        log = workdir / f"{scheduler}.log"
        try:
            record = asyncio.run(_measure(cfg, cp, launch, log))
        finally:
            if cfg.log_dir is not None and log.exists():
                cfg.log_dir.mkdir(parents=True, exist_ok=True)
                shutil.copy(log, cfg.log_dir / f"{scheduler}-rep{rep}.log")
    return {"scheduler": scheduler, "rep": rep, **record}


def _install_kai_crds(cp: ControlPlane, kai_dir: Path) -> None:
    """KAI's CRDs, and Kueue's Topology CRD, which its scheduler watches (bench/peers.sh kai
    copies it from KAI's deployments/external-crds). Server-side: the CRD of KAI's Config is
    too large for the annotation a client-side apply writes."""
    cp.kubectl("apply", "--server-side", "-f", str(kai_dir / "crds"))
    crds = [
        "crd/podgroups.scheduling.run.ai",
        "crd/queues.scheduling.run.ai",
        "crd/bindrequests.scheduling.run.ai",
        "crd/topologies.kueue.x-k8s.io",
    ]
    for attempt in range(KAI_CRD_WAITS):
        # kubectl wait fails outright while a new CRD has no status conditions yet
        try:
            cp.kubectl("wait", "--for=condition=Established", *crds, "--timeout=60s")
            return
        except KubectlError:
            if attempt == KAI_CRD_WAITS - 1:
                raise
            time.sleep(0.5)


async def _wait_nodes_ready(api: Api, count: int, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        nodes = await api.list_all(NODE_PATH)
        ready = sum(
            any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
            for n in nodes
        )
        if ready >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {ready} of {count} nodes Ready after {timeout:.0f}s")
        await asyncio.sleep(1.0)


async def _create(cfg: RunConfig, api: Api, launch: Launch) -> float:
    w = cfg.workload
    t = time.monotonic()
    await api.call(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        ok=(201,),
    )
    await api.create_all(w.node_objects(), cfg.create_concurrency)
    await _wait_nodes_ready(api, w.nodes)
    await api.create_all(w.dra_objects(), cfg.create_concurrency)
    peer = launch.scheduler if launch.scheduler in PEER_GANGS else ""
    objects = w.podgroup_objects(peer)
    if peer == "volcano":
        # The queue before its PodGroups, Open: the state Volcano's controller manager (not
        # run here: only its scheduler is under test) gives a new queue.
        path, queue = next(objects)
        _, created = await api.call("POST", path, queue, ok=(201,))
        created["status"] = {**(created.get("status") or {}), "state": "Open"}
        await api.call("PUT", f"{path}/{created['metadata']['name']}/status", created)
    elif peer == "kai":
        # The department before its queue, the queue before its PodGroups.
        for _ in range(w.kai_queues()):
            path, queue = next(objects)
            await api.call("POST", path, queue, ok=(201,))
    await api.create_all(objects, cfg.create_concurrency)
    if peer != "kai":
        await api.create_all(w.priority_classes(), cfg.create_concurrency)
    await api.create_all(w.pod_objects(launch.scheduler_name, peer), cfg.create_concurrency)
    return time.monotonic() - t


def _delta(after: RequestTotals, before: RequestTotals) -> tuple[dict[str, int], dict[str, int]]:
    """Requests by "VERB resource[/subresource]" over the run, all codes and errors (>= 400)."""
    total: Counter[str] = Counter()
    errors: Counter[str] = Counter()
    for key, value in after.items():
        n = int(value - before.get(key, 0.0))
        if n <= 0:
            continue
        verb, group, resource, sub, code = key
        name = request_key(verb, group, resource, sub)
        total[name] += n
        if code.isdigit() and int(code) >= 400:
            errors[f"{name} {code}"] += n
    return dict(sorted(total.items())), dict(sorted(errors.items()))


def _settle_writes(totals: RequestTotals) -> float:
    return sum(
        v
        for (verb, _, res, _, _), v in totals.items()
        if verb in WRITE_VERBS and res in SETTLE_RESOURCES
    )


async def _poll(
    api: Api,
    proc: SchedulerProcess,
    t0: float,
    base: int,
    stop: Callable[[float, int], bool],
) -> tuple[float | None, float | None, int, list[list[float]]]:
    """Poll the binding count until ``stop(elapsed, bound)`` or the process exits.

    Returns (first binding s, last binding s, pods bound, curve of [s, bound] about every
    second)."""
    first: float | None = None
    last: float | None = None
    bound = 0
    curve: list[list[float]] = []
    while True:
        tick = time.monotonic()
        now_bound = binding_count(await api.request_totals()) - base
        elapsed = time.monotonic() - t0
        if now_bound > bound:
            last = elapsed
            if first is None:
                first = elapsed
        bound = now_bound
        if not curve or elapsed - curve[-1][0] >= CURVE_STEP_S:
            curve.append([round(elapsed, 2), bound])
        if stop(elapsed, bound) or proc.exit_code is not None:
            if curve[-1][1] != bound or curve[-1][0] != round(elapsed, 2):
                curve.append([round(elapsed, 2), bound])
            return first, last, bound, curve
        await asyncio.sleep(max(0.0, POLL_S - (time.monotonic() - tick)))


async def _settle(api: Api, limit: float) -> float:
    """Wait until no event or PodGroup write for QUIET_S (at most ``limit`` s)."""
    start = time.monotonic()
    writes, quiet_since = _settle_writes(await api.request_totals()), start
    while time.monotonic() - start < limit:
        await asyncio.sleep(POLL_S)
        now = _settle_writes(await api.request_totals())
        if now != writes:
            writes, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= QUIET_S:
            break
    return time.monotonic() - start


def _gangs(w: Workload, pods: list[dict[str, Any]]) -> dict[str, int]:
    bound_per_gang: Counter[str] = Counter()
    bound = 0
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName"):
            bound += 1
            meta = pod.get("metadata") or {}
            # a pod without a gang label is a gang of its own
            bound_per_gang[(meta.get("labels") or {}).get(GANG_LABEL) or meta.get("name", "")] += 1
    partial = [n for n in bound_per_gang.values() if 0 < n < w.gang_size]
    return {
        "pods_bound_listed": bound,
        "gangs_whole": sum(1 for n in bound_per_gang.values() if n >= w.gang_size),
        "partial_gangs": len(partial),
        "gpus_held_by_partial_gangs": sum(partial) * w.gpus_per_pod,
    }


def _scheduled_events(events: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, Any]:
    bound_pods = {p["metadata"]["name"] for p in pods if (p.get("spec") or {}).get("nodeName")}
    by_kind: Counter[str] = Counter()
    regarded: set[str] = set()
    occurrences = 0
    for e in events:
        regarding = e.get("regarding") or {}
        by_kind[str(regarding.get("kind", ""))] += 1
        if regarding.get("kind") == "Pod":
            regarded.add(str(regarding.get("name", "")))
        occurrences += int((e.get("series") or {}).get("count") or 1)
    return {
        "scheduled_events": len(events),
        "scheduled_events_by_kind": dict(sorted(by_kind.items())),
        "scheduled_occurrences": occurrences,
        "bound_pods_without_scheduled_event": len(bound_pods - regarded),
    }


async def _measure(cfg: RunConfig, cp: ControlPlane, launch: Launch, log: Path) -> dict[str, Any]:
    w = cfg.workload
    creds = Credentials(cp.server, cp.token, cp.ca_file.read_text())
    async with Api(creds, max(cfg.create_concurrency, 4)) as api:
        create_s = await _create(cfg, api, launch)
        before = await api.request_totals()
        base = binding_count(before)
        proc = SchedulerProcess(launch, log)
        if w.fills:

            def stop(elapsed: float, bound: int) -> bool:
                return bound >= w.pods or elapsed >= cfg.timeout
        else:

            def stop(elapsed: float, bound: int) -> bool:
                return elapsed >= cfg.window

        t0 = time.monotonic()
        t0_wall = time.time()
        print("T0", t0_wall, file=sys.stderr)
        proc.start()
        try:
            first, last, bound, curve = await _poll(api, proc, t0, base, stop)
            running = proc.exit_code is None
            settle_s = await _settle(api, cfg.settle_max) if running else 0.0
            stats = proc.stats()
            probes: dict[str, Any] = {}
            if w.probes_unschedulable and running and bound >= w.pods:
                peer = launch.scheduler if launch.scheduler in PEER_GANGS else ""
                probes = await probe_unschedulable(
                    api, w, launch.scheduler_name, peer, cfg.samples, cfg.timeout
                )
            running = proc.exit_code is None
        finally:
            proc.stop()
        exit_code = proc.exit_code if not running else None
        # The API server counts a watch when it ends: the scheduler's end as it exits.
        await asyncio.sleep(STOPPED_S)
        after = await api.request_totals()
        pods = await api.list_all(POD_PATH)
        events = await api.list_all(
            f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events",
            {"fieldSelector": "reason=Scheduled"},
        )
    requests, errors = _delta(after, before)
    polled = {
        "polled_seconds_to_first_binding": _r(first),
        "polled_seconds_to_last_binding": _r(last),
    }
    exact = binding_times(cp.audit_events(), t0_wall)
    timed_by = "polls of /metrics (every 0.2 s)"
    if exact.bound >= bound and exact.first is not None:
        # every binding the polls counted is in the audit log: its times are exact
        first, timed_by = exact.first, "the API server's audit log"
        if w.fills and bound >= w.pods:
            last = exact.nth(w.pods)
    all_bound = w.fills and bound >= w.pods
    if not running:
        status = "failed"
        reason = f"{launch.scheduler} exited with code {exit_code}: {proc.tail()}"
    elif w.fills and not all_bound:
        status, reason = "timeout", f"{bound} of {w.pods} pods bound after {cfg.timeout:g} s"
    else:
        status, reason = "ok", ""
    done_s = last if all_bound else None
    record: dict[str, Any] = {
        "status": status,
        "reason": reason,
        "workload": w.name,
        "nodes": w.nodes,
        "pods": w.pods,
        "gangs": w.gangs,
        "gang_size": w.gang_size,
        "qps": cfg.qps,
        "scheduler_name": launch.scheduler_name,
        "create_seconds": round(create_s, 2),
        "window_seconds": cfg.window if w.name == "contention" else None,
        "pods_bound": bound,
        "seconds_to_first_binding": _r(first, 3),
        "seconds_to_last_binding": _r(last, 3),
        "binding_times_from": timed_by,
        **polled,
        "seconds_to_all_bound": _r(done_s, 3),
        "pods_per_second": _r(bound / done_s if done_s else None, 1),
        "binding_rate": _r(
            (bound - 1) / (last - first)
            if all_bound and first is not None and last and last > first
            else None,
            1,
        ),
        "cpu_seconds": _r(stats.cpu_seconds if stats else None),
        "cpu_ms_per_pod": _r(stats.cpu_seconds * 1000 / bound if stats and bound else None, 3),
        "peak_rss_mb": _r(stats.peak_rss_mb if stats else None, 1),
        "processes": stats.processes if stats else None,
        "settle_seconds": round(settle_s, 2),
        **_gangs(w, pods),
        "topology_domains_used": w.domains_used(
            [n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))]
        )
        or None,
        **_scheduled_events(events, pods),
        "requests": requests,
        "request_errors": errors,
        "requests_scope": REQUESTS_SCOPE,
        "bindings_curve": curve,
        **probes,
    }
    return record


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
