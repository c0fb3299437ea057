"""An eviction decided is an eviction carried out (core/eviction.py): a restarted scheduler (a
fresh core fed the cluster as the watch lists it) finishes the evictions its predecessor
marked, a Strict gang whole, and a failed delete is tried again after a backoff."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gangsched.core.decisions import Decision, Evict, Preempt
from gangsched.core.model import GangMode, Pod, PodPhase
from tests.core.test_scheduler import Harness, binds, gpu_node, members, pod

MARK = "gangsched: preempting to accommodate a higher priority gang ml/high (priority 100)"


def evicts(decisions: list[Decision]) -> list[Evict]:
    return [d for d in decisions if isinstance(d, Evict)]


def running(pods: list[Pod], nodes: list[str]) -> list[Pod]:
    return [
        replace(p, node_name=nodes[i % len(nodes)], phase=PodPhase.RUNNING)
        for i, p in enumerate(pods)
    ]


def restarted(*pods: Pod, strict: bool = True, min_member: int = 8) -> Harness:
    """A fresh core that lists a cluster of 4 nodes x 4 GPUs, gang ml/low running there."""
    h = Harness(None, *(gpu_node(f"n{i}", 4) for i in range(4)))
    mode = GangMode.STRICT if strict else GangMode.NON_STRICT
    h.gang("ml/low", min_member, mode=mode)
    h.add(*pods)
    return h


def low_gang(marked: int, size: int = 8) -> list[Pod]:
    pods = running(members("ml/low", size, gpus=1), ["n0", "n1"])
    return [replace(p, disruption=MARK) if i < marked else p for i, p in enumerate(pods)]


@pytest.mark.parametrize("marked", [1, 4, 7])
def test_a_strict_gang_with_marked_members_is_evicted_whole_after_a_restart(
    marked: int,
) -> None:
    # one member was deleted before the crash (7 left), ``marked`` of them carry the mark
    pods = low_gang(marked)[:7]
    h = restarted(*pods)
    out = h.run()
    [d] = evicts(out)
    assert d.gang == "ml/low"
    assert sorted(v.pod.name for v in d.victims) == [f"low-{i}" for i in range(7)]
    assert {v.marked for v in d.victims if v.pod.name < f"low-{marked}"} == {True}
    assert not any(v.marked for v in d.victims if v.pod.name >= f"low-{marked}")
    assert MARK in d.message
    # counted as being deleted from now on: asked once, never again
    assert all(h.s.cache.pods[v.pod.uid].deleting for v in d.victims)
    assert not evicts(h.run())
    h.advance(600)
    assert not evicts(h.run())


def test_marks_of_another_scheduler_are_left_alone() -> None:
    other = "default-scheduler: preempting to accommodate a higher priority pod"
    pods = [replace(p, disruption=other) for p in low_gang(0)]
    h = restarted(*pods)
    assert not evicts(h.run())


def test_a_gang_without_marks_is_left_alone() -> None:
    h = restarted(*low_gang(0))
    assert not evicts(h.run())


def test_a_non_strict_gang_gives_up_only_its_marked_members() -> None:
    h = restarted(*low_gang(2), strict=False, min_member=4)
    [d] = evicts(h.run())
    assert sorted(v.pod.name for v in d.victims) == ["low-0", "low-1"]


def test_a_marked_pod_outside_any_gang_goes_alone() -> None:
    loose = running([pod("loose", gpus=1, disruption=MARK)], ["n2"])
    h = restarted(*low_gang(0), *loose)
    [d] = evicts(h.run())
    assert d.gang == "" and [v.pod.name for v in d.victims] == ["loose"]


def test_the_gang_spec_arriving_after_its_pods_still_evicts_it_whole() -> None:
    """The watch may list pods before PodGroups: the unit is decided when the eviction is
    carried out (at the first cycle, after every list is in), not at the pod event."""
    h = Harness(None, *(gpu_node(f"n{i}", 4) for i in range(4)))
    h.add(*low_gang(1)[:7])
    h.gang("ml/low", 8)
    [d] = evicts(h.run())
    assert len(d.victims) == 7


def test_terminating_and_finished_members_are_not_evicted_again() -> None:
    pods = low_gang(3)
    pods[1] = replace(pods[1], deleting=True)
    pods[2] = replace(pods[2], phase=PodPhase.SUCCEEDED)
    h = restarted(*pods)
    [d] = evicts(h.run())
    assert sorted(v.pod.name for v in d.victims) == ["low-0", *(f"low-{i}" for i in range(3, 8))]


def test_a_failed_delete_is_tried_again_after_a_backoff_until_the_pod_goes() -> None:
    h = restarted(*low_gang(8))
    [d] = evicts(h.run())
    victim = d.victims[0].pod.uid
    h.s.delete_failed(victim)
    assert not h.s.cache.pods[victim].deleting  # counted as the watch last showed it
    assert not evicts(h.run())
    wake = h.s.next_wakeup()
    assert wake is not None and wake - h.clock.now() == pytest.approx(5.0)
    h.advance(5)
    [again] = evicts(h.run())
    assert [v.pod.uid for v in again.victims] == [victim]
    h.s.delete_failed(victim)
    h.advance(5)
    assert not evicts(h.run())  # the backoff doubled
    h.advance(5)
    assert evicts(h.run())
    h.s.pod_delete(victim)
    h.advance(600)
    assert not evicts(h.run())
    assert h.s.next_wakeup() is None or h.s.next_wakeup() != pytest.approx(h.clock.now())


def test_a_victim_of_this_process_whose_delete_failed_is_evicted_again() -> None:
    """Within one process: a preemption's victim whose delete failed (marked or not) is tried
    again, so its Strict gang is not left half evicted."""
    h = Harness(None, gpu_node("n0", 8), gpu_node("n1", 8))
    h.gang("ml/low", 2)
    h.add(*members("ml/low", 2, gpus=8, priority=0))
    h.run()
    h.gang("ml/high", 2)
    h.add(*members("ml/high", 2, gpus=8, priority=100))
    [p] = [d for d in h.run() if isinstance(d, Preempt)]
    first, second = (v.pod.uid for v in p.victims)
    h.s.pod_delete(first)
    h.s.delete_failed(second)
    h.advance(5)
    [d] = evicts(h.run())
    assert [v.pod.uid for v in d.victims] == [second]
    h.s.pod_delete(second)
    out = h.run()
    assert binds(out) and binds(out)[0].gang == "ml/high"
