"""The composition root: every collaborator is built here and passed explicitly."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

import structlog

from gangsched.api.gpushare import GpuLabels
from gangsched.boot import instance_name, scheduler_client
from gangsched.core.scheduler import Scheduler
from gangsched.kube.dra import DraWatch
from gangsched.kube.io.client import KubeClient, load_configuration, user_agent
from gangsched.kube.io.health import HealthServer
from gangsched.kube.io.kubeconfig import ClusterConfig
from gangsched.kube.io.leader import LeaderElector
from gangsched.kube.io.metrics import Metrics
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.service import SchedulerService
from gangsched.kube.statuscontroller import StatusController
from gangsched.kube.write import failpoints
from gangsched.kube.write.binder import Binder
from gangsched.kube.write.claims import ClaimWriter
from gangsched.kube.write.gpushare import DeviceRecorder
from gangsched.kube.write.preemptor import Preemptor
from gangsched.kube.write.reporter import Reporter
from gangsched.settings import Settings
from gangsched.wallclock import WallClock

__all__ = [
    "App",
    "ControllerStoppedError",
    "LostLeadershipError",
    "build_app",
    "run_scheduler",
    "run_status_controller",
]

log = structlog.get_logger("gangsched.app")


FLUSH_SECONDS = 10.0  # on shutdown, how long queued writes may take to be sent
# Writes queued beyond this are dropped, oldest first (a few hundred bytes each): room for an
# event per pod of a 50,000-pod burst and its conditions and status writes.
OUTBOX_CAPACITY = 100_000
# the longest the PodGroup controller's start waits, after the caches are in, for the scheduler
# to be quiet (see App._run_controller)
CONTROLLER_START_WAIT = 10.0


class LostLeadershipError(RuntimeError):
    pass


class ControllerStoppedError(RuntimeError):
    """The PodGroup controller's thread ended while the scheduler ran: the process's health
    is the controller's too, so the process exits with an error (and a restart brings both
    back) rather than carry on with PodGroups no longer checked."""


class App:
    def __init__(
        self,
        settings: Settings,
        client: KubeClient,
        service: SchedulerService,
        outbox: Outbox,
        status: StatusController | None,
        elector: LeaderElector | None,
        health: HealthServer | None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.service = service
        self.outbox = outbox
        self.status = status
        self.elector = elector
        self.health = health
        self.stop = asyncio.Event()
        self._status_stop = threading.Event()
        self._status_thread: threading.Thread | None = None

    def controller_alive(self) -> bool:
        """False once the PodGroup controller's thread has ended while the app runs."""
        thread = self._status_thread
        return thread is None or thread.is_alive() or self.stop.is_set()

    def ready(self) -> bool:
        """Caches synced and leading (a follower is ready too: it is a warm standby)."""
        if self.elector is not None and not self.elector.is_leader:
            return True
        return self.service.ready.is_set()

    def live(self) -> bool:
        if not self.controller_alive():
            return False
        if self.elector is not None and not self.elector.is_leader:
            return True
        return time.monotonic() - self.service.last_turn < 60.0

    async def run(self) -> None:
        tasks: list[asyncio.Task[None]] = []
        if self.health is not None:
            # A replica answers its probes before it competes for the lease (a standby is
            # probed too); without leader election the server starts beside the scheduler
            # (a failure to serve still stops the app: the task ends with it).
            if self.elector is not None:
                await self.health.start()
            else:
                tasks.append(asyncio.create_task(self._serve_health(), name="health"))
        deposed = False
        stopper = asyncio.create_task(self.stop.wait(), name="stop")
        try:
            if self.elector is not None:
                acquire = asyncio.create_task(self.elector.acquire(), name="acquire")
                await asyncio.wait([acquire, stopper], return_when=asyncio.FIRST_COMPLETED)
                if not acquire.done():
                    acquire.cancel()
                    return
                self.service.metrics.leader.set(1)
                # Renewing runs on a task (and a client) of its own, so scheduling work never
                # holds it up; a write the fence stops ends the process like a lost lease.
                tasks.append(asyncio.create_task(self.elector.hold(), name="lease"))
                tasks.append(asyncio.create_task(self.elector.fence.wait(), name="fence"))
            self.outbox.start()
            tasks.append(asyncio.create_task(self.service.run(), name="scheduler"))
            if self.status is not None:
                tasks.append(asyncio.create_task(self._run_controller(), name="controller"))
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is stopper:
                    continue
                if t.get_name() in ("lease", "fence"):
                    deposed = True
                    raise LostLeadershipError("lost the leader lease; exiting")
                exc = t.exception()
                if exc is not None:
                    log.error("stopping", reason=str(exc))
                    raise exc
        finally:
            self.stop.set()
            self._status_stop.set()
            for t in [*tasks, stopper]:
                t.cancel()
            for t in [*tasks, stopper]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            # Send what is queued (events, conditions, status), urgent writes first, while
            # the rest stops; for FLUSH_SECONDS at most.
            if deposed:
                # A deposed leader sends nothing more (kube-scheduler exits at once): what it
                # queued comes from a view another replica has replaced.
                await self.outbox.stop()
            else:
                self.service.reporter.flush()
            flush = asyncio.create_task(self.outbox.drain(0.0 if deposed else FLUSH_SECONDS))
            if self._status_thread is not None and self._status_thread.is_alive():
                await asyncio.to_thread(self._status_thread.join, 15.0)
            self.service.metrics.leader.set(0)
            if self.elector is not None:
                await self.elector.release()
                await self.elector.close()
            with contextlib.suppress(Exception):
                await flush
            await self.outbox.stop()
            if self.health is not None:
                await self.health.stop()
            await self.client.close()

    async def _serve_health(self) -> None:
        """Serve /metrics, /healthz and /readyz until the app stops."""
        assert self.health is not None
        await self.health.start()
        await self.stop.wait()

    async def _run_controller(self) -> None:
        """Start the PodGroup controller on its thread and return only if that thread ends,
        with :class:`ControllerStoppedError` (the app stops it otherwise, by cancelling this
        task and setting its stop flag)."""
        assert self.status is not None
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[BaseException | None] = loop.create_future()

        def on_exit(error: BaseException | None) -> None:
            def settle() -> None:
                if not ended.done():
                    ended.set_result(error)

            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle)

        # Started once the scheduler's caches are in and the backlog found there is decided and
        # bound (or CONTROLLER_START_WAIT after the caches, on a scheduler that is never idle):
        # its start-up (importing kopf and starting its watches, on a thread of its own in the
        # same interpreter) would otherwise hold up the first list and the first bindings, and
        # the Accepted condition it writes is not urgent.
        await self.service.ready.wait()
        caches_in = time.monotonic()
        await self.service.until_quiet(CONTROLLER_START_WAIT)
        log.info(
            "starting the PodGroup controller",
            after_caches_seconds=round(time.monotonic() - caches_in, 3),
            quiet=self.service.quiet(),
        )
        self._status_thread = self.status.start_thread(self._status_stop, on_exit)
        error = await ended
        why = f": {type(error).__name__}: {error}" if error is not None else " unexpectedly"
        raise ControllerStoppedError(f"the PodGroup controller stopped{why}") from error


