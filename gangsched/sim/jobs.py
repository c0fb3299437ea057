"""Turns a workload file into the simulator's jobs and nodes."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from gangsched.core.model import (
    GangMode,
    GangSpec,
    Node,
    Placement,
    Pod,
    RoleSpec,
    Taint,
    TopologySpec,
)
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.sim.traces import read_trace_nodes, read_trace_tasks
from gangsched.sim.workload import NodeDef, TraceNodes, Workload, resolve_trace

__all__ = ["SimJob", "build_jobs", "build_nodes"]


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
    evictions: int = 0  # times a preemption stopped the job (it then runs again from the start)

    @property
    def waited(self) -> float:
        """Seconds spent pending before its starts, over every start so far."""
        return sum(b - a for a, b in self.waits)

    @property
    def gpus(self) -> int:
        """GPUs the job asks for: over all its pods (a gang's whole size in GPUs)."""
        return sum(p.requests.get(GPU, 0) for p in self.pods)

    @property
    def min_member(self) -> int:
        return self.spec.min_member if self.spec is not None else 1


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
    return nodes


def _expand_node(nd: NodeDef) -> list[Node]:
    taints = tuple(
        Taint(t.get("key", ""), t.get("value", ""), t.get("effect", "NoSchedule"))
        for t in nd.taints
    )
    alloc = nd.allocatable()
    names = [nd.name] if nd.count == 1 else [f"{nd.name}-{i}" for i in range(nd.count)]
    return [Node(n, dict(alloc), labels=dict(nd.labels), taints=taints) for n in names]


def build_jobs(w: Workload, base: Path, cluster_gpus: int = 0) -> list[SimJob]:
    jobs: list[SimJob] = []
    seq = 0

    def uid() -> str:
        nonlocal seq
        seq += 1
        return f"uid-{seq:07d}"

    for g in w.gangs:
        key = f"{g.namespace}/{g.name}"
        spec = GangSpec(
            key=key,
            min_member=g.min_member if g.min_member is not None else g.total,
            timeout_seconds=g.timeout_seconds,
            created=g.arrival,
            mode=GangMode(g.mode),
            roles=tuple(RoleSpec(r, m) for r, m in sorted(g.roles.items())),
            expected_runtime_seconds=g.expected_runtime_seconds,
            gang_group=tuple(
                sorted({key, *(x if "/" in x else f"{g.namespace}/{x}" for x in g.gang_group)})
            )
            if g.gang_group
            else (),
            topology=TopologySpec(
                affinity=tuple(tuple(x) for x in g.topology.get("affinity", [])),
                anti_affinity=tuple(tuple(x) for x in g.topology.get("antiAffinity", [])),
            ),
        )
        pods: list[Pod] = []
        for t in g.pods:
            placement = Placement(node_selector=tuple(sorted(t.node_selector.items())))
            for _ in range(t.count):
                i = len(pods)
                pods.append(
                    Pod(
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
                    )
                )
        jobs.append(SimJob(key, g.arrival, g.duration, pods, spec))
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
        tp = w.trace_pods
        tasks = read_trace_tasks(
            resolve_trace(tp.trace, base),
            tp.limit,
            tp.gpu_only,
            tp.time_scale,
            tp.max_duration,
            tp.arrival_scale,
        )
        demand, budget = 0, tp.load * cluster_gpus
        for i, task in enumerate(tasks):
            if tp.replay == "saturate":
                if demand >= budget:
                    break
                demand += task.gpus
                task = replace(task, arrival=i * tp.interval, duration=math.inf)
            if task.gpus >= 2:
                key = f"trace/{task.name}"
                spec = GangSpec(key, task.gpus, created=task.arrival)
                req = {
                    CPU: max(1, task.cpu_milli // task.gpus),
                    MEMORY: task.memory // task.gpus,
                    GPU: 1,
                    PODS: 1,
                }
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
                    for i in range(task.gpus)
                ]
                jobs.append(SimJob(key, task.arrival, task.duration, pods, spec))
            else:
                req = {CPU: task.cpu_milli, MEMORY: task.memory, PODS: 1}
                if task.gpus:
                    req[GPU] = task.gpus
                pod = Pod(
                    uid(), "trace", task.name, req, created=task.arrival, placement=task.placement
                )
                jobs.append(SimJob(pod.key, task.arrival, task.duration, [pod]))
    jobs.sort(key=lambda j: (j.arrival, j.key))
    return jobs
