"""Fire-and-forget API writes (events, pod conditions, status) off the scheduling path.

A bounded queue drained by a few workers: scheduling never waits on them, and when the API
server is slow the oldest writes are dropped (and counted) rather than memory growing.

Writes that carry a key (a PodGroup's status, a pod's condition) are coalesced: at most one
write per key is in flight, and of the writes queued for a key only the latest runs. So two
status writes for one PodGroup can never land out of order.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

import structlog

from gangsched.kube.client import ApiError

__all__ = ["Outbox"]

log = structlog.get_logger("gangsched.outbox")

Job = Callable[[], Awaitable[object]]


class Outbox:
    def __init__(self, workers: int = 4, capacity: int = 10_000) -> None:
        self._pending: OrderedDict[Hashable, tuple[str, Job]] = OrderedDict()
        self._busy: set[Hashable] = set()
        self._capacity = capacity
        self._ready = asyncio.Condition()
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self._seq = itertools.count()
        self.dropped = 0
        self.failed = 0
        self.done = 0

    def put(self, what: str, job: Job, key: Hashable | None = None) -> None:
        """Queue a write; with a ``key``, it replaces any write for that key not yet started."""
        if key is None:
            key = ("unkeyed", next(self._seq))
        if key in self._pending:
            self._pending[key] = (what, job)  # the latest wins, in the earlier place
        else:
            if len(self._pending) >= self._capacity:
                self._pending.popitem(last=False)
                self.dropped += 1
            self._pending[key] = (what, job)
        asyncio.get_running_loop().create_task(self._notify())

    async def _notify(self) -> None:
        async with self._ready:
            self._ready.notify()

    def _take(self) -> tuple[Hashable, str, Job] | None:
        for key in self._pending:
            if key not in self._busy:
                what, job = self._pending.pop(key)
                self._busy.add(key)
                return key, what, job
        return None

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]

    @property
    def idle(self) -> bool:
        return not self._pending and not self._busy

    async def drain(self, timeout: float = 10.0) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.idle and loop.time() < deadline:
            await asyncio.sleep(0.05)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _work(self) -> None:
        while True:
            async with self._ready:
                item = self._take()
                while item is None:
                    await self._ready.wait()
                    item = self._take()
            key, what, job = item
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
                self._busy.discard(key)
                if key in self._pending:
                    await self._notify()
