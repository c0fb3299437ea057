"""The objects of the side-by-side benchmark's workloads (bench/versus.py).

Every scheduler under test gets the same nodes, PodGroups and pods; only ``schedulerName``
differs. Gangs follow scheduler-plugins' convention, which gangsched, Coscheduling and (by
ignoring it) kube-scheduler all accept: a ``scheduling.x-k8s.io/v1alpha1`` PodGroup whose
``spec.minMember`` is the gang size, and the pod label ``scheduling.x-k8s.io/pod-group``.

- ``fill``: ``nodes`` nodes of 8 GPUs and gangs of 8 one-GPU pods, by default exactly enough to
  fill every GPU; gangs are created one after another.
- ``fill-dra``: ``fill`` with the GPUs published as DRA devices instead of counted: nodes
  without ``nvidia.com/gpu``, a DeviceClass, one ResourceSlice of 8 devices per node, and a
  ResourceClaim of one device per pod (created with the pods, by name), which the scheduler
  allocates and writes before binding.
For Volcano the gangs are Volcano's own: a ``scheduling.volcano.sh/v1beta1`` PodGroup in the
queue ``default`` (created too), named by the pod annotation ``scheduling.k8s.io/group-name``
(the pods keep the label, which Volcano ignores).

- ``contention``: demand 140% of the GPUs (50 nodes, 70 gangs of 8 by default) and the members
  of all gangs interleaved in creation order (member 0 of every gang, then member 1, ...), the
  case in which a scheduler that places pod by pod leaves every gang partly bound.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterator
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
WORKLOADS: Final = ("fill", "fill-dra", "contention")
DRIVER: Final = "gpu.bench.example.com"
RESOURCE_API: Final = "/apis/resource.k8s.io/v1"
VOLCANO_API: Final = "/apis/scheduling.volcano.sh/v1beta1"
VOLCANO_GROUP: Final = "scheduling.k8s.io/group-name"


@dataclass(frozen=True, slots=True)
class Workload:
    name: str  # "fill", "fill-dra" or "contention"
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
                if name != "contention"
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

    @property
    def fills(self) -> bool:
        return self.name in ("fill", "fill-dra")

    @property
    def dra(self) -> bool:
        return self.name == "fill-dra"

    def node_objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        gpus = 0 if self.dra else self.gpus_per_node
        for i in range(self.nodes):
            yield NODE_PATH, fake_node(f"n{i:05d}", "128", "1024Gi", gpus)

    def dra_objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The DeviceClass, a ResourceSlice per node and a ResourceClaim per pod (fill-dra)."""
        if not self.dra:
            return
        yield (
            f"{RESOURCE_API}/deviceclasses",
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            },
        )
        for i in range(self.nodes):
            node = f"n{i:05d}"
            yield (
                f"{RESOURCE_API}/resourceslices",
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceSlice",
                    "metadata": {"name": f"{node}-gpus"},
                    "spec": {
                        "driver": DRIVER,
                        "nodeName": node,
                        "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                        "devices": [
                            {"name": f"gpu-{d}", "attributes": {"index": {"int": d}}}
                            for d in range(self.gpus_per_node)
                        ],
                    },
                },
            )
        for g in range(self.gangs):
            for m in range(self.gang_size):
                yield (
                    f"{RESOURCE_API}/namespaces/{NAMESPACE}/resourceclaims",
                    {
                        "apiVersion": "resource.k8s.io/v1",
                        "kind": "ResourceClaim",
                        "metadata": {
                            "name": f"{self.gang_name(g)}-{m}-gpu",
                            "namespace": NAMESPACE,
                        },
                        "spec": {
                            "devices": {
                                "requests": [
                                    {"name": "gpu", "exactly": {"deviceClassName": DRIVER}}
                                ]
                            }
                        },
                    },
                )

    def podgroup_objects(self, volcano: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
        if volcano:
            yield (
                f"{VOLCANO_API}/queues",
                {
                    "apiVersion": "scheduling.volcano.sh/v1beta1",
                    "kind": "Queue",
                    "metadata": {"name": "default"},
                    "spec": {"weight": 1, "reclaimable": True},
                },
            )
            for g in range(self.gangs):
                yield (
                    f"{VOLCANO_API}/namespaces/{NAMESPACE}/podgroups",
                    {
                        "apiVersion": "scheduling.volcano.sh/v1beta1",
                        "kind": "PodGroup",
                        "metadata": {"name": self.gang_name(g), "namespace": NAMESPACE},
                        "spec": {"minMember": self.gang_size, "queue": "default"},
                    },
                )
            return
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

    def pod_objects(
        self, scheduler_name: str, volcano: bool = False
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Gang by gang (fill), or member index by member index across gangs (contention)."""
        if self.fills:
            order = ((g, i) for g in range(self.gangs) for i in range(self.gang_size))
        else:
            order = ((g, i) for i in range(self.gang_size) for g in range(self.gangs))
        for g, i in order:
            pod = self._pod(g, i, scheduler_name)
            if volcano:
                pod["metadata"]["annotations"] = {VOLCANO_GROUP: self.gang_name(g)}
            yield POD_PATH, pod

    def _pod(self, g: int, i: int, scheduler_name: str) -> dict[str, Any]:
        gang = self.gang_name(g)
        resources: dict[str, Any] = {
            "requests": {"cpu": "1", "memory": "1Gi", GPU: "1"},
            "limits": {"cpu": "1", "memory": "1Gi", GPU: "1"},
        }
        claims: list[dict[str, str]] = []
        if self.dra:
            resources = {
                "requests": {"cpu": "1", "memory": "1Gi"},
                "limits": {"cpu": "1", "memory": "1Gi"},
                "claims": [{"name": "gpu"}],
            }
            claims = [{"name": "gpu", "resourceClaimName": f"{gang}-{i}-gpu"}]
        pod: dict[str, Any] = {
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
        if claims:
            pod["spec"]["resourceClaims"] = claims
        return pod
