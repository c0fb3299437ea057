"""DRA objects (gangsched.api.dra) as NVIDIA's DRA driver and kube-scheduler write them: what is
read, what is refused naming the field, and hostile input, which never raises."""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

import pytest

from gangsched.api.dra import (
    DraError,
    ResourceSlice,
    device_class_from,
    resource_claim_from,
    resource_slice_from,
)
from gangsched.core.claimalloc import reaches, serves
from gangsched.core.resourceclaims import (
    AllocationMode,
    Claim,
    ClaimAllocation,
    DeviceClass,
    DeviceId,
    MatchAttribute,
    Version,
)

NV = "gpu.nvidia.com"
GI = 2**30

DEVICE_CLASS: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "gpu.nvidia.com"},
    "spec": {
        "selectors": [
            {
                "cel": {
                    "expression": "device.driver == 'gpu.nvidia.com' && "
                    "device.attributes['gpu.nvidia.com'].type == 'gpu'"
                }
            }
        ]
    },
}


def _gpu(i: int) -> dict[str, Any]:
    return {
        "name": f"gpu-{i}",
        "attributes": {
            "type": {"string": "gpu"},
            "productName": {"string": "NVIDIA A100-SXM4-40GB"},
            "architecture": {"string": "Ampere"},
            "brand": {"string": "Nvidia"},
            "index": {"int": i},
            "uuid": {"string": f"GPU-4b7f3a9c-0000-1111-2222-33334444555{i}"},
            "driverVersion": {"version": "550.54.15"},
            "cudaComputeCapability": {"version": "8.0.0"},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:00"},
        },
        "capacity": {"memory": {"value": "40Gi"}},
    }


SLICE: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceSlice",
    "metadata": {"name": "node-a-gpu.nvidia.com-x7k2p"},
    "spec": {
        "driver": NV,
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 3, "resourceSliceCount": 1},
        "devices": [_gpu(0), _gpu(1)],
    },
}

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "train-0-gpus", "namespace": "ml", "uid": "c1a1"},
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "selectors": [
                            {
                                "cel": {
                                    "expression": "device.capacity['gpu.nvidia.com'].memory"
                                    ".compareTo(quantity('40Gi')) >= 0"
                                }
                            }
                        ],
                        "allocationMode": "ExactCount",
                        "count": 2,
                    },
                },
                {
                    "name": "nic",
                    "firstAvailable": [
                        {"name": "fast", "deviceClassName": "rdma", "count": 1},
                        {"name": "any", "deviceClassName": "nic", "allocationMode": "All"},
                    ],
                },
            ],
            "constraints": [
                {"requests": ["gpus"], "matchAttribute": "resource.kubernetes.io/pcieRoot"}
            ],
        }
    },
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {"request": "gpus", "driver": NV, "pool": "node-a", "device": "gpu-0"},
                    {"request": "gpus", "driver": NV, "pool": "node-a", "device": "gpu-1"},
                    {
                        "request": "nic/any",
                        "driver": "nic.example.com",
                        "pool": "node-a",
                        "device": "eth1",
                    },
                ]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["node-a"]}
                        ]
                    }
                ]
            },
        },
        "reservedFor": [{"resource": "pods", "name": "train-0", "uid": "p0"}],
    },
}


