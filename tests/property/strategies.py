"""Hypothesis strategies and an independent reference driver for the property tests.

Workloads are drawn as immutable ``JobDef`` descriptions; fresh ``Pod`` objects are built for
every run, so the same description can be replayed to check determinism.

``World`` drives a ``Scheduler`` by hand through an interleaving of events (arrivals, gang
specs, scheduling steps, late or failed bind confirmations, completions, foreign pods, cordons,
clock jumps) and keeps its own truth of what is bound where. After every event it checks the
invariants against that truth, never against the scheduler's own bookkeeping alone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from hypothesis import strategies as st

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import (
    BindGang,
    Binding,
    Decision,
    GangUnschedulable,
    GangWaiting,
    Preempt,
)
from gangsched.core.model import GangMode, GangSpec, Node, Pod, PodPhase
from gangsched.core.resources import CPU, GPU, MEMORY, PODS, ResourceList, add_into
from gangsched.core.scheduler import Scheduler
from gangsched.sim.engine import Simulation
from gangsched.sim.jobs import SimJob

__all__ = [
    "JobDef",
    "World",
    "backoff_for",
    "build_sim_jobs",
    "clusters",
    "decision_digest",
    "instrumented_simulation",
    "ops",
    "run_world",
    "seeded_case",
    "workloads",
]

MI = 2**20
GI = 2**30
SCHEDULER = "gangsched"
FOREIGN = "default-scheduler"


# ---- clusters ----------------------------------------------------------------------------


@st.composite
def _node(draw: st.DrawFn, index: int) -> Node:
    gpus = draw(st.integers(0, 8))
    alloc: ResourceList = {
        CPU: 1000 * draw(st.integers(1, 64)),
        MEMORY: GI * draw(st.integers(1, 256)),
        PODS: draw(st.sampled_from([4, 16, 110])),
    }
    if gpus:
        alloc[GPU] = gpus
    return Node(f"n{index}", alloc)


@st.composite
def clusters(draw: st.DrawFn, min_nodes: int = 1, max_nodes: int = 8) -> list[Node]:
    n = draw(st.integers(min_nodes, max_nodes))
    return [draw(_node(i)) for i in range(n)]


# ---- workloads ---------------------------------------------------------------------------

_CPU = st.sampled_from([100, 250, 500, 1000, 2000, 4000, 8000, 16000])
_MEM = st.sampled_from([128 * MI, 512 * MI, GI, 4 * GI, 16 * GI, 64 * GI])
_GPU = st.sampled_from([0, 0, 1, 1, 1, 2, 4])


@st.composite
def requests(draw: st.DrawFn) -> ResourceList:
    r: ResourceList = {CPU: draw(_CPU), MEMORY: draw(_MEM), PODS: 1}
    gpus = draw(_GPU)
    if gpus:
        r[GPU] = gpus
    return r


@dataclass(frozen=True)
class JobDef:
    """A gang (``gang`` True) or a plain pod, as plain data."""

    key: str  # "namespace/name"
    gang: bool
    min_member: int
    mode: GangMode
    priority: int
    arrival: float
    duration: float
    pod_requests: tuple[tuple[tuple[str, int], ...], ...]
    timeout: float | None = None

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

    @property
    def size(self) -> int:
        return len(self.pod_requests)

    def uid(self, i: int) -> str:
        return f"{self.namespace}.{self.name}.{i}"

    def gang_key(self, i: int = 0) -> str:
        """The scheduler's key for this job's gang (``pod:<uid>`` for a plain pod)."""
        return self.key if self.gang else "pod:" + self.uid(i)

    def spec(self) -> GangSpec | None:
        if not self.gang:
            return None
        return GangSpec(
            self.key,
            self.min_member,
            created=self.arrival,
            mode=self.mode,
            timeout_seconds=self.timeout,
        )

    def pods(self) -> list[Pod]:
        return [
            Pod(
                self.uid(i),
                self.namespace,
                f"{self.name}-{i}",
                dict(req),
                created=self.arrival,
                priority=self.priority,
                group=self.key if self.gang else "",
            )
            for i, req in enumerate(self.pod_requests)
        ]


def _freeze(r: ResourceList) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(r.items()))


@st.composite
def gang_jobs(draw: st.DrawFn, index: int, nonstrict: bool = True) -> JobDef:
    size = draw(st.integers(1, 6))
    min_member = draw(st.integers(1, size))
    if draw(st.booleans()):
        same = draw(requests())
        reqs = [same] * size
    else:
        reqs = [draw(requests()) for _ in range(size)]
    is_nonstrict = nonstrict and draw(st.integers(0, 4)) == 0
    return JobDef(
        key=f"team/g{index}",
        gang=True,
        min_member=min_member,
        mode=GangMode.NON_STRICT if is_nonstrict else GangMode.STRICT,
        priority=draw(st.integers(0, 3)),
        arrival=draw(st.integers(0, 1000)) / 10,
        duration=float(draw(st.integers(1, 300))),
        pod_requests=tuple(_freeze(r) for r in reqs),
        timeout=float(draw(st.sampled_from([5, 30, 120]))) if is_nonstrict else None,
    )


@st.composite
def plain_jobs(draw: st.DrawFn, index: int) -> JobDef:
    return JobDef(
        key=f"default/p{index}",
        gang=False,
        min_member=1,
        mode=GangMode.STRICT,
        priority=draw(st.integers(0, 3)),
        arrival=draw(st.integers(0, 1000)) / 10,
        duration=float(draw(st.integers(1, 300))),
        pod_requests=(_freeze(draw(requests())),),
    )


@st.composite
def workloads(
    draw: st.DrawFn, max_gangs: int = 8, max_plain: int = 4, nonstrict: bool = True
) -> list[JobDef]:
    n_gangs = draw(st.integers(1, max_gangs))
    n_plain = draw(st.integers(0, max_plain))
    jobs = [draw(gang_jobs(i, nonstrict)) for i in range(n_gangs)]
    jobs += [draw(plain_jobs(i)) for i in range(n_plain)]
    return jobs


def build_sim_jobs(jobs: Iterable[JobDef]) -> list[SimJob]:
    out = [SimJob(j.key, j.arrival, j.duration, j.pods(), j.spec()) for j in jobs]
    out.sort(key=lambda j: (j.arrival, j.key))
    return out


def backoff_for(config: CoreConfig, attempts: int) -> float:
    """The spec's backoff: initial, doubling per failed attempt, capped at the maximum."""
    initial, cap = config.backoff_initial_seconds, config.backoff_max_seconds
    return float(min(initial * 2.0 ** max(0, attempts - 1), cap))


