"""The adapter's writes without an API server: the client's rate limit gives bindings priority
over informational writes, the outbox sends urgent writes first and flushes on shutdown, events
repeat as a series (as kube-scheduler's events.k8s.io recorder does), and watches retry at
once while the API server is away."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from gangsched.core.decisions import PodRef
from gangsched.kube.io import client as kclient
from gangsched.kube.io.client import ApiError, _TokenBucket, background_lane
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.io.reflector import ERROR_RETRY_MAX, OUTAGE_RETRY_MAX, Reflector
from gangsched.kube.write.events import EventRecorder

# ---- rate limit lanes ----------------------------------------------------------------------


async def test_bindings_do_not_wait_behind_a_backlog_of_informational_writes() -> None:
    bucket = _TokenBucket(qps=20, burst=8)  # half the burst is kept for the foreground lane
    background_done: list[float] = []

    async def informational() -> None:
        await bucket.take(background=True)
        background_done.append(time.monotonic())

    backlog = [asyncio.create_task(informational()) for _ in range(40)]
    await asyncio.sleep(0.3)  # the backlog is draining at the full rate
    assert 4 <= len(background_done) < 40
    t0 = time.monotonic()
    for _ in range(4):  # a gang of four bindings
        await bucket.take()
    waited = time.monotonic() - t0
    assert waited < 0.1, f"the bindings waited {waited:.2f}s behind informational writes"
    for t in backlog:
        t.cancel()
    await asyncio.gather(*backlog, return_exceptions=True)


async def test_the_lanes_together_keep_to_qps_and_burst() -> None:
    qps, burst = 50, 10
    bucket = _TokenBucket(qps, burst)
    stamps: list[float] = []

    async def take(background: bool) -> None:
        await bucket.take(background)
        stamps.append(time.monotonic())

    t0 = time.monotonic()
    await asyncio.gather(*(take(i % 3 == 0) for i in range(40)))
    elapsed = time.monotonic() - t0
    assert len(stamps) == 40
    assert elapsed >= (40 - burst) / qps * 0.95


async def test_the_background_lane_is_the_requests_inside_background_lane() -> None:
    seen: list[bool] = []

    class Bucket(_TokenBucket):
        async def take(self, background: bool = False) -> None:
            seen.append(background)

    class Client(kclient.KubeClient):
        def __init__(self) -> None:
            self._bucket = Bucket(1, 1)
            self._in_flight = self._in_flight_background = asyncio.Semaphore(1)
            self._direct = None
            self._prefetched = {}
            self._share = kclient._Share(1)

        async def _raw(self, *args: Any, **kwargs: Any) -> Any:
            raise ApiError(0, "test")

    client = Client()
    for lane in (False, True):
        with background_lane() if lane else contextlib.nullcontext(), pytest.raises(ApiError):
            await client.get("/api/v1/pods")
    assert seen == [False, True]


# ---- outbox ----------------------------------------------------------------------------------


async def test_outbox_sends_urgent_writes_first_and_in_the_background_lane() -> None:
    outbox = Outbox(workers=1)
    order: list[tuple[str, bool]] = []

    def job(name: str) -> Any:
        async def run() -> None:
            order.append((name, kclient._background.get()))

        return run

    for i in range(3):
        outbox.put("event", job(f"failed-{i}"))
    outbox.put("event", job("scheduled"), urgent=True)
    outbox.start()
    while not outbox.idle:
        await asyncio.sleep(0.01)
    assert next(n for n, _ in order) == "scheduled"
    assert all(lane for _, lane in order), "informational writes go in the background lane"
    await outbox.stop()


async def test_outbox_flushes_in_the_foreground_lane_on_shutdown() -> None:
    outbox = Outbox(workers=1)
    lanes: list[bool] = []

    async def run() -> None:
        lanes.append(kclient._background.get())

    outbox.put("event", run)
    outbox.start()
    await outbox.drain(5)
    await outbox.stop()
    assert lanes == [False]


async def test_a_full_outbox_drops_informational_writes_before_urgent_ones() -> None:
    outbox = Outbox(capacity=2)
    done: list[str] = []

    def job(name: str) -> Any:
        async def run() -> None:
            done.append(name)

        return run

    outbox.put("event", job("scheduled"), urgent=True)
    outbox.put("event", job("failed-0"))
    outbox.put("event", job("failed-1"))
    assert outbox.dropped == 1
    outbox.start()
    await outbox.drain(5)
    await outbox.stop()
    assert done == ["scheduled", "failed-1"]


# ---- events as a series ------------------------------------------------------------------------


class EventClient:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: list[tuple[str, dict[str, Any]]] = []
        self.missing: set[str] = set()

    async def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        return body

    async def merge_patch(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        name = path.rsplit("/", 1)[1]
        if name in self.missing:
            raise ApiError(404, "Not Found")
        self.patched.append((name, body))
        return body


POD = PodRef("uid-1", "ml", "train-0")


async def _recorder(**kwargs: Any) -> tuple[EventRecorder, EventClient, Outbox]:
    client = EventClient()
    outbox = Outbox(workers=1)
    outbox.start()
    recorder = EventRecorder(client, outbox, "gangsched.io/gangsched", "test", **kwargs)  # type: ignore[arg-type]
    return recorder, client, outbox


async def _settle(outbox: Outbox, seconds: float = 0.0) -> None:
    await asyncio.sleep(seconds)
    await outbox.drain(5)
    outbox._background = True


async def test_repeats_of_an_event_are_a_series_not_new_events() -> None:
    recorder, client, outbox = await _recorder(refresh=0.2)
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "needs 8 GPUs")
    await _settle(outbox)
    for _ in range(4):  # four more attempts of the gang, the same message
        recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "needs 8 GPUs")
    await _settle(outbox)
    assert len(client.created) == 1
    first = client.created[0]
    assert "series" not in first
    assert first["note"] == "needs 8 GPUs"
    assert first["regarding"]["uid"] == "uid-1"
    # the repeats are written as the series' count, at most every `refresh` seconds
    await _settle(outbox, 0.4)
    assert len(client.created) == 1
    [(name, patch)] = client.patched
    assert name == first["metadata"]["name"]
    assert patch["series"]["count"] == 5
    assert patch["series"]["lastObservedTime"].endswith("Z")
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "needs 8 GPUs")
    await _settle(outbox, 0.4)
    assert [p["series"]["count"] for _, p in client.patched] == [5, 6]
    await outbox.stop()


async def test_a_new_message_is_a_new_event_but_not_at_every_attempt() -> None:
    recorder, client, outbox = await _recorder(note_gap=0.3)
    for i in range(1, 4):
        recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", f"{i} of 4 exist")
        await _settle(outbox)
    assert [e["note"] for e in client.created] == ["1 of 4 exist"]
    await _settle(outbox, 0.5)
    assert [e["note"] for e in client.created] == ["1 of 4 exist", "3 of 4 exist"]
    await outbox.stop()


async def test_a_binding_drops_what_the_failed_attempts_had_not_written() -> None:
    recorder, client, outbox = await _recorder(note_gap=0.2)
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "1 of 2 exist")
    await _settle(outbox)
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "waiting")
    await _settle(outbox)
    recorder.forget(POD.uid, "FailedScheduling")
    recorder.record(POD, "Normal", "Scheduled", "Binding", "assigned", urgent=True)
    await _settle(outbox, 0.4)
    assert [e["reason"] for e in client.created] == ["FailedScheduling", "Scheduled"]
    assert len(recorder) == 1
    await outbox.stop()


async def test_flush_writes_what_waits_for_its_time() -> None:
    recorder, client, outbox = await _recorder(refresh=3600, note_gap=3600)
    other = PodRef("uid-2", "ml", "train-1")
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "a")
    recorder.record(other, "Warning", "FailedScheduling", "Scheduling", "a")
    await _settle(outbox)
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "a")
    recorder.record(other, "Warning", "FailedScheduling", "Scheduling", "b")
    await _settle(outbox)
    assert len(client.created) == 2 and not client.patched
    recorder.flush()
    await _settle(outbox)
    assert [p["series"]["count"] for _, p in client.patched] == [2]
    assert [e["note"] for e in client.created] == ["a", "a", "b"]
    await outbox.stop()


async def test_a_series_whose_event_expired_is_written_anew() -> None:
    recorder, client, outbox = await _recorder(refresh=0.1)
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "a")
    await _settle(outbox)
    client.missing.add(client.created[0]["metadata"]["name"])
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "a")
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "a")
    await _settle(outbox, 0.3)
    assert len(client.created) == 2
    assert client.created[1]["series"]["count"] == 3
    await outbox.stop()


async def test_a_series_is_over_after_the_finish_time() -> None:
    now = [1000.0]
    recorder, client, outbox = await _recorder(refresh=0.0, finish=360, monotonic=lambda: now[0])
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "a")
    await _settle(outbox)
    now[0] += 400
    recorder.record(POD, "Warning", "FailedScheduling", "Scheduling", "a")
    await _settle(outbox)
    assert len(client.created) == 2 and not client.patched
    await outbox.stop()


# ---- watches after an outage -------------------------------------------------------------------


class DownClient:
    def __init__(self, status: int) -> None:
        self.status = status
        self.calls = 0

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.calls += 1
        raise ApiError(self.status, "down")

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        raise ApiError(self.status, "down")
        yield {}


@pytest.mark.parametrize(
    ("status", "cap"),
    [
        (0, OUTAGE_RETRY_MAX),
        (503, OUTAGE_RETRY_MAX),
        (429, OUTAGE_RETRY_MAX),
        (403, ERROR_RETRY_MAX),
    ],
)
async def test_watch_retries_stay_short_while_the_api_server_is_away(
    status: int, cap: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        delays.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    client = DownClient(status)
    reflector = Reflector(client, "/api/v1/pods", lambda kind, obj: None, name="pods")  # type: ignore[arg-type]
    task = asyncio.create_task(reflector.run())
    while len(delays) < 40:
        await real_sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert max(delays) <= cap
    assert max(delays[20:]) >= cap / 2  # it backs off up to the cap, with jitter
    assert reflector.failures >= 40
