"""Consumable capacity (DRAConsumableCapacity, beta and on in Kubernetes 1.36): a device
allocatable many times is shared by claims while what they consume of its capacity fits, each
share rounded up by the capacity's request policy; on any device a request's capacity must fit;
``distinctAttribute`` wants devices with different values. As kube-scheduler v1.36's
allocator computes them (compared with kube-scheduler itself in tests/e2e/test_dra.py)."""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.claimalloc import Allocated, allocate
from gangsched.core.claimstate import ClaimCatalog
from gangsched.core.resourceclaims import (
    CapacityPolicy,
    Claim,
    ClaimAllocation,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    ExactRequest,
    MatchAttribute,
)

GI = 1024**3
CLASSES = {"gpu": DeviceClass("gpu")}


def shared(
    name: str, memory: int = 80, policy: CapacityPolicy | None = None, **attrs: int
) -> Device:
    return Device(
        DeviceId("drv", "n1", name),
        "n1",
        dict(attrs),
        {"drv/memory": memory * GI},
        multi=True,
        policies={"drv/memory": policy} if policy else {},
        written={"memory": "drv/memory"},
    )


def claim(
    name: str, memory: int | None = None, count: int = 1, *constraints: MatchAttribute
) -> Claim:
    asked = (("memory", memory * GI),) if memory is not None else ()
    request = DeviceRequest("gpu", ExactRequest("gpu", count=count, capacity=asked))
    return Claim("ml", name, f"u-{name}", (request,), constraints)


def test_a_device_allocatable_many_times_is_shared_while_its_capacity_lasts() -> None:
    d = shared("g0")
    claims = [claim(f"c{i}", 20) for i in range(4)]
    result = allocate(claims, [d], CLASSES, set(), "n1")
    assert isinstance(result, Allocated)
    for a in result.allocations.values():
        assert a.devices == (d.id,) and a.shares == ((0, (("memory", 20 * GI),)),)
        assert a.exclusive == ()
    assert not isinstance(
        allocate([*claims, claim("c4", 20)], [d], CLASSES, set(), "n1"), Allocated
    )


def test_a_share_is_rounded_up_by_the_capacity_policy() -> None:
    step = CapacityPolicy(default=10 * GI, min=10 * GI, step=10 * GI, max=80 * GI)
    d = shared("g0", policy=step)
    result = allocate([claim("a", 25), claim("b", 25)], [d], CLASSES, set(), "n1")
    assert isinstance(result, Allocated)
    assert result.allocations["ml/a"].shares == ((0, (("memory", 30 * GI),)),)
    # a third would make 90 Gi of 80
    assert not isinstance(
        allocate([claim("a", 25), claim("b", 25), claim("c", 25)], [d], CLASSES, set(), "n1"),
        Allocated,
    )
    # a request naming no capacity consumes the policy's default
    result = allocate([claim("d")], [d], CLASSES, set(), "n1")
    assert isinstance(result, Allocated)
    assert result.allocations["ml/d"].shares == ((0, (("memory", 10 * GI),)),)
    values = CapacityPolicy(default=16 * GI, valid_values=(16 * GI, 40 * GI))
    assert values.consumed(20 * GI, 80 * GI) == 40 * GI
    assert values.violated_by(50 * GI) and not values.violated_by(16 * GI)


def test_without_a_default_an_unnamed_capacity_is_consumed_whole() -> None:
    d = shared("g0")
    result = allocate([claim("whole"), claim("more", 1)], [d], CLASSES, set(), "n1")
    assert not isinstance(result, Allocated)


def test_on_a_device_for_one_claim_the_capacity_asked_must_fit() -> None:
    d = Device(
        DeviceId("drv", "n1", "g0"),
        "n1",
        {},
        {"drv/memory": 40 * GI},
        written={"memory": "drv/memory"},
    )
    assert not isinstance(allocate([claim("big", 60)], [d], CLASSES, set(), "n1"), Allocated)
    result = allocate([claim("ok", 30)], [d], CLASSES, set(), "n1")
    assert isinstance(result, Allocated) and result.allocations["ml/ok"].shares == ()
    # a capacity the device does not have
    other = Claim(
        "ml",
        "x",
        "u-x",
        (DeviceRequest("gpu", ExactRequest("gpu", capacity=(("cores", 1),))),),
    )
    assert not isinstance(allocate([other], [d], CLASSES, set(), "n1"), Allocated)


def test_a_device_serves_a_request_once_but_several_requests_of_a_claim() -> None:
    """As kube-scheduler's allocator: within a request it moves on to the next device."""
    d = shared("g0")
    assert not isinstance(allocate([claim("two", 30, 2)], [d], CLASSES, set(), "n1"), Allocated)
    one = ExactRequest("gpu", capacity=(("memory", 30 * GI),))
    pair = Claim("ml", "pair", "u-pair", (DeviceRequest("a", one), DeviceRequest("b", one)))
    result = allocate([pair], [d], CLASSES, set(), "n1")
    assert isinstance(result, Allocated)
    assert result.allocations["ml/pair"].devices == (d.id, d.id)


def test_distinct_attribute_wants_a_device_per_value() -> None:
    devices = [
        Device(DeviceId("drv", "n1", f"g{i}"), "n1", {"drv/numa": numa})
        for i, numa in enumerate((0, 0, 1))
    ]
    distinct = MatchAttribute("drv/numa", (), distinct=True)
    two = claim("two", None, 2, distinct)
    result = allocate([two], devices, CLASSES, set(), "n1")
    assert isinstance(result, Allocated)
    assert [d.name for d in result.allocations["ml/two"].devices] == ["g0", "g2"]
    three = claim("three", None, 3, distinct)
    assert not isinstance(allocate([three], devices, CLASSES, set(), "n1"), Allocated)


def test_written_shares_count_and_the_catalog_never_gives_out_more_than_there_is() -> None:
    catalog = ClaimCatalog()
    catalog.upsert_class(CLASSES["gpu"])
    catalog.upsert_slice("n1", [shared("g0")])
    first = claim("first", 50)
    written = ClaimAllocation(
        "n1", (("gpu", DeviceId("drv", "n1", "g0")),), shares=((0, (("memory", 50 * GI),)),)
    )
    catalog.upsert_claim(
        Claim(first.namespace, first.name, first.uid, first.requests, allocation=written)
    )

    from tests.core.test_scheduler import pod

    later = claim("later", 40)
    catalog.upsert_claim(later)
    p = replace(pod("p", gpus=0), resource_claims=(later.key,))
    assert catalog.fits(p, "n1") != ""  # 50 + 40 of 80
    fitting = claim("fitting", 30)
    catalog.upsert_claim(fitting)
    q = replace(pod("q", gpus=0), resource_claims=(fitting.key,))
    assert catalog.fits(q, "n1") == ""
    assert catalog.assume(q, "n1")
    # the tentative share counts too
    third = claim("third", 10)
    catalog.upsert_claim(third)
    r = replace(pod("r", gpus=0), resource_claims=(third.key,))
    assert catalog.fits(r, "n1") != ""
    # the written claim goes: its share is given back
    catalog.remove_claim(first.key)
    assert catalog.fits(r, "n1") == ""
    # counting never says a gang of 8 such pods is short of devices: one device serves many
    assert catalog.short_of_class("gpu", 8) is None
