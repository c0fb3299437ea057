"""The HTTP endpoints: /metrics (Prometheus), /healthz (the process is alive and its loop
turns) and /readyz (caches are synced and, with leader election, whatever the role).

A few GETs a minute from probes and a scraper: served by asyncio's own streams, one request
per connection (the answer says ``Connection: close``), so that no HTTP framework is imported
while the scheduler starts. A client gets ``REQUEST_SECONDS`` to send its request head; a
request that is not an HTTP/1.x GET or HEAD of a known path gets 400, 405 or 404."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["REQUEST_SECONDS", "HealthServer"]

REQUEST_SECONDS = 10.0
_MAX_HEAD = 16 * 1024
_REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
    503: "Service Unavailable",
}
_TEXT = "text/plain; charset=utf-8"
_METRICS = "text/plain; version=0.0.4"


class HealthServer:
    def __init__(
        self,
        address: str,
        metrics: Callable[[], bytes],
        ready: Callable[[], bool],
        live: Callable[[], bool],
    ) -> None:
        host, _, port = address.rpartition(":")
        self.host = host.strip("[]") or "0.0.0.0"  # "[::]:10261" is IPv6's any address
        self.port = int(port)
        self._metrics = metrics
        self._ready = ready
        self._live = live
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    def _answer(self, method: str, path: str) -> tuple[int, str, bytes]:
        if path not in ("/metrics", "/healthz", "/readyz"):
            return 404, _TEXT, b"not found"
        if method not in ("GET", "HEAD"):
            return 405, _TEXT, b"method not allowed"
        if path == "/metrics":
            return 200, _METRICS, self._metrics()
        if path == "/healthz":
            ok = self._live()
            return (200, _TEXT, b"ok") if ok else (500, _TEXT, b"stalled")
        ok = self._ready()
        return (200, _TEXT, b"ok") if ok else (503, _TEXT, b"not ready")

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        method = ""
        try:
            try:
                async with asyncio.timeout(REQUEST_SECONDS):
                    head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                status, kind, body = 400, _TEXT, b"request head too long"
            else:
                parts = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    status, kind, body = 400, _TEXT, b"bad request"
                else:
                    method = parts[0]
                    status, kind, body = self._answer(method, parts[1].partition("?")[0])
            head_out = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\nContent-Type: {kind}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
            ).encode("latin-1")
            writer.write(head_out if method == "HEAD" else head_out + body)
            async with asyncio.timeout(REQUEST_SECONDS):
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass  # a client that went away or said nothing in time: nothing to answer
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await writer.wait_closed()
            if task is not None:
                self._clients.discard(task)

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host, self.port, limit=_MAX_HEAD, reuse_address=True
        )

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._clients:
            await asyncio.wait(list(self._clients), timeout=1.0)
        await self._server.wait_closed()
        self._server = None
