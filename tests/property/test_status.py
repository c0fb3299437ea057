"""PodGroup status never contradicts itself or the pods.

Random event sequences on one gang (pods added, bound, running, finished, deleted; bindings
confirmed or failed; minMember raised and lowered; a node shrinking; time passing) through the
core. After every event the status the scheduler would write (``Scheduler.group_status``) is
checked against the test's own record of the pods:

- the counts are the pods';
- the condition is True exactly when the phase is Scheduled, Running or Succeeded, exactly
  when minMember members are bound, and its reason is ``Scheduled`` exactly then;
- the ``Scheduled`` message counts the members bound now;
- the status the scheduler applies to the PodGroup (its one writer of phase, counts and the
  condition) says exactly that status;
- no message shows ``None``; and after the scheduler has looked at the gang, the numbers in its
  messages (``<n> of <m> members exist``, ``minMember <m>``, ``holding <h>``) are current.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.model import GangMode, GangSpec, Node, Pod, PodPhase
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler
from gangsched.core.status import (
    SCHEDULED_PHASES,
    GroupStatus,
    MemberCounts,
    split_forecast,
    with_forecast,
)
from gangsched.kube.write.podstatus import scheduler_status

KEY = "ml/g"
GI = 1024**3

PROPERTY = settings(
    max_examples=300,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

Op = tuple[str, int]

# Weighted: enough adds, scheduling and confirmations that gangs get bound, run and finish.
OPS = [
    *["add"] * 4,
    *["schedule"] * 3,
    *["settle"] * 2,
    *["confirm"] * 3,
    *["run"] * 3,
    "succeed",
    "fail",
    "finish",
    "fail_binding",
    "delete",
    "min",
    "shrink",
    "grow",
    "tick",
]
ops = st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 7)), min_size=1, max_size=60)


@dataclass
class World:
    core: Scheduler
    clock: FakeClock
    mode: GangMode
    min_member: int
    pods: dict[str, Pod] = field(default_factory=dict)  # uid -> the pod as last upserted
    in_flight: dict[str, str] = field(default_factory=dict)  # uid -> node of a sent binding
    seq: int = 0

    def spec(self) -> GangSpec:
        return GangSpec(KEY, self.min_member, mode=self.mode, timeout_seconds=30.0)

    def node(self, name: str, gpus: int) -> Node:
        alloc = {CPU: 64_000, MEMORY: 256 * GI, GPU: gpus, PODS: 110}
        return Node(name, alloc, labels={"kubernetes.io/hostname": name})

    def upsert(self, pod: Pod) -> None:
        self.pods[pod.uid] = pod
        self.core.pod_upsert(
            Pod(
                pod.uid,
                pod.namespace,
                pod.name,
                dict(pod.requests),
                created=pod.created,
                phase=pod.phase,
                node_name=pod.node_name,
                group=pod.group,
            )
        )

    def pick(self, n: int, want: Callable[[Pod], object]) -> Pod | None:
        chosen = [p for p in sorted(self.pods.values(), key=lambda p: p.name) if want(p)]
        return chosen[n % len(chosen)] if chosen else None

    def apply(self, op: str, n: int) -> None:
        core = self.core
        pod: Pod | None
        if op == "add":
            self.seq += 1
            uid = f"u{self.seq}"
            gpus = 1 + n % 2
            pod = Pod(
                uid,
                "ml",
                f"p{self.seq}",
                {CPU: 1000, MEMORY: GI, GPU: gpus, PODS: 1},
                created=self.clock.now(),
                group=KEY,
            )
            self.upsert(pod)
        elif op == "schedule":
            self.clock.advance(11.0)  # past any backoff
            for d in core.run_until_idle():
                if isinstance(d, BindGang):
                    for b in d.bindings:
                        self.in_flight[b.pod.uid] = b.node
        elif op == "confirm":
            for uid, node in sorted(self.in_flight.items()):
                pod = self.pods.get(uid)
                if pod is not None:
                    pod.node_name = node
                    self.upsert(pod)
            self.in_flight.clear()
        elif op == "fail_binding":
            if self.in_flight:
                uid = sorted(self.in_flight)[n % len(self.in_flight)]
                del self.in_flight[uid]
                core.bind_failed(uid, "HTTP 409 Conflict: already bound")
        elif op == "run" and n % 2:
            for pod in list(self.pods.values()):
                if pod.node_name and pod.phase is PodPhase.PENDING:
                    pod.phase = PodPhase.RUNNING
                    self.upsert(pod)
        elif op == "settle":  # the scheduler runs, its bindings land, the pods start
            for step in ("schedule", "confirm", "run"):
                self.apply(step, 1)
        elif op == "finish":
            for pod in list(self.pods.values()):
                if pod.phase is PodPhase.RUNNING:
                    pod.phase = PodPhase.SUCCEEDED if n % 2 else PodPhase.FAILED
                    self.upsert(pod)
        elif op in ("run", "succeed", "fail"):
            if op == "run":
                pod = self.pick(n, lambda p: p.node_name and p.phase is PodPhase.PENDING)
                phase = PodPhase.RUNNING
            else:
                pod = self.pick(n, lambda p: p.phase is PodPhase.RUNNING)
                phase = PodPhase.SUCCEEDED if op == "succeed" else PodPhase.FAILED
            if pod is not None:
                pod.phase = phase
                self.upsert(pod)
        elif op == "delete":
            pod = self.pick(n, lambda p: True)
            if pod is not None:
                del self.pods[pod.uid]
                self.in_flight.pop(pod.uid, None)
                core.pod_delete(pod.uid)
        elif op == "min":
            self.min_member = 1 + n % 5
            core.gang_upsert(self.spec())
        elif op == "shrink":
            core.node_upsert(self.node(f"n{n % 2}", n % 3))
        elif op == "grow":
            core.node_upsert(self.node(f"n{n % 2}", 4))
        elif op == "tick":
            self.clock.advance(5.0 * (n + 1))
            core.tick()


def _expected_counts(pods: dict[str, Pod]) -> MemberCounts:
    """The test's own count, written out rather than through the code under test."""
    total = len(pods)
    failed = sum(1 for p in pods.values() if p.phase is PodPhase.FAILED)
    running = sum(1 for p in pods.values() if p.phase is PodPhase.RUNNING)
    succeeded = sum(1 for p in pods.values() if p.phase is PodPhase.SUCCEEDED)
    scheduled = sum(
        1
        for p in pods.values()
        if p.phase is not PodPhase.FAILED
        and (p.node_name or p.phase in (PodPhase.RUNNING, PodPhase.SUCCEEDED))
    )
    return MemberCounts(total, scheduled, running, succeeded, failed)


