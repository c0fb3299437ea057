"""PreBind for resource claims (Dynamic Resource Allocation): the allocations a gang's binding
carries (``BindGang.claims``) written, every one of them, before any member binds; undone if
one cannot be.

For each claim, as kube-scheduler v1.36's DynamicResources plugin writes it:

1. the claim as last watched is the precondition: the same uid, not being deleted, and either
   not allocated or allocated exactly as the decision says (a claim shared by members, or
   written before a restart); otherwise the write fails, naming the claim;
2. a claim to allocate first gets the finalizer ``resource.kubernetes.io/delete-protection``
   (an update of the object, at the watched resourceVersion), so it cannot vanish while
   allocated;
3. then its status (at the resourceVersion just returned): ``status.allocation`` (the devices,
   each as ``request``/``driver``/``pool``/``device``, ``adminAccess`` where the request asks
   it; the classes' and the claim's ``config`` for the requests allocated; a node selector
   naming the node by ``metadata.name``, or the devices' node selector term, or none for
   devices that reach every node; and ``allocationTimestamp``) and
   the gang's pods that use it added to ``status.reservedFor`` (``resource: pods``, name,
   uid). kube-scheduler v1.36 sets ``allocationTimestamp`` on a claim it adds a consumer to
   when the allocation has none, which the API server refuses (the allocation is immutable):
   a claim allocated without it could never be shared with a pod kube-scheduler places.

Binding conditions (``DRADeviceBindingConditions``, on in v1.36): an allocated device with
``bindingConditions`` carries them (and its ``bindingFailureConditions``) in the allocation's
results, and no pod of the gang binds until the device's driver reports every one of them
``True`` in the claim's ``status.devices``, as watched. A failure condition ``True``, or none
of that within ``deviceBindingTimeoutSeconds`` (600 s, kube-scheduler's default), fails the
attempt: every write is undone and the claims are deallocated (their devices may be tried
again, or others), so the whole gang waits, never a part of it.

Every write carries the claim's resourceVersion: a claim that changed since the decision was
made (409 Conflict) is never written over; the gang's attempt fails and is retried on what the
watch then says, so nothing binds on a stale allocation. With leader election every write
carries the elector's fence.

The claims of a gang are written concurrently (each claim's own writes in order). If any
write fails, the ones made are undone: the pods added are removed
from ``reservedFor``, and a claim this attempt allocated and that no consumer holds any more
loses its allocation and then its finalizer (as kube-controller-manager's resourceclaim
controller deallocates). Pods whose binding fails afterwards are removed from their claims'
consumers the same way. A crash between the writes and the bindings leaves the claims written
and reserved: the next leader reads them back and binds the pods where they were allocated,
writing nothing twice.
"""

from __future__ import annotations

import asyncio
import copy
import json
import time
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import structlog

from gangsched.api.dra import EXTENDED_CLAIM, resource_claim_from
from gangsched.core.decisions import ClaimWrite
from gangsched.core.model import AffinityTerm, Requirement
from gangsched.core.resourceclaims import Claim, ClaimAllocation, DeviceClass, DeviceId
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON, ApiError, FenceCheck
from gangsched.kube.io.times import rfc3339
from gangsched.kube.write import failpoints

__all__ = [
    "FINALIZER",
    "ClaimWriter",
    "Written",
    "allocation_config",
    "allocation_json",
    "binding_state",
]

log = structlog.get_logger("gangsched.claims")

FINALIZER = "resource.kubernetes.io/delete-protection"
API = "/apis/resource.k8s.io/v1"
UNDO_TRIES = 5
BINDING_TIMEOUT = 600.0  # seconds, as kube-scheduler's DynamicResources bindingTimeout


@dataclass(frozen=True, slots=True)
class Written:
    """A claim this attempt wrote: whether it allocated it, and the pods it added;
    ``created``: it made the claim (for a pod's extended resources), so undoing deletes it."""

    claim: str
    uid: str
    allocated: bool
    added: tuple[str, ...]
    created: bool = False


def _consumers(uids: Sequence[str], names: Mapping[str, str]) -> list[JSON]:
    """``status.reservedFor`` entries for these pods."""
    return [{"resource": "pods", "name": names.get(uid, ""), "uid": uid} for uid in uids]


