"""The scheduler daemon's loop: watches feed the core, the core's decisions go out.

Everything that touches the core runs on one asyncio loop, between awaits, so the synchronous
core never sees two things at once. Scheduling starts only after the first full list of nodes,
pods and PodGroups, so nothing bound before the start is missed (no over-commit after a
restart), and yields to the loop every few cycles so watches and bindings keep flowing.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gangsched.core.decisions import (
    BindGang,
    Decision,
    GangTimedOut,
    GangUnschedulable,
    GangWaiting,
)
from gangsched.core.model import GangSpec
from gangsched.core.resources import GPU
from gangsched.core.scheduler import Scheduler
from gangsched.kube import labels as lbl
from gangsched.kube.binder import Binder
from gangsched.kube.client import JSON, FenceCheck, FencedError, KubeClient
from gangsched.kube.membership import Source
from gangsched.kube.metrics import Metrics
from gangsched.kube.reflector import Reflector
from gangsched.kube.reporter import Reporter
from gangsched.kube.storage import storage_reflectors
from gangsched.kube.translate import (
    namespace_from,
    node_from,
    pod_from,
    podgroup_from,
    timestamp,
    volcano_podgroup_from,
    xk8s_podgroup_from,
)

__all__ = ["SchedulerService", "ServiceStats"]

log = structlog.get_logger("gangsched.service")

MAX_IDLE = 5.0  # the loop turns at least this often, so /healthz can tell it is alive
BIND_GRACE = 5.0  # on shutdown, how long bindings already under way may take to finish

# Where each PodGroup convention's objects live, in precedence order.
CRD_SOURCES = (
    (Source.GANGSCHED, f"/apis/{lbl.GROUP}/{lbl.VERSION}/podgroups", podgroup_from),
    (Source.XK8S, f"/apis/{lbl.XK8S_GROUP}/{lbl.XK8S_VERSION}/podgroups", xk8s_podgroup_from),
    (
        Source.VOLCANO,
        f"/apis/{lbl.VOLCANO_GROUP}/{lbl.VOLCANO_VERSION}/podgroups",
        volcano_podgroup_from,
    ),
)


@dataclass
class ServiceStats:
    cycles: int = 0
    bind_gangs: int = 0
    unschedulable: int = 0
    timeouts: int = 0
    decisions_by_kind: dict[str, int] = field(default_factory=dict)


def _timeout_text(seconds: float | None) -> str:
    return "default" if seconds is None else f"{seconds:g}s"


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class SchedulerService:
    def __init__(
        self,
        core: Scheduler,
        client: KubeClient,
        binder: Binder,
        reporter: Reporter,
        metrics: Metrics | None = None,
        *,
        yield_every: int = 16,
        status_resync_seconds: float = 60.0,
        fence: FenceCheck | None = None,
    ) -> None:
        self.core = core
        # With leader election: whether this replica is still sure it leads (see leader.py).
        self._fence = fence
        self.client = client
        self.binder = binder
        self.reporter = reporter
        self._yield_every = yield_every
        self._wake = asyncio.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._binds: set[asyncio.Task[Any]] = set()  # those of _tasks that bind a gang
        self._crd_specs: dict[str, dict[str, GangSpec]] = {s: {} for s, _, _ in CRD_SOURCES}
        self._implicit: dict[str, GangSpec] = {}
        self._declarers: dict[str, str] = {}  # gang -> uid of the pod whose declaration stands
        self._gang_source: dict[str, str] = {}
        self._applied: dict[str, GangSpec] = {}
        self._known: dict[str, set[str]] = {"nodes": set(), "pods": set(), "namespaces": set()}
        self.stats = ServiceStats()
        self.metrics = metrics or Metrics()
        self.last_turn = time.monotonic()
        self.reflectors = [
            Reflector(client, "/api/v1/nodes", self._on_node, name="nodes"),
            Reflector(client, "/api/v1/pods", self._on_pod, name="pods"),
            # Namespace labels: what inter-pod affinity terms' namespaceSelector matches.
            Reflector(client, "/api/v1/namespaces", self._on_namespace, name="namespaces"),
            *(
                Reflector(client, path, self._crd_handler(src, fn), name=f"podgroups({src})")
                for src, path, fn in CRD_SOURCES
            ),
            # Claims, volumes, storage classes, CSINodes: where pods with volumes may go.
            *storage_reflectors(client, core, self.poke),
        ]
        self.ready = asyncio.Event()
        self._relists_seen: dict[str, int] = {}
        self._status_resync = status_resync_seconds
        # gangsched PodGroups as last seen (generation and status): what a resync compares to
        self._podgroups: dict[str, JSON] = {}
        # a pod condition write is sent only while the watch still sees the pod unbound
        reporter.pod_version = self._unbound_version
        self._dropped_seen = 0

    # ---- running -----------------------------------------------------------------------
    async def run(self) -> None:
        self.last_turn = time.monotonic()
        watchers = [asyncio.create_task(r.run(), name=r.name) for r in self.reflectors]
        loop_task: asyncio.Task[None] | None = None
        try:
            await asyncio.gather(*(r.synced.wait() for r in self.reflectors))
            log.info(
                "caches synced",
                nodes=len(self._known["nodes"]),
                pods=len(self._known["pods"]),
                absent=[r.name for r in self.reflectors if r.absent],
            )
            self.ready.set()
            # status only now: before every list is in, counts would miss pods not yet listed
            self._report_all(force=True)
            loop_task = asyncio.create_task(self._schedule_forever(), name="schedule")
            if self._status_resync > 0:
                resync = asyncio.create_task(self._resync_status_forever(), name="status-resync")
                self._tasks.add(resync)
                resync.add_done_callback(self._tasks.discard)
            done, _ = await asyncio.wait(
                [loop_task, *watchers], return_when=asyncio.FIRST_COMPLETED
            )
            loop_task.cancel()
            if loop_task in done and loop_task.cancelled():
                raise asyncio.CancelledError
            for t in done:
                if not t.cancelled() and t.exception() is not None:
                    raise RuntimeError(f"{t.get_name()} stopped") from t.exception()
            raise RuntimeError(f"{', '.join(t.get_name() for t in done)} stopped unexpectedly")
        finally:
            # Nothing more is decided, and bindings already under way are seen through (for a
            # bounded time), so that what they bound is reported before the process exits.
            stopping = [*watchers, *([loop_task] if loop_task is not None else [])]
            for t in stopping:
                t.cancel()
            binds = [t for t in self._binds if not t.done()]
            if binds:
                await asyncio.wait(binds, timeout=BIND_GRACE)
            for t in self._tasks:
                t.cancel()
            for t in [*stopping, *self._tasks]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _schedule_forever(self) -> None:
        core = self.core
        while True:
            n = 0
            while True:
                if not self._sure():
                    await self._deposed()
                t0 = time.perf_counter()
                decisions = core.schedule_one()
                if decisions is None:
                    break
                self._observe(decisions, time.perf_counter() - t0)
                self.stats.cycles += 1
                self._handle(decisions)
                n += 1
                if n % self._yield_every == 0:
                    await asyncio.sleep(0)
            self._gauges()
            self.last_turn = time.monotonic()
            wake_at = core.next_wakeup()
            timeout = MAX_IDLE if wake_at is None else max(0.0, wake_at - core.clock.now())
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), min(timeout, MAX_IDLE) + 0.001)

    def _sure(self) -> bool:
        return self._fence is None or self._fence()

    async def _deposed(self) -> None:
        """No longer sure to lead: drop every decision not sent yet and schedule nothing more;
        the process exits (the app watches the fence)."""
        log.error("no longer sure to lead; dropping queued bindings", queued=len(self._binds))
        for t in list(self._binds):
            t.cancel()
        await asyncio.Event().wait()

    def _observe(self, decisions: list[Decision], seconds: float) -> None:
        m = self.metrics
        result = ""
        for d in decisions:
            if isinstance(d, BindGang):
                result = "scheduled"
                gang = self.core.gangs.get(d.gang)
                if gang is not None and gang.schedule_start is not None:
                    m.e2e_duration.observe(max(0.0, self.core.clock.now() - gang.schedule_start))
            elif isinstance(d, GangWaiting):
                result = result or "waiting"
            elif isinstance(d, GangUnschedulable):
                result = result or ("unschedulable" if d.reason == "Unschedulable" else "pending")
            elif isinstance(d, GangTimedOut) and d.reason == "Timeout":
                m.permit_timeouts.inc()
        if result:
            m.attempts.labels(result).inc()
            m.attempt_duration.labels(result).observe(seconds)

    def _gauges(self) -> None:
        m, core = self.metrics, self.core
        for queue, n in core.queue.counts().items():
            m.pending_gangs.labels(queue).set(n)
        m.permit_waiting.set(len(core.permit))
        m.gpus.labels("total").set(core.cache.total_allocatable.get(GPU, 0))
        m.gpus.labels("allocated").set(core.cache.total_requested.get(GPU, 0))
        dropped = self.reporter.dropped
        if dropped > self._dropped_seen:
            m.writes_dropped.inc(dropped - self._dropped_seen)
            self._dropped_seen = dropped
        for r in self.reflectors:
            seen = self._relists_seen.get(r.name, 0)
            if r.relists > seen:
                m.relists.labels(r.name).inc(r.relists - seen)
                self._relists_seen[r.name] = r.relists

    def poke(self) -> None:
        self._wake.set()

    # ---- watch handlers ----------------------------------------------------------------
    def _on_node(self, kind: str, obj: JSON) -> None:
        known = self._known["nodes"]
        if kind == "SYNC":
            items = obj.get("items") or []
            names = {str((i.get("metadata") or {}).get("name", "")) for i in items}
            for gone in known - names:
                self._handle(self.core.node_delete(gone))
            known.clear()
            for item in items:
                self._upsert_node(item)
        elif kind == "DELETED":
            name = str((obj.get("metadata") or {}).get("name", ""))
            known.discard(name)
            self._handle(self.core.node_delete(name))
        else:
            self._upsert_node(obj)
        self.poke()

    def _upsert_node(self, obj: JSON) -> None:
        node = node_from(obj)
        self._known["nodes"].add(node.name)
        self.core.node_upsert(node)

    def _on_namespace(self, kind: str, obj: JSON) -> None:
        known = self._known["namespaces"]
        if kind == "SYNC":
            items = obj.get("items") or []
            found = [namespace_from(i) for i in items]
            for gone in known - {name for name, _ in found}:
                self.core.namespace_delete(gone)
            known.clear()
            for name, labels in found:
                known.add(name)
                self.core.namespace_upsert(name, labels)
        elif kind == "DELETED":
            name, _ = namespace_from(obj)
            known.discard(name)
            self.core.namespace_delete(name)
        else:
            name, labels = namespace_from(obj)
            known.add(name)
            self.core.namespace_upsert(name, labels)
        self.poke()

    def _on_pod(self, kind: str, obj: JSON) -> None:
        known = self._known["pods"]
        if kind == "SYNC":
            items = obj.get("items") or []
            uids = {str((i.get("metadata") or {}).get("uid", "")) for i in items}
            for gone in known - uids:
                self._delete_pod(gone)
            known.clear()
            for item in items:
                self._upsert_pod(item)
            self._report_all(force=True)  # a relist may follow missed events
        elif kind == "DELETED":
            self._delete_pod(str((obj.get("metadata") or {}).get("uid", "")))
        else:
            self._upsert_pod(obj)
        self.poke()

    def _upsert_pod(self, obj: JSON) -> None:
        pod, membership = pod_from(obj)
        self._known["pods"].add(pod.uid)
        old = self.core.cache.pods.get(pod.uid)
        if pod.scheduler_name == self.core.config.scheduler_name and membership.key:
            self._gang_source.setdefault(membership.key, membership.source)
            if membership.implicit is not None:
                disagreement = self._declare(membership.key, pod.uid, membership.implicit)
                if disagreement:
                    pod.invalid_reason = disagreement
            self._apply_spec(membership.key)
        self.core.pod_upsert(pod)
        if membership.key:
            self._report_group(membership.key)
        if old is not None and old.group and old.group != pod.group:
            self._report_group(old.group)
            self._forget_if_gone(old.group)

    def _declare(self, key: str, uid: str, spec: GangSpec) -> str:
        """Record a pod's own declaration of its gang. The first declaration stands; a pod
        that declares the same gang differently is refused (it gets an event and waits)."""
        first = self._implicit.get(key)
        declarer = self._declarers.get(key)
        if first is None or declarer == uid or declarer not in self._known["pods"]:
            self._implicit[key] = spec
            self._declarers[key] = uid
            return ""
        ours = (spec.min_member, spec.mode, spec.timeout_seconds, spec.gang_group)
        theirs = (first.min_member, first.mode, first.timeout_seconds, first.gang_group)
        if ours == theirs:
            return ""
        return (
            f"declares gang {key} differently from its other members "
            f"(minMember {spec.min_member} vs {first.min_member}, mode {spec.mode} vs "
            f"{first.mode}, timeout {_timeout_text(spec.timeout_seconds)} vs "
            f"{_timeout_text(first.timeout_seconds)})"
        )

    def _delete_pod(self, uid: str) -> None:
        self._known["pods"].discard(uid)
        self.reporter.forget_pod(uid)
        pod = self.core.cache.pods.get(uid)
        self.core.pod_delete(uid)
        if pod is not None and pod.group:
            self._report_group(pod.group)
            self._forget_if_gone(pod.group)

    def _forget_if_gone(self, key: str) -> None:
        """The gang's last pod went away: drop what was kept for it (its pods' declaration,
        their convention); the gang itself stays only while its PodGroup exists."""
        if key in self.core.group_pods:
            return
        self._gang_source.pop(key, None)
        self._declarers.pop(key, None)
        if self._implicit.pop(key, None) is not None:
            self._apply_spec(key)
        if self._resolve_spec(key) is None:
            self.reporter.forget_group(key)

    def _unbound_version(self, uid: str) -> str | None:
        """The resourceVersion of a pod the watch sees unbound ('' when it carried none), or
        None when the pod is bound or gone."""
        pod = self.core.cache.pods.get(uid)
        if pod is None or pod.node_name:
            return None
        return pod.resource_version

    def _crd_handler(self, source: str, parse: Any) -> Any:
        def handle(kind: str, obj: JSON) -> None:
            specs = self._crd_specs[source]
            if kind == "SYNC":
                items = obj.get("items") or []
                keys = {_key(i) for i in items}
                stale = set(specs) - keys
                specs.clear()
                for item in items:
                    specs[_key(item)] = parse(item)
                for k in stale | keys:
                    self._apply_spec(k)
                if source == Source.GANGSCHED:
                    for k in stale:
                        self._podgroups.pop(k, None)
                        self.reporter.forget_group(k)
                    for item in items:
                        self._seen_podgroup(item)
                    self._report_all(force=True)  # a relist may follow missed events
            elif kind == "DELETED":
                specs.pop(_key(obj), None)
                self._apply_spec(_key(obj))
                if source == Source.GANGSCHED:
                    self._podgroups.pop(_key(obj), None)
                    self.reporter.forget_group(_key(obj))
            else:
                spec = parse(obj)
                specs[spec.key] = spec
                self._apply_spec(spec.key)
                if source == Source.GANGSCHED:
                    self._seen_podgroup(obj)
                    # a new minMember changes what the status says even if nothing is pending
                    self._report_group(spec.key)
            self.poke()

        return handle

    def _resolve_spec(self, key: str) -> GangSpec | None:
        for source, _, _ in CRD_SOURCES:
            spec = self._crd_specs[source].get(key)
            if spec is not None:
                return spec
        return self._implicit.get(key)

    def _apply_spec(self, key: str) -> None:
        spec = self._resolve_spec(key)
        if spec == self._applied.get(key):
            return
        if spec is None:
            self._applied.pop(key, None)
            self._handle(self.core.gang_delete(key))
            return
        self._applied[key] = spec
        self.core.gang_upsert(spec)

    # ---- decisions ---------------------------------------------------------------------
    def _handle(self, decisions: Iterable[Decision]) -> None:
        for d in decisions:
            kind = type(d).__name__
            self.stats.decisions_by_kind[kind] = self.stats.decisions_by_kind.get(kind, 0) + 1
            if isinstance(d, BindGang):
                if not self._sure():
                    continue  # deposed: the decision is dropped, and the process exits
                self.stats.bind_gangs += 1
                task = asyncio.create_task(self._bind(d))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
                self._binds.add(task)
                task.add_done_callback(self._binds.discard)
            elif isinstance(d, GangUnschedulable):
                self.stats.unschedulable += 1
                for pod in d.pods:
                    self.reporter.unschedulable(pod, d.reason, d.message)
            elif isinstance(d, GangTimedOut):
                self.stats.timeouts += 1
                timeout = d.reason == "Timeout"
                for pod in d.released:
                    why = "GangTimeout" if timeout else "GangReleased"
                    self.reporter.event(pod, "Warning", why, "Scheduling", d.message)
                    if timeout:
                        self.reporter.mark_timeout(pod)
            self._report_group(d.gang)

    async def _bind(self, d: BindGang) -> None:
        try:
            results = await self.binder.bind_gang(d)
        except FencedError:
            return  # nothing to report: the process is on its way out
        for r in results:
            self.metrics.bindings.labels("success" if r.ok else "error").inc()
            if r.ok:
                self.reporter.scheduled(r.binding.pod, r.binding.node)
            else:
                self.reporter.event(r.binding.pod, "Warning", "FailedBinding", "Binding", r.message)
        self._report_group(d.gang)
        self.poke()

    def _report_group(self, key: str, force: bool = False) -> None:
        """Write a gangsched PodGroup's status: phase, counts and condition from the core's
        one rule (``Scheduler.group_status``), with the scheduler's own fields."""
        if not self.ready.is_set() or key not in self._crd_specs[Source.GANGSCHED]:
            return
        status = self.core.group_status(key)
        view = self.core.view(key)
        if status is None or view is None:
            return
        self.reporter.group_status(
            key,
            status,
            waiting=view.waiting,
            start=view.schedule_start,
            last_failure=view.last_failure,
            current=self._podgroups.get(key) if force else None,
        )

    def _seen_podgroup(self, obj: JSON) -> None:
        status = obj.get("status") or {}
        if status.get("scheduleStartTime"):
            self.core.restore_schedule_start(_key(obj), timestamp(status["scheduleStartTime"]))
        meta = obj.get("metadata") or {}
        self._podgroups[_key(obj)] = {
            "metadata": {
                "generation": meta.get("generation", 0),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "status": obj.get("status") or {},
        }

    def _report_all(self, force: bool) -> None:
        for key in list(self._crd_specs[Source.GANGSCHED]):
            self._report_group(key, force)

    async def _resync_status_forever(self) -> None:
        """Recompute every gangsched PodGroup's status every ``status_resync_seconds`` and
        write it where the object says something else, so a write or an event that was lost
        is repaired."""
        while True:
            await asyncio.sleep(self._status_resync)
            self._report_all(force=True)
