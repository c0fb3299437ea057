"""GPUDevices: a pod's GPUs must fit on the node's devices, not only in its GPU count."""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.gpu import GPU, KOORD_CORE, MILLI
from gangsched.core.model import Pod
from gangsched.core.plugins._common import NODE_NOT_FOUND

__all__ = ["GPUDevices"]

# Whole devices: the reason kube-scheduler gives when a node lacks the GPUs, so the two
# aggregate alike in an Unschedulable message.
INSUFFICIENT_GPU = Status(Code.UNSCHEDULABLE, f"Insufficient {GPU}")
INSUFFICIENT_SHARE = Status(Code.UNSCHEDULABLE, f"Insufficient GPU share ({KOORD_CORE})")


class GPUDevices:
    """Filter: a pod asking for ``count`` whole GPUs needs ``count`` devices with nothing on
    them; a pod asking for a share needs ``count`` devices with the share free on each
    (shares of one device never exceed it). What the pod's gang has already reserved is
    counted on the devices like any other pod. Pods without GPUs, and nodes without a device
    model (counted by their ``nvidia.com/gpu`` total, which NodeResourcesFit checks), pass.
    """

    name: str = "GPUDevices"
    static: bool = False

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        demand = pod.gpu
        if demand is None:
            return SUCCESS
        if node.node is None:
            return NODE_NOT_FOUND
        gpus = node.gpus
        if gpus is None:
            return SUCCESS
        if demand.milli >= MILLI:
            return SUCCESS if gpus.used.count(0) >= demand.count else INSUFFICIENT_GPU
        return SUCCESS if gpus.fits(demand) else INSUFFICIENT_SHARE
