"""The gang lifecycle (core/lifecycle.py): a gang that ran and lost members gets one MemberLoss
decision per loss episode, its status says so until it is whole again, and under RestartGang
the members left that hold a node are restarted and the gang is scheduled again whole."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision, MemberLoss
from gangsched.core.model import GangSpec, Node, Pod, PodPhase, RoleSpec
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler

KEY = "ml/train"
GI = 1024**3


def _sched() -> Scheduler:
    s = Scheduler(CoreConfig(), FakeClock(1000.0))
    for i in range(2):
        alloc = {CPU: 64_000, MEMORY: 256 * GI, GPU: 8, PODS: 110}
        s.node_upsert(Node(f"n{i}", alloc, labels={"kubernetes.io/hostname": f"n{i}"}))
    return s


def _pod(name: str, group: str = KEY, role: str = "") -> Pod:
    return Pod(
        f"u-{name}",
        "ml",
        name,
        {CPU: 1000, MEMORY: GI, GPU: 1, PODS: 1},
        created=1000.0,
        group=group,
        role=role,
    )


def _settle(s: Scheduler) -> list[Decision]:
    """Run the scheduler until idle and confirm every binding as the watch would (bound,
    then Running)."""
    out = s.run_until_idle()
    for d in out:
        if isinstance(d, BindGang):
            for b in d.bindings:
                pod = s.pod(b.pod.uid)
                assert pod is not None
                s.pod_upsert(replace(pod, node_name=b.node, phase=PodPhase.RUNNING))
    return out


def _running_gang(
    s: Scheduler, n: int = 4, policy: str = "None", roles: tuple[RoleSpec, ...] = ()
) -> list[Pod]:
    s.gang_upsert(GangSpec(KEY, n, on_member_loss=policy, roles=roles))
    pods = [_pod(f"w{i}", role=roles[0].name if roles and i == 0 else "") for i in range(n)]
    for p in pods:
        s.pod_upsert(p)
    bound = [d for d in _settle(s) if isinstance(d, BindGang)]
    assert len(bound) == 1 and len(bound[0].bindings) == n
    view = s.view(KEY)
    assert view is not None and view.satisfied_once and view.running == n
    return [p for p in (s.pod(p.uid) for p in pods) if p is not None]


def _losses(out: list[Decision] | None) -> list[MemberLoss]:
    return [d for d in out or [] if isinstance(d, MemberLoss)]


def test_a_member_that_fails_starts_one_loss_and_the_status_says_so() -> None:
    s = _sched()
    pods = _running_gang(s)
    s.pod_upsert(replace(pods[0], phase=PodPhase.FAILED))
    status = s.group_status(KEY)
    assert status is not None
    # 3 members left of 4, one failed: the counts say Failed; the condition says why.
    assert (status.phase, status.scheduled, status.reason) == ("Failed", False, "MembersLost")
    assert "member w0 failed" in status.message and "3 of minMember 4" in status.message
    [loss] = _losses(s.schedule_one())
    assert (loss.gang, loss.running, loss.min_member, loss.restart) == (KEY, 3, 4, ())
    assert [p.name for p in loss.members] == ["w1", "w2", "w3"]
    assert "member w0 failed" in loss.message
    assert _losses(s.schedule_one()) == []  # returned once


def test_a_deleted_member_starts_one_loss_per_episode_and_a_replacement_ends_it() -> None:
    s = _sched()
    pods = _running_gang(s)
    s.pod_delete(pods[0].uid)
    s.pod_delete(pods[1].uid)  # the same episode
    losses = _losses(s.run_until_idle())
    assert len(losses) == 1 and "member w0 was deleted" in losses[0].message
    assert losses[0].running == 3
    # The controller recreates one: pending, it does not count yet.
    s.pod_upsert(_pod("w0-b"))
    status = s.group_status(KEY)
    assert status is not None and (status.phase, status.reason) == ("Unknown", "MembersLost")
    assert "2 of minMember 4" in status.message
    # Independent (the default): replacements are placed on their own as they come.
    assert _losses(_settle(s)) == []
    status = s.group_status(KEY)
    assert status is not None and status.reason == "MembersLost"  # 3 of 4 still
    s.pod_upsert(_pod("w1-b"))
    assert _losses(_settle(s)) == []
    status = s.group_status(KEY)
    assert status is not None and (status.phase, status.scheduled) == ("Running", True)
    # Whole again: the next loss is a new episode, with its own decision.
    member = s.pod("u-w2")
    assert member is not None
    s.pod_upsert(replace(member, deleting=True))
    [loss] = _losses(s.run_until_idle())
    assert "member w2 was deleted" in loss.message


def test_restart_gang_lists_the_members_left_and_schedules_the_gang_again_whole() -> None:
    s = _sched()
    pods = _running_gang(s, policy="RestartGang")
    s.pod_delete(pods[0].uid)
    [loss] = _losses(s.schedule_one())
    assert [p.name for p in loss.restart] == ["w1", "w2", "w3"]
    assert [p.name for p in loss.members] == ["w1", "w2", "w3"]
    assert "restarting the whole gang" in loss.message
    view = s.view(KEY)
    assert view is not None
    # The members it restarts count as being deleted from now on; the gang is not satisfied.
    assert (view.bound, view.satisfied_once) == (0, False)
    # A replacement that comes first is not bound alone, though it would fit.
    s.pod_upsert(_pod("w0-b"))
    assert not [d for d in s.run_until_idle() if isinstance(d, BindGang)]
    # The restarted members go (the watch confirms the deletion), the controller recreates them.
    for p in pods[1:]:
        gone = s.pod(p.uid)
        assert gone is not None
        s.pod_upsert(replace(gone, deleting=True))
        s.pod_delete(p.uid)
    for i in range(1, 4):
        s.pod_upsert(_pod(f"w{i}-b"))
    out = _settle(s)
    assert _losses(out) == []
    [bind] = [d for d in out if isinstance(d, BindGang)]
    assert len(bind.bindings) == 4
    status = s.group_status(KEY)
    assert status is not None and (status.phase, status.reason) == ("Running", "Scheduled")


def test_a_restart_whose_delete_failed_counts_the_member_again() -> None:
    s = _sched()
    pods = _running_gang(s, policy="RestartGang")
    s.pod_delete(pods[0].uid)
    [loss] = _losses(s.schedule_one())
    s.delete_failed(loss.restart[0].uid)
    view = s.view(KEY)
    assert view is not None and view.bound == 1
    s.delete_failed(loss.restart[0].uid)  # idempotent
    view = s.view(KEY)
    assert view is not None and view.bound == 1


def test_a_gang_never_satisfied_or_a_plain_pod_loses_nothing() -> None:
    s = _sched()
    s.gang_upsert(GangSpec(KEY, 4))
    pods = [_pod(f"w{i}") for i in range(3)]  # never enough for its quorum
    for p in pods:
        s.pod_upsert(p)
    s.pod_delete(pods[0].uid)
    plain = replace(_pod("solo", group=""), node_name="n0", phase=PodPhase.RUNNING)
    s.pod_upsert(plain)
    s.pod_upsert(replace(plain, phase=PodPhase.FAILED))
    assert _losses(s.run_until_idle()) == []


def test_finished_members_cleaned_up_are_no_loss() -> None:
    s = _sched()
    pods = _running_gang(s)
    for p in pods:
        s.pod_upsert(replace(p, phase=PodPhase.SUCCEEDED))
    for p in pods:
        s.pod_delete(p.uid)
    assert _losses(s.run_until_idle()) == []


def test_a_loss_needs_the_gang_short_overall_or_in_a_role() -> None:
    s = _sched()
    roles = (RoleSpec("ps", 1),)
    s.gang_upsert(GangSpec(KEY, 3, roles=roles))
    pods = [_pod("ps0", role="ps"), *(_pod(f"w{i}", role="worker") for i in range(3))]
    for p in pods:
        s.pod_upsert(p)
    _settle(s)
    s.pod_delete("u-w0")  # 3 of minMember 3 left, the ps among them: still whole
    assert _losses(s.run_until_idle()) == []
    ps = s.pod("u-ps0")
    assert ps is not None
    s.pod_upsert(replace(ps, phase=PodPhase.FAILED))
    [loss] = _losses(s.run_until_idle())
    assert loss.running == 2
    status = s.group_status(KEY)
    assert status is not None and "roles short: ps 0/1" in status.message


def test_lowering_min_member_ends_what_the_status_says() -> None:
    s = _sched()
    pods = _running_gang(s)
    s.pod_delete(pods[0].uid)
    s.gang_upsert(GangSpec(KEY, 3))
    status = s.group_status(KEY)
    assert status is not None and (status.phase, status.reason) == ("Running", "Scheduled")


def test_a_decision_about_a_gang_that_went_away_is_dropped() -> None:
    s = _sched()
    pods = _running_gang(s)
    for p in pods:
        s.pod_delete(p.uid)
    s.gang_delete(KEY)
    assert _losses(s.run_until_idle()) == []


@pytest.mark.parametrize("deleting", [True, False])
def test_a_member_being_deleted_is_lost_at_once(deleting: bool) -> None:
    s = _sched()
    pods = _running_gang(s)
    if deleting:
        s.pod_upsert(replace(pods[0], deleting=True))  # still bound, terminating
    else:
        s.pod_upsert(replace(pods[0], phase=PodPhase.FAILED))
    status = s.group_status(KEY)
    assert status is not None and status.reason == "MembersLost" and not status.scheduled
    # The counts say what the condition says: the member being deleted is neither bound nor
    # running any more, though it still exists until it is gone.
    assert (status.counts.total, status.counts.scheduled, status.counts.running) == (4, 3, 3)
    # A failed member leaves fewer than minMember that can run: the gang has Failed.
    assert status.phase == ("Unknown" if deleting else "Failed")
    assert len(_losses(s.run_until_idle())) == 1


def test_the_policy_is_read_from_the_podgroup_and_a_bad_value_is_invalid_spec() -> None:
    from gangsched.api.podgroup import podgroup_from, xk8s_podgroup_from

    def pg(spec: dict[str, object], annotations: dict[str, str] | None = None) -> dict[str, object]:
        meta = {"name": "train", "namespace": "ml", "annotations": annotations or {}}
        return {"metadata": meta, "spec": {"minMember": 2, **spec}}

    assert podgroup_from(pg({})).on_member_loss == "None"
    assert podgroup_from(pg({"onMemberLoss": "RestartGang"})).on_member_loss == "RestartGang"
    bad = podgroup_from(pg({"onMemberLoss": "restart"}))
    assert bad.invalid_reason == "spec.onMemberLoss: must be None or RestartGang, got 'restart'"
    other = xk8s_podgroup_from(pg({}, {"gangsched.io/on-member-loss": "RestartGang"}))
    assert other.on_member_loss == "RestartGang"
    wrong = xk8s_podgroup_from(pg({}, {"gangsched.io/on-member-loss": "Always"}))
    assert "gangsched.io/on-member-loss" in wrong.invalid_reason
