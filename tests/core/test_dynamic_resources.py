"""Gangs whose pods use resource claims (Dynamic Resource Allocation), through the scheduler:
the DynamicResources filter lets a member onto a node only when its claims can be allocated
there together with the members already reserved there; the binding decision carries every
claim's allocation, for all members at once; a gang that does not fit leaves no claim
allocated; an earlier member's devices are chosen again when a later member needs them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gangsched.core.decisions import BindGang, Decision, GangUnschedulable, Preempt
from gangsched.core.model import PodPhase
from gangsched.core.resourceclaims import (
    Claim,
    ClaimAllocation,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    ExactRequest,
    Selector,
)
from tests.core.test_scheduler import Harness, make_node, members, pod

CLASS = DeviceClass("gpu.example.com")


def devices(node: str, n: int, **attrs: str) -> list[Device]:
    return [
        Device(DeviceId("gpu.example.com", node, f"gpu-{i}"), node, dict(attrs)) for i in range(n)
    ]


def model_is(model: str) -> Selector:
    return Selector(f"model == {model!r}", lambda d: d.attributes.get("model") == model)


def gpu_claim(name: str, *selectors: Selector, count: int = 1) -> Claim:
    request = DeviceRequest("gpu", ExactRequest(CLASS.name, selectors, count=count))
    return Claim("ml", name, f"uid-{name}", (request,))


def cluster(*nodes: tuple[str, list[Device]]) -> Harness:
    h = Harness(None, *(make_node(name).cpu("64").memory("256Gi").node() for name, _ in nodes))
    h.s.device_class_upsert(CLASS)
    for name, devs in nodes:
        h.s.resource_slice_upsert(f"{name}-gpus", devs)
    return h


def binds(out: list[Decision]) -> list[BindGang]:
    return [d for d in out if isinstance(d, BindGang)]


def test_a_gang_of_eight_binds_whole_with_every_claim_allocated_once() -> None:
    h = cluster(("n1", devices("n1", 8)))
    h.gang("ml/train", 8)
    for i in range(8):
        h.s.resource_claim_upsert(gpu_claim(f"c{i}"))
    h.add(
        *(
            replace(p, resource_claims=(f"ml/c{i}",))
            for i, p in enumerate(members("ml/train", 8, gpus=0))
        )
    )
    [b] = binds(h.run(confirm=False))
    assert len(b.bindings) == 8 and len(b.claims) == 8
    used = [d for w in b.claims for d in w.allocation.devices]
    assert len(set(used)) == 8 and {w.allocation.node for w in b.claims} == {"n1"}
    assert all(len(w.pods) == 1 for w in b.claims)


def test_an_earlier_members_devices_are_chosen_again_for_a_later_one() -> None:
    """kubernetes#138765's shape in one gang: member a takes any GPU, member b only an a100;
    one by one, a takes the a100 and b fails; placed together, both fit."""
    node = [
        Device(DeviceId("gpu.example.com", "n1", "gpu-0"), "n1", {"model": "a100"}),
        Device(DeviceId("gpu.example.com", "n1", "gpu-1"), "n1", {"model": "h100"}),
    ]
    h = cluster(("n1", node))
    h.gang("ml/pair", 2)
    h.s.resource_claim_upsert(gpu_claim("any"))
    h.s.resource_claim_upsert(gpu_claim("a100", model_is("a100")))
    first, second = members("ml/pair", 2, gpus=0)
    h.add(
        replace(first, resource_claims=("ml/any",)), replace(second, resource_claims=("ml/a100",))
    )
    [b] = binds(h.run(confirm=False))
    chosen = {w.claim: w.allocation.devices[0].name for w in b.claims}
    assert chosen == {"ml/a100": "gpu-0", "ml/any": "gpu-1"}


def test_a_gang_that_does_not_fit_allocates_nothing_and_says_why() -> None:
    # three devices of the class (the pre-check passes), two of them of the model asked
    other = Device(DeviceId("gpu.example.com", "n1", "gpu-x"), "n1", {"model": "b"})
    h = cluster(("n1", [*devices("n1", 2, model="a"), other]))
    h.gang("ml/big", 3)
    for i in range(3):
        h.s.resource_claim_upsert(gpu_claim(f"c{i}", model_is("a")))
    h.add(
        *(
            replace(p, resource_claims=(f"ml/c{i}",))
            for i, p in enumerate(members("ml/big", 3, gpus=0))
        )
    )
    out = h.run(confirm=False)
    assert not binds(out)
    [u] = [d for d in out if isinstance(d, GangUnschedulable)]
    assert "no assignment of devices on node n1 satisfies all 3 claim(s) at once" in u.message
    catalog = h.s.cache.resource_claims
    assert all(catalog.tentative(f"ml/c{i}") is None for i in range(3))


def test_a_claim_allocated_elsewhere_keeps_the_pod_on_its_node_and_its_devices_used() -> None:
    h = cluster(("n1", devices("n1", 1)), ("n2", devices("n2", 1)))
    taken = DeviceId("gpu.example.com", "n1", "gpu-0")
    h.s.resource_claim_upsert(
        replace(
            gpu_claim("mine"),
            allocation=ClaimAllocation(
                "n2", (("gpu", DeviceId("gpu.example.com", "n2", "gpu-0")),)
            ),
        )
    )
    h.s.resource_claim_upsert(
        replace(gpu_claim("other"), allocation=ClaimAllocation("n1", (("gpu", taken),)))
    )
    h.s.resource_claim_upsert(gpu_claim("new"))
    h.add(replace(pod("p-mine", gpus=0), resource_claims=("ml/mine",)))
    [b] = binds(h.run(confirm=False))
    # allocated already: the binding only adds the pod to the claim's consumers
    assert b.bindings[0].node == "n2"
    [w] = b.claims
    assert w.claim == "ml/mine" and w.pods == ("uid-p-mine",)
    assert w.allocation.devices == (DeviceId("gpu.example.com", "n2", "gpu-0"),)
    h.add(replace(pod("p-new", gpus=0), resource_claims=("ml/new",)))
    out = h.run(confirm=False)
    assert not binds(out), "n1's device is held by another claim, n2's by ml/mine"


def test_a_claim_written_and_reserved_for_the_pod_is_not_written_again() -> None:
    """A restart after the claims were written but before the binding: nothing to write."""
    h = cluster(("n1", devices("n1", 1)), ("n2", devices("n2", 1)))
    h.s.resource_claim_upsert(
        replace(
            gpu_claim("mine"),
            allocation=ClaimAllocation(
                "n2", (("gpu", DeviceId("gpu.example.com", "n2", "gpu-0")),)
            ),
            reserved_for=("uid-p-mine",),
        )
    )
    h.add(replace(pod("p-mine", gpus=0), resource_claims=("ml/mine",)))
    [b] = binds(h.run(confirm=False))
    assert b.bindings[0].node == "n2" and b.claims == ()


def test_claims_refused_deleted_or_still_to_be_made_keep_the_pod_waiting_saying_why() -> None:
    h = cluster(("n1", devices("n1", 2)))
    h.s.resource_claim_refused("ml/bad", "spec.devices.config: not supported yet")
    h.add(replace(pod("p-bad", gpus=0), resource_claims=("ml/bad",)))
    h.s.resource_claim_upsert(replace(gpu_claim("gone"), deleting=True))
    h.add(replace(pod("p-gone", gpus=0), resource_claims=("ml/gone",)))
    h.add(replace(pod("p-tmpl", gpus=0), claims_waiting="spec.resourceClaims[0] (gpu): waiting"))
    out = h.run(confirm=False)
    assert not binds(out)
    why = {u.pods[0].name: u.message for u in out if isinstance(u, GangUnschedulable)}
    assert "resource claim ml/bad cannot be used: spec.devices.config" in why["p-bad"]
    assert "resource claim ml/gone is being deleted" in why["p-gone"]
    assert "spec.resourceClaims[0] (gpu): waiting" in why["p-tmpl"]


def test_a_claim_of_a_refused_class_names_the_class() -> None:
    h = cluster(("n1", devices("n1", 2)))
    h.s.device_class_refused("gpu.example.com", "spec.config: not supported yet")
    h.s.resource_claim_upsert(gpu_claim("c"))
    h.add(replace(pod("p", gpus=0), resource_claims=("ml/c",)))
    out = h.run(confirm=False)
    [u] = [d for d in out if isinstance(d, GangUnschedulable)]
    assert "device class gpu.example.com cannot be used: spec.config" in u.message


def test_a_missing_claim_keeps_the_pod_waiting_naming_it() -> None:
    h = cluster(("n1", devices("n1", 1)))
    h.add(replace(pod("p", gpus=0), resource_claims=("ml/not-yet",)))
    [u] = [d for d in h.run() if isinstance(d, GangUnschedulable)]
    assert "resource claim ml/not-yet does not exist yet" in u.message
    h.s.resource_claim_upsert(gpu_claim("not-yet"))  # its template made it: try again
    h.advance(10)  # (after the backoff)
    assert binds(h.run(confirm=False))


def test_a_written_allocation_replaces_the_tentative_one() -> None:
    h = cluster(("n1", devices("n1", 1)))
    h.s.resource_claim_upsert(gpu_claim("c"))
    p = replace(pod("p", gpus=0), resource_claims=("ml/c",))
    h.add(p)
    [b] = binds(h.run(confirm=False))
    [write] = b.claims
    h.s.resource_claim_upsert(replace(gpu_claim("c"), allocation=write.allocation))
    h.s.pod_upsert(replace(h.s.cache.pods[p.uid], node_name="n1", phase=PodPhase.RUNNING))
    assert h.s.cache.resource_claims.tentative("ml/c") is None
    h.s.resource_claim_upsert(gpu_claim("d"))
    h.add(replace(pod("q", gpus=0), resource_claims=("ml/d",)))
    assert not binds(h.run(confirm=False)), "the only device is allocated to ml/c"


def test_a_gang_short_of_devices_says_how_many_of_which_class_before_any_search() -> None:
    h = cluster(("n1", devices("n1", 2)), ("n2", devices("n2", 2)))
    h.gang("ml/big", 4)
    h.s.resource_claim_upsert(
        replace(
            gpu_claim("held"),
            allocation=ClaimAllocation(
                "n2", (("gpu", DeviceId("gpu.example.com", "n2", "gpu-0")),)
            ),
        )
    )
    for i in range(4):
        h.s.resource_claim_upsert(gpu_claim(f"c{i}"))
    h.add(
        *(
            replace(p, resource_claims=(f"ml/c{i}",))
            for i, p in enumerate(members("ml/big", 4, gpus=0))
        )
    )
    out = h.run(confirm=False)
    [u] = [d for d in out if isinstance(d, GangUnschedulable)]
    assert u.message == (
        "needs 4 device(s) of class gpu.example.com for 4 more member(s) (minMember 4); 3 free"
    )


def test_pods_with_claims_are_packed_onto_the_fullest_node_that_fits() -> None:
    """As whole GPUs counted by nvidia.com/gpu are (GPUBinPack): partly used nodes fill first
    and whole nodes stay free for large gangs; the emptier node is not preferred for its CPU."""
    h = cluster(("n1", devices("n1", 4)), ("n2", devices("n2", 4)), ("n3", devices("n3", 4)))
    used = [DeviceId("gpu.example.com", "n2", f"gpu-{i}") for i in range(2)]
    h.s.resource_claim_upsert(
        replace(gpu_claim("old"), allocation=ClaimAllocation("n2", tuple(("gpu", d) for d in used)))
    )
    h.s.resource_claim_upsert(gpu_claim("new"))
    h.add(replace(pod("p", gpus=0), resource_claims=("ml/new",)))
    [b] = binds(h.run(confirm=False))
    assert b.bindings[0].node == "n2"


def _write_claims(h: Harness, out: list[Any]) -> None:
    """What the adapter and the API server do after a binding decision: each claim written,
    allocated and reserved for its pods."""
    for b in binds(out):
        for w in b.claims:
            claim = h.s.cache.resource_claims.claims[w.claim]
            h.s.resource_claim_upsert(
                replace(claim, allocation=w.allocation, reserved_for=(*claim.reserved_for, *w.pods))
            )


def test_preemption_counts_the_devices_a_victims_claims_give_back() -> None:
    """A low-priority gang holds every device through its claims; a high-priority gang with
    claims preempts it whole: in the what-if, a claim whose every consumer is a victim frees
    its devices (as the resourceclaim controller deallocates it once its pods are gone)."""
    h = cluster(("n1", devices("n1", 2)), ("n2", devices("n2", 2)))
    h.gang("ml/low", 4)
    for i in range(4):
        h.s.resource_claim_upsert(gpu_claim(f"low-{i}"))
    h.add(
        *(
            replace(p, resource_claims=(f"ml/low-{i}",))
            for i, p in enumerate(members("ml/low", 4, gpus=0, priority=0))
        )
    )
    out = h.run()
    _write_claims(h, out)
    assert len(binds(out)[0].bindings) == 4
    h.gang("ml/high", 2)
    for i in range(2):
        h.s.resource_claim_upsert(gpu_claim(f"high-{i}"))
    h.add(
        *(
            replace(p, resource_claims=(f"ml/high-{i}",))
            for i, p in enumerate(members("ml/high", 2, gpus=0, priority=100))
        )
    )
    [p] = [d for d in h.run() if isinstance(d, Preempt)]
    assert sorted(v.pod.name for v in p.victims) == [f"low-{i}" for i in range(4)]
    # the what-if left nothing behind: the low gang's devices are held again
    catalog = h.s.cache.resource_claims
    assert catalog.free_of_class("gpu.example.com") == 0


# ---- devices that reach many nodes; partitionable devices --------------------------------
FABRIC = DeviceClass(
    "fabric.example.com",
    (Selector("driver", lambda d: d.driver == "fabric.example.com"),),
)
GPU = DeviceClass("gpu.example.com", (Selector("driver", lambda d: d.driver == "gpu.example.com"),))


def test_a_claim_shared_by_the_gang_holds_one_device_and_keeps_every_member_where_it_reaches() -> (
    None
):
    """A rack-level device (a slice with a node selector) in one claim every member uses: the
    claim is allocated once, for the nodes its device reaches, and the gang goes there,
    although the emptier node elsewhere would take it whole."""
    from gangsched.core.model import AffinityTerm, Requirement

    h = Harness(
        None,
        make_node("n1").cpu("64").memory("256Gi").label("rack", "r1").node(),
        make_node("n2").cpu("64").memory("256Gi").label("rack", "r1").node(),
        make_node("n3").cpu("64").memory("256Gi").label("rack", "r2").node(),
    )
    h.s.device_class_upsert(GPU)
    h.s.device_class_upsert(FABRIC)
    for name, n in (("n1", 2), ("n2", 2), ("n3", 4)):
        h.s.resource_slice_upsert(f"{name}-gpus", devices(name, n))
    rack = AffinityTerm((Requirement("rack", "In", ("r1",)),))
    fabric = Device(DeviceId(FABRIC.name, "r1", "fabric-0"), "", {}, reach=rack)
    h.s.resource_slice_upsert("r1-fabric", [fabric])
    h.s.resource_claim_upsert(
        Claim("ml", "domain", "uid-domain", (DeviceRequest("ch", ExactRequest(FABRIC.name)),))
    )
    h.gang("ml/train", 4)
    for i in range(4):
        h.s.resource_claim_upsert(gpu_claim(f"c{i}"))
    h.add(
        *(
            replace(p, resource_claims=(f"ml/c{i}", "ml/domain"))
            for i, p in enumerate(members("ml/train", 4, gpus=0))
        )
    )
    [b] = binds(h.run(confirm=False))
    assert {x.node for x in b.bindings} == {"n1", "n2"}
    [domain] = [w for w in b.claims if w.claim == "ml/domain"]
    assert domain.allocation == ClaimAllocation("", (("ch", fabric.id),), rack)
    assert len(domain.pods) == 4


def test_a_device_for_every_node_serves_one_claim_at_a_time() -> None:
    h = cluster(("n1", devices("n1", 1)), ("n2", devices("n2", 1)))
    h.s.device_class_upsert(GPU)
    h.s.device_class_upsert(FABRIC)
    shared = Device(DeviceId(FABRIC.name, "net", "switch-0"), "")
    h.s.resource_slice_upsert("net", [shared])
    fabric = DeviceRequest("net", ExactRequest(FABRIC.name))
    for g in ("a", "b"):
        h.gang(f"ml/{g}", 1)
        h.s.resource_claim_upsert(Claim("ml", f"net-{g}", f"uid-net-{g}", (fabric,)))
        [p] = members(f"ml/{g}", 1, gpus=0)
        h.add(replace(p, resource_claims=(f"ml/net-{g}",)))
    out = h.run(confirm=False)
    [b] = binds(out)
    assert [w.allocation for w in b.claims] == [ClaimAllocation("", (("net", shared.id),))]
    [u] = [d for d in out if isinstance(d, GangUnschedulable)]
    assert u.gang != b.gang


def _partitioned(node: str) -> list[Device]:
    """One GPU of 40 GiB as a whole device and as two 20 GiB slices, as a partitionable pool
    publishes it: every device consumes from the GPU's counter set."""
    gib = 2**30 * 1000

    def dev(name: str, kind: str, mem: int) -> Device:
        return Device(
            DeviceId("gpu.example.com", node, name),
            node,
            {"kind": kind},
            consumes=(("gpu-0", "memory", mem * gib),),
        )

    return [dev("gpu-0", "whole", 40), dev("gpu-0-mig-0", "mig", 20), dev("gpu-0-mig-1", "mig", 20)]


