"""Resource claims written before a gang binds (kube/write/claims.py through the binder), against
the fake API server: every claim's finalizer, allocation and reservation before the first
binding; all undone when one cannot be written; a claim allocated already only reserved; a pod
whose binding fails taken off its claim; the fence; a device taken meanwhile."""

from __future__ import annotations

import asyncio
from typing import Any

from gangsched.core.decisions import BindGang, Binding, ClaimWrite, PodRef
from gangsched.core.resourceclaims import ClaimAllocation, DeviceId
from gangsched.kube.write.binder import Binder
from gangsched.kube.write.claims import FINALIZER, ClaimWriter, allocation_json
from tests.support.fakekube import FakeKube

PODS = "/api/v1/namespaces/ml/pods"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims"
DRIVER = "gpu.example.com"


def _claim(i: int, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"c{i}", "uid": f"cu{i}"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": status,
    }


def _alloc(i: int, node: str = "n1") -> ClaimAllocation:
    return ClaimAllocation(node, (("gpu", DeviceId(DRIVER, node, f"gpu-{i}")),))


def _write(i: int, *pods: int, node: str = "n1") -> ClaimWrite:
    return ClaimWrite(f"ml/c{i}", f"cu{i}", _alloc(i, node), tuple(f"u{p}" for p in pods))


def _gang(n: int, *writes: ClaimWrite) -> BindGang:
    bindings = tuple(Binding(PodRef(f"u{i}", "ml", f"p{i}"), "n1") for i in range(n))
    return BindGang("ml/g", bindings, claims=writes)


class Rig:
    def __init__(
        self, claims: int = 4, *, held: dict[DeviceId, str] | None = None, **writer: Any
    ) -> None:
        self.kube = FakeKube()
        self.kube.seed(PODS, *({"metadata": {"name": f"p{i}", "uid": f"u{i}"}} for i in range(4)))
        self.kube.seed(CLAIMS, *(_claim(i) for i in range(claims)))
        self.failures: dict[str, str] = {}
        self.fence_ok = True
        held_by = (lambda node, d: (held or {}).get(d, "")) if held is not None else None
        self.writer = ClaimWriter(self.kube, fence=lambda: self.fence_ok, held_by=held_by, **writer)
        self.binder = Binder(
            self.kube,
            self.failures.__setitem__,
            retries=1,
            retry_delay=0.001,
            claims=self.writer,
            fence=lambda: self.fence_ok,
        )

    def claim(self, i: int) -> dict[str, Any]:
        obj = self.kube.get_object(f"{CLAIMS}/c{i}")
        assert obj is not None
        return obj


