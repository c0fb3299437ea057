"""The start forecast: the core run ahead on a twin through declared ends only. A known time
when every blocker declared its end, "unknown" naming the blocker otherwise, the queue ahead
counted, and the live core untouched."""

from __future__ import annotations

import pytest

from gangsched.core.config import CoreConfig
from gangsched.core.forecast import Estimate, Forecast, forecast, span
from tests.core.test_scheduler import T0, Harness, binds, gpu_node, members, pod


def two_nodes() -> Harness:
    return Harness(CoreConfig(backoff_max_seconds=1.0), gpu_node("n0", 8), gpu_node("n1", 8))


def running(h: Harness, key: str, size: int, gpus: int, runtime: float | None) -> None:
    """A gang of ``size`` pods of ``gpus`` GPUs, bound now; ``runtime``: its declared run."""
    h.gang(key, size, expected_runtime_seconds=runtime)
    h.add(*members(key, size, gpus=gpus))
    assert [b.gang for b in binds(h.run())] == [key]


def waiting(h: Harness, key: str, size: int, gpus: int, runtime: float | None = None) -> None:
    h.gang(key, size, expected_runtime_seconds=runtime, created=h.clock.now())
    h.add(*members(key, size, gpus=gpus))
    assert not binds(h.run())


def test_a_gang_starts_when_the_gang_it_waits_for_ends_as_declared() -> None:
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=7200.0)
    h.advance(600)
    waiting(h, "ml/b", 2, 8)
    got = forecast(h.s)
    assert got == {
        "ml/b": Estimate(T0 + 7200.0, "after ml/a ends (declared run time 2h0m)", ("ml/a",))
    }


def test_a_blocker_without_a_declared_end_makes_the_start_unknown_and_is_named() -> None:
    h = two_nodes()
    running(h, "ml/a", 1, 8, runtime=600.0)
    running(h, "ml/forever", 1, 8, runtime=None)
    waiting(h, "ml/b", 2, 8)
    got = forecast(h.s)["ml/b"]
    assert got.at is None and not got.known
    assert got.blockers == ("ml/forever",)
    assert got.basis == "waits for ml/forever, which declared no end"


def test_the_gangs_ahead_in_the_queue_go_first() -> None:
    """Both waiting gangs need the whole cluster: the second starts when the first, which
    starts when ml/a ends, ends in its turn."""
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=100.0)
    waiting(h, "ml/first", 2, 8, runtime=50.0)
    h.advance(1)
    waiting(h, "ml/second", 2, 8, runtime=50.0)
    got = forecast(h.s)
    assert got["ml/first"].at == T0 + 100.0
    assert got["ml/second"].at == T0 + 150.0
    assert got["ml/second"].basis == "after ml/first ends (declared run time 50s)"


def test_a_pods_active_deadline_is_an_upper_bound_on_its_end() -> None:
    h = two_nodes()
    h.add(pod("batch", gpus=8, active_deadline_seconds=900.0))
    h.add(pod("batch2", gpus=8, active_deadline_seconds=300.0))
    assert len(binds(h.run())) == 2
    waiting(h, "ml/b", 1, 8)
    got = forecast(h.s)["ml/b"]
    assert got.at == T0 + 300.0
    assert got.basis == "after default/batch2 ends (activeDeadlineSeconds 5m)"


def test_a_jobs_deadline_is_an_upper_bound_on_its_pods_end() -> None:
    """The earlier of the pod's own activeDeadlineSeconds and its Job's deadline."""
    h = two_nodes()
    h.add(pod("a", gpus=8, active_deadline_seconds=900.0, job_deadline=T0 + 600.0))
    h.add(pod("b", gpus=8, active_deadline_seconds=300.0, job_deadline=T0 + 1200.0))
    assert len(binds(h.run())) == 2
    waiting(h, "ml/w", 2, 8)
    got = forecast(h.s)["ml/w"]
    assert got.at == T0 + 600.0
    assert "after default/a ends (its Job's activeDeadlineSeconds)" in got.basis


def test_an_end_declared_and_already_past_is_not_known() -> None:
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=60.0)
    h.advance(120)  # ran past its declared end: when it ends is no longer known
    waiting(h, "ml/b", 2, 8)
    got = forecast(h.s)["ml/b"]
    assert got.at is None and got.blockers == ("ml/a",)


