"""VolumeBinding: the pod's PersistentVolumeClaims, with kube-scheduler v1.36's semantics
(``pkg/scheduler/framework/plugins/volumebinding``).

PreFilter (SKIP for a pod that mounts no claim, the hot path of GPU gangs) fails the pod on
every node, unresolvable, when a claim is missing (``persistentvolumeclaim "data" not found``,
or for a generic ephemeral volume ``waiting for ephemeral volume controller to create the
persistentvolumeclaim "..."``), lost, being deleted, not owned by the pod it is the ephemeral
volume of, or when a claim is unbound and not of a WaitForFirstConsumer class ("pod has
unbound immediate PersistentVolumeClaims"): the PV controller binds those, not the scheduler.

Filter, per node (unresolvable, kube-scheduler's reasons):

- a bound claim's PersistentVolume must exist ("node(s) unavailable due to one or more pvc(s)
  bound to non-existent pv(s)") and its required node affinity must match the node's labels
  ("node(s) didn't match PersistentVolume's node affinity");
- an unbound WaitForFirstConsumer claim already given a node (``selected-node``) must be on
  that node; otherwise a static volume pre-bound to it, or the smallest available one of its
  class that fits it (size, access modes, volume mode, volume attributes class, selector) and
  whose node affinity matches the node, is taken, never one taken by another claim of the pod
  or assumed by a pod placed before; a claim left over must be provisionable there (its class
  has a provisioner other than ``kubernetes.io/no-provisioner``, and ``allowedTopologies``
  allow the node). Else "node(s) didn't find available persistent volumes to bind".

What is chosen on the node the pod is placed on is assumed in the volume catalog when the pod
is reserved, and written by the adapter only when the whole gang is committed (``BindGang``).
Storage capacity (CSIStorageCapacity) is not checked and the plugin does not score.
"""

from __future__ import annotations

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import SKIP, SUCCESS, Code, CycleState, Status
from gangsched.core.model import Pod
from gangsched.core.plugins._common import NODE_NOT_FOUND
from gangsched.core.volumes import PodClaims

__all__ = ["VolumeBinding"]

NAME = "VolumeBinding"


class VolumeBinding:
    name: str = NAME
    static: bool = False

    def __init__(self, cache: ClusterCache) -> None:
        self._catalog = cache.volumes

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        if not pod.volumes.claims:
            return SKIP
        pc, why = self._catalog.pod_claims(pod)
        if why:
            return Status(Code.UNRESOLVABLE, why)
        if not pc.bound and not pc.delayed:
            return SKIP
        state.write(NAME, pc)
        return SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        pc = state.read(NAME)
        assert isinstance(pc, PodClaims)
        _, reason = self._catalog.find(pc, n.name, n.labels)
        if reason:
            return Status(Code.UNRESOLVABLE, reason)
        return SUCCESS
