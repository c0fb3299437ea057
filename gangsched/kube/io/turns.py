"""Tasks waiting for a turn, first come first served: what the client's lanes, the outbox's
idle workers and the connection pool's waiting requests each keep."""

from __future__ import annotations

import asyncio
import collections

__all__ = ["Turns"]


class Turns:
    """A queue of waiting tasks. :meth:`wait` waits until :meth:`give` gives this task a turn;
    a task cancelled after it was given one, before it ran, hands the turn to the next."""

    def __init__(self) -> None:
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    def __len__(self) -> int:
        return len(self._waiting)

    async def wait(self) -> None:
        waiter = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.give()  # the turn this one was given goes to the next
            elif waiter in self._waiting:  # (a turn given may have passed it over already)
                self._waiting.remove(waiter)
            raise

    def give(self, n: int = 1) -> None:
        """Give the first ``n`` waiting tasks their turn (fewer if fewer wait)."""
        while n and self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                n -= 1
