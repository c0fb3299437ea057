"""Device allocation for resource claims, for a whole gang at once.

kube-scheduler allocates the claims of one pod at a time and never revisits the devices it gave
an earlier pod, so a gang can fail although a joint assignment exists (two members whose
claims compete for the same devices in different orders). gangsched places a whole gang in one
cycle, so it can choose the devices of all the claims on a node together:

- the claims are satisfied in the order given; within a claim, its requests in order; a
  ``firstAvailable`` request tries its sub-requests in order; an ``ExactCount`` request takes
  its devices in the node's device order (combinations, never the same set twice), an ``All``
  request every matching device (none may be in use; at least one must exist);
- a device matches a request when it is on the node (or reaches it: a device of a slice for
  every node or a node selector), every selector of the request's device class and of the
  request matches it, and (but for admin access) no other claim holds it;
- a device of a partitionable pool fits only while its pool's counter sets have what it
  consumes left, after what the devices held and chosen so far consume (admin access too);
- a ``matchAttribute`` constraint fixes its attribute's value with the first device chosen for
  a request it names; later devices must carry the same value (a device without the attribute
  never satisfies it); a ``distinctAttribute`` constraint wants a value no device chosen before
  for its requests has;
- consumable capacity: a device allocatable many times (``allowMultipleAllocations``) is never
  held by one claim: it serves any number of requests (each at most once, as kube-scheduler's
  allocator moves on to the next device within a request) while what they consume of its
  capacity fits, each share consuming what its request asks,
  rounded up by the capacity's request policy (or the policy's default, else the whole
  capacity, for a capacity it does not name); its pool's counters are taken by the first
  share only. On any device, a request's capacity must name capacities the device has and fit
  in them;
- when a choice leaves a later request (of this claim or of a later claim) unsatisfiable, the
  search goes back and tries the next choice: depth-first, with every choice of every claim
  open to revision, until an assignment for all is found or every choice was tried.

The search is bounded: at most ``SEARCH_BOUND`` device choices per call (a gang of 8 pods with
one claim of one device each over 8 matching devices needs 8 when nothing conflicts). Past the
bound the claims are reported unschedulable, saying the bound was reached, never allocated
half. Admin-access requests may use devices other claims hold, and hold none themselves.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from gangsched.core.match import term_matches
from gangsched.core.model import AffinityTerm, Requirement
from gangsched.core.resourceclaims import (
    AllocationMode,
    Claim,
    ClaimAllocation,
    Device,
    DeviceClass,
    DeviceId,
    ExactRequest,
    MatchAttribute,
    consumed_capacity,
)
from gangsched.core.resources import add_into

__all__ = [
    "SEARCH_BOUND",
    "Allocated",
    "Unallocatable",
    "allocate",
    "allocate_one_by_one",
    "reaches",
    "serves",
]

SEARCH_BOUND = 100_000


@dataclass(frozen=True, slots=True)
class Allocated:
    """Every claim's allocation, by claim key."""

    allocations: Mapping[str, ClaimAllocation]


@dataclass(frozen=True, slots=True)
class Unallocatable:
    """Why the claims cannot all be allocated on the node (a message naming the claim and the
    request, or the bound)."""

    message: str
    bound_reached: bool = False


def reaches(device: Device, node: str, labels: Mapping[str, str]) -> bool:
    """Whether a pod on ``node`` (with these labels) can use the device."""
    if device.node:
        return device.node == node
    return device.reach is None or term_matches(device.reach, labels, node)


def serves(allocation: ClaimAllocation, node: str, labels: Mapping[str, str]) -> bool:
    """Whether a pod on ``node`` (with these labels) can use the allocation."""
    if allocation.node:
        return allocation.node == node
    return allocation.reach is None or term_matches(allocation.reach, labels, node)


# (driver, pool, counter set, counter) -> what is left of it
Counters = dict[tuple[str, str, str, str], int]
# device -> what shares of it consume (capacity name -> amount)
Consumption = dict[DeviceId, dict[str, int]]


