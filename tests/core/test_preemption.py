"""Whole-gang preemption in the core: who is evicted, what is held for the preemptor, and when
it binds (the adapter's side, the API writes, is tested in tests/kube and tests/e2e)."""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.config import CoreConfig
from gangsched.core.decisions import Decision, GangTimedOut, GangUnschedulable, Preempt
from gangsched.core.model import DisruptionBudget, GangMode, LabelSelector, PodPhase
from gangsched.core.resources import GPU
from tests.core.test_scheduler import (
    Harness,
    binds,
    bound_uids,
    gpu_node,
    members,
    node_load,
    pod,
)


def preempts(decisions: list[Decision]) -> list[Preempt]:
    return [d for d in decisions if isinstance(d, Preempt)]


def full_cluster(nodes: int = 2, config: CoreConfig | None = None) -> Harness:
    h = Harness(config, *(gpu_node(f"n{i}", 8) for i in range(nodes)))
    return h


def run_gang(h: Harness, key: str, n: int, gpus: int, priority: int, **kw: object) -> None:
    h.gang(key, n, **kw)
    h.add(*members(key, n, gpus=gpus, priority=priority))
    h.run()


def high_gang(h: Harness, n: int = 1, **kw: object) -> None:
    """The preemptor: ``ml/high``, ``n`` members of 8 GPUs at priority 100 (not run yet)."""
    h.gang("ml/high", n)
    h.add(*members("ml/high", n, gpus=8, priority=100, **kw))  # type: ignore[arg-type]


def evict(h: Harness, d: Preempt) -> None:
    for v in d.victims:
        h.s.pod_delete(v.pod.uid)


def test_a_high_priority_gang_evicts_a_low_one_whole_and_binds_once_it_is_gone() -> None:
    h = full_cluster()
    run_gang(h, "ml/low", 2, 8, 0)
    assert node_load(h) == {"n0": 8, "n1": 8}
    high_gang(h, 2)
    out = h.run()
    [d] = preempts(out)
    assert sorted(v.pod.name for v in d.victims) == ["low-0", "low-1"]
    assert {v.gang for v in d.victims} == {"ml/low"}
    assert d.priority == 100 and len(d.nominations) == 2
    assert not binds(out)
    # the capacity is held: the nodes count both gangs until the victims are gone
    assert node_load(h) == {"n0": 16, "n1": 16}
    view = h.s.view("ml/high")
    assert view is not None and view.reason == "Preempting"
    evict(h, d)
    out = h.run()
    [b] = binds(out)
    assert b.gang == "ml/high" and len(b.bindings) == 2
    assert node_load(h) == {"n0": 8, "n1": 8}


def test_only_strictly_lower_priority_is_evicted() -> None:
    h = full_cluster()
    run_gang(h, "ml/peer", 2, 8, 100)
    high_gang(h, 2)
    out = h.run()
    assert not preempts(out)
    view = h.s.view("ml/high")
    assert view is not None and view.reason == "Unschedulable"


def test_a_gang_with_one_member_of_higher_priority_is_not_a_victim() -> None:
    h = full_cluster()
    h.gang("ml/mixed", 2)
    h.add(pod("mixed-0", "ml/mixed", gpus=8, priority=0))
    h.add(pod("mixed-1", "ml/mixed", gpus=8, priority=200))
    h.run()
    high_gang(h)
    assert not preempts(h.run())


def test_the_gang_preempts_with_its_lowest_member_priority() -> None:
    h = full_cluster()
    run_gang(h, "ml/low", 2, 8, 50)
    h.gang("ml/high", 2)
    h.add(pod("high-0", "ml/high", gpus=8, priority=100))
    h.add(pod("high-1", "ml/high", gpus=8, priority=50))
    assert not preempts(h.run()), "a member of priority 50 may not evict priority 50"


