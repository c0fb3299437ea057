"""When a waiting gang will start: the scheduler's own core, run ahead on a twin of its state.

The twin is a fresh :class:`Scheduler` with the same configuration, given everything the live
one holds (nodes, namespaces, disruption budgets, storage and device objects, PodGroups, pods,
when each gang's first attempt was), and the live scheduler's own state: each waiting gang's
backoff (when it is next tried, how many times it failed, when it last failed: its place in the
queue), the reservation, and what the scorers learned from the pods they saw. It runs on a
clock of its own that starts at the live clock's now. Time then runs forward through what is
*declared*: a running pod ends when its gang's PodGroup says the run ends
(``expectedRuntimeSeconds``, counted from the pod's binding), or at the latest when its own
``spec.activeDeadlineSeconds`` runs out (the kubelet stops it then: an upper bound). At each
end the twin schedules as the scheduler does (queue order and the gangs ahead, priorities,
reservations and backfill, preemption, topology), retrying each gang when its backoff ends as
the scheduler does (a retry that cannot succeed, when no waiting gang could fit in what is
free, is counted as failed without being made), and a gang's forecast start is when the twin
binds it. When nothing else happens, that is what the scheduler does
(tests/property/test_forecast.py). Nothing else happens in the twin: no gang arrives (what will
arrive is unknown), no pod ends without a declaration, none fails.

A gang the twin does not bind on declared ends alone gets no time: the answer is *unknown*,
and what it waits for is named. The twin then lets every running pod without a declared end
(or past it) end too, and the gang's blockers are those of them on the nodes it then takes.
Never a guess: an unknown blocker makes the start unknown.

The forecast costs a twin built from every pod (about what the scheduler's own first list
costs it) and placement attempts for the waiting gangs as declared ends free capacity: the
ends are taken in batches (those within 1% further ahead together), and the twin schedules
only when what they freed, summed over the nodes, could hold some waiting gang's whole ask.
The adapter asks for it when the inputs changed, no more often than its settings allow, and
runs it in slices (:class:`Forecast`) within a budget of work.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision, Evict, Preempt
from gangsched.core.gang import PLAIN_PREFIX
from gangsched.core.leaderfirst import STAND_IN
from gangsched.core.model import DisruptionBudget, GangSpec, Node, Pod, PodPhase
from gangsched.core.preemption import gang_priority
from gangsched.core.queue import Retry, Wake
from gangsched.core.reservation import Reservation
from gangsched.core.resourceclaims import Claim as ResourceClaim
from gangsched.core.resourceclaims import CounterTotal, Device, DeviceClass
from gangsched.core.resources import ResourceList, add_into
from gangsched.core.scheduler import Scheduler
from gangsched.core.volumes import Claim as VolumeClaim
from gangsched.core.volumes import CSINode, PersistentVolume, StorageClass

__all__ = ["Estimate", "Forecast", "forecast", "span"]

# how far ahead the twin runs at most (a declared end further away is past any use)
HORIZON_SECONDS = 30 * 24 * 3600.0
# how many times the twin schedules at most (at declared ends, and at its own wake-ups)
MAX_STEPS = 5_000
# declared ends this much later, relative to how far ahead they are, are taken together (no
# floor: two ends a second apart, soon, may go to two different gangs)
BATCH = 0.01
# how often the steps of a round yield (an adapter gives its event loop a turn between them):
# every so many nodes or pods given to the twin, and every so many gang cycles of the twin
BUILD_CHUNK = 250
SETTLE_YIELD = 8


@dataclass(frozen=True, slots=True)
class Estimate:
    """A waiting gang's expected start: ``at`` (the clock's seconds) or None (unknown), why
    (``basis``: what it starts after, or what it waits for that declared no end), and the
    gangs or pods it waits for (``blockers``: keys, ``namespace/name``)."""

    at: float | None
    basis: str
    blockers: tuple[str, ...] = ()

    @property
    def known(self) -> bool:
        return self.at is not None


def span(seconds: float) -> str:
    """A duration as ``2h5m``, ``5m30s`` or ``40s``."""
    s = max(0, round(seconds))
    d, rest = divmod(s, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    if d:
        return f"{d}d{h}h"
    if h:
        return f"{h}h{m}m"
    if m:
        return f"{m}m{sec}s" if sec else f"{m}m"
    return f"{sec}s"


@dataclass(frozen=True, slots=True)
class _End:
    """A running pod's declared end: when, and what says so."""

    at: float
    why: str