# ---- event interleavings -----------------------------------------------------------------

Op = tuple[Any, ...]

_op = st.one_of(
    st.tuples(st.just("arrive"), st.integers(0, 63), st.integers(1, 6)),
    st.tuples(st.just("spec"), st.integers(0, 63)),
    st.tuples(st.just("step"), st.integers(1, 6)),
    st.tuples(st.just("confirm"), st.integers(0, 63), st.integers(1, 8)),
    st.tuples(st.just("bindfail"), st.integers(0, 63)),
    st.tuples(st.just("finish"), st.integers(0, 63)),
    st.tuples(st.just("advance"), st.sampled_from([0.1, 0.5, 1.0, 2.0, 5.0, 15.0, 61.0])),
    st.tuples(st.just("foreign"), st.integers(0, 7), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("cordon"), st.integers(0, 7)),
    st.tuples(st.just("delnode"), st.integers(0, 7)),
    # the process fails deciding a gang (it records the failure on its pods) and restarts
    st.tuples(st.just("crash"), st.integers(0, 63)),
    # the process restarts (SIGKILL, a lost lease): bindings not confirmed yet are lost
    st.tuples(
        st.just("restart"),
    ),
)

# how long a gang gangsched failed on is held back, in the interleavings (short enough for
# ``World.drain`` to see it end)
HOLD_SECONDS = 30.0


def ops(min_size: int = 15, max_size: int = 60) -> st.SearchStrategy[list[Op]]:
    return st.lists(_op, min_size=min_size, max_size=max_size)


def _fits(used: ResourceList, req: ResourceList, alloc: ResourceList) -> bool:
    return all(used.get(k, 0) + v <= alloc.get(k, 0) for k, v in req.items() if v)


