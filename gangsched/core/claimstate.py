"""The Dynamic Resource Allocation state the cache holds: the devices drivers publish per node,
the device classes, the resource claims as written, and the allocations the scheduler has
chosen for the claims of pods it assumed but has not bound (tentative, as the volume binder's
assumed claims are).

A pod with claims fits a node when every claim it uses can be served there together with the
claims of the pods already assumed on that node in this gang cycle: the allocation is searched
for all of them at once (core/claimalloc.py), so a later member may move the devices an
earlier member was given, as long as nothing is written yet. A claim allocated already (by
this scheduler or another) serves only the node it was allocated on, and its devices are used;
a claim another assumed pod holds tentatively likewise. ``prebind`` gives the allocations a
gang's binding must write first, all of them before any member binds.
"""

from __future__ import annotations

from collections.abc import Iterable

from gangsched.core.claimalloc import Allocated, allocate
from gangsched.core.decisions import ClaimWrite
from gangsched.core.model import Pod
from gangsched.core.resourceclaims import Claim, ClaimAllocation, Device, DeviceClass, DeviceId

__all__ = ["ClaimCatalog"]


class ClaimCatalog:
    def __init__(self) -> None:
        self._slices: dict[str, tuple[Device, ...]] = {}  # slice key -> its devices
        self._by_node: dict[str, list[Device]] = {}  # node -> devices, in slice and list order
        self.classes: dict[str, DeviceClass] = {}
        self.claims: dict[str, Claim] = {}
        self._allocated: dict[DeviceId, str] = {}  # device -> the claim that holds it (written)
        self._tentative: dict[str, ClaimAllocation] = {}  # claim -> chosen, not written
        self._holders: dict[str, set[str]] = {}  # tentative claim -> assumed pods using it
        self._held: dict[str, tuple[str, ...]] = {}  # assumed pod -> its claims
        # Tentative claims a binding decision carries (being written): never moved again.
        self._committed: set[str] = set()
        self.generation = 0

    # ---- what the watches say ----------------------------------------------------------
    def upsert_slice(self, key: str, devices: Iterable[Device]) -> None:
        self._slices[key] = tuple(devices)
        self._reindex()

    def remove_slice(self, key: str) -> None:
        if self._slices.pop(key, None) is not None:
            self._reindex()

    def upsert_class(self, device_class: DeviceClass) -> None:
        self.classes[device_class.name] = device_class
        self.generation += 1

    def remove_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self.generation += 1

    def upsert_claim(self, claim: Claim) -> None:
        old = self.claims.get(claim.key)
        if old is not None and old.allocation is not None:
            for d in old.allocation.devices:
                self._allocated.pop(d, None)
        self.claims[claim.key] = claim
        if claim.allocation is not None:
            for d in claim.allocation.devices:
                self._allocated[d] = claim.key
            self._tentative.pop(claim.key, None)  # written: the record now says it
            self._committed.discard(claim.key)
            self._holders.pop(claim.key, None)
        self.generation += 1

    def remove_claim(self, key: str) -> None:
        old = self.claims.pop(key, None)
        if old is not None and old.allocation is not None:
            for d in old.allocation.devices:
                self._allocated.pop(d, None)
        self.generation += 1

    def devices(self, node: str) -> list[Device]:
        return self._by_node.get(node, [])

    def _reindex(self) -> None:
        by_node: dict[str, list[Device]] = {}
        for key in sorted(self._slices):
            for d in self._slices[key]:
                by_node.setdefault(d.node, []).append(d)
        self._by_node = by_node
        self.generation += 1

    # ---- placement ---------------------------------------------------------------------
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
                if where.node != node:
                    return f"resource claim {key} is allocated on node {where.node}"
                continue
            if all(c.key != key for c in pending):
                pending.append(claim)
        if not pending:
            return {}
        here = [
            self.claims[k]
            for k, a in sorted(self._tentative.items())
            if a.node == node and k in self.claims and k not in self._committed
        ]
        joint = here + pending
        keys = {c.key for c in joint}
        used = {d for d, holder in self._allocated.items() if holder not in keys}
        for k in self._committed:
            committed = self._tentative.get(k)
            if committed is not None:
                used.update(committed.devices)
        result = allocate(joint, self.devices(node), self.classes, used, node)
        if not isinstance(result, Allocated):
            return result.message
        return dict(result.allocations)

    def assume(self, pod: Pod, node: str) -> bool:
        """The pod is assumed on the node: its claims (and those of the pods already assumed
        there) get the allocations ``fit`` finds. False when none fits (nothing changes)."""
        found = self.fit(pod, node)
        if isinstance(found, str):
            return False
        self._tentative.update(found)
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
                self._tentative.pop(key, None)
                self._committed.discard(key)
        self.generation += 1

    def prebind(self, uids: Iterable[str]) -> tuple[ClaimWrite, ...]:
        """The allocations a binding of these pods must write first, one per claim; from now
        on they are not moved."""
        out: dict[str, ClaimWrite] = {}
        for uid in uids:
            for key in self._held.get(uid, ()):
                alloc = self._tentative.get(key)
                claim = self.claims.get(key)
                if alloc is None or claim is None or key in out:
                    continue
                pods = tuple(sorted(self._holders.get(key, ())))
                out[key] = ClaimWrite(key, claim.uid, alloc, pods)
                self._committed.add(key)
        return tuple(out[k] for k in sorted(out))

    def tentative(self, key: str) -> ClaimAllocation | None:
        return self._tentative.get(key)
