"""DRA extended resources (KEP-5004) in the core: a pod asking ``nvidia.com/gpu`` on a cluster
whose GPUs a DeviceClass serves through Dynamic Resource Allocation gets a claim made for it,
allocated with its gang's and written (created, allocated, reserved) before any member binds;
a cluster where a device plugin offers the resource counts it as before; the claim made in the
API for a pod replaces the core's once the watch shows it allocated."""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.decisions import BindGang, GangUnschedulable
from gangsched.core.model import ExtendedAsk, Pod
from gangsched.core.resourceclaims import (
    Claim,
    ClaimAllocation,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    ExactRequest,
)
from tests.core.builders import make_node
from tests.core.test_scheduler import Harness, gpu_node, members

DRIVER = "gpu.example.com"
GPU = "nvidia.com/gpu"


def devices(node: str, n: int) -> list[Device]:
    return [Device(DeviceId(DRIVER, node, f"gpu-{i}"), node) for i in range(n)]


def asking(p: Pod, n: int = 1) -> Pod:
    """The pod as the reader gives it: its GPUs asked as counts, laid out as a claim would."""
    request = "container-0-request-2"  # (cpu, memory, nvidia.com/gpu: the third name)
    ask = ExtendedAsk(GPU, ((request, n),), (("main", request),))
    return replace(p, extended=(ask,))


def dra_cluster(*nodes: tuple[str, int], **class_kw: object) -> Harness:
    h = Harness(None, *(make_node(n).cpu("64").memory("256Gi").node() for n, _ in nodes))
    h.s.device_class_upsert(DeviceClass(DRIVER, extended_resource=GPU, **class_kw))  # type: ignore[arg-type]
    for name, n in nodes:
        h.s.resource_slice_upsert(f"{name}-gpus", devices(name, n))
    return h


def test_a_gang_asking_gpus_by_count_gets_claims_made_and_written_before_binding() -> None:
    h = dra_cluster(("n1", 4), ("n2", 4))
    h.gang("ml/train", 4)
    pods = [asking(p, 2) for p in members("ml/train", 4, gpus=2)]
    h.add(*pods)
    pending = h.s.cache.pods[pods[0].uid]
    assert GPU not in pending.requests and pending.requests_asked is not None
    assert pending.resource_claims == ("ml/train-0-extended-resources-",)
    [b] = [d for d in h.run(confirm=False) if isinstance(d, BindGang)]
    assert len(b.bindings) == 4 and len(b.claims) == 4
    by_pod = {w.made_for: w for w in b.claims}
    for p in pods:
        w = by_pod[p.uid]
        assert w.claim == f"ml/{p.name}-extended-resources-" and w.pods == (p.uid,)
        assert w.create is not None and w.create.requests == (
            DeviceRequest("container-0-request-2", ExactRequest(DRIVER, count=2)),
        )
        assert w.mappings == (("main", GPU, "container-0-request-2"),)
        assert len(w.allocation.devices) == 2
    used = [d for w in b.claims for d in w.allocation.devices]
    assert len(set(used)) == 8
    on = {x.pod.uid: x.node for x in b.bindings}
    assert all(w.allocation.node == on[w.made_for] for w in b.claims)


def test_a_gang_the_devices_cannot_hold_binds_nothing_and_says_so() -> None:
    h = dra_cluster(("n1", 4))
    h.gang("ml/big", 3)
    h.add(*(asking(p, 2) for p in members("ml/big", 3, gpus=2)))
    out = h.run(confirm=False)
    assert not [d for d in out if isinstance(d, BindGang)]
    [u] = [d for d in out if isinstance(d, GangUnschedulable)]
    assert f"device(s) of class {DRIVER}" in u.message, u.message
    catalog = h.s.cache.resource_claims
    assert all(catalog.tentative(f"ml/big-{i}-extended-resources-") is None for i in range(3))


def test_where_a_device_plugin_offers_the_resource_it_is_counted_as_before() -> None:
    h = Harness(None, gpu_node("n1", 8))
    h.s.device_class_upsert(DeviceClass(DRIVER, extended_resource=GPU))
    h.gang("ml/g", 2)
    pods = [asking(p, 4) for p in members("ml/g", 2, gpus=4)]
    h.add(*pods)
    assert h.s.cache.pods[pods[0].uid].requests[GPU] == 4
    [b] = [d for d in h.run(confirm=False) if isinstance(d, BindGang)]
    assert not b.claims and len(b.bindings) == 2