def _nonzero(r: ResourceList) -> ResourceList:
    return {k: v for k, v in r.items() if v}


@dataclass
class World:
    """A hand-driven scheduler plus the test's own truth of the cluster."""

    nodes: list[Node]
    jobs: list[JobDef]
    config: CoreConfig = field(default_factory=CoreConfig)

    def __post_init__(self) -> None:
        self.clock = FakeClock(0.0)
        self.s = Scheduler(self.config, self.clock)
        self.node_by_name = {n.name: n for n in self.nodes}
        self.truth: dict[str, Pod] = {}  # every pod the cluster has, as the API would say
        self.sent: dict[str, int] = {j.key: 0 for j in self.jobs}  # pods submitted per job
        self.spec_sent: set[str] = set()
        self.outstanding: list[Binding] = []  # BindGang bindings not yet confirmed
        self.tainted: set[str] = set()  # gangs that had a binding fail
        self.decisions: list[Decision] = []
        self.deleted: set[str] = set()
        self.job_of: dict[str, JobDef] = {}
        self.earliest: dict[str, float] = {}  # gang -> earliest allowed retry
        self.failed_at_event: dict[str, int] = {}  # gang -> queue.cluster_events at failure
        self.attempts_seen: dict[str, int] = {}
        self.foreign = 0
        for j in self.jobs:
            for i in range(j.size):
                self.job_of[j.uid(i)] = j
        for n in self.nodes:
            self.s.node_upsert(n)
        self.check()

    # ---- events --------------------------------------------------------------------------
    def apply(self, op: Op) -> None:
        kind = op[0]
        if kind == "arrive":
            self.arrive(self.jobs[int(op[1]) % len(self.jobs)], int(op[2]))
        elif kind == "spec":
            self.send_spec(self.jobs[int(op[1]) % len(self.jobs)])
        elif kind == "step":
            for _ in range(int(op[1])):
                self.step()
        elif kind == "confirm":
            self.confirm(int(op[1]), int(op[2]))
        elif kind == "bindfail":
            self.bind_fail(int(op[1]))
        elif kind == "finish":
            self.finish(int(op[1]))
        elif kind == "advance":
            self.clock.advance(float(op[1]))
        elif kind == "foreign":
            self.add_foreign(int(op[1]), int(op[2]), bool(op[3]))
        elif kind == "cordon":
            self.toggle_cordon(int(op[1]))
        elif kind == "delnode":
            self.delete_node(int(op[1]))
        elif kind == "crash":
            self.crash(self.jobs[int(op[1]) % len(self.jobs)])
        elif kind == "restart":
            self.restart()
        else:  # pragma: no cover - the strategy draws only the kinds above
            raise AssertionError(kind)
        self.check()

    def arrive(self, job: JobDef, k: int) -> None:
        pods = job.pods()
        start = self.sent[job.key]
        for p in pods[start : start + k]:
            self.truth[p.uid] = p
            self.s.pod_upsert(p)
        self.sent[job.key] = min(job.size, start + k)

    def send_spec(self, job: JobDef) -> None:
        spec = job.spec()
        if spec is not None:
            self.spec_sent.add(job.key)
            self.s.gang_upsert(spec)

    def step(self) -> list[Decision] | None:
        before = dict(self.s.cache.assumed)
        now = self.clock.now()
        out = self.s.schedule_one()
        if out:
            self.decisions.extend(out)
            self._check_decisions(out, before)
            self._check_retries(out, now)
            for d in out:
                if isinstance(d, Preempt):
                    self._evict(d)
        self._record_attempts(now)
        self.check()
        return out

    def _evict(self, d: Preempt) -> None:
        """Carry out a preemption as the API would: the victims stop at once (the kubelet
        reports them Failed), so the nodes never hold more than they have. Checks that every
        victim is of lower priority than the preemptor and that a Strict victim gang goes
        whole."""
        victims = {v.pod.uid for v in d.victims}
        for v in d.victims:
            p = self.truth[v.pod.uid]
            assert p.priority < d.priority, f"{v.pod.uid} (priority {p.priority}) evicted"
            assert p.node_name and not p.terminal, f"{v.pod.uid} evicted while not running"
        for job in self.jobs:
            hit = [job.uid(i) for i in range(job.size) if job.uid(i) in victims]
            if hit and job.gang and job.mode is GangMode.STRICT:
                running = [
                    job.uid(i)
                    for i in range(job.size)
                    if (p := self.truth.get(job.uid(i))) is not None
                    and p.node_name
                    and not p.terminal
                ]
                assert set(running) <= victims, f"Strict gang {job.key} evicted in part"
        for uid in sorted(victims):
            p = replace(self.truth[uid], phase=PodPhase.FAILED)
            self.truth[uid] = p
            self.s.pod_upsert(p)

    def confirm(self, start: int, k: int) -> None:
        if not self.outstanding:
            return
        i = start % len(self.outstanding)
        chosen, self.outstanding = (
            self.outstanding[i : i + k],
            self.outstanding[:i] + self.outstanding[i + k :],
        )
        for b in chosen:
            if b.node in self.deleted:
                self.s.bind_failed(b.pod.uid, f"node {b.node} not found")
                self._record_attempts(self.clock.now())
                continue
            bound = replace(self.truth[b.pod.uid], node_name=b.node, phase=PodPhase.RUNNING)
            self.truth[b.pod.uid] = bound
            self.s.pod_upsert(bound)

    def bind_fail(self, index: int) -> None:
        if not self.outstanding:
            return
        b = self.outstanding.pop(index % len(self.outstanding))
        job = self.job_of[b.pod.uid]
        self.tainted.add(job.key)
        self.s.bind_failed(b.pod.uid, "simulated API conflict")
        self._record_attempts(self.clock.now())

    def finish(self, index: int) -> None:
        running = sorted(
            u for u, p in self.truth.items() if p.node_name and p.phase is PodPhase.RUNNING
        )
        if not running:
            return
        uid = running[index % len(running)]
        done = replace(self.truth[uid], phase=PodPhase.SUCCEEDED)
        self.truth[uid] = done
        self.s.pod_upsert(done)

    def add_foreign(self, node_index: int, gpus: int, bound: bool) -> None:
        node = self.nodes[node_index % len(self.nodes)]
        if node.name in self.deleted:
            return
        req: ResourceList = {CPU: 500, MEMORY: GI, PODS: 1}
        if gpus:
            req[GPU] = gpus
        self.foreign += 1
        pod = Pod(f"foreign.{self.foreign}", "other", f"f{self.foreign}", req, created=0.0)
        pod.scheduler_name = FOREIGN
        if bound:
            # Another scheduler places pods only where they fit (by the test's own count).
            if not _fits(self.used()[node.name], req, node.allocatable):
                return
            pod.node_name = node.name
            pod.phase = PodPhase.RUNNING
        self.truth[pod.uid] = pod
        self.s.pod_upsert(pod)

    def toggle_cordon(self, node_index: int) -> None:
        node = self.nodes[node_index % len(self.nodes)]
        if node.name in self.deleted:
            return
        current = self.node_by_name[node.name]
        flipped = replace(current, unschedulable=not current.unschedulable)
        self.node_by_name[node.name] = flipped
        self.s.node_upsert(flipped)

    def crash(self, job: JobDef) -> None:
        """Deciding ``job``'s gang failed inside gangsched: the process records the failure on
        the gang's unbound pods (as its status write does, only on pods still unbound) and
        restarts."""
        held = self.s.hold_back(job.gang_key(), HOLD_SECONDS, "RuntimeError: boom")
        if held is not None:
            record, told = held
            assert record.until == self.clock.now() + min(
                HOLD_SECONDS * 2 ** (record.count - 1), 86400
            )
            for ref in told.pods:
                p = self.truth[ref.uid]
                assert not p.node_name and p.scheduler_name == SCHEDULER, ref
                self.truth[ref.uid] = replace(p, scheduler_error=record)
        self.restart()

    def restart(self) -> None:
        """A new process on the cluster as the API holds it: every node, spec and pod in the
        truth. Bindings sent but not confirmed are lost (a gang some of whose bindings had
        landed may now hold fewer than its minimum until it is completed)."""
        for b in self.outstanding:
            self.tainted.add(self.job_of[b.pod.uid].key)
        self.outstanding = []
        self.s = Scheduler(self.config, self.clock)
        for n in self.nodes:
            if n.name not in self.deleted:
                self.s.node_upsert(self.node_by_name[n.name])
        for job in self.jobs:
            spec = job.spec()
            if job.key in self.spec_sent and spec is not None:
                self.s.gang_upsert(spec)
        for p in self.truth.values():
            self.s.pod_upsert(p)
        self.earliest, self.failed_at_event, self.attempts_seen = {}, {}, {}

    def delete_node(self, node_index: int) -> None:
        """A node goes away for good. Gangs with pods bound or reserved there lose them (the
        kubelet's pods are gone with it), so the quorum check no longer applies to them."""
        name = self.nodes[node_index % len(self.nodes)].name
        if name in self.deleted or len(self.deleted) + 1 >= len(self.nodes):
            return
        for uid, p in self.truth.items():
            on_it = p.node_name == name or self.s.cache.assumed.get(uid) == name
            if on_it and uid in self.job_of:
                self.tainted.add(self.job_of[uid].key)
        for b in self.outstanding:
            if b.node == name:
                self.tainted.add(self.job_of[b.pod.uid].key)
        self.deleted.add(name)
        out = self.s.node_delete(name)
        self.decisions.extend(out)
        self._record_attempts(self.clock.now())

    def drain(self) -> None:
        """Every pod and spec arrives, every binding is confirmed, time moves on until the
        scheduler has retried everything it could (past every flush, backoff and deadline)."""
        cfg = self.config
        timeouts = [j.timeout or cfg.default_schedule_timeout_seconds for j in self.jobs]
        if cfg.schedule_timeout_override_seconds is not None:
            timeouts = [cfg.schedule_timeout_override_seconds]
        horizon = (
            2 * (cfg.unschedulable_flush_seconds + cfg.backoff_max_seconds) + max(timeouts) + 1
        )
        for j in self.jobs:
            self.send_spec(j)
            self.arrive(j, j.size)
        self.check()
        end = self.clock.now() + horizon
        last: tuple[object, ...] = ()
        budget = 5_000  # cycles; far more than any drawn workload needs without a hot loop
        for _ in range(1_000):
            while self.step() is not None:
                budget -= 1
                assert budget > 0, f"the scheduler never goes idle at t={self.clock.now()}"
            self.confirm(0, len(self.outstanding))
            self.check()
            if self.s.queue.counts()["active"]:
                continue
            t = self.s.next_wakeup()
            if t is None or t > end:
                break
            now = self.clock.now()
            mark = (self.s.cycles, len(self.decisions), tuple(self.s.queue.counts().values()))
            if t <= now:
                # Woken for nothing: next_wakeup() promised work at t, but none was due.
                assert mark != last, (
                    f"stalled: next_wakeup() is {t!r} yet nothing is due at t={now!r}; "
                    "an adapter sleeping until next_wakeup() would spin here"
                )
            last = mark
            self.clock.set(max(t, now))
        else:
            raise AssertionError(f"drain did not settle by t={self.clock.now()}")

    # ---- the test's own accounting ----------------------------------------------------------
    def used(self) -> dict[str, ResourceList]:
        """Per node: requests of pods bound there and not terminal (by the truth), plus pods
        the scheduler has reserved there and the API has not bound yet."""
        used: dict[str, ResourceList] = {n.name: {} for n in self.nodes}
        for p in self.truth.values():
            if p.node_name and not p.terminal:
                add_into(used[p.node_name], p.requests)
        for uid, node in self.s.cache.assumed.items():
            p = self.truth[uid]
            assert not p.node_name, f"{uid} is bound to {p.node_name} yet still assumed"
            add_into(used[node], p.requests)
        return used

    def held(self, job: JobDef) -> int:
        n = 0
        for i in range(job.size):
            uid = job.uid(i)
            p = self.truth.get(uid)
            if p is None:
                continue
            if (p.node_name and p.phase is not PodPhase.FAILED) or uid in self.s.cache.assumed:
                n += 1
        return n

    def holding(self, job: JobDef) -> bool:
        """Some member runs (bound, not finished) or is reserved."""
        for i in range(job.size):
            uid = job.uid(i)
            p = self.truth.get(uid)
            if p is not None and ((p.node_name and not p.terminal) or uid in self.s.cache.assumed):
                return True
        return False

    # ---- invariants --------------------------------------------------------------------
    def check(self) -> None:
        used = self.used()
        for name, u in used.items():
            if name in self.deleted:
                # Only bindings already sent may still point at a deleted node (their outcome
                # decides); nothing waiting at Permit may.
                sent_uids = {b.pod.uid for b in self.outstanding}
                stale = [
                    u for u, n in self.s.cache.assumed.items() if n == name and u not in sent_uids
                ]
                assert not stale, f"reservation at Permit on deleted node {name}: {stale}"
                continue
            alloc = self.node_by_name[name].allocatable
            over = {k: (v, alloc.get(k, 0)) for k, v in u.items() if v > alloc.get(k, 0)}
            assert not over, f"node {name} over-committed at t={self.clock.now()}: {over}"
            info = self.s.cache.nodes.get(name)
            counted = _nonzero(info.requested) if info is not None else {}
            assert counted == _nonzero(u), f"cache count for {name}: {counted} != {u}"
        # Every reservation is accounted for: either a binding sent and not yet confirmed,
        # or a gang waiting at Permit.
        sent = {b.pod.uid: b.node for b in self.outstanding}
        for uid, node in self.s.cache.assumed.items():
            job = self.job_of[uid]
            wg = self.s.permit.get(job.gang_key())
            at_permit = wg.reserved.get(uid) if wg is not None else None
            assert node in (sent.get(uid), at_permit), (
                f"leaked reservation {uid} on {node} (gang {job.key})"
            )
        for job in self.jobs:
            if not job.gang or job.mode is not GangMode.STRICT or job.key in self.tainted:
                continue
            # A gang holds nothing once no member runs or is reserved (members that succeeded
            # hold no capacity): then it may have any number of finished members.
            held = self.held(job) if self.holding(job) else 0
            assert held == 0 or held >= job.min_member, (
                f"Strict gang {job.key} holds {held} of minMember {job.min_member} "
                f"at t={self.clock.now()}"
            )
        for p in self.truth.values():
            if p.scheduler_name == FOREIGN and not p.node_name:
                assert p.uid not in self.s.cache.assumed

    def _check_decisions(self, out: Sequence[Decision], assumed_before: dict[str, str]) -> None:
        pending_sent = {b.pod.uid for b in self.outstanding}
        for d in out:
            if not isinstance(d, BindGang):
                continue
            for b in d.bindings:
                uid = b.pod.uid
                p = self.truth[uid]
                assert p.scheduler_name == SCHEDULER, f"bound a foreign pod {uid}"
                assert not p.node_name and p.phase is PodPhase.PENDING, f"{uid} bound twice"
                assert uid not in pending_sent, f"{uid} in two BindGangs"
                assert self.s.cache.assumed.get(uid) == b.node, f"{uid} bound unreserved"
                pending_sent.add(uid)
                self.outstanding.append(b)
            job = self.job_of[d.bindings[0].pod.uid] if d.bindings else None
            if job is not None:
                # a gang gangsched failed on is not bound before its hold ends
                now = self.clock.now()
                for i in range(job.size):
                    p = self.truth.get(job.uid(i))
                    if p is not None and p.phase is PodPhase.PENDING and p.scheduler_error:
                        assert p.scheduler_error.until <= now, (
                            f"{job.key} bound at t={now}, held until {p.scheduler_error.until}"
                        )
            if job is not None and job.gang and job.key not in self.tainted:
                # One BindGang carries the gang to quorum (Strict or NonStrict).
                assert self.held(job) >= job.min_member or self.s.gangs[job.key].satisfied_once
        # New reservations are only made on schedulable nodes.
        for uid, node in self.s.cache.assumed.items():
            if uid not in assumed_before:
                assert not self.node_by_name[node].unschedulable, f"{uid} placed on cordoned {node}"
                assert node not in self.deleted, f"{uid} placed on deleted node {node}"

    def _check_retries(self, out: Sequence[Decision], now: float) -> None:
        """No hot loop: a gang that failed is not attempted again before its backoff ends,
        unless capacity was freed since (a cluster event: a gang that outranks the active
        head may then jump its backoff, at most once per such event)."""
        attempted = {
            d.gang for d in out if isinstance(d, BindGang | GangWaiting | GangUnschedulable)
        }
        events = self.s.queue.cluster_events
        for g in attempted:
            earliest = self.earliest.get(g)
            early_ok = self.failed_at_event.get(g, events) < events
            assert earliest is None or now >= earliest - 1e-9 or early_ok, (
                f"gang {g} retried at t={now}, before its backoff ended at {earliest}"
                " and with no capacity freed since it failed"
            )

    def _record_attempts(self, now: float) -> None:
        for g, gang in self.s.gangs.items():
            seen = self.attempts_seen.get(g, 0)
            if gang.attempts > seen:
                self.earliest[g] = now + backoff_for(self.config, gang.attempts)
                self.failed_at_event[g] = self.s.queue.cluster_events
            elif gang.attempts == 0:
                self.earliest.pop(g, None)
                self.failed_at_event.pop(g, None)
            self.attempts_seen[g] = gang.attempts

    # ---- the end -----------------------------------------------------------------------
    def check_no_lost_pod(self) -> None:
        for uid, job in self.job_of.items():
            p = self.truth.get(uid)
            assert p is not None, f"{uid} never submitted (drain failed)"
            if p.node_name:
                continue
            key = job.gang_key(int(uid.rsplit(".", 1)[1]))
            gang = self.s.gangs.get(key)
            assert gang is not None, f"pending pod {uid}: gang {key} forgotten"
            assert uid in gang.members, f"pending pod {uid} dropped from gang {key}"
            assert uid in self.s.cache.pods, f"pending pod {uid} dropped from the cache"
            assert gang.reason, f"pending pod {uid}: gang {key} has no reason"
            assert key in self.s.queue or key in self.s.permit, (
                f"pending pod {uid}: gang {key} neither queued nor waiting at Permit"
            )