def test_preemption_policy_never_and_the_podgroup_opt_out() -> None:
    for kw, pkw in (({}, {"preemption_policy": "Never"}), ({"preempt": False}, {})):
        h = full_cluster()
        run_gang(h, "ml/low", 2, 8, 0)
        h.gang("ml/high", 2, **kw)
        h.add(*members("ml/high", 2, gpus=8, priority=100, **pkw))
        assert not preempts(h.run())


def test_preemption_can_be_turned_off() -> None:
    h = full_cluster(config=CoreConfig(preemption=False))
    run_gang(h, "ml/low", 2, 8, 0)
    high_gang(h, 2)
    assert not preempts(h.run())


def test_fewest_victims_of_the_lowest_priority_then_fewest_gpus() -> None:
    h = full_cluster(nodes=3)
    run_gang(h, "ml/mid", 1, 8, 50)  # n0
    run_gang(h, "ml/small", 2, 4, 10)  # n1: two 4-GPU pods
    run_gang(h, "ml/low", 1, 8, 10)  # n2
    placed = {p.name: p.node_name for p in h.s.cache.pods.values()}
    high_gang(h)
    [d] = preempts(h.run())
    # priority 10 victims suffice; between the 8-GPU gang "low" and the two-pod gang "small"
    # (8 GPUs too), one gang either way: ties go to the youngest... both equal, so the
    # victims are one whole gang of priority 10 and nothing of priority 50
    assert {v.priority for v in d.victims} == {10}
    assert len({v.gang for v in d.victims}) == 1
    assert all(placed[v.pod.name] != placed["mid-0"] for v in d.victims)


def test_fewest_gpus_taken() -> None:
    h = full_cluster(nodes=2)
    run_gang(h, "ml/big", 1, 8, 0)  # a whole node
    run_gang(h, "ml/half", 1, 4, 0)  # half of the other
    high_gang(h)
    [d] = preempts(h.run())
    assert [v.pod.name for v in d.victims] == ["half-0"], "4 GPUs taken, not 8"


def test_youngest_victims_first() -> None:
    h = full_cluster(nodes=2)
    h.gang("ml/old", 1, created=1.0)
    h.add(*members("ml/old", 1, gpus=8, priority=0, created=1.0))
    h.gang("ml/young", 1, created=2.0)
    h.add(*members("ml/young", 1, gpus=8, priority=0, created=2.0))
    h.run()
    high_gang(h)
    [d] = preempts(h.run())
    assert [v.gang for v in d.victims] == ["ml/young"]


def test_a_nonstrict_gang_gives_only_members_above_min_member() -> None:
    h = full_cluster(nodes=4)
    run_gang(h, "ml/elastic", 2, 8, 0, mode=GangMode.NON_STRICT)
    h.add(*members("ml/elastic", 2, prefix="more", gpus=8, priority=0))
    h.run()
    assert sum(node_load(h).values()) == 32
    high_gang(h, 2)
    [d] = preempts(h.run())
    assert len(d.victims) == 2 and {v.gang for v in d.victims} == {"ml/elastic"}
    h.gang("ml/more", 3)
    h.add(*members("ml/more", 3, gpus=8, priority=100))
    assert not preempts(h.run()), "the two left are the elastic gang's minMember"


def test_a_disruption_budget_is_spared_where_it_can_be() -> None:
    h = full_cluster(nodes=2)
    run_gang(h, "ml/guarded", 1, 8, 0)
    run_gang(h, "ml/open", 1, 8, 0)
    guarded = next(p for p in h.s.cache.pods.values() if p.name == "guarded-0")
    h.s.pod_upsert(replace(guarded, labels={"app": "guarded"}))
    sel = LabelSelector(match_labels=(("app", "guarded"),))
    h.s.budget_upsert(DisruptionBudget("ml", "pdb", sel, 0))
    high_gang(h, created=5000.0)
    [d] = preempts(h.run())
    assert [v.gang for v in d.victims] == ["ml/open"]


