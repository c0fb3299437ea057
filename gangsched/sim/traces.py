"""Readers for the public GPU-cluster traces (Alibaba cluster-trace-gpu-v2023 "openb" and
cluster-trace-v2026-spot-gpu). See docs/simulator.md for how nodes and tasks are read."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from gangsched.core.gpu import GPU, KOORD_CORE, KOORD_RATIO, KOORD_SHARED, MILLI, MODEL_LABEL
from gangsched.core.model import AffinityTerm, Node, NodeAffinity, Placement, Requirement
from gangsched.core.resources import CPU, MEMORY, PODS, parse_amount

__all__ = ["GPU_MODEL_LABEL", "TraceError", "TraceTask", "read_trace_nodes", "read_trace_tasks"]

# The node label a trace node's GPU model goes in, as NVIDIA GPU feature discovery sets it.
GPU_MODEL_LABEL = MODEL_LABEL
MIB = 2**20


class TraceError(ValueError):
    pass


def gpu_node(name: str, alloc: dict[str, int], gpus: int, model: str) -> Node:
    """A trace node: ``gpus`` devices advertised both as whole GPUs (``nvidia.com/gpu``) and
    through Koordinator's sharing convention (``koordinator.sh/gpu-core`` and
    ``koordinator.sh/gpu-memory-ratio``, 100 per device), the model in the label NVIDIA GPU
    feature discovery sets."""
    alloc = dict(alloc)
    alloc[PODS] = 110
    labels: dict[str, str] = {}
    if gpus:
        alloc[GPU] = gpus
        alloc[KOORD_CORE] = 100 * gpus
        alloc[KOORD_RATIO] = 100 * gpus
        if model:
            labels[GPU_MODEL_LABEL] = model
    return Node(name, alloc, labels=labels)


def read_trace_nodes(path: Path, limit: int | None, memory_per_cpu: str = "4Gi") -> list[Node]:
    nodes: list[Node] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        cols = set(reader.fieldnames or ())
        for i, row in enumerate(reader):
            if limit is not None and len(nodes) >= limit:
                break
            try:
                if {"sn", "cpu_milli", "memory_mib", "gpu"} <= cols:
                    name, gpus = row["sn"], int(row["gpu"])
                    alloc = {
                        CPU: int(row["cpu_milli"]),
                        MEMORY: int(row["memory_mib"]) * MIB,
                    }
                    model = row.get("model") or ""
                elif {"gpu_model", "gpu_capacity_num", "cpu_num", "node_name"} <= cols:
                    name, gpus = f"spot-{row['node_name']}", int(row["gpu_capacity_num"])
                    cpus = int(row["cpu_num"])
                    per_cpu = parse_amount(MEMORY, memory_per_cpu, "memory_per_cpu")
                    alloc = {CPU: cpus * 1000, MEMORY: cpus * per_cpu}
                    model = row["gpu_model"]
                else:
                    raise TraceError(f"{path}: unknown node trace columns {sorted(cols)}")
                if gpus < 0:
                    raise ValueError(f"negative GPU count {gpus}")
            except (KeyError, ValueError) as e:
                if isinstance(e, TraceError):
                    raise
                raise TraceError(f"{path}: row {i + 2}: {e}") from None
            nodes.append(gpu_node(name, alloc, gpus, model))
    return nodes


@dataclass(frozen=True, slots=True)
class TraceTask:
    """One task of an openb pod list: ``num_gpu`` devices with ``gpu_milli`` of each (1000:
    whole devices; below 1000: a share of one device), or no GPU (``num_gpu`` 0)."""

    name: str
    cpu_milli: int
    memory: int
    num_gpu: int
    gpu_milli: int
    arrival: float
    duration: float
    placement: Placement

    @property
    def demand_milli(self) -> int:
        """Milli-GPUs the task asks for in all."""
        return self.num_gpu * self.gpu_milli

    def gpu_requests(self) -> dict[str, int]:
        """The task's GPU ask as pod requests: whole devices as ``nvidia.com/gpu``, a share as
        Koordinator's ``koordinator.sh/gpu-core`` (percent of one GPU; with
        ``koordinator.sh/gpu.shared`` when it spans several devices)."""
        if self.num_gpu == 0:
            return {}
        if self.gpu_milli >= MILLI:
            return {GPU: self.num_gpu}
        out = {KOORD_CORE: self.num_gpu * _percent(self.gpu_milli)}
        if self.num_gpu > 1:
            out[KOORD_SHARED] = self.num_gpu
        return out


def _percent(milli: int) -> int:
    """Milli-GPUs as Koordinator's percent of one GPU, rounded up so the share asked is never
    less than the trace's."""
    return max(1, -(-milli // 10))


def read_trace_tasks(
    path: Path,
    limit: int | None,
    gpu_only: bool,
    time_scale: float,
    max_duration: float | None,
    arrival_scale: float = 1.0,
) -> list[TraceTask]:
    tasks: list[TraceTask] = []
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        for i, row in enumerate(reader):
            if limit is not None and len(tasks) >= limit:
                break
            try:
                num_gpu = int(row["num_gpu"])
                milli = int(row.get("gpu_milli") or 0)
                if num_gpu < 0 or milli < 0:
                    raise ValueError(f"negative GPU request num_gpu={num_gpu} gpu_milli={milli}")
                if milli == 0:
                    num_gpu = 0  # no GPU asked of any device
                elif num_gpu == 0:
                    num_gpu = 1  # a share with no device count: one device
                milli = min(milli, MILLI)
                if gpu_only and num_gpu == 0:
                    continue
                created = float(row.get("creation_time") or i)
                start = float(row.get("scheduled_time") or created)
                end = float(row.get("deletion_time") or start + 3600)
                duration = max(1.0, end - start) / time_scale
                if max_duration is not None:
                    duration = min(duration, max_duration)
                spec = (row.get("gpu_spec") or "").strip()
                placement = Placement()
                if spec:
                    models = tuple(sorted(m for m in spec.split("|") if m))
                    term = AffinityTerm((Requirement(GPU_MODEL_LABEL, "In", models),))
                    placement = Placement(affinity=NodeAffinity(required=(term,)))
                tasks.append(
                    TraceTask(
                        name=row["name"],
                        cpu_milli=int(row["cpu_milli"]),
                        memory=int(row["memory_mib"]) * MIB,
                        num_gpu=num_gpu,
                        gpu_milli=milli if num_gpu else 0,
                        arrival=created / time_scale / arrival_scale,
                        duration=duration,
                        placement=placement,
                    )
                )
            except (KeyError, ValueError) as e:
                raise TraceError(f"{path}: row {i + 2}: {e}") from None
    return tasks
