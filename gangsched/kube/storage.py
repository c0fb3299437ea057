"""Storage objects for the core: PersistentVolumeClaims, PersistentVolumes, StorageClasses and
CSINodes (JSON dicts) into ``gangsched.core.volumes`` dataclasses, and the reflectors that keep
the core's volume catalog current (a full list handled in slices that yield to the event loop).

The translators never raise. What cannot be read is translated so that nothing is placed on
the strength of it: an unreadable claim stays unbound and not WaitForFirstConsumer (its pods
wait), an unreadable volume matches no node and is not available, an unreadable class does not
provision and binds immediately, an unreadable CSINode publishes no limits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gangsched.core.model import AffinityTerm, LabelSelector, Requirement
from gangsched.core.quantity import parse_quantity, to_units
from gangsched.core.scheduler import Scheduler
from gangsched.core.volumes import (
    ANN_BIND_COMPLETED,
    ANN_SELECTED_NODE,
    Claim,
    ClaimRef,
    CSINode,
    PersistentVolume,
    StorageClass,
    TopologyTerm,
)
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON
from gangsched.kube.io.keyed import keyed_handler
from gangsched.kube.io.reflector import Handler, Reflector
from gangsched.kube.io.slicing import SLICE_SECONDS

__all__ = [
    "claim_from",
    "csinode_from",
    "pv_from",
    "storage_class_from",
    "storage_reflectors",
]

Obj = Mapping[str, Any]
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
STORAGE = "storage"


class _UnreadableError(ValueError):
    pass


def _map(value: object) -> Obj:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _UnreadableError("expected an object")
    return value


def _list(value: object) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _UnreadableError("expected a list")
    return value


def _str(value: object, default: str = "") -> str:
    if value is None:
        return default
    if not isinstance(value, str):
        raise _UnreadableError("expected a string")
    return value


def _strs(value: object) -> tuple[str, ...]:
    return tuple(_str(v) for v in _list(value))


def _str_map(value: object) -> dict[str, str]:
    return {str(k): _str(v) for k, v in _map(value).items()}


def _bytes(value: object) -> int:
    """A storage quantity in bytes, rounded up; 0 when absent."""
    if value is None:
        return 0
    return max(0, to_units(parse_quantity(value, "storage")))


def _meta(obj: Obj) -> tuple[Obj, str, str]:
    meta = _map(obj.get("metadata"))
    return meta, _str(meta.get("namespace")), _str(meta.get("name"))


def _identity(obj: object) -> tuple[str, str]:
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return "", ""
    ns, name = meta.get("namespace"), meta.get("name")
    return (ns if isinstance(ns, str) else ""), (name if isinstance(name, str) else "")


def _requirement(raw: object) -> Requirement:
    r = _map(raw)
    return Requirement(_str(r.get("key")), _str(r.get("operator")), _strs(r.get("values")))


def _node_selector_term(raw: object) -> AffinityTerm:
    t = _map(raw)
    return AffinityTerm(
        tuple(_requirement(r) for r in _list(t.get("matchExpressions"))),
        tuple(_requirement(r) for r in _list(t.get("matchFields"))),
    )


def _selector(raw: object) -> LabelSelector | None:
    if raw is None:
        return None
    s = _map(raw)
    return LabelSelector(
        tuple(sorted(_str_map(s.get("matchLabels")).items())),
        tuple(_requirement(r) for r in _list(s.get("matchExpressions"))),
    )


def _controller_uid(meta: Obj) -> str:
    for ref in _list(meta.get("ownerReferences")):
        r = _map(ref)
        if r.get("controller") is True:
            return _str(r.get("uid"))
    return ""


def _claim_from(obj: Obj) -> Claim:
    meta, ns, name = _meta(obj)
    annotations = _str_map(meta.get("annotations"))
    spec = _map(obj.get("spec"))
    status = _map(obj.get("status"))
    storage_class = annotations.get(BETA_CLASS)
    if storage_class is None:
        storage_class = _str(spec.get("storageClassName"))
    requests = _map(_map(spec.get("resources")).get("requests"))
    return Claim(
        namespace=ns,
        name=name,
        uid=_str(meta.get("uid")),
        storage_class=storage_class,
        volume_name=_str(spec.get("volumeName")),
        bind_completed=ANN_BIND_COMPLETED in annotations,
        selected_node=annotations.get(ANN_SELECTED_NODE),
        access_modes=frozenset(_strs(spec.get("accessModes"))),
        request=_bytes(requests.get(STORAGE)),
        volume_mode=_str(spec.get("volumeMode")) or "Filesystem",
        attributes_class=_str(spec.get("volumeAttributesClassName")),
        selector=_selector(spec.get("selector")),
        phase=_str(status.get("phase")) or "Pending",
        deleting=bool(meta.get("deletionTimestamp")),
        owner_uid=_controller_uid(meta),
    )


def _pv_from(obj: Obj) -> PersistentVolume:
    meta, _, name = _meta(obj)
    annotations = _str_map(meta.get("annotations"))
    spec = _map(obj.get("spec"))
    status = _map(obj.get("status"))
    storage_class = annotations.get(BETA_CLASS)
    if storage_class is None:
        storage_class = _str(spec.get("storageClassName"))
    affinity: tuple[AffinityTerm, ...] | None = None
    required = _map(spec.get("nodeAffinity")).get("required")
    if required is not None:
        terms = _list(_map(required).get("nodeSelectorTerms"))
        affinity = tuple(_node_selector_term(t) for t in terms)
    ref: ClaimRef | None = None
    raw_ref = spec.get("claimRef")
    if raw_ref is not None:
        r = _map(raw_ref)
        ref = ClaimRef(_str(r.get("namespace")), _str(r.get("name")), _str(r.get("uid")))
    csi = _map(spec.get("csi"))
    return PersistentVolume(
        name=name,
        capacity=_bytes(_map(spec.get("capacity")).get(STORAGE)),
        access_modes=frozenset(_strs(spec.get("accessModes"))),
        storage_class=storage_class,
        volume_mode=_str(spec.get("volumeMode")) or "Filesystem",
        attributes_class=_str(spec.get("volumeAttributesClassName")),
        labels=_str_map(meta.get("labels")),
        node_affinity=affinity,
        claim_ref=ref,
        phase=_str(status.get("phase")),
        deleting=bool(meta.get("deletionTimestamp")),
        csi_driver=_str(csi.get("driver")),
        csi_handle=_str(csi.get("volumeHandle")),
    )


def _storage_class_from(obj: Obj) -> StorageClass:
    _, _, name = _meta(obj)
    terms = []
    for raw in _list(obj.get("allowedTopologies")):
        exprs = []
        for e in _list(_map(raw).get("matchLabelExpressions")):
            em = _map(e)
            exprs.append((_str(em.get("key")), _strs(em.get("values"))))
        terms.append(TopologyTerm(tuple(exprs)))
    return StorageClass(
        name=name,
        provisioner=_str(obj.get("provisioner")),
        binding_mode=_str(obj.get("volumeBindingMode")) or "Immediate",
        allowed_topologies=tuple(terms),
    )


def _csinode_from(obj: Obj) -> CSINode:
    _, _, name = _meta(obj)
    drivers: set[str] = set()
    limits: dict[str, int] = {}
    for raw in _list(_map(obj.get("spec")).get("drivers")):
        d = _map(raw)
        driver = _str(d.get("name"))
        drivers.add(driver)
        count = _map(d.get("allocatable")).get("count")
        if count is not None:
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise _UnreadableError("allocatable.count: expected a non-negative integer")
            limits[driver] = count
    return CSINode(name, frozenset(drivers), limits)


# ---- the public translators: total functions ------------------------------------------------
def claim_from(obj: Obj) -> Claim:
    """A PersistentVolumeClaim; one that cannot be read stays unbound with no class (the pods
    that mount it wait as for an unbound immediate claim)."""
    try:
        return _claim_from(obj)
    except Exception:
        ns, name = _identity(obj)
        return Claim(ns, name)


def pv_from(obj: Obj) -> PersistentVolume:
    """A PersistentVolume; one that cannot be read is never available and matches no node."""
    try:
        return _pv_from(obj)
    except Exception:
        _, name = _identity(obj)
        return PersistentVolume(name, phase="Unreadable", node_affinity=())


def storage_class_from(obj: Obj) -> StorageClass:
    """A StorageClass; one that cannot be read binds immediately and provisions nowhere."""
    try:
        return _storage_class_from(obj)
    except Exception:
        _, name = _identity(obj)
        return StorageClass(name)


def csinode_from(obj: Obj) -> CSINode:
    """A CSINode; one that cannot be read publishes no limits."""
    try:
        return _csinode_from(obj)
    except Exception:
        _, name = _identity(obj)
        return CSINode(name)


# ---- reflectors ----------------------------------------------------------------------------
def _namespaced_key(obj: JSON) -> str:
    ns, name = _identity(obj)
    return f"{ns}/{name}"


def _cluster_key(obj: JSON) -> str:
    return _identity(obj)[1]


def _delete_claim(core: Scheduler, key: str) -> None:
    ns, _, name = key.partition("/")
    core.claim_delete(ns, name)


def storage_reflectors(
    client: KubeApi,
    core: Scheduler,
    poke: Callable[[], None],
    *,
    slice_seconds: float = SLICE_SECONDS,
    on_yield: Callable[[], None] | None = None,
) -> list[Reflector]:
    """List+watch reflectors for PersistentVolumeClaims, PersistentVolumes, StorageClasses
    and CSINodes (``storage.k8s.io/v1``), feeding the core's volume catalog. Their full lists
    are handled in slices of ``slice_seconds`` (``on_yield`` is called at each yield)."""

    def handler(
        key_of: Callable[[JSON], str],
        upsert: Callable[[JSON], None],
        delete: Callable[[str], None],
    ) -> Handler:
        return keyed_handler(key_of, upsert, delete, poke, slice_seconds, on_yield)

    return [
        Reflector(
            client,
            "/api/v1/persistentvolumeclaims",
            handler(
                _namespaced_key,
                lambda o: core.claim_upsert(claim_from(o)),
                lambda k: _delete_claim(core, k),
            ),
            name="persistentvolumeclaims",
        ),
        Reflector(
            client,
            "/api/v1/persistentvolumes",
            handler(_cluster_key, lambda o: core.volume_upsert(pv_from(o)), core.volume_delete),
            name="persistentvolumes",
        ),
        Reflector(
            client,
            "/apis/storage.k8s.io/v1/storageclasses",
            handler(
                _cluster_key,
                lambda o: core.storage_class_upsert(storage_class_from(o)),
                core.storage_class_delete,
            ),
            name="storageclasses",
        ),
        Reflector(
            client,
            "/apis/storage.k8s.io/v1/csinodes",
            handler(
                _cluster_key, lambda o: core.csinode_upsert(csinode_from(o)), core.csinode_delete
            ),
            name="csinodes",
        ),
    ]