def _path(key: str) -> str:
    ns, _, name = key.partition("/")
    return f"{API}/namespaces/{ns}/resourceclaims/{name}"


def extended_claim_json(claim: Claim, pod_name: str) -> JSON:
    """The ResourceClaim for a pod's extended resources, as kube-scheduler v1.36 creates it:
    named ``<pod>-extended-resources-<random>``, annotated
    ``resource.kubernetes.io/extended-resource-claim: "true"``, controlled by the pod (so it
    goes with the pod), with the core's requests; the finalizer is set at once (the claim is
    allocated next)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": claim.name,
            "namespace": claim.namespace,
            "annotations": {EXTENDED_CLAIM: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": pod_name,
                    "uid": claim.made_for,
                    "controller": True,
                }
            ],
            "finalizers": [FINALIZER],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": r.name,
                        "exactly": {
                            "deviceClassName": r.exactly.device_class,
                            "allocationMode": "ExactCount",
                            "count": r.exactly.count,
                        },
                    }
                    for r in claim.requests
                    if r.exactly is not None
                ]
            }
        },
    }


def _tolerations(obj: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The tolerations of each request of the claim (``<request>`` or
    ``<request>/<sub-request>``), as written: the allocation carries them."""
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    requests = devices.get("requests") if isinstance(devices, Mapping) else None
    out: dict[str, list[Any]] = {}
    for r in requests if isinstance(requests, list) else ():
        if not isinstance(r, Mapping):
            continue
        exactly = r.get("exactly")
        if isinstance(exactly, Mapping) and exactly.get("tolerations"):
            out[str(r.get("name"))] = list(exactly["tolerations"])
        for sub in r.get("firstAvailable") or ():
            if isinstance(sub, Mapping) and sub.get("tolerations"):
                out[f"{r.get('name')}/{sub.get('name')}"] = list(sub["tolerations"])
    return out


def allocation_config(
    claim: Claim,
    allocation: ClaimAllocation,
    class_of: Callable[[str], DeviceClass | None],
) -> list[JSON]:
    """``status.allocation.devices.config`` as kube-scheduler v1.36's allocator makes it: for
    each request in order, the configuration of the class of what it was allocated as (a
    class's entries once, naming every request of that class), then the claim's entries
    (once for every request, or allocated sub-request, each names)."""
    out: list[JSON] = []
    allocated: dict[str, str] = {}  # request -> <request> or <request>/<sub-request>
    for path, _ in allocation.results:
        allocated.setdefault(path.split("/", 1)[0], path)
    of_class: dict[str, tuple[int, int]] = {}
    for request in claim.requests:
        chosen = allocated.get(request.name)
        exact = dict(request.options()).get(chosen) if chosen is not None else None
        cls = class_of(exact.device_class) if exact is not None else None
        if chosen is None or cls is None:
            continue
        path = chosen
        if cls.name in of_class:
            start, end = of_class[cls.name]
            for added in out[start:end]:
                added["requests"].append(path)
            continue
        start = len(out)
        for c in cls.config:
            out.append(
                {
                    "source": "FromClass",
                    "requests": [path],
                    "opaque": {"driver": c.driver, "parameters": json.loads(c.parameters)},
                }
            )
        of_class[cls.name] = (start, len(out))
    for c in claim.config:
        entry: JSON = {
            "source": "FromClaim",
            "opaque": {"driver": c.driver, "parameters": json.loads(c.parameters)},
        }
        if not c.requests:
            out.append(entry)
            continue
        entry["requests"] = list(c.requests)
        for request in claim.requests:
            path = allocated.get(request.name, "")
            if request.name in c.requests or (request.first_available and path in c.requests):
                out.append(copy.deepcopy(entry))
    return out


def _requirements(reqs: tuple[Requirement, ...]) -> list[JSON]:
    out: list[JSON] = []
    for r in reqs:
        j: JSON = {"key": r.key, "operator": r.operator}
        if r.values:
            j["values"] = list(r.values)
        out.append(j)
    return out


