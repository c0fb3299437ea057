"""Decisions carried out against the API server: each kind the core makes (``assert_never``
lets mypy check that none is left out) goes to its writer (binder.py, preemptor.py,
restarter.py, reporter.py), in a task the service tracks; bindings and evictions are tasks that
commit a decision, which shutdown lets finish first and a deposed leader cancels. What an
attempt's outcome was is counted here too (the scheduler's attempt metrics)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from typing import Any, Protocol, assert_never

import structlog

from gangsched.core.decisions import (
    BindGang,
    Decision,
    DeviceConflict,
    Evict,
    GangTimedOut,
    GangUnschedulable,
    GangWaiting,
    MemberLoss,
    PodRef,
    Preempt,
    pod_ref,
)
from gangsched.core.scheduler import Scheduler
from gangsched.kube.io.client import FencedError
from gangsched.kube.io.metrics import Metrics
from gangsched.kube.write.binder import Binder, BindResult
from gangsched.kube.write.preemptor import Outcome, Preemptor, VictimResult
from gangsched.kube.write.reporter import Reporter
from gangsched.kube.write.restarter import LOST_REASON, Deleted, GangRestarter

__all__ = ["RESEND_SCHEDULED_SECONDS", "Effects", "Stats"]

log = structlog.get_logger("gangsched.service")

# Pods bound this recently get their Scheduled event sent again when the process starts (it
# may have been lost with the process before): the window a crash and a restart take.
RESEND_SCHEDULED_SECONDS = 600.0


class Stats(Protocol):
    """The service's counters that decisions move."""

    bind_gangs: int
    unschedulable: int
    timeouts: int
    decisions_by_kind: dict[str, int]


Sliced = Callable[[Iterable[Any], Callable[[Any], object]], Awaitable[None]]


