"""The simulator's event loop: arrivals and completions in, the core's decisions applied.

The simulator keeps its own truth of what runs where, independent of the core's cache, and
checks the invariants against it after every step: no node over-committed in any resource,
no gang ever holding 0 < n < minMember members.
"""

from __future__ import annotations

import heapq
import math
import time
from dataclasses import dataclass, field, replace

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision, GangTimedOut, GangUnschedulable
from gangsched.core.model import GangMode, Node, Pod, PodPhase
from gangsched.core.resources import GPU, ResourceList, add_into, sub_into
from gangsched.core.scheduler import Scheduler
from gangsched.sim.jobs import SimJob

__all__ = ["SimResult", "Simulation"]

ARRIVE, FINISH = 0, 1


@dataclass(slots=True)
class SimResult:
    jobs: list[SimJob]
    pods_bound: int
    partial_gangs: set[str]
    overcommitted_nodes: set[str]
    timeline: list[tuple[float, int, int, int]]  # (t, gpus allocated, gpus total, waiting jobs)
    sim_seconds: float
    wall_seconds: float
    cycles: int
    timeouts: int
    decisions: int
    gpu_idle_while_waiting: float = 0.0  # GPU-seconds free while some GPU job waited
    gpu_seconds_total: float = 0.0
    placements: dict[str, str] = field(default_factory=dict)  # pod uid -> node it was bound to


