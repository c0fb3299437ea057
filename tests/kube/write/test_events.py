"""Events as a series (kube-scheduler's events.k8s.io recorder), against the fake API server
with an injected clock: one Event per pod, reason and note; repeats counted into its series at
most every ``refresh`` seconds; a new note at most every ``note_gap``; failed writes retried;
``forget`` drops what was not written."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gangsched.core.decisions import PodRef
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.write.events import EventRecorder
from tests.support.fakekube import FakeKube

EVENTS = "/apis/events.k8s.io/v1/namespaces/ml/events"
POD = PodRef("uid-1", "ml", "train-0")
OTHER = PodRef("uid-2", "ml", "train-1")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Rig:
    def __init__(self, kube: FakeKube | None = None, **kw: Any) -> None:
        self.kube = kube or FakeKube()
        self.outbox = Outbox(workers=1)
        self.clock = Clock()
        self.wall = 1_700_000_000.0
        kw = {"refresh": 60.0, "note_gap": 5.0, "monotonic": self.clock, **kw}
        self.recorder = EventRecorder(
            self.kube,
            self.outbox,
            "gangsched.io/gangsched",
            "replica-a",
            wall=lambda: self.wall,
            **kw,
        )

    def failed(self, note: str, pod: PodRef = POD, reason: str = "FailedScheduling") -> None:
        self.recorder.record(pod, "Warning", reason, "Scheduling", note)

    def later(self, seconds: float) -> None:
        self.clock.t += seconds
        self.wall += seconds

    async def settle(self) -> None:
        for _ in range(200):
            await asyncio.sleep(0)
            if self.outbox.idle:
                return
        raise AssertionError("outbox busy")

    def events(self) -> list[dict[str, Any]]:
        return self.kube.list_objects(EVENTS)

    def writes(self) -> list[tuple[str, str]]:
        return [(r.verb, r.path.removeprefix(EVENTS)) for r in self.kube.requests]


async def _rig(**kw: Any) -> Rig:
    rig = Rig(**kw)
    rig.outbox.start()
    return rig


async def test_the_first_occurrence_is_an_event_as_kube_scheduler_writes_it() -> None:
    rig = await _rig()
    rig.failed("0/4 nodes are available: 4 Insufficient nvidia.com/gpu.")
    await rig.settle()
    [event] = rig.events()
    assert event["metadata"]["name"].startswith("train-0.")
    assert {k: event[k] for k in ("type", "reason", "action", "note")} == {
        "type": "Warning",
        "reason": "FailedScheduling",
        "action": "Scheduling",
        "note": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
    }
    assert event["reportingController"] == "gangsched.io/gangsched"
    assert event["reportingInstance"] == "replica-a"
    assert event["regarding"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "ml",
        "name": "train-0",
        "uid": "uid-1",
    }
    assert event["eventTime"] == "2023-11-14T22:13:20.000000Z"
    assert "series" not in event
    await rig.outbox.stop()


async def test_repeats_count_into_the_series_at_most_every_refresh_seconds() -> None:
    rig = await _rig(refresh=0.05, monotonic=time.monotonic)  # the timers are the loop's
    rig.failed("needs 8 GPUs")
    await rig.settle()
    for _ in range(3):
        rig.later(10)
        rig.failed("needs 8 GPUs")
        await rig.settle()
    assert rig.writes() == [("create", "")], "no write before the refresh interval"
    await asyncio.sleep(0.1)
    await rig.settle()
    [event] = rig.events()
    assert rig.writes() == [("create", ""), ("patch", f"/{event['metadata']['name']}")]
    assert event["series"] == {"count": 4, "lastObservedTime": "2023-11-14T22:13:50.000000Z"}
    rig.failed("needs 8 GPUs")
    await asyncio.sleep(0.1)
    await rig.settle()
    [event] = rig.events()
    assert event["series"]["count"] == 5
    assert len(rig.writes()) == 3
    await rig.outbox.stop()


async def test_a_new_note_is_a_new_event_at_most_once_per_note_gap() -> None:
    rig = await _rig(note_gap=5.0)
    rig.failed("1 of 4 members exist")
    await rig.settle()
    rig.later(1)
    rig.failed("2 of 4 members exist")
    rig.later(1)
    rig.failed("3 of 4 members exist")
    await rig.settle()
    assert [e["note"] for e in rig.events()] == ["1 of 4 members exist"]
    rig.later(4)  # the gap has passed: the latest note is written
    rig.recorder.flush()
    await rig.settle()
    notes = sorted(e["note"] for e in rig.events())
    assert notes == ["1 of 4 members exist", "3 of 4 members exist"]
    await rig.outbox.stop()


async def test_each_pod_and_reason_is_a_series_of_its_own() -> None:
    rig = await _rig()
    rig.failed("a")
    rig.failed("a", pod=OTHER)
    rig.recorder.record(POD, "Normal", "Scheduled", "Binding", "assigned ml/train-0 to n1")
    await rig.settle()
    got = sorted((e["regarding"]["name"], e["reason"]) for e in rig.events())
    assert got == [
        ("train-0", "FailedScheduling"),
        ("train-0", "Scheduled"),
        ("train-1", "FailedScheduling"),
    ]
    assert len(rig.recorder) == 3
    await rig.outbox.stop()


async def test_urgent_events_are_written_before_queued_informational_ones() -> None:
    rig = Rig()  # not started: everything queues
    for i in range(3):
        rig.failed("no room", pod=PodRef(f"u{i}", "ml", f"p{i}"))
    rig.recorder.record(POD, "Normal", "Scheduled", "Binding", "bound", urgent=True)
    rig.outbox.start()
    await rig.settle()
    reasons = [r.body["reason"] for r in rig.kube.sent("create")]
    assert reasons == ["Scheduled", "FailedScheduling", "FailedScheduling", "FailedScheduling"]
    await rig.outbox.stop()


async def test_forget_drops_what_was_not_written() -> None:
    rig = await _rig(note_gap=5.0)
    rig.failed("1 of 2 members exist")
    rig.failed("x", reason="FailedBinding")
    await rig.settle()
    rig.later(1)
    rig.failed("waiting")  # waits for the note gap
    rig.recorder.forget(POD.uid, "FailedScheduling")
    assert len(rig.recorder) == 1, "the other reason stays"
    rig.later(10)
    rig.recorder.flush()
    await rig.settle()
    assert sorted(e["note"] for e in rig.events()) == ["1 of 2 members exist", "x"]
    rig.recorder.forget(POD.uid)
    assert len(rig.recorder) == 0
    await rig.outbox.stop()


async def test_a_retriable_failure_is_written_again_with_the_latest_count() -> None:
    rig = await _rig()
    rig.kube.fail("create", "/events$", 503)
    rig.failed("a")
    await rig.settle()
    assert rig.events() == [] and rig.outbox.failed == 1
    rig.failed("a")  # a repeat while the retry waits
    rig.recorder.flush()  # (the retry's timer, without waiting a second for it)
    await rig.settle()
    [event] = rig.events()
    assert event["series"]["count"] == 2
    await rig.outbox.stop()


async def test_an_event_that_expired_is_created_anew_with_its_count() -> None:
    rig = await _rig(refresh=0.0)
    rig.failed("a")
    await rig.settle()
    [first] = rig.events()
    rig.kube.remove(f"{EVENTS}/{first['metadata']['name']}")  # the API server's event TTL
    rig.failed("a")
    await rig.settle()
    [second] = rig.events()
    assert second["metadata"]["name"] != first["metadata"]["name"]
    assert second["series"]["count"] == 2
    assert [v for v, _ in rig.writes()] == ["create", "patch", "create"]
    await rig.outbox.stop()


async def test_a_series_is_over_after_six_minutes_without_a_repeat() -> None:
    rig = await _rig(refresh=0.0)
    rig.failed("a")
    await rig.settle()
    rig.later(361)
    rig.failed("a")
    await rig.settle()
    assert len(rig.events()) == 2
    assert all("series" not in e for e in rig.events())
    await rig.outbox.stop()


async def test_an_event_with_a_fixed_name_is_written_once_whoever_writes_it() -> None:
    """A restarted scheduler sends the Scheduled event again for a pod its predecessor bound:
    under its fixed name, the second create finds it there, and nothing is duplicated."""
    first = await _rig()
    note = "Successfully assigned ml/train-0 to n1"
    first.recorder.record(POD, "Normal", "Scheduled", "Binding", note, name="train-0.abc")
    await first.settle()
    second = Rig(first.kube)  # the same API server
    second.outbox.start()
    second.recorder.record(POD, "Normal", "Scheduled", "Binding", note, name="train-0.abc")
    await second.settle()
    [event] = first.events()
    assert event["metadata"]["name"] == "train-0.abc" and event["note"] == note
    assert (first.recorder.created, second.recorder.created) == (1, 0)
    assert second.recorder.existing == 1
