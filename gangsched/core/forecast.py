"""When a waiting gang will start: the scheduler's own core, run ahead on a twin of its state.

The twin is a fresh :class:`Scheduler` with the same configuration, given everything the live
one holds (nodes, namespaces, disruption budgets, storage and device objects, PodGroups, pods,
when each gang's first attempt was), on a clock of its own that starts at the live clock's
now. Time then runs forward through what is *declared*: a running pod ends when its gang's
PodGroup says the run ends (``expectedRuntimeSeconds``, counted from the pod's binding), or at
the latest when its own ``spec.activeDeadlineSeconds`` runs out (the kubelet stops it then:
an upper bound). At each end the twin schedules as the scheduler does (queue order and the
gangs ahead, priorities, reservations and backfill, preemption, topology), and a gang's
forecast start is when the twin binds it. Nothing else happens in the twin: no gang arrives
(what will arrive is unknown), no pod ends without a declaration, none fails.

A gang the twin does not bind on declared ends alone gets no time: the answer is *unknown*,
and what it waits for is named. The twin then lets every running pod without a declared end
(or past it) end too, and the gang's blockers are those of them on the nodes it then takes.
Never a guess: an unknown blocker makes the start unknown.

The forecast costs a twin built from every pod (about what the scheduler's own first list
costs it) and a placement attempt per waiting gang at each declared end: the adapter asks for
it when the inputs changed, no more often than its settings allow.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, replace

from gangsched.core.clock import FakeClock
from gangsched.core.decisions import BindGang, Decision, Evict, Preempt
from gangsched.core.model import Pod, PodPhase
from gangsched.core.scheduler import Scheduler

__all__ = ["Estimate", "forecast", "span"]

# how far ahead the twin runs at most (a declared end further away is past any use)
HORIZON_SECONDS = 30 * 24 * 3600.0
# how many times the twin's clock moves at most (declared ends and the core's own wake-ups)
MAX_STEPS = 5_000


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


class _Twin:
    """The twin and its clock, and what it has seen happen."""

    def __init__(self, core: Scheduler) -> None:
        self.now = core.clock.now()
        self.clock = FakeClock(self.now)
        # No backoff in the twin: at each end, the waiting gangs are tried in queue order (the
        # live scheduler's retries are at most backoffMaxSeconds apart)
        config = replace(core.config, backoff_initial_seconds=0.0, backoff_max_seconds=0.0)
        self.core = Scheduler(config, self.clock)
        self._live = core
        self._copy(core)
        self._seq = 0
        self.ends: list[tuple[float, int, str]] = []  # (when, order, pod uid)
        self.declared: dict[str, _End] = {}  # pod uid -> its declared end
        self.started: dict[str, float] = {}  # gang key -> when the twin bound it
        self.nodes_of: dict[str, set[str]] = {}  # gang key -> the nodes it was bound on
        # node -> (when, unit, why) of the declared ends seen there, in time order
        self.freed: dict[str, list[tuple[float, str, str]]] = {}

    def _copy(self, live: Scheduler) -> None:
        twin, cache = self.core, live.cache
        for info in cache.nodes.values():
            if info.node is not None:
                twin.node_upsert(info.node)
        for name, labels in cache.namespaces.items():
            twin.namespace_upsert(name, labels)
        for budget in live.budgets.values():
            twin.budget_upsert(budget)
        storage = cache.volumes
        for sc in storage.classes.values():
            twin.storage_class_upsert(sc)
        for csi in storage.csi_nodes.values():
            twin.csinode_upsert(csi)
        for pv in storage.volumes.values():
            twin.volume_upsert(pv)
        for claim in storage.claims.values():
            twin.claim_upsert(claim)
        devices = cache.resource_claims
        for key, slice_devices, counters in devices.slices():
            twin.resource_slice_upsert(key, slice_devices, counters)
        for dc in devices.classes.values():
            twin.device_class_upsert(dc)
        for name, why in devices.refused_classes.items():
            twin.device_class_refused(name, why)
        for rc in devices.claims.values():
            twin.resource_claim_upsert(rc)
        for key, why in devices.refused_claims.items():
            twin.resource_claim_refused(key, why)
        for spec in live.specs.values():
            twin.gang_upsert(spec)
        for pod in cache.pods.values():
            twin.pod_upsert(pod)
        for key, gang in live.gangs.items():
            if gang.schedule_start is not None and key in twin.gangs:
                twin.restore_schedule_start(key, gang.schedule_start)

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
                started = self._live.started.get(pod.uid) or pod.bound_at or pod.created
                self.expect(pod, started)

    # ---- running ahead ----------------------------------------------------------------------
    def apply(self, decisions: Iterable[Decision]) -> None:
        """Carry the twin's decisions out at once, as a perfect adapter would."""
        now = self.clock.now()
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
                    self.core.pod_delete(v.pod.uid)

    def settle(self) -> None:
        self.apply(self.core.run_until_idle())

    def end(self, uid: str) -> None:
        pod = self.core.pod(uid)
        if pod is None or not _holds(pod):
            return
        end = self.declared.get(uid)
        unit = pod.group or pod.key
        self.freed.setdefault(pod.node_name, []).append(
            (self.clock.now(), unit, end.why if end is not None else "")
        )
        self.core.pod_upsert(replace(pod, phase=PodPhase.SUCCEEDED))


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
    targets = [k for k in (gangs if gangs is not None else _waiting(core)) if k in core.gangs]
    out: dict[str, Estimate] = {}
    open_: list[str] = []
    for key in targets:
        view = core.view(key)
        # a gang short of members waits for pods, not for capacity: its status says so
        if view is not None and view.members >= max(1, view.min_member):
            open_.append(key)
    if not open_:
        return out
    twin = _Twin(core)
    twin.expect_running()
    twin.settle()
    _run_ahead(twin, set(open_), horizon, max_steps)
    known = dict(twin.started)  # what declared ends alone start
    missing = [k for k in open_ if k not in known]
    blockers = _blockers(twin, missing, horizon, max_steps) if missing else {}
    for key in open_:
        at = known.get(key)
        if at is not None:
            out[key] = Estimate(at, *_why_then(twin, key, at))
        else:
            names = blockers.get(key, ())
            if names:
                basis = "waits for " + _listed(names) + ", which declared no end"
            else:
                basis = "does not fit even once every running pod has ended"
            out[key] = Estimate(None, basis, names)
    return out


