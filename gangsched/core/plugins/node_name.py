"""NodeName: a pod that names its node (``spec.nodeName``) may go only there."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.model import Pod

__all__ = ["NodeName"]

_MISMATCH = Status(Code.UNRESOLVABLE, "node(s) didn't match the requested node name")


class NodeName:
    """Filter: passes every node when the pod names none, else only the named node."""

    name: str = "NodeName"
    static: bool = True

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        wanted = pod.placement.node_name
        if not wanted or wanted == node.name:
            return SUCCESS
        return _MISMATCH
