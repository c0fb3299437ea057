"""LeastAllocated: spread CPU-only pods towards the nodes with the most room left."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.model import Pod
from gangsched.core.resources import CPU, GPU, MEMORY

__all__ = ["LeastAllocated"]

_RESOURCES = (CPU, MEMORY)


class LeastAllocated:
    """Scorer: for a pod without GPUs, the mean over cpu and memory of the share of the node
    left free after placing it, ``(allocatable - requested - request) / allocatable * 100``,
    each share clamped to 0..100 and resources with no allocatable skipped (0 when both are
    skipped). GPU pods (whole GPUs or a share) score 0 everywhere: GPUBinPack places them.
    """

    name: str = "LeastAllocated"

    def __init__(self, gpu_resource: str = GPU) -> None:
        self.gpu_resource = gpu_resource

    def constant(self, pod: Pod) -> bool:
        return (
            pod.gpu is not None
            or bool(pod.resource_claims)
            or pod.requests.get(self.gpu_resource, 0) > 0
        )

    def score(self, pod: Pod, node: NodeInfo) -> float:
        requests = pod.requests
        if pod.gpu is not None or pod.resource_claims or requests.get(self.gpu_resource, 0) > 0:
            return 0.0
        n = node.node
        if n is None:
            return 0.0
        allocatable = n.allocatable
        requested = node.requested
        total = 0.0
        counted = 0
        for resource in _RESOURCES:
            cap = allocatable.get(resource, 0)
            if cap <= 0:
                continue
            left = cap - requested.get(resource, 0) - requests.get(resource, 0)
            counted += 1
            if left > 0:
                total += 100.0 * left / cap if left < cap else 100.0
        return total / counted if counted else 0.0
