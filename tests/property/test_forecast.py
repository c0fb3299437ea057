"""A start forecast is what the scheduler then does, when nothing else arrives.

Random gangs with declared run times arrive on a small GPU cluster, some of them at once and
some seconds apart, so that the waiting ones have failed different numbers of times and back
off for different lengths. At a random moment every waiting gang's start is forecast (with
every declared end taken at its own time: ``exact``). Then the live core is driven on, with no
new arrivals: each running pod ends at its declared end, and the core is run at each end and
at each of its own wake-ups (backoff expiries, flushes), as the service runs it. Every gang
forecast with a time starts at that time, and every gang that starts was forecast to.

This holds only because the twin is the live core's state exactly: the backoff each gang is
in and how many times it failed (a freed GPU goes to the first gang whose retry comes, not
to the first in queue order), and the live reservation.

With priorities, gangs of higher priority preempt whole gangs of lower priority; the twin
carries out an eviction at once (the victims are gone the moment it is decided), and so does
the driver here: the forecast holds for that adapter, not for one whose victims take their
grace period to go.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Evict, Preempt
from gangsched.core.forecast import Forecast
from tests.core.test_scheduler import Harness, gpu_node, members

PROPERTY = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass(frozen=True)
class GangDef:
    size: int
    gpus: int
    runtime: float
    gap: float  # seconds after the previous gang arrives
    priority: int = 0


def _gang_defs(priorities: list[int]) -> st.SearchStrategy[GangDef]:
    return st.builds(
        GangDef,
        size=st.integers(1, 3),
        gpus=st.sampled_from([1, 2, 4, 8]),
        runtime=st.integers(5, 400).map(float),
        gap=st.sampled_from([0.0, 0.0, 0.3, 1.0, 2.5, 7.0]),
        priority=st.sampled_from(priorities),
    )


# the cluster, when the forecast is asked, and whether reservations are on
SETTING = {
    "nodes": st.integers(1, 3),
    "asked_after": st.sampled_from([0.0, 0.5, 3.0, 12.0]),
    "reservation_after": st.sampled_from([None, 5.0]),
}


@dataclass
class Stats:
    known: int = 0
    waited: int = 0  # forecasts of a time later than when they were made


STATS = Stats()


def _drive(
    h: Harness, ends: list[tuple[float, str]], starts: dict[str, float], until: float
) -> None:
    """Run the live core on, with no arrivals: running pods end at their declared ends
    (once none is left, for one more minute and a bit: a gang's last retry, a flush)."""
    busy = h.clock.now()  # the last time a running pod had an end to come
    while h.clock.now() < min(until, busy + 70.0):
        if ends:
            busy = h.clock.now()
        t_end = ends[0][0] if ends else None
        t_wake = h.s.next_wakeup()
        times = [t for t in (t_end, t_wake) if t is not None]
        if not times:
            return
        h.clock.set(max(min(times), h.clock.now()))
        while ends and ends[0][0] <= h.clock.now():
            _, uid = heapq.heappop(ends)
            if uid in h.s.cache.pods:
                h.finish(uid)
        _run(h, ends, starts)


def _run(h: Harness, ends: list[tuple[float, str]], starts: dict[str, float]) -> None:
    """Run the core and carry its decisions out; again at once after an eviction, as the
    service runs it when the victims' deletion comes in."""
    while _record(h, h.run(), ends, starts):
        pass


def _record(
    h: Harness, decisions: Sequence[object], ends: list[tuple[float, str]], starts: dict[str, float]
) -> bool:
    """Carry the decisions out; whether any pod was evicted."""
    now = h.clock.now()
    evicted = False
    for d in decisions:
        if isinstance(d, (Preempt, Evict)):
            for v in d.victims:  # gone at once, as the twin has them go
                if v.pod.uid in h.s.cache.pods:
                    h.s.pod_delete(v.pod.uid)
                    evicted = True
        elif isinstance(d, BindGang):
            starts.setdefault(d.gang, now)
            spec = h.s.specs.get(d.gang)
            runtime = spec.expected_runtime_seconds if spec is not None else None
            assert runtime is not None
            for b in d.bindings:
                heapq.heappush(ends, (now + runtime, b.pod.uid))
    return evicted


@PROPERTY
@given(gangs=st.lists(_gang_defs([0]), min_size=3, max_size=10), **SETTING)
def test_a_forecast_is_what_the_scheduler_does_when_nothing_else_arrives(
    gangs: list[GangDef], nodes: int, asked_after: float, reservation_after: float | None
) -> None:
    _forecast_then_drive(gangs, nodes, asked_after, reservation_after)


@PROPERTY
@given(gangs=st.lists(_gang_defs([0, 0, 10, 100]), min_size=3, max_size=10), **SETTING)
def test_with_priorities_and_preemption_too(
    gangs: list[GangDef], nodes: int, asked_after: float, reservation_after: float | None
) -> None:
    _forecast_then_drive(gangs, nodes, asked_after, reservation_after)


def _forecast_then_drive(
    gangs: list[GangDef], nodes: int, asked_after: float, reservation_after: float | None
) -> None:
    config = CoreConfig(
        backoff_initial_seconds=1.0,
        backoff_max_seconds=10.0,
        reservation_after_seconds=reservation_after,
    )
    h = Harness(config, *(gpu_node(f"n{i}", 8) for i in range(nodes)))
    ends: list[tuple[float, str]] = []
    starts: dict[str, float] = {}
    # the gangs arrive: the core runs at each arrival, and at its wake-ups in between
    for i, g in enumerate(gangs):
        _drive(h, ends, starts, h.clock.now() + g.gap)
        key = f"ml/g{i}"
        h.gang(key, g.size, expected_runtime_seconds=g.runtime, created=h.clock.now())
        h.add(*members(key, g.size, gpus=g.gpus, created=h.clock.now(), priority=g.priority))
        _run(h, ends, starts)
    _drive(h, ends, starts, h.clock.now() + asked_after)
    asked_at = h.clock.now()
    got = Forecast(h.s, exact=True).run()
    _drive(h, ends, starts, asked_at + 30 * 24 * 3600.0)

    for key, estimate in got.items():
        if estimate.at is None:
            # unknown only for a gang too big for the cluster (every blocker declared its end)
            assert key not in starts, (key, estimate)
            assert estimate.basis == "does not fit even once every running pod has ended"
            continue
        STATS.known += 1
        STATS.waited += estimate.at > asked_at
        assert key in starts, (key, estimate)
        assert abs(estimate.at - starts[key]) < 1e-6, (key, estimate, starts[key])


def test_the_property_above_is_not_vacuous() -> None:
    """Run after it: the examples forecast many known starts, most of them ahead."""
    assert STATS.known >= 60 and STATS.waited >= 60, STATS