@dataclass(slots=True)
class _Search:
    node: str
    devices: tuple[Device, ...]
    classes: Mapping[str, DeviceClass]
    used: Collection[DeviceId]
    budget: int
    # what the pools' counter sets have left; None when no device consumes any
    counters: Counters | None = None
    steps: int = 0
    taken: set[DeviceId] = field(default_factory=set)
    # admin-access choices that consume counters (they hold no device, but take counters)
    admin_counted: list[DeviceId] = field(default_factory=list)
    out_of_budget: bool = False
    # (claim index, devices taken) from which the rest was found impossible: reached again
    # by another order of the same choices, it fails at once
    dead: set[tuple[object, ...]] = field(default_factory=set)
    # consumable capacity: what the shares of devices allocatable many times consume (those
    # held already, and those chosen so far); whether any such device is here; the shares
    # taken, newest last: (device, what it consumes, whether it was the device's first)
    capacity: Consumption = field(default_factory=dict)
    multi: bool = False
    log: list[tuple[DeviceId, dict[str, int], bool]] = field(default_factory=list)

    def state(self, ci: int) -> tuple[object, ...]:
        """What the rest of the search from claim ``ci`` depends on."""
        key: tuple[object, ...] = (ci, frozenset(self.taken), tuple(sorted(self.admin_counted)))
        if self.multi:
            key += (tuple(sorted((d, tuple(sorted(c.items()))) for d, c in self.capacity.items())),)
        return key

    def consume_of(self, d: Device, request: ExactRequest) -> dict[str, int] | None:
        """What a share of ``d`` for ``request`` consumes of each of its capacities; None when
        the request names a capacity the device does not have, a policy refuses the amount,
        or it does not fit in what is left."""
        asked: dict[str, int] = {}
        for written, amount in request.capacity:
            name = d.capacity_named(written)
            if not name:
                return None
            asked[name] = amount
        out = consumed_capacity(d.capacity, d.policies, asked)
        if out is None:
            return None
        used = self.capacity.get(d.id) if d.multi else None
        for name, amount in out.items():
            if (used.get(d.written_name(name), 0) if used else 0) + amount > d.capacity[name]:
                return None
        return {d.written_name(name): amount for name, amount in out.items()}

    def matching(self, request: ExactRequest) -> list[Device] | str:
        """The node's devices this kind of request may take, in device order; or why none."""
        device_class = self.classes.get(request.device_class)
        if device_class is None:
            return f"device class {request.device_class} does not exist"
        selectors = (*device_class.selectors, *request.selectors)
        return [
            d
            for d in self.devices
            if (d.node == self.node or not d.node) and all(s.matches(d) for s in selectors)
        ]

    def free(self, d: Device, request: ExactRequest, *, counted: bool = True) -> bool:
        if d.taints and not d.usable_by(request.tolerations):
            return False  # a taint not tolerated, admin access or not (as kube-scheduler)
        if (request.capacity or d.consumable) and self.consume_of(d, request) is None:
            return False
        if counted and d.consumes and not (d.multi and d.id in self.capacity) and not self.room(d):
            return False  # (a device shared already took its counters with its first share)
        if request.admin_access:
            return True
        if d.multi:  # shared, unless an allocation without shares holds it (as kube-scheduler)
            return d.id not in self.used
        return d.id not in self.taken and d.id not in self.used

    def room(self, *devices: Device) -> bool:
        """The pools' counters have what ``devices`` consume, together, left."""
        if self.counters is None:
            return not any(d.consumes for d in devices)
        want: dict[tuple[str, str, str, str], int] = {}
        for d in devices:
            for counter_set, name, n in d.consumes:
                k = (d.id.driver, d.id.pool, counter_set, name)
                want[k] = want.get(k, 0) + n
        # a counter set its pool does not publish: the device cannot be used
        return all(self.counters.get(k, -1) >= n for k, n in want.items())

    def consume(self, devices: Sequence[Device], sign: int) -> None:
        if self.counters is None:
            return
        for d in devices:
            for counter_set, name, n in d.consumes:
                k = (d.id.driver, d.id.pool, counter_set, name)
                self.counters[k] = self.counters.get(k, 0) - sign * n


def _constraints_of(claim: Claim, request: str) -> list[int]:
    """Indexes of the claim's constraints that cover ``request`` (a request's name)."""
    return [i for i, c in enumerate(claim.constraints) if not c.requests or request in c.requests]