def patched(obj: dict[str, Any], path: str, value: object) -> dict[str, Any]:
    """A copy with ``value`` at ``path`` (dots; ``[i]`` for list items); ``...`` deletes."""
    out = copy.deepcopy(obj)
    node: Any = out
    parts = path.replace("[", ".[").split(".")
    for p in parts[:-1]:
        node = node[int(p[1:-1])] if p.startswith("[") else node.setdefault(p, {})
    last = parts[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if value is ...:
        del node[key]
    else:
        node[key] = value
    return out


def error(result: object) -> str:
    assert isinstance(result, DraError), result
    return result.reason


# ---- DeviceClass ----------------------------------------------------------------------------
def test_device_class() -> None:
    dc = device_class_from(DEVICE_CLASS)
    assert isinstance(dc, DeviceClass)
    assert dc.name == "gpu.nvidia.com"
    assert [s.expression for s in dc.selectors] == [
        DEVICE_CLASS["spec"]["selectors"][0]["cel"]["expression"]
    ]


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.config", [{"opaque": {"driver": NV}}], "spec.config[0].opaque.parameters"),
        ("spec.config", [{"requests": []}], "spec.config[0].opaque: expected an object"),
        ("spec.config", [{"opaque": {"parameters": {}}}], "spec.config[0].opaque.driver"),
        (
            "spec.selectors[0].cel.expression",
            "lowerAscii(device.driver) == 'x'",
            "spec.selectors[0].cel.expression: function lowerAscii is not supported",
        ),
        ("spec.selectors[0].cel.expression", "device.driver ==", "cannot parse"),
        (
            "spec.selectors[0].cel.expression",
            7,
            "spec.selectors[0].cel.expression: expected a string",
        ),
        ("spec.selectors[0].cel", ..., "spec.selectors[0].cel: expected an object"),
        ("spec.selectors", "all", "spec.selectors: expected a list"),
        ("metadata.name", ..., "metadata.name: expected a non-empty string"),
    ],
)
def test_device_class_refused(path: str, value: object, message: str) -> None:
    assert message in error(device_class_from(patched(DEVICE_CLASS, path, value)))


# ---- ResourceSlice --------------------------------------------------------------------------
def test_resource_slice() -> None:
    s = resource_slice_from(SLICE)
    assert isinstance(s, ResourceSlice)
    assert (s.name, s.driver, s.pool, s.generation, s.slice_count, s.node) == (
        "node-a-gpu.nvidia.com-x7k2p",
        NV,
        "node-a",
        3,
        1,
        "node-a",
    )
    d = s.devices[1]
    assert d.id == DeviceId(NV, "node-a", "gpu-1")
    assert d.node == "node-a"
    assert d.attributes[f"{NV}/productName"] == "NVIDIA A100-SXM4-40GB"
    assert d.attributes[f"{NV}/index"] == 1
    assert d.attributes["resource.kubernetes.io/pcieRoot"] == "pci0000:00"
    version = d.attributes[f"{NV}/driverVersion"]
    assert isinstance(version, Version)
    assert version == "550.54.15"
    assert d.capacity == {f"{NV}/memory": 40 * GI}


