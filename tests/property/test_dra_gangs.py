"""Properties of gangs with resource claims, through the whole core: random nodes with devices
(some held by other claims), random gangs whose members ask devices through claims (some
shared between members), scheduled to idle with every binding's claims written back as the
adapter writes them. Whatever the input:

- no device is allocated to two claims;
- every allocation satisfies its claim: it serves the pod's node (its devices are the node's,
  or a device for every node), the count and the selectors of the class and of the request
  hold;
- the counter sets of partitionable nodes (every device consumes its size from its node's
  set) are never over-consumed by what the scheduler allocates;
- a device allocatable many times (consumable capacity) is shared by claims, but what their
  shares consume never exceeds its capacity;
- all or nothing: a gang runs with every member or none, and a claim of a member not bound is
  not allocated.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.core.decisions import BindGang
from gangsched.core.model import Pod
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
from tests.core.test_scheduler import Harness, make_node, members

DRIVER = "gpu.example.com"
CLASS = DeviceClass(DRIVER)


def model_is(model: str) -> Selector:
    return Selector(f'model == "{model}"', lambda d: d.attributes.get("model") == model)


@st.composite
def clusters(draw: st.DrawFn) -> tuple[Harness, dict[str, list[str]], dict[str, str]]:
    """A harness with nodes, devices, foreign allocations, gangs and their claims; the gangs'
    member pods by gang; each claim's selector model ('' for none)."""
    nodes = [f"n{i}" for i in range(draw(st.integers(1, 3)))]
    h = Harness(None, *(make_node(n).cpu("64").memory("256Gi").node() for n in nodes))
    h.s.device_class_upsert(CLASS)
    for n in nodes:
        partitioned = draw(st.integers(0, 2)) == 0  # a partitionable pool (counter sets)
        devices = [
            Device(
                DeviceId(DRIVER, n, f"d{i}"),
                n,
                {"model": draw(st.sampled_from("ab"))},
                consumes=(("mem", "size", draw(st.integers(1, 2))),) if partitioned else (),
            )
            for i in range(draw(st.integers(1, 4)))
        ]
        if not partitioned and draw(st.integers(0, 1)) == 0:  # shared by claims while it lasts
            devices.append(
                Device(
                    DeviceId(DRIVER, n, "multi"),
                    n,
                    {"model": draw(st.sampled_from("ab"))},
                    {f"{DRIVER}/mem": draw(st.integers(2, 6))},
                    multi=True,
                    written={"mem": f"{DRIVER}/mem"},
                )
            )
        h.s.resource_slice_upsert(f"{n}-slice", devices)
        if partitioned:
            total = draw(st.integers(1, 4))
            h.s.resource_slice_upsert(f"{n}-counters", [], ((DRIVER, n, "mem", "size", total),))
        for d in devices:
            if draw(st.integers(0, 5)) == 0:  # held by a claim of someone else
                h.s.resource_claim_upsert(
                    Claim(
                        "other",
                        f"held-{d.id.pool}-{d.id.name}",
                        f"u-held-{d.id.name}",
                        (DeviceRequest("r", ExactRequest(DRIVER)),),
                        allocation=ClaimAllocation(n, (("r", d.id),)),
                        reserved_for=("someone",),
                    )
                )
    if draw(st.booleans()):  # a device for every node (a slice with allNodes)
        shared = Device(
            DeviceId(DRIVER, "net", "shared-0"), "", {"model": draw(st.sampled_from("ab"))}
        )
        h.s.resource_slice_upsert("net", [shared])
    models: dict[str, str] = {}
    gangs: dict[str, list[str]] = {}
    for g in range(draw(st.integers(1, 3))):
        size = draw(st.integers(1, 3))
        key = f"ml/g{g}"
        h.gang(key, size)
        pods: list[Pod] = []
        for i, p in enumerate(members(key, size, gpus=0)):
            if i > 0 and draw(st.integers(0, 4)) == 0:
                claim_key = pods[-1].resource_claims[0]  # shared with the member before
            else:
                model = draw(st.sampled_from(["", "a", "b"]))
                count = draw(st.integers(1, 2))
                sel = (model_is(model),) if model else ()
                name = f"g{g}-m{i}"
                capacity = (("mem", draw(st.integers(1, 3))),) if draw(st.booleans()) else ()
                h.s.resource_claim_upsert(
                    Claim(
                        "ml",
                        name,
                        f"u-{name}",
                        (
                            DeviceRequest(
                                "gpu", ExactRequest(DRIVER, sel, count=count, capacity=capacity)
                            ),
                        ),
                    )
                )
                claim_key = f"ml/{name}"
                models[claim_key] = model
            pods.append(replace(p, resource_claims=(claim_key,)))
        h.add(*pods)
        gangs[key] = [p.uid for p in pods]
    return h, gangs, models