@dataclass(slots=True)
class _Snapshot:
    """What the live core holds, taken at once (references; the objects are not changed):
    the twin is built from it later, in slices, while the live core goes on."""

    now: float
    config: CoreConfig
    nodes: list[Node]
    namespaces: list[tuple[str, Mapping[str, str]]]
    budgets: list[DisruptionBudget]
    storage: tuple[list[StorageClass], list[CSINode], list[PersistentVolume], list[VolumeClaim]]
    slices: list[tuple[str, tuple[Device, ...], tuple[CounterTotal, ...]]]
    device_classes: list[DeviceClass]
    refused_classes: list[tuple[str, str]]
    resource_claims: list[ResourceClaim]
    refused_claims: list[tuple[str, str]]
    specs: list[GangSpec]
    pods: list[Pod]
    starts: list[tuple[str, float]]  # gang key -> its first attempt
    seen_bound: dict[str, float]  # pod uid -> when the live scheduler saw it bound
    # gang key -> (failed attempts, the last failure, where it waits for its retry) of the
    # gangs that failed on the cluster
    retries: dict[str, tuple[int, float | None, Retry]]
    tried: dict[str, float]  # gang key -> when it was last placed (Gang.tried_at)
    reservation: Reservation | None  # the live one (a copy)
    learned: list[object | None]  # what the live scorers learned (NodeFinder.learned)

    @classmethod
    def of(cls, live: Scheduler) -> _Snapshot:
        cache, volumes, devices = live.cache, live.cache.volumes, live.cache.resource_claims
        return cls(
            now=live.clock.now(),
            config=live.config,
            nodes=[i.node for i in cache.nodes.values() if i.node is not None],
            namespaces=list(cache.namespaces.items()),
            budgets=list(live.budgets.values()),
            storage=(
                list(volumes.classes.values()),
                list(volumes.csi_nodes.values()),
                list(volumes.volumes.values()),
                list(volumes.claims.values()),
            ),
            slices=devices.slices(),
            device_classes=list(devices.classes.values()),
            refused_classes=list(devices.refused_classes.items()),
            resource_claims=list(devices.claims.values()),
            refused_claims=list(devices.refused_claims.items()),
            specs=list(live.specs.values()),
            # stand-ins hold room in this process only (core/leaderfirst.py): left out
            pods=[p for p in cache.pods.values() if not p.uid.startswith(STAND_IN)],
            starts=[(k, g.schedule_start) for k, g in live.gangs.items() if g.schedule_start],
            seen_bound=dict(live.started),
            learned=live.finder.learned(),
            reservation=(
                replace(held, need={n: dict(v) for n, v in held.need.items()})
                if (held := live.reserve.current) is not None
                else None
            ),
            retries={
                k: (g.attempts, g.last_failure, retry)
                for k, g in live.gangs.items()
                if (retry := live.queue.retry(k)) is not None
            },
            tried={k: g.tried_at for k, g in live.gangs.items() if g.tried_at is not None},
        )


