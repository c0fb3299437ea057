"""Properties of leader-first gangs (LeaderWorkerSet groups with exclusive topology) through the
whole core: random racks of random nodes, random groups (sizes, GPUs per pod) and plain pods
competing with them, the workers of a group created only once its leader is bound (pinned to
the leader's rack, as LWS does), some never, and time passing. Whatever the input:

- no node is ever over-committed, stand-ins for the members to come included;
- a group's leader is bound only where its rack could hold the whole group: while its
  workers have not all come, the room they need is held in that rack (the stand-ins), unless
  the hold was given back (timeout);
- every worker bound is in its leader's rack, and the workers bind together;
- a stand-in is never bound, and none is left once its group's workers came or its time ran
  out.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.leaderfirst import STAND_IN
from gangsched.core.model import GangSpec, LeaderFirst
from gangsched.core.resources import GPU
from tests.core.builders import make_node, make_pod
from tests.core.test_scheduler import Harness

RACK = "example.com/rack"
T0 = 1000.0
TIMEOUT = 60.0


def over_committed(h: Harness) -> list[str]:
    bad = []
    for name, info in h.s.cache.nodes.items():
        node = info.node
        if node is None:
            continue
        for res, amount in info.requested.items():
            if amount > node.allocatable.get(res, 0):
                bad.append(f"{name} {res} {amount} > {node.allocatable.get(res, 0)}")
    return bad


@st.composite
def scenarios(
    draw: st.DrawFn,
) -> tuple[list[tuple[str, int]], list[tuple[int, int, bool]], list[int]]:
    """(racks: (name, nodes of 4 GPUs), groups: (size, GPUs per pod, workers come), plain pods'
    GPUs)."""
    racks = [(f"r{i}", draw(st.integers(1, 3))) for i in range(draw(st.integers(1, 3)))]
    groups = draw(
        st.lists(
            st.tuples(st.integers(2, 4), st.integers(1, 4), st.booleans()), min_size=1, max_size=4
        )
    )
    plain = draw(st.lists(st.integers(1, 4), max_size=4))
    return racks, groups, plain


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_leader_first_groups_hold_room_and_never_over_commit(
    scenario: tuple[list[tuple[str, int]], list[tuple[int, int, bool]], list[int]],
) -> None:
    racks, groups, plain = scenario
    nodes = [
        make_node(f"{r}-{i}").cpu("64").memory("256Gi").gpus(4).label(RACK, r).node()
        for r, n in racks
        for i in range(n)
    ]
    h = Harness(CoreConfig(default_schedule_timeout_seconds=TIMEOUT), *nodes)
    rack_of = {n.name: n.labels[RACK] for n in nodes}
    capacity = defaultdict(int)
    for n in nodes:
        capacity[n.labels[RACK]] += 4
    leaders: dict[str, str] = {}  # gang -> leader uid
    for g, (size, gpus, _) in enumerate(groups):
        key = f"ml/g{g}"
        h.s.gang_upsert(GangSpec(key, size, min_resources={GPU: size * gpus}, created=T0))
        leader = replace(
            make_pod(f"g{g}-0").cpu("1").gpus(gpus).obj(),
            namespace="ml",
            group=key,
            leader_first=LeaderFirst(RACK, size),
        )
        leaders[key] = leader.uid
        h.add(leader)
    for i, gpus in enumerate(plain):
        h.add(replace(make_pod(f"p{i}").cpu("1").gpus(gpus).obj(), namespace="ml"))

    def check() -> None:
        assert not over_committed(h), over_committed(h)
        for uid in h.s.cache.pods:
            if uid.startswith(STAND_IN):
                assert not h.s.cache.pods[uid].node_name, "a stand-in is never bound"

    came: set[str] = set()
    for step in range(6):
        out = h.run()
        check()
        for d in out:
            if isinstance(d, BindGang):
                for b in d.bindings:
                    assert not b.pod.uid.startswith(STAND_IN), "a stand-in is never bound"
        # The leaders bound now: their group's room is held in their rack, or all came.
        for g, (size, gpus, comes) in enumerate(groups):
            key = f"ml/g{g}"
            luid = leaders[key]
            node = h.s.cache.node_of(luid)
            gang = h.s.gangs.get(key)
            if not node or gang is None:
                continue
            rack = rack_of[node]
            assert size * gpus <= capacity[rack], "the leader went where the group could fit"
            if gang.hold is not None:
                held = [n for u, n in h.s.cache.assumed.items() if u.startswith(STAND_IN + luid)]
                assert len(held) == size - 1 and {rack_of[n] for n in held} == {rack}
            if comes and key not in came:
                came.add(key)
                pin = replace(make_pod("x").obj().placement, node_selector=((RACK, rack),))
                for w in range(1, size):
                    h.add(
                        replace(
                            make_pod(f"g{g}-{w}").cpu("1").gpus(gpus).obj(),
                            namespace="ml",
                            group=key,
                            placement=pin,
                        )
                    )
        if step == 3:
            h.advance(TIMEOUT + 1)
    h.run()
    check()
    for g, (size, _, _) in enumerate(groups):
        key = f"ml/g{g}"
        luid = leaders[key]
        node = h.s.cache.node_of(luid)
        workers = [
            u for u, p in h.s.cache.pods.items() if p.group == key and u != luid and p.node_name
        ]
        assert len(workers) in (0, size - 1), "the workers bind together"
        if workers:
            assert {rack_of[h.s.cache.node_of(u)] for u in workers} == {rack_of[node]}
    held = {u for g in h.s.gangs.values() if g.hold is not None for u in g.hold.placements}
    left = {u for u in h.s.cache.pods if u.startswith(STAND_IN)}
    assert left == held, "every stand-in is its gang's hold, and no hold is without them"
