"""Leader-first gangs (core/leaderfirst.py): a LeaderWorkerSet group with exclusive topology,
whose workers come only once the leader is bound. The leader binds alone only where one domain
holds the whole group, the workers' room is held until they come, and given back when they do
not; nothing else takes it meanwhile."""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Preempt
from gangsched.core.leaderfirst import STAND_IN, worker_shape
from gangsched.core.model import GangSpec, LeaderFirst, Node, Pod, PodPhase
from gangsched.core.resources import GPU
from tests.core.builders import make_node, make_pod
from tests.core.test_scheduler import Harness, binds

RACK = "example.com/rack"
T0 = 1000.0


def node(name: str, rack: str, gpus: int = 4) -> Node:
    return make_node(name).cpu("64").memory("256Gi").gpus(gpus).label(RACK, rack).node()


def racks(*spec: tuple[str, int]) -> Harness:
    """Racks of two 4-GPU nodes each: ``(rack, nodes)``."""
    nodes = [node(f"{r}{i}", r) for r, n in spec for i in range(n)]
    return Harness(CoreConfig(), *nodes)


def pod(name: str, group: str, gpus: int = 2, leader: bool = False, **kw: object) -> Pod:
    p = replace(make_pod(name).cpu("1").gpus(gpus).obj(), namespace="ml", group=f"ml/{group}")
    if leader:
        p = replace(p, leader_first=LeaderFirst(RACK, 4))
    return replace(p, **kw)  # type: ignore[arg-type]


def group(h: Harness, name: str, size: int = 4, gpus: int = 2) -> None:
    h.s.gang_upsert(GangSpec(f"ml/{name}", size, min_resources={GPU: size * gpus}, created=T0))


def workers(name: str, rack: str, gpus: int = 2, count: int = 3) -> list[Pod]:
    """The workers LWS creates once the leader is bound: pinned to its rack."""
    return [
        pod(
            f"{name}-{i}",
            name,
            gpus,
            placement=replace(make_pod("x").obj().placement, node_selector=((RACK, rack),)),
        )
        for i in range(1, count + 1)
    ]


def rack_of(h: Harness, uid: str) -> str:
    return h.s.cache.node_of(uid)[:1]


def stand_ins(h: Harness) -> dict[str, str]:
    return {u: n for u, n in h.s.cache.assumed.items() if u.startswith(STAND_IN)}


def test_the_leader_binds_alone_where_the_whole_group_fits_and_its_room_is_held() -> None:
    h = racks(("a", 1), ("b", 2))  # rack a: 4 GPUs, too few for 8; rack b: 8
    group(h, "g")
    h.add(pod("g-0", "g", leader=True))
    [b] = binds(h.run())
    assert [x.pod.name for x in b.bindings] == ["g-0"]
    assert rack_of(h, b.bindings[0].pod.uid) == "b"
    held = stand_ins(h)
    assert len(held) == 3 and {n[:1] for n in held.values()} == {"b"}
    gang = h.s.gangs["ml/g"]
    assert gang.hold is not None and gang.hold.domain == f"{RACK}=b"


def test_nothing_else_takes_the_held_room_and_the_workers_get_it() -> None:
    h = racks(("b", 2))
    group(h, "g")
    h.add(pod("g-0", "g", leader=True))
    h.run()
    # A plain pod wanting the workers' room waits: 2 of rack b's 8 GPUs are the leader's,
    # the 6 others are held.
    h.add(replace(make_pod("other").cpu("1").gpus(2).obj(), namespace="ml"))
    assert not binds(h.run())
    # The workers come (one by one), pinned to rack b: they bind in the held room.
    ws = workers("g", "b")
    h.add(ws[0])
    assert not binds(h.run()), "one worker of three: the gang waits for the others"
    assert len(stand_ins(h)) == 3, "the room is still held"
    view = h.s.view("ml/g")
    assert view is not None and f"room held in {RACK}=b for the 3 member(s)" in view.message
    h.add(*ws[1:])
    [b] = binds(h.run())
    assert sorted(x.pod.name for x in b.bindings) == ["g-1", "g-2", "g-3"]
    assert not stand_ins(h) and h.s.gangs["ml/g"].hold is None


def test_a_group_no_domain_can_hold_does_not_bind_its_leader() -> None:
    h = racks(("a", 1), ("b", 1))  # 4 GPUs a rack, the group needs 8 in one
    group(h, "g")
    h.add(pod("g-0", "g", leader=True))
    assert not binds(h.run())
    view = h.s.view("ml/g")
    assert view is not None and f"no {RACK} domain holds the group" in view.message
    assert not stand_ins(h)


def test_the_room_is_given_back_when_the_workers_do_not_come() -> None:
    h = racks(("b", 2))
    group(h, "g")
    h.add(pod("g-0", "g", leader=True))
    h.run()
    assert len(stand_ins(h)) == 3
    h.add(replace(make_pod("other").cpu("1").gpus(4).obj(), namespace="ml"))
    assert not binds(h.run()), "a whole node's room is held"
    h.advance(CoreConfig().default_schedule_timeout_seconds + 1)
    [b] = binds(h.run())
    assert [x.pod.name for x in b.bindings] == ["other"]
    assert not stand_ins(h) and h.s.gangs["ml/g"].hold is None
    view = h.s.view("ml/g")
    assert view is not None and "was given back" in view.message