def test_a_budget_does_not_block_when_nothing_else_would_do() -> None:
    h = full_cluster(nodes=1)
    run_gang(h, "ml/guarded", 1, 8, 0)
    guarded = next(p for p in h.s.cache.pods.values() if p.name == "guarded-0")
    h.s.pod_upsert(replace(guarded, labels={"app": "guarded"}))
    sel = LabelSelector(match_labels=(("app", "guarded"),))
    h.s.budget_upsert(DisruptionBudget("ml", "pdb", sel, 0))
    high_gang(h)
    [d] = preempts(h.run())
    assert [v.gang for v in d.victims] == ["ml/guarded"]


def test_lower_priority_work_cannot_take_the_held_capacity() -> None:
    h = full_cluster(nodes=1)
    run_gang(h, "ml/low", 1, 8, 0)
    high_gang(h)
    [d] = preempts(h.run())
    evict(h, d)
    # nothing happens between the victims going and the next cycle but a lower gang arriving
    h.gang("ml/other", 1)
    h.add(*members("ml/other", 1, gpus=8, priority=0))
    out = h.run()
    assert [b.gang for b in binds(out)] == ["ml/high"]
    assert "other-0" not in {b.pod.name for b in binds(out)[0].bindings}


def test_victims_promised_are_never_chosen_twice_and_terminating_pods_are_awaited() -> None:
    h = full_cluster(nodes=2)
    run_gang(h, "ml/low", 2, 8, 0)
    h.gang("ml/a", 1)
    h.add(*members("ml/a", 1, gpus=8, priority=100))
    [first] = preempts(h.run())
    assert len(first.victims) == 2, "a strict gang goes whole"
    # The victims are marked terminating (the adapter deleted them): a second gang of the
    # same priority finds the capacity they free already promised, and evicts nothing more.
    for v in first.victims:
        p = h.s.cache.pods[v.pod.uid]
        h.s.pod_upsert(replace(p, deleting=True))
    h.gang("ml/b", 1)
    h.add(*members("ml/b", 1, gpus=8, priority=100))
    out = h.run()
    for d in preempts(out):
        assert not {v.pod.uid for v in d.victims} & {v.pod.uid for v in first.victims}


def test_a_restarted_scheduler_waits_for_terminating_victims_without_evicting_more() -> None:
    h = full_cluster(nodes=2)
    run_gang(h, "ml/low", 1, 8, 0)  # n0 or n1
    run_gang(h, "ml/other", 1, 8, 0)
    low = next(p for p in h.s.cache.pods.values() if p.name == "low-0")
    h.s.pod_upsert(replace(low, deleting=True))  # evicted before the restart
    high_gang(h)
    [d] = preempts(h.run())
    assert d.victims == () and d.nominations[0].node == low.node_name
    h.s.pod_delete(low.uid)
    [b] = binds(h.run())
    assert b.bindings[0].node == low.node_name
    assert any(p.name == "other-0" and p.node_name for p in h.s.cache.pods.values())


def test_the_hold_is_given_back_if_the_victims_do_not_go() -> None:
    h = full_cluster(nodes=1, config=CoreConfig(preemption_hold_seconds=30))
    run_gang(h, "ml/low", 1, 8, 0)
    high_gang(h)
    assert preempts(h.run())
    h.advance(31)
    out = h.run()
    released = [d for d in out if isinstance(d, GangTimedOut)]
    assert released and released[0].reason == "Released"
    assert node_load(h) == {"n0": 8}


def test_a_victim_that_finishes_counts_as_gone() -> None:
    h = full_cluster(nodes=1)
    run_gang(h, "ml/low", 1, 8, 0)
    high_gang(h)
    [d] = preempts(h.run())
    h.finish(d.victims[0].pod.uid, PodPhase.FAILED)
    out = h.run()
    assert bound_uids(out) == {b.pod.uid for b in d.nominations}


