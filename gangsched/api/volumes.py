"""A pod's volumes (``spec.volumes``): the claims it mounts (persistent and generic ephemeral)
and the CSI drivers of its inline CSI volumes; inline in-tree volumes that kube-scheduler
checks and gangsched does not are named as unsupported."""

from __future__ import annotations

from gangsched.api.fields import Obj, as_list, as_map, nonempty_str
from gangsched.core.model import PodVolumes

__all__ = ["pod_volumes"]


# Inline (in-tree) volume sources kube-scheduler v1.36 acts on that gangsched does not: the
# ones VolumeRestrictions checks for conflicts between pods on a node, and the ones
# NodeVolumeLimits counts against a node's CSI attach limits through CSI migration
# (k8s.io/csi-translation-lib). Volumes through a PersistentVolumeClaim are read instead.
_IN_TREE_VOLUMES: dict[str, str] = {
    "gcePersistentDisk": "conflicts between pods (VolumeRestrictions) and attach limits",
    "awsElasticBlockStore": "conflicts between pods (VolumeRestrictions) and attach limits",
    "rbd": "conflicts between pods (VolumeRestrictions)",
    "iscsi": "conflicts between pods (VolumeRestrictions)",
    "azureDisk": "attach limits",
    "azureFile": "attach limits",
    "cinder": "attach limits",
    "vsphereVolume": "attach limits",
    "portworxVolume": "attach limits",
}


def pod_volumes(spec: Obj, pod_name: str, unsupported: list[str]) -> PodVolumes:
    claims: list[str] = []
    drivers: list[str] = []
    ephemeral: list[str] = []
    for i, v in enumerate(as_list(spec.get("volumes"), "spec.volumes")):
        field = f"spec.volumes[{i}]"
        v = as_map(v, field)
        if v.get("persistentVolumeClaim") is not None:
            pvc = as_map(v["persistentVolumeClaim"], f"{field}.persistentVolumeClaim")
            claims.append(
                nonempty_str(pvc.get("claimName"), f"{field}.persistentVolumeClaim.claimName")
            )
        if v.get("ephemeral") is not None:
            as_map(v["ephemeral"], f"{field}.ephemeral")
            claim = f"{pod_name}-{nonempty_str(v.get('name'), f'{field}.name')}"
            claims.append(claim)
            ephemeral.append(claim)
        if v.get("csi") is not None:
            csi = as_map(v["csi"], f"{field}.csi")
            drivers.append(nonempty_str(csi.get("driver"), f"{field}.csi.driver"))
        for source, checks in _IN_TREE_VOLUMES.items():
            if v.get(source) is not None:
                unsupported.append(
                    f"{field}.{source}: inline {source} volumes are not supported by gangsched "
                    f"(kube-scheduler checks their {checks} per node); use a "
                    "PersistentVolumeClaim"
                )
    return PodVolumes(tuple(claims), tuple(drivers), tuple(ephemeral))