class Simulation:
    def __init__(
        self, nodes: list[Node], jobs: list[SimJob], config: CoreConfig, until: float | None = None
    ) -> None:
        self.clock = FakeClock(0.0)
        self.scheduler = Scheduler(config, self.clock)
        self.config = config
        self.nodes = {n.name: n for n in nodes}
        self.used: dict[str, ResourceList] = {n.name: {} for n in nodes}
        self.jobs = jobs
        self.until = until
        self.by_key = {j.key: j for j in jobs}
        self.pods: dict[str, Pod] = {}
        self.job_of: dict[str, SimJob] = {}
        self._events: list[tuple[float, int, int, str]] = []
        self._seq = 0
        self.partial: set[str] = set()
        self.overcommitted: set[str] = set()
        self.pods_bound = 0
        self.timeouts = 0
        self.decisions = 0
        self.gpus_total = sum(n.allocatable.get(GPU, 0) for n in nodes)
        self.gpus_used = 0
        self.timeline: list[tuple[float, int, int, int]] = []
        self._waiting_gpu_jobs: set[str] = set()

    # ---- driving -----------------------------------------------------------------------
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        for n in self.nodes.values():
            self.scheduler.node_upsert(n)
        for j in self.jobs:
            self._push(j.arrival, ARRIVE, j.key)
            for p in j.pods:
                self.pods[p.uid] = p
                self.job_of[p.uid] = j
        horizon = 0.0
        # With no arrivals or completions left, stop once nothing has been bound for longer
        # than any backoff plus any Permit timeout: nothing can change after that.
        timeouts = [self.config.default_schedule_timeout_seconds] + [
            j.spec.timeout_seconds for j in self.jobs if j.spec and j.spec.timeout_seconds
        ]
        if self.config.schedule_timeout_override_seconds is not None:
            timeouts = [self.config.schedule_timeout_override_seconds]
        quiet = 2 * self.config.backoff_max_seconds + max(timeouts) + 1.0
        idle_gpu = 0.0
        gpu_seconds = 0.0
        last_t = 0.0
        while True:
            t_event = self._events[0][0] if self._events else None
            t_wake = self.scheduler.next_wakeup()
            if t_event is None:
                if t_wake is None or t_wake > horizon:
                    break
                t = t_wake
            else:
                t = t_event if t_wake is None else min(t_event, t_wake)
            if self.until is not None and t > self.until:
                break
            t = max(t, self.clock.now())
            dt = t - last_t
            if dt > 0:
                gpu_seconds += dt * self.gpus_total
                if self._waiting_gpu_jobs:
                    idle_gpu += dt * (self.gpus_total - self.gpus_used)
            last_t = t
            self.clock.set(t)
            progressed = False
            while self._events and self._events[0][0] <= t:
                _, kind, _, key = heapq.heappop(self._events)
                job = self.by_key[key]
                if kind == ARRIVE:
                    self._arrive(job)
                else:
                    self._finish(job)
                progressed = True
            decisions = self.scheduler.run_until_idle()
            if self._apply(decisions):
                progressed = True
            if progressed:
                horizon = t + quiet
            self.timeline.append((t, self.gpus_used, self.gpus_total, len(self._waiting_gpu_jobs)))
        return SimResult(
            jobs=self.jobs,
            pods_bound=self.pods_bound,
            partial_gangs=self.partial,
            overcommitted_nodes=self.overcommitted,
            timeline=self.timeline,
            sim_seconds=self.clock.now(),
            wall_seconds=time.perf_counter() - t0,
            cycles=self.scheduler.cycles,
            timeouts=self.timeouts,
            decisions=self.decisions,
            gpu_idle_while_waiting=idle_gpu,
            gpu_seconds_total=gpu_seconds,
            placements={u: p.node_name for u, p in self.pods.items() if p.node_name},
        )

    # ---- events ------------------------------------------------------------------------
    def _push(self, t: float, kind: int, key: str) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, key))

    def _arrive(self, job: SimJob) -> None:
        if job.spec is not None:
            self.scheduler.gang_upsert(job.spec)
        for p in job.pods:
            self.scheduler.pod_upsert(p)
        if any(p.requests.get(GPU, 0) for p in job.pods):
            self._waiting_gpu_jobs.add(job.key)

    def _finish(self, job: SimJob) -> None:
        job.finished = self.clock.now()
        for uid in sorted(job.bound_pods):
            self._complete(uid)

    def _complete(self, uid: str) -> None:
        pod = self.pods[uid]
        if pod.phase is not PodPhase.RUNNING:
            return
        done = replace(pod, phase=PodPhase.SUCCEEDED)
        self.pods[uid] = done
        sub_into(self.used[pod.node_name], pod.requests)
        self.gpus_used -= pod.requests.get(GPU, 0)
        self.scheduler.pod_upsert(done)

    # ---- decisions ---------------------------------------------------------------------
    def _apply(self, decisions: list[Decision]) -> bool:
        bound_any = False
        touched: set[str] = set()
        for d in decisions:
            self.decisions += 1
            if isinstance(d, BindGang):
                for b in d.bindings:
                    self._bind(b.pod.uid, b.node)
                    bound_any = True
                    touched.add(self.job_of[b.pod.uid].key)
            elif isinstance(d, GangTimedOut):
                self.timeouts += 1
                touched.add(d.gang if d.gang in self.by_key else "")
            elif isinstance(d, GangUnschedulable):
                job = self.by_key.get(d.gang) or (
                    self.job_of.get(d.pods[0].uid) if d.pods else None
                )
                if job is not None:
                    job.reason, job.message = d.reason, d.message
        for key in touched:
            self._check_gang(key)
        return bound_any

    def _bind(self, uid: str, node: str) -> None:
        pod = self.pods[uid]
        if pod.node_name or pod.phase is not PodPhase.PENDING:
            raise AssertionError(f"pod {pod.key} bound twice")
        used = self.used[node]
        add_into(used, pod.requests)
        alloc = self.nodes[node].allocatable
        if any(v > alloc.get(k, 0) for k, v in used.items()):
            self.overcommitted.add(node)
        bound = replace(pod, node_name=node, phase=PodPhase.RUNNING)
        self.pods[uid] = bound
        self.pods_bound += 1
        self.gpus_used += pod.requests.get(GPU, 0)
        job = self.job_of[uid]
        job.bound_pods.add(uid)
        now = self.clock.now()
        if job.first_bound is None:
            job.first_bound = now
        self.scheduler.pod_upsert(bound)
        if job.finished is not None:
            self._complete(uid)
        elif job.started is None and len(job.bound_pods) >= job.min_member:
            job.started = now
            job.reason, job.message = "Scheduled", ""
            self._waiting_gpu_jobs.discard(job.key)
            if job.duration != math.inf:
                self._push(now + job.duration, FINISH, job.key)

    def _check_gang(self, key: str) -> None:
        job = self.by_key.get(key)
        if job is None or job.spec is None:
            return
        bound = sum(1 for u in job.bound_pods if self.pods[u].phase is not PodPhase.FAILED)
        reserved = sum(1 for p in job.pods if p.uid in self.scheduler.cache.assumed)
        held = bound if job.spec.mode is GangMode.NON_STRICT else bound + reserved
        if 0 < held < job.min_member and job.started is None:
            self.partial.add(key)
