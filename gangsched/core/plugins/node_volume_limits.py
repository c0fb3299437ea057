"""NodeVolumeLimits: per-node attachable-volume limits of CSI drivers, with kube-scheduler
v1.36's semantics (``pkg/scheduler/framework/plugins/nodevolumelimits``, CSILimits).

PreFilter: SKIP for a pod that mounts no claim (inline CSI volumes are not counted, as in
kube-scheduler); otherwise it works out once which attachable volumes the pod brings, each
named ``driver/handle``:

- a claim bound to a CSI PersistentVolume: the volume's driver and handle;
- a claim not bound yet, or whose volume is unknown: its class's provisioner, with a handle
  unique to the claim (an unbound claim shared by pods on a node counts once); none for a
  claim without a known class;
- volumes of in-tree plugins are not counted (gangsched refuses in-tree volume types, and
  does not translate in-tree PersistentVolumes to CSI).

Filter: when the node's CSINode publishes an ``allocatable.count`` for a driver the pod
brings new volumes of, the volumes already attached there (those of the pods counted on the
node: bound, or reserved by gangsched, earlier members of the gang included; a volume shared
with them is not new) plus the pod's new ones must not exceed it, else "node(s) exceed max
volume count" (unschedulable). A node without a CSINode, or without limits, passes. A missing
claim fails unresolvable (``looking up PVC ns/name: persistentvolumeclaim "name" not found``).
VolumeAttachments of volumes no counted pod uses are not counted (gangsched does not watch
them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import SKIP, SUCCESS, Code, CycleState, Status
from gangsched.core.model import Pod
from gangsched.core.plugins._common import NODE_NOT_FOUND
from gangsched.core.volumes import Claim, VolumeCatalog

__all__ = ["NodeVolumeLimits", "attachable_volumes"]

NAME = "NodeVolumeLimits"
_KEY = "PreFilter" + NAME
EXCEEDED = Status(Code.UNSCHEDULABLE, "node(s) exceed max volume count")
# Handles of claims not bound yet: never equal to a real volume handle.
_UNBOUND = "\x00unbound-"


@dataclass(frozen=True, slots=True)
class _NewVolumes:
    """PreFilter's result: the pod's attachable volumes, or why they could not be read."""

    volumes: dict[str, str]
    status: Status


def _driver_info(catalog: VolumeCatalog, claim: Claim) -> tuple[str, str]:
    """(driver, handle) of the volume a claim stands for, or ('', '') when not counted."""
    if claim.volume_name:
        pv = catalog.volumes.get(claim.volume_name)
        if pv is not None:
            return pv.csi_driver, pv.csi_handle
    if not claim.storage_class:
        return "", ""
    sc = catalog.classes.get(claim.storage_class)
    if sc is None or not sc.provisioner or sc.provisioner.startswith("kubernetes.io/"):
        return "", ""
    return sc.provisioner, f"{_UNBOUND}{claim.namespace}/{claim.name}"


def attachable_volumes(
    catalog: VolumeCatalog, pod: Pod, out: dict[str, str], new_pod: bool
) -> Status:
    """Add the pod's attachable volumes to ``out`` (unique name -> driver). A claim that
    cannot be found stops a new pod (it can never run without it) and is skipped for a pod
    already placed."""
    vols = pod.volumes
    ns = pod.namespace
    for name in vols.claims:
        claim = catalog.claims.get(f"{ns}/{name}")
        if claim is None:
            if new_pod:
                return Status(
                    Code.UNRESOLVABLE,
                    f'looking up PVC {ns}/{name}: persistentvolumeclaim "{name}" not found',
                )
            continue
        if name in vols.ephemeral and claim.owner_uid != pod.uid:
            return Status(
                Code.ERROR,
                f"PVC {ns}/{name} was not created for pod {ns}/{pod.name} (pod is not owner)",
            )
        driver, handle = _driver_info(catalog, claim)
        if driver and handle:
            out[f"{driver}/{handle}"] = driver
    return SUCCESS


class NodeVolumeLimits:
    name: str = NAME
    static: bool = False

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._catalog = cache.volumes

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        if not pod.volumes.claims:
            return SKIP
        new: dict[str, str] = {}
        status = attachable_volumes(self._catalog, pod, new, new_pod=True)
        state.write(_KEY, _NewVolumes(new, status))
        return SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        saved = state.read(_KEY)
        assert isinstance(saved, _NewVolumes)
        if not saved.status.ok:
            return saved.status
        new = saved.volumes
        if not new:
            return SUCCESS
        csi = self._catalog.csi_nodes.get(n.name)
        if csi is None or not csi.limits:
            return SUCCESS
        attached: dict[str, str] = {}
        pods = self._cache.pods
        for uid in node.pods:
            other = pods.get(uid)
            if other is None or not other.volumes.claims:
                continue
            status = attachable_volumes(self._catalog, other, attached, new_pod=False)
            if not status.ok:
                return status
        in_use: Counter[str] = Counter(attached.values())
        adding: Counter[str] = Counter(d for u, d in new.items() if u not in attached)
        for driver, count in adding.items():
            limit = csi.limits.get(driver)
            if limit is not None and in_use[driver] + count > limit:
                return EXCEEDED
        return SUCCESS
