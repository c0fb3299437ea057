"""GPU sharing through Koordinator's convention, as the API sees it (docs/gpu-sharing.md).

Three things live here, the only code that knows the convention's wire format:

- a node's devices, from its allocatable GPUs and the model and memory labels the settings name
  (``gpuModelLabel``, ``gpuMemoryLabel``: NVIDIA GPU feature discovery's by default);
- the devices recorded in a pod: ``scheduling.koordinator.sh/device-allocated``, the annotation
  Koordinator's scheduler writes and its node agent (koordlet, with HAMi-core) enforces;
- the annotation to write when a pod that asked for a share is bound: kube-apiserver copies a
  Binding's annotations onto the pod in the same write, so the pod is never seen bound without
  its devices (``kube/write/gpushare.py`` adds it to the binding).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from gangsched.core.gpu import (
    KOORD_CORE,
    KOORD_MEMORY,
    KOORD_RATIO,
    MEMORY_LABEL,
    MODEL_LABEL,
    GpuDevice,
    node_devices,
)

__all__ = [
    "DEVICE_ALLOCATED",
    "GpuLabels",
    "device_allocated",
    "devices_from",
    "recorded_devices",
]

DEVICE_ALLOCATED = "scheduling.koordinator.sh/device-allocated"
_MIB = 2**20


@dataclass(frozen=True, slots=True)
class GpuLabels:
    """The node labels that give a node's GPU model and per-device memory (MiB)."""

    model: str = MODEL_LABEL
    memory: str = MEMORY_LABEL

    def devices(
        self, allocatable: Mapping[str, int], labels: Mapping[str, str]
    ) -> tuple[GpuDevice, ...]:
        """The node's devices, read through these labels."""
        found = {}
        if self.model in labels:
            found[MODEL_LABEL] = labels[self.model]
        if self.memory in labels:
            found[MEMORY_LABEL] = labels[self.memory].strip()
        return node_devices(allocatable, found)


def recorded_devices(value: str) -> tuple[int, ...] | str:
    """The GPU minors a ``device-allocated`` annotation records (``()`` when it records no
    GPU, e.g. only RDMA devices), or why it cannot be read."""
    try:
        doc = json.loads(value)
    except ValueError as e:
        return f"not JSON ({e})"
    if not isinstance(doc, Mapping):
        return "not a JSON object"
    gpus = doc.get("gpu")
    if gpus is None:
        return ()
    if not isinstance(gpus, list):
        return '"gpu" is not a list'
    minors: list[int] = []
    for i, entry in enumerate(gpus):
        minor = entry.get("minor") if isinstance(entry, Mapping) else None
        if not isinstance(minor, int) or isinstance(minor, bool) or minor < 0:
            return f"gpu[{i}].minor: expected a device index, got {minor!r}"
        if minor in minors:
            return f"gpu[{i}].minor: device {minor} recorded twice"
        minors.append(minor)
    return tuple(minors)


def devices_from(annotations: Mapping[str, str]) -> tuple[int, ...] | str:
    """The devices recorded in a pod's annotations, or why they cannot be read."""
    value = annotations.get(DEVICE_ALLOCATED)
    return () if value is None else recorded_devices(value)


def device_allocated(devices: tuple[int, ...], percent: int, memory: Mapping[int, int]) -> str:
    """The annotation recording ``percent`` of each of ``devices``, as Koordinator's scheduler
    writes it: core and memory ratio in percent, and the memory in MiB where the device's
    memory (``memory``, bytes by index) is known. Keys sorted, no spaces (Go's encoding)."""
    entries = []
    for minor in devices:
        resources = {KOORD_CORE: str(percent), KOORD_RATIO: str(percent)}
        total = memory.get(minor, 0)
        if total > 0:
            resources[KOORD_MEMORY] = f"{total // _MIB * percent // 100}Mi"
        entries.append({"minor": minor, "resources": resources})
    return json.dumps({"gpu": entries}, sort_keys=True, separators=(",", ":"))