class _Twin:
    """The twin and its clock, and what it has seen happen."""

    def __init__(self, snap: _Snapshot, core: Scheduler | None = None) -> None:
        self.now = snap.now
        if core is not None:
            # a core its caller is done with, run ahead as it is (Forecast's ``adopt``, which
            # checked that it runs on a FakeClock)
            assert isinstance(core.clock, FakeClock)
            self.clock, self.core = core.clock, core
        else:
            self.clock = FakeClock(self.now)
            self.core = Scheduler(snap.config, self.clock)
        self.batch = BATCH
        # whether a run ahead stopped at its most steps, not for want of anything to do
        self.out_of_steps = False
        # (gang, cache generation) of the reservation as the twin's last attempt left it
        self._reserved: tuple[str, int] | None = None
        self._snap = snap
        self._seq = 0
        self.ends: list[tuple[float, int, str]] = []  # (when, order, pod uid)
        self.declared: dict[str, _End] = {}  # pod uid -> its declared end
        self.started: dict[str, float] = {}  # gang key -> when the twin bound it
        self.nodes_of: dict[str, set[str]] = {}  # gang key -> the nodes it was bound on
        # node -> (when, unit, why) of the declared ends seen there, in time order
        self.freed: dict[str, list[tuple[float, str, str]]] = {}
        # gang key -> what its waiting members ask for in all (made at the first could_fit)
        self._asks: dict[str, tuple[ResourceList, int]] | None = None

    def build(self, chunk: int = BUILD_CHUNK) -> Iterator[None]:
        """Give the twin everything in the snapshot; yields every ``chunk`` pods."""
        twin, snap = self.core, self._snap
        for i, node in enumerate(snap.nodes, 1):
            twin.node_upsert(node)
            if i % chunk == 0:
                yield
        for name, labels in snap.namespaces:
            twin.namespace_upsert(name, labels)
        for budget in snap.budgets:
            twin.budget_upsert(budget)
        classes, csi_nodes, volumes, claims = snap.storage
        for sc in classes:
            twin.storage_class_upsert(sc)
        for csi in csi_nodes:
            twin.csinode_upsert(csi)
        for pv in volumes:
            twin.volume_upsert(pv)
        for claim in claims:
            twin.claim_upsert(claim)
        for key, slice_devices, counters in snap.slices:
            twin.resource_slice_upsert(key, slice_devices, counters)
        for dc in snap.device_classes:
            twin.device_class_upsert(dc)
        for name, why in snap.refused_classes:
            twin.device_class_refused(name, why)
        for rc in snap.resource_claims:
            twin.resource_claim_upsert(rc)
        for key, why in snap.refused_claims:
            twin.resource_claim_refused(key, why)
        for spec in snap.specs:
            twin.gang_upsert(spec)
        yield
        for i, pod in enumerate(snap.pods, 1):
            twin.pod_upsert(pod.copy())  # the live core's object stays its own
            if i % chunk == 0:
                yield
        for key, start in snap.starts:
            if key in twin.gangs:
                twin.restore_schedule_start(key, start)
        # when the running pods started, as the live core saw them start (not the twin's now)
        for uid, at in snap.seen_bound.items():
            if uid in twin.started:
                twin.started[uid] = at
        # the scorers score as the live ones do (what they learned from the pods they saw)
        twin.finder.learn(snap.learned)
        # the live reservation holds its nodes in the twin from the start (its gang would
        # otherwise make it again only at its next attempt, after others took the room)
        if snap.reservation is not None and snap.reservation.gang in twin.gangs:
            twin.reserve.current = snap.reservation
        # the gangs backing off do so in the twin too, as long: the capacity a declared end
        # frees goes to the gang the live scheduler would try first
        for key, (attempts, last_failure, retry) in snap.retries.items():
            gang = twin.gangs.get(key)
            if gang is not None and twin.queue.state_of(key) == "active":
                gang.attempts, gang.last_failure = attempts, last_failure
                twin.queue.restore_retry(key, twin.book.sort_key(gang), retry)
        # what the live gangs were last tried against is the twin's cluster as built: only
        # what the twin frees from here on could help them (Scheduler.freed_could_help)
        for gang in twin.gangs.values():
            gang.freed_seen = twin.cache.freed_seq
            gang.tried_at = snap.tried.get(gang.key)

    # ---- what is declared ---------------------------------------------------------------
    def declared_end(self, pod: Pod, bound: float) -> _End | None:
        """When the pod, bound at ``bound``, ends at the latest by what is declared."""
        best: _End | None = None
        spec = self.core.specs.get(pod.group) if pod.group else None
        runtime = spec.expected_runtime_seconds if spec is not None else None
        if runtime is not None:
            best = _End(bound + runtime, f"declared run time {span(runtime)}")
        deadline = pod.active_deadline_seconds
        if deadline is not None and (best is None or bound + deadline < best.at):
            best = _End(bound + deadline, f"activeDeadlineSeconds {span(deadline)}")
        stop = pod.job_deadline
        if stop is not None and (best is None or stop < best.at):
            best = _End(stop, "its Job's activeDeadlineSeconds")
        return best

    def expect(self, pod: Pod, bound: float) -> None:
        end = self.declared_end(pod, bound)
        if end is None or end.at < self.now:
            return  # nothing declared, or a declared end already past: not known
        self.declared[pod.uid] = end
        self._seq += 1
        heapq.heappush(self.ends, (max(end.at, self.now), self._seq, pod.uid))

    def expect_running(self) -> None:
        for pod in list(self.core.cache.pods.values()):
            if _holds(pod):
                started = self._snap.seen_bound.get(pod.uid) or pod.bound_at or pod.created
                self.expect(pod, started)

    # ---- running ahead ----------------------------------------------------------------------
    def apply(self, decisions: Iterable[Decision]) -> bool:
        """Carry the twin's decisions out at once, as a perfect adapter would; whether a pod
        was evicted (the victims are gone at once)."""
        now = self.clock.now()
        evicted = False
        for d in decisions:
            if isinstance(d, BindGang):
                for b in d.bindings:
                    pod = self.core.pod(b.pod.uid)
                    if pod is None or pod.node_name:
                        continue
                    shared = pod.gpu is not None and pod.gpu.shared
                    bound = replace(
                        pod,
                        node_name=b.node,
                        phase=PodPhase.RUNNING,
                        bound_at=now,
                        gpu_devices=b.devices if shared else pod.gpu_devices,
                    )
                    self.core.pod_upsert(bound)
                    self.expect(bound, now)
                    self.nodes_of.setdefault(d.gang, set()).add(b.node)
                self.started.setdefault(d.gang, now)
            elif isinstance(d, (Preempt, Evict)):
                for v in d.victims:
                    if self.core.pod(v.pod.uid) is not None:
                        self.core.pod_delete(v.pod.uid)
                        evicted = True
        return evicted

    def settle(self) -> None:
        for _ in self.settle_steps():
            pass

    def settle_steps(self, every: int = SETTLE_YIELD) -> Iterator[None]:
        """Run the twin until it has nothing left to decide now, yielding every ``every`` gang
        cycles; the decisions are carried out at the end of each run, and it runs again at
        once after an eviction (the adapter runs the core when the victims' deletion comes
        in)."""
        core = self.core
        n = 0
        while True:
            out: list[Decision] = []
            while (step := core.schedule_one()) is not None:
                out.extend(step)
                n += 1
                if n % every == 0:
                    yield
            if not self.apply(out):
                return

    def fail_ahead(self, key: str, before: float) -> None:
        """The gang has just failed (now), and nothing can fit until ``before``: make every
        retry it would make until then fail at once, in the arithmetic of the queue (parked
        until a flush, or backing off until its retry time when that is later), instead of
        one wake-up at a time. Only while no reservation can be due to it (its attempt would
        make one)."""
        core = self.core
        gang = core.gangs.get(key)
        retry = core.queue.retry(key)
        if gang is None or retry is None or retry.parked_since is None:
            return
        after = core.config.reservation_after_seconds
        if after is not None and gang.schedule_start is not None:
            if core.reservations.turn_come(gang):
                return
            due_at = gang.schedule_start + after
            if self.clock.now() < due_at:
                # its turn may come once it has waited long enough, not before (after that,
                # only a gang that comes before it could take the reservation: not its turn)
                before = min(before, due_at)
        flush = core.queue.flush_after
        t, until, moved = retry.parked_since, retry.until, False
        while (nxt := max(t + flush, until)) < before:
            t, moved = nxt, True
            gang.attempts += 1
            until = t + core.book.backoff(gang)
        if moved:
            gang.last_failure = t
            core.queue.restore_retry(key, core.book.sort_key(gang), Retry(until, t, t, False))

    def fail_retries(self, before: float) -> None:
        """Nothing waiting could fit until ``before``: every gang whose backoff ends until
        then fails its retry, as in the live scheduler, and backs off longer (without the
        attempt: it could not succeed). So the twin's gangs are in backoff when the live ones
        would be, and the capacity the next end frees goes to the gang the live scheduler
        tries first."""
        queue = self.core.queue
        while (t := queue.next_wakeup()) is not None and t < before:
            self.clock.set(max(t, self.clock.now()))
            if not self.fail_due(before):
                return  # (no backoff configured: nothing to follow)

    def fail_due(self, before: float | None = None) -> bool:
        """Nothing waiting could fit: the gangs due to be tried now fail, as their attempt
        would, without it (their backoff grows). A gang whose attempt would make or remake
        the reservation is tried (that is its attempt's effect). False when the backoff is
        none."""
        core, queue = self.core, self.core.queue
        queue.flush()
        tried: list[str] = []
        while (key := queue.pop()) is not None:
            gang = core.gangs.get(key)
            if gang is None or not core.book.may_complete(gang):
                tried.append(key)  # waits for its members: its attempt says so
                continue
            if (
                self._reserved != (key, core.cache.generation)
                and core.reservations.turn_come(gang)
                and (h := core.holdings(key)) is not None
                and core.reservations.due(gang, h)
            ):
                tried.append(key)  # its attempt makes or remakes the reservation: tried
                continue
            # (the gang holding the reservation, with nothing changed since its attempt made
            # it, would make the same again)
            core.book.fail(gang, gang.reason, gang.message, Wake.CLUSTER)
            if core.book.backoff(gang) <= 0:
                return False
            if before is not None:
                self.fail_ahead(key, before)
        for key in tried:
            gang = core.gangs.get(key)
            if gang is not None:
                queue.activate(key, core.book.sort_key(gang))
        if tried:
            self.settle()
            r = core.reserve.current
            self._reserved = (r.gang, core.cache.generation) if r is not None else None
        return True

    def free_total(self) -> ResourceList:
        """What the nodes have free, summed over them (what the waiting gangs may use)."""
        free: ResourceList = {}
        for info in self.core.cache.nodes.values():
            node = info.node
            if node is None:
                continue
            for res, amount in node.allocatable.items():
                left = amount - info.requested.get(res, 0)
                if left > 0:
                    free[res] = free.get(res, 0) + left
        return free

    def could_fit(self, free: ResourceList) -> bool:
        """Whether some waiting gang asks, in all, for no more of any resource than ``free``,
        or could preempt (preemption on, and pods of lower priority running): otherwise no
        gang can start, wherever the capacity is, and the twin need not try."""
        core = self.core
        if self._asks is None:
            self._asks = {}
            for key in core.gangs:
                h = core.holdings(key)
                if h is not None and h.pending:
                    ask: ResourceList = {}
                    for p in h.pending:
                        add_into(ask, p.requests)
                    ask.pop("pods", None)
                    self._asks[key] = (ask, gang_priority(h.pending))
        for key in [k for k in self._asks if k in self.started]:
            del self._asks[key]
        running = core.cache.counted_priorities
        lowest = min(running) if core.config.preemption and running else None
        return any(
            (lowest is not None and priority > lowest)
            or all(free.get(r, 0) >= n for r, n in ask.items())
            for ask, priority in self._asks.values()
        )

    def end(self, uid: str) -> ResourceList | None:
        """The pod ends (Succeeded); what it asked for, now free (None: it held nothing)."""
        pod = self.core.pod(uid)
        if pod is None or not _holds(pod):
            return None
        end = self.declared.get(uid)
        unit = pod.group or pod.key
        self.freed.setdefault(pod.node_name, []).append(
            (self.clock.now(), unit, end.why if end is not None else "")
        )
        done = pod.copy()
        done.phase = PodPhase.SUCCEEDED
        self.core.pod_upsert(done)
        return pod.requests


