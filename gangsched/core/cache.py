"""The node cache: what every node has and what is counted against it.

A pod is counted on a node when it is bound there and not terminal, or when the scheduler has
assumed it there (reserved, binding not yet confirmed by the API). Pods placed by other
schedulers count like any other. Terminal pods free their resources.

A node's GPUs are devices (core/gpu.py): a GPU pod counted on a node takes its demand on
particular devices, so shares of one device never exceed it and whole devices are exclusive.
The devices are, in order: those recorded in the pod (``Pod.gpu_devices``) whenever they exist
on the node; else those ``device_policy`` chose when the pod was assumed (or the pod was last
counted on); else the best fit; and when nothing fits (a pod bound by someone else onto full
devices) the least used devices, over-committed, since the pod runs there anyway. A node whose
devices change has its pods' devices counted again.

A record is the truth, whatever order pods arrive in (a restart lists them by name): a bound
pod without a record (a whole ``nvidia.com/gpu`` pod, whose devices the node's device plugin
chose) is counted on devices the cache guessed, and when a recorded pod names one of those
devices the guess moves aside (it is placed again, by best fit, on what the records leave).
A recorded share is never moved. When the records themselves do not fit the devices (or leave
no room for the pods without one) the devices are counted over-committed as the records say,
and the conflict is kept in ``conflicts`` for the scheduler to report. When a pod leaves a node
whose devices are over-committed, the guesses on the over-committed devices are placed again
on what is now free (a what-if's lift moves nothing: only a pod that ended, went or moved).

Three indexes make the hot path cheap: nodes bucketed by whole free devices (free GPUs for a
node without a device model) and by the largest free share of one device, so a GPU pod looks
only at nodes that can hold it, tightest first; and cluster-wide free totals over ready nodes
(so a hopeless gang fails in O(resources)).
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Callable, Iterator, Mapping

from gangsched.core.claimstate import ClaimCatalog
from gangsched.core.domains import DomainIndex
from gangsched.core.gpu import KOORD_CORE, KOORD_RATIO, MILLI, GpuDemand, NodeGpus, best_fit
from gangsched.core.model import HostPort, Node, Pod
from gangsched.core.podindex import PodIndex, TermIndex
from gangsched.core.resources import GPU, ResourceList, add_into, sub_into
from gangsched.core.volumes import VolumeCatalog

__all__ = ["ClusterCache", "DevicePolicy", "NodeInfo"]

# Which devices of a node a GPU demand takes (None when it does not fit).
DevicePolicy = Callable[[NodeGpus, GpuDemand], tuple[int, ...] | None]


class NodeInfo:
    """A node and the requests counted on it. ``node`` is None for a node the cache has only
    heard of through pods bound to it (its Node object has not arrived, or was deleted).
    ``gpus`` is what each of its GPU devices has counted on it; None for a node without a
    device model (no GPUs, or counted by its ``nvidia.com/gpu`` total alone)."""

    __slots__ = ("gpus", "left", "name", "node", "pods", "ports", "requested", "version")

    def __init__(self, name: str, node: Node | None) -> None:
        self.name = name
        self.node = node
        self.gpus: NodeGpus | None = NodeGpus(node.gpus) if node is not None and node.gpus else None
        self.requested: ResourceList = {}
        # allocatable minus requested, per resource (negative where more is counted than the
        # node has; absent: 0), kept as both change: what NodeResourcesFit reads
        self.left: ResourceList = dict(node.allocatable) if node is not None else {}
        self.pods: set[str] = set()
        self.ports: dict[HostPort, int] = {}  # host ports of the pods counted here
        # bumped whenever what is counted here, the node or its devices change: a scorer may
        # keep what it derived from the node's state until it moves
        self.version = 0

    def relist(self) -> None:
        """``left`` again, after the node (its allocatable) changed."""
        left = dict(self.node.allocatable) if self.node is not None else {}
        for k, v in self.requested.items():
            rest = left.get(k, 0) - v
            if rest:
                left[k] = rest
            else:
                left.pop(k, None)
        self.left = left
        self.version += 1

    def allocatable(self, resource: str) -> int:
        return self.node.allocatable.get(resource, 0) if self.node is not None else 0

    def free(self, resource: str) -> int:
        return self.left.get(resource, 0)

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
        # Nodes holding counted members of each gang (gang key -> node -> members there).
        self.gang_nodes: dict[str, Counter[str]] = {}
        self._counted_gang: dict[str, str] = {}
        self.assumed: dict[str, str] = {}  # pod uid -> node, reserved and not yet confirmed
        # Whole free devices (free GPUs without a device model) -> ordered node set.
        self._gpu_buckets: dict[int, dict[str, None]] = {}
        self._bucket_of: dict[str, int] = {}
        # The largest free milli-GPU on one device -> ordered node set (nodes with devices).
        self._share_buckets: dict[int, dict[str, None]] = {}
        self._share_of: dict[str, int] = {}
        # The device choice for a pod being assumed (a placement profile may replace it).
        self.device_policy: DevicePolicy = best_fit
        self._devices: dict[str, tuple[tuple[int, ...], int]] = {}  # uid -> (devices, milli)
        # uid -> (node, devices) planned at assume time or last counted: a pod counted again
        # on the same node (restored after a what-if, confirmed by its binding) keeps them.
        self._planned: dict[str, tuple[str, tuple[int, ...]]] = {}
        # Bound pods whose recorded devices (or whose node's records) over-commit a device:
        # uid -> (node, devices). Taken by the scheduler (``take_conflicts``) to report.
        self.conflicts: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.total_allocatable: ResourceList = {}  # over usable (ready) nodes
        self.total_requested: ResourceList = {}  # over usable (ready) nodes
        self._total_free: ResourceList = {}  # sum over usable nodes of max(0, free) per resource
        self.static_generation = 0  # bumps when any node's non-resource attributes change
        self.capacity_generation = 0  # bumps when a node comes, goes or its allocatable changes
        # Bumps whenever anything a filter reads may have changed: a node, a counted pod (or
        # one being counted or no longer), a namespace. A pod that failed to fit at one
        # generation fails again at the same generation (core/equivalence.py).
        self.generation = 0
        # Counted pods by namespace and label, and their inter-pod affinity terms.
        self.pod_index = PodIndex()
        self.term_index = TermIndex()
        self.namespaces: dict[str, Mapping[str, str]] = {}  # namespace -> labels
        self._counted_ports: dict[str, tuple[HostPort, ...]] = {}
        # Claims, volumes, storage classes and CSINodes, with the volume plans of reserved
        # pods (core/volumes.py).
        self.volumes = VolumeCatalog()
        # Devices, device classes and resource claims, with the allocations chosen for
        # reserved pods (core/claimstate.py).
        self.resource_claims = ClaimCatalog(self._node_labels)
        # Free capacity per topology domain of the levels gangs ask about (core/domains.py).
        self.domains = DomainIndex()
        # Nodes where capacity was freed (a pod no longer counted there) or that came or
        # changed, in order: ``freed_since`` names those after a point (``freed_seq``). What
        # a what-if lifts is not counted as freed.
        self.freed_seq = 0
        self._freed_at: dict[str, int] = {}  # node -> seq of its last freeing
        self._freed_log: list[tuple[int, str]] = []
        # Called with a pod's uid after ``assume`` or ``forget`` changed whether it is
        # assumed (the scheduler keeps its gangs' counts with it). ``upsert_pod`` and
        # ``remove_pod`` drop an assumption without it: their caller has the pod's event.
        self.on_assumption: Callable[[str], None] | None = None

    # ---- nodes -------------------------------------------------------------------------
    def upsert_node(self, node: Node) -> None:
        self.generation += 1
        info = self.nodes.get(node.name)
        if info is None:
            info = NodeInfo(node.name, None)
            self.nodes[node.name] = info
        self._untotal(info)
        old = info.node
        if old is None or old.static_signature() != node.static_signature():
            self.static_generation += 1
        if old is None or old.allocatable != node.allocatable:
            self.capacity_generation += 1
        info.node = node
        info.relist()
        if old is None or old.labels != node.labels:
            self.resource_claims.node_changed(node.name)  # which shared devices reach it
        devices = node.gpus or ()
        current = info.gpus
        if (current.devices if current is not None else ()) != devices:
            self._recount_devices(info)
        self._total(info)
        self._reindex(info)
        self._freed(node.name)

    def remove_node(self, name: str) -> list[str]:
        """Forget a node. Returns the uids of pods assumed on it; their reservations stay
        until the caller drops them (a binding already sent is decided by its outcome)."""
        info = self.nodes.get(name)
        if info is None:
            return []
        self._untotal(info)
        info.node = None
        info.relist()
        self.static_generation += 1
        self.capacity_generation += 1
        self.generation += 1
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
        was_on = self._counted_on.get(uid, "")
        if uid in self._counted_on:
            self.generation += 1  # labels, deletion: what other pods' filters read
        self.pods[uid] = pod
        if pod.node_name:
            self.assumed.pop(uid, None)
        if old is not None and (
            (
                old.gpu_devices != pod.gpu_devices
                and uid in self._devices
                and self._devices[uid][0] != pod.gpu_devices
            )
            or (old.group != pod.group and uid in self._counted_on)
        ):
            self._count(uid, "", {})  # count it again: on the devices now recorded, its gang
        self._count(uid, self._target(pod), pod.requests)
        if was_on and self._counted_on.get(uid) != was_on:
            self._settle_guesses(was_on)
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
        self.generation += 1
        self.namespaces[name] = dict(labels)

    def remove_namespace(self, name: str) -> None:
        self.generation += 1
        self.namespaces.pop(name, None)

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        return self.namespaces.get(name)

    def remove_pod(self, uid: str) -> Pod | None:
        self.assumed.pop(uid, None)
        self.volumes.forget(uid)
        self.resource_claims.forget(uid)
        was_on = self._counted_on.get(uid, "")
        self._count(uid, "", {})
        if was_on:
            self._settle_guesses(was_on)
        self._planned.pop(uid, None)
        return self.pods.pop(uid, None)

    def assume(self, uid: str, node: str) -> None:
        pod = self.pods[uid]
        self.assumed[uid] = node
        demand = pod.gpu
        if demand is not None and self._counted_on.get(uid) != node:
            info = self.nodes.get(node)
            if info is not None and info.gpus is not None:
                chosen = self.device_policy(info.gpus, demand)
                if chosen is not None:
                    self._planned[uid] = (node, chosen)
                else:
                    self._planned.pop(uid, None)
        self._count(uid, self._target(pod), pod.requests)
        if pod.volumes.claims:
            info = self.nodes.get(node)
            labels = info.node.labels if info is not None and info.node is not None else {}
            self.volumes.assume(pod, node, labels)
        if pod.resource_claims:
            self.resource_claims.assume(pod, node)
        if self.on_assumption is not None:
            self.on_assumption(uid)

    def forget(self, uid: str) -> None:
        """Drop a reservation. Idempotent; a pod the API has bound is left counted."""
        self.volumes.forget(uid)
        self.resource_claims.forget(uid)
        if self.assumed.pop(uid, None) is None:
            return
        pod = self.pods.get(uid)
        if pod is None:
            self._count(uid, "", {})
        else:
            self._count(uid, self._target(pod), pod.requests)
        if uid not in self._counted_on:
            self._planned.pop(uid, None)
        if self.on_assumption is not None:
            self.on_assumption(uid)

    def lift(self, uid: str) -> None:
        """What-if: stop counting a pod where it runs, as if it were gone (preemption and
        reservations ask where a gang would fit without some pods). ``restore`` undoes it;
        the caller restores every pod it lifted before the cycle ends."""
        self._count(uid, "", {}, freed=False)
        pod = self.pods.get(uid)
        if pod is not None and pod.resource_claims:
            self.resource_claims.lift(uid, pod.resource_claims)

    def restore(self, uid: str) -> None:
        """Count a lifted pod again where it runs."""
        pod = self.pods.get(uid)
        if pod is not None:
            self._count(uid, self._target(pod), pod.requests)
            if pod.resource_claims:
                self.resource_claims.restore(uid, pod.resource_claims)

    def freed_since(self, seq: int) -> list[str]:
        """The nodes freed (or that came or changed) after ``freed_seq`` was ``seq``."""
        log = self._freed_log
        at = bisect.bisect_right(log, seq, key=_seq_of)
        if at == len(log):
            return []
        freed_at = self._freed_at
        return [n for q, n in log[at:] if freed_at.get(n) == q]

    def _freed(self, node: str) -> None:
        self.freed_seq += 1
        self._freed_at[node] = self.freed_seq
        log = self._freed_log
        log.append((self.freed_seq, node))
        if len(log) > 64 and len(log) > 4 * len(self._freed_at):
            self._freed_log = sorted((q, n) for n, q in self._freed_at.items())

    def _node_labels(self, name: str) -> Mapping[str, str]:
        info = self.nodes.get(name)
        return info.node.labels if info is not None and info.node is not None else {}

    def node_of(self, uid: str) -> str:
        """The node a pod is counted on (bound or assumed), or ''."""
        return self._counted_on.get(uid, "")

    def devices_of(self, uid: str) -> tuple[int, ...]:
        """The GPU devices (indexes) a pod is counted on, or () (not counted, no GPUs, or a
        node without a device model)."""
        counted = self._devices.get(uid)
        return counted[0] if counted is not None else ()

    # ---- indexes -----------------------------------------------------------------------
    def gpu_candidates(
        self, demand: GpuDemand | int, emptiest_first: bool = False
    ) -> Iterator[NodeInfo]:
        """Ready nodes where ``demand`` fits on devices (an int: that many whole GPUs), the
        tightest first: fewest whole free devices for whole GPUs, smallest largest free
        share for a share; the emptiest first with ``emptiest_first``. Nodes without a
        device model take whole GPUs by their free ``nvidia.com/gpu``."""
        if isinstance(demand, int):
            demand = GpuDemand(demand, MILLI)
        nodes = self.nodes
        if demand.milli >= MILLI:
            buckets = self._gpu_buckets
            keys = sorted((k for k in buckets if k >= demand.count), reverse=emptiest_first)
            for free in keys:
                for name in buckets[free]:
                    yield nodes[name]
            return
        buckets = self._share_buckets
        keys = sorted((k for k in buckets if k >= demand.milli), reverse=emptiest_first)
        single = demand.count <= 1
        for largest in keys:
            for name in buckets[largest]:
                info = nodes[name]
                if single or (info.gpus is not None and info.gpus.fits(demand)):
                    yield info

    def gpu_bucket_sizes(self) -> dict[int, int]:
        return {k: len(v) for k, v in self._gpu_buckets.items()}

    def share_bucket_sizes(self) -> dict[int, int]:
        return {k: len(v) for k, v in self._share_buckets.items()}

    def cluster_free(self, resource: str) -> int:
        """Free ``resource`` summed over Ready nodes, each node counting what it has left and
        never less than nothing: a node whose pods hold more than it now offers (allocatable
        shrank under running pods) hides no capacity of the others. On a node with devices,
        free ``nvidia.com/gpu`` is at most its whole free devices (shares occupy devices) and
        free ``koordinator.sh/gpu-core``/``gpu-memory-ratio`` at most its free milli-GPUs / 10:
        both stay upper bounds of what fits, so a check against them never refuses what fits."""
        return self._total_free.get(resource, 0)

    # ---- topology domains --------------------------------------------------------------
    def domain_free(self, key: str) -> dict[str, ResourceList]:
        """Free capacity per domain of level ``key`` over ready nodes (as ``cluster_free``
        counts it per node). The first call for a level walks the nodes; from then on the
        totals are kept with every change."""
        per = self.domains.free.get(key)
        if per is None:
            per = {}
            for info in self.nodes.values():
                node = info.node
                if info.usable and node is not None:
                    value = node.labels.get(key)
                    if value is not None:
                        add_into(per.setdefault(value, {}), _free_of(info))
            self.domains.free[key] = per
        return per

    def domain_nodes(self, key: str) -> dict[str, tuple[str, ...]]:
        """The ready nodes of each domain of level ``key``, in the cache's node order."""
        domains = self.domains
        if domains.members_generation.get(key) != self.static_generation:
            members: dict[str, list[str]] = {}
            for name, info in self.nodes.items():
                node = info.node
                if info.usable and node is not None:
                    value = node.labels.get(key)
                    if value is not None:
                        members.setdefault(value, []).append(name)
            domains.members[key] = {v: tuple(n) for v, n in members.items()}
            domains.members_generation[key] = self.static_generation
        return domains.members[key]

    def gpu_rank(self, name: str, whole: bool) -> int:
        """Where a node stands in the GPU index: its whole free devices (``whole``) or its
        largest free share of one device; 0 when it has none."""
        if whole:
            return self._bucket_of.get(name, 0)
        return self._share_of.get(name, 0)

    # ---- internals ---------------------------------------------------------------------
    def _count(self, uid: str, target: str, requests: ResourceList, freed: bool = True) -> None:
        """Count the pod's ``requests`` on ``target`` ('' : nowhere). ``freed``: a node it
        leaves is logged as freed (``freed_since``; not for a what-if's lift)."""
        current = self._counted_on.get(uid, "")
        if current == target and (not target or self._counted_req.get(uid) == requests):
            return
        self.generation += 1
        if current:
            info = self.nodes[current]
            self._untotal(info)
            given = self._counted_req.pop(uid)
            sub_into(info.requested, given)
            add_into(info.left, given)
            counted = self._devices.pop(uid, None)
            if counted is not None and info.gpus is not None:
                info.gpus.give(counted[0], counted[1])
            info.pods.discard(uid)
            del self._counted_on[uid]
            if freed and target != current:
                self._freed(current)
            group = self._counted_gang.pop(uid, "")
            if group:
                where = self.gang_nodes[group]
                where[current] -= 1
                if where[current] <= 0:
                    del where[current]
                    if not where:
                        del self.gang_nodes[group]
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
            sub_into(info.left, req)
            info.pods.add(uid)
            self._counted_on[uid] = target
            self._counted_req[uid] = req
            pod = self.pods.get(uid)
            if pod is not None:
                if info.gpus is not None:
                    demand = _demand_of(pod)
                    if demand is not None:
                        self._take_devices(uid, pod, info, info.gpus, demand)
                self._counted_prio[uid] = pod.priority
                self.counted_priorities[pod.priority] += 1
                if pod.group:
                    self._counted_gang[uid] = pod.group
                    self.gang_nodes.setdefault(pod.group, Counter())[target] += 1
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

    def _take_devices(
        self, uid: str, pod: Pod, info: NodeInfo, gpus: NodeGpus, demand: GpuDemand
    ) -> None:
        """Count ``demand`` on devices of ``info``: the recorded ones, else the planned ones
        (those it was last counted on, for a pod bound there even if others are counted on
        them now), else the best fit, else (over-committed from outside) the least used."""
        milli = demand.milli if demand.milli < MILLI else MILLI
        devices = pod.gpu_devices
        if devices and _recorded(gpus, devices, demand.count):
            moved: list[str] = []
            # (with a pod assumed on the node, an over-commit is this scheduler's hold over
            # its victims until they go: nothing is moved, nothing is a conflict)
            if not _room(gpus, devices, demand.count, milli) and self._all_bound(info):
                moved = self._move_guesses(info, gpus, devices, uid)
                if not _room(gpus, devices, demand.count, milli):
                    self.conflicts[uid] = (info.name, devices)
            gpus.take(devices, milli)
            self._devices[uid] = (devices, milli)
            self._planned[uid] = (info.name, devices)
            for other in moved:
                self._place_guess(other, info, gpus)
            return
        if not devices or not _room(gpus, devices, demand.count, milli):
            planned = self._planned.get(uid)
            if (
                planned is not None
                and planned[0] == info.name
                # A pod running there keeps its devices whatever else is counted on them
                # (a preemptor assumed over it, until it goes).
                and _room(gpus, planned[1], demand.count, milli, pod.node_name != info.name)
            ):
                devices = planned[1]
            else:
                chosen = best_fit(gpus, demand)
                devices = chosen if chosen is not None else _least_used(gpus, demand.count)
                if chosen is None and pod.node_name == info.name and self._all_bound(info):
                    self.conflicts[uid] = (info.name, devices)  # runs there, fits nowhere
        gpus.take(devices, milli)
        self._devices[uid] = (devices, milli)
        self._planned[uid] = (info.name, devices)

    def _guessed(self, uid: str, info: NodeInfo) -> bool:
        """The pod runs on the node with no valid record: its devices are the cache's guess."""
        pod = self.pods.get(uid)
        if pod is None or pod.node_name != info.name or uid in self.assumed:
            return False
        counted = self._devices.get(uid)
        if counted is None or info.gpus is None:
            return False
        return not (pod.gpu_devices and _recorded(info.gpus, pod.gpu_devices, len(counted[0])))

    def _move_guesses(
        self, info: NodeInfo, gpus: NodeGpus, devices: tuple[int, ...], uid: str
    ) -> list[str]:
        """Take the pods whose devices are guesses off ``devices`` (a record names them);
        returns them, in uid order, to be placed again."""
        wanted = set(devices)
        moved = sorted(
            other
            for other in info.pods
            if other != uid
            and other in self._devices
            and wanted.intersection(self._devices[other][0])
            and self._guessed(other, info)
        )
        for other in moved:
            counted, milli = self._devices.pop(other)
            gpus.give(counted, milli)
            self._planned.pop(other, None)
        return moved

    def _place_guess(self, uid: str, info: NodeInfo, gpus: NodeGpus) -> None:
        """Count a pod without a record again on the best fit of what is left; when nothing
        fits, on the least used devices, and the conflict is kept."""
        pod = self.pods[uid]
        demand = _demand_of(pod)
        assert demand is not None
        milli = demand.milli if demand.milli < MILLI else MILLI
        chosen = best_fit(gpus, demand)
        if chosen is None:
            chosen = _least_used(gpus, demand.count)
            self.conflicts[uid] = (info.name, chosen)
        gpus.take(chosen, milli)
        self._devices[uid] = (chosen, milli)
        self._planned[uid] = (info.name, chosen)

    def _settle_guesses(self, node: str) -> None:
        """A pod left ``node``: if its devices are over-committed (records that did not fit,
        the pods without one put on the least used), place the guesses on the over-committed
        devices again, by best fit on what is free now. Not while a pod is assumed there (an
        over-commit is then a preemptor's hold over its victims)."""
        info = self.nodes.get(node)
        gpus = info.gpus if info is not None else None
        if info is None or gpus is None:
            return
        over = tuple(i for i, used in enumerate(gpus.used) if used > MILLI)
        if not over or not self._all_bound(info):
            return
        self.generation += 1
        self._untotal(info)  # (the free totals count whole free devices)
        for other in self._move_guesses(info, gpus, over, ""):
            self._place_guess(other, info, gpus)
        self._total(info)
        self._reindex(info)

    def _all_bound(self, info: NodeInfo) -> bool:
        """No pod is assumed on the node: an over-commit there is the records', not a hold
        of this scheduler's (a preemptor assumed over its victims)."""
        return not any(uid in self.assumed for uid in info.pods)

    def take_conflicts(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """The device conflicts found since the last call (pod uid -> node, devices) of pods
        still counted where they were found: on that node, on those devices (a node whose
        devices changed since had its pods counted again, and any conflict then found anew)."""
        out = {
            uid: where
            for uid, where in self.conflicts.items()
            if self._counted_on.get(uid) == where[0]
            and (counted := self._devices.get(uid)) is not None
            and counted[0] == where[1]
        }
        self.conflicts.clear()
        return out

    def _recount_devices(self, info: NodeInfo) -> None:
        """A node's devices changed: count its pods again on the new devices, those with
        devices recorded that still exist first, then those planned on devices that still
        exist (running pods before assumed ones), then the rest."""
        for uid in info.pods:
            self._devices.pop(uid, None)
        node = info.node
        if node is None or not node.gpus:
            info.gpus = None
            return
        gpus = info.gpus = NodeGpus(node.gpus)
        pods = self.pods
        order: list[tuple[int, str]] = []
        for uid in info.pods:
            pod = pods.get(uid)
            if pod is None or _demand_of(pod) is None:
                continue
            planned = self._planned.get(uid)
            n = len(gpus.used)
            if pod.gpu_devices and all(0 <= i < n for i in pod.gpu_devices):
                rank = 0
            elif planned and planned[0] == info.name and all(0 <= i < n for i in planned[1]):
                rank = 1 if pod.node_name == info.name else 2
            else:
                rank = 3
            order.append((rank, uid))
        for _, uid in sorted(order):
            pod = pods[uid]
            demand = _demand_of(pod)
            assert demand is not None
            self._take_devices(uid, pod, info, gpus, demand)

    def _untotal(self, info: NodeInfo) -> None:
        if info.usable and info.node is not None:
            sub_into(self.total_allocatable, info.node.allocatable)
            sub_into(self.total_requested, info.requested)
            free = _free_of(info)
            sub_into(self._total_free, free)
            if self.domains.free:
                self.domains.sub(info.node.labels, free)

    def _total(self, info: NodeInfo) -> None:
        if info.usable and info.node is not None:
            add_into(self.total_allocatable, info.node.allocatable)
            add_into(self.total_requested, info.requested)
            free = _free_of(info)
            add_into(self._total_free, free)
            if self.domains.free:
                self.domains.add(info.node.labels, free)

    def _reindex(self, info: NodeInfo) -> None:
        info.version += 1
        name = info.name
        old = self._bucket_of.pop(name, None)
        if old is not None:
            bucket = self._gpu_buckets[old]
            del bucket[name]
            if not bucket:
                del self._gpu_buckets[old]
        old = self._share_of.pop(name, None)
        if old is not None:
            bucket = self._share_buckets[old]
            del bucket[name]
            if not bucket:
                del self._share_buckets[old]
        if not info.usable:
            return
        gpus = info.gpus
        if gpus is not None:
            used = gpus.used
            free = used.count(0)
            largest = MILLI - min(used)
            if largest > 0:
                self._share_buckets.setdefault(largest, {})[name] = None
                self._share_of[name] = largest
        elif info.allocatable(GPU) > 0:
            free = info.free(GPU)
        else:
            return
        if free > 0:
            self._gpu_buckets.setdefault(free, {})[name] = None
            self._bucket_of[name] = free


def _demand_of(pod: Pod) -> GpuDemand | None:
    """What a pod takes on devices: its GPU demand, or for a pod whose request could not be
    honoured (counted because it runs anyway), its whole ``nvidia.com/gpu``."""
    demand = pod.gpu
    if demand is None:
        whole = pod.requests.get(GPU, 0)
        if whole > 0:
            return GpuDemand(whole, MILLI)
    return demand


def _room(
    gpus: NodeGpus, devices: tuple[int, ...], count: int, milli: int, free: bool = True
) -> bool:
    """``devices`` are ``count`` devices of ``gpus``; distinct, with ``milli`` free on each,
    when ``free``."""
    if len(devices) != count:
        return False
    used = gpus.used
    n = len(used)
    limit = MILLI - milli if free else 1 << 62
    for i in devices:
        if not 0 <= i < n or used[i] > limit:
            return False
    return count < 2 or not free or len(set(devices)) == count


def _recorded(gpus: NodeGpus, devices: tuple[int, ...], count: int) -> bool:
    """A record that can stand on this node: ``count`` distinct devices that exist."""
    n = len(gpus.used)
    return len(devices) == count and all(0 <= i < n for i in devices) and len(set(devices)) == count


def _least_used(gpus: NodeGpus, count: int) -> tuple[int, ...]:
    """``count`` devices, each the least used once the previous ones are taken (a device
    repeats when the node has fewer): where a pod that fits nowhere is counted."""
    used = list(gpus.used)
    out: list[int] = []
    for _ in range(count):
        i = min(range(len(used)), key=lambda d: (used[d], d))
        used[i] += MILLI
        out.append(i)
    return tuple(sorted(out))


def _seq_of(entry: tuple[int, str]) -> int:
    return entry[0]


def _free_of(info: NodeInfo) -> ResourceList:
    """What a node has left per resource, never negative; GPUs bounded by its devices."""
    assert info.node is not None
    out: ResourceList = {k: v for k, v in info.left.items() if v > 0}
    gpus = info.gpus
    if gpus is not None:
        whole = gpus.used.count(0)
        if out.get(GPU, 0) > whole:
            if whole:
                out[GPU] = whole
            else:
                del out[GPU]
        percent = gpus.free_total() // 10
        for k in (KOORD_CORE, KOORD_RATIO):
            if out.get(k, 0) > percent:
                if percent:
                    out[k] = percent
                else:
                    del out[k]
    return out
