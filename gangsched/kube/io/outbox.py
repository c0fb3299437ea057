"""Fire-and-forget API writes (events, pod conditions, status) off the scheduling path.

A bounded queue drained by a few workers: scheduling never waits on them, and when the API
server is slow the oldest writes are dropped (and counted) rather than memory growing.

Writes that carry a key (a PodGroup's status, a pod's condition, one event series) are
coalesced: at most one write per key is in flight, and of the writes queued for a key only the
latest runs. So two status writes for one PodGroup can never land out of order.

Three queues: urgent writes (the outcome of a binding: ``Scheduled``, ``FailedBinding``) go
first, then first reports (a gang's or a pod's first ``Scheduled`` condition: a newly
complete gang is told why it waits before the backlog of repeats for thousands of pending pods
is worked through; newest first), then the rest; the least important, oldest first, are
dropped when the queue is full, and their writers told (``on_drop``) so that they send them
again at the next report rather than taking them for sent. Every write is
sent in the background lane of the client's rate limit (see client.py), so a backlog here
never holds up a binding. On shutdown :meth:`drain` sends what is queued, urgent writes first,
in the foreground lane (nothing else is sent any more), within a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable

import structlog

from gangsched.kube.io.client import ApiError, background_lane
from gangsched.kube.io.turns import Turns

__all__ = ["FIRST", "NORMAL", "URGENT", "Outbox"]

log = structlog.get_logger("gangsched.outbox")

Job = Callable[[], Awaitable[object]]
# (what, the write, called if the write is dropped unsent)
_Entry = tuple[str, Job, Callable[[], None] | None]


# The queues, most important first: the outcome of a binding, a first report (what a gang or
# pod is told for the first time), everything else.
URGENT, FIRST, NORMAL = 0, 1, 2


class Outbox:
    def __init__(self, workers: int = 4, capacity: int = 10_000) -> None:
        # [urgent, first, normal]: each key is in at most one of them
        self._queues: tuple[OrderedDict[Hashable, _Entry], ...] = (
            OrderedDict(),
            OrderedDict(),
            OrderedDict(),
        )
        self._busy: set[Hashable] = set()
        self._capacity = capacity
        # workers waiting for a write, each on its own future (no task per write to wake one)
        self._idle = Turns()  # workers with nothing to send
        self._workers = workers
        self._tasks: list[asyncio.Task[None]] = []
        self._seq = itertools.count()
        self._background = True
        self.dropped = 0
        self.failed = 0
        self.done = 0

    def put(
        self,
        what: str,
        job: Job,
        key: Hashable | None = None,
        *,
        urgent: bool = False,
        first: bool = False,
        on_drop: Callable[[], None] | None = None,
    ) -> None:
        """Queue a write; with a ``key``, it replaces any write for that key not yet started,
        in the earlier place, or at the end of a more important queue if this one is more
        important (``urgent``: the outcome of a binding; ``first``: a first report, which goes
        before the backlog of repeats and updates). ``on_drop`` is called if the write is
        dropped unsent (the queue full), so its writer can send it again later."""
        if key is None:
            key = ("unkeyed", next(self._seq))
        rank = URGENT if urgent else FIRST if first else NORMAL
        queues = self._queues
        for i, queue in enumerate(queues):
            if key in queue:
                if i <= rank:
                    queue[key] = (what, job, on_drop)
                    self._wake_one()
                    return
                del queue[key]
                break
        if self.queued >= self._capacity:
            self.dropped += 1
            least = max(i for i, q in enumerate(queues) if q)
            if rank > least:
                if on_drop is not None:
                    on_drop()
                return  # full of more important writes: this one is the least of them
            _, (_, _, dropped) = queues[least].popitem(last=False)
            if dropped is not None:
                dropped()
        queues[rank][key] = (what, job, on_drop)
        self._wake_one()

    @property
    def queued(self) -> int:
        return sum(len(q) for q in self._queues)

    def _wake_one(self) -> None:
        self._idle.give()

    def _take(self) -> tuple[Hashable, str, Job] | None:
        for rank, queue in enumerate(self._queues):
            # first reports newest first: a gang just submitted is told why it waits at once,
            # while a burst of first reports (a big submission, a restart) drains behind it
            for key in reversed(queue) if rank == FIRST else queue:
                if key not in self._busy:
                    what, job, _ = queue.pop(key)
                    self._busy.add(key)
                    return key, what, job
        return None

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._work()) for _ in range(self._workers)]

    @property
    def idle(self) -> bool:
        return not self.queued and not self._busy

    async def drain(self, timeout: float = 10.0) -> None:
        """Wait, up to ``timeout`` seconds, until everything queued is sent; from now on in the
        foreground lane of the rate limit (nothing else is sent any more)."""
        self._background = False
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.idle and loop.time() < deadline:
            await asyncio.sleep(0.05)
        if not self.idle:
            log.warning("writes not sent before shutdown", queued=self.queued)

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    async def _work(self) -> None:
        while True:
            item = self._take()
            if item is None:
                await self._idle.wait()
                continue
            key, what, job = item
            try:
                with background_lane() if self._background else contextlib.nullcontext():
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
                if any(key in q for q in self._queues):
                    self._wake_one()
