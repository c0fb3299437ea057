"""Whole-gang preemption, as properties over random full clusters.

Random nodes; random running gangs (Strict, NonStrict above their minMember, plain pods) of
random priorities placed first-fit, some under a PodDisruptionBudget; then a preemptor gang
of random priority and size arrives. Whatever the core decides:

- a preemption never evicts a pod of equal or higher priority than the preemptor;
- it never leaves a victim gang partly running below its minMember: a Strict gang loses all
  of its running members or none, a NonStrict gang keeps at least minMember running, and a
  plain pod is its own unit;
- the nominated placements fit next to what is left running once the victims are gone (no
  over-commit), and nothing binds onto the held capacity while the victims terminate, not
  even a gang of lower priority that would fit there;
- once the victims are deleted (in any order) the preemptor binds whole, where it was
  nominated, and no node is over-committed.

And it is complete where it must be: when every running pod is in a Strict gang or alone, of
lower priority than the preemptor, and the preemptor fits on the empty cluster, it is placed
(at once, or by a preemption).

More examples: ``GANGSCHED_PREEMPTION_EXAMPLES=2000 .venv/bin/python -m pytest -q
-p no:cacheprovider tests/property/test_preemption.py``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision, GangUnschedulable, Preempt
from gangsched.core.model import (
    DisruptionBudget,
    GangMode,
    GangSpec,
    LabelSelector,
    Node,
    Pod,
    PodPhase,
)
from gangsched.core.resources import CPU, GPU, MEMORY, PODS, ResourceList, add_into
from gangsched.core.scheduler import Scheduler

EXAMPLES = int(os.environ.get("GANGSCHED_PREEMPTION_EXAMPLES", "150"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
GI = 2**30
NOW = 1000.0
PREEMPTOR = "ml/preemptor"
SNEAKER = "ml/sneaker"


@dataclass(frozen=True)
class RunningDef:
    key: str  # "ns/name" for a gang, "" for a plain pod
    mode: GangMode | None  # None: a plain pod
    priority: int
    size: int
    min_member: int
    gpus: int
    cpu: int  # millicores per pod
    created: float
    budget: int | None  # a PodDisruptionBudget over the gang allowing this many, or none


@dataclass
class Case:
    nodes: list[Node]
    running: list[RunningDef]
    preemptor_priority: int
    preemptor_size: int
    preemptor_gpus: int
    preemptor_cpu: int


@st.composite
def cases(draw: st.DrawFn) -> Case:
    nodes = [
        Node(
            f"n{i}",
            {
                GPU: draw(st.sampled_from([2, 4, 8])),
                CPU: 1000 * draw(st.sampled_from([4, 8, 16, 32])),
                MEMORY: 256 * GI,
                PODS: 110,
            },
        )
        for i in range(draw(st.integers(1, 4)))
    ]
    running = []
    for i in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(["strict", "strict", "nonstrict", "plain"]))
        size = 1 if kind == "plain" else draw(st.integers(1, 4))
        mode = {"strict": GangMode.STRICT, "nonstrict": GangMode.NON_STRICT}.get(kind)
        running.append(
            RunningDef(
                key="" if kind == "plain" else f"team/g{i}",
                mode=mode,
                priority=draw(st.integers(0, 3)),
                size=size,
                min_member=draw(st.integers(1, size)) if kind == "nonstrict" else size,
                gpus=draw(st.sampled_from([0, 1, 1, 2, 4])),
                cpu=draw(st.sampled_from([500, 1000, 4000])),
                created=float(draw(st.integers(0, 900))),
                budget=draw(st.none() | st.integers(0, 2)),
            )
        )
    return Case(
        nodes,
        running,
        preemptor_priority=draw(st.sampled_from([0, 1, 2, 3, 4, 4, 4])),
        preemptor_size=draw(st.integers(1, 4)),
        preemptor_gpus=draw(st.sampled_from([1, 2, 4, 8])),
        preemptor_cpu=draw(st.sampled_from([500, 1000, 4000])),
    )


def _requests(gpus: int, cpu: int) -> ResourceList:
    r: ResourceList = {CPU: cpu, MEMORY: GI, PODS: 1}
    if gpus:
        r[GPU] = gpus
    return r


def _fits(used: ResourceList, req: ResourceList, alloc: ResourceList) -> bool:
    return all(used.get(k, 0) + v <= alloc.get(k, 0) for k, v in req.items())


class World:
    """The API's truth of a cluster, and a Scheduler fed from it."""

    def __init__(self, case: Case) -> None:
        self.clock = FakeClock(NOW)
        self.s = Scheduler(CoreConfig(reservation_after_seconds=None), self.clock)
        self.nodes = {n.name: n for n in case.nodes}
        self.truth: dict[str, Pod] = {}
        self.modes: dict[str, tuple[GangMode | None, int]] = {}  # unit -> (mode, minMember)
        self.unit_of: dict[str, str] = {}  # pod uid -> its gang key, or its own uid
        for n in case.nodes:
            self.s.node_upsert(n)
        used: dict[str, ResourceList] = {n.name: {} for n in case.nodes}
        for i, r in enumerate(case.running):
            self._place(i, r, used)

    def _place(self, i: int, r: RunningDef, used: dict[str, ResourceList]) -> None:
        """First fit, whole (Strict, plain) or at least minMember (NonStrict); else left out."""
        req = _requests(r.gpus, r.cpu)
        trial = {n: dict(u) for n, u in used.items()}
        placed: list[str] = []
        for _ in range(r.size):
            node = next(
                (n for n in self.nodes if _fits(trial[n], req, self.nodes[n].allocatable)), None
            )
            if node is None:
                break
            add_into(trial[node], req)
            placed.append(node)
        need = r.min_member if r.mode is GangMode.NON_STRICT else r.size
        if len(placed) < need:
            return
        used.update(trial)
        name = r.key.partition("/")[2] if r.key else f"p{i}"
        namespace = r.key.partition("/")[0] if r.key else "team"
        if r.key:
            assert r.mode is not None
            self.s.gang_upsert(GangSpec(r.key, r.min_member, created=r.created, mode=r.mode))
        for j, node in enumerate(placed):
            uid = f"{name}.{j}"
            pod = Pod(
                uid,
                namespace,
                f"{name}-{j}",
                dict(req),
                created=r.created,
                priority=r.priority,
                phase=PodPhase.RUNNING,
                node_name=node,
                group=r.key,
                labels={"app": name},
            )
            self.truth[uid] = pod
            self.unit_of[uid] = r.key or uid
            self.modes[r.key or uid] = (r.mode, r.min_member)
            self.s.pod_upsert(pod)
        if r.budget is not None:
            selector = LabelSelector(match_labels=(("app", name),))
            self.s.budget_upsert(DisruptionBudget(namespace, f"pdb-{name}", selector, r.budget))

    def submit(self, key: str, n: int, gpus: int, cpu: int, priority: int) -> None:
        self.s.gang_upsert(GangSpec(key, n, created=self.clock.now()))
        name = key.partition("/")[2]
        for j in range(n):
            pod = Pod(
                f"{name}.{j}",
                "ml",
                f"{name}-{j}",
                _requests(gpus, cpu),
                created=self.clock.now(),
                priority=priority,
                group=key,
            )
            self.truth[pod.uid] = pod
            self.s.pod_upsert(pod)

    def run(self) -> list[Decision]:
        return self.s.run_until_idle()

    def confirm(self, d: BindGang) -> None:
        for b in d.bindings:
            pod = replace(self.truth[b.pod.uid], node_name=b.node, phase=PodPhase.RUNNING)
            self.truth[pod.uid] = pod
            self.s.pod_upsert(pod)

    def delete(self, uid: str) -> None:
        del self.truth[uid]
        self.s.pod_delete(uid)

    def running(self) -> dict[str, Pod]:
        return {u: p for u, p in self.truth.items() if p.node_name and not p.terminal}

    def check_not_overcommitted(self, extra: dict[str, str] | None = None) -> None:
        """Running pods (and ``extra``: pod uid -> node, not bound yet) fit every node."""
        used: dict[str, ResourceList] = {n: {} for n in self.nodes}
        for p in self.running().values():
            add_into(used[p.node_name], p.requests)
        for uid, node in (extra or {}).items():
            add_into(used[node], self.truth[uid].requests)
        for name, u in used.items():
            alloc = self.nodes[name].allocatable
            over = {k: v for k, v in u.items() if v > alloc.get(k, 0)}
            assert not over, f"{name} over-committed: {over} > {alloc}"