async def test_every_claim_is_allocated_and_reserved_before_the_first_binding() -> None:
    rig = Rig()
    results = await rig.binder.bind_gang(_gang(4, *(_write(i, i) for i in range(4))))
    assert all(r.ok for r in results)
    for i in range(4):
        c = rig.claim(i)
        assert FINALIZER in c["metadata"]["finalizers"]
        written = dict(c["status"]["allocation"])
        assert written.pop("allocationTimestamp").endswith("Z")
        assert written == allocation_json(_alloc(i))
        assert c["status"]["reservedFor"] == [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"}]
    order = [r.path for r in rig.kube.requests if r.verb in ("update", "create")]
    last_claim = max(i for i, p in enumerate(order) if "resourceclaims" in p)
    first_binding = min(i for i, p in enumerate(order) if p.endswith("/binding"))
    assert last_claim < first_binding
    # each claim: the finalizer (an update of the object), then the status
    for i in range(4):
        assert order.index(f"{CLAIMS}/c{i}") < order.index(f"{CLAIMS}/c{i}/status")
    sel = rig.claim(0)["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert sel == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]


async def test_a_claim_that_cannot_be_written_undoes_the_others_and_binds_nothing() -> None:
    rig = Rig()
    rig.kube.fail("update", r"/c2/status$", 409, message="the object has been modified")
    results = await rig.binder.bind_gang(_gang(4, *(_write(i, i) for i in range(4))))
    assert not any(r.ok for r in results)
    assert rig.kube.sent("create", "/binding$") == []
    for i in range(4):
        c = rig.claim(i)
        assert not c["status"].get("allocation"), c
        assert not c["status"].get("reservedFor"), c
        assert FINALIZER not in (c["metadata"].get("finalizers") or []), c
    assert set(rig.failures) == {f"u{i}" for i in range(4)}
    assert "resource claim ml/c2 changed since it was read" in rig.failures["u0"]


async def test_a_claim_allocated_meanwhile_elsewhere_is_never_written_over() -> None:
    rig = Rig()
    other = allocation_json(_alloc(7, "n2"))
    rig.kube.seed(CLAIMS, _claim(1, allocation=other))
    await rig.binder.bind_gang(_gang(2, _write(0, 0), _write(1, 1)))
    assert rig.claim(1)["status"]["allocation"] == other
    assert not rig.claim(0)["status"].get("allocation")
    assert "resource claim ml/c1 was allocated on node n2 meanwhile" in rig.failures["u0"]


async def test_a_shared_claim_allocated_already_is_only_reserved_and_undone_only_so() -> None:
    rig = Rig()
    mine = allocation_json(_alloc(0))
    someone = {"resource": "pods", "name": "p9", "uid": "u9"}
    rig.kube.seed(CLAIMS, _claim(0, allocation=mine, reservedFor=[someone]))
    rig.kube.fail("update", r"/c1/status$", 500, times=None)
    await rig.binder.bind_gang(_gang(2, _write(0, 0, 1), _write(1, 1)))
    c = rig.claim(0)
    # the reservation was added, then taken back; the allocation and the other consumer stay
    assert c["status"] == {"allocation": mine, "reservedFor": [someone]}
    added = rig.kube.sent("update", "/c0/status$")
    assert [x["uid"] for x in added[0].body["status"]["reservedFor"]] == ["u9", "u0", "u1"]
    assert rig.kube.sent("update", r"/c0$") == []  # no finalizer: the claim was allocated


async def test_a_pod_whose_binding_fails_is_taken_off_its_claim() -> None:
    rig = Rig()
    rig.kube.fail("create", r"/p1/binding$", 404, times=None)
    results = await rig.binder.bind_gang(_gang(2, _write(0, 0), _write(1, 1)))
    assert [r.ok for r in results] == [True, False]
    assert rig.claim(0)["status"]["reservedFor"][0]["uid"] == "u0"
    c1 = rig.claim(1)
    assert not c1["status"].get("reservedFor") and not c1["status"].get("allocation")


async def test_a_device_another_claim_took_meanwhile_fails_the_write() -> None:
    taken = DeviceId(DRIVER, "n1", "gpu-1")
    rig = Rig(held={taken: "ml/theirs"})
    await rig.binder.bind_gang(_gang(2, _write(0, 0), _write(1, 1)))
    assert (
        "device gpu.example.com/n1/gpu-1 on node n1 was allocated to resource claim"
        in (rig.failures["u1"])
    )
    assert not rig.claim(0)["status"].get("allocation")
    assert rig.kube.sent("create", "/binding$") == []


async def test_fenced_nothing_is_written() -> None:
    rig = Rig()
    rig.fence_ok = False
    try:
        await rig.binder.bind_gang(_gang(2, _write(0, 0), _write(1, 1)))
    except Exception as e:  # FencedError: the process is on its way out
        assert type(e).__name__ == "FencedError"
    assert [r for r in rig.kube.requests if r.verb != "get"] == []


async def test_a_deleted_or_recreated_claim_fails_naming_it() -> None:
    rig = Rig()
    rig.kube.remove(f"{CLAIMS}/c0")
    await rig.binder.bind_gang(_gang(1, _write(0, 0)))
    assert "resource claim ml/c0 was deleted" in rig.failures["u0"]
    rig.kube.seed(CLAIMS, {**_claim(1), "metadata": {"name": "c1", "uid": "new"}})
    rig.failures.clear()
    await rig.binder.bind_gang(_gang(2, _write(1, 1)))
    assert "resource claim ml/c1 was recreated" in rig.failures["u0"]


def test_the_configuration_is_copied_as_kube_scheduler_copies_it() -> None:
    """Class entries once per class, naming every request allocated from it (the chosen
    sub-request for firstAvailable); then the claim's entries, once per request each names."""
    from gangsched.api.dra import resource_claim_from
    from gangsched.core.resourceclaims import Claim, ConfigEntry, DeviceClass
    from gangsched.kube.write.claims import allocation_config

    obj = {
        "metadata": {"name": "c", "namespace": "ml", "uid": "u"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": "gpu"}},
                    {
                        "name": "b",
                        "firstAvailable": [
                            {"name": "big", "deviceClassName": "big"},
                            {"name": "small", "deviceClassName": "gpu"},
                        ],
                    },
                ],
                "config": [
                    {"opaque": {"driver": DRIVER, "parameters": {"all": True}}},
                    {
                        "requests": ["a", "b/small"],
                        "opaque": {"driver": DRIVER, "parameters": {"some": 1}},
                    },
                ],
            }
        },
    }
    claim = resource_claim_from(obj)
    assert isinstance(claim, Claim)
    classes = {
        "gpu": DeviceClass("gpu", config=(ConfigEntry(DRIVER, '{"sharing":"TimeSlicing"}'),)),
        "big": DeviceClass("big"),
    }
    alloc = ClaimAllocation(
        "n1", (("a", DeviceId(DRIVER, "n1", "g0")), ("b/small", DeviceId(DRIVER, "n1", "g1")))
    )
    config = allocation_config(claim, alloc, classes.get)
    opaque = {"driver": DRIVER, "parameters": {"some": 1}}
    assert config == [
        {
            "source": "FromClass",
            "requests": ["a", "b/small"],
            "opaque": {"driver": DRIVER, "parameters": {"sharing": "TimeSlicing"}},
        },
        {"source": "FromClaim", "opaque": {"driver": DRIVER, "parameters": {"all": True}}},
        {"source": "FromClaim", "requests": ["a", "b/small"], "opaque": opaque},
        {"source": "FromClaim", "requests": ["a", "b/small"], "opaque": opaque},
    ]
    assert allocation_json(alloc, config=config)["devices"]["config"] == config