def _waiting(core: Scheduler) -> list[str]:
    keys = []
    for key in core.gangs:
        view = core.view(key)
        if view is not None and view.pending > 0 and view.bound < max(1, view.min_member):
            keys.append(key)
    return keys


def _run_ahead(twin: _Twin, targets: set[str], horizon: float, max_steps: int) -> None:
    """Move the twin's clock through the declared ends (and its own wake-ups) until every
    target has started, or nothing more can happen."""
    core, clock = twin.core, twin.clock
    limit = twin.now + horizon
    config = core.config
    quiet = 2 * config.backoff_max_seconds + config.default_schedule_timeout_seconds + 1.0
    progress = clock.now()
    for _ in range(max_steps):
        if targets <= twin.started.keys():
            return
        t_end = twin.ends[0][0] if twin.ends else None
        t_wake = core.next_wakeup()
        if t_end is None and (t_wake is None or t_wake > progress + quiet):
            return
        t = max(min(x for x in (t_end, t_wake) if x is not None), clock.now())
        if t > limit:
            return
        clock.set(t)
        started = len(twin.started)
        while twin.ends and twin.ends[0][0] <= t:
            _, _, uid = heapq.heappop(twin.ends)
            twin.end(uid)
            progress = t
        twin.settle()
        if len(twin.started) > started:
            progress = t


def _blockers(
    twin: _Twin, missing: list[str], horizon: float, max_steps: int
) -> dict[str, tuple[str, ...]]:
    """For gangs the declared ends do not start: let every running pod without a declared end
    end as well, and name those that were on the nodes each gang then takes."""
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
    twin.settle()
    _run_ahead(twin, set(missing), horizon, max_steps)
    out: dict[str, tuple[str, ...]] = {}
    for key in missing:
        if key in twin.started and key not in before:
            units: set[str] = set()
            for node in twin.nodes_of.get(key, ()):
                units |= on_node.get(node, set())
            out[key] = tuple(sorted(units - {key}))
    return out


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
