"""A pod's volumes (gangsched.api.volumes), table-driven."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.pod import pod_from
from gangsched.core.model import PodVolumes
from tests.api.objects import POD, patched

VOLUME_CASES: dict[str, tuple[list[dict[str, Any]], PodVolumes]] = {
    "claims": (
        [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data-0"}},
            {"name": "ckpt", "persistentVolumeClaim": {"claimName": "ckpt", "readOnly": True}},
        ],
        PodVolumes(("data-0", "ckpt")),
    ),
    "generic ephemeral volume: the claim <pod>-<volume>": (
        [
            {
                "name": "scratch",
                "ephemeral": {
                    "volumeClaimTemplate": {
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "storageClassName": "local",
                            "resources": {"requests": {"storage": "1Gi"}},
                        }
                    }
                },
            }
        ],
        PodVolumes(("train-worker-0-scratch",), (), ("train-worker-0-scratch",)),
    ),
    "inline CSI volumes": (
        [
            {"name": "secrets", "csi": {"driver": "secrets-store.csi.k8s.io", "readOnly": True}},
            {"name": "cache", "csi": {"driver": "local.csi.example.com"}},
        ],
        PodVolumes((), ("secrets-store.csi.k8s.io", "local.csi.example.com")),
    ),
    "volumes the scheduler does not look at": (
        [
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "shm", "emptyDir": {"medium": "Memory"}},
            {"name": "host", "hostPath": {"path": "/dev/infiniband", "type": ""}},
            {"name": "tok", "projected": {"sources": []}},
            {"name": "nfs", "nfs": {"server": "nfs.example.com", "path": "/data"}},
        ],
        PodVolumes(),
    ),
    "a mix": (
        [
            {"name": "cfg", "configMap": {"name": "cfg"}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "tmp", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "s", "csi": {"driver": "d"}},
        ],
        PodVolumes(("data", "train-worker-0-tmp"), ("d",), ("train-worker-0-tmp",)),
    ),
    "none": ([], PodVolumes()),
}


@pytest.mark.parametrize("case", VOLUME_CASES.values(), ids=VOLUME_CASES.keys())
def test_pod_volumes(case: tuple[list[dict[str, Any]], PodVolumes]) -> None:
    volumes, expected = case
    pod, _ = pod_from(patched(POD, (("spec", "volumes"), volumes)))
    assert (pod.invalid_reason, pod.unsupported) == ("", "")
    assert pod.volumes == expected