def test_an_allocation_not_for_one_node_carries_its_reach() -> None:
    from gangsched.core.model import AffinityTerm, Requirement

    results = (("fabric", DeviceId(DRIVER, "rack-1", "fabric-0")),)
    everywhere = allocation_json(ClaimAllocation("", results))
    assert "nodeSelector" not in everywhere
    rack = AffinityTerm((Requirement("rack", "In", ("r1",)),))
    racked = allocation_json(ClaimAllocation("", results, rack))
    assert racked["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}
        ]
    }


# ---- binding conditions ------------------------------------------------------------------
def _cond_write(i: int) -> ClaimWrite:
    d = DeviceId(DRIVER, "n1", f"gpu-{i}")
    alloc = ClaimAllocation("n1", (("gpu", d),), None, ((d, ("Attached",), ("AttachFailed",)),))
    return ClaimWrite(f"ml/c{i}", f"cu{i}", alloc, (f"u{i}",))


async def _report(rig: Rig, i: int, condition: str) -> None:
    """The driver reports ``condition`` True on the claim's device (``status.devices``)."""
    obj = rig.claim(i)
    obj["status"]["devices"] = [
        {
            "driver": DRIVER,
            "pool": "n1",
            "device": f"gpu-{i}",
            "conditions": [
                {
                    "type": condition,
                    "status": "True",
                    "reason": "Driver",
                    "message": f"{condition} by the driver",
                    "lastTransitionTime": "2026-11-27T00:00:00Z",
                }
            ],
        }
    ]
    await rig.kube.request("PUT", f"{CLAIMS}/c{i}/status", body=obj)


async def _allocated(rig: Rig, *claims: int) -> None:
    for _ in range(500):
        if all((rig.claim(i).get("status") or {}).get("allocation") for i in claims):
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the claims were never allocated")


async def test_the_gang_binds_only_once_every_device_reports_its_binding_conditions() -> None:
    rig = Rig(binding_timeout=10, poll=0.005)
    task = asyncio.create_task(rig.binder.bind_gang(_gang(2, _cond_write(0), _cond_write(1))))
    await _allocated(rig, 0, 1)
    result = rig.claim(0)["status"]["allocation"]["devices"]["results"][0]
    assert result["bindingConditions"] == ["Attached"]
    assert result["bindingFailureConditions"] == ["AttachFailed"]
    await _report(rig, 0, "Attached")
    await asyncio.sleep(0.05)
    assert rig.kube.sent("create", "/binding$") == []  # one device of the gang is not ready
    await _report(rig, 1, "Attached")
    results = await task
    assert all(r.ok for r in results)
    assert len(rig.kube.sent("create", "/binding$")) == 2


async def test_a_failure_condition_undoes_the_whole_gang_and_deallocates_its_claims() -> None:
    rig = Rig(binding_timeout=10, poll=0.005)
    task = asyncio.create_task(rig.binder.bind_gang(_gang(2, _cond_write(0), _cond_write(1))))
    await _allocated(rig, 0, 1)
    await _report(rig, 0, "Attached")
    await _report(rig, 1, "AttachFailed")
    results = await task
    assert not any(r.ok for r in results)
    assert rig.kube.sent("create", "/binding$") == []
    for i in range(2):
        status = rig.claim(i)["status"]
        assert not status.get("allocation") and not status.get("reservedFor")
    assert "device gpu.example.com/n1/gpu-1 reports AttachFailed" in rig.failures["u0"]