def check_victims(w: World, d: Preempt) -> None:
    victims = {v.pod.uid for v in d.victims}
    assert len(victims) == len(d.victims), "a pod named twice as a victim"
    running = w.running()
    for v in d.victims:
        pod = running.get(v.pod.uid)
        assert pod is not None, f"victim {v.pod.name} is not running"
        assert pod.priority < d.priority, (
            f"{v.pod.name} (priority {pod.priority}) evicted for priority {d.priority}"
        )
        assert v.node == pod.node_name
        assert v.priority == pod.priority
        assert v.gang == pod.group
    members: dict[str, list[str]] = {}
    for uid in running:
        unit = w.unit_of.get(uid)
        if unit is not None:
            members.setdefault(unit, []).append(uid)
    for unit, uids in members.items():
        hit = [u for u in uids if u in victims]
        if not hit:
            continue
        mode, min_member = w.modes[unit]
        left = len(uids) - len(hit)
        if mode is GangMode.NON_STRICT:
            assert left >= min_member, (
                f"NonStrict gang {unit} left with {left} running, minMember {min_member}"
            )
        else:
            assert left == 0, f"Strict gang {unit} evicted in part: {left} of {len(uids)} left"


def fits_empty(case: Case) -> bool:
    """Does the preemptor bind on the same nodes with nothing else there?"""
    s = Scheduler(CoreConfig(), FakeClock(NOW))
    for n in case.nodes:
        s.node_upsert(n)
    s.gang_upsert(GangSpec(PREEMPTOR, case.preemptor_size, created=NOW))
    for j in range(case.preemptor_size):
        req = _requests(case.preemptor_gpus, case.preemptor_cpu)
        s.pod_upsert(
            Pod(f"preemptor.{j}", "ml", f"preemptor-{j}", req, created=NOW, group=PREEMPTOR)
        )
    return any(isinstance(d, BindGang) for d in s.run_until_idle())