def settle(h: Harness) -> None:
    """Schedule to idle; each binding's claims written first, as the adapter writes them."""
    for _ in range(5):
        out = h.s.run_until_idle()
        if not out:
            return
        for d in out:
            if isinstance(d, BindGang):
                for w in d.claims:
                    claim = h.s.cache.resource_claims.claims[w.claim]
                    reserved = (
                        *claim.reserved_for,
                        *(u for u in w.pods if u not in claim.reserved_for),
                    )
                    h.s.resource_claim_upsert(
                        replace(claim, allocation=w.allocation, reserved_for=reserved)
                    )
        h.confirm(out)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters())
def test_no_device_twice_every_allocation_valid_and_gangs_whole_or_not_at_all(
    built: tuple[Harness, dict[str, list[str]], dict[str, str]],
) -> None:
    h, gangs, models = built
    settle(h)
    catalog = h.s.cache.resource_claims
    held = Counter(
        d for c in catalog.claims.values() if c.allocation for d in c.allocation.exclusive
    )
    assert not [d for d, n in held.items() if n > 1], "a device allocated twice"
    devices = {d.id: d for n in h.s.cache.nodes for d in catalog.devices(n)}
    devices.update((d.id, d) for d in catalog._shared)
    shared: Counter[DeviceId] = Counter()
    for c in catalog.claims.values():
        if c.allocation:
            for d, used in c.allocation.consumption().items():
                assert devices[d].multi, f"{d} shared but not allocatable many times"
                shared[d] += used.get("mem", 0)
    for d, amount in shared.items():
        assert amount <= devices[d].capacity[f"{DRIVER}/mem"], f"{d}: {amount} consumed"
        assert not held[d], f"{d} both shared and held"
    totals = {(c[0], c[1]): c[4] for cs in catalog._counter_slices.values() for c in cs}
    for pool, total in totals.items():
        mine = [
            d
            for c in catalog.claims.values()
            if c.allocation and c.namespace == "ml"
            for d in c.allocation.devices
            if (d.driver, d.pool) == pool
        ]
        if mine:
            consumed = sum(
                n
                for c in catalog.claims.values()
                if c.allocation
                for d in c.allocation.devices
                if (d.driver, d.pool) == pool
                for _, _, n in devices[d].consumes
            )
            assert consumed <= total, f"pool {pool}: {consumed} consumed of {total}"
    for gang, uids in gangs.items():
        pods = [h.s.cache.pods[u] for u in uids]
        bound = [p for p in pods if p.node_name]
        assert len(bound) in (0, len(pods)), f"{gang}: {len(bound)} of {len(pods)} bound"
        for p in pods:
            [key] = p.resource_claims
            claim = catalog.claims[key]
            if not p.node_name:
                sharers = [q for q in pods if key in q.resource_claims and q.node_name]
                assert claim.allocation is None or sharers, f"{key} allocated, its pod not bound"
                continue
            alloc = claim.allocation
            assert alloc is not None and alloc.node in (p.node_name, "")
            assert p.uid in claim.reserved_for
            [request] = claim.requests
            assert request.exactly is not None
            assert len(alloc.devices) == request.exactly.count
            for d in alloc.devices:
                device = devices[d]
                assert device.node in (p.node_name, "")
                if models.get(key):
                    assert device.attributes["model"] == models[key]
