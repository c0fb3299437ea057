"""The objects of the side-by-side benchmark's workloads (bench/versus.py).

Every scheduler under test gets the same nodes, PodGroups and pods; only ``schedulerName``
differs. Gangs follow scheduler-plugins' convention, which gangsched, Coscheduling and (by
ignoring it) kube-scheduler all accept: a ``scheduling.x-k8s.io/v1alpha1`` PodGroup whose
``spec.minMember`` is the gang size, and the pod label ``scheduling.x-k8s.io/pod-group``.

- ``fill``: ``nodes`` nodes of 8 GPUs and gangs of 8 one-GPU pods, by default exactly enough to
  fill every GPU; gangs are created one after another.
- ``contention``: demand 140% of the GPUs (50 nodes, 70 gangs of 8 by default) and the members
  of all gangs interleaved in creation order (member 0 of every gang, then member 1, ...), the
  case in which a scheduler that places pod by pod leaves every gang partly bound.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangsched_dev.devcluster.controlplane import fake_node

__all__ = [
    "GANG_LABEL",
    "NAMESPACE",
    "PODGROUP_PATH",
    "Workload",
]

NAMESPACE: Final = "bench"
GANG_LABEL: Final = "scheduling.x-k8s.io/pod-group"
PODGROUP_PATH: Final = f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{NAMESPACE}/podgroups"
POD_PATH: Final = f"/api/v1/namespaces/{NAMESPACE}/pods"
NODE_PATH: Final = "/api/v1/nodes"
GPU: Final = "nvidia.com/gpu"
GPUS_PER_NODE: Final = 8
GANG_SIZE: Final = 8
CONTENTION_DEMAND: Final = 1.4
WORKLOADS: Final = ("fill", "contention")


@dataclass(frozen=True, slots=True)
class Workload:
    name: str  # "fill" or "contention"
    nodes: int
    pods: int
    gang_size: int = GANG_SIZE
    gpus_per_node: int = GPUS_PER_NODE

    @classmethod
    def make(cls, name: str, nodes: int | None, pods: int | None) -> Workload:
        """Defaults: fill, N nodes, 8N pods; contention, 50 nodes, 140% of their GPUs."""
        if name not in WORKLOADS:
            raise ValueError(f"unknown workload {name!r} (one of {', '.join(WORKLOADS)})")
        n = nodes if nodes is not None else (50 if name == "contention" else 100)
        if pods is None:
            gpus = n * GPUS_PER_NODE
            pods = (
                gpus
                if name == "fill"
                else GANG_SIZE * math.ceil(CONTENTION_DEMAND * gpus / GANG_SIZE)
            )
        if n < 1 or pods < GANG_SIZE or pods % GANG_SIZE:
            raise ValueError(f"need at least one node and a multiple of {GANG_SIZE} pods")
        return cls(name, n, pods)

    @property
    def gangs(self) -> int:
        return self.pods // self.gang_size

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def gang_name(self, g: int) -> str:
        return f"g{g:05d}"

    def node_objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for i in range(self.nodes):
            yield NODE_PATH, fake_node(f"n{i:05d}", "128", "1024Gi", self.gpus_per_node)

    def podgroup_objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        for g in range(self.gangs):
            yield (
                PODGROUP_PATH,
                {
                    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": self.gang_name(g), "namespace": NAMESPACE},
                    "spec": {"minMember": self.gang_size},
                },
            )

    def pod_objects(self, scheduler_name: str) -> Iterator[tuple[str, dict[str, Any]]]:
        """Gang by gang (fill), or member index by member index across gangs (contention)."""
        if self.name == "fill":
            order = ((g, i) for g in range(self.gangs) for i in range(self.gang_size))
        else:
            order = ((g, i) for i in range(self.gang_size) for g in range(self.gangs))
        for g, i in order:
            yield POD_PATH, self._pod(g, i, scheduler_name)

    def _pod(self, g: int, i: int, scheduler_name: str) -> dict[str, Any]:
        gang = self.gang_name(g)
        resources: Mapping[str, Any] = {
            "requests": {"cpu": "1", "memory": "1Gi", GPU: "1"},
            "limits": {"cpu": "1", "memory": "1Gi", GPU: "1"},
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{gang}-{i}",
                "namespace": NAMESPACE,
                "labels": {GANG_LABEL: gang},
            },
            "spec": {
                "schedulerName": scheduler_name,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}
                ],
            },
        }
