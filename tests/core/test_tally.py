"""The counts a gang keeps member by member (core/tally.py) are the counts of walking its
members: after any sequence of pod events (phases, nodes, gates, deletion marks, refusals,
priorities, roles, group and scheduler changes, deletes), cycles, reservations, bind failures,
Permit timeouts and node deletions, every gang's tally equals ``holdings`` and every group's
equals ``count_members`` over the pods that name it."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.gang import holdings, is_pending
from gangsched.core.model import GangMode, GangSpec, Node, Pod, PodPhase, RoleSpec
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler
from gangsched.core.status import count_members, counted
from gangsched.core.tally import MemberState, MemberTally

GI = 2**30
GROUPS = ("ml/a", "ml/b", "")  # "" : a plain pod
PHASES = list(PodPhase)


def _node(i: int) -> Node:
    return Node(f"n{i}", {CPU: 8000, MEMORY: 32 * GI, PODS: 110, GPU: 4})


def _check(s: Scheduler) -> None:
    pods, assumed = s.cache.pods, s.cache.assumed
    for key, gang in s.gangs.items():
        t, h = gang.tally, holdings(gang, s.cache)
        members = [pods[u] for u in gang.members]
        assert t.count(MemberState.PENDING) == len(h.pending), key
        assert t.count(MemberState.RESERVED) == h.reserved, key
        assert t.bound == h.bound, key
        assert t.count(MemberState.RUNNING) == h.running, key
        assert t.count(MemberState.SUCCEEDED) == h.succeeded, key
        assert t.count(MemberState.FAILED) == h.failed, key
        assert t.count(MemberState.INVALID) == len(h.invalid), key
        assert t.count(MemberState.GATED) == len(h.gated), key
        assert (t.held, t.live) == (h.held, h.live), key
        assert +t.held_by_role == +h.held_by_role, key
        assert +t.live_by_role == +h.live_by_role, key
        assert +t.gates == Counter(g for p in h.gated for g in p.gates), key
        assert t.max_priority() == max((p.priority for p in members), default=0), key
        assert t.queued == sum(is_pending(p, s.cache) for p in members), key
        assert t.assumed == sum(u in assumed for u in gang.members), key
        view = s.view(key)
        assert view is not None and view.pending == len(h.pending) and view.bound == h.bound
    named = {p.group for p in pods.values() if p.group}
    assert set(s.group_pods) == named
    for key, tally in s.group_pods.items():
        group = [p for p in pods.values() if p.group == key]
        assert tally.counts() == count_members(
            counted(p.phase.value, bool(p.node_name), p.deleting) for p in group
        )
        assert tally.ours == sum(p.scheduler_name == s.config.scheduler_name for p in group)


_pod_op = st.tuples(
    st.just("pod"),
    st.integers(0, 9),  # which pod
    st.sampled_from(GROUPS),
    st.sampled_from(PHASES),
    st.booleans(),  # bound to a node
    st.integers(0, 3),  # priority
    st.sampled_from(["", "ps", "worker"]),
    st.sampled_from([(), ("kueue",), ("kueue", "quota")]),
    st.booleans(),  # deleting
    st.booleans(),  # refused
    st.booleans(),  # foreign scheduler
)
# A plain pending pod of ours: what cycles place.
_arrive = st.tuples(
    st.just("pod"),
    st.integers(0, 9),
    st.sampled_from(GROUPS),
    st.just(PodPhase.PENDING),
    st.just(False),
    st.integers(0, 3),
    st.sampled_from(["", "ps", "worker"]),
    st.just(()),
    st.just(False),
    st.just(False),
    st.just(False),
)
_op = st.one_of(
    _arrive,
    _arrive,
    _pod_op,
    st.tuples(st.just("delete"), st.integers(0, 9)),
    st.tuples(st.just("spec"), st.sampled_from(GROUPS[:2]), st.integers(1, 4), st.booleans()),
    st.tuples(st.just("nospec"), st.sampled_from(GROUPS[:2])),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("cycle")),
    st.tuples(st.just("confirm")),
    st.tuples(st.just("bindfail"), st.integers(0, 9)),
    st.tuples(st.just("advance"), st.sampled_from([1.0, 30.0, 700.0])),
    st.tuples(st.just("delnode"), st.integers(0, 2)),
)


def _run(script: list[tuple[Any, ...]]) -> None:
    s = Scheduler(CoreConfig(default_schedule_timeout_seconds=20.0), FakeClock(1000.0))
    clock = s.clock
    assert isinstance(clock, FakeClock)
    for i in range(3):
        s.node_upsert(_node(i))
    sent: list[BindGang] = []
    for op in script:
        kind = op[0]
        if kind == "pod":
            _, i, group, phase, bound, prio, role, gates, deleting, refused, foreign = op
            pod = Pod(f"u{i}", "ml", f"p{i}", {CPU: 1000, GPU: 1, PODS: 1}, created=float(i))
            pod.group, pod.phase, pod.priority, pod.role = group, phase, prio, role
            pod.node_name = "n0" if bound else ""
            pod.gates, pod.deleting = gates, deleting
            pod.invalid_reason = "unreadable" if refused else ""
            pod.scheduler_name = "other" if foreign else "gangsched"
            s.pod_upsert(pod)
        elif kind == "delete":
            s.pod_delete(f"u{op[1]}")
        elif kind == "spec":
            _, key, n, roles = op
            mode = GangMode.NON_STRICT if n % 2 else GangMode.STRICT
            role_specs = (RoleSpec("ps", 1),) if roles else ()
            s.gang_upsert(GangSpec(key, n, mode=mode, roles=role_specs))
        elif kind == "nospec":
            s.gang_delete(op[1])
        elif kind == "cycle":
            for d in s.schedule_one() or []:
                if isinstance(d, BindGang):
                    sent.append(d)
        elif kind == "confirm":
            for d in sent:
                for b in d.bindings:
                    pod = s.cache.pods.get(b.pod.uid)
                    if pod is not None and not pod.node_name:
                        s.pod_upsert(replace(pod, node_name=b.node, phase=PodPhase.RUNNING))
            sent.clear()
        elif kind == "bindfail":
            s.bind_failed(f"u{op[1]}", "conflict")
        elif kind == "advance":
            clock.advance(op[1])
            s.tick()
        elif kind == "delnode":
            s.node_delete(f"n{op[1]}")
        _check(s)


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(script=st.lists(_op, min_size=5, max_size=60))
def test_the_tallies_are_the_counts_of_walking_the_members(script: list[tuple[Any, ...]]) -> None:
    _run(script)


def test_the_highest_priority_is_found_again_when_its_last_member_leaves() -> None:
    t = MemberTally()
    pods = [Pod(f"u{i}", "ml", f"p{i}", {}, priority=p) for i, p in enumerate((5, 1, 5, 3))]
    for p in pods:
        assert t.put(p, assumed=False)
    assert t.max_priority() == 5
    t.remove("u0")
    t.remove("u0")  # idempotent
    assert t.max_priority() == 5  # u2 has it too
    t.put(Pod("u9", "ml", "p9", {}, priority=7), assumed=False)
    assert t.max_priority() == 7
    t.remove("u9")
    assert t.max_priority() == 5
    t.remove("u2")
    assert t.max_priority() == 3
    assert not t.put(replace(pods[1], priority=4), assumed=False)  # its priority changed
    assert (t.max_priority(), len(t)) == (4, 2)
    t.remove("u1")
    t.remove("u3")
    assert t.max_priority() == 0 and not t.live_by_role and not t.states and len(t) == 0


def test_a_pod_handed_to_another_scheduler_leaves_its_gang() -> None:
    s = Scheduler(CoreConfig(), FakeClock(0.0))
    s.gang_upsert(GangSpec("ml/g", 2))
    pod = Pod("u1", "ml", "p1", {CPU: 1000}, group="ml/g")
    s.pod_upsert(pod)
    assert "u1" in s.gangs["ml/g"].members
    s.pod_upsert(replace(pod, scheduler_name="other"))
    assert "u1" not in s.gangs["ml/g"].members
    assert s.group_pods["ml/g"].ours == 0
