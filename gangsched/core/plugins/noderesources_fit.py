"""NodeResourcesFit: the pod's requests must fit in what the node has left."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.model import Pod
from gangsched.core.plugins._common import NODE_NOT_FOUND
from gangsched.core.resources import PODS

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
        # the last requests filtered and their non-zero amounts (the pod is asked on many
        # nodes in a row)
        self._requests: object = None
        self._asked: tuple[tuple[str, int], ...] = ()

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        requests = pod.requests
        if requests is not self._requests:
            self._requests = requests
            self._asked = tuple((k, v) for k, v in requests.items() if v)
        left = node.left
        short = None
        for k, v in self._asked:
            if v > left.get(k, 0):
                short = k
                break
        if short is None:
            return SUCCESS
        status = self._statuses.get(short)
        if status is None:
            reason = "Too many pods" if short == PODS else f"Insufficient {short}"
            status = Status(Code.UNSCHEDULABLE, reason)
            self._statuses[short] = status
        return status
