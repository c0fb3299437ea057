"""NodeResourcesFit: the pod's requests must fit in what the node has left."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.model import Pod
from gangsched.core.plugins._common import NODE_NOT_FOUND
from gangsched.core.resources import PODS, insufficient

__all__ = ["NodeResourcesFit"]


class NodeResourcesFit:
    """Filter: fails with ``Insufficient <resource>`` (``Too many pods`` for ``pods``) on the
    first requested resource whose allocatable minus what is counted on the node is smaller
    than the request. A resource the node lacks entirely has 0 allocatable."""

    name: str = "NodeResourcesFit"
    static: bool = False

    def __init__(self) -> None:
        # One Status per resource name, built on first failure: no allocation on the hot path.
        self._statuses: dict[str, Status] = {}

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        short = insufficient(pod.requests, n.allocatable, node.requested)
        if short is None:
            return SUCCESS
        status = self._statuses.get(short)
        if status is None:
            reason = "Too many pods" if short == PODS else f"Insufficient {short}"
            status = Status(Code.UNSCHEDULABLE, reason)
            self._statuses[short] = status
        return status
