"""NodeUnschedulable: cordoned, unready and unknown nodes take no new pods."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.match import tolerates
from gangsched.core.model import Pod, Taint
from gangsched.core.plugins._common import NODE_NOT_FOUND

__all__ = ["UNSCHEDULABLE_TAINT", "NodeUnschedulable"]

# The taint Kubernetes puts on cordoned nodes; a pod tolerating it may use a cordoned node.
UNSCHEDULABLE_TAINT = Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule")

_NOT_READY = Status(Code.UNSCHEDULABLE, "node(s) were not ready")
_CORDONED = Status(Code.UNRESOLVABLE, "node(s) were unschedulable")


class NodeUnschedulable:
    """Filter: the node must exist and be ready; a cordoned node (``spec.unschedulable``)
    admits only pods tolerating ``node.kubernetes.io/unschedulable:NoSchedule``."""

    name: str = "NodeUnschedulable"
    static: bool = True

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        if not n.ready:
            return _NOT_READY
        if n.unschedulable and not tolerates(pod.placement.tolerations, UNSCHEDULABLE_TAINT):
            return _CORDONED
        return SUCCESS
