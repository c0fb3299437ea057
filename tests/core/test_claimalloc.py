"""Joint device allocation for a gang's resource claims (core/claimalloc.py), against an
independent checker and a brute-force solver written only for these tests:

- every allocation it returns is valid (each request's devices of its class, matching its
  selectors, the count asked or every matching device, constraints kept, no device twice, none
  another claim holds);
- it finds an allocation whenever the brute-force solver proves one exists (hypothesis over
  small random nodes and claims), including the cases where allocating pod by pod, as
  kube-scheduler does, fails (kubernetes/kubernetes#138765's shape);
- a search past its bound reports the bound, and allocates nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import random
from collections.abc import Mapping, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gangsched.core.claimalloc import Allocated, Unallocatable, allocate, allocate_one_by_one
from gangsched.core.resourceclaims import (
    AllocationMode,
    Claim,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    DeviceTaint,
    ExactRequest,
    MatchAttribute,
    Selector,
    Toleration,
)

NODE = "n1"
GPU_CLASS = DeviceClass(
    "gpu.example.com",
    (Selector("device.driver == 'gpu.example.com'", lambda d: d.driver == "gpu.example.com"),),
)
CLASSES = {GPU_CLASS.name: GPU_CLASS}


def gpu(i: int, node: str = NODE, **attrs: str | int | bool) -> Device:
    return Device(DeviceId("gpu.example.com", node, f"gpu-{i}"), node, dict(attrs))


def attr_is(name: str, value: object) -> Selector:
    return Selector(
        f"device.attributes['{name}'] == {value!r}", lambda d: d.attributes.get(name) == value
    )


def claim(name: str, *requests: DeviceRequest, constraints: Sequence[MatchAttribute] = ()) -> Claim:
    return Claim("ml", name, f"uid-{name}", tuple(requests), tuple(constraints))


def exact(
    name: str,
    count: int = 1,
    *selectors: Selector,
    mode: AllocationMode = AllocationMode.EXACT_COUNT,
) -> DeviceRequest:
    return DeviceRequest(name, ExactRequest(GPU_CLASS.name, tuple(selectors), mode, count))


# ---- the independent checker -------------------------------------------------------------------
def check(
    claims: Sequence[Claim],
    devices: Sequence[Device],
    used: set[DeviceId],
    allocs: Mapping[str, object],
) -> None:
    by_id = {d.id: d for d in devices}
    seen: set[DeviceId] = set()
    for c in claims:
        a = allocs[c.key]
        results = a.results  # type: ignore[attr-defined]
        for request in c.requests:
            mine = [
                (p, d) for p, d in results if p == request.name or p.startswith(request.name + "/")
            ]
            paths = {p for p, _ in mine}
            assert len(paths) == 1, f"{c.key}/{request.name}: one alternative, got {paths}"
            [path] = paths
            options = dict(request.options())
            assert path in options
            want = options[path]
            chosen = [by_id[d] for _, d in mine]
            for d in chosen:
                assert d.node == NODE
                assert d.usable_by(want.tolerations), f"{d.id}: a taint not tolerated"
                assert all(
                    s.matches(d) for s in (*CLASSES[want.device_class].selectors, *want.selectors)
                )
                assert d.id not in used and d.id not in seen, f"{d.id} allocated twice"
                seen.add(d.id)
            if want.mode is AllocationMode.ALL:
                matching = [
                    d
                    for d in devices
                    if d.node == NODE
                    and all(
                        s.matches(d)
                        for s in (*CLASSES[want.device_class].selectors, *want.selectors)
                    )
                ]
                assert {d.id for d in chosen} == {d.id for d in matching}
            else:
                assert len(chosen) == want.count
            # an earlier alternative must not have been possible alone? (not required: joint)
        for con in c.constraints:
            covered = [
                by_id[d] for p, d in results if not con.requests or p.split("/")[0] in con.requests
            ]
            values = {repr(d.attributes.get(con.attribute)) for d in covered}
            assert len(values) == 1 and "None" not in values, (c.key, con, values)


# ---- the brute-force solver --------------------------------------------------------------------
def brute_force(claims: Sequence[Claim], devices: Sequence[Device], used: set[DeviceId]) -> bool:
    """Whether any assignment exists: every alternative of every request, every subset."""
    slots: list[list[tuple[str, tuple[DeviceId, ...]]]] = []
    owners: list[int] = []
    for ci, c in enumerate(claims):
        for request in c.requests:
            options: list[tuple[str, tuple[DeviceId, ...]]] = []
            for path, want in request.options():
                sel = (*CLASSES[want.device_class].selectors, *want.selectors)
                matching = [d for d in devices if d.node == NODE and all(s.matches(d) for s in sel)]
                usable = [d for d in matching if d.usable_by(want.tolerations)]
                if want.mode is AllocationMode.ALL:
                    if matching and len(usable) == len(matching):
                        options.append((path, tuple(d.id for d in matching)))
                else:
                    options += [
                        (path, tuple(d.id for d in combo))
                        for combo in itertools.combinations(usable, want.count)
                    ]
            slots.append(options)
            owners.append(ci)
    by_id = {d.id: d for d in devices}
    for pick in itertools.product(*slots):
        flat = [d for _, ids in pick for d in ids]
        if len(flat) != len(set(flat)) or any(d in used for d in flat):
            continue
        ok = True
        for ci, c in enumerate(claims):
            mine = [(p, ids) for (p, ids), o in zip(pick, owners, strict=True) if o == ci]
            for con in c.constraints:
                covered = [
                    by_id[d]
                    for p, ids in mine
                    for d in ids
                    if not con.requests or p.split("/")[0] in con.requests
                ]
                values = {repr(d.attributes.get(con.attribute)) for d in covered}
                if len(values) > 1 or "None" in values:
                    ok = False
        if ok:
            return True
    return False


# ---- examples ----------------------------------------------------------------------------------
def test_a_gang_of_claims_each_gets_its_own_device() -> None:
    devices = [gpu(i) for i in range(8)]
    claims = [claim(f"c{i}", exact("gpu")) for i in range(8)]
    out = allocate(claims, devices, CLASSES, set(), NODE)
    assert isinstance(out, Allocated)
    check(claims, devices, set(), out.allocations)
    nine = allocate([*claims, claim("c8", exact("gpu"))], devices, CLASSES, set(), NODE)
    assert isinstance(nine, Unallocatable) and not nine.bound_reached
    assert "(9 device(s) asked, 8 free there" in nine.message


def test_joint_allocation_succeeds_where_one_by_one_fails() -> None:
    """kubernetes#138765's shape: the first member's claim takes any device, and greedily the
    one the second member's claim alone can use."""
    devices = [gpu(0, model="a100"), gpu(1, model="h100")]
    any_gpu = claim("first", exact("gpu"))
    only_a100 = claim("second", exact("gpu", 1, attr_is("model", "a100")))
    greedy = allocate_one_by_one([any_gpu, only_a100], devices, CLASSES, set(), NODE)
    assert isinstance(greedy, Unallocatable)
    joint = allocate([any_gpu, only_a100], devices, CLASSES, set(), NODE)
    assert isinstance(joint, Allocated)
    assert joint.allocations["ml/second"].devices == (DeviceId("gpu.example.com", NODE, "gpu-0"),)
    check([any_gpu, only_a100], devices, set(), joint.allocations)


