"""The DRA watches into the core (kube/dra.py): only a pool's newest generation counts; an
unreadable slice adds no devices; unreadable claims and classes are known to the core as
refused, with the field; deletes take everything back."""

from __future__ import annotations

from typing import Any

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.scheduler import Scheduler
from gangsched.kube.dra import DraWatch

DRIVER = "gpu.example.com"


def _slice(name: str, node: str, generation: int, gpus: int, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}"} for i in range(gpus)],
            **extra,
        },
    }


def rig() -> tuple[Scheduler, DraWatch]:
    core = Scheduler(CoreConfig(), FakeClock())
    return core, DraWatch(core)


def names(core: Scheduler, node: str) -> list[str]:
    return [d.id.name for d in core.cache.resource_claims.devices(node)]


def test_only_the_newest_generation_of_a_pool_counts() -> None:
    core, dra = rig()
    dra._slice_upsert(_slice("a", "n1", 1, 2))
    assert names(core, "n1") == ["gpu-0", "gpu-1"]
    dra._slice_upsert(_slice("b", "n1", 2, 3))  # the driver republishes the pool
    assert names(core, "n1") == ["gpu-0", "gpu-1", "gpu-2"]
    dra._slice_delete("b")  # (a driver would delete the old one; here the old one is back)
    assert names(core, "n1") == ["gpu-0", "gpu-1"]
    dra._slice_delete("a")
    assert names(core, "n1") == []


def test_an_unreadable_slice_adds_no_devices_and_is_remembered_with_the_field() -> None:
    core, dra = rig()
    dra._slice_upsert(_slice("a", "n1", 1, 2))
    dra._slice_upsert(_slice("a", "n1", 1, 2, perDeviceNodeSelection=True))
    assert names(core, "n1") == []
    assert "perDeviceNodeSelection" in dra.refused["ResourceSlice/a"]
    dra._slice_upsert(_slice("a", "n1", 1, 1))
    assert names(core, "n1") == ["gpu-0"] and dra.refused == {}


def test_unreadable_claims_and_classes_are_refused_by_name_in_the_core() -> None:
    core, dra = rig()
    claim = {
        "metadata": {"name": "c", "namespace": "ml", "uid": "u"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}],
                "config": [{}],
            }
        },
    }
    dra._claim_upsert(claim)
    catalog = core.cache.resource_claims
    assert "spec.devices.config[0].opaque" in catalog.refused_claims["ml/c"]
    assert dra.claims["ml/c"] is claim  # kept as seen, for the writer
    dra._claim_delete("ml/c")
    assert catalog.refused_claims == {} and dra.claims == {}
    dra._class_upsert({"metadata": {"name": "gpu"}, "spec": {"config": [{}]}})
    assert "spec.config" in catalog.refused_classes["gpu"]
    dra._class_upsert({"metadata": {"name": "gpu"}, "spec": {}})
    assert catalog.refused_classes == {} and "gpu" in catalog.classes
