"""The composition root: every collaborator is built here and passed explicitly."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import structlog

from gangsched.core.scheduler import Scheduler
from gangsched.kube.binder import Binder
from gangsched.kube.client import KubeClient, load_configuration
from gangsched.kube.outbox import Outbox
from gangsched.kube.reporter import Reporter
from gangsched.kube.service import SchedulerService
from gangsched.kube.statuscontroller import StatusController
from gangsched.settings import Settings
from gangsched.wallclock import WallClock

__all__ = ["App", "build_app", "run_scheduler", "run_status_controller"]

log = structlog.get_logger("gangsched.app")


class App:
    def __init__(
        self,
        settings: Settings,
        client: KubeClient,
        service: SchedulerService,
        outbox: Outbox,
        status: StatusController | None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.service = service
        self.outbox = outbox
        self.status = status
        self.stop = asyncio.Event()

    async def run(self) -> None:
        self.outbox.start()
        tasks = [asyncio.create_task(self.service.run(), name="scheduler")]
        if self.status is not None:
            tasks.append(asyncio.create_task(self.status.run(self.stop), name="status"))
        stopper = asyncio.create_task(self.stop.wait(), name="stop")
        try:
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not stopper and t.exception() is not None:
                    raise t.exception()  # type: ignore[misc]
        finally:
            self.stop.set()
            for t in [*tasks, stopper]:
                t.cancel()
            for t in [*tasks, stopper]:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await t
            await self.outbox.stop()
            await self.client.close()


async def build_app(settings: Settings) -> App:
    cfg = await load_configuration(settings.kubeconfig, settings.context)
    client = KubeClient(cfg, settings.api_qps, settings.api_burst, settings.max_in_flight)
    core = Scheduler(settings.core(), WallClock())
    outbox = Outbox()
    instance = f"{socket.gethostname()}-{os.getpid()}"
    reporter = Reporter(client, outbox, instance)
    binder = Binder(client, core.bind_failed, retries=settings.bind_retries)
    service = SchedulerService(core, client, binder, reporter)
    status = StatusController(cfg, client) if settings.status_controller else None
    return App(settings, client, service, outbox, status)


async def run_scheduler(settings: Settings) -> None:
    app = await build_app(settings)
    log.info("starting", scheduler_name=settings.scheduler_name, server=app.client.host)
    await app.run()


async def run_status_controller(settings: Settings) -> None:
    cfg = await load_configuration(settings.kubeconfig, settings.context)
    client = KubeClient(cfg, settings.api_qps, settings.api_burst, settings.max_in_flight)
    try:
        await StatusController(cfg, client).run()
    finally:
        await client.close()
