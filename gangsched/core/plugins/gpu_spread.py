"""GPUSpread: spread GPU pods, each to the node with the most GPU left after placing it."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.gpu import MILLI, GpuDemand, NodeGpus
from gangsched.core.model import Pod
from gangsched.core.resources import GPU

__all__ = ["GPUSpread", "emptiest_devices"]


class GPUSpread:
    """Scorer for GPU pods: ``100 * free GPU after placing the pod / GPU capacity`` of the
    node, in milli-GPUs on its devices (by ``nvidia.com/gpu`` for a node without a device
    model), so the emptiest node wins: the opposite of GPUBinPack, for users who want load
    spread over their GPUs. Its device policy puts a share on the emptiest device(s). Pods that
    ask for no GPU score 0 everywhere; a missing node or a node without GPUs scores 0.
    """

    name: str = "GPUSpread"

    def score(self, pod: Pod, node: NodeInfo) -> float:
        demand = pod.gpu
        n = node.node
        if demand is None or n is None:
            return 0.0
        gpus = node.gpus
        if gpus is not None and gpus.used:
            cap = MILLI * len(gpus.used)
            left = gpus.free_total() - demand.count * min(demand.milli, MILLI)
            return 100.0 * max(0, left) / cap
        total = n.allocatable.get(GPU, 0)
        if total <= 0:
            return 0.0
        left = node.free(GPU) - demand.count
        return 100.0 * max(0, min(left, total)) / total

    def device_policy(self, gpus: NodeGpus, demand: GpuDemand) -> tuple[int, ...] | None:
        return emptiest_devices(gpus, demand)


def emptiest_devices(gpus: NodeGpus, demand: GpuDemand) -> tuple[int, ...] | None:
    """Whole devices by lowest index; a share on the emptiest devices it fits (ties to the
    lowest index). None when the demand does not fit."""
    used = gpus.used
    if demand.whole:
        free = [i for i, u in enumerate(used) if u == 0]
        return tuple(free[: demand.count]) if len(free) >= demand.count else None
    limit = MILLI - demand.milli
    fitting = sorted((u, i) for i, u in enumerate(used) if u <= limit)
    if len(fitting) < demand.count:
        return None
    return tuple(sorted(i for _, i in fitting[: demand.count]))