def allocate(
    claims: Sequence[Claim],
    devices: Sequence[Device],
    classes: Mapping[str, DeviceClass],
    used: Collection[DeviceId],
    node: str,
    *,
    budget: int = SEARCH_BOUND,
    counters: Counters | None = None,
    consumed: Mapping[DeviceId, Mapping[str, int]] | None = None,
) -> Allocated | Unallocatable:
    """Allocate every claim in ``claims`` (each listed once; a claim shared by several members
    is allocated once) on ``node``, jointly, from ``devices`` (the node's, and those that reach
    it from slices not for one node) not in ``used``; ``counters``: what the partitionable
    pools' counter sets have left; ``consumed``: what other claims' shares of devices
    allocatable many times consume (neither is changed)."""
    search = _Search(
        node, tuple(devices), classes, used, budget, None if counters is None else dict(counters)
    )
    search.multi = any(d.multi for d in search.devices)
    if consumed:
        search.capacity = {d: dict(c) for d, c in consumed.items()}
    for claim in claims:
        for request in claim.requests:
            if not request.options():
                return Unallocatable(f"claim {claim.key}: request {request.name} asks nothing")
    if not _enough(search, claims):
        return Unallocatable(_diagnose(search, claims))
    results: list[list[tuple[str, DeviceId]]] = [[] for _ in claims]
    values: list[list[object]] = [[None] * len(c.constraints) for c in claims]
    if _claim(search, claims, 0, 0, results, values):
        by_id = {d.id: d for d in search.devices}
        log = iter(search.log)
        out: dict[str, ClaimAllocation] = {}
        for c, r in zip(claims, results, strict=True):
            shares = tuple(
                (i, tuple(sorted(next(log)[1].items())))
                for i, (_, d) in enumerate(r)
                if by_id[d].multi
            )
            out[c.key] = _allocation(node, tuple(r), by_id, shares)
        return Allocated(out)
    if search.out_of_budget:
        return Unallocatable(
            f"the joint search for {len(claims)} claim(s) on node {node} reached its bound of "
            f"{budget} device choices",
            bound_reached=True,
        )
    return Unallocatable(_diagnose(search, claims))


def _allocation(
    node: str,
    results: tuple[tuple[str, DeviceId], ...],
    by_id: Mapping[DeviceId, Device],
    shares: tuple[tuple[int, tuple[tuple[str, int], ...]], ...] = (),
) -> ClaimAllocation:
    """The allocation's reach, as kube-scheduler's allocator makes its node selector: the
    node, when a device is local to it; else one term with every requirement of the devices'
    node selectors; else (every device reaches every node) no restriction."""
    chosen = [by_id[d] for _, d in results]
    conditions = tuple(
        (d.id, d.binding_conditions, d.binding_failure_conditions)
        for d in chosen
        if d.binding_conditions
    )
    if not chosen or any(d.node or d.binds_to_node for d in chosen):
        return ClaimAllocation(node, results, None, conditions, shares)
    exprs: list[Requirement] = []
    fields: list[Requirement] = []
    for d in chosen:
        if d.reach is not None:
            exprs.extend(r for r in d.reach.match_expressions if r not in exprs)
            fields.extend(r for r in d.reach.match_fields if r not in fields)
    if not exprs and not fields:
        return ClaimAllocation("", results, None, conditions, shares)
    return ClaimAllocation(
        "", results, AffinityTerm(tuple(exprs), tuple(fields)), conditions, shares
    )


def allocate_one_by_one(
    claims: Sequence[Claim],
    devices: Sequence[Device],
    classes: Mapping[str, DeviceClass],
    used: Collection[DeviceId],
    node: str,
    *,
    counters: Counters | None = None,
    consumed: Mapping[DeviceId, Mapping[str, int]] | None = None,
) -> Allocated | Unallocatable:
    """kube-scheduler's way, for comparison: each claim allocated in turn with the devices the
    earlier ones took, never revisited."""
    taken = set(used)
    left = None if counters is None else dict(counters)
    shares: Consumption = {d: dict(c) for d, c in (consumed or {}).items()}
    by_id = {d.id: d for d in devices}
    out: dict[str, ClaimAllocation] = {}
    for claim in claims:
        result = allocate([claim], devices, classes, taken, node, counters=left, consumed=shares)
        if isinstance(result, Unallocatable):
            return result
        alloc = result.allocations[claim.key]
        out[claim.key] = alloc
        taken.update(alloc.exclusive)
        first = {d for d in alloc.consumption() if d not in shares}
        for d, c in alloc.consumption().items():
            add_into(shares.setdefault(d, {}), c)
        if left is not None:
            for _, d in alloc.results:
                if by_id[d].multi and d not in first:
                    continue
                first.discard(d)
                for counter_set, name, n in by_id[d].consumes:
                    k = (d.driver, d.pool, counter_set, name)
                    left[k] = left.get(k, 0) - n
    return Allocated(out)


def _enough(s: _Search, claims: Sequence[Claim]) -> bool:
    """A necessary condition, before any search: the fewest devices the claims could take in
    all (each request's cheapest alternative) are no more than the free devices that some
    request could use."""
    if s.multi:
        return True  # a device allocatable many times may serve several requests
    least = 0
    usable: set[DeviceId] = set()
    for claim in claims:
        for request in claim.requests:
            cheapest: int | None = None
            for _, exact in request.options():
                candidates = s.matching(exact)
                if isinstance(candidates, str):
                    continue
                free = [d for d in candidates if s.free(d, exact)]
                if exact.admin_access:
                    continue  # holds nothing
                usable.update(d.id for d in free)
                n = exact.count if exact.mode is AllocationMode.EXACT_COUNT else len(candidates)
                cheapest = n if cheapest is None else min(cheapest, n)
            least += cheapest or 0
    return least <= len(usable)


