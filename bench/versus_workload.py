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
(the pods keep the label, which Volcano ignores). For KAI they are KAI's own, as its podgrouper
would write them: a ``scheduling.run.ai/v2alpha2`` PodGroup in the queue ``bench``, named by the
pod annotation ``pod-group-name``, and the queues ``bench-department`` and ``bench`` (its child)
with unlimited quota and limit (``scheduling.run.ai/v2``).

- ``contention``: demand 140% of the GPUs (50 nodes, 70 gangs of 8 by default) and the members
  of all gangs interleaved in creation order (member 0 of every gang, then member 1, ...), the
  case in which a scheduler that places pod by pod leaves every gang partly bound.

Two of KAI's published scale tests (test/e2e/scale in github.com/NVIDIA/KAI-Scheduler), timed
like ``fill`` (until every pod is bound, from the scheduler's start):

- ``kai-fill-jobs``: "fill cluster with single GPU Jobs": 500 nodes of 8 GPUs and 4,000
  single-pod one-GPU jobs by default. A single-pod job needs no gang: its pod has no PodGroup
  (KAI, whose podgrouper gives every job one, gets a PodGroup of minMember 1 per pod).
- ``kai-big-job``: "allocate single distributed job with preferred topology": 512 nodes of 8
  GPUs in a topology of 4 zones x 8 blocks x 8 racks x 2 nodes (labels
  ``cloud.provider.com/topology-zone``, ``-block``, ``-rack``) and one gang of 512 two-GPU
  pods that prefers one rack. KAI gets a Kueue ``Topology`` of the three levels and the
  PodGroup's ``topologyConstraint``; the other schedulers get the pods' Kueue annotation
  ``kueue.x-k8s.io/podset-preferred-topology`` (gangsched runs with the three levels as its
  ``topologyLevels``; kube-scheduler ignores it).

And KAI's third, "measure time for reclaim to fail on distributed job last pod", timed like
``kai-fill-jobs`` and then probed (bench/versus_unschedulable.py):

- ``kai-unschedulable``: ``kai-fill-jobs`` (the cluster filled by the scheduler itself), then,
  one sample at a time, a job of 10 pods of 8 GPUs (80 GPUs, 10 whole nodes) arrives and the
  time until it is reported unschedulable is taken; the job is deleted before the next. In
  KAI's test the fillers' queue gets a quota of all GPUs but 79 once the cluster is full, and
  the job comes in another queue: reclaiming what is over quota frees 79 GPUs, one too few, so
  the reclaim fails. KAI gets exactly that (the queue ``bench-reclaim`` for the job). The
  other schedulers have no queue quotas; they get the same arithmetic with priorities: 79
  fillers, spread evenly in creation order, at a low PriorityClass, the rest at a high one,
  the job between them, so that a preemption is tried and must fail (evicting every low
  filler frees 79 GPUs on different nodes). KAI's figure is its PodGroup's
  ``UnschedulableOnNodePool`` condition; the others' is ``PodScheduled=False`` on every pod
  of the job.
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
WORKLOADS: Final = (
    "fill",
    "fill-dra",
    "contention",
    "kai-fill-jobs",
    "kai-big-job",
    "kai-unschedulable",
)
DRIVER: Final = "gpu.bench.example.com"
RESOURCE_API: Final = "/apis/resource.k8s.io/v1"
VOLCANO_API: Final = "/apis/scheduling.volcano.sh/v1beta1"
VOLCANO_GROUP: Final = "scheduling.k8s.io/group-name"
KAI_API: Final = "/apis/scheduling.run.ai"
KAI_GROUP: Final = "pod-group-name"
KAI_QUEUE_LABEL: Final = "kai.scheduler/queue"
KAI_QUEUE: Final = "bench"
KAI_DEPARTMENT: Final = "bench-department"
# kai-unschedulable: the job's queue (KAI), its size, and the label that finds its pods
KAI_RECLAIM_QUEUE: Final = "bench-reclaim"
JOB_PODS: Final = 10
JOB_LABEL: Final = "bench.gangsched.io/job"
# kai-unschedulable without KAI: the fillers' and the job's PriorityClasses (name, value)
PRIORITY_HIGH: Final = ("bench-high", 1000)
PRIORITY_JOB: Final = ("bench-job", 100)
PRIORITY_LOW: Final = ("bench-low", 10)
# a PodGroup's own gang objects: those of scheduler-plugins, unless the scheduler has its own
PEER_GANGS: Final = ("volcano", "kai")
# kai-big-job: KAI's scale-test topology, largest domain first (each level's domains per domain
# of the level above), and the nodes of a rack
TOPOLOGY_LEVELS: Final = (
    ("cloud.provider.com/topology-zone", 4),
    ("cloud.provider.com/topology-block", 8),
    ("cloud.provider.com/topology-rack", 8),
)
NODES_PER_RACK: Final = 2
BIG_JOB_GPUS_PER_POD: Final = 2
KAI_TOPOLOGY: Final = "e2e-topology-tree"
KUEUE_PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"


@dataclass(frozen=True, slots=True)
class Workload:
    name: str  # one of WORKLOADS
    nodes: int
    pods: int
    gang_size: int = GANG_SIZE
    gpus_per_node: int = GPUS_PER_NODE
    gpus_per_pod: int = 1

    @classmethod
    def make(cls, name: str, nodes: int | None, pods: int | None) -> Workload:
        """Defaults: fill, N nodes, 8N pods; contention, 50 nodes, 140% of their GPUs;
        kai-fill-jobs, 500 nodes, 8N pods; kai-big-job, 512 nodes, one pod per node."""
        if name not in WORKLOADS:
            raise ValueError(f"unknown workload {name!r} (one of {', '.join(WORKLOADS)})")
        if name.startswith("kai-"):
            return cls._kai_scale(name, nodes, pods)
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

    @classmethod
    def _kai_scale(cls, name: str, nodes: int | None, pods: int | None) -> Workload:
        if name in ("kai-fill-jobs", "kai-unschedulable"):
            n = nodes if nodes is not None else 500
            pods = pods if pods is not None else n * GPUS_PER_NODE
            if n < 1 or not 1 <= pods <= n * GPUS_PER_NODE:
                raise ValueError("need at least one node and 1 to 8 x nodes pods")
            if name == "kai-unschedulable" and n < JOB_PODS:
                raise ValueError(f"need at least {JOB_PODS} nodes")
            return cls(name, n, pods, gang_size=1)
        n = nodes if nodes is not None else math.prod(c for _, c in TOPOLOGY_LEVELS) * 2
        pods = pods if pods is not None else n
        if n < 1 or not 1 <= pods * BIG_JOB_GPUS_PER_POD <= n * GPUS_PER_NODE:
            raise ValueError("need at least one node and the job's GPUs at most the nodes'")
        return cls(name, n, pods, gang_size=pods, gpus_per_pod=BIG_JOB_GPUS_PER_POD)

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
        """Timed until every pod is bound (every workload but contention)."""
        return self.name != "contention"

    @property
    def gangless(self) -> bool:
        """Single-pod jobs: no scheduler-plugins PodGroup, no gang label."""
        return self.name in ("kai-fill-jobs", "kai-unschedulable")

    @property
    def probes_unschedulable(self) -> bool:
        """After the fill, jobs that cannot fit arrive one at a time (kai-unschedulable)."""
        return self.name == "kai-unschedulable"

    @property
    def job_gpus(self) -> int:
        return JOB_PODS * self.gpus_per_node

    @property
    def low_fillers(self) -> int:
        """How many GPUs a failed reclaim (or preemption) frees: one fewer than the job's."""
        return max(0, min(self.pods, self.job_gpus - 1))

    def low_priority(self, i: int) -> bool:
        """Whether filler i is one of the low-priority ones, spread evenly over the fill."""
        n = self.low_fillers
        return n > 0 and (i * n) // self.pods != ((i + 1) * n) // self.pods

    def kai_filler_quota(self) -> int:
        """The GPU quota of the fillers' KAI queue once the cluster is full: all it holds but
        the 79 GPUs a reclaim may take."""
        return self.pods * self.gpus_per_pod - self.low_fillers

    def kai_queues(self) -> int:
        """How many KAI queues podgroup_objects yields before the PodGroups."""
        return 3 if self.probes_unschedulable else 2

    def priority_classes(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The PriorityClasses of kai-unschedulable (none for other workloads)."""
        if not self.probes_unschedulable:
            return
        for name, value in (PRIORITY_HIGH, PRIORITY_JOB, PRIORITY_LOW):
            yield (
                "/apis/scheduling.k8s.io/v1/priorityclasses",
                {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name},
                    "value": value,
                    "preemptionPolicy": "PreemptLowerPriority",
                },
            )

    def job_objects(
        self, name: str, scheduler_name: str, peer: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """kai-unschedulable's job: its PodGroup (scheduler-plugins', or KAI's in its own
        queue), then its 10 pods of 8 GPUs."""
        if peer == "kai":
            yield (
                f"{KAI_API}/v2alpha2/namespaces/{NAMESPACE}/podgroups",
                {
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "metadata": {
                        "name": name,
                        "namespace": NAMESPACE,
                        "labels": {KAI_QUEUE_LABEL: KAI_RECLAIM_QUEUE},
                    },
                    "spec": {"minMember": JOB_PODS, "queue": KAI_RECLAIM_QUEUE},
                },
            )
        else:
            yield (
                PODGROUP_PATH,
                {
                    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {"minMember": JOB_PODS},
                },
            )
        gpus = str(self.gpus_per_node)
        for i in range(JOB_PODS):
            resources = {
                "requests": {"cpu": "1", "memory": "1Gi", GPU: gpus},
                "limits": {"cpu": "1", "memory": "1Gi", GPU: gpus},
            }
            meta: dict[str, Any] = {
                "name": f"{name}-{i}",
                "namespace": NAMESPACE,
                "labels": {GANG_LABEL: name, JOB_LABEL: name},
            }
            spec: dict[str, Any] = {
                "schedulerName": scheduler_name,
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}
                ],
            }
            if peer == "kai":
                meta["annotations"] = {KAI_GROUP: name}
                meta["labels"][KAI_QUEUE_LABEL] = KAI_RECLAIM_QUEUE
            else:
                spec["priorityClassName"] = PRIORITY_JOB[0]
            yield POD_PATH, {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}

    @property
    def topology(self) -> bool:
        """Nodes in KAI's scale-test topology, the gang preferring one rack."""
        return self.name == "kai-big-job"

    def topology_levels(self) -> list[str]:
        """The node label keys of the topology's levels, largest domain first (none if the
        workload has no topology)."""
        return [key for key, _ in TOPOLOGY_LEVELS] if self.topology else []

    def domains_used(self, node_names: list[str]) -> dict[str, int]:
        """How many domains of each topology level the given nodes span (kai-big-job)."""
        spans: dict[str, set[str]] = {key: set() for key in self.topology_levels()}
        for name in node_names:
            for key, value in self._node_labels(int(name.lstrip("n"))).items():
                spans[key].add(value)
        return {key: len(values) for key, values in spans.items()}

    def _node_labels(self, i: int) -> dict[str, str]:
        """Node i's rack, block and zone (kai-big-job): 2 nodes a rack, 8 racks a block, 8
        blocks a zone."""
        if not self.topology:
            return {}
        labels: dict[str, str] = {}
        size = NODES_PER_RACK
        for key, per_parent in reversed(TOPOLOGY_LEVELS):
            labels[key] = f"{key.rsplit('-', 1)[-1]}-{i // size}"
            size *= per_parent
        return labels

    @property
    def dra(self) -> bool:
        return self.name == "fill-dra"

    def node_objects(self) -> Iterator[tuple[str, dict[str, Any]]]:
        gpus = 0 if self.dra else self.gpus_per_node
        for i in range(self.nodes):
            yield NODE_PATH, fake_node(f"n{i:05d}", "128", "1024Gi", gpus, self._node_labels(i))

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

    def podgroup_objects(self, peer: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
        """The gangs' PodGroups: scheduler-plugins' ones, or (``peer``: ``volcano``, ``kai``)
        that scheduler's own, after the queues they name."""
        if peer == "volcano":
            yield from self._volcano_podgroups()
            return
        if peer == "kai":
            yield from self._kai_podgroups()
            return
        if self.gangless:
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

    def _volcano_podgroups(self) -> Iterator[tuple[str, dict[str, Any]]]:
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

    def _kai_podgroups(self) -> Iterator[tuple[str, dict[str, Any]]]:
        unlimited = {"quota": -1, "limit": -1, "overQuotaWeight": 1}
        resources = {r: dict(unlimited) for r in ("gpu", "cpu", "memory")}
        queues = [(KAI_DEPARTMENT, ""), (KAI_QUEUE, KAI_DEPARTMENT)]
        if self.probes_unschedulable:
            queues.append((KAI_RECLAIM_QUEUE, KAI_DEPARTMENT))
        for name, parent in queues:
            spec: dict[str, Any] = {"resources": resources}
            if parent:
                spec["parentQueue"] = parent
            yield (
                f"{KAI_API}/v2/queues",
                {
                    "apiVersion": "scheduling.run.ai/v2",
                    "kind": "Queue",
                    "metadata": {"name": name},
                    "spec": spec,
                },
            )
        spec = {"minMember": self.gang_size, "queue": KAI_QUEUE}
        if self.topology:
            yield self._kai_topology()
            spec["topologyConstraint"] = {
                "topology": KAI_TOPOLOGY,
                "preferredTopologyLevel": TOPOLOGY_LEVELS[-1][0],
            }
        for g in range(self.gangs):
            yield (
                f"{KAI_API}/v2alpha2/namespaces/{NAMESPACE}/podgroups",
                {
                    "apiVersion": "scheduling.run.ai/v2alpha2",
                    "kind": "PodGroup",
                    "metadata": {
                        "name": self.gang_name(g),
                        "namespace": NAMESPACE,
                        "labels": {KAI_QUEUE_LABEL: KAI_QUEUE},
                    },
                    "spec": spec,
                },
            )

    def _kai_topology(self) -> tuple[str, dict[str, Any]]:
        return (
            "/apis/kueue.x-k8s.io/v1alpha1/topologies",
            {
                "apiVersion": "kueue.x-k8s.io/v1alpha1",
                "kind": "Topology",
                "metadata": {"name": KAI_TOPOLOGY},
                "spec": {"levels": [{"nodeLabel": key} for key, _ in TOPOLOGY_LEVELS]},
            },
        )

    def pod_objects(
        self, scheduler_name: str, peer: str = ""
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """Gang by gang (fill), or member index by member index across gangs (contention); for
        ``peer`` (``volcano``, ``kai``) each names its gang that scheduler's own way."""
        if self.fills:
            order = ((g, i) for g in range(self.gangs) for i in range(self.gang_size))
        else:
            order = ((g, i) for i in range(self.gang_size) for g in range(self.gangs))
        for g, i in order:
            pod = self._pod(g, i, scheduler_name)
            if peer == "volcano":
                pod["metadata"]["annotations"] = {VOLCANO_GROUP: self.gang_name(g)}
            elif peer == "kai":
                pod["metadata"]["annotations"] = {KAI_GROUP: self.gang_name(g)}
                pod["metadata"]["labels"][KAI_QUEUE_LABEL] = KAI_QUEUE
            elif self.topology:
                pod["metadata"]["annotations"] = {KUEUE_PREFERRED: TOPOLOGY_LEVELS[-1][0]}
            if self.gangless and not peer:
                del pod["metadata"]["labels"][GANG_LABEL]
            if self.probes_unschedulable and peer != "kai":
                low = self.low_priority(g * self.gang_size + i)
                pod["spec"]["priorityClassName"] = (PRIORITY_LOW if low else PRIORITY_HIGH)[0]
            yield POD_PATH, pod

    def _pod(self, g: int, i: int, scheduler_name: str) -> dict[str, Any]:
        gang = self.gang_name(g)
        gpus = str(self.gpus_per_pod)
        resources: dict[str, Any] = {
            "requests": {"cpu": "1", "memory": "1Gi", GPU: gpus},
            "limits": {"cpu": "1", "memory": "1Gi", GPU: gpus},
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
