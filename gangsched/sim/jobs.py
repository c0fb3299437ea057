"""Turns a workload file into the simulator's jobs and nodes."""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gangsched.api.dra import (
    DraError,
    ResourceSlice,
    device_class_from,
    resource_claim_from,
    resource_slice_from,
)
from gangsched.api.podgroup import podgroup_from
from gangsched.core.forecast import Estimate
from gangsched.core.gpu import GPU, MILLI
from gangsched.core.model import (
    GangSpec,
    Node,
    Placement,
    Pod,
    Taint,
)
from gangsched.core.resourceclaims import Claim, DeviceClass
from gangsched.core.resources import CPU, MEMORY, PODS
from gangsched.sim.topology import synthesise
from gangsched.sim.traces import TraceError, TraceTask, read_trace_nodes, read_trace_tasks
from gangsched.sim.workload import (
    GangDef,
    NodeDef,
    TraceNodes,
    TracePods,
    Workload,
    WorkloadError,
    resolve_trace,
)

__all__ = ["SimJob", "build_jobs", "build_nodes", "capacity_milli"]


@dataclass(slots=True)
class SimJob:
    """A gang (``spec`` set) or a plain pod (``spec`` None, one pod)."""

    key: str
    arrival: float
    duration: float
    pods: list[Pod]
    spec: GangSpec | None = None
    first_bound: float | None = None
    started: float | None = None  # quorum bound: the job runs from here
    finished: float | None = None
    reason: str = ""
    message: str = ""
    bound_pods: set[str] = field(default_factory=set)
    first_started: float | None = None
    # (from, to) of each wait that ended in a start: arrival to start, then eviction to restart
    waits: list[tuple[float, float]] = field(default_factory=list)
    pending_since: float | None = None  # while pending: since when (None: since arrival)
    # times the job was stopped (preempted, or members lost): it then runs again from the start
    evictions: int = 0
    # (seconds after its first start, members that fail then): injected member failures
    failures: tuple[tuple[float, int], ...] = ()
    # pod uid -> the resource claims made for it from its templates (not allocated)
    claims: dict[str, list[Claim]] = field(default_factory=dict)
    # the core's start forecast at the job's first failure, and when it was made
    estimate: Estimate | None = None
    estimated_at: float | None = None

    @property
    def waited(self) -> float:
        """Seconds spent pending before its starts, over every start so far."""
        return sum(b - a for a, b in self.waits)

    @property
    def gpu_milli(self) -> int:
        """Milli-GPUs the job asks for: over all its pods (a gang's whole size)."""
        return sum(p.gpu.total for p in self.pods if p.gpu is not None)

    @property
    def gpus(self) -> float:
        """GPUs the job asks for, over all its pods (0.5 for half of one)."""
        return self.gpu_milli / MILLI

    @property
    def min_member(self) -> int:
        return self.spec.min_member if self.spec is not None else 1


def capacity_milli(nodes: list[Node]) -> int:
    """The nodes' GPU capacity in milli-GPUs: 1000 per device."""
    return sum(len(n.gpus or ()) for n in nodes) * MILLI


