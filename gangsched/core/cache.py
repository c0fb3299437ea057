"""The node cache: what every node has and what is counted against it.

A pod is counted on a node when it is bound there and not terminal, or when the scheduler has
assumed it there (reserved, binding not yet confirmed by the API). Pods placed by other
schedulers count like any other. Terminal pods free their resources.

Two indexes make the hot path cheap: nodes bucketed by free GPUs (so a GPU pod looks only at
nodes that can hold it, tightest first), and cluster-wide free totals over ready nodes
(so a hopeless gang fails in O(resources)).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from gangsched.core.model import HostPort, Node, Pod
from gangsched.core.podindex import PodIndex, TermIndex
from gangsched.core.resources import GPU, ResourceList, add_into, sub_into
from gangsched.core.volumes import VolumeCatalog

__all__ = ["ClusterCache", "NodeInfo"]


class NodeInfo:
    """A node and the requests counted on it. ``node`` is None for a node the cache has only
    heard of through pods bound to it (its Node object has not arrived, or was deleted)."""

    __slots__ = ("name", "node", "pods", "ports", "requested")

    def __init__(self, name: str, node: Node | None) -> None:
        self.name = name
        self.node = node
        self.requested: ResourceList = {}
        self.pods: set[str] = set()
        self.ports: dict[HostPort, int] = {}  # host ports of the pods counted here

    def allocatable(self, resource: str) -> int:
        return self.node.allocatable.get(resource, 0) if self.node is not None else 0

    def free(self, resource: str) -> int:
        return self.allocatable(resource) - self.requested.get(resource, 0)

    @property
    def usable(self) -> bool:
        """Ready. A cordoned node stays usable for pods that tolerate the cordon; the
        NodeUnschedulable filter decides per pod."""
        n = self.node
        return n is not None and n.ready


class ClusterCache:
    def __init__(self) -> None:
        self.nodes: dict[str, NodeInfo] = {}
        self.pods: dict[str, Pod] = {}
        self._counted_on: dict[str, str] = {}  # pod uid -> node its requests count on
        self._counted_req: dict[str, ResourceList] = {}
        # How many counted pods have each priority: preemption looks for lower ones first.
        self.counted_priorities: Counter[int] = Counter()
        self._counted_prio: dict[str, int] = {}
        self.assumed: dict[str, str] = {}  # pod uid -> node, reserved and not yet confirmed
        self._gpu_buckets: dict[int, dict[str, None]] = {}  # free GPUs -> ordered node set
        self._bucket_of: dict[str, int] = {}
        self.total_allocatable: ResourceList = {}  # over usable (ready) nodes
        self.total_requested: ResourceList = {}  # over usable (ready) nodes
        self._total_free: ResourceList = {}  # sum over usable nodes of max(0, free) per resource
        self.static_generation = 0  # bumps when any node's non-resource attributes change
        # Counted pods by namespace and label, and their inter-pod affinity terms.
        self.pod_index = PodIndex()
        self.term_index = TermIndex()
        self.namespaces: dict[str, Mapping[str, str]] = {}  # namespace -> labels
        self._counted_ports: dict[str, tuple[HostPort, ...]] = {}
        # Claims, volumes, storage classes and CSINodes, with the volume plans of reserved
        # pods (core/volumes.py).
        self.volumes = VolumeCatalog()
        # Called with a pod's uid after ``assume`` or ``forget`` changed whether it is
        # assumed (the scheduler keeps its gangs' counts with it). ``upsert_pod`` and
        # ``remove_pod`` drop an assumption without it: their caller has the pod's event.
        self.on_assumption: Callable[[str], None] | None = None

    # ---- nodes -------------------------------------------------------------------------
    def upsert_node(self, node: Node) -> None:
        info = self.nodes.get(node.name)
        if info is None:
            info = NodeInfo(node.name, None)
            self.nodes[node.name] = info
        self._untotal(info)
        old = info.node
        if old is None or old.static_signature() != node.static_signature():
            self.static_generation += 1
        info.node = node
        self._total(info)
        self._reindex(info)

    def remove_node(self, name: str) -> list[str]:
        """Forget a node. Returns the uids of pods assumed on it; their reservations stay
        until the caller drops them (a binding already sent is decided by its outcome)."""
        info = self.nodes.get(name)
        if info is None:
            return []
        self._untotal(info)
        info.node = None
        self.static_generation += 1
        self._reindex(info)
        if not info.pods:
            del self.nodes[name]
        return [uid for uid, n in self.assumed.items() if n == name]

    # ---- pods --------------------------------------------------------------------------
    def _target(self, pod: Pod) -> str:
        """Where a pod's requests count: its node when bound, else where it is assumed;
        nowhere when it is terminal."""
        if pod.terminal:
            return ""
        return pod.node_name or self.assumed.get(pod.uid, "")

    def upsert_pod(self, pod: Pod) -> None:
        uid = pod.uid
        old = self.pods.get(uid)
        self.pods[uid] = pod
        if pod.node_name:
            self.assumed.pop(uid, None)
        self._count(uid, self._target(pod), pod.requests)
        if (
            old is not None
            and uid in self._counted_on
            and (
                old.labels != pod.labels
                or old.pod_affinity != pod.pod_affinity
                or old.group != pod.group
            )
        ):
            self.pod_index.add(pod)
            self.term_index.add(pod)

    # ---- namespaces --------------------------------------------------------------------
    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self.namespaces[name] = dict(labels)

    def remove_namespace(self, name: str) -> None:
        self.namespaces.pop(name, None)

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.namespaces.get(name)

    def remove_pod(self, uid: str) -> Pod | None:
        self.assumed.pop(uid, None)
        self.volumes.forget(uid)
        self._count(uid, "", {})
        return self.pods.pop(uid, None)

    def assume(self, uid: str, node: str) -> None:
        pod = self.pods[uid]
        self.assumed[uid] = node
        self._count(uid, self._target(pod), pod.requests)
        if pod.volumes.claims:
            info = self.nodes.get(node)
            labels = info.node.labels if info is not None and info.node is not None else {}
            self.volumes.assume(pod, node, labels)
        if self.on_assumption is not None:
            self.on_assumption(uid)

    def forget(self, uid: str) -> None:
        """Drop a reservation. Idempotent; a pod the API has bound is left counted."""
        self.volumes.forget(uid)
        if self.assumed.pop(uid, None) is None:
            return
        pod = self.pods.get(uid)
        if pod is None:
            self._count(uid, "", {})
        else:
            self._count(uid, self._target(pod), pod.requests)
        if self.on_assumption is not None:
            self.on_assumption(uid)

    def lift(self, uid: str) -> None:
        """What-if: stop counting a pod where it runs, as if it were gone (preemption and
        reservations ask where a gang would fit without some pods). ``restore`` undoes it;
        the caller restores every pod it lifted before the cycle ends."""
        self._count(uid, "", {})

    def restore(self, uid: str) -> None:
        """Count a lifted pod again where it runs."""
        pod = self.pods.get(uid)
        if pod is not None:
            self._count(uid, self._target(pod), pod.requests)

    def node_of(self, uid: str) -> str:
        """The node a pod is counted on (bound or assumed), or ''."""
        return self._counted_on.get(uid, "")

    # ---- indexes -----------------------------------------------------------------------
    def gpu_candidates(self, min_free: int) -> Iterator[NodeInfo]:
        """Ready nodes with at least ``min_free`` free GPUs, fewest free first."""
        for free in sorted(k for k in self._gpu_buckets if k >= min_free):
            for name in self._gpu_buckets[free]:
                yield self.nodes[name]

    def gpu_bucket_sizes(self) -> dict[int, int]:
        return {k: len(v) for k, v in self._gpu_buckets.items()}

    def cluster_free(self, resource: str) -> int:
        """Free ``resource`` summed over Ready nodes, each node counting what it has left and
        never less than nothing: a node whose pods hold more than it now offers (allocatable
        shrank under running pods) hides no capacity of the others."""
        return self._total_free.get(resource, 0)

    # ---- internals ---------------------------------------------------------------------
    def _count(self, uid: str, target: str, requests: ResourceList) -> None:
        current = self._counted_on.get(uid, "")
        if current == target and (not target or self._counted_req.get(uid) == requests):
            return
        if current:
            info = self.nodes[current]
            self._untotal(info)
            sub_into(info.requested, self._counted_req.pop(uid))
            info.pods.discard(uid)
            del self._counted_on[uid]
            prio = self._counted_prio.pop(uid, None)
            if prio is not None:
                left = self.counted_priorities[prio] - 1
                if left:
                    self.counted_priorities[prio] = left
                else:
                    del self.counted_priorities[prio]
            self.pod_index.remove(uid)
            self.term_index.remove(uid)
            self.volumes.uncount(uid)
            ports = self._counted_ports.pop(uid, ())
            for port in ports:
                left = info.ports[port] - 1
                if left:
                    info.ports[port] = left
                else:
                    del info.ports[port]
            self._total(info)
            self._reindex(info)
            if info.node is None and not info.pods:
                del self.nodes[current]
        if target:
            tinfo = self.nodes.get(target)
            if tinfo is None:
                tinfo = NodeInfo(target, None)
                self.nodes[target] = tinfo
            info = tinfo
            self._untotal(info)
            req = dict(requests)
            add_into(info.requested, req)
            info.pods.add(uid)
            self._counted_on[uid] = target
            self._counted_req[uid] = req
            pod = self.pods.get(uid)
            if pod is not None:
                self._counted_prio[uid] = pod.priority
                self.counted_priorities[pod.priority] += 1
                self.pod_index.add(pod)
                self.term_index.add(pod)
                if pod.volumes.claims:
                    self.volumes.count(pod)
                if pod.host_ports:
                    self._counted_ports[uid] = pod.host_ports
                    for port in pod.host_ports:
                        info.ports[port] = info.ports.get(port, 0) + 1
            self._total(info)
            self._reindex(info)

    def _untotal(self, info: NodeInfo) -> None:
        if info.usable and info.node is not None:
            sub_into(self.total_allocatable, info.node.allocatable)
            sub_into(self.total_requested, info.requested)
            sub_into(self._total_free, _free_of(info.node.allocatable, info.requested))

    def _total(self, info: NodeInfo) -> None:
        if info.usable and info.node is not None:
            add_into(self.total_allocatable, info.node.allocatable)
            add_into(self.total_requested, info.requested)
            add_into(self._total_free, _free_of(info.node.allocatable, info.requested))

    def _reindex(self, info: NodeInfo) -> None:
        old = self._bucket_of.pop(info.name, None)
        if old is not None:
            bucket = self._gpu_buckets[old]
            del bucket[info.name]
            if not bucket:
                del self._gpu_buckets[old]
        if info.usable and info.allocatable(GPU) > 0:
            free = info.free(GPU)
            if free > 0:
                self._gpu_buckets.setdefault(free, {})[info.name] = None
                self._bucket_of[info.name] = free


def _free_of(allocatable: Mapping[str, int], requested: Mapping[str, int]) -> ResourceList:
    """What a node has left per resource, never negative."""
    out: ResourceList = {}
    for k, v in allocatable.items():
        left = v - requested.get(k, 0)
        if left > 0:
            out[k] = left
    return out
