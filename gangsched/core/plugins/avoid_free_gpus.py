"""AvoidFreeGPUs: CPU-only pods prefer nodes without free GPUs, so they do not strand GPUs."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import GangLookup
from gangsched.core.gpu import MILLI
from gangsched.core.model import Pod
from gangsched.core.resources import GPU

__all__ = ["AvoidFreeGPUs"]


class AvoidFreeGPUs:
    """Scorer for pods that ask for no GPU: ``100 * (1 - free GPU / GPU capacity)`` of the
    node, so a node without GPUs or with every GPU in use scores 100 and a node with all its
    GPUs free scores 0. The CPU and memory a CPU-only pod takes on a GPU node can leave that
    node's free GPUs without the CPU or memory to use them. Free GPU is counted in milli-GPUs
    on the node's devices (by ``nvidia.com/gpu`` for a node without a device model). GPU pods
    score 0 everywhere; a missing node scores 0.

    A member of a gang whose task topology makes its role affine to others (a parameter
    server of a PS/worker job) scores 0 everywhere too: it belongs where its gang-mates go,
    GPUs or not, and TaskTopology brings them together.
    """

    name: str = "AvoidFreeGPUs"

    def __init__(self, gangs: GangLookup | None = None) -> None:
        self._gangs = gangs

    def constant(self, pod: Pod) -> bool:
        """GPU pods and members with affine roles score 0 everywhere."""
        return pod.gpu is not None or self._affine(pod)

    def _affine(self, pod: Pod) -> bool:
        if not pod.group or not pod.role or self._gangs is None:
            return False
        spec = self._gangs(pod.group)
        if spec is None:
            return False
        role = pod.role
        return any(role in group for group in spec.topology.affinity)

    def score(self, pod: Pod, node: NodeInfo) -> float:
        if pod.gpu is not None or self._affine(pod):
            return 0.0
        n = node.node
        if n is None:
            return 0.0
        gpus = node.gpus
        if gpus is not None and gpus.used:
            return 100.0 * (1.0 - gpus.free_total() / (MILLI * len(gpus.used)))
        total = n.allocatable.get(GPU, 0)
        if total <= 0:
            return 100.0
        free = min(max(0, node.free(GPU)), total)
        return 100.0 * (1.0 - free / total)
