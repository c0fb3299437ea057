"""The HTTP endpoints: /metrics (Prometheus), /healthz (the process is alive and its loop
turns) and /readyz (caches are synced and, with leader election, whatever the role)."""

from __future__ import annotations

from collections.abc import Callable

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

    async def _get_metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=self._metrics(), headers={"Content-Type": "text/plain; version=0.0.4"}
        )

    async def _healthz(self, _: web.Request) -> web.Response:
        ok = self._live()
        return web.Response(status=200 if ok else 500, text="ok" if ok else "stalled")

    async def _readyz(self, _: web.Request) -> web.Response:
        ok = self._ready()
        return web.Response(status=200 if ok else 503, text="ok" if ok else "not ready")

    async def start(self) -> None:
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