class Forecast:
    """One round of forecasts. Made from the live core at once (a snapshot of references);
    :meth:`steps` then builds the twin and runs it ahead, yielding between slices of work so
    that an adapter can give its event loop a turn (the twin is the forecast's own; the live
    core may change meanwhile). ``result`` holds the estimates once the steps are done.
    ``budget``: CPU seconds of the clock ``timer`` the steps may take; the gangs not started
    by then are unknown ("not forecast within ...")."""

    def __init__(
        self,
        core: Scheduler,
        gangs: Iterable[str] | None = None,
        *,
        horizon: float = HORIZON_SECONDS,
        max_steps: int = MAX_STEPS,
        budget: float | None = None,
        timer: Callable[[], float] | None = None,
        most: int | None = None,
        exact: bool = False,
        adopt: bool = False,
    ) -> None:
        if adopt and (not isinstance(core.clock, FakeClock) or most is not None):
            raise ValueError("adopt needs a core on a FakeClock, and no 'most'")
        # ``adopt``: the twin is ``core`` itself, run ahead without a copy (it is changed: for
        # a caller done with it, such as what-if, whose core is its own)
        self._adopt = core if adopt else None
        keys = gangs if gangs is not None else _waiting(core)
        targets: list[str] = []
        for key in keys:
            view = core.view(key)
            # a gang short of members waits for pods, not for capacity: its status says so
            if view is not None and view.members >= max(1, view.min_member):
                targets.append(key)
        # ``most``: only the first so many in queue order; the pods of those behind them are
        # left out of the twin (what they will do is not forecast either)
        self.behind: list[str] = []
        if most is not None and len(targets) > most:
            book = core.book
            targets.sort(key=lambda k: book.sort_key(core.gangs[k]))
            targets, self.behind = targets[:most], targets[most:]
        self.targets = targets
        self._snap = _Snapshot.of(core) if self.targets else None
        if self._snap is not None and self.behind:
            left_out = set(self.behind)
            self._snap.pods = [
                p
                for p in self._snap.pods
                if p.node_name or (p.group or PLAIN_PREFIX + p.uid) not in left_out
            ]
        self._horizon = horizon
        self._max_steps = max_steps
        self._budget = budget
        self._timer = timer
        self.result: dict[str, Estimate] = {}
        self.cut_short = False
        # every declared end at its own time, not in batches (slower; for tests)
        self._exact = exact

    def run(self) -> dict[str, Estimate]:
        for _ in self.steps():
            pass
        return self.result

    def steps(self) -> Iterator[None]:
        behind = Estimate(None, f"not forecast: behind the first {len(self.targets)} waiting gangs")
        self.result = dict.fromkeys(self.behind, behind)
        if self._snap is None:
            return
        timer = self._timer
        deadline = (
            timer() + self._budget if timer is not None and self._budget is not None else None
        )
        twin = _Twin(self._snap, self._adopt)
        if self._exact:
            twin.batch = 0.0
        if self._adopt is None:
            yield from twin.build()
        twin.expect_running()
        yield from twin.settle_steps()
        yield
        targets = set(self.targets)
        for _ in _run_ahead(twin, targets, self._horizon, self._max_steps):
            if deadline is not None and timer is not None and timer() > deadline:
                self.cut_short = True
                break
            yield
        known = dict(twin.started)  # what declared ends alone start
        missing = [k for k in self.targets if k not in known]
        stopped = (
            f"not forecast within {self._budget:g}s of work"
            if self.cut_short
            else f"not forecast within {self._max_steps} steps of the twin"
            if missing and twin.out_of_steps
            else ""
        )
        if stopped:
            # what the twin did not reach is not known (never "does not fit")
            self.result.update(
                {k: Estimate(known[k], *_why_then(twin, k, known[k])) if k in known
                 else Estimate(None, stopped) for k in self.targets}
            )  # fmt: skip
            return
        blockers: dict[str, tuple[str, ...]] = {}
        if missing:
            for _ in _blockers(twin, missing, self._horizon, self._max_steps, blockers):
                yield
        out: dict[str, Estimate] = {}
        for key in self.targets:
            at = known.get(key)
            if at is not None:
                out[key] = Estimate(at, *_why_then(twin, key, at))
                continue
            names = blockers.get(key, ())
            if names:
                basis = "waits for " + _listed(names) + ", which declared no end"
            else:
                basis = "does not fit even once every running pod has ended"
            out[key] = Estimate(None, basis, names)
        self.result.update(out)


