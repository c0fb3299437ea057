"""NodePorts: host port conflicts with kube-scheduler v1.36's semantics (protocol, host IP
wildcard), counted from the cache, and gang members asking the same host port."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

from gangsched.core.cache import ClusterCache
from gangsched.core.framework import Code, CycleState
from gangsched.core.model import HostPort, Pod, PodPhase
from gangsched.core.plugins.node_ports import PORTS_CONFLICT, NodePorts, ports_conflict
from tests.core.builders import make_node, make_pod
from tests.core.test_scheduler import Harness, binds, gpu_node, members, unschedulable

REASON = "node(s) didn't have free ports for the requested pod ports"


def wanting(*ports: HostPort, name: str = "p") -> Pod:
    return replace(make_pod(name).obj(), host_ports=ports)


def fits(want: tuple[HostPort, ...], used: tuple[HostPort, ...]) -> bool:
    info = make_node("n1").cpu("4").info()
    for p in used:
        info.ports[p] = info.ports.get(p, 0) + 1
    plugin = NodePorts()
    pod = wanting(*want)
    state = CycleState()
    pre = plugin.pre_filter(pod, state)
    if pre.code is Code.SKIP:
        return True
    assert pre.ok
    return plugin.filter_with(pod, info, state).ok


@dataclass(frozen=True)
class PortCase:
    name: str
    want: tuple[HostPort, ...]
    used: tuple[HostPort, ...]
    fits: bool


CASES = [
    PortCase("nothing wanted", (), (HostPort(8080),), True),
    PortCase("nothing used", (HostPort(8080),), (), True),
    PortCase("other port", (HostPort(8080),), (HostPort(8081),), True),
    PortCase("same port, same protocol", (HostPort(8080),), (HostPort(8080),), False),
    PortCase("same port, TCP vs UDP", (HostPort(8080, "UDP"),), (HostPort(8080, "TCP"),), True),
    PortCase("same port, UDP vs UDP", (HostPort(53, "UDP"),), (HostPort(53, "UDP"),), False),
    PortCase("SCTP vs TCP", (HostPort(9000, "SCTP"),), (HostPort(9000),), True),
    PortCase("empty protocol means TCP", (HostPort(8080, ""),), (HostPort(8080, "TCP"),), False),
    PortCase(
        "specific IPs that differ",
        (HostPort(8080, "TCP", "10.0.0.1"),),
        (HostPort(8080, "TCP", "10.0.0.2"),),
        True,
    ),
    PortCase(
        "the same specific IP",
        (HostPort(8080, "TCP", "10.0.0.1"),),
        (HostPort(8080, "TCP", "10.0.0.1"),),
        False,
    ),
    PortCase(
        "wanted on every address, used on one",
        (HostPort(8080),),
        (HostPort(8080, "TCP", "10.0.0.2"),),
        False,
    ),
    PortCase(
        "wanted on one address, used on every address",
        (HostPort(8080, "TCP", "10.0.0.1"),),
        (HostPort(8080),),
        False,
    ),
    PortCase(
        "0.0.0.0 is every address",
        (HostPort(8080, "TCP", "0.0.0.0"),),
        (HostPort(8080, "TCP", "10.0.0.2"),),
        False,
    ),
    PortCase(
        "used on 0.0.0.0, wanted on one address",
        (HostPort(8080, "TCP", "10.0.0.1"),),
        (HostPort(8080, "TCP", "0.0.0.0"),),
        False,
    ),
    PortCase(
        "wildcard wanted with another protocol",
        (HostPort(8080, "UDP", "0.0.0.0"),),
        (HostPort(8080, "TCP", "10.0.0.2"),),
        True,
    ),
    PortCase(
        "one of several wanted ports conflicts",
        (HostPort(8080), HostPort(9090, "UDP")),
        (HostPort(9090, "UDP", "10.0.0.3"),),
        False,
    ),
    PortCase("port 0 is no host port", (HostPort(0),), (HostPort(0),), True),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_ports(case: PortCase) -> None:
    assert fits(case.want, case.used) is case.fits
    if len(case.want) == 1 and len(case.used) == 1:
        assert ports_conflict(case.want[0], case.used[0]) is not case.fits


def test_prefilter_skips_pods_without_ports() -> None:
    plugin = NodePorts()
    assert plugin.pre_filter(make_pod("p").obj(), CycleState()).code is Code.SKIP
    assert plugin.pre_filter(wanting(HostPort(0)), CycleState()).code is Code.SKIP
    assert plugin.pre_filter(wanting(HostPort(80)), CycleState()).ok
    assert (plugin.name, plugin.static) == ("NodePorts", False)


def test_conflict_status() -> None:
    info = make_node("n1").info()
    info.ports[HostPort(80)] = 1
    plugin = NodePorts()
    pod = wanting(HostPort(80))
    state = CycleState()
    assert plugin.pre_filter(pod, state).ok
    status = plugin.filter_with(pod, info, state)
    assert status == PORTS_CONFLICT
    assert (status.code, status.reason) == (Code.UNSCHEDULABLE, REASON)


def test_ports_counted_from_the_cache() -> None:
    """Bound and assumed pods hold their ports; a finished pod frees them."""
    cache = ClusterCache()
    cache.upsert_node(make_node("n1").cpu("4").node())
    holder = replace(
        wanting(HostPort(29500), name="holder"), node_name="n1", phase=PodPhase.RUNNING
    )
    cache.upsert_pod(holder)
    plugin = NodePorts()
    pod = wanting(HostPort(29500), name="new")
    state = CycleState()
    assert plugin.pre_filter(pod, state).ok
    assert plugin.filter_with(pod, cache.nodes["n1"], state) == PORTS_CONFLICT
    cache.upsert_pod(replace(holder, phase=PodPhase.SUCCEEDED))
    assert plugin.filter_with(pod, cache.nodes["n1"], state).ok
    pending = wanting(HostPort(29500), name="reserved")
    cache.upsert_pod(pending)
    cache.assume(pending.uid, "n1")
    assert plugin.filter_with(pod, cache.nodes["n1"], state) == PORTS_CONFLICT
    cache.forget(pending.uid)
    assert plugin.filter_with(pod, cache.nodes["n1"], state).ok


# ---- gang cycles ------------------------------------------------------------------------


def port_members(n: int, *ports: HostPort) -> list[Pod]:
    return [replace(p, host_ports=ports) for p in members("ml/ports", n)]


def test_gang_members_with_the_same_host_port_land_on_different_nodes() -> None:
    h = Harness(None, gpu_node("n1", 8), gpu_node("n2", 8))
    h.gang("ml/ports", 2)
    h.add(*port_members(2, HostPort(29500)))
    [bind] = binds(h.run())
    assert len({b.node for b in bind.bindings}) == 2


def test_without_host_ports_the_gang_packs_onto_one_node() -> None:
    """The control for the test above: GPU bin-packing puts both members together."""
    h = Harness(None, gpu_node("n1", 8), gpu_node("n2", 8))
    h.gang("ml/ports", 2)
    h.add(*port_members(2))
    [bind] = binds(h.run())
    assert len({b.node for b in bind.bindings}) == 1


def test_different_protocols_share_a_node() -> None:
    h = Harness(None, gpu_node("n1", 8), gpu_node("n2", 8))
    h.gang("ml/ports", 2)
    first, second = port_members(2)
    h.add(replace(first, host_ports=(HostPort(29500, "TCP"),)))
    h.add(replace(second, host_ports=(HostPort(29500, "UDP"),)))
    [bind] = binds(h.run())
    assert len({b.node for b in bind.bindings}) == 1


def test_more_members_than_nodes_with_one_host_port_is_unschedulable() -> None:
    h = Harness(None, gpu_node("n1", 8), gpu_node("n2", 8))
    h.gang("ml/ports", 3)
    h.add(*port_members(3, HostPort(29500)))
    out = h.run()
    assert binds(out) == []
    [fail] = unschedulable(out)
    assert fail.reason == "Unschedulable"
    assert f"0/2 nodes are available: 2 {REASON}." in fail.message
    assert h.s.cache.assumed == {}
    assert all(not info.ports for info in h.s.cache.nodes.values())


def test_port_held_by_a_bound_pod_repels_a_gang_member() -> None:
    h = Harness(None, gpu_node("n1", 8), gpu_node("n2", 8))
    other = replace(
        members("ml/other", 1)[0],
        host_ports=(HostPort(29500),),
        node_name="n1",
        phase=PodPhase.RUNNING,
        scheduler_name="default-scheduler",
    )
    h.add(other)
    h.gang("ml/ports", 1)
    h.add(*port_members(1, HostPort(29500)))
    [bind] = binds(h.run())
    assert [b.node for b in bind.bindings] == ["n2"]
