"""Storage objects for volume-aware placement, and the volume binder of kube-scheduler v1.36
(``pkg/scheduler/framework/plugins/volumebinding``), without any Kubernetes types.

The adapters translate PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes
into the dataclasses below; the ``VolumeCatalog`` held by the cluster cache keeps them as the
watches last saw them, plus what gangsched has *assumed* about them, kube-scheduler's assume
cache:

- placing a pod on a node (``ClusterCache.assume``) computes its ``VolumePlan`` for that node:
  which available static PersistentVolume each unbound WaitForFirstConsumer claim takes
  (pre-bound: the volume's ``claimRef`` is assumed set to the claim), and which claims are to
  be provisioned there (the claim's ``volume.kubernetes.io/selected-node`` is assumed set).
  The next member of the gang sees those assumptions at once, so two members never take the
  same static volume, and members sharing one unbound claim land where its volume will be;
- forgetting the pod (rollback, Permit release, failed binding, deletion) drops its
  assumptions; an assumption also ends once the watched object shows it;
- ``prebind`` lists what the adapter must write before binding any pod of a committed gang
  (``BindGang.volumes``).

Claim readiness follows kube-scheduler: a claim is bound when ``spec.volumeName`` is set and
it carries ``pv.kubernetes.io/bind-completed``; an unbound claim is *delayed* when its class
exists with ``volumeBindingMode: WaitForFirstConsumer`` and it names no volume, otherwise it
is an unbound *immediate* claim, which the PV controller must bind before the pod can be
scheduled. Storage capacity tracking (CSIStorageCapacity), VolumeAttachments and in-tree
volume plugins are not modelled (gangsched refuses in-tree volume types).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from gangsched.core.decisions import ClaimBinding
from gangsched.core.labels import selector_matches
from gangsched.core.match import term_matches
from gangsched.core.model import AffinityTerm, LabelSelector, Pod

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "BIND_CONFLICT",
    "NODE_CONFLICT",
    "NO_PROVISIONER",
    "PV_NOT_EXIST",
    "READ_WRITE_ONCE_POD",
    "UNBOUND_IMMEDIATE",
    "WAIT_FOR_FIRST_CONSUMER",
    "CSINode",
    "Claim",
    "ClaimRef",
    "PersistentVolume",
    "PodClaims",
    "StorageClass",
    "TopologyTerm",
    "VolumeCatalog",
    "VolumePlan",
    "pv_node_affinity_matches",
    "topology_allows",
]

ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
AVAILABLE = "Available"
LOST = "Lost"

# VolumeBinding's Filter reasons (kube-scheduler's ConflictReasons), in the order it lists them.
NODE_CONFLICT = "node(s) didn't match PersistentVolume's node affinity"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
PV_NOT_EXIST = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A PersistentVolume's ``spec.claimRef``: ``uid`` empty when the reference names none."""

    namespace: str
    name: str
    uid: str = ""


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim. ``storage_class`` is kube-scheduler's claim class (the beta
    ``volume.beta.kubernetes.io/storage-class`` annotation first, then
    ``spec.storageClassName``; empty for none); ``request`` is ``resources.requests.storage``
    in bytes; ``selector`` is ``spec.selector`` (None when absent); ``owner_uid`` is the uid
    of the object that controls the claim (for a generic ephemeral volume, its pod)."""

    namespace: str
    name: str
    uid: str = ""
    storage_class: str = ""
    volume_name: str = ""
    bind_completed: bool = False
    selected_node: str | None = None
    access_modes: frozenset[str] = frozenset()
    request: int = 0
    volume_mode: str = "Filesystem"
    attributes_class: str = ""
    selector: LabelSelector | None = None
    phase: str = "Pending"
    deleting: bool = False
    owner_uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        """Fully bound, as kube-scheduler's binder sees it."""
        return bool(self.volume_name) and self.bind_completed


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    """A PersistentVolume. ``node_affinity`` holds the terms of
    ``spec.nodeAffinity.required`` (ORed; None when the volume has no required node affinity);
    ``capacity`` is ``spec.capacity.storage`` in bytes; ``storage_class`` its class (beta
    annotation first); ``csi_driver`` / ``csi_handle`` come from ``spec.csi``."""

    name: str
    capacity: int = 0
    access_modes: frozenset[str] = frozenset()
    storage_class: str = ""
    volume_mode: str = "Filesystem"
    attributes_class: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    node_affinity: tuple[AffinityTerm, ...] | None = None
    claim_ref: ClaimRef | None = None
    phase: str = AVAILABLE
    deleting: bool = False
    csi_driver: str = ""
    csi_handle: str = ""