def test_the_preemptor_respects_its_own_constraints() -> None:
    h = Harness(None, gpu_node("n0", 8), replace(gpu_node("n1", 8), labels={"pool": "a"}))
    run_gang(h, "ml/low", 1, 8, 0)
    run_gang(h, "ml/low2", 1, 8, 0)
    h.gang("ml/high", 1)
    high = pod("high-0", "ml/high", gpus=8, priority=100)
    high = replace(high, placement=replace(high.placement, node_selector=(("pool", "a"),)))
    h.add(high)
    [d] = preempts(h.run())
    assert [v.node for v in d.victims] == ["n1"] and d.nominations[0].node == "n1"


def test_nothing_to_gain_means_no_preemption() -> None:
    h = full_cluster(nodes=1)
    run_gang(h, "ml/low", 1, 4, 0)
    h.gang("ml/huge", 2)
    h.add(*members("ml/huge", 2, gpus=8, priority=100))
    assert not preempts(h.run()), "two 8-GPU pods never fit one 8-GPU node"
    assert node_load(h) == {"n0": 4}
    assert h.s.cache.nodes["n0"].requested.get(GPU, 0) == 4


def test_a_budget_with_an_empty_selector_protects_nothing_as_in_kube_scheduler() -> None:
    h = full_cluster(nodes=2)
    h.gang("ml/old", 1, created=1.0)
    h.add(*members("ml/old", 1, gpus=8, priority=0, created=1.0))
    h.gang("ml/young", 1, created=2.0)
    h.add(*members("ml/young", 1, gpus=8, priority=0, created=2.0))
    h.run()
    for p in list(h.s.cache.pods.values()):
        h.s.pod_upsert(replace(p, labels={"app": "x"}))
    h.s.budget_upsert(DisruptionBudget("ml", "all", LabelSelector(), 0))
    high_gang(h)
    [d] = preempts(h.run())
    assert [v.gang for v in d.victims] == ["ml/young"], "the youngest, as without a budget"


def test_fewest_victim_gangs_before_fewest_gpus() -> None:
    h = full_cluster(nodes=2)
    run_gang(h, "ml/whole", 1, 8, 0)  # one gang, a whole node
    h.gang("ml/a", 1)
    h.add(*members("ml/a", 1, gpus=4, priority=0))
    h.gang("ml/b", 1)
    h.add(*members("ml/b", 1, gpus=4, priority=0))
    h.run()
    assert sorted(node_load(h).values()) == [8, 8]
    high_gang(h)
    [d] = preempts(h.run())
    assert [v.gang for v in d.victims] == ["ml/whole"], "one gang rather than two"


def test_the_message_says_why_preemption_did_not_help() -> None:
    h = full_cluster(nodes=1)
    run_gang(h, "ml/low", 1, 8, 0)
    h.gang("ml/polite", 1)
    h.add(*members("ml/polite", 1, gpus=8, priority=100, preemption_policy="Never"))
    out = h.run()
    [u] = [d for d in out if isinstance(d, GangUnschedulable) and d.gang == "ml/polite"]
    assert "preemption: not eligible due to preemptionPolicy=Never" in u.message
    h.gang("ml/huge", 2)
    h.add(*members("ml/huge", 2, gpus=8, priority=100))
    out = h.run()
    view = h.s.view("ml/huge")
    assert view is not None and "preemption: no running pods of lower priority" in view.message
    h.gang("ml/peer", 1)
    h.add(*members("ml/peer", 1, gpus=8, priority=0))
    h.run()
    view = h.s.view("ml/peer")
    assert view is not None and "preemption" not in view.message, "nothing runs below it"


KUEUE = {"kueue.x-k8s.io/podset": "main"}


