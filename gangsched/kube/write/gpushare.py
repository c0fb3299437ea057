"""The devices a binding records, through Koordinator's GPU-sharing convention
(docs/gpu-sharing.md): the ``scheduling.koordinator.sh/device-allocated`` annotation a binding
carries for a pod that asked for a share. kube-apiserver copies a Binding's annotations onto
the pod in the same write, so the pod is never seen bound without its devices. The annotation's
format is ``api/gpushare.py``'s.
"""

from __future__ import annotations

from collections.abc import Callable

from gangsched.api.gpushare import DEVICE_ALLOCATED, device_allocated
from gangsched.core.decisions import Binding
from gangsched.core.gpu import MILLI
from gangsched.core.model import Node, Pod

__all__ = ["DeviceRecorder"]


class DeviceRecorder:
    """The annotations a binding carries: ``device-allocated`` for a pod that asked for a
    share through Koordinator's convention, nothing otherwise (whole ``nvidia.com/gpu`` devices
    are picked by the NVIDIA device plugin on the node)."""

    def __init__(
        self, pod_of: Callable[[str], Pod | None], node_of: Callable[[str], Node | None]
    ) -> None:
        self._pod_of = pod_of
        self._node_of = node_of

    def __call__(self, binding: Binding) -> dict[str, str]:
        if not binding.devices:
            return {}
        pod = self._pod_of(binding.pod.uid)
        if pod is None or pod.gpu is None or not pod.gpu.shared:
            return {}
        node = self._node_of(binding.node)
        gpus = (node.gpus or ()) if node is not None else ()
        memory = {d.index: d.memory for d in gpus}
        percent = min(pod.gpu.milli, MILLI) // 10
        return {DEVICE_ALLOCATED: device_allocated(binding.devices, percent, memory)}