def run_world(
    nodes: list[Node], jobs: list[JobDef], script: Iterable[Op], config: CoreConfig | None = None
) -> World:
    w = World(nodes, jobs, config or CoreConfig())
    for op in script:
        w.apply(op)
    w.drain()
    w.check_no_lost_pod()
    return w


# ---- the simulator, instrumented ----------------------------------------------------------


def instrumented_simulation(
    nodes: list[Node], jobs: list[JobDef], config: CoreConfig | None = None
) -> tuple[Simulation, list[tuple[float, Decision]]]:
    """A Simulation whose scheduler checks the invariants, against the simulator's own record
    of applied bindings plus the reservations in the cache, after every gang cycle."""
    cfg = config or CoreConfig()
    sim = Simulation(
        [replace(n, allocatable=dict(n.allocatable)) for n in nodes], build_sim_jobs(jobs), cfg
    )
    log: list[tuple[float, Decision]] = []
    original = sim.scheduler.schedule_one
    strict = [j for j in sim.jobs if j.spec is not None and j.spec.mode is GangMode.STRICT]

    calls_at: list[float] = [-1.0, 0.0]  # (time, calls at that time)

    def schedule_one() -> list[Decision] | None:
        out = original()
        now = sim.clock.now()
        if now == calls_at[0]:
            calls_at[1] += 1
            assert calls_at[1] < 500, (
                f"the simulation spins at t={now!r}: next_wakeup() is "
                f"{sim.scheduler.next_wakeup()!r} but nothing is due"
            )
        else:
            calls_at[:] = [now, 1]
        for d in out or ():
            log.append((now, d))
        cache = sim.scheduler.cache
        # Bound pods never exceed a node. With reservations, neither does what is reserved,
        # once the victims a preemption waits for are counted as gone: their capacity is
        # what is held for the preemptor.
        used: dict[str, ResourceList] = {n: {} for n in sim.nodes}
        bound: dict[str, ResourceList] = {n: {} for n in sim.nodes}
        awaited = sim.scheduler.awaited_by
        for p in sim.pods.values():
            if p.node_name and not p.terminal:
                add_into(bound[p.node_name], p.requests)
                if p.uid not in awaited:
                    add_into(used[p.node_name], p.requests)
        for uid, node in cache.assumed.items():
            p = sim.pods[uid]
            assert not p.node_name, f"{uid} bound in the simulator yet still assumed"
            add_into(used[node], p.requests)
        for what, counted in (("bound", bound), ("bound or reserved", used)):
            for name, u in counted.items():
                alloc = sim.nodes[name].allocatable
                for k, v in u.items():
                    assert v <= alloc.get(k, 0), (
                        f"{name} over-committed ({what}) in {k} at t={now}: {v} > {alloc}; "
                        f"awaited victims {sorted(awaited)}, assumed {sorted(cache.assumed)}"
                    )
        for name in sim.nodes:
            # the cache counts the awaited victims and the held placements alike
            total = dict(used[name])
            for p in sim.pods.values():
                if p.node_name == name and not p.terminal and p.uid in awaited:
                    add_into(total, p.requests)
            info = cache.nodes[name]
            assert _nonzero(info.requested) == _nonzero(total)
            # what NodeResourcesFit reads: allocatable minus requested, kept as both change
            alloc = info.node.allocatable if info.node is not None else {}
            expect = {
                k: alloc.get(k, 0) - info.requested.get(k, 0) for k in {*alloc, *info.requested}
            }
            assert _nonzero(info.left) == _nonzero(expect), (name, info.left, expect)
        for job in strict:
            held = sum(
                1
                for p in job.pods
                if (sim.pods[p.uid].node_name and sim.pods[p.uid].phase is not PodPhase.FAILED)
                or p.uid in cache.assumed
            )
            assert held == 0 or held >= job.min_member, (
                f"Strict gang {job.key} holds {held} of {job.min_member} at t={now}"
            )
        return out

    sim.scheduler.schedule_one = schedule_one  # type: ignore[method-assign]
    return sim, log


