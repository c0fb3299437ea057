"""A failure inside gangsched while it decides a gang (kube/service.py ``_hold_back``): the
process stops, as on any error of its own, but first records the failure in the status of the
gang's unbound pods and tells them why; the next process, started on what the API server holds,
holds that gang back and schedules the others (core/steps/quarantine.py). Against the fake API
server; tests/e2e/test_crash_safety.py does it with real processes on a real control plane."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from gangsched.api.schedulererror import CONDITION
from gangsched.core.steps.turn import Turn
from gangsched.kube.write.failpoints import FailpointError
from tests.kube.test_service import NODES, PODGROUPS, PODS, Rig, members, node, pod, podgroup, until
from tests.support.fakekube import FakeKube


class FailOn:
    """A first step that fails on one gang, as a bug in gangsched would."""

    def __init__(self, key: str) -> None:
        self.key = key

    def run(self, t: Turn) -> bool:
        if t.gang.key == self.key:
            raise FailpointError("deciding failed")
        return False


def record(kube: FakeKube, name: str) -> dict[str, object] | None:
    obj = kube.get_object(f"{PODS}/{name}") or {}
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == CONDITION:
            assert c["status"] == "True" and c["reason"] == "SchedulerError"
            return dict(json.loads(c["message"]))
    return None


def cluster(*gangs: str) -> FakeKube:
    """One node of 8 GPUs and a gang of 2 for each name."""
    kube = FakeKube()
    kube.seed(NODES, node("n0"))
    for name in gangs:
        kube.seed(PODGROUPS, podgroup(name, 2))
        kube.seed(PODS, *members(name, 2))
    return kube


async def stopped(rig: Rig) -> BaseException:
    assert rig.task is not None
    done, _ = await asyncio.wait([rig.task], timeout=5)
    assert done, "the service went on"
    error = rig.task.exception()
    assert error is not None
    rig.task = None
    return error


async def test_a_gang_gangsched_fails_on_is_held_back_by_the_next_process() -> None:
    kube = cluster("bad")

    first = Rig(kube, error_hold_seconds=300)
    first.core.steps = (FailOn("ml/bad"), *first.core.steps)
    first.start()
    error = await stopped(first)
    assert "schedule stopped" in str(error)
    assert isinstance(error.__cause__, FailpointError)
    for name in ("bad-0", "bad-1"):
        assert record(kube, name) == {
            "count": 1,
            "until": "1970-01-01T00:21:40Z",  # the fake clock's 1,000 s + 300
            "error": "FailpointError: deciding failed",
        }
        condition = first.condition(name)
        assert condition is not None and condition["reason"] == "SchedulerError"
        assert "FailpointError: deciding failed" in condition["message"]
    assert {r.path for r in kube.sent("patch") if "/pods/" in r.path} == {
        f"{PODS}/bad-0/status",
        f"{PODS}/bad-1/status",
    }, "written through pods/status only (the scheduler has no patch on pods)"
    first.reporter.flush()
    await first.outbox.drain(2.0)
    await first.stop()
    assert first.event_pods("FailedScheduling") == {"bad-0", "bad-1"}
    assert first.bindings() == []

    # The next process: the same cluster, a gang that came meanwhile, no failure.
    kube.seed(PODGROUPS, podgroup("good", 2))
    kube.seed(PODS, *members("good", 2))
    second = Rig(kube)
    second.start()
    try:
        await until("the other gang bound", lambda: len(second.bindings()) == 2, timeout=5)
        assert sorted(second.bindings()) == ["good-0", "good-1"]
        view = second.core.view("ml/bad")
        assert view is not None and view.reason == "SchedulerError"
        assert "held back until 1970-01-01T00:21:40Z" in view.message
        # once its hold is over it is scheduled (the clock of this core is the fake's)
        second.clock.advance(301)
        second.service.poke()
        await until("the held gang bound", lambda: len(second.bindings()) == 4, timeout=5)
    finally:
        await second.stop()


async def test_setting_the_condition_to_false_tries_the_gang_at_once() -> None:
    kube = cluster("bad")
    first = Rig(kube)
    first.core.steps = (FailOn("ml/bad"), *first.core.steps)
    first.start()
    await stopped(first)
    await first.stop()

    second = Rig(kube)
    second.start()
    try:
        await until("the gang held back", lambda: second.core.view("ml/bad") is not None)
        await until(
            "held back",
            lambda: getattr(second.core.view("ml/bad"), "reason", "") == "SchedulerError",
        )
        for name in ("bad-0", "bad-1"):
            obj = kube.get_object(f"{PODS}/{name}") or {}
            for c in obj["status"]["conditions"]:
                if c["type"] == CONDITION:
                    c["status"] = "False"
            kube.seed(PODS, obj)
        await until("the gang bound", lambda: len(second.bindings()) == 2, timeout=5)
    finally:
        await second.stop()


async def test_a_second_failure_doubles_the_hold() -> None:
    kube = cluster("bad")
    for count, until_text in ((1, "1970-01-01T00:26:40Z"), (2, "1970-01-01T00:53:20Z")):
        rig = Rig(kube, error_hold_seconds=600)
        rig.clock.advance(0 if count == 1 else 1000)  # past the first hold: 2,000 + 1,200 s
        rig.core.steps = (FailOn("ml/bad"), *rig.core.steps)
        rig.start()
        await stopped(rig)
        await rig.stop()
        assert record(kube, "bad-0") == {
            "count": count,
            "until": until_text,
            "error": "FailpointError: deciding failed",
        }


async def test_a_scheduler_deposed_by_the_time_it_failed_records_nothing() -> None:
    kube = cluster("bad")
    rig = Rig(kube)
    rig.core.steps = (FailOn("ml/bad"), *rig.core.steps)

    real_sure = rig.service._sure

    def lose_at_failure() -> bool:
        return real_sure() and rig.core.deciding is None

    rig.service._sure = lose_at_failure  # type: ignore[method-assign]
    rig.start()
    await stopped(rig)
    await rig.stop()
    assert record(kube, "bad-0") is None


# ---- errors in work that carries out decisions, and in work that decides nothing ----------


async def test_a_binding_that_fails_unexpectedly_stops_the_service() -> None:
    """What the binding did is unknown to the core: the process must start again from what the
    API server holds, rather than go on with pods counted as reserved forever."""
    kube = cluster("train")
    rig = Rig(kube)

    async def broken(*_: object) -> list[object]:
        raise ZeroDivisionError("a bug")

    rig.binder.bind_gang = broken  # type: ignore[assignment,method-assign]
    rig.start()
    error = await stopped(rig)
    await rig.stop()
    assert "carrying out a decision failed" in str(error)
    assert isinstance(error.__cause__, ZeroDivisionError)


def errors_counted(rig: Rig, work: str) -> float:
    value = rig.service.metrics.internal_errors.labels(work)._value.get()
    return float(value)


async def test_a_failed_round_of_forecasts_is_counted_and_scheduling_goes_on() -> None:
    kube = cluster()
    rig = Rig(kube, forecast_seconds=0.01)
    calls = 0

    async def broken() -> float:
        nonlocal calls
        calls += 1
        raise KeyError("a bug")

    rig.service.forecast_round = broken  # type: ignore[method-assign]
    rig.start()
    try:
        await until("a round failed", lambda: errors_counted(rig, "forecast") == 1, timeout=5)
        kube.seed(PODGROUPS, podgroup("train", 2))
        kube.seed(PODS, *members("train", 2))
        await until("the gang bound", lambda: len(rig.bindings()) == 2, timeout=5)
        assert rig.task is not None and not rig.task.done()
    finally:
        await rig.stop()


async def test_a_failed_status_resync_is_counted_and_the_next_one_runs() -> None:
    kube = cluster()
    rig = Rig(kube)
    rig.service._status_resync = 0.01
    real = rig.service._report_all
    armed = False
    calls = 0

    async def flaky(force: bool) -> None:
        nonlocal armed, calls
        calls += 1
        if armed:
            armed = False
            raise KeyError("a bug")
        await real(force)

    rig.service._report_all = flaky  # type: ignore[method-assign]
    rig.start()
    try:
        await until("ready", rig.service.ready.is_set)
        await asyncio.sleep(0.05)
        armed, after = True, calls
        await until("two resyncs after the failed one", lambda: calls >= after + 3, timeout=5)
        assert errors_counted(rig, "status_resync") == 1
        assert rig.task is not None and not rig.task.done()
    finally:
        await rig.stop()


async def test_a_pod_a_watch_delivered_that_fails_is_told_counted_and_the_rest_taken_in() -> None:
    kube = cluster()
    rig = Rig(kube)
    real = rig.core.pod_upsert

    def flaky(pod: Any) -> None:
        if pod.name == "odd":
            raise KeyError("a bug")
        real(pod)

    rig.core.pod_upsert = flaky  # type: ignore[method-assign]
    rig.start()
    try:
        await until("ready", rig.service.ready.is_set)
        kube.seed(PODS, pod("odd"))
        kube.seed(PODGROUPS, podgroup("train", 2))
        kube.seed(PODS, *members("train", 2))
        await until("the gang bound", lambda: len(rig.bindings()) == 2, timeout=5)
        await until("counted", lambda: errors_counted(rig, "watch_event") == 1, timeout=5)
        assert rig.task is not None and not rig.task.done()
        # the pod is told why it is never scheduled
        await rig.outbox.drain(1.0)
        [told] = [e for e in rig.events("FailedScheduling") if e["regarding"]["name"] == "odd"]
        assert told["note"].startswith("SchedulerError: gangsched could not take the pod in")
        assert "KeyError" in told["note"]
    finally:
        await rig.stop()
