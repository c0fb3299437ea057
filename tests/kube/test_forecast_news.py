"""Which new start forecasts are written (gangsched/kube/service.py: moved)."""

from __future__ import annotations

from gangsched.core.forecast import Estimate
from gangsched.kube.service import FORECAST_MOVE, moved

NOW = 10_000.0


def test_a_known_forecast_that_moved_by_little_against_its_wait_stands() -> None:
    was = Estimate(NOW + 3600, "after ml/a ends (declared run time 1h0m)", ("ml/a",))
    # 5% of an hour's wait is 180 s: 170 s later, and another blocker, is not news
    assert not moved(was, Estimate(NOW + 3770, "after ml/b ends", ("ml/b",)), NOW)
    assert moved(was, Estimate(NOW + 3790, "after ml/b ends", ("ml/b",)), NOW)
    assert moved(was, Estimate(NOW + 3400, "after ml/b ends", ("ml/b",)), NOW)


def test_a_near_forecast_moves_by_at_least_a_minute_before_it_is_news() -> None:
    was = Estimate(NOW + 120, "after ml/a ends", ("ml/a",))
    assert not moved(was, Estimate(NOW + 120 + FORECAST_MOVE, "after ml/a ends"), NOW)
    assert moved(was, Estimate(NOW + 121 + FORECAST_MOVE, "after ml/a ends"), NOW)


def test_a_published_time_that_has_passed_is_replaced() -> None:
    was = Estimate(NOW - 1, "after ml/a ends", ("ml/a",))
    assert moved(was, Estimate(NOW + 5, "after ml/a ends", ("ml/a",)), NOW)


def test_known_and_unknown_are_always_news_and_an_unknown_names_its_blocker() -> None:
    known = Estimate(NOW + 600, "after ml/a ends")
    unknown = Estimate(None, "waits for ml/a, which declared no run time", ("ml/a",))
    assert moved(known, unknown, NOW) and moved(unknown, known, NOW)
    assert not moved(unknown, unknown, NOW)
    other = Estimate(None, "waits for ml/b, which declared no run time", ("ml/b",))
    assert moved(unknown, other, NOW)