def _counters(node: str) -> tuple[tuple[str, str, str, str, int], ...]:
    return (("gpu.example.com", node, "gpu-0", "memory", 40 * 2**30 * 1000),)


def kind_is(kind: str) -> Selector:
    return Selector(f"kind == {kind!r}", lambda d: d.attributes.get("kind") == kind)


def test_partitions_of_one_gpu_share_its_counters() -> None:
    """Two slices of a GPU fit together; the whole GPU and a slice do not, although three
    devices are free: the gang of a whole-GPU member and a slice member waits, a gang of two
    slices binds."""
    h = cluster(("n1", []))
    h.s.resource_slice_upsert("n1-gpus", _partitioned("n1"))
    h.s.resource_slice_upsert("n1-counters", [], _counters("n1"))
    h.gang("ml/mixed", 2)
    h.s.resource_claim_upsert(gpu_claim("whole", kind_is("whole")))
    h.s.resource_claim_upsert(gpu_claim("slice", kind_is("mig")))
    a, b = members("ml/mixed", 2, gpus=0)
    h.add(replace(a, resource_claims=("ml/whole",)), replace(b, resource_claims=("ml/slice",)))
    out = h.run(confirm=False)
    assert not binds(out)
    h.gang("ml/slices", 2)
    for i in range(2):
        h.s.resource_claim_upsert(gpu_claim(f"s{i}", kind_is("mig")))
    c, d = members("ml/slices", 2, gpus=0)
    h.add(replace(c, resource_claims=("ml/s0",)), replace(d, resource_claims=("ml/s1",)))
    [bound] = binds(h.run(confirm=False))
    assert bound.gang == "ml/slices"
    assert sorted(w.allocation.devices[0].name for w in bound.claims) == [
        "gpu-0-mig-0",
        "gpu-0-mig-1",
    ]