def _term_json(term: AffinityTerm) -> JSON:
    out: JSON = {}
    if term.match_expressions:
        out["matchExpressions"] = _requirements(term.match_expressions)
    if term.match_fields:
        out["matchFields"] = _requirements(term.match_fields)
    return out


def _quantity(n: int) -> str:
    """A whole amount as kube writes a binary quantity: the largest binary suffix that keeps
    it whole (``30Gi``), else plain digits."""
    for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if n and n % (1 << power) == 0:
            return f"{n >> power}{suffix}"
    return str(n)


def allocation_json(
    allocation: ClaimAllocation,
    admin: Collection[str] = (),
    tolerations: Mapping[str, list[Any]] | None = None,
    config: list[JSON] | None = None,
) -> JSON:
    """``status.allocation`` as kube-scheduler writes it: each result with its request's
    ``adminAccess`` and ``tolerations``, a share of a device allocatable many times with a new
    ``shareID`` and its ``consumedCapacity``; the configuration; where it may be used."""
    results: list[dict[str, Any]] = []
    waits = {d: (c, f) for d, c, f in allocation.conditions}
    shares = dict(allocation.shares)
    for i, (request, device) in enumerate(allocation.results):
        r: dict[str, Any] = {
            "request": request,
            "driver": device.driver,
            "pool": device.pool,
            "device": device.name,
        }
        if i in shares:  # a share of a device allocatable many times (consumable capacity)
            r["shareID"] = str(uuid.uuid4())
            r["consumedCapacity"] = {name: _quantity(amount) for name, amount in shares[i]}
        if device in waits:
            r["bindingConditions"] = list(waits[device][0])
            r["bindingFailureConditions"] = list(waits[device][1])
        if request.partition("/")[0] in admin:
            r["adminAccess"] = True
        if tolerations and request in tolerations:
            r["tolerations"] = tolerations[request]
        results.append(r)
    devices: JSON = {"results": results}
    if config:
        devices["config"] = config
    out: JSON = {"devices": devices}
    if allocation.node:
        out["nodeSelector"] = {
            "nodeSelectorTerms": [
                {
                    "matchFields": [
                        {"key": "metadata.name", "operator": "In", "values": [allocation.node]}
                    ]
                }
            ]
        }
    elif allocation.reach is not None:
        out["nodeSelector"] = {"nodeSelectorTerms": [_term_json(allocation.reach)]}
    return out


def binding_state(obj: Mapping[str, Any] | None, w: ClaimWrite) -> tuple[bool, str]:
    """Whether the claim's devices with binding conditions are ready (every condition ``True``
    in ``status.devices``), and why binding failed ('' if it has not): a failure condition
    ``True``, or the claim gone."""
    if obj is None:
        return False, f"resource claim {w.claim} was deleted"
    status = obj.get("status") or {}
    entries = status.get("devices") if isinstance(status, Mapping) else None
    reported: dict[tuple[str, str, str], dict[str, Mapping[str, Any]]] = {}
    for e in entries if isinstance(entries, list) else ():
        if isinstance(e, Mapping):
            conds = e.get("conditions")
            reported[(str(e.get("driver")), str(e.get("pool")), str(e.get("device")))] = {
                str(c.get("type")): c
                for c in (conds if isinstance(conds, list) else ())
                if isinstance(c, Mapping)
            }
    ready = True
    for device, waits, failures in w.allocation.conditions:
        conds = reported.get((device.driver, device.pool, device.name), {})
        for f in failures:
            c = conds.get(f)
            if c is not None and c.get("status") == "True":
                return False, (
                    f"resource claim {w.claim}: device {device} reports {f} "
                    f"({c.get('reason', '')}: {c.get('message', '')})"
                )
        if not all((conds.get(t) or {}).get("status") == "True" for t in waits):
            ready = False
    return ready, ""


def _same(a: ClaimAllocation, b: ClaimAllocation) -> bool:
    return (
        a.node == b.node
        and a.reach == b.reach
        and sorted(a.results) == sorted(b.results)
        and sorted(a.consumption().items()) == sorted(b.consumption().items())
    )


class _WriteError(Exception):
    pass