def test_the_class_own_resource_name_is_served_too() -> None:
    h = dra_cluster(("n1", 2))
    implicit = "deviceclass.resource.kubernetes.io/" + DRIVER
    p = members("ml/one", 1, gpus=0)[0]
    p = replace(
        p,
        requests={**p.requests, implicit: 1},
        extended=(ExtendedAsk(implicit, (("container-0-request-0", 1),), (("main", "x"),)),),
    )
    h.gang("ml/one", 1)
    h.add(p)
    [b] = [d for d in h.run(confirm=False) if isinstance(d, BindGang)]
    assert b.claims[0].create is not None


def test_the_newest_class_naming_the_resource_serves_it() -> None:
    h = dra_cluster(("n1", 2))
    h.s.device_class_upsert(DeviceClass("newer", extended_resource=GPU, created=10.0))
    assert h.s.cache.resource_claims.extended(GPU) == "newer"
    h.s.device_class_upsert(DeviceClass("aaa", extended_resource=GPU, created=10.0))
    assert h.s.cache.resource_claims.extended(GPU) == "aaa"


def test_a_class_appearing_later_turns_the_waiting_pods_requests_into_claims() -> None:
    h = Harness(None, make_node("n1").cpu("64").memory("256Gi").node())
    h.s.resource_slice_upsert("n1-gpus", devices("n1", 2))
    h.gang("ml/late", 2)
    pods = [asking(p) for p in members("ml/late", 2, gpus=1)]
    h.add(*pods)
    assert not [d for d in h.run(confirm=False) if isinstance(d, BindGang)]
    h.s.device_class_upsert(DeviceClass(DRIVER, extended_resource=GPU))
    h.advance(60)  # (past the gang's backoff)
    [b] = [d for d in h.run(confirm=False) if isinstance(d, BindGang)]
    assert len(b.claims) == 2
    # and the class going away puts the requests back as they were asked
    h2 = dra_cluster(("n1", 2))
    h2.add(*pods)
    h2.s.device_class_delete(DRIVER)
    back = h2.s.cache.pods[pods[0].uid]
    assert back.requests[GPU] == 1 and not back.resource_claims and back.requests_asked is None


def test_the_claim_made_in_the_api_takes_over_once_watched_allocated() -> None:
    h = dra_cluster(("n1", 2))
    h.gang("ml/w", 1)
    p = asking(members("ml/w", 1, gpus=1)[0])
    h.add(p)
    [b] = [d for d in h.run(confirm=False) if isinstance(d, BindGang)]
    [w] = b.claims
    catalog = h.s.cache.resource_claims
    # the writer created it: the watch shows it first unallocated, then allocated
    assert w.create is not None
    real = replace(w.create, name="w-0-extended-resources-abcde", uid="u-real")
    h.s.resource_claim_upsert(real)
    assert catalog.tentative(w.claim) is not None  # still held while being written
    assert h.s.cache.pods[p.uid].resource_claims == (real.key,)
    h.s.resource_claim_upsert(replace(real, allocation=w.allocation, reserved_for=(p.uid,)))
    assert w.claim not in catalog.claims and catalog.tentative(w.claim) is None
    assert {catalog.holder("n1", d) for d in w.allocation.devices} == {real.key}
    # the pod bound: its status names the claim
    h.s.pod_upsert(replace(h.s.cache.pods[p.uid], node_name="n1", extended_claim=real.name))
    assert h.s.cache.pods[p.uid].resource_claims == (real.key,)


def test_a_pod_whose_claim_was_left_allocated_by_a_crash_binds_where_it_is() -> None:
    h = dra_cluster(("n1", 2), ("n2", 2))
    h.gang("ml/c", 1)
    p = asking(members("ml/c", 1, gpus=1)[0])
    left = Claim(
        "ml",
        "c-0-extended-resources-zzzzz",
        "u-left",
        (DeviceRequest("container-0-request-2", ExactRequest(DRIVER)),),
        allocation=ClaimAllocation(
            "n2", (("container-0-request-2", DeviceId(DRIVER, "n2", "gpu-1")),)
        ),
        made_for=p.uid,
    )
    h.s.resource_claim_upsert(left)
    h.add(p)
    [b] = [d for d in h.run(confirm=False) if isinstance(d, BindGang)]
    assert b.bindings[0].node == "n2"
    [w] = b.claims
    assert w.claim == left.key and w.create is None and w.pods == (p.uid,)
    assert w.mappings == (("main", GPU, "container-0-request-2"),)