def test_a_written_whole_gpu_leaves_no_counters_for_its_slices() -> None:
    h = cluster(("n1", []))
    h.s.resource_slice_upsert("n1-gpus", _partitioned("n1"))
    h.s.resource_slice_upsert("n1-counters", [], _counters("n1"))
    whole = DeviceId("gpu.example.com", "n1", "gpu-0")
    h.s.resource_claim_upsert(
        replace(
            gpu_claim("theirs", kind_is("whole")),
            allocation=ClaimAllocation("n1", (("gpu", whole),)),
            reserved_for=("someone",),
        )
    )
    h.gang("ml/one", 1)
    h.s.resource_claim_upsert(gpu_claim("slice", kind_is("mig")))
    [p] = members("ml/one", 1, gpus=0)
    h.add(replace(p, resource_claims=("ml/slice",)))
    assert not binds(h.run(confirm=False))
    h.s.resource_claim_delete("ml/theirs")  # deallocated: the counters are back
    h.advance(10)  # (after the backoff)
    [b] = binds(h.run(confirm=False))
    assert b.claims[0].allocation.devices[0].name.startswith("gpu-0-mig-")


def test_without_its_counter_sets_a_partitionable_device_is_not_used() -> None:
    h = cluster(("n1", []))
    h.s.resource_slice_upsert("n1-gpus", _partitioned("n1"))
    h.gang("ml/one", 1)
    h.s.resource_claim_upsert(gpu_claim("slice", kind_is("mig")))
    [p] = members("ml/one", 1, gpus=0)
    h.add(replace(p, resource_claims=("ml/slice",)))
    assert not binds(h.run(confirm=False))
    h.s.resource_slice_upsert("n1-counters", [], _counters("n1"))
    h.advance(10)  # (after the backoff)
    assert binds(h.run(confirm=False))