def test_a_gang_short_of_members_and_one_too_big_for_the_cluster() -> None:
    h = two_nodes()
    h.gang("ml/short", 3)
    h.add(*members("ml/short", 2, gpus=1))
    waiting(h, "ml/huge", 3, 8)
    h.run()
    got = forecast(h.s)
    assert "ml/short" not in got, "it waits for members, not capacity"
    assert got["ml/huge"].at is None and got["ml/huge"].blockers == ()
    assert got["ml/huge"].basis == "does not fit even once every running pod has ended"


def test_the_live_core_is_left_as_it_was() -> None:
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=100.0)
    waiting(h, "ml/b", 2, 8)
    before = (dict(h.s.cache.pods), h.s.clock.now(), h.s.view("ml/b"))
    forecast(h.s)
    assert (dict(h.s.cache.pods), h.s.clock.now(), h.s.view("ml/b")) == before
    h.advance(100)
    for p in members("ml/a", 2, gpus=8):
        h.finish(p.uid)
    h.advance(2)
    assert [b.gang for b in binds(h.run())] == ["ml/b"]


def test_span() -> None:
    assert [span(s) for s in (0, 40, 300, 330, 7200, 7500, 90000)] == [
        "0s",
        "40s",
        "5m",
        "5m30s",
        "2h0m",
        "2h5m",
        "1d1h",
    ]


def test_a_round_cut_short_by_its_budget_says_so_and_yields_between_slices() -> None:
    """The budget is looked at between slices: what started by then is known, the rest is
    said not to be forecast."""
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=100.0)
    waiting(h, "ml/b", 2, 8, runtime=50.0)
    h.advance(1)
    waiting(h, "ml/c", 2, 8)
    work = iter(range(1000))
    round_ = Forecast(h.s, budget=0.5, timer=lambda: float(next(work)))
    slices = sum(1 for _ in round_.steps())
    assert slices >= 2, "the work comes in slices"
    assert round_.cut_short
    assert round_.result["ml/b"].at == T0 + 100.0
    assert round_.result["ml/c"] == Estimate(None, "not forecast within 0.5s of work")
    whole = Forecast(h.s)
    assert whole.run()["ml/c"].at == T0 + 150.0 and not whole.cut_short


def test_only_the_first_gangs_in_queue_order_are_forecast_when_asked_so() -> None:
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=100.0)
    waiting(h, "ml/first", 2, 8, runtime=50.0)
    h.advance(1)
    waiting(h, "ml/second", 2, 8, runtime=50.0)
    got = Forecast(h.s, most=1).run()
    assert got["ml/first"].at == T0 + 100.0
    assert got["ml/second"] == Estimate(None, "not forecast: behind the first 1 waiting gangs")


def test_a_gang_the_twin_did_not_reach_within_its_steps_is_unknown_not_unfit() -> None:
    """The twin stops after ``max_steps``: a gang it had not started by then is not known,
    and says so (never "does not fit")."""
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=100.0)
    waiting(h, "ml/first", 2, 8, runtime=50.0)
    h.advance(1)
    waiting(h, "ml/second", 2, 8, runtime=50.0)
    steps = 1
    while (got := Forecast(h.s, max_steps=steps).run())["ml/first"].at is None:
        assert got["ml/first"] == Estimate(None, f"not forecast within {steps} steps of the twin")
        steps += 1
    assert got["ml/first"].at == T0 + 100.0
    assert got["ml/second"] == Estimate(None, f"not forecast within {steps} steps of the twin")
    assert Forecast(h.s).run()["ml/second"].at == T0 + 150.0


def test_an_adopted_core_forecasts_as_its_copy_does() -> None:
    """``adopt``: the twin is the core itself (what-if's, done with it), not a copy; the same
    estimates come out. A core on a real clock cannot be adopted."""
    h = two_nodes()
    running(h, "ml/a", 2, 8, runtime=100.0)
    waiting(h, "ml/first", 2, 8, runtime=50.0)
    h.advance(1)
    waiting(h, "ml/second", 1, 8)
    copied = Forecast(h.s).run()
    assert Forecast(h.s, adopt=True).run() == copied
    assert copied["ml/second"].at == T0 + 150.0

    class Clock:
        def now(self) -> float:
            return T0

    h.s.clock = Clock()
    with pytest.raises(ValueError, match="FakeClock"):
        Forecast(h.s, adopt=True)