def test_the_class_selects_the_slices_devices() -> None:
    dc = device_class_from(DEVICE_CLASS)
    s = resource_slice_from(SLICE)
    assert isinstance(dc, DeviceClass)
    assert isinstance(s, ResourceSlice)
    assert all(sel.matches(d) for sel in dc.selectors for d in s.devices)


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.nodeName", ..., "spec: one of nodeName, nodeSelector, allNodes, perDeviceNode"),
        ("spec.nodeName", 7, "spec.nodeName: expected a non-empty string"),
        ("spec.allNodes", True, "spec: only one of nodeName, allNodes may be set"),
        ("spec.allNodes", "yes", "spec: only one of nodeName, allNodes may be set"),
        ("spec.nodeSelector", {"nodeSelectorTerms": []}, "only one of nodeName, nodeSelector"),
        (
            "spec.sharedCounters",
            [{"name": "c", "counters": {"memory": {"value": "40Gi"}}}],
            "spec: only one of devices and sharedCounters may be set",
        ),
        ("spec.perDeviceNodeSelection", True, "spec: only one of nodeName, nodeSelector"),
        ("spec.driver", "", "spec.driver: expected a non-empty string"),
        ("spec.pool.name", None, "spec.pool.name: expected a non-empty string"),
        ("spec.pool.generation", -1, "spec.pool.generation: must be >= 0"),
        (
            "spec.devices[0].taints",
            [{"key": "k", "effect": "Sometimes"}],
            "spec.devices[0].taints[0].effect: must be one of NoSchedule, NoExecute, None",
        ),
        (
            "spec.devices[0].consumesCounters",
            [{"counters": {"memory": {"value": "1Gi"}}}],
            "spec.devices[0].consumesCounters[0].counterSet: expected a non-empty string",
        ),
        (
            "spec.devices[0].consumesCounters",
            [{"counterSet": "s", "counters": {"memory": {"value": "-1"}}}],
            "consumesCounters[0].counters['memory'].value: must not be negative",
        ),
        ("spec.devices[0].nodeName", "node-b", "nodeName: only with spec.perDeviceNodeSelection"),
        (
            "spec.devices[0].allowMultipleAllocations",
            "yes",
            "allowMultipleAllocations: expected a boolean",
        ),
        (
            "spec.devices[0].capacity.memory.requestPolicy",
            {"validValues": ["2Gi", "1Gi"]},
            "requestPolicy.validValues: must be in ascending order",
        ),
        (
            "spec.devices[0].capacity.memory.requestPolicy",
            {"validRange": {"min": "1Gi", "step": "0"}},
            "requestPolicy.validRange.step: must be positive",
        ),
        (
            "spec.devices[0].capacity.memory.requestPolicy",
            {"validRange": {"max": "1Gi"}},
            "requestPolicy.validRange.min: required",
        ),
        ("spec.devices[0].capacity.memory.value", "1.5", "a fraction is not supported yet"),
        (
            "spec.devices[0].capacity.memory.value",
            "lots",
            "spec.devices[0].capacity['memory'].value",
        ),
        ("spec.devices[0].attributes.index", {"int": 2**63}, "attributes['index'].int: must be <="),
        (
            "spec.devices[0].attributes.index",
            {"int": "0"},
            "attributes['index'].int: expected an integer",
        ),
        ("spec.devices[0].attributes.index", {"int": 1, "string": "1"}, "expected exactly one of"),
        ("spec.devices[0].attributes.index", {}, "expected exactly one of"),
        (
            "spec.devices[0].attributes.brand",
            {"bool": "yes"},
            "attributes['brand'].bool: expected a boolean",
        ),
        (
            "spec.devices[0].attributes.driverVersion",
            {"version": "550.54"},
            "not a semantic version",
        ),
        (
            "spec.devices[0].attributes.type",
            {"string": 5},
            "attributes['type'].string: expected a string",
        ),
        ("spec.devices[0].attributes.a/b/c", {"string": "x"}, "expected <name> or <domain>/<name>"),
        ("spec.devices[0].name", "gpu-1", "device 'gpu-1' is listed twice"),
        ("spec.devices[0]", None, "spec.devices[0]: expected an object, got null"),
        ("spec.devices", {"gpu-0": {}}, "spec.devices: expected a list"),
    ],
)
def test_resource_slice_refused(path: str, value: object, message: str) -> None:
    assert message in error(resource_slice_from(patched(SLICE, path, value)))


# ---- ResourceClaim --------------------------------------------------------------------------
def test_resource_claim() -> None:
    c = resource_claim_from(CLAIM)
    assert isinstance(c, Claim)
    assert (c.key, c.uid) == ("ml/train-0-gpus", "c1a1")
    gpus, nic = c.requests
    assert gpus.name == "gpus" and gpus.exactly is not None
    assert (gpus.exactly.device_class, gpus.exactly.mode, gpus.exactly.count) == (
        "gpu.nvidia.com",
        AllocationMode.EXACT_COUNT,
        2,
    )
    assert len(gpus.exactly.selectors) == 1
    assert [(n, r.device_class, r.mode) for n, r in nic.first_available] == [
        ("fast", "rdma", AllocationMode.EXACT_COUNT),
        ("any", "nic", AllocationMode.ALL),
    ]
    assert c.constraints == (MatchAttribute("resource.kubernetes.io/pcieRoot", ("gpus",)),)
    assert c.allocation == ClaimAllocation(
        "node-a",
        (
            ("gpus", DeviceId(NV, "node-a", "gpu-0")),
            ("gpus", DeviceId(NV, "node-a", "gpu-1")),
            ("nic/any", DeviceId("nic.example.com", "node-a", "eth1")),
        ),
    )
    assert c.reserved_for == ("p0",)


def test_a_claim_not_allocated_yet() -> None:
    c = resource_claim_from(patched(CLAIM, "status", ...))
    assert isinstance(c, Claim)
    assert c.allocation is None and c.reserved_for == ()