def forecast(
    core: Scheduler,
    gangs: Iterable[str] | None = None,
    *,
    horizon: float = HORIZON_SECONDS,
    max_steps: int = MAX_STEPS,
) -> dict[str, Estimate]:
    """The expected start of each gang in ``gangs`` (default: every gang with members waiting
    to be placed), from the live core's state; see the module's docstring. A gang that has
    fewer members than its minMember gets none: it waits for pods, and its status says so."""
    return Forecast(core, gangs, horizon=horizon, max_steps=max_steps).run()


def _waiting(core: Scheduler) -> list[str]:
    keys = []
    for key in core.gangs:
        view = core.view(key)
        if view is not None and view.pending > 0 and view.bound < max(1, view.min_member):
            keys.append(key)
    return keys


def _run_ahead(twin: _Twin, targets: set[str], horizon: float, max_steps: int) -> Iterator[None]:
    """Move the twin's clock through the declared ends until every target has started, or
    nothing more can happen; yields after each time the twin schedules.

    The ends are taken in batches: all those up to BATCH later (relative to how far ahead
    they are) at once; and the twin schedules only when what the ends
    freed, summed over the nodes, could hold a waiting gang's whole ask. After the last end,
    the twin's own wake-ups (Permit deadlines, flushes) are followed for a while."""
    core, clock = twin.core, twin.clock
    limit = twin.now + horizon
    config = core.config
    quiet = config.default_schedule_timeout_seconds + 1.0
    progress = clock.now()
    free = twin.free_total()
    for _ in range(max_steps):
        if targets <= twin.started.keys():
            return
        t_wake = core.next_wakeup()
        if twin.ends and t_wake is not None and clock.now() <= t_wake < twin.ends[0][0]:
            # a gang's backoff ends before the next end
            if t_wake > limit:
                return
            if not twin.could_fit(free):
                twin.fail_retries(min(twin.ends[0][0], limit))
                continue
            clock.set(t_wake)
        elif twin.ends:
            t = max(twin.ends[0][0], clock.now())
            if t > limit:
                return
            t_batch = t + twin.batch * (t - twin.now)
            clock.set(t)
            while twin.ends and twin.ends[0][0] <= t_batch:
                _, _, uid = heapq.heappop(twin.ends)
                freed = twin.end(uid)
                if freed is not None:
                    add_into(free, freed)
            if not twin.could_fit(free):
                twin.fail_due()  # the gangs the ends woke are tried, and fail
                continue
            progress = t
        else:
            t_wake = core.next_wakeup()
            if t_wake is None or t_wake > progress + quiet or t_wake > limit:
                return
            clock.set(max(t_wake, clock.now()))
        started = len(twin.started)
        yield from twin.settle_steps()
        free = twin.free_total() if len(twin.started) > started else free
        yield
    twin.out_of_steps = True