# ---- a seeded workload, for replay in other processes ------------------------------------------


def seeded_case(seed: int) -> tuple[list[Node], list[JobDef]]:
    """A cluster and workload from ``random.Random(seed)``: the same seed, the same case."""
    import random

    rng = random.Random(seed)
    nodes = []
    for i in range(rng.randint(2, 6)):
        alloc: ResourceList = {CPU: 1000 * rng.randint(8, 64), MEMORY: GI * rng.randint(16, 256)}
        alloc[PODS] = 110
        gpus = rng.choice([0, 2, 4, 8])
        if gpus:
            alloc[GPU] = gpus
        nodes.append(Node(f"n{i}", alloc))
    jobs: list[JobDef] = []
    for i in range(rng.randint(4, 12)):
        size = rng.randint(1, 6)
        mode = GangMode.NON_STRICT if rng.random() < 0.2 else GangMode.STRICT
        reqs = [
            _freeze(
                {CPU: rng.choice([500, 1000, 4000]), MEMORY: GI, PODS: 1, GPU: rng.randint(0, 2)}
            )
            for _ in range(size)
        ]
        jobs.append(
            JobDef(
                f"team/g{i}",
                True,
                rng.randint(1, size),
                mode,
                rng.randint(0, 3),
                rng.randint(0, 600) / 10,
                float(rng.randint(5, 200)),
                tuple(tuple((k, v) for k, v in r if v) for r in reqs),
                timeout=30.0 if mode is GangMode.NON_STRICT else None,
            )
        )
    for i in range(rng.randint(0, 4)):
        req = {CPU: rng.choice([500, 2000]), MEMORY: GI, PODS: 1}
        jobs.append(
            JobDef(
                f"default/p{i}",
                False,
                1,
                GangMode.STRICT,
                rng.randint(0, 3),
                rng.randint(0, 600) / 10,
                float(rng.randint(5, 200)),
                (_freeze(req),),
            )
        )
    return nodes, jobs


def decision_digest(seed: int) -> str:
    """A digest of every decision (with its simulated time) of the seeded case."""
    import hashlib

    nodes, jobs = seeded_case(seed)
    sim, log = instrumented_simulation(nodes, jobs)
    sim.run()
    return hashlib.sha256(repr(log).encode()).hexdigest()