def test_admin_access_and_the_hostname_label() -> None:
    c = resource_claim_from(
        patched(
            patched(CLAIM, "spec.devices.requests[0].exactly.adminAccess", True),
            "status.allocation.nodeSelector.nodeSelectorTerms",
            [
                {
                    "matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b"]}
                    ]
                }
            ],
        )
    )
    assert isinstance(c, Claim)
    assert c.requests[0].exactly is not None and c.requests[0].exactly.admin_access
    assert c.allocation is not None and c.allocation.node == "node-b"


R0 = "spec.devices.requests[0]"
R1 = "spec.devices.requests[1]"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        (
            "spec.devices.config",
            [{"requests": ["nope"], "opaque": {"driver": NV, "parameters": {}}}],
            "spec.devices.config[0].requests[0]: no request 'nope'",
        ),
        (
            "spec.devices.config",
            [{"opaque": {"driver": NV, "parameters": "sharing"}}],
            "spec.devices.config[0].opaque.parameters: expected an object",
        ),
        (
            f"{R0}.exactly.tolerations",
            [{"operator": "Near"}],
            f"{R0}.exactly.tolerations[0].operator: must be Equal or Exists",
        ),
        (
            f"{R0}.exactly.capacity",
            {"requests": {"memory": "lots"}},
            f"{R0}.exactly.capacity.requests['memory']",
        ),
        (
            f"{R1}.firstAvailable[0].tolerations",
            [{"effect": "Later"}],
            f"{R1}.firstAvailable[0].tolerations[0].effect: must be one of",
        ),
        (
            "spec.devices.constraints[0].distinctAttribute",
            "gpu.nvidia.com/uuid",
            "expected exactly one of matchAttribute, distinctAttribute",
        ),
        (
            f"{R0}.exactly.selectors[0].cel.expression",
            "semver('1.0.0').major() == ip('x')",
            f"{R0}.exactly.selectors[0].cel.expression: function ip is not supported",
        ),
        (f"{R0}.exactly.count", 0, f"{R0}.exactly.count: must be >= 1"),
        (f"{R0}.exactly.count", 10**30, f"{R0}.exactly.count: must be <= 32"),
        (f"{R0}.exactly.count", "2", f"{R0}.exactly.count: expected an integer"),
        (f"{R0}.exactly.allocationMode", "Some", "allocationMode: must be ExactCount or All"),
        (f"{R0}.exactly.adminAccess", "yes", "adminAccess: expected a boolean"),
        (f"{R1}.firstAvailable[0].adminAccess", True, "not allowed in a sub-request"),
        (f"{R1}.firstAvailable[1].count", 3, "count: must not be set with allocationMode All"),
        (f"{R1}.firstAvailable[1].name", "fast", "'fast' is used twice"),
        (f"{R1}.firstAvailable", [], f"{R1}.firstAvailable: expected at least one"),
        (
            f"{R1}.exactly",
            {"deviceClassName": "x"},
            "expected exactly one of exactly, firstAvailable",
        ),
        (f"{R0}.exactly", ..., "expected exactly one of exactly, firstAvailable"),
        (f"{R0}.exactly.deviceClassName", None, "deviceClassName: expected a non-empty string"),
        (f"{R1}.name", "gpus", "'gpus' is used twice"),
        ("spec.devices.constraints[0].requests", ["gpu"], "no request 'gpu'"),
        ("spec.devices.constraints[0].matchAttribute", "pcieRoot", "expected <domain>/<name>"),
        (
            "status.allocation.nodeSelector.nodeSelectorTerms",
            [{"matchFields": []}, {"matchFields": []}],
            "nodeSelectorTerms: 2 terms: not supported yet",
        ),
        (
            "status.allocation.devices.results[0].device",
            5,
            "results[0].device: expected a non-empty",
        ),
        ("status.reservedFor[0].uid", None, "status.reservedFor[0].uid"),
        ("spec.devices.requests", {"gpus": {}}, "spec.devices.requests: expected a list"),
    ],
)
def test_resource_claim_refused(path: str, value: object, message: str) -> None:
    result = resource_claim_from(patched(CLAIM, path, value))
    assert message in error(result)
    assert isinstance(result, DraError) and result.key == "ml/train-0-gpus"


def test_a_request_for_a_sub_request_may_be_constrained() -> None:
    c = resource_claim_from(patched(CLAIM, "spec.devices.constraints[0].requests", ["nic/fast"]))
    assert isinstance(c, Claim)