def _applied(world: World, ours: GroupStatus, start: float | None) -> GroupStatus:
    """The status as the scheduler applies it to the PodGroup, read back into a GroupStatus."""
    waiting = len(w.reserved) if (w := world.core.permit.get(KEY)) else 0
    status = scheduler_status(
        ours,
        generation=1,
        waiting=waiting,
        start="2026-01-01T00:00:00Z" if start is not None else "",
        last_failure="",
        since="2026-01-01T00:00:00Z",
    )
    [cond] = status["conditions"]
    assert cond["type"] == "Scheduled" and status["message"] == cond["message"][:1024]
    assert status["waiting"] == waiting
    counts = MemberCounts(
        ours.counts.total,
        status["scheduled"],
        status["running"],
        status["succeeded"],
        status["failed"],
    )
    return GroupStatus(
        world.min_member,
        status["phase"],
        cond["status"] == "True",
        cond["reason"],
        cond["message"],
        counts,
    )


def _check(world: World, after_schedule: bool) -> None:
    core = world.core
    status = core.group_status(KEY)
    assert status is not None
    counts = _expected_counts(world.pods)
    assert status.counts == counts
    assert status.min_member == world.min_member
    bound_quorum = counts.scheduled >= world.min_member
    assert status.scheduled == bound_quorum
    assert (status.phase in SCHEDULED_PHASES) == bound_quorum, status
    assert (status.reason == "Scheduled") == status.scheduled, status
    if status.scheduled:
        assert status.message == f"{counts.scheduled} member(s) bound"
    assert status.reason, status
    assert "None" not in status.message
    gang = core.gangs.get(KEY)
    start = gang.schedule_start if gang is not None else None
    assert _applied(world, status, start) == status

    if not after_schedule:
        return
    live = counts.total - counts.failed
    if m := re.match(r"^(\d+) of (\d+) members exist", status.message):
        assert (int(m[1]), int(m[2])) == (live, world.min_member), status
    for m in re.finditer(r"minMember (\d+)", status.message):
        assert int(m[1]) == world.min_member, status
    for m in re.finditer(r"holding (\d+)", status.message):
        held = sum(
            1
            for uid, p in world.pods.items()
            if p.phase is PodPhase.SUCCEEDED
            or (p.phase is not PodPhase.FAILED and (p.node_name or uid in core.cache.assumed))
        )
        assert int(m[1]) == held, status


@PROPERTY
@given(
    ops=ops,
    min_member=st.integers(1, 4),
    mode=st.sampled_from([GangMode.STRICT, GangMode.NON_STRICT]),
    gpus=st.integers(1, 4),
    initial=st.integers(0, 6),
)
def test_podgroup_status_never_contradicts_itself_or_the_pods(
    ops: list[Op], min_member: int, mode: GangMode, gpus: int, initial: int
) -> None:
    clock = FakeClock(1_000.0)
    world = World(Scheduler(CoreConfig(), clock), clock, mode, min_member)
    for i in range(2):
        world.core.node_upsert(world.node(f"n{i}", gpus))
    world.core.gang_upsert(world.spec())
    _check(world, after_schedule=False)
    for i in range(initial):
        world.apply("add", i)
        _check(world, after_schedule=False)
    for op, n in ops:
        world.apply(op, n)
        _check(world, after_schedule=op in ("schedule", "settle"))


@given(
    message=st.text(max_size=80),
    at=st.sampled_from(["", "2026-11-27T16:00:00Z"]),
    # a basis names gangs and durations: never a ';'
    basis=st.text(st.characters(blacklist_characters=";"), max_size=80),
)
def test_a_forecast_said_at_the_end_of_a_message_is_read_back(
    message: str, at: str, basis: str
) -> None:
    """What kubectl gang reads from a pod's PodScheduled message is the forecast the
    scheduler put there, and the message before it (whatever that says)."""
    assert split_forecast(with_forecast(message, (at, basis))) == (message, (at, basis))
