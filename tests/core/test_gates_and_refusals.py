"""Scheduling gates (PreEnqueue) and pods refused because gangsched cannot honour a field."""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.config import CoreConfig
from gangsched.core.model import HostPort, PodVolumes
from gangsched.core.plugins import DEFAULT_FILTERS
from tests.core.test_scheduler import Harness, binds, bound_uids, gpu_node, members, unschedulable


def test_gang_with_a_gated_member_waits_then_binds_when_the_gate_is_lifted() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/held", 3)
    pods = members("ml/held", 3)
    gated = replace(pods[2], gates=("example.com/quota",))
    h.add(pods[0], pods[1], gated)
    out = h.run()
    assert binds(out) == []
    view = h.s.view("ml/held")
    assert view is not None
    assert view.reason == "SchedulingGated"
    assert "example.com/quota" in view.message
    assert [u.reason for u in unschedulable(out)] == ["SchedulingGated"]
    assert h.s.cache.assumed == {}

    h.add(replace(gated, gates=()))
    out = h.run()
    assert bound_uids(out) == {p.uid for p in pods}


def test_gated_extra_member_does_not_hold_back_a_gang_that_has_quorum() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/extra", 2)
    pods = members("ml/extra", 3)
    h.add(pods[0], pods[1], replace(pods[2], gates=("g",)))
    out = h.run()
    assert bound_uids(out) == {pods[0].uid, pods[1].uid}


def test_a_gang_whose_only_members_are_gated_says_so() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/all", 2)
    h.add(*(replace(p, gates=("g",)) for p in members("ml/all", 2)))
    assert binds(h.run()) == []
    view = h.s.view("ml/all")
    assert view is not None and view.reason == "SchedulingGated"


def test_a_field_whose_filter_is_disabled_is_refused_by_name() -> None:
    filters = tuple(f for f in DEFAULT_FILTERS if f != "NodePorts")
    h = Harness(CoreConfig(filters=filters), gpu_node("n1", 4))
    h.gang("ml/ports", 2)
    pods = members("ml/ports", 2, host_ports=(HostPort(29500),))
    h.add(*pods)
    out = h.run()
    assert binds(out) == []
    refused = unschedulable(out)
    assert refused and refused[0].reason == "Unsupported"
    assert "hostPort: the NodePorts filter is disabled" in refused[0].message
    assert h.s.cache.assumed == {}


def test_unsupported_member_is_refused_and_never_bound_while_the_rest_waits() -> None:
    h = Harness(None, gpu_node("n1", 4))
    h.gang("ml/dra", 2)
    pods = members("ml/dra", 2)
    bad = replace(pods[1], unsupported="spec.volumes[0].rbd: not supported")
    h.add(pods[0], bad)
    out = h.run()
    assert binds(out) == []
    reasons = {u.reason for u in unschedulable(out)}
    assert "Unsupported" in reasons
    assert any("spec.volumes[0].rbd" in u.message for u in unschedulable(out))


def test_pods_with_claims_are_refused_when_volume_binding_is_disabled() -> None:
    filters = tuple(f for f in DEFAULT_FILTERS if f != "VolumeBinding")
    h = Harness(CoreConfig(filters=filters), gpu_node("n1", 4))
    p = replace(members("ml/vol", 1)[0], group="", volumes=PodVolumes(claims=("data",)))
    h.add(p)
    out = h.run()
    assert binds(out) == []
    assert any("spec.volumes" in u.message for u in unschedulable(out))