# ---- the search -------------------------------------------------------------------------------
def _claim(
    s: _Search,
    claims: Sequence[Claim],
    ci: int,
    ri: int,
    results: list[list[tuple[str, DeviceId]]],
    values: list[list[object]],
) -> bool:
    """Satisfy request ``ri`` of claim ``ci`` and everything after it."""
    if ci == len(claims):
        return True
    claim = claims[ci]
    if ri == len(claim.requests):
        state = s.state(ci + 1)
        if state in s.dead:
            return False
        if _claim(s, claims, ci + 1, 0, results, values):
            return True
        if not s.out_of_budget:
            s.dead.add(state)
        return False
    request = claim.requests[ri]
    covering = _constraints_of(claim, request.name)
    for path, exact in request.options():
        candidates = s.matching(exact)
        if isinstance(candidates, str):
            continue
        if exact.mode is AllocationMode.ALL:
            if _all(s, claims, ci, ri, path, exact, candidates, covering, results, values):
                return True
        elif _some(s, claims, ci, ri, path, exact, candidates, covering, results, values, 0, 0):
            return True
        if s.out_of_budget:
            return False
    return False


def _fits(
    d: Device, constraints: Sequence[MatchAttribute], covering: list[int], fixed: list[object]
) -> tuple[bool, list[tuple[int, object]]]:
    """Whether ``d`` keeps the claim's constraints; the values it newly fixes."""
    newly: list[tuple[int, object]] = []
    for i in covering:
        value = d.attributes.get(constraints[i].attribute)
        if value is None:
            return False, []
        current = fixed[i]
        if constraints[i].distinct:
            seen = current if isinstance(current, tuple) else ()
            if any(v == value and type(v) is type(value) for v in seen):
                return False, []
            newly.append((i, value))
        elif current is None:
            newly.append((i, value))
        elif current != value or type(current) is not type(value):
            return False, []
    return True, newly


def _fix(
    fixed: list[object], constraints: Sequence[MatchAttribute], newly: list[tuple[int, object]]
) -> None:
    """Record the values a device fixed (``_fits``'s ``newly``)."""
    for i, v in newly:
        if constraints[i].distinct:
            seen = fixed[i]
            fixed[i] = (*(seen if isinstance(seen, tuple) else ()), v)
        else:
            fixed[i] = v


def _unfix(
    fixed: list[object], constraints: Sequence[MatchAttribute], newly: list[tuple[int, object]]
) -> None:
    """Undo the last ``_fix`` of ``newly``."""
    for i, _ in reversed(newly):
        if constraints[i].distinct:
            seen = fixed[i]
            rest = seen[:-1] if isinstance(seen, tuple) else ()
            fixed[i] = rest or None
        else:
            fixed[i] = None


def _spend(s: _Search, n: int) -> bool:
    """Count ``n`` device choices against the bound: False once it is passed."""
    s.steps += n
    if s.steps > s.budget:
        s.out_of_budget = True
        return False
    return True


def _take(
    s: _Search,
    exact: ExactRequest,
    result: list[tuple[str, DeviceId]],
    path: str,
    devices: Sequence[Device],
) -> None:
    """The devices serve ``path``: held by this search (but for admin access); a device
    allocatable many times is shared, consuming its capacity."""
    for d in devices:
        if d.multi:
            consumed = s.consume_of(d, exact) or {}
            first = d.id not in s.capacity
            add_into(s.capacity.setdefault(d.id, {}), consumed)
            s.log.append((d.id, consumed, first))
            if first:
                s.consume((d,), 1)
        elif not exact.admin_access:
            s.taken.add(d.id)
            s.consume((d,), 1)
        else:
            if d.consumes:
                s.admin_counted.append(d.id)
            s.consume((d,), 1)
        result.append((path, d.id))


def _give_back(
    s: _Search, exact: ExactRequest, result: list[tuple[str, DeviceId]], devices: Sequence[Device]
) -> None:
    """Undo the last ``_take`` of ``devices``."""
    del result[len(result) - len(devices) :]
    for d in reversed(devices):
        if d.multi:
            device, consumed, first = s.log.pop()
            entry = s.capacity[device]
            for name, amount in consumed.items():
                entry[name] -= amount
            if first:
                del s.capacity[device]
                s.consume((d,), -1)
        elif not exact.admin_access:
            s.taken.discard(d.id)
            s.consume((d,), -1)
        else:
            if d.consumes:
                s.admin_counted.remove(d.id)
            s.consume((d,), -1)