def test_match_attribute_is_revisited_across_requests() -> None:
    """Two GPUs on one NVLink clique: the first clique in device order has only one free."""
    devices = [gpu(0, clique="x"), gpu(1, clique="y"), gpu(2, clique="y")]
    c = claim("pair", exact("gpu", 2), constraints=[MatchAttribute("clique")])
    out = allocate([c], devices, CLASSES, set(), NODE)
    assert isinstance(out, Allocated)
    assert {d.name for d in out.allocations["ml/pair"].devices} == {"gpu-1", "gpu-2"}


def test_first_available_falls_back_and_says_which() -> None:
    devices = [gpu(0, memory=40), gpu(1, memory=40)]
    request = DeviceRequest(
        "gpu",
        first_available=(
            ("big", ExactRequest(GPU_CLASS.name, (attr_is("memory", 80),))),
            ("small", ExactRequest(GPU_CLASS.name, (attr_is("memory", 40),), count=2)),
        ),
    )
    c = claim("c", request)
    out = allocate([c], devices, CLASSES, set(), NODE)
    assert isinstance(out, Allocated)
    assert [p for p, _ in out.allocations["ml/c"].results] == ["gpu/small", "gpu/small"]


def test_all_mode_takes_every_matching_device_and_none_may_be_in_use() -> None:
    devices = [gpu(i) for i in range(3)]
    c = claim("every", exact("gpu", 0, mode=AllocationMode.ALL))
    out = allocate([c], devices, CLASSES, set(), NODE)
    assert isinstance(out, Allocated) and len(out.allocations["ml/every"].devices) == 3
    busy = allocate([c], devices, CLASSES, {devices[1].id}, NODE)
    assert isinstance(busy, Unallocatable)
    assert "all 3 matching device(s) wanted, 1 in use" in busy.message