class ClaimWriter:
    def __init__(
        self,
        client: KubeApi,
        watched: Mapping[str, JSON] | None = None,
        *,
        fence: FenceCheck | None = None,
        held_by: Callable[[str, DeviceId], str] | None = None,
        device_class: Callable[[str], DeviceClass | None] | None = None,
        binding_timeout: float = BINDING_TIMEOUT,
        poll: float = 0.25,
    ) -> None:
        self._binding_timeout = binding_timeout
        self._poll = poll
        self._client = client
        # the device classes as watched: their configuration goes into the allocation
        self._class_of: Callable[[str], DeviceClass | None] = device_class or (lambda _: None)
        # which claim the watch last saw holding a device on a node ('' for none): checked
        # again just before a write, so a device another scheduler took since the decision
        # was made is not given out twice
        self._held_by = held_by
        # the claims as watched (kube/dra.py); without them each claim is read first
        self._watched = watched
        self._fence = fence
        self.written = 0
        self.undone = 0

    async def _current(self, key: str) -> JSON | None:
        obj = self._watched.get(key) if self._watched is not None else None
        if obj is not None:
            return obj
        try:
            return await self._client.get(_path(key))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def _put(self, path: str, body: JSON) -> JSON:
        return await self._client.request("PUT", path, body=body, fence=self._fence)

    async def write(
        self, writes: Sequence[ClaimWrite], names: Mapping[str, str]
    ) -> tuple[str, list[Written]]:
        """Write every claim; ('', what was written) on success. On a failure what was
        written is undone and (why, []) returned. ``names``: pod uid -> pod name."""
        # the claims are independent of one another: written concurrently, all of them before
        # any binding, and all undone if one fails
        outcomes = await asyncio.gather(
            *(self._write(w, names) for w in writes), return_exceptions=True
        )
        done = [o for o in outcomes if isinstance(o, Written)]
        for w, o in zip(writes, outcomes, strict=True):
            if isinstance(o, Written):
                continue
            if not isinstance(o, _WriteError | ApiError):
                await self.undo(done)
                raise o
            why = str(o)
            if isinstance(o, ApiError) and o.status == 409:
                why = f"resource claim {w.claim} changed since it was read: {o}"
            log.warning("resource claim write failed", claim=w.claim, error=why)
            await self.undo(done)
            return why, []
        self.written += len(done)
        why = await self._await_binding_conditions(
            [replace(w, claim=o.claim) for w, o in zip(writes, done, strict=True)]
        )
        if why:
            log.warning("devices not ready for binding", error=why)
            await self.undo(done, deallocate=True)
            return why, []
        return "", done

    async def _await_binding_conditions(self, writes: Sequence[ClaimWrite]) -> str:
        """'' once every allocated device with binding conditions is ready (each condition
        ``True`` in the claim's ``status.devices``); why not, on a failure condition or when
        the timeout passes first."""
        waiting = [w for w in writes if w.allocation.conditions]
        if not waiting:
            return ""
        deadline = time.monotonic() + self._binding_timeout
        said = False
        while True:
            pending = ""
            for w in waiting:
                obj = await self._current(w.claim)
                ready, why = binding_state(obj, w)
                if why:
                    return why
                if not ready and not pending:
                    pending = w.claim
            if not pending:
                if said:
                    log.info("devices ready for binding", claims=[w.claim for w in waiting])
                return ""
            if not said:  # once a gang: which claim it waits on, and for how long at most
                said = True
                log.info(
                    "waiting for the devices' binding conditions",
                    claim=pending,
                    claims=len(waiting),
                    timeout=self._binding_timeout,
                )
            if time.monotonic() >= deadline:
                return (
                    f"resource claim {pending}: the devices' binding conditions were not met "
                    f"within {self._binding_timeout:g} s"
                )
            await asyncio.sleep(self._poll)

    async def _write(self, w: ClaimWrite, names: Mapping[str, str]) -> Written:
        if w.create is not None:
            return await self._create(w, names)
        obj = await self._current(w.claim)
        if obj is None:
            raise _WriteError(f"resource claim {w.claim} was deleted")
        meta = obj.get("metadata") or {}
        if meta.get("uid") != w.uid:
            raise _WriteError(f"resource claim {w.claim} was recreated")
        if meta.get("deletionTimestamp"):
            raise _WriteError(f"resource claim {w.claim} is being deleted")
        read = resource_claim_from(obj)
        if not isinstance(read, Claim):
            raise _WriteError(f"resource claim {w.claim} cannot be used: {read.reason}")
        allocate = read.allocation is None
        if read.allocation is not None and not _same(read.allocation, w.allocation):
            raise _WriteError(
                f"resource claim {w.claim} was allocated {read.allocation.where} meanwhile"
            )
        if allocate and self._held_by is not None:
            for device in w.allocation.devices:
                holder = self._held_by(w.allocation.node, device)
                if holder and holder != w.claim:
                    raise _WriteError(
                        f"device {device} {w.allocation.where} was allocated to "
                        f"resource claim {holder} meanwhile"
                    )
        path = _path(w.claim)
        obj = copy.deepcopy(dict(obj))
        added_finalizer = False
        if allocate:
            finalizers = list(obj.get("metadata", {}).get("finalizers") or [])
            if FINALIZER not in finalizers:
                obj["metadata"] = {**obj["metadata"], "finalizers": [*finalizers, FINALIZER]}
                obj = dict(await self._put(path, obj))
                added_finalizer = True
        status = dict(obj.get("status") or {})
        reserved = list(status.get("reservedFor") or [])
        have = {r.get("uid") for r in reserved if isinstance(r, Mapping)}
        added = tuple(uid for uid in w.pods if uid not in have)
        reserved += _consumers(added, names)
        if allocate:
            status["allocation"] = self._allocation(w, read, obj)
        status["reservedFor"] = reserved
        obj["status"] = status
        if allocate or added:
            try:
                await self._put(f"{path}/status", obj)
            except ApiError:
                if added_finalizer:  # the finalizer this attempt added goes too
                    await self.undo([Written(w.claim, w.uid, True, ())])
                raise
            failpoints.reached("claims.written")
        log.debug(
            "resource claim written",
            claim=w.claim,
            node=w.allocation.node,
            allocated=allocate,
            reserved=len(added),
        )
        done = Written(w.claim, w.uid, allocate, added)
        if w.made_for and w.mappings:
            await self._name_in_pod(w, w.claim, names, done)
        return done

    def _allocation(self, w: ClaimWrite, claim: Claim, obj: Mapping[str, Any]) -> JSON:
        """``status.allocation`` for the write: the requests' admin access and tolerations
        (from the claim as written), the classes' and the claim's configuration."""
        return {
            **allocation_json(
                w.allocation,
                {r.name for r in claim.requests if r.exactly and r.exactly.admin_access},
                _tolerations(obj),
                allocation_config(claim, w.allocation, self._class_of),
            ),
            # as kube-scheduler v1.36 writes it (DRADeviceBindingConditions, on by default):
            # without it, kube-scheduler cannot add a consumer to this claim
            "allocationTimestamp": rfc3339(time.time()),
        }

    async def _create(self, w: ClaimWrite, names: Mapping[str, str]) -> Written:
        """A claim the core made for a pod's extended resources: created (with the
        finalizer), then allocated and reserved for the pod in one status write; then the
        pod's status names it. Deleted again if a step fails."""
        claim = w.create
        assert claim is not None
        pod_name = names.get(claim.made_for, "")
        created = dict(
            await self._client.post(
                f"{API}/namespaces/{claim.namespace}/resourceclaims",
                extended_claim_json(claim, pod_name),
                fence=self._fence,
            )
        )
        meta = created.get("metadata") or {}
        key = f"{claim.namespace}/{meta.get('name', '')}"
        done = Written(key, str(meta.get("uid", "")), True, tuple(w.pods), created=True)
        try:
            obj = copy.deepcopy(created)
            obj["status"] = {
                "allocation": self._allocation(w, claim, obj),
                "reservedFor": _consumers(w.pods, names),
            }
            await self._put(f"{_path(key)}/status", obj)
            failpoints.reached("claims.written")
            if w.mappings:
                await self._name_in_pod(w, key, names, None)
        except BaseException:
            await self.undo([done])
            raise
        log.debug("resource claim created", claim=key, node=w.allocation.node)
        return done

    async def _name_in_pod(
        self, w: ClaimWrite, key: str, names: Mapping[str, str], undo: Written | None
    ) -> None:
        """The pod's ``status.extendedResourceClaimStatus``: the claim serving its extended
        resources and which container uses which request (the kubelet reads it)."""
        ns, _, claim_name = key.partition("/")
        body = {
            "status": {
                "extendedResourceClaimStatus": {
                    "requestMappings": [
                        {"containerName": c, "resourceName": r, "requestName": q}
                        for c, r, q in w.mappings
                    ],
                    "resourceClaimName": claim_name,
                }
            }
        }
        path = f"/api/v1/namespaces/{ns}/pods/{names.get(w.made_for, '')}/status"
        try:
            await self._client.merge_patch(path, body, fence=self._fence)
        except BaseException:
            if undo is not None:
                await self.undo([undo])
            raise

    async def undo(
        self,
        done: Sequence[Written],
        pods: Collection[str] | None = None,
        *,
        deallocate: bool = False,
    ) -> None:
        """Take back what ``done`` wrote, newest first: for the pods ``pods`` (all of them
        when None). ``deallocate``: a claim left without consumers loses its allocation even
        if an earlier attempt wrote it (its devices failed their binding conditions). Errors
        are logged; kube-controller-manager's resourceclaim controller removes consumers that
        are gone in any case."""
        for d in reversed(done):
            gone = tuple(u for u in d.added if pods is None or u in pods)
            if not gone and pods is not None:
                continue
            if deallocate:
                d = Written(d.claim, d.uid, True, d.added)
            try:
                await self._undo_one(d, gone)
                self.undone += 1
            except (_WriteError, ApiError) as e:
                log.warning("could not undo a resource claim write", claim=d.claim, error=str(e))

    async def _undo_one(self, d: Written, gone: tuple[str, ...]) -> None:
        path = _path(d.claim)
        if d.created:
            await self._delete(d)
            return
        for attempt in range(UNDO_TRIES):
            try:
                obj = dict(await self._client.get(path))
            except ApiError as e:
                if e.status == 404:
                    return
                raise
            meta = obj.get("metadata") or {}
            if meta.get("uid") != d.uid:
                return
            status = dict(obj.get("status") or {})
            reserved = [
                r
                for r in status.get("reservedFor") or []
                if not (isinstance(r, Mapping) and r.get("uid") in gone)
            ]
            changed = len(reserved) != len(status.get("reservedFor") or [])
            status["reservedFor"] = reserved
            if d.allocated and not reserved and status.get("allocation") is not None:
                status.pop("allocation")
                changed = True
            try:
                if changed:
                    obj["status"] = status
                    obj = dict(await self._put(f"{path}/status", obj))
                finalizers = list((obj.get("metadata") or {}).get("finalizers") or [])
                if d.allocated and "allocation" not in status and FINALIZER in finalizers:
                    finalizers.remove(FINALIZER)
                    obj["metadata"] = {**obj["metadata"], "finalizers": finalizers}
                    await self._put(path, obj)
                log.info("resource claim write undone", claim=d.claim, pods=len(gone))
                return
            except ApiError as e:
                if e.status != 409 or attempt == UNDO_TRIES - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))

    async def _delete(self, d: Written) -> None:
        """A claim this attempt created: its finalizer removed, then deleted (as
        kube-scheduler deletes the claim it made when the pod does not bind)."""
        path = _path(d.claim)
        for attempt in range(UNDO_TRIES):
            try:
                obj = dict(await self._client.get(path))
                meta = dict(obj.get("metadata") or {})
                if meta.get("uid") != d.uid:
                    return
                finalizers = list(meta.get("finalizers") or [])
                if FINALIZER in finalizers:
                    finalizers.remove(FINALIZER)
                    obj["metadata"] = {**meta, "finalizers": finalizers}
                    await self._put(path, obj)
                await self._client.request("DELETE", path, fence=self._fence)
                log.info("resource claim made for a pod deleted", claim=d.claim)
                return
            except ApiError as e:
                if e.status == 404:
                    return
                if e.status != 409 or attempt == UNDO_TRIES - 1:
                    raise
                await asyncio.sleep(0.05 * (attempt + 1))
