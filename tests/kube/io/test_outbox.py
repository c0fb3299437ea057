"""The outbox: urgent writes first, one write per key (the latest), the oldest informational
writes dropped beyond the bound, failures counted without stopping the workers, the
background lane while running and the foreground lane once draining, and a bounded drain."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from gangsched.kube.io import client as kclient
from gangsched.kube.io.client import ApiError
from gangsched.kube.io.outbox import Outbox

Job = Callable[[], Awaitable[object]]


class Log:
    """Jobs that record their name (and lane) when they run, optionally waiting for a gate."""

    def __init__(self) -> None:
        self.ran: list[str] = []
        self.lanes: list[bool] = []
        self.running: set[str] = set()
        self.overlaps: list[str] = []

    def job(self, name: str, gate: asyncio.Event | None = None, key: str = "") -> Job:
        async def run() -> None:
            if key in self.running:
                self.overlaps.append(key)
            self.running.add(key)
            self.lanes.append(kclient._background.get())  # the lane it is sent in
            try:
                if gate is not None:
                    await gate.wait()
                self.ran.append(name)
            finally:
                self.running.discard(key)

        return run


async def _until_idle(outbox: Outbox) -> None:
    for _ in range(1000):
        if outbox.idle:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"outbox not idle: {outbox.queued} queued")


async def test_urgent_writes_go_first_each_queue_in_order() -> None:
    log, outbox = Log(), Outbox(workers=1)
    for name, urgent in [("n1", False), ("u1", True), ("n2", False), ("u2", True)]:
        outbox.put("event", log.job(name), urgent=urgent)
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["u1", "u2", "n1", "n2"]
    assert all(log.lanes), "while running, every write goes in the background lane"
    assert (outbox.done, outbox.failed, outbox.dropped) == (4, 0, 0)


async def test_only_the_latest_write_of_a_key_runs_in_the_first_ones_place() -> None:
    log, outbox = Log(), Outbox(workers=1)
    outbox.put("status", log.job("a-old"), key="a")
    outbox.put("status", log.job("b"), key="b")
    outbox.put("status", log.job("a-new"), key="a")
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["a-new", "b"]
    assert outbox.dropped == 0, "a write replaced by a newer one is coalesced, not dropped"


async def test_a_key_has_at_most_one_write_in_flight_and_the_next_waits_for_it() -> None:
    log, outbox = Log(), Outbox(workers=4)
    outbox.start()
    gate = asyncio.Event()
    outbox.put("status", log.job("first", gate, key="a"), key="a")
    await asyncio.sleep(0.01)  # the first is in flight, held
    outbox.put("status", log.job("second", key="a"), key="a")
    outbox.put("status", log.job("other", key="b"), key="b")
    await asyncio.sleep(0.01)
    assert log.ran == ["other"], "another key goes on; the same key waits"
    gate.set()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["other", "first", "second"]
    assert log.overlaps == []


async def test_an_urgent_write_takes_over_a_queued_key_and_jumps_the_queue() -> None:
    log, outbox = Log(), Outbox(workers=1)
    outbox.put("event", log.job("n1"))
    outbox.put("event", log.job("k-normal"), key="k")
    outbox.put("event", log.job("k-urgent"), key="k", urgent=True)
    # a later informational write for the key replaces the job, but keeps it urgent
    outbox.put("event", log.job("k-latest"), key="k")
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["k-latest", "n1"]


async def test_beyond_the_bound_the_oldest_informational_write_is_dropped() -> None:
    log, outbox = Log(), Outbox(workers=1, capacity=3)
    outbox.put("event", log.job("u"), urgent=True)
    for i in range(4):
        outbox.put("event", log.job(f"n{i}"))
    assert (outbox.queued, outbox.dropped) == (3, 2)
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["u", "n2", "n3"]


async def test_a_full_queue_of_urgent_writes_drops_the_informational_one_not_an_urgent_one() -> (
    None
):
    log, outbox = Log(), Outbox(workers=1, capacity=2)
    outbox.put("event", log.job("scheduled-a"), urgent=True)
    outbox.put("event", log.job("scheduled-b"), urgent=True)
    outbox.put("event", log.job("failed"))
    assert (outbox.queued, outbox.dropped) == (2, 1)
    outbox.start()
    await _until_idle(outbox)
    assert log.ran == ["scheduled-a", "scheduled-b"]
    await outbox.stop()


async def test_a_full_queue_of_urgent_writes_drops_the_oldest_for_a_new_urgent_one() -> None:
    log, outbox = Log(), Outbox(workers=1, capacity=2)
    for name in ("scheduled-a", "scheduled-b", "scheduled-c"):
        outbox.put("event", log.job(name), urgent=True)
    assert outbox.dropped == 1
    outbox.start()
    await _until_idle(outbox)
    assert log.ran == ["scheduled-b", "scheduled-c"]
    await outbox.stop()


async def test_failed_writes_are_counted_and_the_workers_go_on() -> None:
    log, outbox = Log(), Outbox(workers=1)

    async def refused() -> None:
        raise ApiError(403, "Forbidden")

    async def broken() -> None:
        raise KeyError("a bug in one write")

    outbox.put("event", refused)
    outbox.put("event", broken)
    outbox.put("event", log.job("after"))
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["after"]
    assert (outbox.done, outbox.failed) == (1, 2)


async def test_drain_sends_in_the_foreground_lane_and_gives_up_at_its_timeout() -> None:
    log, outbox = Log(), Outbox(workers=1)
    outbox.start()
    gate = asyncio.Event()
    outbox.put("event", log.job("held", gate))
    outbox.put("event", log.job("queued"))
    await asyncio.sleep(0.01)  # "held" is in flight
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await outbox.drain(timeout=0.1)
    assert 0.1 <= loop.time() - t0 < 0.5
    assert not outbox.idle and log.ran == []
    gate.set()
    await outbox.drain(timeout=5)
    assert outbox.idle and log.ran == ["held", "queued"]
    # "held" started in the background lane; "queued" was sent while draining
    assert log.lanes == [True, False]
    await outbox.stop()


async def test_stop_cancels_the_write_in_flight_and_sends_nothing_more() -> None:
    log, outbox = Log(), Outbox(workers=2)
    outbox.start()
    outbox.put("event", log.job("held", asyncio.Event()))
    await asyncio.sleep(0.01)
    await outbox.stop()
    outbox.put("event", log.job("late"))
    await asyncio.sleep(0.01)
    assert log.ran == [] and outbox.queued == 1 and outbox.done == 0


async def test_first_reports_go_after_urgent_writes_and_before_the_backlog() -> None:
    """A gang that became complete is told why it waits before the backlog of updates for
    thousands of pending pods is worked through: first reports have their own queue."""
    log, outbox = Log(), Outbox(workers=1)
    for i in range(3):
        outbox.put("condition", log.job(f"update{i}"), key=f"old{i}")
    outbox.put("condition", log.job("first"), key="new", first=True)
    outbox.put("event", log.job("scheduled"), urgent=True)
    # an update of a key whose first report is queued replaces it in the first report's place
    outbox.put("condition", log.job("first-latest"), key="new")
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["scheduled", "first-latest", "update0", "update1", "update2"]


async def test_first_reports_go_newest_first() -> None:
    """A burst of first reports (a big submission, a restart) drains behind the gang
    submitted last, which is told at once why it waits."""
    log, outbox = Log(), Outbox(workers=1)
    for name in ("a", "b", "c"):
        outbox.put("condition", log.job(name), key=name, first=True)
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["c", "b", "a"]


async def test_a_full_queue_drops_the_backlog_before_first_reports_and_says_so() -> None:
    log, outbox = Log(), Outbox(workers=1, capacity=2)
    dropped: list[str] = []
    for key, first in (("old", False), ("a", True), ("b", True), ("old2", False)):
        outbox.put(
            "condition",
            log.job(key),
            key=key,
            first=first,
            on_drop=lambda key=key: dropped.append(key),  # type: ignore[misc]
        )
    # "b" dropped the update "old"; "old2", the least of all, was dropped itself
    assert (outbox.queued, outbox.dropped) == (2, 2)
    assert dropped == ["old", "old2"]
    outbox.start()
    await _until_idle(outbox)
    await outbox.stop()
    assert log.ran == ["b", "a"]
