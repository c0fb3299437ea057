"""Readers for the public GPU-cluster traces (Alibaba cluster-trace-gpu-v2023 "openb" and
cluster-trace-v2026-spot-gpu). See docs/simulator.md for how tasks become gangs."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from gangsched.core.model import AffinityTerm, Node, NodeAffinity, Placement, Requirement
from gangsched.core.resources import CPU, GPU, MEMORY, PODS, parse_amount

__all__ = ["GPU_MODEL_LABEL", "TraceTask", "read_trace_nodes", "read_trace_tasks"]

GPU_MODEL_LABEL = "gangsched.io/gpu-model"
MIB = 2**20


class TraceError(ValueError):
    pass


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
            except (KeyError, ValueError) as e:
                raise TraceError(f"{path}: row {i + 2}: {e}") from None
            alloc[PODS] = 110
            labels: dict[str, str] = {}
            if gpus:
                alloc[GPU] = gpus
                if model:
                    labels[GPU_MODEL_LABEL] = model
            nodes.append(Node(name, alloc, labels=labels))
    return nodes


@dataclass(frozen=True, slots=True)
class TraceTask:
    name: str
    cpu_milli: int
    memory: int
    gpus: int  # whole GPUs the task needs (a fraction of one counts as one)
    arrival: float
    duration: float
    placement: Placement


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
                gpus = num_gpu if num_gpu > 0 else (1 if milli > 0 else 0)
                if gpu_only and gpus == 0:
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
                        gpus=gpus,
                        arrival=created / time_scale / arrival_scale,
                        duration=duration,
                        placement=placement,
                    )
                )
            except (KeyError, ValueError) as e:
                raise TraceError(f"{path}: row {i + 2}: {e}") from None
    return tasks