# ---- hostile input ----------------------------------------------------------------------------
HOSTILE: list[object] = [
    None,
    [],
    "ResourceClaim",
    10**5000,
    {"metadata": []},
    {"metadata": {"name": ["x"]}},
    {"metadata": {"name": "x"}, "spec": "everything"},
    {"metadata": {"name": "x"}, "spec": {"devices": {"requests": [None, 5, "x"]}}},
    {"metadata": {"name": "x"}, "spec": {"devices": [{"name": "d"}]}},
    {"metadata": {"name": "x"}, "status": {"allocation": []}},
    {
        "metadata": {"name": "x"},
        "spec": {
            "driver": NV,
            "nodeName": "n",
            "pool": {"name": "p"},
            "devices": [{"name": "d", "attributes": {"a": None}}],
        },
    },
    {
        "metadata": {"name": "x"},
        "spec": {
            "driver": NV,
            "nodeName": "n",
            "pool": {"name": "p"},
            "devices": [{"name": "d", "capacity": {"m": {"value": "9" * 10_000}}}],
        },
    },
    {"metadata": {"name": "x"}, "spec": {"selectors": [{"cel": {"expression": "(" * 5000}}]}},
]


@pytest.mark.parametrize("obj", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_input_never_raises(obj: object) -> None:
    for reader in (device_class_from, resource_slice_from, resource_claim_from):
        result = reader(obj)
        if isinstance(result, DraError):
            assert result.reason


def test_device_taints_and_request_tolerations_are_read() -> None:
    from gangsched.api.dra import resource_claim_from, resource_slice_from
    from gangsched.core.resourceclaims import DeviceTaint, Toleration

    taints = [{"key": "maintenance", "value": "soon", "effect": "NoSchedule"}]
    s = resource_slice_from(patched(SLICE, "spec.devices[0].taints", taints))
    assert not isinstance(s, DraError)
    assert s.devices[0].taints == (DeviceTaint("maintenance", "soon", "NoSchedule"),)
    assert s.devices[0].tainted and not s.devices[1].tainted
    tolerations = [{"key": "maintenance", "operator": "Exists", "effect": "NoSchedule"}]
    c = resource_claim_from(patched(CLAIM, f"{R0}.exactly.tolerations", tolerations))
    assert not isinstance(c, DraError)
    exact = c.requests[0].exactly
    assert exact is not None
    assert exact.tolerations == (Toleration("maintenance", "Exists", "", "NoSchedule"),)
    assert s.devices[0].usable_by(exact.tolerations)
    assert not s.devices[0].usable_by((Toleration("maintenance", "Equal", "later"),))


# ---- where devices reach, counters, config ------------------------------------------------
def _without_node(path: str, value: object) -> dict[str, Any]:
    return patched(patched(SLICE, "spec.nodeName", ...), path, value)


def test_a_slice_for_every_node_or_a_node_selector() -> None:
    from gangsched.core.model import AffinityTerm, Requirement

    every = resource_slice_from(_without_node("spec.allNodes", True))
    assert isinstance(every, ResourceSlice)
    assert every.node == "" and all(d.node == "" and d.reach is None for d in every.devices)
    assert reaches(every.devices[0], "node-z", {})
    rack = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    racked = resource_slice_from(_without_node("spec.nodeSelector", rack))
    assert isinstance(racked, ResourceSlice)
    term = AffinityTerm((Requirement("rack", "In", ("r1",)),))
    assert all(d.node == "" and d.reach == term for d in racked.devices)
    assert reaches(racked.devices[0], "node-z", {"rack": "r1"})
    assert not reaches(racked.devices[0], "node-z", {"rack": "r2"})
    two = {"nodeSelectorTerms": [rack["nodeSelectorTerms"][0]] * 2}
    assert "expected exactly one term, got 2" in error(
        resource_slice_from(_without_node("spec.nodeSelector", two))
    )


def test_per_device_node_selection() -> None:
    obj = _without_node("spec.perDeviceNodeSelection", True)
    assert "one of nodeName, nodeSelector, allNodes must be set" in error(resource_slice_from(obj))
    obj = patched(obj, "spec.devices[0].nodeName", "node-b")
    obj = patched(obj, "spec.devices[1].allNodes", True)
    s = resource_slice_from(obj)
    assert isinstance(s, ResourceSlice)
    assert (s.devices[0].node, s.devices[1].node, s.devices[1].reach) == ("node-b", "", None)


def test_counter_sets_and_what_devices_consume() -> None:
    counters = resource_slice_from(
        patched(
            patched(SLICE, "spec.devices", []),
            "spec.sharedCounters",
            [{"name": "gpu-0", "counters": {"memory": {"value": "40Gi"}, "sm": {"value": 98}}}],
        )
    )
    assert isinstance(counters, ResourceSlice)
    assert counters.devices == ()
    assert counters.counters == (("gpu-0", "memory", 40 * GI * 1000), ("gpu-0", "sm", 98_000))
    consumes = [{"counterSet": "gpu-0", "counters": {"memory": {"value": "5Gi"}}}]
    s = resource_slice_from(patched(SLICE, "spec.devices[0].consumesCounters", consumes))
    assert isinstance(s, ResourceSlice)
    assert s.devices[0].consumes == (("gpu-0", "memory", 5 * GI * 1000),)
    assert s.devices[1].consumes == ()


def test_class_and_claim_config_are_kept_as_written() -> None:
    from gangsched.core.resourceclaims import ConfigEntry

    sharing = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig"}
    dc = device_class_from(
        patched(DEVICE_CLASS, "spec.config", [{"opaque": {"driver": NV, "parameters": sharing}}])
    )
    assert isinstance(dc, DeviceClass)
    assert dc.config == (
        ConfigEntry(NV, '{"apiVersion":"resource.nvidia.com/v1beta1","kind":"GpuConfig"}'),
    )
    config = [{"requests": ["gpus"], "opaque": {"driver": NV, "parameters": {"a": [1]}}}]
    c = resource_claim_from(patched(CLAIM, "spec.devices.config", config))
    assert isinstance(c, Claim)
    assert c.config == (ConfigEntry(NV, '{"a":[1]}', ("gpus",)),)


def test_an_allocation_for_every_node_or_a_selector() -> None:
    from gangsched.core.model import AffinityTerm, Requirement

    c = resource_claim_from(patched(CLAIM, "status.allocation.nodeSelector", ...))
    assert isinstance(c, Claim) and c.allocation is not None
    assert (c.allocation.node, c.allocation.reach) == ("", None)
    assert serves(c.allocation, "any-node", {})
    rack = {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }
    c = resource_claim_from(patched(CLAIM, "status.allocation.nodeSelector", rack))
    assert isinstance(c, Claim) and c.allocation is not None
    assert c.allocation.reach == AffinityTerm((Requirement("rack", "In", ("r1",)),))
    assert serves(c.allocation, "n", {"rack": "r1"}) and not serves(c.allocation, "n", {})


def test_binding_conditions_are_read_on_devices_and_allocations() -> None:
    from gangsched.core.claimalloc import Allocated, allocate
    from gangsched.core.resourceclaims import DeviceRequest, ExactRequest

    obj = patched(SLICE, "spec.devices[0].bindingConditions", ["Attached"])
    assert "must be set together" in error(resource_slice_from(obj))
    obj = patched(obj, "spec.devices[0].bindingFailureConditions", ["AttachFailed"])
    obj = patched(obj, "spec.devices[0].bindsToNode", True)
    s = resource_slice_from(obj)
    assert isinstance(s, ResourceSlice)
    d = s.devices[0]
    assert (d.binding_conditions, d.binding_failure_conditions, d.binds_to_node) == (
        ("Attached",),
        ("AttachFailed",),
        True,
    )
    five = ["a", "b", "c", "d", "e"]
    assert "at most 4" in error(
        resource_slice_from(patched(obj, "spec.devices[0].bindingConditions", five))
    )
    # a device for every node that binds to a node: its allocation is for the pod's node
    shared = replace(d, node="", reach=None)
    cls = DeviceClass("any")
    claim = Claim("ml", "c", "u", (DeviceRequest("r", ExactRequest("any")),))
    got = allocate([claim], [shared], {"any": cls}, set(), "node-z")
    assert isinstance(got, Allocated)
    alloc = got.allocations["ml/c"]
    assert alloc.node == "node-z"
    assert alloc.conditions == ((d.id, ("Attached",), ("AttachFailed",)),)
    # read back from a written allocation
    results = [
        {
            "request": "gpus",
            "driver": NV,
            "pool": "node-b",
            "device": "gpu-0",
            "bindingConditions": ["Attached"],
            "bindingFailureConditions": ["AttachFailed"],
        }
    ]
    c = resource_claim_from(patched(CLAIM, "status.allocation.devices.results", results))
    assert isinstance(c, Claim) and c.allocation is not None
    assert c.allocation.conditions == (
        (DeviceId(NV, "node-b", "gpu-0"), ("Attached",), ("AttachFailed",)),
    )


def test_consumable_capacity_is_read() -> None:
    """A device allocatable many times, a capacity's request policy, a request's capacity, a
    distinctAttribute constraint and an allocation's shares (consumable capacity)."""
    from gangsched.api.dra import resource_claim_from, resource_slice_from
    from gangsched.core.resourceclaims import CapacityPolicy, Claim, MatchAttribute

    gi = 1024**3
    sl = resource_slice_from(
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "g0",
                        "allowMultipleAllocations": True,
                        "capacity": {
                            "memory": {
                                "value": "80Gi",
                                "requestPolicy": {
                                    "default": "10Gi",
                                    "validRange": {"min": "10Gi", "step": "10Gi"},
                                },
                            }
                        },
                    }
                ],
            },
        }
    )
    [d] = sl.devices  # type: ignore[union-attr]
    assert d.multi and d.capacity == {"gpu.example.com/memory": 80 * gi}
    assert d.policies == {
        "gpu.example.com/memory": CapacityPolicy(10 * gi, (), 10 * gi, None, 10 * gi)
    }
    assert d.capacity_named("memory") == "gpu.example.com/memory"
    assert d.written_name("gpu.example.com/memory") == "memory"
    claim = resource_claim_from(
        {
            "metadata": {"name": "c", "namespace": "ml", "uid": "u"},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu",
                                "count": 2,
                                "capacity": {"requests": {"memory": "25Gi"}},
                            },
                        }
                    ],
                    "constraints": [{"distinctAttribute": "gpu.example.com/numa"}],
                }
            },
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "gpu",
                                "driver": "gpu.example.com",
                                "pool": "n1",
                                "device": "g0",
                                "shareID": "0b1e3f0e-7d8c-4c61-9d55-5b0f4f1f8a11",
                                "consumedCapacity": {"memory": "30Gi"},
                            }
                        ]
                    }
                }
            },
        }
    )
    assert isinstance(claim, Claim)
    exact = claim.requests[0].exactly
    assert exact is not None and exact.capacity == (("memory", 25 * gi),)
    assert claim.constraints == (MatchAttribute("gpu.example.com/numa", (), distinct=True),)
    assert claim.allocation is not None
    assert claim.allocation.shares == ((0, (("memory", 30 * gi),)),)
    assert claim.allocation.exclusive == ()


def test_a_device_taint_rule_is_read_and_names_its_devices() -> None:
    from gangsched.api.dra import DraError, taint_rule_from
    from gangsched.core.resourceclaims import DeviceId, DeviceTaint

    rule = taint_rule_from(
        {
            "metadata": {"name": "maint"},
            "spec": {
                "deviceSelector": {"driver": "gpu.example.com", "pool": "n1"},
                "taint": {"key": "maintenance", "value": "now", "effect": "NoExecute"},
            },
        }
    )
    assert not isinstance(rule, DraError)
    assert rule.taint == DeviceTaint("maintenance", "now", "NoExecute")
    assert rule.applies(DeviceId("gpu.example.com", "n1", "gpu-3"))
    assert not rule.applies(DeviceId("gpu.example.com", "n2", "gpu-3"))
    bad = taint_rule_from({"metadata": {"name": "x"}, "spec": {"taint": {"effect": "Soon"}}})
    assert isinstance(bad, DraError) and "spec.taint.effect" in bad.reason