@PROPERTY
@given(case=cases(), data=st.data())
def test_preemption_takes_only_lower_priority_whole_units_and_then_binds_whole(
    case: Case, data: st.DataObject
) -> None:
    w = World(case)
    w.check_not_overcommitted()
    w.submit(
        PREEMPTOR,
        case.preemptor_size,
        case.preemptor_gpus,
        case.preemptor_cpu,
        case.preemptor_priority,
    )
    out = w.run()
    binds = [d for d in out if isinstance(d, BindGang)]
    preempts = [d for d in out if isinstance(d, Preempt)]
    assert len(binds) + len(preempts) <= 1, out
    event("outcome: " + ("bound" if binds else "preempted" if preempts else "unschedulable"))
    if binds:
        [d] = binds
        assert d.gang == PREEMPTOR and len(d.bindings) == case.preemptor_size
        w.confirm(d)
        w.check_not_overcommitted()
        return
    if not preempts:
        assert any(isinstance(d, GangUnschedulable) for d in out)
        running = w.running().values()
        complete = all(
            p.priority < case.preemptor_priority
            and w.modes[w.unit_of[p.uid]][0] is not GangMode.NON_STRICT
            for p in running
        )
        assert not (complete and fits_empty(case)), (
            "every running pod is of lower priority and evictable, the gang fits the empty "
            "cluster, yet no preemption was found"
        )
        return
    [d] = preempts
    assert d.gang == PREEMPTOR and d.priority == case.preemptor_priority
    assert d.victims, "a preemption with no victims"
    check_victims(w, d)
    nominated = {b.pod.uid: b.node for b in d.nominations}
    assert len(nominated) == case.preemptor_size
    victims = [v.pod.uid for v in d.victims]
    # What is nominated fits next to what will be left.
    left = {u: p for u, p in w.running().items() if u not in set(victims)}
    used: dict[str, ResourceList] = {n: {} for n in w.nodes}
    for p in left.values():
        add_into(used[p.node_name], p.requests)
    for uid, node in nominated.items():
        add_into(used[node], w.truth[uid].requests)
    for name, u in used.items():
        alloc = w.nodes[name].allocatable
        assert all(v <= alloc.get(k, 0) for k, v in u.items()), (
            f"nominations over-commit {name} once the victims are gone: {u} > {alloc}"
        )
    # While the victims terminate, a gang of the lowest priority that would fit in what they
    # free arrives: it must not take the held capacity; nor does the preemptor bind early.
    w.clock.advance(1.0)
    w.submit(SNEAKER, 1, 1, 500, -1)
    order = data.draw(st.permutations(victims), label="deletion order")
    for i, uid in enumerate(order):
        out = w.run()
        for b in (d for d in out if isinstance(d, BindGang)):
            assert b.gang != PREEMPTOR, f"bound with {len(order) - i} victim(s) still running"
            w.confirm(b)
            w.check_not_overcommitted()
        w.clock.advance(0.5)
        w.delete(uid)
    out = w.run()
    mine = [b for b in out if isinstance(b, BindGang) and b.gang == PREEMPTOR]
    assert len(mine) == 1, f"not bound once the victims were gone: {out}"
    assert {b.pod.uid: b.node for b in mine[0].bindings} == nominated
    for b in (d for d in out if isinstance(d, BindGang)):
        w.confirm(b)
    w.check_not_overcommitted()
