"""NodePorts: host ports, with kube-scheduler v1.36's semantics.

A pod's wanted host ports (``Pod.host_ports``: every ``hostPort > 0`` of its containers and of
its restartable init containers; a ``hostNetwork`` pod's container ports, which the API server
defaults into host ports) conflict with a port already used on the node (by the pods counted
there, members reserved earlier in the same gang cycle included) when the port and protocol
are equal and the host IPs overlap: equal, or either one the wildcard (empty or
``0.0.0.0``). An empty protocol means TCP. Ports of one pod are not checked against each
other.

PreFilter returns SKIP for a pod without host ports, so the Filter costs nothing for others.
"""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SKIP, SUCCESS, Code, CycleState, Status
from gangsched.core.model import HostPort, Pod

__all__ = ["PORTS_CONFLICT", "NodePorts", "ports_conflict"]

NAME = "NodePorts"
_STATE_KEY = "PreFilter" + NAME
ANY_IP = "0.0.0.0"

PORTS_CONFLICT = Status(
    Code.UNSCHEDULABLE, "node(s) didn't have free ports for the requested pod ports"
)

# (port, protocol, ip) with the defaults filled in.
_Port = tuple[int, str, str]


def _normal(p: HostPort) -> _Port:
    return (p.port, p.protocol or "TCP", p.ip or ANY_IP)


def ports_conflict(want: HostPort, used: HostPort) -> bool:
    """Whether a wanted host port collides with one in use (kube-scheduler's
    HostPortInfo.CheckConflict)."""
    if want.port <= 0 or used.port <= 0:
        return False
    w_port, w_proto, w_ip = _normal(want)
    u_port, u_proto, u_ip = _normal(used)
    if w_port != u_port or w_proto != u_proto:
        return False
    return w_ip == u_ip or ANY_IP in (w_ip, u_ip)


class NodePorts:
    """Filter: the node has none of the pod's wanted host ports in use."""

    name: str = NAME
    static: bool = False

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        wanted = tuple(_normal(p) for p in pod.host_ports if p.port > 0)
        if not wanted:
            return SKIP
        state.write(_STATE_KEY, wanted)
        return SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        used = node.ports
        if not used:
            return SUCCESS
        wanted = state.read(_STATE_KEY)
        if not isinstance(wanted, tuple):
            return SUCCESS
        in_use = [_normal(p) for p, count in used.items() if count > 0 and p.port > 0]
        for w_port, w_proto, w_ip in wanted:
            for u_port, u_proto, u_ip in in_use:
                if (
                    w_port == u_port
                    and w_proto == u_proto
                    and (w_ip == u_ip or ANY_IP in (w_ip, u_ip))
                ):
                    return PORTS_CONFLICT
        return SUCCESS
