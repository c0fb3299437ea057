"""GPUBinPack: pack GPU pods tightly, keep GPU nodes for GPU work."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.claimstate import ClaimCatalog
from gangsched.core.gpu import MILLI, best_fit
from gangsched.core.model import Pod
from gangsched.core.resources import GPU

__all__ = ["GPUBinPack"]


class GPUBinPack:
    """Scorer for one accelerator resource (``nvidia.com/gpu`` by default), per device.

    On a node with a device model, a pod asking for whole GPUs scores ``100 * (devices not
    whole free after placing it) / devices``: the fewer whole free devices it leaves, the
    better, so partly used nodes fill first and whole nodes stay free for large gangs. A pod
    asking for a share scores ``100 * (what the share's devices hold after placing it) /
    1000``, on the devices the default choice gives it (the fullest it fits): the device it
    fills most wins, so shares stack on shared devices and whole devices stay free.

    A pod whose devices come through resource claims (Dynamic Resource Allocation) scores
    ``100 * (devices of its class held after placing it) / devices of the class`` on the
    node: the fullest node that fits wins, as for counted GPUs (ClaimCatalog.packing).

    On a node without a device model the pod scores ``100 * (used + request) /
    allocatable`` of the resource (capped at 100). A pod not asking for GPUs scores 100 on
    nodes without GPUs and 0 on nodes with them. A missing node, or one that cannot hold the
    pod's GPUs, scores 0.
    """

    name: str = "GPUBinPack"

    def __init__(self, resource: str = GPU, devices: ClaimCatalog | None = None) -> None:
        self.resource = resource
        self._gpu = resource == GPU
        # DRA devices (the cache's claim catalog): a pod whose GPUs come through resource
        # claims is packed by the devices its claims take
        self._devices = devices

    def score(self, pod: Pod, node: NodeInfo) -> float:
        demand = pod.gpu
        gpus = node.gpus
        if demand is not None and gpus is not None and demand.milli >= MILLI and self._gpu:
            # whole GPUs on a node with devices (the common case first: it runs on every
            # candidate): the fuller the node once the pod is on it, the better
            if node.node is None:
                return 0.0
            used = gpus.used
            left = used.count(0) - demand.count
            if left <= 0:
                return 100.0
            return 100.0 * (len(used) - left) / len(used)
        if node.node is None:
            return 0.0
        if pod.resource_claims and pod.gpu is None and self._devices is not None:
            return self._devices.packing(pod, node.name)
        resource = self.resource
        demand = pod.gpu if resource == GPU else None
        gpus = node.gpus if resource == GPU else None
        if gpus is not None and demand is not None:
            used = gpus.used
            if demand.milli >= MILLI:
                left = used.count(0) - demand.count
                if left <= 0:
                    return 100.0
                return 100.0 * (len(used) - left) / len(used)
            devices = best_fit(gpus, demand)
            if not devices:
                return 0.0
            fill = sum(used[i] for i in devices) + demand.milli * len(devices)
            return 100.0 * fill / (MILLI * len(devices))
        want = pod.requests.get(resource, 0)
        allocatable = node.allocatable(resource)
        if want <= 0 and demand is None:
            return 100.0 if allocatable <= 0 and gpus is None else 0.0
        if allocatable <= 0:
            return 0.0
        used_total = node.requested.get(resource, 0) + want
        if used_total >= allocatable:
            return 100.0
        return 100.0 * used_total / allocatable
