"""GPUBinPack: pack GPU pods tightly, keep GPU nodes for GPU work."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.model import Pod
from gangsched.core.resources import GPU

__all__ = ["GPUBinPack"]


class GPUBinPack:
    """Scorer for one accelerator resource (``nvidia.com/gpu`` by default).

    A pod requesting the resource scores ``100 * (used + request) / allocatable``: the fuller
    the node would be after placing it, the better, so partly used nodes fill first and whole
    nodes stay free for large gangs (capped at 100; 0 on a node without the resource). A pod
    not requesting it scores 100 on nodes without the resource and 0 on nodes with it. A
    missing node scores 0.
    """

    name: str = "GPUBinPack"

    def __init__(self, resource: str = GPU) -> None:
        self.resource = resource

    def score(self, pod: Pod, node: NodeInfo) -> float:
        if node.node is None:
            return 0.0
        resource = self.resource
        want = pod.requests.get(resource, 0)
        allocatable = node.allocatable(resource)
        if want <= 0:
            return 100.0 if allocatable <= 0 else 0.0
        if allocatable <= 0:
            return 0.0
        used = node.requested.get(resource, 0) + want
        if used >= allocatable:
            return 100.0
        return 100.0 * used / allocatable