def test_pods_that_kueue_admitted_are_never_victims() -> None:
    """Kueue counts an admitted workload's quota until Kueue itself evicts it: gangsched does
    not evict its pods (a gang or a pod alone), and says so."""
    h = full_cluster(nodes=2)
    h.gang("ml/admitted", 1)
    h.add(*members("ml/admitted", 1, gpus=8, priority=0, labels=KUEUE))
    h.add(pod("loose", gpus=8, priority=0, labels=KUEUE))
    h.run()
    assert node_load(h) == {"n0": 8, "n1": 8}
    high_gang(h)
    out = h.run()
    assert not preempts(out)
    view = h.s.view("ml/high")
    assert view is not None and view.reason == "Unschedulable"
    assert "2 running pod(s) of lower priority were admitted by Kueue" in view.message


def test_a_gang_kueue_admitted_still_evicts_pods_outside_kueue() -> None:
    h = full_cluster(nodes=1)
    run_gang(h, "ml/low", 1, 8, 0)
    h.gang("ml/high", 1)
    h.add(*members("ml/high", 1, gpus=8, priority=100, labels=KUEUE))
    [d] = preempts(h.run())
    assert [v.gang for v in d.victims] == ["ml/low"]


def test_a_gang_with_one_member_kueue_admitted_is_not_a_victim_in_part() -> None:
    """Its other members are not evicted either: that would break a gang Kueue admitted."""
    h = full_cluster(nodes=2)
    h.gang("ml/mixed", 2)
    h.add(pod("mixed-0", "ml/mixed", gpus=8, priority=0, labels=KUEUE))
    h.add(pod("mixed-1", "ml/mixed", gpus=8, priority=0))
    h.run()
    assert node_load(h) == {"n0": 8, "n1": 8}
    high_gang(h)
    assert not preempts(h.run())


def test_a_gang_woken_ahead_of_its_backoff_preempts_when_the_freed_room_and_victims_let_it() -> (
    None
):
    """The room freed on a node is not enough for a member, but with the node's pods of lower
    priority evicted it is: a waiting gang that may preempt, woken ahead of its backoff with
    nothing else queued, is placed (and preempts) then, not failed without a placement as a
    gang that cannot preempt is (the freed room alone fits no member). Failed so, it would
    wait for another event, and a gang that came first would take its victims."""
    h = full_cluster(1, CoreConfig(backoff_initial_seconds=4.0, backoff_max_seconds=8.0))
    h.add(
        pod("peer", gpus=4, priority=100, node_name="n0", phase=PodPhase.RUNNING),
        pod("low", gpus=4, priority=0, node_name="n0", phase=PodPhase.RUNNING),
    )
    high_gang(h)
    out = h.run()
    assert not preempts(out)  # the peer is not a victim: no room for 8 GPUs
    h.advance(1)
    h.s.pod_delete("uid-peer")  # 4 GPUs free on n0; with "low" evicted, all 8
    [d] = preempts(h.run())
    assert d.gang == "ml/high" and [v.pod.name for v in d.victims] == ["low"]


def test_a_gang_woken_ahead_of_its_backoff_is_not_placed_when_victims_would_not_make_room() -> None:
    """The same gang, when the node freed has no room for a member even with its pods of
    lower priority gone: it fails again without a placement, until they would."""
    h = full_cluster(1, CoreConfig(backoff_initial_seconds=4.0, backoff_max_seconds=8.0))
    h.add(
        pod("peer", gpus=4, priority=100, node_name="n0", phase=PodPhase.RUNNING),
        pod("peer2", gpus=2, priority=100, node_name="n0", phase=PodPhase.RUNNING),
        pod("low", gpus=2, priority=0, node_name="n0", phase=PodPhase.RUNNING),
    )
    high_gang(h)
    assert not preempts(h.run())
    cycles = h.s.cycles
    h.advance(1)
    h.s.pod_delete("uid-peer2")  # 2 free, 4 with "low" gone: no room for 8
    assert h.run() == [] and h.s.cycles == cycles
    h.advance(1)
    h.s.pod_delete("uid-peer")  # 6 free, 8 with "low" gone
    [d] = preempts(h.run())
    assert [v.pod.name for v in d.victims] == ["low"] and h.s.cycles == cycles + 1
