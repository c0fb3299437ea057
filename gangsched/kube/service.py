"""The scheduler daemon's loop: watches feed the core, the core's decisions go out.

Everything that touches the core runs on one asyncio loop, between awaits, so the synchronous
core never sees two things at once. Scheduling starts only after the first full list of nodes,
pods and PodGroups, so nothing bound before the start is missed (no over-commit after a
restart), and yields to the loop every few cycles so watches and bindings keep flowing.

Nothing here holds the loop for long: a pod event costs O(1) whatever the size of its gang (the
core keeps per-gang counts up to date), and a list of every pod, node or PodGroup (the start, a
relist) and a status report of every gang are handled in slices that yield to the loop (see
slicing.py), so the lease renewal, the health server and bindings keep running through them.
The core is read only through its read methods (``view``, ``group_status``, ``pod``,
``group_size``, ``gauges``), never through its internals.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gangsched.api import labels as lbl
from gangsched.api.fields import timestamp
from gangsched.api.gpushare import GpuLabels
from gangsched.api.job import job_deadline
from gangsched.api.membership import Source
from gangsched.api.node import namespace_from, node_from
from gangsched.api.podgroup import podgroup_from, volcano_podgroup_from, xk8s_podgroup_from
from gangsched.api.schedulererror import ERROR_TEXT_MAX
from gangsched.api.schedulererror import condition as scheduler_error_condition
from gangsched.api.workloadapi import VERSIONS, upstream_podgroup_from
from gangsched.core.decisions import Decision, pod_ref
from gangsched.core.forecast import Estimate, Forecast
from gangsched.core.gpu import MILLI
from gangsched.core.model import GangSpec
from gangsched.core.scheduler import Scheduler
from gangsched.core.status import with_forecast
from gangsched.kube.budgets import budget_reflector
from gangsched.kube.dra import DraWatch
from gangsched.kube.effects import Effects
from gangsched.kube.gangspecs import GangSpecs
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON, FenceCheck
from gangsched.kube.io.firstlists import NODE_PAGE, NODES_PATH, POD_PAGE, PODS_PATH
from gangsched.kube.io.heap import collector_paused
from gangsched.kube.io.metrics import Metrics
from gangsched.kube.io.reflector import Reflector
from gangsched.kube.io.slicing import SLICE_SECONDS, in_slices
from gangsched.kube.io.times import rfc3339
from gangsched.kube.podreader import PodReader
from gangsched.kube.storage import storage_reflectors
from gangsched.kube.write.binder import Binder
from gangsched.kube.write.podstatus import unscheduled_condition, write_pod_condition
from gangsched.kube.write.preemptor import Preemptor
from gangsched.kube.write.reporter import Reporter
from gangsched.kube.write.restarter import GangRestarter
from gangsched.kube.write.upstreamstatus import UpstreamStatus

__all__ = ["SchedulerService", "ServiceStats"]

log = structlog.get_logger("gangsched.service")

MAX_IDLE = 5.0  # the loop turns at least this often, so /healthz can tell it is alive
BIND_GRACE = 5.0  # on shutdown, how long bindings already under way may take to finish
# after a failure inside gangsched, how long the record of it on the gang's pods may take
HOLD_BACK_SECONDS = 10.0

# Where each PodGroup convention's objects live, in precedence order.
CRD_SOURCES = (
    (Source.GANGSCHED, f"/apis/{lbl.GROUP}/{lbl.VERSION}/podgroups", podgroup_from),
    (Source.XK8S, f"/apis/{lbl.XK8S_GROUP}/{lbl.XK8S_VERSION}/podgroups", xk8s_podgroup_from),
    (
        Source.VOLCANO,
        f"/apis/{lbl.VOLCANO_GROUP}/{lbl.VOLCANO_VERSION}/podgroups",
        volcano_podgroup_from,
    ),
    # the upstream API (scheduling.k8s.io), in each version gangsched reads, newest first: a
    # version the server does not serve is absent (looked for again every minute)
    *((f"{Source.UPSTREAM}/{v.version}", v.list_path, upstream_podgroup_from) for v in VERSIONS),
)
UPSTREAM_VERSIONS = {f"{Source.UPSTREAM}/{v.version}": v for v in VERSIONS}


@dataclass
class ServiceStats:
    cycles: int = 0
    bind_gangs: int = 0
    unschedulable: int = 0
    timeouts: int = 0
    decisions_by_kind: dict[str, int] = field(default_factory=dict)


def _key(obj: JSON) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# Jobs, for their deadlines (start forecasts)
JOBS_PATH = "/apis/batch/v1/jobs"
# the most work one round of start forecasts may take (seconds, in slices of the loop), and
# how many waiting gangs (the first in queue order) it forecasts
FORECAST_BUDGET = 5.0
FORECAST_GANGS = 200
# a round of forecasts waits for the scheduler to be quiet, at most this long
FORECAST_DEFER = 30.0
# a known start forecast is written again (on the PodGroup and on each waiting member) only
# when it moved by more than this share of the wait it announced, and at least FORECAST_MOVE
# seconds: an estimate hours away that a round moves by seconds is not news
FORECAST_SHARE = 0.05
FORECAST_MOVE = 60.0
QUIET_POLL = 0.05  # how often until_quiet looks
# how long after the caches synced watches wait at most for the first pass (first_pass)
WATCH_DEFER = 2.0


def moved(was: Estimate, fresh: Estimate, now: float) -> bool:
    """Whether a gang's new start forecast is news against the one published: it became
    known or unknown; an unknown one names another blocker; a known one moved by more than
    FORECAST_SHARE of the wait the published one announced (at least FORECAST_MOVE s), or
    the published time has passed. Otherwise the published forecast stands, its basis too."""
    if was.at is None or fresh.at is None:
        return (was.at is None) != (fresh.at is None) or was.basis != fresh.basis
    wait = max(was.at - now, 0.0)
    return was.at <= now or abs(fresh.at - was.at) > max(FORECAST_MOVE, FORECAST_SHARE * wait)


class SchedulerService:
    def __init__(
        self,
        core: Scheduler,
        client: KubeApi,
        binder: Binder,
        reporter: Reporter,
        metrics: Metrics | None = None,
        *,
        yield_every: int = 16,
        status_resync_seconds: float = 60.0,
        forecast_seconds: float = 0.0,
        job_deadlines: bool = False,
        fence: FenceCheck | None = None,
        slice_seconds: float = SLICE_SECONDS,
        preemptor: Preemptor | None = None,
        restarter: GangRestarter | None = None,
        gpu_labels: GpuLabels | None = None,
        upstream_status: UpstreamStatus | None = None,
        dra: DraWatch | None = None,
        error_hold_seconds: float = 600.0,
    ) -> None:
        self.core = core
        # how long a gang gangsched failed on is held back the first time (doubled each time
        # after; core/steps/quarantine.py)
        self._error_hold = error_hold_seconds
        # DeviceClasses, ResourceSlices and ResourceClaims (the binder writes claims against
        # the ones watched here)
        self.dra = dra or DraWatch(core)
        # the condition on upstream PodGroups (scheduling.k8s.io), as kube-scheduler writes it
        self.upstream = upstream_status or UpstreamStatus(client, reporter.outbox)
        # the node labels a node's GPU model and memory are read from (settings)
        self._gpu_labels = gpu_labels or GpuLabels()
        # With leader election: whether this replica is still sure it leads (see leader.py).
        self._fence = fence
        self.client = client
        self.binder = binder
        self.reporter = reporter
        # carries out Preempt decisions (marks and deletes victims, nominates the preemptor)
        self.preemptor = preemptor or Preemptor(
            client, scheduler_name=core.config.scheduler_name, fence=fence
        )
        # carries out RestartGang (deletes the members a MemberLoss restarts)
        self.restarter = restarter or GangRestarter(client, fence=fence)
        self._yield_every = yield_every
        # the longest a list (a relist, a status report of every gang) holds the loop
        self._slice = slice_seconds
        self._wake = asyncio.Event()
        # every declaration of every gang's spec, and the one that stands (gangspecs.py)
        self._specs = GangSpecs([s for s, _, _ in CRD_SOURCES])
        self._known: dict[str, set[str]] = {"nodes": set(), "pods": set(), "namespaces": set()}
        self._pods = PodReader()
        self._listing: set[str] = set()  # the pods of the list under way
        self.stats = ServiceStats()
        self.metrics = metrics or Metrics()
        # GPUs in devices, allocated in shares of them (two halves of one GPU count 1), read
        # from the core when scraped: the count walks every node.
        self.metrics.gpus.labels("total").set_function(lambda: self.core.gpu_usage()[0])
        self.metrics.gpus.labels("allocated").set_function(lambda: self.core.gpu_usage()[1] / MILLI)
        self.last_turn = time.monotonic()
        self.reflectors = [
            Reflector(client, NODES_PATH, self._on_node, name="nodes", page_size=NODE_PAGE),
            Reflector(client, PODS_PATH, self._on_pod, name="pods", paged=True, page_size=POD_PAGE),
            # Namespace labels: what inter-pod affinity terms' namespaceSelector matches.
            Reflector(client, "/api/v1/namespaces", self._on_namespace, name="namespaces"),
            *(
                Reflector(client, path, self._crd_handler(src, fn), name=f"podgroups({src})")
                for src, path, fn in CRD_SOURCES
            ),
            # Claims, volumes, storage classes, CSINodes: where pods with volumes may go.
            *storage_reflectors(
                client, core, self.poke, slice_seconds=slice_seconds, on_yield=self._turned
            ),
            # Devices, device classes and resource claims (Dynamic Resource Allocation).
            *self.dra.reflectors(
                client, self.poke, slice_seconds=slice_seconds, on_yield=self._turned
            ),
            # PodDisruptionBudgets: which pods preemption spares where it can.
            budget_reflector(
                client, core, self.poke, slice_seconds=slice_seconds, on_yield=self._turned
            ),
        ]
        # Jobs' deadlines (spec.activeDeadlineSeconds after status.startTime): an upper bound
        # on when their pods end, for start forecasts only. Not needed to schedule, so the
        # scheduler does not wait for their list (nor for a permission it may lack).
        self._job_deadlines: dict[str, float] = {}
        self._job_pods: dict[str, set[str]] = {}  # Job uid -> the uids of its pods
        self.optional_reflectors: list[Reflector] = []
        if forecast_seconds > 0 or job_deadlines:
            self.optional_reflectors.append(Reflector(client, JOBS_PATH, self._on_job, name="jobs"))
        self.ready = asyncio.Event()
        # the scheduling loop found nothing to decide at its last turn (see quiet())
        self._idle = False
        # set when the loop first found nothing left to decide after the lists (first_pass)
        self._first_pass = asyncio.Event()
        self._relists_seen: dict[str, int] = {}
        self._handler_errors_seen = 0
        self._status_resync = status_resync_seconds
        # start forecasts (core/forecast.py): made when the core changed, at most this often
        self._forecast_every = forecast_seconds
        self.forecasts: dict[str, Estimate] = {}
        self._forecast_inputs: tuple[int, ...] = ()
        # gangsched PodGroups as last seen (generation and status): what a resync compares to
        self._podgroups: dict[str, JSON] = {}
        # a pod condition write is sent only while the watch still sees the pod unbound
        reporter.pod_version = self._unbound_version
        self._dropped_seen = 0
        # Carries every decision out (bindings, evictions, events, status).
        self.effects = Effects(
            core,
            binder,
            reporter,
            self.preemptor,
            self.restarter,
            self.metrics,
            self.stats,
            sure=self._sure,
            report_group=self._report_group,
            poke=self.poke,
            sliced=self._sliced,
        )

    # ---- running -----------------------------------------------------------------------
    async def run(self) -> None:
        self.last_turn = time.monotonic()
        watchers = [
            asyncio.create_task(r.run(), name=r.name)
            for r in (*self.reflectors, *self.optional_reflectors)
        ]
        loop_task: asyncio.Task[None] | None = None
        try:
            await self._until_synced()
            log.info(
                "caches synced",
                nodes=len(self._known["nodes"]),
                pods=len(self._known["pods"]),
                absent=[r.name for r in self.reflectors if r.absent],
            )
            self.ready.set()
            # status only now: before every list is in, counts would miss pods not yet listed
            await self._report_all(force=True)
            self.effects.resend_scheduled()
            loop_task = asyncio.create_task(self._schedule_forever(), name="schedule")
            if self._status_resync > 0:
                self.effects.spawn(self._resync_status_forever())
            if self._forecast_every > 0:
                self.effects.spawn(self._forecast_forever())
            broken = asyncio.create_task(self.effects.broken.wait(), name="effects")
            done, _ = await asyncio.wait(
                [loop_task, broken, *watchers], return_when=asyncio.FIRST_COMPLETED
            )
            loop_task.cancel()
            broken.cancel()
            if loop_task in done and loop_task.cancelled():
                raise asyncio.CancelledError
            if broken in done:
                raise RuntimeError("carrying out a decision failed") from self.effects.error
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
            binds = [t for t in self.effects.binds if not t.done()]
            if binds:
                await asyncio.wait(binds, timeout=BIND_GRACE)
            for t in self.effects.tasks:
                t.cancel()
            for t in [*stopping, *self.effects.tasks]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t

    async def _schedule_forever(self) -> None:
        core = self.core
        while True:
            n = 0
            turn = time.perf_counter()
            while True:
                if not self._sure():
                    await self._deposed()
                t0 = time.perf_counter()
                try:
                    decisions = core.schedule_one()
                except Exception as error:
                    await self._hold_back(core.deciding, error)
                    raise
                if decisions is None:
                    break
                self._idle = False
                t1 = time.perf_counter()
                self._observe(decisions, t1 - t0)
                self.stats.cycles += 1
                self._handle(decisions)
                n += 1
                # others get a turn every few cycles, and whenever a slice's time is spent
                if n % self._yield_every == 0 or t1 - turn >= self._slice:
                    await asyncio.sleep(0)
                    turn = time.perf_counter()
                    self.last_turn = time.monotonic()  # busy, not stalled
            self._gauges()
            self._idle = True
            self._first_pass.set()
            self.last_turn = time.monotonic()
            wake_at = core.next_wakeup()
            timeout = MAX_IDLE if wake_at is None else max(0.0, wake_at - core.clock.now())
            self._wake.clear()
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
            # that comes as the wake-up does, and shutdown would wait for this loop forever
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(timeout, MAX_IDLE) + 0.001):
                    await self._wake.wait()

    async def _hold_back(self, key: str | None, error: Exception) -> None:
        """Deciding gang ``key`` raised ``error``, a failure of gangsched's own. The process
        exits (its cache may be left half-changed; the next one starts from the API server),
        but first the gang's members not bound yet record it in their status (the
        ``gangsched.io/SchedulerError`` condition, beside ``PodScheduled=False`` saying why):
        the next process then holds that gang back and schedules the others, rather than fail
        on it again at every start (core/steps/quarantine.py). What is not written within
        HOLD_BACK_SECONDS is left."""
        text = f"{type(error).__name__}: {error}"
        log.error(
            "deciding a gang failed inside gangsched; the scheduler exits",
            gang=key,
            error=text,
            exc_info=error,
        )
        if key is None or not self._sure():
            return
        try:
            held = self.core.hold_back(key, self._error_hold, text[:ERROR_TEXT_MAX])
        except Exception as again:  # the core cannot even say which pods: exit as it is
            log.error("could not find the gang's pods to hold it back", gang=key, exc_info=again)
            return
        if held is None:
            return
        record, told = held
        now = rfc3339()
        said = f"{told.reason}: {told.message}"
        conditions = [
            unscheduled_condition(told.reason, said, now),
            scheduler_error_condition(record, now),
        ]
        body = {"status": {"conditions": conditions}}
        marks = [
            asyncio.ensure_future(
                write_pod_condition(self.client, pod, body, self._unbound_version)
            )
            for pod in told.pods
        ]
        done, late = await asyncio.wait(marks, timeout=HOLD_BACK_SECONDS)
        for t in late:
            t.cancel()
        failed = [e for t in done if (e := t.exception()) is not None]
        log.warning(
            "gang held back",
            gang=key,
            until=rfc3339(record.until),
            recorded=len(done) - len(failed),
            not_recorded=len(failed) + len(late),
            first_failure=str(failed[0]) if failed else None,
        )
        # events, and the PodGroup's status: sent as the app stops
        self._handle([told])
        self._report_group(key)

    async def first_pass(self) -> None:
        """Return once the caches are in and the scheduling loop has decided everything the
        lists gave it (its first bindings are on their way), or ``WATCH_DEFER`` seconds after
        the caches synced if that takes longer: what the scheduler's watches wait for
        (KubeClient.hold_watches)."""
        await self.ready.wait()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WATCH_DEFER):
                await self._first_pass.wait()

    async def _until_synced(self) -> None:
        """Wait for every reflector's first list. Meanwhile ``last_turn`` keeps saying that
        the loop turns: a long first list (a big cluster, a slow API server) is not a stall."""
        synced = asyncio.ensure_future(asyncio.gather(*(r.synced.wait() for r in self.reflectors)))
        try:
            while not synced.done():
                await asyncio.wait([synced], timeout=1.0)
                self.last_turn = time.monotonic()
        finally:
            synced.cancel()
        synced.result()

    def quiet(self) -> bool:
        """Caches in, nothing left to decide at the loop's last turn and no binding under way:
        a moment when work that can wait (the PodGroup controller's start) takes no CPU from
        scheduling."""
        return self.ready.is_set() and self._idle and not self.effects.binds

    def _sure(self) -> bool:
        return self._fence is None or self._fence()

    async def _deposed(self) -> None:
        """No longer sure to lead: drop every decision not sent yet and schedule nothing more;
        the process exits (the app watches the fence)."""
        log.error(
            "no longer sure to lead; dropping queued bindings", queued=len(self.effects.binds)
        )
        for t in list(self.effects.binds):
            t.cancel()
        await asyncio.Event().wait()

    def _observe(self, decisions: list[Decision], seconds: float) -> None:
        self.effects.observe(decisions, seconds)

    def _handle(self, decisions: Iterable[Decision]) -> None:
        """Carry out decisions (kube/effects.py)."""
        self.effects.handle(decisions)

    def _gauges(self) -> None:
        m, g = self.metrics, self.core.gauges()
        for queue, n in g.queue.items():
            m.pending_gangs.labels(queue).set(n)
        m.permit_waiting.set(g.waiting_at_permit)
        dropped = self.reporter.dropped
        if dropped > self._dropped_seen:
            m.writes_dropped.inc(dropped - self._dropped_seen)
            self._dropped_seen = dropped
        for r in self.reflectors:
            seen = self._relists_seen.get(r.name, 0)
            if r.relists > seen:
                m.relists.labels(r.name).inc(r.relists - seen)
                self._relists_seen[r.name] = r.relists
        failed = sum(r.handler_errors for r in (*self.reflectors, *self.optional_reflectors))
        if failed > self._handler_errors_seen:
            m.internal_errors.labels("watch_event").inc(failed - self._handler_errors_seen)
            self._handler_errors_seen = failed

    def poke(self) -> None:
        self._wake.set()

    # ---- watch handlers ----------------------------------------------------------------
    # Each handler takes one watch event; a full list ("SYNC": the start, a relist) returns an
    # awaitable that the reflector awaits, so that it is handled in slices (see slicing.py).
    def _on_node(self, kind: str, obj: JSON) -> Awaitable[None] | None:
        known = self._known["nodes"]
        if kind == "SYNC":
            return self._sync_nodes(obj.get("items") or [])
        if kind == "DELETED":
            name = str((obj.get("metadata") or {}).get("name", ""))
            known.discard(name)
            self._handle(self.core.node_delete(name))
        else:
            self._upsert_node(obj)
        self.poke()
        return None

    async def _sync_nodes(self, items: list[JSON]) -> None:
        known = self._known["nodes"]
        names = {str((i.get("metadata") or {}).get("name", "")) for i in items}
        gone = known - names
        await self._sliced(gone, lambda name: self._handle(self.core.node_delete(name)))
        known.clear()
        await self._sliced(items, self._upsert_node)
        self.poke()

    async def _sliced(self, items: Iterable[Any], fn: Callable[[Any], object]) -> None:
        await in_slices(items, fn, self._slice, on_yield=self._turned)

    def _turned(self) -> None:
        self.last_turn = time.monotonic()

    def _upsert_node(self, obj: JSON) -> None:
        node = node_from(obj, self._gpu_labels)
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

    def _on_job(self, kind: str, obj: JSON) -> None:
        """A Job's deadline, given to its pods the core holds (start forecasts read it)."""
        if kind == "SYNC":
            found = dict(job_deadline(i) for i in obj.get("items") or [])
            for uid in set(self._job_deadlines) | set(self._job_pods):
                if uid not in found:
                    self._set_job_deadline(uid, None)
                    self._job_pods.pop(uid, None)
            for uid, deadline in found.items():
                self._set_job_deadline(uid, deadline)
            return
        uid, deadline = job_deadline(obj)
        self._set_job_deadline(uid, None if kind == "DELETED" else deadline)
        if kind == "DELETED":
            self._job_pods.pop(uid, None)

    def _set_job_deadline(self, uid: str, deadline: float | None) -> None:
        if self._job_deadlines.get(uid) == deadline:
            return
        if deadline is None:
            self._job_deadlines.pop(uid, None)
        else:
            self._job_deadlines[uid] = deadline
        for pod_uid in list(self._job_pods.get(uid, ())):
            pod = self.core.pod(pod_uid)
            if pod is None:
                self._job_pods[uid].discard(pod_uid)
            elif pod.job_deadline != deadline:
                self.core.pod_upsert(dataclasses.replace(pod, job_deadline=deadline))

    def _on_pod(self, kind: str, obj: JSON) -> Awaitable[None] | None:
        # The pods are listed page by page (see Reflector._list_paged): each page is handled
        # while the next is on its way.
        if kind == "LISTING":
            self._listing = set()
            return None
        if kind == "PAGE":
            return self._list_page(obj.get("items") or [])
        if kind == "LISTED":
            return self._listed()
        if kind == "SYNC":  # a whole list at once
            return self._sync_pods(obj.get("items") or [])
        if kind == "DELETED":
            self._delete_pod(str((obj.get("metadata") or {}).get("uid", "")))
        else:
            self._upsert_pod(obj)
        self.poke()
        return None

    async def _sync_pods(self, items: list[JSON]) -> None:
        self._listing = set()
        await self._list_page(items)
        await self._listed()

    async def _list_page(self, items: list[JSON]) -> None:
        listing = self._listing
        for i in items:
            listing.add(str((i.get("metadata") or {}).get("uid", "")))
        await self._sliced(items, self._upsert_pod)

    async def _listed(self) -> None:
        """The list is complete: what it did not have is gone."""
        known, listing = self._known["pods"], self._listing
        await self._sliced(known - listing, self._delete_pod)
        known.clear()
        known.update(listing)
        self._pods.keep_only(listing)
        self._listing = set()
        await self._report_all(force=True)  # a relist may follow missed events
        self.poke()

    def _upsert_pod(self, obj: JSON) -> None:
        pod, membership = self._pods.read(obj)
        known = self._known["pods"]
        known.add(pod.uid)
        if pod.owner_job and self.optional_reflectors:
            self._job_pods.setdefault(pod.owner_job, set()).add(pod.uid)
            pod.job_deadline = self._job_deadlines.get(pod.owner_job)
        old = self.core.pod(pod.uid)
        if pod.scheduler_name == self.core.config.scheduler_name and membership.key:
            if membership.implicit is not None:
                disagreement = self._specs.declare(
                    membership.key, pod.uid, membership.implicit, known
                )
                if disagreement:
                    pod.invalid_reason = disagreement
            self._apply_spec(membership.key)
        try:
            self.core.pod_upsert(pod)
        except Exception as error:
            # (the reflector logs and counts it) A pod of ours is told, or nobody would know
            # why it is never scheduled.
            if pod.scheduler_name == self.core.config.scheduler_name and not pod.node_name:
                self.reporter.event(
                    pod_ref(pod),
                    "Warning",
                    "FailedScheduling",
                    "Scheduling",
                    f"SchedulerError: gangsched could not take the pod in "
                    f"({type(error).__name__}: {error}); it is not scheduled unless a change "
                    "of the pod or a restart of the scheduler takes it in. Report the error "
                    "with the scheduler's log",
                )
            raise
        if membership.key:
            self._report_group(membership.key)
        if old is not None and old.group and old.group != pod.group:
            self._report_group(old.group)
            self._forget_if_gone(old.group)

    def _delete_pod(self, uid: str) -> None:
        self._known["pods"].discard(uid)
        self._pods.forget(uid)
        self.reporter.forget_pod(uid)
        pod = self.core.pod(uid)
        self.core.pod_delete(uid)
        if pod is not None and pod.group:
            self._report_group(pod.group)
            self._forget_if_gone(pod.group)

    def _forget_if_gone(self, key: str) -> None:
        """The gang's last pod went away: drop what was kept for it (its pods' declaration);
        the gang itself stays only while a PodGroup defines it."""
        if self.core.group_size(key):
            return
        if self._specs.forget_declaration(key):
            self._apply_spec(key)
        if self._specs.resolve(key) is None:
            self.reporter.forget_group(key)

    def _unbound_version(self, uid: str) -> str | None:
        """The resourceVersion of a pod the watch sees unbound ('' when it carried none), or
        None when the pod is bound or gone."""
        pod = self.core.pod(uid)
        if pod is None or pod.node_name:
            return None
        return pod.resource_version

    def _crd_handler(
        self, source: str, parse: Callable[[JSON], GangSpec]
    ) -> Callable[[str, JSON], Awaitable[None] | None]:
        def handle(kind: str, obj: JSON) -> Awaitable[None] | None:
            if kind == "SYNC":
                return self._sync_podgroups(source, parse, obj.get("items") or [])
            upstream = UPSTREAM_VERSIONS.get(source)
            if kind == "DELETED":
                self._specs.delete_podgroup(source, _key(obj))
                self._apply_spec(_key(obj))
                if source == Source.GANGSCHED:
                    self._podgroups.pop(_key(obj), None)
                    self.reporter.forget_group(_key(obj))
                if upstream is not None:
                    self.upstream.forget(_key(obj))
            else:
                spec = parse(obj)
                self._specs.put_podgroup(source, spec.key, spec)
                self._apply_spec(spec.key)
                if source == Source.GANGSCHED:
                    self._seen_podgroup(obj)
                    # a new minMember changes what the status says even if nothing is pending
                    self._report_group(spec.key)
                if upstream is not None:
                    self.upstream.seen(upstream, obj)
                    self._report_upstream(spec.key)
            self.poke()
            return None

        return handle

    async def _sync_podgroups(
        self, source: str, parse: Callable[[JSON], GangSpec], items: list[JSON]
    ) -> None:
        parsed: dict[str, GangSpec] = {}
        await self._sliced(items, lambda item: parsed.__setitem__(_key(item), parse(item)))
        stale = self._specs.replace_podgroups(source, parsed)
        await self._sliced([*stale, *parsed], self._apply_spec)
        if source == Source.GANGSCHED:
            for k in stale:
                self._podgroups.pop(k, None)
                self.reporter.forget_group(k)
            await self._sliced(items, self._seen_podgroup)
            await self._report_all(force=True)  # a relist may follow missed events
        upstream = UPSTREAM_VERSIONS.get(source)
        if upstream is not None:
            keys = {self.upstream.seen(upstream, item) for item in items}
            self.upstream.keep_only(upstream, keys)
            await self._sliced(list(keys), self._report_upstream)
        self.poke()

    def _apply_spec(self, key: str) -> None:
        """Tell the core what now stands for the gang's spec, if that changed."""
        change = self._specs.settle(key)
        if change is None:
            return
        if change.spec is None:
            self._handle(self.core.gang_delete(key))
        else:
            self.core.gang_upsert(change.spec)

    # ---- decisions ---------------------------------------------------------------------
    def _report_upstream(self, key: str) -> None:
        """The condition on an upstream PodGroup (see upstreamstatus.py), once gangsched
        schedules at least one of its pods."""
        if not self.ready.is_set() or key not in self.upstream:
            return
        if self.core.group_size(key) == 0:
            return
        status = self.core.group_status(key)
        expected = self._expected(key)
        if status is not None and expected is not None and not status.scheduled:
            status = dataclasses.replace(status, message=with_forecast(status.message, expected))
        self.upstream.report(key, status)

    def _report_group(self, key: str, force: bool = False) -> None:
        """Write a gangsched PodGroup's status: phase, counts and condition from the core's
        one rule (``Scheduler.group_status``), with the scheduler's own fields."""
        self._report_upstream(key)
        if not self.ready.is_set() or key not in self._specs.podgroups(Source.GANGSCHED):
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
            seen=self._podgroups.get(key),
            force=force,
            reservation=(
                {
                    "nodes": list(view.reserved_nodes),
                    "since": rfc3339(view.reserved_since),
                    "reason": view.reservation_reason,
                }
                if view.reserved_nodes and view.reserved_since is not None
                else None
            ),
            expected=self._expected(key),
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

    async def _report_all(self, force: bool) -> None:
        """Report every gangsched PodGroup's status, in slices."""
        keys = list(self._specs.podgroups(Source.GANGSCHED))
        await self._sliced(keys, lambda key: self._report_group(key, force))
        await self._sliced(self.upstream.keys(), self._report_upstream)

    async def _forecast_forever(self) -> None:
        """Forecast every waiting gang's start (``forecasts``) when what the core holds changed,
        at most every ``forecast_seconds``, and at most about 5% of the loop's time (a round
        that took t seconds of work waits 20 t before the next), once the scheduler is quiet
        (or FORECAST_DEFER seconds have passed); report the gangs whose forecast changed."""
        while True:
            await self.until_quiet(FORECAST_DEFER)
            try:
                took = await self.forecast_round()
            except Exception as error:  # a bug: the forecasts stay as they were, scheduling goes on
                self._failed("forecast", error)
                took = FORECAST_BUDGET
            await asyncio.sleep(max(self._forecast_every, 20 * took))

    def _failed(self, work: str, error: Exception) -> None:
        """Work the scheduler carries on after (it decides nothing: start forecasts, status
        resyncs) failed inside gangsched: logged with its traceback, and counted."""
        log.error("work failed inside gangsched; carrying on", work=work, exc_info=error)
        self.metrics.internal_errors.labels(work).inc()

    async def until_quiet(self, most: float) -> None:
        """Wait (at most ``most`` seconds) until the scheduler is ``quiet``: work that can wait
        (a round of forecasts, the PodGroup controller's start) takes no turn from gangs being
        decided and bound, such as every gang of a scheduler that just started."""
        deadline = time.monotonic() + most
        while not self.quiet() and time.monotonic() < deadline:
            await asyncio.sleep(QUIET_POLL)

    async def forecast_round(self) -> float:
        """One round of forecasts if the core changed since the last; the seconds of work it
        took. The work (core/forecast.py: a twin of the core, run ahead) is done in slices that
        give the loop a turn, and stops after FORECAST_BUDGET seconds of it."""
        core = self.core
        inputs = (core.cache.generation, len(core.cache.pods), core.cycles, core.spec_changes)
        if inputs == self._forecast_inputs:
            return 0.0
        self._forecast_inputs = inputs
        work = 0.0
        mark = time.perf_counter()

        def worked() -> float:
            return work + time.perf_counter() - mark

        # The twin is a copy of the cluster state made after the first lists were frozen out of
        # the collector's reach: collections during the round would scan all of it, a few times
        # over (a fifth of a round at 5,000 nodes). It is freed by reference counting when the
        # round drops it; the collector runs again after the round.
        with collector_paused():
            round_ = Forecast(core, budget=FORECAST_BUDGET, timer=worked, most=FORECAST_GANGS)
            for _ in round_.steps():
                if time.perf_counter() - mark >= self._slice:
                    work = worked()
                    await asyncio.sleep(0)
                    mark = time.perf_counter()
            work = worked()
        fresh = round_.result
        now = core.clock.now()
        old = self.forecasts
        self.forecasts = {
            key: e if (was := old.get(key)) is None or moved(was, e, now) else was
            for key, e in fresh.items()
        }
        self.metrics.forecast_seconds.set(work)
        known = sum(1 for e in fresh.values() if e.known)
        self.metrics.forecasts.labels("known").set(known)
        self.metrics.forecasts.labels("unknown").set(len(fresh) - known)
        mark = time.perf_counter()
        for key in old.keys() | fresh.keys():
            if old.get(key) != self.forecasts.get(key):
                self.reporter.forecast(key, self._expected(key))
                self._report_group(key)
        # what publishing them took counts as the round's work (the spacing of rounds)
        return worked()

    def _expected(self, key: str) -> tuple[str, str] | None:
        """The gang's start forecast as its status says it: (time or '', basis)."""
        e = self.forecasts.get(key)
        if e is None:
            return None
        return (rfc3339(e.at) if e.at is not None else "", e.basis)

    async def _resync_status_forever(self) -> None:
        """Recompute every gangsched PodGroup's status every ``status_resync_seconds`` and
        write it where the object says something else, so a write or an event that was lost
        is repaired."""
        while True:
            await asyncio.sleep(self._status_resync)
            try:
                await self._report_all(force=True)
            except Exception as error:  # a bug: the next resync (and every change) tries again
                self._failed("status_resync", error)