async def build_app(
    settings: Settings, *, cfg: ClusterConfig | None = None, client: KubeClient | None = None
) -> App:
    """The scheduler, wired. ``cfg`` and ``client``: those the start made already (boot.py)."""
    if cfg is None:
        cfg = await load_configuration(settings.kubeconfig, settings.context)
    instance = instance_name()
    identity = settings.identity or instance
    if client is None:
        client = scheduler_client(settings, cfg)
    elector = (
        LeaderElector(
            # A client of its own (as kube-scheduler has): renewals never wait behind bindings.
            KubeClient(cfg, 5.0, 10, 2, agent=user_agent(identity, "leader-election")),
            settings.lease_namespace,
            settings.lease_name,
            identity,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
        )
        if settings.leader_elect
        else None
    )
    fence = elector.fence.ok if elector is not None else None
    core = Scheduler(settings.core(), WallClock())
    if failpoints.armed("decide"):  # (the crash-safety tests only)
        core.steps = (failpoints.DecideFailpoint(), *core.steps)
    # one worker per request in flight the client keeps for informational writes
    outbox = Outbox(workers=max(4, client.background_slots), capacity=OUTBOX_CAPACITY)
    reporter = Reporter(client, outbox, instance)
    dra = DraWatch(core)
    binder = Binder(
        client,
        core.bind_failed,
        retries=settings.bind_retries,
        volumes=core.volumes,
        fence=fence,
        # the GPU devices a share was placed on, recorded in the pod as Koordinator does
        annotations=DeviceRecorder(core.pod, core.node),
        # resource claims are written against the ones watched
        claims=ClaimWriter(
            client,
            dra.claims,
            fence=fence,
            held_by=core.device_holder,
            device_class=core.device_class,
            binding_timeout=settings.device_binding_timeout_seconds,
        ),
    )
    metrics = Metrics()
    service = SchedulerService(
        core,
        client,
        binder,
        reporter,
        metrics,
        fence=fence,
        status_resync_seconds=settings.status_resync_seconds,
        forecast_seconds=settings.start_forecast_seconds,
        error_hold_seconds=settings.scheduler_error_hold_seconds,
        gpu_labels=GpuLabels(settings.gpu_model_label, settings.gpu_memory_label),
        dra=dra,
        preemptor=Preemptor(
            client,
            instance=instance,
            scheduler_name=settings.scheduler_name,
            fence=fence,
            retries=settings.bind_retries,
        ),
    )
    status = (
        StatusController(
            cfg,
            lambda: KubeClient(
                cfg, settings.api_qps, settings.api_burst, 8, agent=user_agent(identity, "status")
            ),
        )
        if settings.status_controller
        else None
    )
    # the first decisions need only the lists: watches come after them
    client.hold_watches(service.first_pass)
    app = App(settings, client, service, outbox, status, elector, None)
    if settings.http_bind_address:
        app.health = HealthServer(settings.http_bind_address, metrics.render, app.ready, app.live)
    return app


async def run_scheduler(
    settings: Settings, *, cfg: ClusterConfig | None = None, client: KubeClient | None = None
) -> None:
    app = await build_app(settings, cfg=cfg, client=client)
    log.info("starting", scheduler_name=settings.scheduler_name, server=app.client.host)
    await app.run()


async def run_status_controller(settings: Settings) -> None:
    """``gangsched status-controller``: the PodGroup controller alone (the ``Accepted``
    condition); PodGroup phase and counts come from the scheduler."""
    cfg = await load_configuration(settings.kubeconfig, settings.context)
    await StatusController(
        cfg,
        lambda: KubeClient(cfg, settings.api_qps, settings.api_burst, settings.max_in_flight),
    ).run()
