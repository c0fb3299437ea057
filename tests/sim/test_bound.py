"""The upper bound on the GPU share a placement can allocate (gangsched.sim.bound)."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.sim.bound import share_bound


def test_whole_gpus_alone_are_bounded_by_capacity_and_demand() -> None:
    assert share_bound([(1, 1000)] * 3, 8000).milli == 3000
    assert share_bound([(8, 1000)] * 2, 8000).milli == 8000
    assert share_bound([], 8000).share == 1.0


def test_shares_above_half_a_gpu_lose_the_rest_of_their_device() -> None:
    # 10 devices; ten shares of 810 and two whole GPUs (10,100 asked). Placing k of the 810s
    # leaves 10,000 - 190 k usable and loses 810 (10 - k) of the demand: best at k = 8, which
    # a placement reaches (8 devices of one share each, 2 whole GPUs).
    b = share_bound([(1, 810)] * 10 + [(1, 1000)] * 2, 10_000)
    assert (b.milli, b.demand, b.size) == (8480, 10_100, 810)


def test_small_shares_fill_the_rests() -> None:
    # the 190 left beside each 810 is filled by a 190: a perfect packing is possible
    b = share_bound([(1, 810)] * 4 + [(1, 190)] * 4, 4000)
    assert b.milli == 4000 and b.share == 1.0
    # a 200 does not fit beside an 810: it cannot fill a rest
    b = share_bound([(1, 810)] * 4 + [(1, 200)] * 4, 4000)
    assert b.milli < 4000 and b.size == 810


def _best_packing(shares: list[int], devices: int) -> int:
    """The most milli-GPUs of ``shares`` (one device each) that fit on ``devices``: every
    assignment tried."""
    best = 0
    for choice in itertools.product(range(devices + 1), repeat=len(shares)):
        used = [0] * devices
        for m, d in zip(shares, choice, strict=True):
            if d < devices:
                used[d] += m
        if max(used, default=0) <= 1000:
            best = max(best, sum(used))
    return best


@settings(max_examples=150, deadline=None)
@given(
    devices=st.integers(1, 3),
    shares=st.lists(
        st.sampled_from([50, 160, 190, 200, 320, 470, 500, 510, 650, 810, 1000]),
        min_size=1,
        max_size=6,
    ),
)
def test_no_placement_beats_the_bound(devices: int, shares: list[int]) -> None:
    bound = share_bound([(1, m) for m in shares], devices * 1000)
    assert bound.milli >= _best_packing(shares, devices)
    assert bound.milli <= min(devices * 1000, sum(shares))