def test_a_claim_for_many_nodes_leaves_the_node_of_another_claim_the_only_candidate() -> None:
    from gangsched.core.claimstate import ClaimCatalog

    catalog = ClaimCatalog()
    shared = ClaimAllocation("", (("net", DeviceId(FABRIC.name, "net", "switch-0")),))
    local = ClaimAllocation("n2", (("gpu", DeviceId(GPU.name, "n2", "gpu-0")),))
    catalog.upsert_claim(replace(gpu_claim("net"), allocation=shared, reserved_for=("u",)))
    catalog.upsert_claim(replace(gpu_claim("mine"), allocation=local, reserved_for=("u",)))
    [p] = members("ml/one", 1, gpus=0)
    assert catalog.candidates(replace(p, resource_claims=("ml/net", "ml/mine"))) == ["n2"]
    assert catalog.candidates(replace(p, resource_claims=("ml/net",))) is None


def test_what_fit_before_a_claim_was_committed_is_asked_again_after() -> None:
    """A fit found by moving a tentative claim's device is remembered for pods asking the same;
    once that claim is committed (its binding decided) its device is fixed, so the memo must
    not answer for it any more (else a pod is assumed whose claims cannot be allocated)."""
    from gangsched.core.claimstate import ClaimCatalog

    catalog = ClaimCatalog()
    catalog.upsert_class(CLASS)
    catalog.upsert_slice(
        "n1",
        [
            Device(DeviceId(CLASS.name, "n1", "d0"), "n1", {"model": "a"}),
            Device(DeviceId(CLASS.name, "n1", "d1"), "n1", {"model": "b"}),
        ],
    )
    for name, sel in (("any", ()), ("a1", (model_is("a"),)), ("a2", (model_is("a"),))):
        catalog.upsert_claim(gpu_claim(name, *sel))
    p0, p1, p2 = members("ml/g", 3, gpus=0)
    p0 = replace(p0, resource_claims=("ml/any",))
    assert catalog.assume(p0, "n1")
    assert catalog.tentative("ml/any") is not None
    assert catalog.fits(replace(p1, resource_claims=("ml/a1",)), "n1") == ""  # (moves any)
    [write] = catalog.prebind([p0.uid])
    assert write.allocation.devices[0].name == "d0"  # fixed from now on
    why = catalog.fits(replace(p2, resource_claims=("ml/a2",)), "n1")
    assert "needs 1 device(s) of class gpu.example.com, 0 available on node n1" in why