def _blockers(
    twin: _Twin,
    missing: list[str],
    horizon: float,
    max_steps: int,
    out: dict[str, tuple[str, ...]],
) -> Iterator[None]:
    """For gangs the declared ends do not start: let every running pod without a declared end
    end as well, and name (in ``out``) those that were on the nodes each gang then takes."""
    core = twin.core
    undeclared: list[str] = []  # the running pods without a declared end (or past it)
    on_node: dict[str, set[str]] = {}  # node -> the gangs (or pods) of those on it
    for pod in list(core.cache.pods.values()):
        if _holds(pod) and pod.uid not in twin.declared:
            on_node.setdefault(pod.node_name, set()).add(pod.group or pod.key)
            undeclared.append(pod.uid)
    before = set(twin.started)
    for uid in undeclared:
        twin.end(uid)
    yield from twin.settle_steps()
    yield
    yield from _run_ahead(twin, set(missing), horizon, max_steps)
    for key in missing:
        if key in twin.started and key not in before:
            units: set[str] = set()
            for node in twin.nodes_of.get(key, ()):
                units |= on_node.get(node, set())
            out[key] = tuple(sorted(units - {key}))


def _why_then(twin: _Twin, key: str, at: float) -> tuple[str, tuple[str, ...]]:
    """What a gang the twin started at ``at`` started after: the latest declared ends on the
    nodes it took, at or before ``at``."""
    if at <= twin.now:
        return "fits now", ()
    latest = 0.0
    found: dict[str, str] = {}
    for node in twin.nodes_of.get(key, ()):
        for t, unit, why in twin.freed.get(node, ()):
            if t > at or unit == key:
                continue
            if t > latest:
                latest, found = t, {}
            if t == latest:
                found[unit] = why
    if not found:
        return "after the gangs ahead of it start", ()
    names = tuple(sorted(found))
    whys = sorted({w for w in found.values() if w})
    said = f" ({'; '.join(whys)})" if whys else ""
    verb = "ends" if len(names) == 1 else "end"
    return f"after {_listed(names)} {verb}{said}", names


def _listed(names: tuple[str, ...], most: int = 3) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _holds(pod: Pod) -> bool:
    """Bound and not ended: the pod holds what it asked for on its node."""
    return bool(pod.node_name) and pod.phase in (PodPhase.PENDING, PodPhase.RUNNING)