def test_the_room_is_given_back_when_the_leader_goes() -> None:
    h = racks(("b", 2))
    group(h, "g")
    h.add(pod("g-0", "g", leader=True))
    [b] = binds(h.run())
    uid = b.bindings[0].pod.uid
    h.s.pod_upsert(replace(h.s.cache.pods[uid], phase=PodPhase.FAILED))
    assert not stand_ins(h)
    h.s.pod_delete(uid)
    assert h.s.gangs["ml/g"].hold is None


def test_two_groups_take_two_racks() -> None:
    h = racks(("a", 2), ("b", 2))
    group(h, "g")
    group(h, "k")
    h.add(pod("g-0", "g", leader=True), pod("k-0", "k", leader=True))
    out = h.run()
    leaders = [x.pod.uid for d in binds(out) for x in d.bindings]
    assert len(leaders) == 2
    assert {rack_of(h, u) for u in leaders} == {"a", "b"}, "each group's room in its own rack"


def test_a_plain_gang_is_not_leader_first() -> None:
    """Without the leader-first mark the gang waits for its members, as every gang does."""
    h = racks(("b", 2))
    group(h, "g")
    h.add(pod("g-0", "g"))
    assert not binds(h.run())
    view = h.s.view("ml/g")
    assert view is not None and view.reason == "WaitingForMembers"


def test_the_worker_shape_comes_from_the_groups_min_resources() -> None:
    leader = pod("g-0", "g", gpus=1)
    assert worker_shape(leader, 4, {GPU: 7})[GPU] == 2
    assert worker_shape(leader, 4, {GPU: 8})[GPU] == 3, "rounded up"
    assert worker_shape(leader, 4, {}) == dict(leader.requests)


def test_bound_gang_is_what_binds_in_a_bind_gang() -> None:
    """The leader's binding is a gang binding of one pod: the adapter writes it as any."""
    h = racks(("b", 2))
    group(h, "g")
    h.add(pod("g-0", "g", leader=True))
    [b] = h.run()
    assert isinstance(b, BindGang) and b.gang == "ml/g"


def test_a_leader_that_preempts_holds_the_room_its_victims_leave() -> None:
    """Rack b is full of low-priority pods: the high-priority group evicts enough of them for
    the whole group, its leader binds once they are gone, and the room for its workers is
    held there, not taken back by the pods that wait."""
    h = racks(("b", 2))
    low = [
        replace(make_pod(f"low-{i}").cpu("1").gpus(4).obj(), namespace="ml", priority=0)
        for i in range(2)
    ]
    h.add(*low)
    assert len(binds(h.run())) == 2
    group(h, "g")
    h.add(pod("g-0", "g", leader=True, priority=100))
    out = h.run()
    [p] = [d for d in out if isinstance(d, Preempt)]
    assert sorted(v.pod.name for v in p.victims) == ["low-0", "low-1"], "the whole group's room"
    assert len(stand_ins(h)) == 3
    for v in p.victims:
        h.s.pod_delete(v.pod.uid)
    [b] = binds(h.run())
    assert [x.pod.name for x in b.bindings] == ["g-0"]
    h.add(replace(make_pod("again").cpu("1").gpus(4).obj(), namespace="ml", priority=0))
    assert not binds(h.run()), "the room is held for the workers"
    h.add(*[replace(w, priority=100) for w in workers("g", "b")])
    [b] = binds(h.run())
    assert sorted(x.pod.name for x in b.bindings) == ["g-1", "g-2", "g-3"]


def test_a_restarted_scheduler_holds_the_room_of_a_leader_found_bound_alone() -> None:
    """The hold lived in the process that bound the leader: the next one, finding the leader
    bound alone and its members not come, holds their room again until the gang's timeout
    after the binding; a leader bound longer ago than that gets none."""
    h = racks(("b", 2))
    group(h, "g")
    h.add(pod("g-0", "g", leader=True, node_name="b0", phase=PodPhase.RUNNING, bound_at=T0 - 5))
    h.run()
    held = stand_ins(h)
    assert len(held) == 3 and {n[:1] for n in held.values()} == {"b"}
    gang = h.s.gangs["ml/g"]
    assert gang.hold is not None
    assert gang.hold.deadline == T0 - 5 + CoreConfig().default_schedule_timeout_seconds
    h.add(replace(make_pod("other").cpu("1").gpus(4).obj(), namespace="ml"))
    assert not binds(h.run()), "the room is held"
    h.add(*workers("g", "b"))
    [b] = binds(h.run())
    assert sorted(x.pod.name for x in b.bindings) == ["g-1", "g-2", "g-3"]

    late = racks(("b", 2))
    group(late, "g")
    old = T0 - CoreConfig().default_schedule_timeout_seconds - 1
    late.add(pod("g-0", "g", leader=True, node_name="b0", phase=PodPhase.RUNNING, bound_at=old))
    late.run()
    assert not stand_ins(late) and late.s.gangs["ml/g"].hold is None
