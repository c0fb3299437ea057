"""The simulator's event loop: arrivals and completions in, the core's decisions applied.

The simulator keeps its own truth of what runs where, independent of the core's cache, and
checks the invariants against it after every step: no node over-committed in any resource,
no GPU device over-committed (the shares on one device never above 1000 milli-GPUs, a whole
device held by one pod alone, each GPU pod bound with as many devices as it asks for), no
gang ever holding 0 < n < minMember members. Its GPU figures are in milli-GPUs: what bound
pods asked for, counted on the devices each binding names (``Binding.devices``).

Preemption: a ``Preempt`` decision marks its victims as being deleted at once (as the API
shows a pod whose graceful deletion was asked for) and deletes them ``grace`` seconds later
(the workload's ``terminationGracePeriodSeconds``, 0 by default). Each evicted pod is then
recreated as a new pending pod, as a Job controller would; a job left with fewer than
``minMember`` running pods (every job hit by a whole-gang preemption) stops, and runs again
from the start once it is bound again: its run time restarts.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import assert_never

from gangsched.api.dra import ResourceSlice
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import (
    BindGang,
    Binding,
    ClaimWrite,
    Decision,
    DeviceConflict,
    Evict,
    GangTimedOut,
    GangUnschedulable,
    GangWaiting,
    MemberLoss,
    Preempt,
    Victim,
)
from gangsched.core.forecast import forecast
from gangsched.core.gpu import MILLI
from gangsched.core.model import GangMode, Node, Pod, PodPhase
from gangsched.core.resourceclaims import Claim, DeviceClass, DeviceId
from gangsched.core.resources import ResourceList, add_into, sub_into
from gangsched.core.scheduler import Scheduler
from gangsched.sim.jobs import SimJob

__all__ = ["SimResult", "Simulation"]

ARRIVE, FINISH, EVICT, FAIL = 0, 1, 2, 3


@dataclass(slots=True)
class SimResult:
    jobs: list[SimJob]
    pods_bound: int
    partial_gangs: set[str]
    overcommitted_nodes: set[str]
    # (t, milli-GPUs allocated, milli-GPUs in the cluster, waiting GPU jobs)
    timeline: list[tuple[float, int, int, int]]
    sim_seconds: float
    wall_seconds: float
    cycles: int
    timeouts: int
    decisions: int
    gpu_idle_while_waiting: float = 0.0  # GPU-seconds free while some GPU job waited
    gpu_seconds_total: float = 0.0
    placements: dict[str, str] = field(default_factory=dict)  # pod uid -> node it was bound to
    preemptions: int = 0  # Preempt decisions
    victim_pods: int = 0  # pods evicted by them
    victim_gangs: int = 0  # gangs (with a PodGroup) hit by them, once per preemption
    gpu_seconds_lost: float = 0.0  # over victims: GPUs x how long they had run when evicted
    pods_recreated: int = 0  # evicted pods made again by their (simulated) controller
    member_losses: int = 0  # MemberLoss decisions: a running gang fell below its quorum
    pods_restarted: int = 0  # members deleted by RestartGang (then made again)
    member_failures: int = 0  # members failed on purpose (the workload's memberFailures)
    claims_allocated: int = 0  # resource claims whose allocation a binding wrote
    gpu: GpuTally | None = None  # the devices at the end of the run, and the key moments
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # node -> its labels
    topology_levels: tuple[str, ...] = ()  # the configured topology levels, largest first


@dataclass(slots=True)
class GpuMoment:
    """The GPU figures at one instant: milli-GPUs bound and arrived, devices handed out."""

    t: float
    bound_milli: int
    arrived_milli: int
    devices_used: int


@dataclass(slots=True)
class GpuTally:
    """The simulator's own per-device truth: milli-GPUs counted on each device of each node,
    from the devices every binding names."""

    devices: dict[str, list[int]]  # node -> milli used on each of its devices
    capacity_milli: int = 0
    bound_milli: int = 0
    arrived_milli: int = 0  # GPU demand of the jobs that have arrived so far
    devices_used: int = 0  # devices with anything on them
    first_failure: GpuMoment | None = None  # when a GPU job first failed to place
    full_arrival: GpuMoment | None = None  # once arrived demand first reached the capacity
    device_errors: set[str] = field(default_factory=set)  # nodes a binding over-committed

    @classmethod
    def of(cls, nodes: list[Node]) -> GpuTally:
        devices = {n.name: [0] * len(n.gpus or ()) for n in nodes}
        return cls(devices, capacity_milli=sum(len(d) for d in devices.values()) * MILLI)

    def moment(self, t: float) -> GpuMoment:
        return GpuMoment(t, self.bound_milli, self.arrived_milli, self.devices_used)

    def take(self, node: str, pod: Pod, devices: tuple[int, ...]) -> tuple[int, ...]:
        """Count ``pod`` on ``devices`` of ``node``; a wrong device list or a device left
        over 1000 milli-GPUs marks the node. Returns the devices counted."""
        demand = pod.gpu
        if demand is None:
            return ()
        used = self.devices[node]
        counted = tuple(i for i in devices if 0 <= i < len(used))
        if len(set(devices)) != demand.count or len(counted) != len(devices):
            self.device_errors.add(node)
        for i in counted:
            if used[i] == 0:
                self.devices_used += 1
            used[i] += demand.milli
            if used[i] > MILLI:
                self.device_errors.add(node)
        self.bound_milli += demand.total
        return counted

    def give(self, node: str, pod: Pod, devices: tuple[int, ...]) -> None:
        demand = pod.gpu
        if demand is None:
            return
        used = self.devices[node]
        for i in devices:
            used[i] -= demand.milli
            if used[i] == 0:
                self.devices_used -= 1
        self.bound_milli -= demand.total


class Simulation:
    def __init__(
        self,
        nodes: list[Node],
        jobs: list[SimJob],
        config: CoreConfig,
        until: float | None = None,
        grace: float = 0.0,
        device_classes: Sequence[DeviceClass] = (),
        slices: Sequence[ResourceSlice] = (),
        forecast: bool = False,
    ) -> None:
        self.clock = FakeClock(0.0)
        # ask the core's start forecast at each job's first failure (SimJob.estimate)
        self.forecast = forecast
        self._to_forecast: dict[str, SimJob] = {}  # core gang key -> job, this step
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
        self.gpu = GpuTally.of(nodes)
        self.devices_of: dict[str, tuple[int, ...]] = {}  # pod uid -> devices counted
        self.timeline: list[tuple[float, int, int, int]] = []
        self._waiting_gpu_jobs: set[str] = set()
        # preemption
        self.grace = grace
        self.preemptions = 0
        self.victim_pods = 0
        self.victim_gangs = 0
        self.gpu_seconds_lost = 0.0
        self.bound_at: dict[str, float] = {}  # pod uid -> when it was bound
        self._evicting: set[str] = set()  # victims whose deletion is under way
        self.device_conflicts = 0  # running pods whose device records over-commit a device
        self._finish_at: dict[str, float] = {}  # job key -> when its current run ends
        self._recreated = 0
        # Dynamic Resource Allocation: the device classes and slices, each claim as made and
        # the devices allocated by the claims written (the truth a double allocation breaks)
        self._device_classes = tuple(device_classes)
        self._slices = tuple(slices)
        self._claims: dict[str, Claim] = {}
        self._allocated: dict[DeviceId, str] = {}
        # partitionable pools: each device, and the counter sets' totals by pool, so that
        # counters consumed beyond a set mark the node as over-committed too
        self._device_by_id = {d.id: d for sl in self._slices for d in sl.devices}
        self._counter_totals: dict[tuple[str, str, str, str], int] = {
            (driver, pool, cs, c): n
            for sl in self._slices
            for driver, pool, cs, c, n in sl.pool_counters
        }
        self.claims_allocated = 0
        self.member_losses = 0
        self.pods_restarted = 0
        self.member_failures = 0
        self._failing: dict[str, tuple[str, int]] = {}  # event key -> (job key, members)

    # ---- driving -----------------------------------------------------------------------
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        for n in self.nodes.values():
            self.scheduler.node_upsert(n)
        for dc in self._device_classes:
            self.scheduler.device_class_upsert(dc)
        for sl in self._slices:
            self.scheduler.resource_slice_upsert(sl.name, sl.devices, sl.pool_counters)
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
            gpu = self.gpu
            if dt > 0:
                gpu_seconds += dt * gpu.capacity_milli / MILLI
                if self._waiting_gpu_jobs:
                    idle_gpu += dt * (gpu.capacity_milli - gpu.bound_milli) / MILLI
            last_t = t
            self.clock.set(t)
            progressed = False
            while self._events and self._events[0][0] <= t:
                t_ev, kind, _, key = heapq.heappop(self._events)
                if kind == EVICT:
                    self._evict(key)
                elif kind == FAIL:
                    self._fail_members(*self._failing.pop(key))
                elif kind == ARRIVE:
                    self._arrive(self.by_key[key])
                elif self._finish_at.get(key) == t_ev:  # not a run cut short by an eviction
                    del self._finish_at[key]
                    self._finish(self.by_key[key])
                progressed = True
            decisions = self.scheduler.run_until_idle()
            if self._apply(decisions):
                progressed = True
            if self._to_forecast:
                self._estimate()
            if progressed:
                horizon = t + quiet
            if gpu.full_arrival is None and gpu.arrived_milli >= gpu.capacity_milli > 0:
                gpu.full_arrival = gpu.moment(t)
            self.timeline.append(
                (t, gpu.bound_milli, gpu.capacity_milli, len(self._waiting_gpu_jobs))
            )
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
            preemptions=self.preemptions,
            victim_pods=self.victim_pods,
            victim_gangs=self.victim_gangs,
            gpu_seconds_lost=self.gpu_seconds_lost,
            pods_recreated=self._recreated,
            member_losses=self.member_losses,
            pods_restarted=self.pods_restarted,
            member_failures=self.member_failures,
            claims_allocated=self.claims_allocated,
            gpu=self.gpu,
            node_labels={name: dict(n.labels) for name, n in self.nodes.items()},
            topology_levels=self.config.topology_levels,
        )

    # ---- events ------------------------------------------------------------------------
    def _push(self, t: float, kind: int, key: str) -> None:
        self._seq += 1
        heapq.heappush(self._events, (t, kind, self._seq, key))

    def _arrive(self, job: SimJob) -> None:
        for made in job.claims.values():
            for c in made:
                self._claims[c.key] = c
                self.scheduler.resource_claim_upsert(c)
        if job.spec is not None:
            self.scheduler.gang_upsert(job.spec)
        for p in job.pods:
            self.scheduler.pod_upsert(p)
        if job.gpu_milli:
            self._waiting_gpu_jobs.add(job.key)
            self.gpu.arrived_milli += job.gpu_milli

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
        self._release_claims(pod)
        sub_into(self.used[pod.node_name], pod.requests)
        self.gpu.give(pod.node_name, pod, self.devices_of.pop(uid, ()))
        self.scheduler.pod_upsert(done)

    # ---- decisions ---------------------------------------------------------------------
    def _apply(self, decisions: list[Decision]) -> bool:
        """Carry out every decision, as the adapter would against the API server."""
        bound_any = False
        touched: set[str] = set()
        for d in decisions:
            self.decisions += 1
            match d:
                case BindGang():
                    for w in d.claims:
                        self._write_claim(w)
                    for b in d.bindings:
                        self._bind(b)
                        bound_any = True
                        touched.add(self.job_of[b.pod.uid].key)
                case GangTimedOut():
                    self.timeouts += 1
                    touched.add(d.gang if d.gang in self.by_key else "")
                case Preempt():
                    self.preemptions += 1
                    self._delete_victims(d.victims)
                case Evict():
                    self._delete_victims(d.victims)
                case MemberLoss():
                    # the event is the status; under RestartGang the members left are deleted
                    # (their controller makes them again) so the gang is placed whole again
                    self.member_losses += 1
                    self.pods_restarted += len(self._delete_pods(r.uid for r in d.restart))
                case GangUnschedulable():
                    job = self.by_key.get(d.gang) or (
                        self.job_of.get(d.pods[0].uid) if d.pods else None
                    )
                    if job is not None:
                        job.reason, job.message = d.reason, d.message
                        if self.forecast and job.estimate is None and job.first_started is None:
                            self._to_forecast[d.gang] = job
                        gpu = self.gpu
                        if (
                            gpu.first_failure is None
                            and job.gpu_milli
                            and d.reason == "Unschedulable"
                        ):
                            gpu.first_failure = gpu.moment(self.clock.now())
                case GangWaiting():
                    pass  # reservations held at Permit: the status says so, nothing to do
                case DeviceConflict():
                    self.device_conflicts += 1
                case _:
                    assert_never(d)
        for key in touched:
            self._check_gang(key)
        return bound_any

    def _estimate(self) -> None:
        """The core's start forecast for the jobs that failed for the first time this step."""
        now = self.clock.now()
        estimates = forecast(self.scheduler, list(self._to_forecast))
        for key, job in self._to_forecast.items():
            if job.first_started is None and key in estimates:
                job.estimate, job.estimated_at = estimates[key], now
        self._to_forecast.clear()

    def _bind(self, b: Binding) -> None:
        uid, node = b.pod.uid, b.node
        pod = self.pods[uid]
        if pod.node_name or pod.phase is not PodPhase.PENDING:
            raise AssertionError(f"pod {pod.key} bound twice")
        used = self.used[node]
        add_into(used, pod.requests)
        alloc = self.nodes[node].allocatable
        if any(v > alloc.get(k, 0) for k, v in used.items()):
            self.overcommitted.add(node)
        if pod.gpu is not None:
            self.devices_of[uid] = self.gpu.take(node, pod, b.devices)
            if node in self.gpu.device_errors:
                self.overcommitted.add(node)
        # The adapter records a share's devices in the pod (Koordinator's device-allocated
        # annotation); whole devices are the device plugin's to pick.
        shared = pod.gpu is not None and pod.gpu.shared
        bound = replace(
            pod,
            node_name=node,
            phase=PodPhase.RUNNING,
            gpu_devices=b.devices if shared else pod.gpu_devices,
        )
        self.pods[uid] = bound
        self.pods_bound += 1
        job = self.job_of[uid]
        job.bound_pods.add(uid)
        now = self.clock.now()
        self.bound_at[uid] = now
        if job.first_bound is None:
            job.first_bound = now
        self.scheduler.pod_upsert(bound)
        if job.finished is not None:
            self._complete(uid)
        elif job.started is None and len(job.bound_pods) >= job.min_member:
            job.started = now
            if job.first_started is None:
                job.first_started = now
                for i, (after, members) in enumerate(job.failures):
                    self._failing[f"{job.key}#{i}"] = (job.key, members)
                    self._push(now + after, FAIL, f"{job.key}#{i}")
            since = job.arrival if job.pending_since is None else job.pending_since
            job.waits.append((since, now))
            job.pending_since = None
            job.reason, job.message = "Scheduled", ""
            self._waiting_gpu_jobs.discard(job.key)
            if job.duration != math.inf:
                self._finish_at[job.key] = now + job.duration
                self._push(now + job.duration, FINISH, job.key)

    # ---- preemption --------------------------------------------------------------------
    def _delete_victims(self, victims: tuple[Victim, ...]) -> None:
        """Ask for the victims' deletion: they show as being deleted now and go after the
        grace period."""
        gone = self._delete_pods(v.pod.uid for v in victims)
        self.victim_pods += len(gone)
        self.victim_gangs += len({self.job_of[u].key for u in gone if self.job_of[u].spec})

    def _delete_pods(self, uids: Iterable[str]) -> list[str]:
        """Delete running pods: they show as being deleted now and go after the grace period
        (then their controller makes them again). Returns those asked to go."""
        out: list[str] = []
        now = self.clock.now()
        for uid in uids:
            pod = self.pods.get(uid)
            if pod is None or uid in self._evicting or pod.terminal or not pod.node_name:
                continue
            self._evicting.add(uid)
            out.append(uid)
            going = replace(pod, deleting=True)
            self.pods[uid] = going
            self.scheduler.pod_upsert(going)
            self._push(now + self.grace, EVICT, uid)
        return out

    def _fail_members(self, key: str, members: int) -> None:
        """``members`` running members of the job fail (the workload's memberFailures): they
        free their capacity, the scheduler sees them fail, and their controller makes them
        again."""
        job = self.by_key[key]
        running = sorted(u for u in job.bound_pods if self.pods[u].phase is PodPhase.RUNNING)
        for uid in running[:members]:
            if uid in self._evicting:
                continue
            pod = self.pods[uid]
            self.member_failures += 1
            sub_into(self.used[pod.node_name], pod.requests)
            self.gpu.give(pod.node_name, pod, self.devices_of.pop(uid, ()))
            job.bound_pods.discard(uid)
            failed = replace(pod, phase=PodPhase.FAILED)
            self.pods[uid] = failed
            self._release_claims(pod)
            self.scheduler.pod_upsert(failed)
            self._recreate(job, pod)
        self._stopped_if_short(job)

    def _evict(self, uid: str) -> None:
        """The victim's graceful termination is over: it is deleted, its capacity freed, and
        its controller recreates it; its job stops if it no longer has its quorum running."""
        self._evicting.discard(uid)
        pod = self.pods[uid]
        if pod.terminal or not pod.node_name:
            return  # it finished meanwhile
        now = self.clock.now()
        gpus = pod.gpu.total / MILLI if pod.gpu is not None else 0.0
        self.gpu_seconds_lost += gpus * (now - self.bound_at.pop(uid, now))
        sub_into(self.used[pod.node_name], pod.requests)
        self.gpu.give(pod.node_name, pod, self.devices_of.pop(uid, ()))
        job = self.job_of[uid]
        job.bound_pods.discard(uid)
        # Kept in the record as it ended (evicted), though the API no longer has it.
        self.pods[uid] = replace(pod, phase=PodPhase.FAILED)
        self._release_claims(pod)
        self.scheduler.pod_delete(uid)
        self._recreate(job, pod)
        self._stopped_if_short(job)

    def _stopped_if_short(self, job: SimJob) -> None:
        """The job no longer has its quorum running: it stops, to run again from the start."""
        now = self.clock.now()
        running = sum(1 for u in job.bound_pods if self.pods[u].phase is PodPhase.RUNNING)
        if job.started is not None and job.finished is None and running < job.min_member:
            job.started = None
            job.evictions += 1
            job.pending_since = now
            self._finish_at.pop(job.key, None)
            if job.gpus:
                self._waiting_gpu_jobs.add(job.key)

    def _recreate(self, job: SimJob, gone: Pod) -> Pod:
        """A new pending pod in place of a deleted one, as a Job controller makes it."""
        self._recreated += 1
        fresh = replace(
            gone,
            uid=f"{gone.uid}-r{self._recreated}",
            name=f"{gone.name}-r{self._recreated}",
            created=self.clock.now(),
            node_name="",
            phase=PodPhase.PENDING,
            deleting=False,
            gpu_devices=(),
        )
        if gone.resource_claims:
            fresh = replace(fresh, resource_claims=self._claims_again(job, gone, fresh))
        job.pods = [fresh if p.uid == gone.uid else p for p in job.pods]
        self.pods[fresh.uid] = fresh
        self.job_of[fresh.uid] = job
        self.scheduler.pod_upsert(fresh)
        return fresh

    # ---- Dynamic Resource Allocation ---------------------------------------------------------
    def _write_claim(self, w: ClaimWrite) -> None:
        """PreBind: the claim's allocation written, as the adapter writes ``status.allocation``;
        a device another written claim holds marks the node (a double allocation)."""
        for dev in w.allocation.devices:
            holder = self._allocated.get(dev)
            if holder is not None and holder != w.claim:
                self.overcommitted.add(w.allocation.node)
            self._allocated[dev] = w.claim
        if self._counter_totals:
            consumed: dict[tuple[str, str, str, str], int] = {}
            for dev, _ in self._allocated.items():
                d = self._device_by_id.get(dev)
                for cs, c, n in d.consumes if d is not None else ():
                    k = (dev.driver, dev.pool, cs, c)
                    consumed[k] = consumed.get(k, 0) + n
            if any(n > self._counter_totals.get(k, 0) for k, n in consumed.items()):
                self.overcommitted.add(w.allocation.node or w.claim)
        claim = replace(self._claims[w.claim], allocation=w.allocation, reserved_for=w.pods)
        self._claims[w.claim] = claim
        self.claims_allocated += 1
        self.scheduler.resource_claim_upsert(claim)

    def _release_claims(self, pod: Pod) -> None:
        """The pod finished or went: its claims (made for it from templates) are deallocated
        and deleted, as the resourceclaim controller does."""
        for key in pod.resource_claims:
            claim = self._claims.pop(key, None)
            if claim is not None and claim.allocation is not None:
                for dev in claim.allocation.devices:
                    if self._allocated.get(dev) == key:
                        del self._allocated[dev]
            self.scheduler.resource_claim_delete(key)

    def _claims_again(self, job: SimJob, gone: Pod, fresh: Pod) -> tuple[str, ...]:
        """New claims for a pod made again, from the same templates, under its new name."""
        made = []
        for k, old in enumerate(job.claims.get(gone.uid, [])):
            c = replace(
                old,
                name=f"{fresh.name}-claim-{k}",
                uid=f"{fresh.uid}-c{k}",
                allocation=None,
                reserved_for=(),
            )
            made.append(c)
            self._claims[c.key] = c
            self.scheduler.resource_claim_upsert(c)
        job.claims[fresh.uid] = made
        return tuple(c.key for c in made)

    def _check_gang(self, key: str) -> None:
        job = self.by_key.get(key)
        if job is None or job.spec is None:
            return
        bound = sum(1 for u in job.bound_pods if self.pods[u].phase is not PodPhase.FAILED)
        reserved = sum(1 for p in job.pods if p.uid in self.scheduler.cache.assumed)
        held = bound if job.spec.mode is GangMode.NON_STRICT else bound + reserved
        if 0 < held < job.min_member and job.started is None:
            self.partial.add(key)
