"""A gang gangsched failed on (an error inside the scheduler while deciding it) is held back by
the next process for a while, and every other gang is scheduled meanwhile
(core/steps/quarantine.py); the record of the failure is made by ``Scheduler.hold_back``."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangsched.core.gang import PLAIN_PREFIX
from gangsched.core.model import Pod, SchedulerError
from gangsched.core.steps.quarantine import HOLD_MOST, REASON
from gangsched.core.steps.turn import Turn
from tests.core.test_preemption import evict, full_cluster, high_gang, preempts, run_gang
from tests.core.test_scheduler import T0, Harness, bound_uids, gpu_node, members, unschedulable


def held(pods: list[Pod], until: float, count: int = 1) -> list[Pod]:
    record = SchedulerError(count, until, "KeyError: 'gpu-3'")
    return [replace(p, scheduler_error=record) for p in pods]


def test_a_gang_that_gangsched_failed_on_waits_out_its_hold_while_others_bind() -> None:
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/bad", 2)
    h.gang("ml/good", 2)
    bad = held(members("ml/bad", 2), until=T0 + 600)
    good = members("ml/good", 2)
    h.add(*bad, *good)
    out = h.run()
    assert bound_uids(out) == {p.uid for p in good}
    told = unschedulable(out)
    assert [(u.gang, u.reason) for u in told] == [("ml/bad", REASON)]
    assert {r.name for r in told[0].pods} == {"bad-0", "bad-1"}
    message = told[0].message
    assert "KeyError: 'gpu-3'" in message and "once" in message
    assert "gangsched.io/SchedulerError condition" in message
    view = h.s.view("ml/bad")
    assert view is not None and view.reason == REASON
    assert h.s.cache.assumed == {}

    h.advance(599)
    assert bound_uids(h.run()) == set(), "not before its time"
    h.advance(2)
    assert bound_uids(h.run()) == {p.uid for p in bad}


def test_removing_the_record_tries_the_gang_again_at_once() -> None:
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/bad", 2)
    bad = held(members("ml/bad", 2), until=T0 + 3600)
    h.add(*bad)
    assert bound_uids(h.run()) == set()
    h.add(*(replace(p, scheduler_error=None) for p in bad))
    assert bound_uids(h.run()) == {p.uid for p in bad}


def test_a_record_whose_time_passed_holds_nothing_back() -> None:
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/old", 2)
    pods = held(members("ml/old", 2), until=T0 - 1, count=3)
    h.add(*pods)
    out = h.run()
    assert bound_uids(out) == {p.uid for p in pods}
    assert unschedulable(out) == []


def test_the_latest_record_of_the_members_holds_the_gang() -> None:
    """A member made after the failure carries no record; a member with an older one does
    not shorten the hold."""
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/mixed", 3)
    pods = members("ml/mixed", 3)
    h.add(
        *held(pods[:1], until=T0 + 100),
        *held(pods[1:2], until=T0 + 900, count=2),
        pods[2],
    )
    assert bound_uids(h.run()) == set()
    h.advance(200)
    out = h.run()
    assert bound_uids(out) == set()
    h.advance(701)
    assert bound_uids(h.run()) == {p.uid for p in pods}


def test_hold_back_records_the_failure_on_the_unbound_members_doubling_each_time() -> None:
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/train", 3)
    pods = members("ml/train", 3)
    h.add(*pods)
    h.add(replace(h.s.cache.pods[pods[0].uid], node_name="n1"))  # one already bound
    held_back = h.s.hold_back("ml/train", 600, "RuntimeError: boom")
    assert held_back is not None
    record, told = held_back
    assert record == SchedulerError(1, T0 + 600, "RuntimeError: boom")
    assert told.reason == REASON and {r.name for r in told.pods} == {"train-1", "train-2"}
    assert "RuntimeError: boom" in told.message
    assert h.s.cache.pods[pods[1].uid].scheduler_error is None, "the core's pods unchanged"
    view = h.s.view("ml/train")
    assert view is not None and view.reason == REASON

    # the next process reads the record with the pods, and fails on the gang again
    h.add(*(replace(h.s.cache.pods[r.uid], scheduler_error=record) for r in told.pods))
    again = h.s.hold_back("ml/train", 600, "RuntimeError: boom")
    assert again is not None and again[0].count == 2 and again[0].until == T0 + 1200
    assert "2 times" in again[1].message


def test_the_hold_is_a_day_at_most() -> None:
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/train", 1)
    h.add(*held(members("ml/train", 1), until=T0 + 10, count=40))
    held_back = h.s.hold_back("ml/train", 600, "E: x")
    assert held_back is not None and held_back[0].until == T0 + HOLD_MOST


def test_hold_back_of_a_plain_pod_and_of_a_gang_with_nothing_unbound() -> None:
    h = Harness(None, gpu_node("n1", 8))
    plain = members("", 1, prefix="solo")[0]
    h.add(plain)
    held_back = h.s.hold_back(PLAIN_PREFIX + plain.uid, 60, "E: x")
    assert held_back is not None and [r.name for r in held_back[1].pods] == ["solo-0"]
    assert h.s.hold_back("ml/none", 60, "E: x") is None


def test_the_gang_being_decided_is_known_when_a_cycle_raises() -> None:
    """What the daemon holds back when the core raises (kube/service.py)."""
    h = Harness(None, gpu_node("n1", 8))
    h.gang("ml/boom", 2)
    h.add(*members("ml/boom", 2))

    class Boom:
        def run(self, t: Turn) -> bool:
            raise RuntimeError("boom")

    h.s.steps = (Boom(), *h.s.steps)
    with pytest.raises(RuntimeError, match="boom"):
        h.s.schedule_one()
    assert h.s.deciding == "ml/boom"


def test_the_preemptor_being_bound_is_known_when_binding_it_raises() -> None:
    """A preemptor whose victims are gone is bound at the next tick, outside any gang's
    turn: it is the gang held back if that raises."""
    h = full_cluster()
    run_gang(h, "ml/low", 2, 8, 0)
    high_gang(h, 2)
    [d] = preempts(h.run())
    evict(h, d)

    def boom(*_: object) -> None:
        raise RuntimeError("boom")

    h.s.permit_step.bind = boom  # type: ignore[method-assign,assignment]
    with pytest.raises(RuntimeError, match="boom"):
        h.s.schedule_one()
    assert h.s.deciding == "ml/high"
