"""VolumeRestrictions: ReadWriteOncePod, with kube-scheduler v1.36's semantics
(``pkg/scheduler/framework/plugins/volumerestrictions``).

PreFilter (SKIP for a pod that mounts no claim) looks up each claim the pod mounts through a
``persistentVolumeClaim`` volume (generic ephemeral volumes are not looked at): a missing one
fails the pod on every node, unresolvable (``persistentvolumeclaim "data" not found``). When a
claim with the ReadWriteOncePod access mode is already used by a counted pod anywhere in the
cluster (bound, or reserved by gangsched: an earlier member of the same gang included), the
pod fails on every node, "node has pod using PersistentVolumeClaim with the same name and
ReadWriteOncePod access mode" (unschedulable: it may fit once that pod is gone). Otherwise
the plugin has nothing to check.

The in-tree disk conflicts of this plugin (GCE PD, AWS EBS, iSCSI, RBD inline volumes) never
arise: gangsched refuses pods with in-tree volume types.
"""

from __future__ import annotations

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import SKIP, SUCCESS, Code, CycleState, Status
from gangsched.core.model import Pod
from gangsched.core.volumes import READ_WRITE_ONCE_POD

__all__ = ["VolumeRestrictions"]

RWOP_CONFLICT = Status(
    Code.UNSCHEDULABLE,
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode",
)


class VolumeRestrictions:
    name: str = "VolumeRestrictions"
    static: bool = False

    def __init__(self, cache: ClusterCache) -> None:
        self._catalog = cache.volumes

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        vols = pod.volumes
        if not vols.claims:
            return SKIP
        catalog = self._catalog
        ns = pod.namespace
        conflicts = 0
        for name in dict.fromkeys(vols.claims):
            if name in vols.ephemeral:
                continue
            claim = catalog.claims.get(f"{ns}/{name}")
            if claim is None:
                return Status(Code.UNRESOLVABLE, f'persistentvolumeclaim "{name}" not found')
            if READ_WRITE_ONCE_POD in claim.access_modes and catalog.claim_in_use(ns, name):
                conflicts += 1
        return SUCCESS if conflicts else SKIP

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        return RWOP_CONFLICT