def test_a_member_whose_claim_got_no_allocation_keeps_the_gang_from_binding(
    monkeypatch: Any,
) -> None:
    """The guard: should the reservation ever fail to allocate what the filter found to fit (a
    defect), the gang is not bound with a claim no device serves; it is released and retried."""
    from gangsched.core.claimstate import ClaimCatalog

    h = cluster(("n1", devices("n1", 2)))
    h.gang("ml/pair", 2)
    for i in range(2):
        h.s.resource_claim_upsert(gpu_claim(f"c{i}"))
    h.add(
        *(
            replace(p, resource_claims=(f"ml/c{i}",))
            for i, p in enumerate(members("ml/pair", 2, gpus=0))
        )
    )
    real = ClaimCatalog.assume

    def broken(self: ClaimCatalog, pod: Any, node: str) -> bool:
        return False if pod.resource_claims == ("ml/c1",) else real(self, pod, node)

    monkeypatch.setattr(ClaimCatalog, "assume", broken)
    out = h.run(confirm=False)
    assert not binds(out)
    [u] = [d for d in out if isinstance(d, GangUnschedulable)]
    assert "resource claim ml/c1 of pod" in u.message and "was not bound" in u.message
    assert not h.s.cache.assumed
    monkeypatch.setattr(ClaimCatalog, "assume", real)
    h.advance(60)
    assert binds(h.run(confirm=False))