def _some(
    s: _Search,
    claims: Sequence[Claim],
    ci: int,
    ri: int,
    path: str,
    exact: ExactRequest,
    candidates: list[Device],
    covering: list[int],
    results: list[list[tuple[str, DeviceId]]],
    values: list[list[object]],
    start: int,
    chosen: int,
) -> bool:
    """Choose the remaining ``exact.count - chosen`` devices from ``candidates[start:]``."""
    if chosen == exact.count:
        return _claim(s, claims, ci, ri + 1, results, values)
    claim = claims[ci]
    fixed = values[ci]
    need = exact.count - chosen
    for k in range(start, len(candidates) - need + 1):
        d = candidates[k]
        if not s.free(d, exact):
            continue
        ok, newly = _fits(d, claim.constraints, covering, fixed)
        if not ok:
            continue
        if not _spend(s, 1):
            return False
        _fix(fixed, claim.constraints, newly)
        _take(s, exact, results[ci], path, (d,))
        if _some(
            s, claims, ci, ri, path, exact, candidates, covering, results, values, k + 1, chosen + 1
        ):
            return True
        _give_back(s, exact, results[ci], (d,))
        _unfix(fixed, claim.constraints, newly)
        if s.out_of_budget:
            return False
    return False


def _all(
    s: _Search,
    claims: Sequence[Claim],
    ci: int,
    ri: int,
    path: str,
    exact: ExactRequest,
    candidates: list[Device],
    covering: list[int],
    results: list[list[tuple[str, DeviceId]]],
    values: list[list[object]],
) -> bool:
    """Every matching device, none in use, at least one."""
    if not candidates or not all(s.free(d, exact) for d in candidates):
        return False
    if not s.room(*candidates):
        return False
    claim = claims[ci]
    fixed = values[ci]
    set_here: list[tuple[int, object]] = []
    for d in candidates:
        ok, newly = _fits(d, claim.constraints, covering, fixed)
        if not ok:
            _unfix(fixed, claim.constraints, set_here)
            return False
        _fix(fixed, claim.constraints, newly)
        set_here.extend(newly)
    if not _spend(s, len(candidates)):
        _unfix(fixed, claim.constraints, set_here)
        return False
    _take(s, exact, results[ci], path, candidates)
    if _claim(s, claims, ci, ri + 1, results, values):
        return True
    _give_back(s, exact, results[ci], candidates)
    _unfix(fixed, claim.constraints, set_here)
    return False


# ---- why not ---------------------------------------------------------------------------------
def _diagnose(s: _Search, claims: Sequence[Claim]) -> str:
    """The first request that no device could serve even alone, else a joint shortage."""
    s.taken.clear()
    for claim in claims:
        for request in claim.requests:
            reasons = []
            for path, exact in request.options():
                candidates = s.matching(exact)
                if isinstance(candidates, str):
                    reasons.append(candidates)
                    continue
                free = [d for d in candidates if s.free(d, exact)]
                wanted = len(candidates) if exact.mode is AllocationMode.ALL else exact.count
                if exact.mode is AllocationMode.ALL and len(free) < len(candidates):
                    reasons.append(
                        f"{path}: all {len(candidates)} matching device(s) wanted, "
                        f"{len(candidates) - len(free)} in use"
                    )
                elif len(free) < max(wanted, 1):
                    uncounted = sum(1 for d in candidates if s.free(d, exact, counted=False))
                    partitioned = (
                        f" (of {uncounted} free, the counters of their partitionable pool "
                        "leave too little for the rest)"
                        if uncounted > len(free)
                        else ""
                    )
                    reasons.append(
                        f"{path}: needs {max(wanted, 1)} device(s) of class "
                        f"{exact.device_class}, {len(free)} available on node {s.node}"
                        + partitioned
                    )
                else:
                    reasons = []
                    break
            if reasons:
                return f"claim {claim.key}: " + "; ".join(reasons)
    total = sum(
        exact.count
        for c in claims
        for r in c.requests
        for _, exact in r.options()[:1]
        if exact.mode is AllocationMode.EXACT_COUNT
    )
    free_all = sum(1 for d in s.devices if (d.node == s.node or not d.node) and d.id not in s.used)
    return (
        f"no assignment of devices on node {s.node} satisfies all {len(claims)} claim(s) at "
        f"once ({total} device(s) asked, {free_all} free there; selectors and constraints "
        "leave no joint choice)"
    )