@dataclass(frozen=True, slots=True)
class TopologyTerm:
    """One ``allowedTopologies`` term: every ``(key, values)`` expression must hold (the node
    has the label, with one of the values)."""

    expressions: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: str = "Immediate"  # Immediate | WaitForFirstConsumer
    allowed_topologies: tuple[TopologyTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class CSINode:
    """A CSINode: the drivers installed on the node, and the attachable-volume count of those
    that publish one (``spec.drivers[].allocatable.count``)."""

    name: str
    drivers: frozenset[str] = frozenset()
    limits: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class _Candidates:
    """The node-independent part of matching a delayed claim to a static volume: the volume
    pre-bound to the claim (if one passes the size, mode and class-of-attributes checks), and
    the available volumes that could take it, smallest first."""

    prebound: PersistentVolume | None
    available: tuple[PersistentVolume, ...]


@dataclass(frozen=True, slots=True)
class PodClaims:
    """VolumeBinding's PreFilter result: the pod's bound claims, and its unbound
    WaitForFirstConsumer claims (smallest request first) with their static candidates."""

    bound: tuple[Claim, ...] = ()
    delayed: tuple[Claim, ...] = ()
    candidates: Mapping[str, _Candidates] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class VolumePlan:
    """What a pod's unbound claims need on one node: static volumes to pre-bind
    ``(claim, volume name)``, and claims to provision there."""

    node: str
    static: tuple[tuple[Claim, str], ...] = ()
    provision: tuple[Claim, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.static or self.provision)


def pv_node_affinity_matches(pv: PersistentVolume, labels: Mapping[str, str]) -> bool:
    """kube-scheduler's CheckNodeAffinity: the volume's required node selector terms against
    the node's labels only (a ``matchFields`` requirement never matches there)."""
    terms = pv.node_affinity
    if terms is None:
        return True
    return any(term_matches(t, labels, "") for t in terms)


def topology_allows(sc: StorageClass, labels: Mapping[str, str]) -> bool:
    """Whether a node satisfies a class's ``allowedTopologies`` (an empty list allows every
    node; an empty term, or an expression without values, allows none)."""
    if not sc.allowed_topologies:
        return True
    for term in sc.allowed_topologies:
        if not term.expressions:
            continue
        if all(values and labels.get(key) in values for key, values in term.expressions):
            return True
    return False


def _bound_to(pv: PersistentVolume, claim: Claim) -> bool:
    """kube's IsVolumeBoundToClaim: the volume's claimRef names the claim (and its uid, when
    the reference carries one)."""
    ref = pv.claim_ref
    if ref is None or ref.name != claim.name or ref.namespace != claim.namespace:
        return False
    return not ref.uid or ref.uid == claim.uid


def _fits(pv: PersistentVolume, claim: Claim) -> bool:
    """The checks FindMatchingVolume applies to every volume, pre-bound or not."""
    return (
        pv.capacity >= claim.request
        and pv.volume_mode == claim.volume_mode
        and pv.attributes_class == claim.attributes_class
        and not pv.deleting
    )


def _available_for(pv: PersistentVolume, claim: Claim) -> bool:
    """The further checks for a volume nobody claims yet (node affinity aside)."""
    return (
        pv.claim_ref is None
        and pv.phase == AVAILABLE
        and (claim.selector is None or selector_matches(claim.selector, pv.labels))
        and pv.storage_class == claim.storage_class
        and claim.access_modes <= pv.access_modes
    )


@dataclass(slots=True)
class _Assumption:
    value: object  # the node (str) for a claim, the ClaimRef for a volume
    holders: set[str]


class VolumeCatalog:
    """The storage objects the watches delivered, and gangsched's assumptions about them."""

    def __init__(self) -> None:
        self.claims: dict[str, Claim] = {}  # "namespace/name" -> claim, as last watched
        self.volumes: dict[str, PersistentVolume] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csi_nodes: dict[str, CSINode] = {}
        self._by_class: dict[str, dict[str, None]] = {}  # class -> volume names
        self._assumed_claims: dict[str, _Assumption] = {}  # claim key -> selected node
        self._assumed_volumes: dict[str, _Assumption] = {}  # volume -> ClaimRef
        self._plans: dict[str, VolumePlan] = {}  # pod uid -> what it assumed
        # Counted pods (bound or reserved) per non-ephemeral claim they mount: the
        # ReadWriteOncePod check.
        self.claim_users: dict[str, int] = {}
        self._counted: dict[str, tuple[str, ...]] = {}

    # ---- objects -----------------------------------------------------------------------
    def upsert_claim(self, claim: Claim) -> bool:
        """Store a claim; True when it changed."""
        key = claim.key
        old = self.claims.get(key)
        self.claims[key] = claim
        held = self._assumed_claims.get(key)
        if held is not None and (claim.volume_name or claim.selected_node == held.value):
            del self._assumed_claims[key]  # the API now shows what was assumed
        return old != claim

    def remove_claim(self, namespace: str, name: str) -> bool:
        key = f"{namespace}/{name}"
        self._assumed_claims.pop(key, None)
        return self.claims.pop(key, None) is not None

    def upsert_volume(self, pv: PersistentVolume) -> bool:
        old = self.volumes.get(pv.name)
        if old is not None and old.storage_class != pv.storage_class:
            self._unindex(old)
        self.volumes[pv.name] = pv
        self._by_class.setdefault(pv.storage_class, {})[pv.name] = None
        held = self._assumed_volumes.get(pv.name)
        if held is not None and pv.claim_ref is not None:
            ref = held.value
            assert isinstance(ref, ClaimRef)
            if (pv.claim_ref.namespace, pv.claim_ref.name) == (ref.namespace, ref.name):
                del self._assumed_volumes[pv.name]
        return old != pv

    def remove_volume(self, name: str) -> bool:
        old = self.volumes.pop(name, None)
        self._assumed_volumes.pop(name, None)
        if old is None:
            return False
        self._unindex(old)
        return True

    def _unindex(self, pv: PersistentVolume) -> None:
        names = self._by_class.get(pv.storage_class)
        if names is not None:
            names.pop(pv.name, None)
            if not names:
                del self._by_class[pv.storage_class]

    def upsert_class(self, sc: StorageClass) -> bool:
        old = self.classes.get(sc.name)
        self.classes[sc.name] = sc
        return old != sc

    def remove_class(self, name: str) -> bool:
        return self.classes.pop(name, None) is not None

    def upsert_csi_node(self, csi: CSINode) -> bool:
        old = self.csi_nodes.get(csi.name)
        self.csi_nodes[csi.name] = csi
        return old != csi

    def remove_csi_node(self, name: str) -> bool:
        return self.csi_nodes.pop(name, None) is not None

    # ---- the assumed view --------------------------------------------------------------
    def claim(self, namespace: str, name: str) -> Claim | None:
        """A claim as the scheduler sees it: with the selected node it assumed."""
        key = f"{namespace}/{name}"
        claim = self.claims.get(key)
        held = self._assumed_claims.get(key)
        if claim is None or held is None:
            return claim
        node = held.value
        assert isinstance(node, str)
        return replace(claim, selected_node=node)

    def volume(self, name: str) -> PersistentVolume | None:
        """A volume as the scheduler sees it: with the claim it assumed pre-bound to it."""
        pv = self.volumes.get(name)
        held = self._assumed_volumes.get(name)
        if pv is None or held is None:
            return pv
        ref = held.value
        assert isinstance(ref, ClaimRef)
        return replace(pv, claim_ref=ref)

    def volumes_of_class(self, storage_class: str) -> Iterator[PersistentVolume]:
        for name in self._by_class.get(storage_class, ()):
            pv = self.volume(name)
            if pv is not None:
                yield pv

    # ---- the binder --------------------------------------------------------------------
    def pod_claims(self, pod: Pod) -> tuple[PodClaims, str]:
        """VolumeBinding's PreFilter: the pod's claims sorted into bound and delayed, or why
        the pod cannot be scheduled yet (a missing, lost, deleting or foreign ephemeral
        claim, or an unbound immediate claim). The message is kube-scheduler's."""
        vols = pod.volumes
        ns = pod.namespace
        claims: list[Claim] = []
        seen: set[str] = set()
        for name in vols.claims:
            claim = self.claim(ns, name)
            ephemeral = name in vols.ephemeral
            if claim is None:
                if ephemeral:
                    return PodClaims(), (
                        "waiting for ephemeral volume controller to create the "
                        f'persistentvolumeclaim "{name}"'
                    )
                return PodClaims(), f'persistentvolumeclaim "{name}" not found'
            if claim.phase == LOST:
                return PodClaims(), (
                    f'persistentvolumeclaim "{name}" bound to non-existent persistentvolume '
                    f'"{claim.volume_name}"'
                )
            if claim.deleting:
                return PodClaims(), f'persistentvolumeclaim "{name}" is being deleted'
            if ephemeral and claim.owner_uid != pod.uid:
                return PodClaims(), (
                    f"PVC {ns}/{name} was not created for pod {ns}/{pod.name} (pod is not owner)"
                )
            if name not in seen:
                seen.add(name)
                claims.append(claim)
        bound: list[Claim] = []
        delayed: list[Claim] = []
        immediate = False
        for claim in claims:
            if claim.bound:
                bound.append(claim)
            elif self._delayed(claim):
                delayed.append(claim)
            else:
                immediate = True
        if immediate:
            return PodClaims(), UNBOUND_IMMEDIATE
        delayed.sort(key=lambda c: c.request)
        candidates = {c.key: self._candidates(c) for c in delayed if c.selected_node is None}
        return PodClaims(tuple(bound), tuple(delayed), candidates), ""

    def _delayed(self, claim: Claim) -> bool:
        if claim.volume_name or not claim.storage_class:
            return False
        sc = self.classes.get(claim.storage_class)
        return sc is not None and sc.binding_mode == WAIT_FOR_FIRST_CONSUMER

    def _candidates(self, claim: Claim) -> _Candidates:
        prebound: PersistentVolume | None = None
        available: list[PersistentVolume] = []
        for pv in self.volumes_of_class(claim.storage_class):
            if pv.claim_ref is not None and not _bound_to(pv, claim):
                continue
            if not _fits(pv, claim):
                continue
            if _bound_to(pv, claim):
                if prebound is None or pv.name < prebound.name:
                    prebound = pv
                continue
            if _available_for(pv, claim):
                available.append(pv)
        available.sort(key=lambda pv: (pv.capacity, pv.name))
        return _Candidates(prebound, tuple(available))

    def find(
        self, pc: PodClaims, node: str, labels: Mapping[str, str]
    ) -> tuple[VolumePlan | None, str]:
        """VolumeBinding's Filter (FindPodVolumes) for one node: the plan, or the first of
        kube-scheduler's conflict reasons."""
        bound_ok = True
        pv_found = True
        for claim in pc.bound:
            pv = self.volume(claim.volume_name)
            if pv is None:
                pv_found = False
                break
            if not pv_node_affinity_matches(pv, labels):
                bound_ok = False
                break
        unbound_ok = True
        static: list[tuple[Claim, str]] = []
        provision: list[Claim] = []
        if pc.delayed:
            unbound_ok, static, provision = self._place_delayed(pc, node, labels)
        if not bound_ok:
            return None, NODE_CONFLICT
        if not unbound_ok:
            return None, BIND_CONFLICT
        if not pv_found:
            return None, PV_NOT_EXIST
        return VolumePlan(node, tuple(static), tuple(provision)), ""

    def _place_delayed(
        self, pc: PodClaims, node: str, labels: Mapping[str, str]
    ) -> tuple[bool, list[tuple[Claim, str]], list[Claim]]:
        to_match: list[Claim] = []
        to_provision: list[Claim] = []
        for claim in pc.delayed:
            if claim.selected_node is not None:
                if claim.selected_node != node:
                    return False, [], []
                to_provision.append(claim)
            else:
                to_match.append(claim)
        ok = True
        static: list[tuple[Claim, str]] = []
        chosen: set[str] = set()
        for claim in to_match:
            pv = self._match(pc.candidates[claim.key], labels, chosen)
            if pv is None:
                ok = False
                to_provision.append(claim)
                continue
            chosen.add(pv.name)
            static.append((claim, pv.name))
        if not to_provision:
            return ok, static, []
        for claim in to_provision:
            sc = self.classes.get(claim.storage_class)
            if (
                sc is None
                or not sc.provisioner
                or sc.provisioner == NO_PROVISIONER
                or not topology_allows(sc, labels)
            ):
                return False, static, []
        return True, static, to_provision

    @staticmethod
    def _match(
        cand: _Candidates, labels: Mapping[str, str], chosen: set[str]
    ) -> PersistentVolume | None:
        pre = cand.prebound
        if pre is not None and pre.name not in chosen:
            return pre if pv_node_affinity_matches(pre, labels) else None
        for pv in cand.available:
            if pv.name not in chosen and pv_node_affinity_matches(pv, labels):
                return pv
        return None

    # ---- assume / forget ---------------------------------------------------------------
    def assume(self, pod: Pod, node: str, labels: Mapping[str, str]) -> None:
        """Reserve: the pod is placed on ``node``; assume its volume plan there."""
        self.forget(pod.uid)
        pc, why = self.pod_claims(pod)
        if why or not pc.delayed:
            return
        plan, reason = self.find(pc, node, labels)
        if plan is None or reason or not plan:
            return
        uid = pod.uid
        self._plans[uid] = plan
        for claim in plan.provision:
            held = self._assumed_claims.get(claim.key)
            if held is None or held.value != node:
                held = _Assumption(node, set())
                self._assumed_claims[claim.key] = held
            held.holders.add(uid)
        for claim, name in plan.static:
            ref = ClaimRef(claim.namespace, claim.name, claim.uid)
            held = self._assumed_volumes.get(name)
            if held is None or held.value != ref:
                held = _Assumption(ref, set())
                self._assumed_volumes[name] = held
            held.holders.add(uid)

    def forget(self, uid: str) -> None:
        """Drop what a pod assumed. Idempotent."""
        plan = self._plans.pop(uid, None)
        if plan is None:
            return
        for claim in plan.provision:
            self._release(self._assumed_claims, claim.key, uid)
        for _, name in plan.static:
            self._release(self._assumed_volumes, name, uid)

    @staticmethod
    def _release(held: dict[str, _Assumption], key: str, uid: str) -> None:
        entry = held.get(key)
        if entry is not None:
            entry.holders.discard(uid)
            if not entry.holders:
                del held[key]

    def plan_of(self, uid: str) -> VolumePlan | None:
        return self._plans.get(uid)

    def prebind(self, uids: Iterable[str]) -> tuple[ClaimBinding, ...]:
        """PreBind for a committed gang: every claim its pods' plans pre-bind or provision,
        once each, in a stable order."""
        out: dict[str, ClaimBinding] = {}
        for uid in uids:
            plan = self._plans.get(uid)
            if plan is None:
                continue
            for claim, name in plan.static:
                out.setdefault(
                    claim.key,
                    ClaimBinding(claim.namespace, claim.name, claim.uid, plan.node, name),
                )
            for claim in plan.provision:
                out.setdefault(
                    claim.key, ClaimBinding(claim.namespace, claim.name, claim.uid, plan.node)
                )
        return tuple(out[k] for k in sorted(out))

    # ---- counted pods ------------------------------------------------------------------
    def count(self, pod: Pod) -> None:
        """A pod now counts on a node (bound or reserved): its claims are in use."""
        self.uncount(pod.uid)
        vols = pod.volumes
        keys = tuple(
            f"{pod.namespace}/{c}" for c in dict.fromkeys(vols.claims) if c not in vols.ephemeral
        )
        if not keys:
            return
        self._counted[pod.uid] = keys
        for key in keys:
            self.claim_users[key] = self.claim_users.get(key, 0) + 1

    def uncount(self, uid: str) -> None:
        for key in self._counted.pop(uid, ()):
            left = self.claim_users[key] - 1
            if left:
                self.claim_users[key] = left
            else:
                del self.claim_users[key]

    def claim_in_use(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self.claim_users

    def waiting(self, pod: Pod) -> str:
        """Why the pod's claims keep it from being scheduled at all (kube-scheduler's
        PreFilter message), or ''."""
        if not pod.volumes.claims:
            return ""
        return self.pod_claims(pod)[1]
