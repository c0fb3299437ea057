"""The HTTP endpoints: /metrics (Prometheus), /healthz (the process is alive and its loop
turns) and /readyz (caches are synced and, with leader election, whatever the role)."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiohttp import web

__all__ = ["HealthServer"]


class HealthServer:
    def __init__(
        self,
        address: str,
        metrics: Callable[[], bytes],
        ready: Callable[[], bool],
        live: Callable[[], bool],
    ) -> None:
        host, _, port = address.rpartition(":")
        self.host = host or "0.0.0.0"
        self.port = int(port)
        self._metrics = metrics
        self._ready = ready
        self._live = live
        self._runner: web.AppRunner | None = None
        self._web: Any = None  # aiohttp.web, once start() imported it

    def _response(self, **kwargs: Any) -> web.Response:
        if self._web is None:
            self._web = importlib.import_module("aiohttp.web")
        response: web.Response = self._web.Response(**kwargs)
        return response

    async def _get_metrics(self, _: web.Request) -> web.Response:
        return self._response(
            body=self._metrics(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    async def _healthz(self, _: web.Request) -> web.Response:
        ok = self._live()
        return self._response(status=200 if ok else 500, text="ok" if ok else "stalled")

    async def _readyz(self, _: web.Request) -> web.Response:
        ok = self._ready()
        return self._response(status=200 if ok else 503, text="ok" if ok else "not ready")

    async def start(self) -> None:
        # (aiohttp.web imported here, on a worker thread: the scheduler's start runs meanwhile)
        web = self._web = await asyncio.to_thread(importlib.import_module, "aiohttp.web")
        app = web.Application()
        app.router.add_get("/metrics", self._get_metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
