"""The Dynamic Resource Allocation state the cache holds: the devices drivers publish per node,
the device classes, the resource claims as written, and the allocations the scheduler has
chosen for the claims of pods it assumed but has not bound (tentative, as the volume binder's
assumed claims are).

A pod with claims fits a node when every claim it uses can be served there together with the
claims of the pods already assumed on that node in this gang cycle: the allocation is searched
for all of them at once (core/claimalloc.py), so a later member may move the devices an
earlier member was given, as long as nothing is written yet. A claim allocated already (by
this scheduler or another) serves only the node it was allocated on (or, its devices all from
slices not for one node, the nodes its node selector matches), and its devices are used; a
claim another assumed pod holds tentatively likewise. ``prebind`` gives the allocations a
gang's binding must write first, all of them before any member binds.

Devices that reach many nodes (slices for every node or a node selector) are offered to every
node they reach; a claim shared by a whole gang can hold one and serve every member, wherever
each is placed among those nodes. Partitionable pools publish counter sets; what the devices
held (written or tentative) consume is taken from them before a search.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping

from gangsched.core.claimalloc import Allocated, Counters, allocate, reaches, serves
from gangsched.core.decisions import ClaimWrite
from gangsched.core.model import Pod
from gangsched.core.resourceclaims import (
    CLASS_PREFIX,
    AllocationMode,
    Claim,
    ClaimAllocation,
    CounterTotal,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
)
from gangsched.core.resources import add_into, sub_into

__all__ = ["MAX_RESERVED", "ClaimCatalog"]

# The most consumers a claim may be reserved for (resource.k8s.io ResourceClaimReservedForMaxSize).
MAX_RESERVED = 256


_Pool = tuple[str, str]  # (driver, pool)
# What counting sees of a pod's claims: devices by class (the least each request may take), the
# first claim/request asking each class, whether counting can tell a fit, and the first class
# with its count (what packing scores).
_Asked = tuple[dict[str, int], dict[str, str], bool, tuple[str, int]]


def _least(request: DeviceRequest) -> tuple[str, int] | None:
    """The one class and the least count a request may take, when every alternative asks an
    ``ExactCount`` of that class; None otherwise (``All``, alternatives of several classes)."""
    options = request.options()
    if not options or any(r.mode is not AllocationMode.EXACT_COUNT for _, r in options):
        return None
    classes = {r.device_class for _, r in options}
    if len(classes) != 1:
        return None
    return classes.pop(), min(r.count for _, r in options)


class ClaimCatalog:
    def __init__(self, labels: Callable[[str], Mapping[str, str]] | None = None) -> None:
        # a node's labels, for devices and allocations that reach the nodes a selector matches
        self._labels: Callable[[str], Mapping[str, str]] = labels or (lambda _: {})
        self._slices: dict[str, tuple[Device, ...]] = {}  # slice key -> its devices
        self._node_slices: dict[str, set[str]] = {}  # node -> keys of its slices
        self._by_node: dict[str, list[Device]] = {}  # node -> devices, in slice and list order
        # devices not local to one node (slices for every node, or a node selector), in slice
        # and list order; a count that moves whenever they or what holds them change
        self._shared: list[Device] = []
        self._shared_ids: set[DeviceId] = set()
        self._shared_gen = 0
        self._device_node: dict[DeviceId, str] = {}  # device -> its node ('' when shared)
        # partitionable pools: the counter sets (slice key -> (driver, pool, set, counter,
        # total)), their totals by pool, and each pool's devices that consume counters
        self._counter_slices: dict[str, tuple[CounterTotal, ...]] = {}
        self._pool_totals: dict[_Pool, dict[tuple[str, str], int]] = {}
        self._pool_slices: dict[_Pool, set[str]] = {}  # pool -> slices with consuming devices
        self._pool_consumers: dict[_Pool, list[Device]] = {}
        # node -> a count that moves whenever anything there changes (devices, allocations,
        # tentative claims): what a fit found stands until it moves
        self._node_gen: dict[str, int] = {}
        self._fits: dict[tuple[object, ...], bool] = {}
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, Claim] = {}
        # Objects the readers refused (a field the core does not model, a bad selector), with
        # why: a pod using one is told so, by name, instead of waiting for it to appear.
        self.refused_claims: dict[str, str] = {}
        self.refused_classes: dict[str, str] = {}
        # device -> the claim whose written allocation holds it
        self._held_by: dict[DeviceId, str] = {}
        self._tentative: dict[str, ClaimAllocation] = {}  # claim -> chosen, not written
        self._tentative_on: dict[str, set[str]] = {}  # node -> its tentative claims
        self._holders: dict[str, set[str]] = {}  # tentative claim -> assumed pods using it
        self._held: dict[str, tuple[str, ...]] = {}  # assumed pod -> its claims
        # pod uid -> the claim made in the API for its extended resources, and the one the
        # core made and has not written yet (DRA extended resources, core/extended.py)
        self._owned: dict[str, str] = {}
        self._made: dict[str, str] = {}
        # pod uid -> its request mappings (container, resource, request), written to the
        # pod's status with the claim
        self._mappings: dict[str, tuple[tuple[str, str, str], ...]] = {}
        # Tentative claims a binding decision carries (being written): never moved again.
        self._committed: set[str] = set()
        self.generation = 0
        # class -> the devices its selectors match, for the gang capacity pre-check; dropped
        # whenever devices or classes change
        self._of_class: dict[str, frozenset[DeviceId]] = {}
        # class -> (some device it matches reaches many nodes, some consumes counters)
        self._class_flags: dict[str, tuple[bool, bool]] = {}
        self._held_total = 0  # devices written allocations hold, on every node
        # consumable capacity: devices allocatable many times or with request policies, by
        # slice; and what the written allocations' shares of them consume
        self._consumable: dict[str, tuple[Device, ...]] = {}
        self._consumed: dict[DeviceId, dict[str, int]] = {}
        # what-if: pods counted as gone, and the claims whose devices that frees
        self._lifted: set[str] = set()
        self._freed: set[str] = set()
        self._node_free: dict[str, int] = {}  # node -> its devices no written allocation holds
        self._free_nodes: dict[int, dict[str, None]] = {}  # that count -> the nodes, in order
        # (node, class) -> (node generation, devices of the class free of written
        # allocations, and of tentative ones too)
        self._free_cache: dict[tuple[str, str], tuple[int, int, int, int]] = {}
        # the last answer of _asked, with its first class and count (what packing scores)
        self._asked_last: tuple[str, int, _Asked | None] | None = None
        # the last node ``fits`` found surely fitting by counting: (pod uid, node, generation,
        # what it counted of the pod's first class), which ``packing`` then reads
        self._fit_last: tuple[str, str, int, tuple[int, int, int, int]] | None = None

    # ---- what the watches say ----------------------------------------------------------
    def upsert_slice(
        self,
        key: str,
        devices: Iterable[Device],
        counters: tuple[CounterTotal, ...] = (),
    ) -> None:
        """A slice's devices, or (a partitionable pool's) its counter sets: (driver, pool,
        set, counter, total)."""
        self._slice_changed(key, tuple(devices), counters)

    def slices(self) -> list[tuple[str, tuple[Device, ...], tuple[CounterTotal, ...]]]:
        """Every slice as last given: its key, devices and counter sets."""
        return [
            (key, devices, self._counter_slices.get(key, ()))
            for key, devices in self._slices.items()
        ]

    def remove_slice(self, key: str) -> None:
        self._slice_changed(key, None, ())

    def _slice_changed(
        self,
        key: str,
        new: tuple[Device, ...] | None,
        counters: tuple[CounterTotal, ...],
    ) -> None:
        self._of_class.clear()
        self._class_flags.clear()
        self._free_cache.clear()
        old = self._slices.get(key, ())
        if new is None:
            self._slices.pop(key, None)
            new = ()
        else:
            self._slices[key] = new
        for d in old:
            self._device_node.pop(d.id, None)
        for d in new:
            self._device_node[d.id] = d.node
        consumable = tuple(d for d in new if d.consumable)
        if consumable:
            self._consumable[key] = consumable
        else:
            self._consumable.pop(key, None)
        pools = {(d.id.driver, d.id.pool) for d in (*old, *new) if d.consumes}
        had = self._counter_slices.pop(key, ())
        if counters:
            self._counter_slices[key] = counters
        pools.update((c[0], c[1]) for c in (*had, *counters))
        for pool in pools:
            self._repool(pool, key, new)
        if any(not d.node for d in (*old, *new)):
            self._shared = [d for k in sorted(self._slices) for d in self._slices[k] if not d.node]
            self._shared_ids = {d.id for d in self._shared}
            self._shared_changed()
        for node in {d.node for d in (*old, *new) if d.node}:
            keys = self._node_slices.setdefault(node, set())
            if any(d.node == node for d in new):
                keys.add(key)
            else:
                keys.discard(key)
            self._reindex(node)

    def _repool(self, pool: _Pool, key: str, devices: tuple[Device, ...]) -> None:
        """A partitionable pool's counter totals and consuming devices, again."""
        slices = self._pool_slices.setdefault(pool, set())
        if any(d.consumes and (d.id.driver, d.id.pool) == pool for d in devices):
            slices.add(key)
        else:
            slices.discard(key)
        consumers = [
            d
            for k in sorted(slices)
            for d in self._slices.get(k, ())
            if d.consumes and (d.id.driver, d.id.pool) == pool
        ]
        totals = {
            (c[2], c[3]): c[4]
            for k in sorted(self._counter_slices)
            for c in self._counter_slices[k]
            if (c[0], c[1]) == pool
        }
        for d in (*self._pool_consumers.get(pool, ()), *consumers):
            if d.node:
                self._changed(d.node, False)
        if consumers:
            self._pool_consumers[pool] = consumers
        else:
            self._pool_consumers.pop(pool, None)
            self._pool_slices.pop(pool, None)
        if totals:
            self._pool_totals[pool] = totals
        else:
            self._pool_totals.pop(pool, None)
        self._shared_changed()

    def node_changed(self, node: str) -> None:
        """The node's labels changed: the devices (and allocations) that reach it may too."""
        if self._shared or any(not a.node for a in self._tentative.values()):
            self._changed(node)

    def _shared_changed(self) -> None:
        """What every node's fit may depend on changed (shared devices, counters)."""
        self._shared_gen += 1
        self.generation += 1

    def upsert_class(self, device_class: DeviceClass) -> None:
        self._of_class.clear()
        self._class_flags.clear()
        self._free_cache.clear()
        self.classes[device_class.name] = device_class
        self.refused_classes.pop(device_class.name, None)
        self.generation += 1

    def remove_class(self, name: str) -> None:
        self._of_class.clear()
        self._class_flags.clear()
        self._free_cache.clear()
        self.classes.pop(name, None)
        self.refused_classes.pop(name, None)
        self.generation += 1

    def extended(self, resource: str) -> str:
        """The DeviceClass that serves ``resource`` as a DRA extended resource, '' if none:
        ``deviceclass.resource.kubernetes.io/<class>`` is the class's own; of the classes whose
        ``extendedResourceName`` it is, the newest (the lower name when as new), as
        kube-scheduler picks."""
        if resource.startswith(CLASS_PREFIX):
            name = resource[len(CLASS_PREFIX) :]
            return name if name in self.classes else ""
        best: DeviceClass | None = None
        for cls in self.classes.values():
            if cls.extended_resource == resource and (
                best is None
                or cls.created > best.created
                or (cls.created == best.created and cls.name < best.name)
            ):
                best = cls
        return "" if best is None else best.name

    # ---- claims made for pods' extended resources -----------------------------------------
    def owned(self, uid: str) -> str:
        """The key of the claim made in the API for the pod's extended resources (by this
        scheduler or kube-scheduler), '' when the watch has shown none."""
        return self._owned.get(uid, "")

    def map_requests(self, uid: str, mappings: tuple[tuple[str, str, str], ...]) -> None:
        """Which of the pod's containers use which request of its extended resources' claim
        (none: the pod has no such claim any more)."""
        if mappings:
            self._mappings[uid] = mappings
        else:
            self._mappings.pop(uid, None)

    def make(self, claim: Claim) -> None:
        """A claim the core makes for a pod's extended resources (``Claim.unwritten``): it is
        allocated like any other, and created in the API when its pod binds."""
        assert claim.made_for
        old = self._made.get(claim.made_for)
        if old is not None and old != claim.key:
            self.retire(claim.made_for)
        if self.claims.get(claim.key) != claim:
            self.claims[claim.key] = claim
            self.generation += 1
        self._made[claim.made_for] = claim.key

    def retire(self, uid: str) -> None:
        """The claim the core made for the pod is done with: the pod is gone, or the claim
        created for it in the API now holds the devices (as watched)."""
        key = self._made.pop(uid, None)
        if key is None:
            return
        self._drop_tentative(key)
        self._committed.discard(key)
        self._holders.pop(key, None)
        self.claims.pop(key, None)
        self.generation += 1

    def refuse_class(self, name: str, reason: str) -> None:
        """The DeviceClass exists but cannot be used: no claim of it is allocated."""
        self.remove_class(name)
        self.refused_classes[name] = reason

    def refuse_claim(self, key: str, reason: str) -> None:
        """The ResourceClaim exists but cannot be read. Its devices stay held as last read
        (a claim that was allocated still holds them); no pod is placed on the strength of it."""
        self.refused_claims[key] = reason
        self.generation += 1

    def why_not(self, pod: Pod) -> str:
        """Why none of the pod's claims can be allocated on any node, whatever the devices:
        a claim still to be made, missing, refused, being deleted, or of a class that is
        refused; '' otherwise."""
        if pod.claims_waiting:
            return pod.claims_waiting
        for key in pod.resource_claims:
            refused = self.refused_claims.get(key)
            if refused is not None:
                return f"resource claim {key} cannot be used: {refused}"
            claim = self.claims.get(key)
            if claim is None:
                return f"resource claim {key} does not exist yet"
            if claim.deleting:
                return f"resource claim {key} is being deleted"
            if pod.uid not in claim.reserved_for and len(claim.reserved_for) >= MAX_RESERVED:
                return (
                    f"resource claim {key} is reserved for {MAX_RESERVED} consumers already, "
                    "the most it may be"
                )
            if claim.allocation is None:
                for request in claim.requests:
                    for _, exact in request.options():
                        why = self.refused_classes.get(exact.device_class)
                        if why is not None:
                            return f"device class {exact.device_class} cannot be used: {why}"
        return ""

    def upsert_claim(self, claim: Claim) -> None:
        self.refused_claims.pop(claim.key, None)
        old = self.claims.get(claim.key)
        if old is not None and old.allocation is not None:
            self._unallocate(old.key, old.allocation)
        self.claims[claim.key] = claim
        if claim.made_for:
            self._owned[claim.made_for] = claim.key
            if claim.allocation is not None:
                self.retire(claim.made_for)  # written: it holds the devices now
        if claim.allocation is not None:
            self._hold(claim)
            self._drop_tentative(claim.key)  # written: the record now says it
            self._committed.discard(claim.key)
            self._holders.pop(claim.key, None)
        self.generation += 1

    def remove_claim(self, key: str) -> None:
        self.refused_claims.pop(key, None)
        old = self.claims.pop(key, None)
        if old is not None and old.made_for and self._owned.get(old.made_for) == key:
            del self._owned[old.made_for]
        if old is not None and old.allocation is not None:
            self._unallocate(key, old.allocation)
        self.generation += 1

    def _unallocate(self, key: str, allocation: ClaimAllocation) -> None:
        for d in allocation.exclusive:
            if self._held_by.get(d) == key:
                del self._held_by[d]
                self._held_total -= 1
        for d, consumed in allocation.consumption().items():
            entry = self._consumed.get(d)
            if entry is not None:
                sub_into(entry, consumed)
                if not entry:
                    del self._consumed[d]
        self._touch(allocation, held=True)

    def _touch(self, allocation: ClaimAllocation, held: bool = False) -> None:
        """Whatever the allocation's devices bear on changed (``held``: who holds them, written,
        so the device index counts again)."""
        if allocation.node and not self._shared_ids and not self._pool_consumers:
            self._changed(allocation.node, held)  # (a node's own devices only)
            return
        nodes = {self._device_node.get(d, allocation.node) for d in allocation.devices}
        nodes.add(allocation.node)
        for node in nodes:
            if node:
                self._changed(node, held)
        if "" in nodes or any(d in self._shared_ids for d in allocation.devices):
            self._shared_changed()
        if self._pool_consumers:  # the counters of a pool bear on every device in it
            for pool in {(d.driver, d.pool) for d in allocation.devices}:
                for n in {d.node for d in self._pool_consumers.get(pool, ())} - nodes:
                    if n:
                        self._changed(n, False)

    def _drop_tentative(self, key: str) -> None:
        alloc = self._tentative.pop(key, None)
        if alloc is not None:
            self._touch(alloc)
            on = self._tentative_on.get(alloc.node)
            if on is not None:
                on.discard(key)
                if not on:
                    del self._tentative_on[alloc.node]

    def _set_tentative(self, key: str, alloc: ClaimAllocation) -> None:
        self._drop_tentative(key)
        self._tentative[key] = alloc
        self._tentative_on.setdefault(alloc.node, set()).add(key)
        self._touch(alloc)

    def devices(self, node: str) -> list[Device]:
        return self._by_node.get(node, [])

    def _reindex(self, node: str) -> None:
        keys = self._node_slices.get(node)
        if not keys:
            self._node_slices.pop(node, None)
            self._by_node.pop(node, None)
        else:
            self._by_node[node] = [
                d for key in sorted(keys) for d in self._slices[key] if d.node == node
            ]
        self._changed(node)

    def _changed(self, node: str, recount: bool = True) -> None:
        """Something on the node changed; ``recount``: its devices or what written
        allocations hold there, which the device index counts."""
        self._node_gen[node] = self._node_gen.get(node, 0) + 1
        self.generation += 1
        if len(self._fits) > 100_000:
            self._fits.clear()
        if not recount:
            return
        # the device index: nodes by how many of their devices no written allocation holds
        free = sum(1 for d in self._by_node.get(node, ()) if d.id not in self._held_by)
        was = self._node_free.get(node)
        if was == free:
            return
        if was is not None:
            bucket = self._free_nodes[was]
            del bucket[node]
            if not bucket:
                del self._free_nodes[was]
        if node in self._by_node:
            self._node_free[node] = free
            self._free_nodes.setdefault(free, {})[node] = None
        else:
            self._node_free.pop(node, None)

    def candidates(self, pod: Pod, emptiest_first: bool = False) -> list[str] | None:
        """The nodes the pod's claims may fit on, the tightest first (fewest devices no
        written allocation holds; the emptiest first with ``emptiest_first``): the node of a
        claim allocated already, or the nodes with at least as many such devices as the
        claims ask. None when counting cannot narrow it (every node is a candidate)."""
        reached = False  # a claim allocated for many nodes: counting cannot narrow it
        for key in pod.resource_claims:
            claim = self.claims.get(key)
            where = None if claim is None else claim.allocation or self._tentative.get(key)
            if where is not None:
                if where.node:
                    return [where.node]
                reached = True
        if reached:
            return None
        asked = self._asked(pod)
        if asked is None:
            return None
        need = sum(asked[0].values())
        keys = sorted((k for k in self._free_nodes if k >= need), reverse=emptiest_first)
        return [n for k in keys for n in self._free_nodes[k]]

    # ---- placement ---------------------------------------------------------------------
    def fits(self, pod: Pod, node: str) -> str:
        """'' when ``pod``'s claims can be allocated on ``node`` (with the tentative claims
        there), else why not.

        Counting before searching: '' when the pod's claims surely fit (each asks plain counts
        of one class, and the node has that many devices of the class that no allocation,
        written or tentative, holds), a reason when they surely do not (fewer devices of a
        class than the claims ask, not counting the tentative ones, which the search could
        move). Only then the search, remembered per node state and claim shapes: pods whose
        claims ask the same (a gang's members, one claim each from one template) cost one
        search per node until something on the node changes. (One function: it runs for every
        candidate node of every pod with claims.)"""
        last = self._asked_last  # (the memo of _asked, read here)
        if last is not None and last[0] == pod.uid and last[1] == self.generation:
            asked = last[2]
        else:
            asked = self._asked(pod)
        if asked is not None:
            want, first, sure, _ = asked
            gen = self._node_gen.get(node, 0)
            cache = self._free_cache
            lead = None
            for cls, n in want.items():
                counted = cache.get((node, cls))
                if counted is None or counted[0] != gen:
                    if cls not in self.classes:
                        sure = False
                        break
                    counted = self._counted(node, cls)
                _, unwritten, untouched, _ = counted
                if unwritten < n:
                    return (
                        f"{first[cls]}: needs {n} device(s) of class {cls}, {unwritten} "
                        f"available on node {node}"
                    )
                if untouched < n:
                    sure = False
                if lead is None:
                    lead = counted
            if sure:
                if lead is not None:
                    self._fit_last = (pod.uid, node, self.generation, lead)
                return ""
        key = self._shape_key(pod, node)
        if key is not None:
            known = self._fits.get(key)
            if known is True:
                return ""
        found = self.fit(pod, node)
        if isinstance(found, str):
            return found
        if key is not None:
            self._fits[key] = True
        return ""

    def _asked(self, pod: Pod) -> _Asked | None:
        """What ``fits`` counts of the pod: devices by class (the least a request may take),
        the first claim/request asking each class, and whether counting can tell a fit (no
        selectors, constraints or alternatives); None when counting cannot tell anything.
        Remembered for the pod until anything changes (one search for a pod asks it once)."""
        last = self._asked_last
        if last is not None and last[0] == pod.uid and last[1] == self.generation:
            return last[2]
        out = self._count_asked(pod)
        self._asked_last = (pod.uid, self.generation, out)
        return out

    def _count_asked(self, pod: Pod) -> _Asked | None:
        sure = True
        want: dict[str, int] = {}
        first: dict[str, str] = {}
        for key in pod.resource_claims:
            claim = self.claims.get(key)
            if claim is None or claim.allocation is not None or key in self._tentative:
                return None
            if claim.constraints:
                sure = False
            for request in claim.requests:
                least = _least(request)
                options = request.options()
                if least is None or any(r.admin_access for _, r in options):
                    return None
                if any(r.capacity for _, r in options):
                    return None  # what a device has left decides
                if request.exactly is None or request.exactly.selectors:
                    sure = False
                cls, n = least
                shared, consuming = self._flags(cls)
                if shared:
                    return None  # devices off the node count too
                if consuming:
                    sure = False  # counters may leave fewer than the devices
                want[cls] = want.get(cls, 0) + n
                first.setdefault(cls, f"claim {key}: {options[0][0]}")
        lead = next(iter(want.items()), ("", 0))
        return want, first, sure, lead

    def _counted(self, node: str, cls: str) -> tuple[int, int, int, int]:
        gen = self._node_gen.get(node, 0)
        known = self._free_cache.get((node, cls))
        if known is not None and known[0] == gen:
            return known
        matching = self._matching(cls)
        held = self._held_by
        tentative = {
            d for k in self._tentative_on.get(node, ()) for d in self._tentative[k].devices
        }
        unwritten = untouched = total = 0
        for d in self.devices(node):
            if d.id in matching:
                total += 1
                if d.id not in held:
                    unwritten += 1  # (tainted or not: an upper bound)
                    if d.id not in tentative and not d.tainted:
                        untouched += 1
        counted = (gen, unwritten, untouched, total)
        self._free_cache[(node, cls)] = counted
        return counted

    def packing(self, pod: Pod, node: str) -> float:
        """How full the node's devices of the pod's (first) class are once the pod's claims
        take theirs, 0 to 100: the higher, the tighter the fit. 0 when counting cannot tell
        (claims allocated already, alternatives of several classes)."""
        last = self._asked_last  # (the memo of _asked, read here: this runs on every node)
        if last is not None and last[0] == pod.uid and last[1] == self.generation:
            asked = last[2]
        else:
            asked = self._asked(pod)
        if asked is None or not asked[0]:
            return 0.0
        cls, n = asked[3]
        fit = self._fit_last  # (what fits counted on this node, when it was the last one)
        if fit is not None and fit[1] == node and fit[0] == pod.uid and fit[2] == self.generation:
            counted = fit[3]
        elif cls not in self.classes:
            return 0.0
        else:
            counted = self._counted(node, cls)
        _, _, untouched, total = counted
        if total <= 0:
            return 0.0
        return min(100.0, 100.0 * (total - untouched + n) / total)

    def whole_devices(self, pod: Pod) -> tuple[str, int] | None:
        """The one class the pod's claims ask devices of, and how many (the least each request
        may take), when counting can tell; None otherwise (claims allocated already, several
        classes, admin access, devices for many nodes). What the fragmentation score rates a
        pod with claims as: that many whole GPUs."""
        asked = self._asked(pod)
        if asked is None or len(asked[0]) != 1:
            return None
        return asked[3]

    def device_usage(self, node: str, cls: str) -> tuple[int, int]:
        """The node's devices of the class: how many no allocation (written or tentative)
        holds, and how many there are."""
        if cls not in self.classes:
            return 0, 0
        _, _, free, total = self._counted(node, cls)
        return free, total

    def _shape_key(self, pod: Pod, node: str) -> tuple[object, ...] | None:
        """What a fit of ``pod`` on ``node`` depends on, or None when it depends on claims
        allocated or held elsewhere (no memo then)."""
        shapes = []
        for k in pod.resource_claims:
            claim = self.claims.get(k)
            if claim is None or claim.allocation is not None or k in self._tentative:
                return None
            shapes.append((claim.requests, claim.constraints))
        here = tuple(
            (self.claims[k].requests, self.claims[k].constraints)
            for k in sorted(self._tentative_on.get(node, ()))
            if k in self.claims
        )
        return (node, self._node_gen.get(node, 0), self._shared_gen, tuple(shapes), here)

    def fit(self, pod: Pod, node: str) -> dict[str, ClaimAllocation] | str:
        """The allocations (of the pod's claims and of the tentative claims already on the
        node) that let ``pod`` run on ``node``; or why it cannot."""
        pending: list[Claim] = []
        for key in pod.resource_claims:
            claim = self.claims.get(key)
            if claim is None:
                return f"resource claim {key} does not exist yet"
            where = claim.allocation or self._tentative.get(key)
            if where is not None:
                if not serves(where, node, {} if where.node else self._labels(node)):
                    return f"resource claim {key} is allocated {where.where}"
                continue
            if all(c.key != key for c in pending):
                pending.append(claim)
        if not pending:
            return {}
        quick = self._quick_fit(pending, node)
        if quick is not None:
            return quick
        on_node = self._tentative_on.get(node, ())
        here = [
            self.claims[k] for k in sorted(on_node) if k in self.claims and k not in self._committed
        ]
        joint = here + pending
        keys = {c.key for c in joint}
        devices = self.devices(node)
        if self._shared:
            labels = self._labels(node)
            devices = devices + [d for d in self._shared if reaches(d, node, labels)]
        held = self._held_by
        used = {d.id for d in devices if d.id in held and held[d.id] not in keys}
        for k in on_node:
            if k in self._committed:
                used.update(self._tentative[k].exclusive)
        if self._shared_ids:  # shared devices other nodes' tentative claims hold
            for k, a in self._tentative.items():
                if k not in keys:
                    used.update(d for d in a.exclusive if d in self._shared_ids)
        counters = self._counters_left(devices, keys) if self._pool_consumers else None
        consumed: dict[DeviceId, dict[str, int]] | None = None
        if self._consumable:  # what other claims' shares of devices consume
            consumed = {d: dict(c) for d, c in self._consumed.items()}
            for k, a in self._tentative.items():
                if k not in keys and a.shares:
                    for d, c in a.consumption().items():
                        add_into(consumed.setdefault(d, {}), c)
        result = allocate(
            joint, devices, self.classes, used, node, counters=counters, consumed=consumed
        )
        if not isinstance(result, Allocated):
            return result.message
        return dict(result.allocations)

    def _quick_fit(self, pending: list[Claim], node: str) -> dict[str, ClaimAllocation] | None:
        """Allocations for ``pending`` from the node's devices that no allocation, written or
        tentative, holds, when every request asks a plain count of one class (no selectors,
        constraints, admin access, tolerations) and such devices suffice: what the joint search
        would find without moving anything, without searching. None when that cannot be told
        (the search decides)."""
        if self._shared or self._pool_consumers or self._consumable:
            return None
        asks: list[tuple[str, str, frozenset[DeviceId], int]] = []
        for claim in pending:
            if claim.constraints:
                return None
            for r in claim.requests:
                e = r.exactly
                if (
                    e is None
                    or e.selectors
                    or e.admin_access
                    or e.tolerations
                    or e.capacity
                    or e.mode is not AllocationMode.EXACT_COUNT
                    or e.device_class not in self.classes
                ):
                    return None
                asks.append((claim.key, r.name, self._matching(e.device_class), e.count))
        held = self._held_by
        taken = {d for k in self._tentative_on.get(node, ()) for d in self._tentative[k].devices}
        results: dict[str, list[tuple[str, DeviceId]]] = {}
        devices = self.devices(node)
        for key, request, matching, count in asks:
            got = results.setdefault(key, [])
            for d in devices:
                if count == 0:
                    break
                if (
                    d.id in matching
                    and d.id not in held
                    and d.id not in taken
                    and not d.tainted
                    and not d.binding_conditions
                    and not d.binds_to_node
                ):
                    taken.add(d.id)
                    got.append((request, d.id))
                    count -= 1
            if count:
                return None
        return {key: ClaimAllocation(node, tuple(got)) for key, got in results.items()}

    def _counters_left(self, devices: list[Device], keys: Collection[str]) -> Counters | None:
        """What the counter sets of the pools of ``devices`` have left after every device
        held by a claim other than ``keys`` (written, or tentative) takes its share."""
        pools = {(d.id.driver, d.id.pool) for d in devices if d.consumes}
        if not pools:
            return None
        tentative = {d for k, a in self._tentative.items() if k not in keys for d in a.devices}
        left: Counters = {}
        for pool in pools:
            for (counter_set, name), total in self._pool_totals.get(pool, {}).items():
                left[(*pool, counter_set, name)] = total
            for d in self._pool_consumers.get(pool, ()):
                holder = self._held_by.get(d.id)
                if (
                    (holder is not None and holder not in keys)
                    or d.id in tentative
                    or (d.multi and d.id in self._consumed)  # (shared: its first share took them)
                ):
                    for counter_set, name, n in d.consumes:
                        k = (*pool, counter_set, name)
                        if k in left:
                            left[k] -= n
        return left

    def assume(self, pod: Pod, node: str) -> bool:
        """The pod is assumed on the node: its claims (and those of the pods already assumed
        there) get the allocations ``fit`` finds. False when none fits (nothing changes)."""
        found = self.fit(pod, node)
        if isinstance(found, str):
            return False
        for key, alloc in found.items():
            self._set_tentative(key, alloc)
        for key in pod.resource_claims:
            if key in self._tentative:
                self._holders.setdefault(key, set()).add(pod.uid)
        self._held[pod.uid] = pod.resource_claims
        self.generation += 1
        return True

    def forget(self, uid: str) -> None:
        """The pod's reservation is dropped: claims no other assumed pod uses lose their
        tentative allocation."""
        for key in self._held.pop(uid, ()):
            holders = self._holders.get(key)
            if holders is None:
                continue
            holders.discard(uid)
            if not holders:
                del self._holders[key]
                self._drop_tentative(key)
                self._committed.discard(key)
        self.generation += 1

    def unserved(self, placed: Iterable[tuple[Pod, str]]) -> str:
        """'' when every claim of every pod placed (pod, node) has an allocation, written or
        chosen, that serves it there; else which does not: a pod must never bind with a claim
        no device was allocated for (the filter and the reservation disagreeing is a defect,
        and this is its guard)."""
        for pod, node in placed:
            for key in pod.resource_claims:
                claim = self.claims.get(key)
                alloc = self._tentative.get(key) or (claim.allocation if claim else None)
                if alloc is None or not serves(
                    alloc, node, {} if alloc.node else self._labels(node)
                ):
                    return (
                        f"resource claim {key} of pod {pod.namespace}/{pod.name} has no "
                        f"allocation that serves node {node}; the gang was not bound"
                    )
        return ""

    def prebind(self, uids: Iterable[str]) -> tuple[ClaimWrite, ...]:
        """The allocations a binding of these pods must write first, one per claim; from now
        on they are not moved."""
        out: dict[str, ClaimWrite] = {}
        # claims allocated already (a shared claim, one a crash left written): the pods
        # that use it and are not yet among its consumers
        reserve: dict[str, list[str]] = {}
        for uid in uids:
            for key in self._held.get(uid, ()):
                alloc = self._tentative.get(key)
                claim = self.claims.get(key)
                if claim is None or key in out:
                    continue
                if alloc is None:
                    if claim.allocation is not None and uid not in claim.reserved_for:
                        reserve.setdefault(key, []).append(uid)
                    elif claim.allocation is not None and claim.allocation.conditions:
                        # reserved already (a crash after the writes): its devices' binding
                        # conditions are waited for again all the same
                        reserve.setdefault(key, [])
                    continue
                pods = tuple(sorted(self._holders.get(key, ())))
                out[key] = ClaimWrite(
                    key,
                    claim.uid,
                    alloc,
                    pods,
                    claim.made_for,
                    self._mappings.get(claim.made_for, ()) if claim.made_for else (),
                    claim if claim.unwritten else None,
                )
                if key not in self._committed:
                    self._committed.add(key)
                    # its devices are fixed from now on: what was found to fit there before
                    # (the fit memo, the counts) no longer holds
                    self._touch(alloc)
        for key, pods_ in reserve.items():
            claim = self.claims[key]
            assert claim.allocation is not None
            out[key] = ClaimWrite(
                key,
                claim.uid,
                claim.allocation,
                tuple(sorted(pods_)),
                claim.made_for,
                self._mappings.get(claim.made_for, ()) if claim.made_for else (),
            )
        return tuple(out[k] for k in sorted(out))

    # ---- capacity, for the gang pre-check ----------------------------------------------------
    def short_of_class(self, name: str, amount: int) -> int | None:
        """None when ``amount`` devices of the class are surely free, else how many are
        (``free_of_class``). Cheap while the class has ``amount`` devices more than every
        allocation holds, whatever their class."""
        if self._consumable and self._flags(name)[0]:
            return None  # (devices shared by many claims, or reaching many nodes: not counted)
        committed = sum(len(a.devices) for k in self._committed if (a := self._tentative.get(k)))
        if len(self._matching(name)) - self._held_total - committed >= amount:
            return None
        free = self.free_of_class(name)
        return None if free >= amount else free

    def _matching(self, name: str) -> frozenset[DeviceId]:
        matching = self._of_class.get(name)
        if matching is None:
            cls = self.classes.get(name)
            matching = frozenset(
                d.id
                for devices in (*self._by_node.values(), self._shared)
                for d in devices
                if cls is not None and all(s.matches(d) for s in cls.selectors)
            )
            self._of_class[name] = matching
        return matching

    def _flags(self, name: str) -> tuple[bool, bool]:
        """Whether some device of the class reaches many nodes, and whether some consumes
        counters: counting a node's own devices cannot tell a fit then."""
        flags = self._class_flags.get(name)
        if flags is None:
            cls = self.classes.get(name)
            shared = consuming = False
            if cls is not None and (self._shared or self._pool_consumers or self._consumable):
                for d in (
                    *self._shared,
                    *(d for ds in self._pool_consumers.values() for d in ds),
                    *(d for ds in self._consumable.values() for d in ds),
                ):
                    if all(s.matches(d) for s in cls.selectors):
                        # (a device allocatable many times: counting devices cannot tell)
                        shared = shared or not d.node or d.consumable
                        consuming = consuming or bool(d.consumes)
            flags = self._class_flags[name] = (shared, consuming)
        return flags

    def free_of_class(self, name: str) -> int:
        """Devices the class's selectors match, on every node, that no written or committed
        allocation holds."""
        matching = self._matching(name)
        held = sum(1 for d in matching if d in self._held_by)
        for k in self._committed:
            alloc = self._tentative.get(k)
            if alloc is not None:
                held += sum(1 for d in alloc.devices if d in matching)
        return len(matching) - held

    def demand(self, pod: Pod, skip: Collection[str] = ()) -> dict[str, int]:
        """A lower bound on the devices, by class, that the pod's claims (but those in
        ``skip``, and those allocated already) take: an ``ExactCount`` request its count; a
        ``firstAvailable`` one the least count of its alternatives when they are all of one
        class; an ``All`` request nothing (it takes what there is)."""
        out: dict[str, int] = {}
        for key in pod.resource_claims:
            claim = self.claims.get(key)
            if key in skip or claim is None or claim.allocation is not None:
                continue
            for request in claim.requests:
                least = _least(request)
                if least is not None:
                    out[least[0]] = out.get(least[0], 0) + least[1]
        return out

    # ---- what-if: pods counted as gone ---------------------------------------------------
    def lift(self, uid: str, claims: Iterable[str]) -> None:
        """What-if (preemption, reservations): the pod is counted as gone. A written claim
        whose every consumer is gone gives its devices back, as kube-controller-manager's
        resourceclaim controller deallocates it (or deletes it, made from a template) once
        its pods are gone. ``restore`` undoes it."""
        self._lifted.add(uid)
        for key in claims:
            claim = self.claims.get(key)
            if claim is None or claim.allocation is None or key in self._freed:
                continue
            if claim.reserved_for and all(u in self._lifted for u in claim.reserved_for):
                self._unallocate(key, claim.allocation)
                self._freed.add(key)
        self.generation += 1

    def restore(self, uid: str, claims: Iterable[str]) -> None:
        self._lifted.discard(uid)
        for key in claims:
            if key not in self._freed:
                continue
            self._freed.discard(key)
            claim = self.claims.get(key)
            if claim is not None and claim.allocation is not None:
                self._hold(claim)
        self.generation += 1

    def _hold(self, claim: Claim) -> None:
        assert claim.allocation is not None
        for d in claim.allocation.exclusive:
            if d not in self._held_by:
                self._held_total += 1
            self._held_by[d] = claim.key
        for d, consumed in claim.allocation.consumption().items():
            add_into(self._consumed.setdefault(d, {}), consumed)
        self._touch(claim.allocation, held=True)

    def holder(self, node: str, device: DeviceId) -> str:
        """The claim whose written allocation holds the device, '' when none does."""
        return self._held_by.get(device, "")

    def tentative(self, key: str) -> ClaimAllocation | None:
        return self._tentative.get(key)
