"""Fire-and-forget API writes (events, pod conditions, status) off the scheduling path.

A bounded queue drained by a few workers: scheduling never waits on them, and when the API
server is slow the oldest writes are dropped (and counted) rather than memory growing."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import structlog

from gangsched.kube.client import ApiError

__all__ = ["Outbox"]

log = structlog.get_logger("gangsched.outbox")

Job = Callable[[], Awaitable[object]]


class Outbox:
    def __init__(self, workers: int = 4, capacity: int = 10_000) -> None:
        self._queue: asyncio.Queue[tuple[str, Job]] = asyncio.Queue(maxsize=capacity)
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self.dropped = 0
        self.failed = 0
        self.done = 0

    def put(self, what: str, job: Job) -> None:
        if self._queue.full():
            with contextlib.suppress(asyncio.QueueEmpty):
                self._queue.get_nowait()
                self._queue.task_done()
                self.dropped += 1
        self._queue.put_nowait((what, job))

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]

    async def drain(self) -> None:
        await self._queue.join()

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _work(self) -> None:
        while True:
            what, job = await self._queue.get()
            try:
                await job()
                self.done += 1
            except ApiError as e:
                self.failed += 1
                log.debug("write failed", what=what, error=str(e))
            except Exception:  # a bug in one write must not stop the others
                self.failed += 1
                log.exception("write crashed", what=what)
            finally:
                self._queue.task_done()
