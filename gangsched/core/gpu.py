"""GPUs as devices: what a node has, what a pod asks for, and what each device has left.

A node's GPUs are devices, each with its index (the device minor), model and memory. A pod
asks for whole devices (``nvidia.com/gpu: 2``) or for a share of a device through
Koordinator's GPU-sharing convention (``koordinator.sh/gpu-core: 50`` and/or
``koordinator.sh/gpu-memory-ratio: 50``, optionally ``koordinator.sh/gpu.shared: N`` to
spread the share over N devices). The core counts every device in milli-GPUs (1000 = a whole
device): a whole-device request takes 1000 on each of its devices, a share takes its share on
one device, and the shares on one device never exceed 1000.

A share counts the larger of its core and memory-ratio percentages, so neither is ever
over-committed on a device. Which device a share lands on is the scheduler's choice; the
adapter records it in the pod as Koordinator's device daemon expects
(``scheduling.koordinator.sh/device-allocated``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "GPU",
    "KOORD_CORE",
    "KOORD_MEMORY",
    "KOORD_RATIO",
    "KOORD_SHARED",
    "MAX_DEVICES",
    "MEMORY_LABEL",
    "MILLI",
    "MODEL_LABEL",
    "GpuDemand",
    "GpuDevice",
    "NodeGpus",
    "best_fit",
    "gpu_demand",
    "node_devices",
]

GPU = "nvidia.com/gpu"
KOORD_CORE = "koordinator.sh/gpu-core"
KOORD_RATIO = "koordinator.sh/gpu-memory-ratio"
KOORD_MEMORY = "koordinator.sh/gpu-memory"
KOORD_SHARED = "koordinator.sh/gpu.shared"
_KOORD = (KOORD_CORE, KOORD_RATIO, KOORD_SHARED, KOORD_MEMORY)

# NVIDIA GPU feature discovery's node labels: the product name and the memory in MiB.
MODEL_LABEL = "nvidia.com/gpu.product"
MEMORY_LABEL = "nvidia.com/gpu.memory"

MILLI = 1000  # one whole device
# A node advertising more GPUs than this is counted by its total alone (no device model):
# no real node has that many devices, and a list of them would only cost memory.
MAX_DEVICES = 1024
_MIB = 2**20


@dataclass(frozen=True, slots=True)
class GpuDevice:
    index: int  # the device minor
    model: str = ""
    memory: int = 0  # bytes; 0 when unknown


@dataclass(frozen=True, slots=True)
class GpuDemand:
    """``count`` devices, ``milli`` of each (1000: whole devices). ``shared`` marks a request
    made through the sharing convention: its devices are recorded in the pod."""

    count: int
    milli: int
    shared: bool = False

    @property
    def whole(self) -> bool:
        return self.milli >= MILLI

    @property
    def total(self) -> int:
        """Milli-GPUs asked for in all."""
        return self.count * self.milli


def gpu_demand(requests: Mapping[str, int]) -> GpuDemand | str | None:
    """The GPU demand of a pod's effective requests: None when it asks for no GPU, a string
    saying which field is wrong when the request cannot be honoured."""
    whole = requests.get(GPU, 0)
    if not any(k in requests for k in _KOORD):
        return GpuDemand(whole, MILLI) if whole > 0 else None
    if whole > 0:
        return (
            f"resources: {GPU} and koordinator.sh/gpu-* ask for GPUs two ways; ask for whole "
            f"GPUs with {GPU}, or for shares with {KOORD_CORE}"
        )
    if KOORD_MEMORY in requests and KOORD_RATIO not in requests and KOORD_CORE not in requests:
        return (
            f"resources.{KOORD_MEMORY}: an absolute GPU memory request is not supported; "
            f"ask for {KOORD_MEMORY}-ratio (percent of one GPU) or {KOORD_CORE}"
        )
    shared = requests.get(KOORD_SHARED)
    if shared is not None and shared < 1:
        return (
            f"resources.{KOORD_SHARED}: must be at least 1 (the number of GPUs the share is "
            f"spread over), got {shared}"
        )
    core, ratio = requests.get(KOORD_CORE, 0), requests.get(KOORD_RATIO, 0)
    percent = max(core, ratio)
    if percent <= 0:
        return None
    # The field the share is counted from (the larger percentage), the one a refusal names.
    if core > ratio:
        field = f"resources.{KOORD_CORE}"
    elif ratio > core:
        field = f"resources.{KOORD_RATIO}"
    else:
        field = ", ".join(f"resources.{k}" for k in (KOORD_CORE, KOORD_RATIO) if k in requests)
    if shared is None:
        if percent > 100 and percent % 100:
            return (
                f"{field}: {percent} percent is more than one GPU and not a whole number of "
                f"GPUs; ask for a multiple of 100, or set {KOORD_SHARED} to spread it over "
                "several GPUs"
            )
        shared = percent // 100 if percent > 100 else 1
    if percent % shared:
        return f"{field}: {percent} is not divisible over {KOORD_SHARED}={shared} GPUs"
    per = percent // shared
    if per > 100:
        return (
            f"{field}: {percent} percent over {KOORD_SHARED}={shared} GPUs is {per} percent "
            f"of each GPU, more than one GPU holds; spread it over at least "
            f"{-(-percent // 100)} GPUs"
        )
    return GpuDemand(shared, per * 10, shared=True)


def node_devices(
    allocatable: Mapping[str, int], labels: Mapping[str, str]
) -> tuple[GpuDevice, ...]:
    """A node's devices: as many as its allocatable ``nvidia.com/gpu`` (or
    ``koordinator.sh/gpu-core`` / 100 where only the sharing convention is advertised), each
    with the model and memory of the node's GPU feature discovery labels. None for a node
    without GPUs or with more than ``MAX_DEVICES``."""
    count = allocatable.get(GPU, 0)
    if count <= 0:
        count = allocatable.get(KOORD_CORE, 0) // 100
    if count <= 0 or count > MAX_DEVICES:
        return ()
    model = labels.get(MODEL_LABEL, "")
    memory = 0
    raw = labels.get(MEMORY_LABEL, "")
    if raw.isdigit():
        memory = int(raw) * _MIB
    return tuple(GpuDevice(i, model, memory) for i in range(count))


class NodeGpus:
    """What each device of one node has counted on it, in milli-GPUs."""

    __slots__ = ("devices", "used")

    def __init__(self, devices: tuple[GpuDevice, ...]) -> None:
        self.devices = devices
        self.used = [0] * len(devices)

    def whole_free(self) -> int:
        """Devices with nothing on them."""
        return self.used.count(0)

    def largest_free(self) -> int:
        """The most any one device has left (milli), 0 when none."""
        return MILLI - min(self.used) if self.used else 0

    def free_total(self) -> int:
        return sum(MILLI - u for u in self.used if u < MILLI)

    def fits(self, demand: GpuDemand) -> bool:
        if demand.whole:
            return self.used.count(0) >= demand.count
        need = MILLI - demand.milli
        return sum(1 for u in self.used if u <= need) >= demand.count

    def take(self, devices: tuple[int, ...], milli: int) -> None:
        for i in devices:
            self.used[i] += milli

    def give(self, devices: tuple[int, ...], milli: int) -> None:
        for i in devices:
            self.used[i] -= milli

    def signature(self) -> tuple[int, ...]:
        """The devices' usage, sorted: nodes with the same signature are interchangeable for
        GPU placement (given the same model)."""
        return tuple(sorted(self.used))


def best_fit(gpus: NodeGpus, demand: GpuDemand) -> tuple[int, ...] | None:
    """The default device choice: whole devices by lowest index; a share on the fullest
    devices it fits (ties to the lowest index), so whole devices stay free. None when the
    demand does not fit."""
    used = gpus.used
    if demand.whole:
        free = [i for i, u in enumerate(used) if u == 0]
        return tuple(free[: demand.count]) if len(free) >= demand.count else None
    need = MILLI - demand.milli
    fitting = sorted((-u, i) for i, u in enumerate(used) if u <= need)
    if len(fitting) < demand.count:
        return None
    return tuple(sorted(i for _, i in fitting[: demand.count]))