def test_a_missing_class_is_named() -> None:
    c = Claim("ml", "c", "u", (DeviceRequest("gpu", ExactRequest("nope.example.com")),))
    out = allocate([c], [gpu(0)], CLASSES, set(), NODE)
    assert out == Unallocatable("claim ml/c: device class nope.example.com does not exist")


def test_past_the_bound_nothing_is_allocated_and_the_bound_is_named() -> None:
    # 6 claims of 2 devices of one clique over 5 cliques of 3 devices: enough devices in all,
    # but each clique holds one pair only; many choices before the search knows it
    devices = [gpu(i, clique=str(i // 3)) for i in range(15)]
    claims = [
        claim(f"c{i}", exact("gpu", 2), constraints=[MatchAttribute("clique")]) for i in range(6)
    ]
    out = allocate(claims, devices, CLASSES, set(), NODE, budget=50)
    assert isinstance(out, Unallocatable) and out.bound_reached
    assert "reached its bound of 50 device choices" in out.message
    # with the default bound the search ends, and says why
    full = allocate(claims, devices, CLASSES, set(), NODE)
    assert isinstance(full, Unallocatable) and not full.bound_reached


# ---- properties --------------------------------------------------------------------------------
def _tolerating(request: DeviceRequest) -> DeviceRequest:
    """The request (or its every alternative) tolerating the taint "maint"."""
    tolerate = (Toleration("maint", "Exists"),)
    if request.exactly is not None:
        return dataclasses.replace(
            request, exactly=dataclasses.replace(request.exactly, tolerations=tolerate)
        )
    return dataclasses.replace(
        request,
        first_available=tuple(
            (name, dataclasses.replace(r, tolerations=tolerate))
            for name, r in request.first_available
        ),
    )


MODELS = ("a", "b")
CLIQUES = ("x", "y")


@st.composite
def problems(draw: st.DrawFn) -> tuple[list[Claim], list[Device], set[DeviceId]]:
    n = draw(st.integers(1, 6))
    devices = [
        gpu(i, model=draw(st.sampled_from(MODELS)), clique=draw(st.sampled_from(CLIQUES)))
        for i in range(n)
    ]
    # some devices tainted (kept from requests that do not tolerate "maint"), some noted only
    effects = [draw(st.sampled_from(["", "", "", "NoSchedule", "None"])) for _ in devices]
    devices = [
        dataclasses.replace(d, taints=(DeviceTaint("maint", "", e),)) if e else d
        for d, e in zip(devices, effects, strict=True)
    ]
    used = {d.id for d in devices if draw(st.integers(0, 9)) == 0}
    claims = []
    for ci in range(draw(st.integers(1, 4))):
        requests = []
        for ri in range(draw(st.integers(1, 2))):
            sel = draw(st.sampled_from([(), (attr_is("model", "a"),), (attr_is("model", "b"),)]))
            kind = draw(st.integers(0, 5))
            if kind == 0:
                requests.append(exact(f"r{ri}", 0, *sel, mode=AllocationMode.ALL))
            elif kind == 1:
                alt = draw(st.sampled_from(MODELS))
                requests.append(
                    DeviceRequest(
                        f"r{ri}",
                        first_available=(
                            (
                                "one",
                                ExactRequest(
                                    GPU_CLASS.name,
                                    (attr_is("model", alt),),
                                    count=draw(st.integers(1, 2)),
                                ),
                            ),
                            ("any", ExactRequest(GPU_CLASS.name)),
                        ),
                    )
                )
            else:
                requests.append(exact(f"r{ri}", draw(st.integers(1, 2)), *sel))
            if draw(st.integers(0, 3)) == 0:  # this request tolerates the taint
                requests[-1] = _tolerating(requests[-1])
        constraints = [MatchAttribute("clique")] if draw(st.booleans()) else []
        claims.append(claim(f"c{ci}", *requests, constraints=constraints))
    return claims, devices, used


@settings(
    max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(problems())
def test_joint_allocation_is_valid_and_complete(
    problem: tuple[list[Claim], list[Device], set[DeviceId]],
) -> None:
    claims, devices, used = problem
    out = allocate(claims, devices, CLASSES, used, NODE)
    feasible = brute_force(claims, devices, used)
    if isinstance(out, Allocated):
        check(claims, devices, used, out.allocations)
        assert feasible
    else:
        assert not out.bound_reached
        assert not feasible, f"a joint assignment exists: {out.message}"
    greedy = allocate_one_by_one(claims, devices, CLASSES, used, NODE)
    if isinstance(greedy, Allocated):
        check(claims, devices, used, greedy.allocations)
        assert isinstance(out, Allocated), "joint never does worse than one by one"


def test_on_random_gangs_joint_places_every_feasible_one_and_one_by_one_does_not() -> None:
    """Seeded random gangs (members' claims competing for a node's devices in different
    orders): the joint search places 100% of those the brute-force solver proves feasible;
    one by one (kube-scheduler's order, never revisiting) places fewer. The rates are printed
    (pytest -s)."""
    rnd = random.Random(138765)
    feasible = joint = greedy = 0
    for _ in range(600):
        n = rnd.randint(2, 6)
        devices = [gpu(i, model=rnd.choice(MODELS), clique=rnd.choice(CLIQUES)) for i in range(n)]
        claims = []
        for ci in range(rnd.randint(2, 4)):
            sel = rnd.choice([(), (attr_is("model", "a"),), (attr_is("model", "b"),)])
            cons = [MatchAttribute("clique")] if rnd.random() < 0.3 else []
            claims.append(claim(f"m{ci}", exact("gpu", rnd.randint(1, 2), *sel), constraints=cons))
        if not brute_force(claims, devices, set()):
            continue
        feasible += 1
        joint += isinstance(allocate(claims, devices, CLASSES, set(), NODE), Allocated)
        greedy += isinstance(allocate_one_by_one(claims, devices, CLASSES, set(), NODE), Allocated)
    print(
        f"feasible {feasible}: joint {joint} ({joint / feasible:.1%}), one by one {greedy} "
        f"({greedy / feasible:.1%})"
    )
    assert feasible > 50 and joint == feasible and greedy < joint


def test_a_tainted_device_goes_only_to_a_request_that_tolerates_its_taint() -> None:
    """kube-scheduler v1.36 (DRADeviceTaints, on): NoSchedule and NoExecute taints keep a
    device from a request without a matching toleration, admin access or not; None does not;
    an All request fails when a matching device is kept from it."""
    clean, sick = (
        gpu(0),
        dataclasses.replace(gpu(1), taints=(DeviceTaint("ecc", "bad", "NoSchedule"),)),
    )
    noted = dataclasses.replace(gpu(2), taints=(DeviceTaint("note", "", "None"),))
    two = claim("two", exact("gpu", 2))
    assert isinstance(allocate([two], [clean, sick], CLASSES, set(), NODE), Unallocatable)
    out = allocate([two], [clean, sick, noted], CLASSES, set(), NODE)
    assert isinstance(out, Allocated)
    assert set(out.allocations["ml/two"].devices) == {clean.id, noted.id}
    tolerant = DeviceRequest(
        "gpu",
        ExactRequest(GPU_CLASS.name, count=2, tolerations=(Toleration("ecc", "Exists"),)),
    )
    ok = allocate([claim("t", tolerant)], [clean, sick], CLASSES, set(), NODE)
    assert isinstance(ok, Allocated)
    wrong_value = DeviceRequest(
        "gpu",
        ExactRequest(GPU_CLASS.name, count=2, tolerations=(Toleration("ecc", "Equal", "ok"),)),
    )
    assert isinstance(
        allocate([claim("w", wrong_value)], [clean, sick], CLASSES, set(), NODE), Unallocatable
    )
    every = claim("every", exact("gpu", 0, mode=AllocationMode.ALL))
    assert isinstance(allocate([every], [clean, sick], CLASSES, set(), NODE), Unallocatable)
    admin = DeviceRequest("gpu", ExactRequest(GPU_CLASS.name, count=2, admin_access=True))
    assert isinstance(
        allocate([claim("a", admin)], [clean, sick], CLASSES, set(), NODE), Unallocatable
    )