async def test_binding_conditions_not_met_in_time_undo_the_gang() -> None:
    rig = Rig(binding_timeout=0.05, poll=0.005)
    results = await rig.binder.bind_gang(_gang(2, _cond_write(0), _cond_write(1)))
    assert not any(r.ok for r in results)
    assert rig.kube.sent("create", "/binding$") == []
    assert "binding conditions were not met within 0.05 s" in rig.failures["u1"]
    assert not rig.claim(0)["status"].get("allocation")


# ---- DRA extended resources: the claim made for a pod --------------------------------------
def _made(i: int) -> ClaimWrite:
    from gangsched.core.resourceclaims import Claim, DeviceRequest, ExactRequest

    request = DeviceRequest("container-0-request-2", ExactRequest(DRIVER, count=1))
    claim = Claim("ml", f"p{i}-extended-resources-", "", (request,), made_for=f"u{i}")
    alloc = ClaimAllocation("n1", (("container-0-request-2", DeviceId(DRIVER, "n1", f"gpu-{i}")),))
    return ClaimWrite(
        claim.key,
        "",
        alloc,
        (f"u{i}",),
        f"u{i}",
        (("main", "nvidia.com/gpu", "container-0-request-2"),),
        claim,
    )


def _made_claims(rig: Rig) -> list[dict[str, Any]]:
    return [
        c
        for c in rig.kube.list_objects(CLAIMS)
        if c["metadata"]["name"].startswith("p") and "-extended-resources-" in c["metadata"]["name"]
    ]


async def test_a_claim_made_for_a_pod_is_created_allocated_and_named_in_its_status() -> None:
    rig = Rig(claims=0)
    results = await rig.binder.bind_gang(_gang(2, _made(0), _made(1)))
    assert all(r.ok for r in results)
    made = {c["metadata"]["ownerReferences"][0]["uid"]: c for c in _made_claims(rig)}
    assert set(made) == {"u0", "u1"}
    for i in range(2):
        c = made[f"u{i}"]
        meta = c["metadata"]
        assert meta["name"].startswith(f"p{i}-extended-resources-")
        assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
        assert meta["ownerReferences"][0]["controller"] is True
        assert FINALIZER in meta["finalizers"]
        assert c["spec"]["devices"]["requests"] == [
            {
                "name": "container-0-request-2",
                "exactly": {"deviceClassName": DRIVER, "allocationMode": "ExactCount", "count": 1},
            }
        ]
        assert c["status"]["allocation"]["devices"]["results"][0]["device"] == f"gpu-{i}"
        assert c["status"]["reservedFor"] == [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"}]
        pod = rig.kube.get_object(f"{PODS}/p{i}")
        assert pod is not None
        assert pod["status"]["extendedResourceClaimStatus"] == {
            "requestMappings": [
                {
                    "containerName": "main",
                    "resourceName": "nvidia.com/gpu",
                    "requestName": "container-0-request-2",
                }
            ],
            "resourceClaimName": meta["name"],
        }
    order = [r.path for r in rig.kube.requests if r.verb in ("create", "update", "patch")]
    first_binding = min(i for i, p in enumerate(order) if p.endswith("/binding"))
    last_write = max(i for i, p in enumerate(order) if "/binding" not in p)
    assert last_write < first_binding


async def test_a_pod_status_that_cannot_be_written_deletes_every_claim_made() -> None:
    rig = Rig(claims=0)
    rig.kube.fail("patch", r"/pods/p1/status$", 500, message="etcd is unhappy")
    results = await rig.binder.bind_gang(_gang(2, _made(0), _made(1)))
    assert not any(r.ok for r in results)
    assert rig.kube.sent("create", "/binding$") == []
    assert _made_claims(rig) == []
    assert set(rig.failures) == {"u0", "u1"}


async def test_a_pod_that_does_not_bind_loses_the_claim_made_for_it() -> None:
    rig = Rig(claims=0)
    rig.kube.fail("create", r"/pods/p1/binding$", 404, times=None)
    results = await rig.binder.bind_gang(_gang(2, _made(0), _made(1)))
    assert [r.ok for r in results] == [True, False]
    left = _made_claims(rig)
    assert [c["metadata"]["ownerReferences"][0]["uid"] for c in left] == ["u0"]
