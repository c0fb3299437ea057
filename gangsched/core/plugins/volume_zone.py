"""VolumeZone: the zone and region labels of bound PersistentVolumes, with kube-scheduler
v1.36's semantics (``pkg/scheduler/framework/plugins/volumezone``).

PreFilter (SKIP for a pod that mounts no claim) reads, for each claim the pod mounts through
a ``persistentVolumeClaim`` volume, the bound volume's labels among
``failure-domain.beta.kubernetes.io/zone``, ``failure-domain.beta.kubernetes.io/region``,
``topology.kubernetes.io/zone`` and ``topology.kubernetes.io/region`` (a value may list
several zones separated by ``__``; a value with an empty element is ignored). An unbound
claim of a WaitForFirstConsumer class is skipped; a missing claim, class or volume, or an
unbound claim of another class, fails the pod on every node, unresolvable, with
kube-scheduler's message. SKIP when no volume carries such a label.

Filter: a node with none of those four labels passes (a single-zone cluster); otherwise, for
every volume label, the node's value for that key (or, for a beta key the node lacks, for its
GA key) must be one of the volume's values, else "node(s) had no available volume zone"
(unresolvable).
"""

from __future__ import annotations

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import SKIP, SUCCESS, Code, CycleState, Status
from gangsched.core.model import Pod
from gangsched.core.plugins._common import NODE_NOT_FOUND
from gangsched.core.volumes import WAIT_FOR_FIRST_CONSUMER, PersistentVolume

__all__ = ["VolumeZone", "volume_topologies"]

NAME = "VolumeZone"
_KEY = "PreFilter" + NAME
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}

CONFLICT = Status(Code.UNRESOLVABLE, "node(s) had no available volume zone")

Topology = tuple[str, frozenset[str]]


def volume_topologies(pv: PersistentVolume) -> list[Topology]:
    """The (label key, zones) pairs a volume's topology labels ask for."""
    out: list[Topology] = []
    for key in TOPOLOGY_LABELS:
        value = pv.labels.get(key)
        if value is None:
            continue
        zones = [z.strip() for z in value.split("__")]
        if any(not z for z in zones):
            continue
        out.append((key, frozenset(zones)))
    return out


def _unresolvable(message: str) -> Status:
    return Status(Code.UNRESOLVABLE, message)


class VolumeZone:
    name: str = NAME
    static: bool = False

    def __init__(self, cache: ClusterCache) -> None:
        self._catalog = cache.volumes

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        vols = pod.volumes
        if not vols.claims:
            return SKIP
        catalog = self._catalog
        topologies: list[Topology] = []
        for name in vols.claims:
            if name in vols.ephemeral:
                continue
            claim = catalog.claims.get(f"{pod.namespace}/{name}")
            if claim is None:
                return _unresolvable(f'persistentvolumeclaim "{name}" not found')
            if not claim.volume_name:
                cls = claim.storage_class
                if not cls:
                    return _unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name"
                    )
                sc = catalog.classes.get(cls)
                if sc is None:
                    return _unresolvable(f'storageclass.storage.k8s.io "{cls}" not found')
                if sc.binding_mode == WAIT_FOR_FIRST_CONSUMER:
                    continue
                return _unresolvable("PersistentVolume had no name")
            pv = catalog.volumes.get(claim.volume_name)
            if pv is None:
                return _unresolvable(f'persistentvolume "{claim.volume_name}" not found')
            topologies.extend(volume_topologies(pv))
        if not topologies:
            return SKIP
        state.write(_KEY, topologies)
        return SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        labels = n.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return SUCCESS
        topologies = state.read(_KEY)
        assert isinstance(topologies, list)
        for key, zones in topologies:
            value = labels.get(key)
            if value is None:
                value = labels.get(_GA.get(key, key))
            if value is None or value not in zones:
                return CONFLICT
        return SUCCESS