def build_devices(w: Workload) -> tuple[list[DeviceClass], list[ResourceSlice]]:
    """The workload's DeviceClasses and each node's ResourceSlices, read by the scheduler's
    own readers (gangsched.api.dra); one they refuse is a workload error naming the field."""
    classes: list[DeviceClass] = []
    for i, dc in enumerate(w.device_classes):
        selectors = [{"cel": {"expression": e}} for e in dc.get("selectors", [])]
        obj = {"metadata": {"name": dc.get("name", "")}, "spec": {"selectors": selectors}}
        read = device_class_from(obj)
        if isinstance(read, DraError):
            raise WorkloadError(f"deviceClasses.{i} ({read.key}): {read.reason}")
        classes.append(read)
    slices: list[ResourceSlice] = []
    for i, nd in enumerate(w.nodes):
        if isinstance(nd, TraceNodes) or not nd.devices:
            continue
        for node in _expand_node(nd):
            for k, cs in enumerate(nd.counter_sets):
                spec = {
                    "driver": cs.driver,
                    "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                    "nodeName": node.name,
                    "sharedCounters": [{"name": cs.name, "counters": cs.counters}],
                }
                obj = {"metadata": {"name": f"{node.name}-{cs.driver}-counters-{k}"}, "spec": spec}
                got = resource_slice_from(obj)
                if isinstance(got, DraError):
                    raise WorkloadError(f"nodes.{i}.counterSets.{k}: {got.reason}")
                slices.append(got)
            for k, dd in enumerate(nd.devices):
                devices = [
                    {
                        "name": f"{dd.prefix}-{j}",
                        "attributes": dd.attributes,
                        "capacity": dd.capacity,
                        **(
                            {"consumesCounters": dd.consumes_counters}
                            if dd.consumes_counters
                            else {}
                        ),
                    }
                    for j in range(dd.count)
                ]
                spec = {
                    "driver": dd.driver,
                    "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
                    "nodeName": node.name,
                    "devices": devices,
                }
                obj = {"metadata": {"name": f"{node.name}-{dd.driver}-{k}"}, "spec": spec}
                got = resource_slice_from(obj)
                if isinstance(got, DraError):
                    raise WorkloadError(f"nodes.{i}.devices.{k}: {got.reason}")
                slices.append(got)
    for i, sd in enumerate(w.shared_devices):
        reach: dict[str, Any] = {"allNodes": True}
        if sd.node_labels:
            exprs = [
                {"key": k, "operator": "In", "values": [v]}
                for k, v in sorted(sd.node_labels.items())
            ]
            reach = {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": exprs}]}}
        spec = {
            "driver": sd.driver,
            "pool": {"name": sd.pool, "generation": 1, "resourceSliceCount": 1},
            **reach,
            "devices": [
                {"name": f"{sd.prefix}-{j}", "attributes": sd.attributes} for j in range(sd.count)
            ],
        }
        got = resource_slice_from({"metadata": {"name": f"{sd.pool}-{sd.driver}"}, "spec": spec})
        if isinstance(got, DraError):
            raise WorkloadError(f"sharedDevices.{i}: {got.reason}")
        slices.append(got)
    return classes, slices


def claims_for(pod: Pod, templates: list[dict[str, Any]], where: str) -> list[Claim]:
    """A claim of each template for ``pod`` (``<pod>-claim-<k>``), as the resourceclaim
    controller makes them, read by the scheduler's own claim reader."""
    out: list[Claim] = []
    for k, spec in enumerate(templates):
        name = f"{pod.name}-claim-{k}"
        obj = {
            "metadata": {"name": name, "namespace": pod.namespace, "uid": f"{pod.uid}-c{k}"},
            "spec": spec,
        }
        read = resource_claim_from(obj)
        if isinstance(read, DraError):
            raise WorkloadError(f"{where}.resourceClaims.{k}: {read.reason}")
        out.append(read)
    return out


def build_nodes(w: Workload, base: Path) -> list[Node]:
    nodes: list[Node] = []
    for nd in w.nodes:
        if isinstance(nd, TraceNodes):
            nodes += read_trace_nodes(resolve_trace(nd.trace, base), nd.limit, nd.memory_per_cpu)
            continue
        nodes += _expand_node(nd)
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise ValueError("node names must be unique")
    if w.node_topology is not None:
        nodes = synthesise(nodes, w.node_topology.racks())
    return nodes


def _expand_node(nd: NodeDef) -> list[Node]:
    taints = tuple(
        Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule"))
        for t in nd.taints
    )
    alloc = nd.allocatable()
    names = [nd.name] if nd.count == 1 else [f"{nd.name}-{i}" for i in range(nd.count)]
    return [Node(n, dict(alloc), labels=dict(nd.labels), taints=taints) for n in names]


def podgroup_spec(g: GangDef) -> dict[str, Any]:
    """The gang's PodGroup spec: as embedded (``spec:``), or as its shorthand fields say."""
    if g.spec is not None:
        return dict(g.spec)
    spec: dict[str, Any] = {
        "minMember": g.min_member if g.min_member is not None else g.total,
        "mode": g.mode,
    }
    if g.timeout_seconds is not None:  # whole seconds, as the PodGroup writes them
        t = g.timeout_seconds
        spec["scheduleTimeoutSeconds"] = int(t) if float(t).is_integer() else t
    if g.expected_runtime_seconds is not None:
        spec["expectedRuntimeSeconds"] = g.expected_runtime_seconds
    if g.roles:
        spec["roles"] = [{"name": r, "minMember": m} for r, m in sorted(g.roles.items())]
    if g.topology:
        spec["topology"] = g.topology
    if g.gang_group:
        spec["gangGroup"] = list(g.gang_group)
    if g.topology_placement is not None:
        spec["topologyPlacement"] = g.topology_placement.model_dump(
            by_alias=True, exclude_none=True
        )
    if g.on_member_loss != "None":
        spec["onMemberLoss"] = g.on_member_loss
    return spec


def gang_spec(g: GangDef, where: str) -> GangSpec:
    """The gang's GangSpec, read from its PodGroup spec by the scheduler's own reader
    (``gangsched.api.podgroup``); a spec the scheduler would refuse is a workload error."""
    obj = {"metadata": {"name": g.name, "namespace": g.namespace}, "spec": podgroup_spec(g)}
    spec = podgroup_from(obj)
    if spec.invalid_reason:
        raise WorkloadError(f"{where} ({spec.key}): invalid PodGroup: {spec.invalid_reason}")
    return replace(spec, created=g.arrival)


def declare_runtimes(jobs: list[SimJob]) -> None:
    """Every job declares how long it runs, exactly (the workload's ``declareRuntimes``): a
    gang's PodGroup its expectedRuntimeSeconds, where it sets none; a plain pod its
    activeDeadlineSeconds."""
    for job in jobs:
        if job.spec is not None:
            if job.spec.expected_runtime_seconds is None:
                job.spec = replace(job.spec, expected_runtime_seconds=job.duration)
        else:
            job.pods = [replace(p, active_deadline_seconds=job.duration) for p in job.pods]


def build_jobs(w: Workload, base: Path, capacity: int = 0) -> list[SimJob]:
    """The workload's jobs, by arrival. ``capacity`` is the cluster's GPU capacity in
    milli-GPUs, which ``saturate`` and ``sample`` replays fill up to their ``load``."""
    jobs: list[SimJob] = []
    seq = 0

    def uid() -> str:
        nonlocal seq
        seq += 1
        return f"uid-{seq:07d}"

    for gi, g in enumerate(w.gangs):
        key = f"{g.namespace}/{g.name}"
        spec = gang_spec(g, f"gangs.{gi}")
        pods: list[Pod] = []
        claims: dict[str, list[Claim]] = {}
        for ti, t in enumerate(g.pods):
            placement = Placement(node_selector=tuple(sorted(t.node_selector.items())))
            for _ in range(t.count):
                i = len(pods)
                pod = Pod(
                    uid(),
                    g.namespace,
                    f"{g.name}-{t.role or 'pod'}-{i}",
                    t.as_requests() | {PODS: 1},
                    created=g.arrival,
                    priority=g.priority,
                    placement=placement,
                    group=key,
                    role=t.role,
                    preemption_policy=g.preemption_policy,
                    labels=dict(t.labels),
                    index=i,  # as a Job's completion index: slices of ``size`` go in order
                )
                if t.resource_claims:
                    made = claims_for(pod, t.resource_claims, f"gangs.{gi}.pods.{ti}")
                    claims[pod.uid] = made
                    pod = replace(pod, resource_claims=tuple(c.key for c in made))
                pods.append(pod)
        failures = tuple((f.after, f.members) for f in g.member_failures)
        jobs.append(
            SimJob(key, g.arrival, g.duration, pods, spec, failures=failures, claims=claims)
        )
    for p in w.pods:
        for i in range(p.repeat):
            arrival = p.arrival + i * p.every
            pod = Pod(
                uid(),
                p.namespace,
                p.name if p.repeat == 1 else f"{p.name}-{i}",
                p.as_requests() | {PODS: 1},
                created=arrival,
                priority=p.priority,
                preemption_policy=p.preemption_policy,
            )
            jobs.append(SimJob(pod.key, arrival, p.duration, [pod]))
    if w.trace_pods is not None:
        jobs += trace_jobs(w.trace_pods, base, capacity, uid)
    jobs.sort(key=lambda j: (j.arrival, j.key))
    return jobs


def trace_jobs(tp: TracePods, base: Path, capacity: int, uid: Callable[[], str]) -> list[SimJob]:
    """The jobs of a ``tracePods`` entry, by its replay mode (docs/simulator.md)."""
    tasks = read_trace_tasks(
        resolve_trace(tp.trace, base),
        tp.limit,
        tp.skip_cpu_only,
        tp.time_scale,
        tp.max_duration,
        tp.arrival_scale,
    )
    if tp.replay != "timeline":
        tasks = _arrivals_past_capacity(tasks, tp, capacity)
    return [_task_job(t, tp.multi_gpu, uid) for t in tasks]


def _arrivals_past_capacity(
    tasks: list[TraceTask], tp: TracePods, capacity: int
) -> list[TraceTask]:
    """``saturate``: the tasks in trace order; ``sample``: tasks drawn with replacement from
    ``seed``. One every ``interval`` seconds, never finishing, until the GPU demand that has
    arrived reaches ``load`` times ``capacity`` (checked before each task)."""
    budget = tp.load_factor * capacity
    if tp.replay == "sample" and budget > 0 and not any(t.demand_milli for t in tasks):
        raise TraceError(f"{tp.trace}: no task asks for a GPU, so none can fill the cluster")
    rng = random.Random(tp.seed)
    out: list[TraceTask] = []
    demand = 0
    while demand < budget:
        i = len(out)
        if tp.replay == "sample":
            task = tasks[rng.randrange(len(tasks))]
            task = replace(task, name=f"{task.name}-s{i}")
        elif i < len(tasks):
            task = tasks[i]
        else:
            break
        demand += task.demand_milli
        out.append(replace(task, arrival=i * tp.interval, duration=math.inf))
    return out


def _task_job(task: TraceTask, multi_gpu: str, uid: Callable[[], str]) -> SimJob:
    """One trace task as a job: one pod on one node; with ``multi_gpu: gang`` a task of N >= 2
    whole GPUs becomes a gang of N one-GPU workers (its CPU and memory split evenly)."""
    if multi_gpu == "gang" and task.num_gpu >= 2 and task.gpu_milli >= MILLI:
        key = f"trace/{task.name}"
        n = task.num_gpu
        spec = GangSpec(key, n, created=task.arrival)
        req = {CPU: max(1, task.cpu_milli // n), MEMORY: task.memory // n, GPU: 1, PODS: 1}
        pods = [
            Pod(
                uid(),
                "trace",
                f"{task.name}-w{i}",
                dict(req),
                created=task.arrival,
                placement=task.placement,
                group=key,
            )
            for i in range(n)
        ]
        return SimJob(key, task.arrival, task.duration, pods, spec)
    req = {CPU: task.cpu_milli, MEMORY: task.memory, PODS: 1} | task.gpu_requests()
    pod = Pod(uid(), "trace", task.name, req, created=task.arrival, placement=task.placement)
    return SimJob(pod.key, task.arrival, task.duration, [pod])