class Effects:
    def __init__(
        self,
        core: Scheduler,
        binder: Binder,
        reporter: Reporter,
        preemptor: Preemptor,
        restarter: GangRestarter,
        metrics: Metrics,
        stats: Stats,
        *,
        sure: Callable[[], bool],
        report_group: Callable[[str], None],
        poke: Callable[[], None],
        sliced: Sliced,
    ) -> None:
        self._core = core
        self._binder = binder
        self._reporter = reporter
        self._preemptor = preemptor
        self._restarter = restarter
        self._metrics = metrics
        self._stats = stats
        self._sure = sure
        self._report_group = report_group
        self._poke = poke
        self._sliced = sliced
        self.tasks: set[asyncio.Task[Any]] = set()
        self.binds: set[asyncio.Task[Any]] = set()  # those of ``tasks`` that commit a decision
        # Set when one of ``tasks`` ended with an unexpected error (``error``): what it did of
        # its decision is unknown to the core, so the service stops (and the process with it;
        # the next starts from what the API server holds).
        self.broken = asyncio.Event()
        self.error: BaseException | None = None

    def observe(self, decisions: list[Decision], seconds: float) -> None:
        m = self._metrics
        result = ""
        for d in decisions:
            match d:
                case BindGang():
                    result = "scheduled"
                    view = self._core.view(d.gang)
                    if view is not None and view.schedule_start is not None:
                        m.e2e_duration.observe(
                            max(0.0, self._core.clock.now() - view.schedule_start)
                        )
                case GangWaiting():
                    result = result or "waiting"
                case GangUnschedulable():
                    pending = "unschedulable" if d.reason == "Unschedulable" else "pending"
                    result = result or pending
                case GangTimedOut():
                    if d.reason == "Timeout":
                        m.permit_timeouts.inc()
                case Preempt():
                    result = result or "unschedulable"  # as kube-scheduler counts a PostFilter
                    m.preemptions.inc()
                case MemberLoss() | Evict() | DeviceConflict():
                    pass  # not an attempt's outcome (counted where they are carried out)
                case _:
                    assert_never(d)
        if result:
            m.attempts.labels(result).inc()
            m.attempt_duration.labels(result).observe(seconds)

    def handle(self, decisions: Iterable[Decision]) -> None:
        """Carry out each decision (every kind the core makes: ``assert_never`` makes mypy
        check that none is left out)."""
        for d in decisions:
            kind = type(d).__name__
            self._stats.decisions_by_kind[kind] = self._stats.decisions_by_kind.get(kind, 0) + 1
            match d:
                case BindGang():
                    if not self._sure():
                        continue  # deposed: the decision is dropped, and the process exits
                    self._stats.bind_gangs += 1
                    self.spawn(self._bind(d), commits=True)
                case GangUnschedulable():
                    self._stats.unschedulable += 1
                    for pod in d.pods:
                        self._reporter.unschedulable(pod, d.reason, d.message, d.gang)
                case GangTimedOut():
                    self._stats.timeouts += 1
                    timeout = d.reason == "Timeout"
                    for pod in d.released:
                        why = "GangTimeout" if timeout else "GangReleased"
                        self._reporter.event(pod, "Warning", why, "Scheduling", d.message)
                        if timeout:
                            self._reporter.timed_out(pod, d.message)
                        self._clear_nomination(pod)
                case MemberLoss():
                    self._member_loss(d)
                case GangWaiting():
                    pass  # the PodGroup's status below says what it waits for
                case Preempt():
                    if not self._sure():
                        continue  # deposed: nothing is evicted, and the process exits
                    for b in d.nominations:
                        self._reporter.event(b.pod, "Normal", "Preempting", "Preempting", d.message)
                    self.spawn(self._preempt(d), commits=True)
                case Evict():
                    if not self._sure():
                        continue  # deposed: the next leader finds the marks
                    log.warning("carrying out an eviction", gang=d.gang, victims=len(d.victims))
                    self.spawn(self._evict(d), commits=True)
                case DeviceConflict():
                    log.warning("GPU device records over-commit a device", node=d.node)
                    self._metrics.device_conflicts.inc()
                    self._reporter.event(
                        d.pod, "Warning", "GPUDeviceConflict", "Counting", d.message
                    )
                case _:
                    assert_never(d)
            self._report_group(d.gang)

    def spawn(self, work: Coroutine[Any, Any, object], *, commits: bool = False) -> None:
        """Run ``work`` as a task the service tracks (cancelled at shutdown); ``commits``:
        it writes a decision (bindings, evictions), which shutdown lets finish first."""
        task = asyncio.create_task(work, name=getattr(work, "__qualname__", None))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        task.add_done_callback(self._ended)
        if commits:
            self.binds.add(task)
            task.add_done_callback(self.binds.discard)

    def _ended(self, task: asyncio.Task[Any]) -> None:
        """A task ended: one that failed (an error its own handling did not expect) is logged
        with its traceback and breaks the effects (``broken``)."""
        if task.cancelled() or (error := task.exception()) is None:
            return
        log.error("carrying out a decision failed", task=task.get_name(), exc_info=error)
        if self.error is None:
            self.error = error
        self.broken.set()

    async def _bind(self, d: BindGang) -> None:
        try:
            results = await self._binder.bind_gang(d)
        except FencedError:
            return  # nothing to report: the process is on its way out
        ok = sum(1 for r in results if r.ok)
        for result, n in (("success", ok), ("error", len(results) - ok)):
            if n:
                self._metrics.bindings.labels(result).inc(n)
        await self._sliced(results, self._bound)  # a gang of thousands: in slices
        self._report_group(d.gang)
        self._poke()

    def _member_loss(self, d: MemberLoss) -> None:
        """A gang that ran lost members: a ``GangMembersLost`` event on each member left (those
        being restarted get a ``GangRestart`` event from the restarter instead), and under
        RestartGang the deletion of ``d.restart``. The PodGroup status is written by
        ``_handle`` as for every decision."""
        log.warning("gang lost members", gang=d.gang, restart=len(d.restart))
        restarting = {p.uid for p in d.restart}
        for pod in d.members:
            if pod.uid not in restarting:
                self._reporter.event(pod, "Warning", LOST_REASON, "Lifecycle", d.message)
        if not d.restart:
            return
        if not self._sure():
            return  # deposed: nothing is deleted, and the process exits
        self.spawn(self._restart(d))

    async def _restart(self, d: MemberLoss) -> None:
        try:
            results = await self._restarter.restart(d)
        except FencedError:
            return  # nothing to report: the process is on its way out
        for r in results:
            if r.outcome is Deleted.FAILED:
                self._core.delete_failed(r.pod.uid)
                self._reporter.event(r.pod, "Warning", "FailedGangRestart", "Deleting", r.message)
        self._report_group(d.gang)
        self._poke()

    async def _preempt(self, d: Preempt) -> None:
        try:
            result = await self._preemptor.preempt(d)
        except FencedError:
            return  # nothing to report: the process is on its way out
        self._evicted(result.victims)

    async def _evict(self, d: Evict) -> None:
        try:
            results = await self._preemptor.evict(d)
        except FencedError:
            return  # nothing to report: the process is on its way out
        self._metrics.evictions_resumed.inc(len(d.victims))
        self._evicted(results)
        self._report_group(d.gang)

    def _evicted(self, results: Iterable[VictimResult]) -> None:
        for r in results:
            self._metrics.preemption_victims.labels(r.outcome.value).inc()
            if r.outcome is Outcome.FAILED:
                # not deleted: it counts as the watch last showed it again, and its eviction
                # is tried again after a backoff (core/eviction.py); the core's hold for the
                # preemptor runs out at its deadline
                self._core.delete_failed(r.victim.pod.uid)
        self._poke()

    def resend_scheduled(self) -> None:
        """The Scheduled events of pods bound in the last ``RESEND_SCHEDULED_SECONDS``: a
        process before this one may have exited (SIGKILL, a lost lease) before it wrote them.
        Each has a name fixed by the pod, so one already written is not written twice."""
        since = self._core.clock.now() - RESEND_SCHEDULED_SECONDS
        for pod in self._core.bound_since(since):
            self._reporter.scheduled(pod_ref(pod), pod.node_name)

    def _clear_nomination(self, ref: PodRef) -> None:
        """A pod released from a hold that a preemption nominated it for: its
        ``nominatedNodeName`` no longer holds."""
        pod = self._core.pod(ref.uid)
        if pod is None or not pod.nominated_node or pod.node_name or not self._sure():
            return
        self.spawn(self._preemptor.clear_nomination(ref))

    def _bound(self, r: BindResult) -> None:
        if r.ok:
            self._reporter.scheduled(r.binding.pod, r.binding.node)
        else:
            self._reporter.event(r.binding.pod, "Warning", "FailedBinding", "Binding", r.message)
