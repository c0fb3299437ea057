"""Carries out BindGang decisions through the pods/binding subresource.

Bindings of a gang go out concurrently (bounded by the client). Each binding carries the pod's
UID as a precondition, so a pod deleted and recreated under the same name is never bound by
mistake. Outcomes per pod:

- 201: bound; the watch confirms it into the cache.
- 409 (already assigned, UID precondition failed, being deleted): the pod is read; if it is the
  same pod assigned where we meant, that is success (a retry after a lost response); otherwise
  the reservation is dropped (``already assigned to <node>``, or ``pod is gone`` for a pod
  recreated under the same name) and the watch brings the truth.
- 404: the pod is gone; its reservation is dropped.
- 0 / 429 / 5xx: retried with backoff, then given up: the reservation is dropped and the gang
  retried. Pods cannot be unbound, so members already bound stay bound.

PreBind for resource claims (``BindGang.claims``, Dynamic Resource Allocation) comes first:
every claim's allocation and reservation written before any pod is bound, all undone if one
cannot be (see claims.py); then volumes.

PreBind (``BindGang.volumes``), before any pod of the gang is bound, as kube-scheduler's
volume binder does it for one pod: each static PersistentVolume is pre-bound to its claim
(``spec.claimRef``, with ``pv.kubernetes.io/bound-by-controller``; read first, and patched at
that resourceVersion, so a volume someone else took meanwhile is never taken over), then each
claim to provision gets ``volume.kubernetes.io/selected-node``; then the binder waits, up to
``volume_bind_timeout``, until the PV controller and the provisioners have bound every claim
(``spec.volumeName`` and ``pv.kubernetes.io/bind-completed``), watching the volume catalog the
reflectors keep. If a write fails, the wait times out, a claim is deleted, a provisioner
gives up (removes the selected node) or a pre-bound volume loses its claimRef, no pod is bound
and every reservation of the gang is released (``on_failure`` for each pod), so the gang is
retried whole. What was written stays written, as with kube-scheduler.

With leader election every write that commits a decision (the bindings and the PreBind writes)
carries the elector's fence: a replica no longer sure it leads sends none of them. A fenced
gang is not reported as failed (nothing would retry it here: the process is on its way out),
and nothing more of it is sent.

A binding can carry annotations (``annotations``, a function of the binding): kube-apiserver
writes them onto the pod in the same write that binds it. The GPU devices a share of a GPU was
placed on go out this way (Koordinator's ``device-allocated``, see gpushare.py), so no pod is
ever seen bound without its devices.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from gangsched.core.decisions import BindGang, Binding, ClaimBinding
from gangsched.core.volumes import (
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    Claim,
    PersistentVolume,
    VolumeCatalog,
)
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import ApiError, FenceCheck, FencedError
from gangsched.kube.storage import claim_from, pv_from
from gangsched.kube.write.claims import ClaimWriter, Written

__all__ = ["BindResult", "Binder"]

log = structlog.get_logger("gangsched.binder")


@dataclass(frozen=True, slots=True)
class BindResult:
    binding: Binding
    ok: bool
    message: str = ""


class Binder:
    def __init__(
        self,
        client: KubeApi,
        on_failure: Callable[[str, str], None],
        retries: int = 3,
        retry_delay: float = 0.5,
        *,
        volumes: VolumeCatalog | None = None,
        volume_bind_timeout: float = 600.0,
        volume_poll: float = 0.25,
        fence: FenceCheck | None = None,
        annotations: Callable[[Binding], Mapping[str, str]] | None = None,
        claims: ClaimWriter | None = None,
    ) -> None:
        self._client = client
        # PreBind for resource claims (kube/write/claims.py)
        self.claims = claims or ClaimWriter(client, fence=fence)
        self._annotations = annotations
        self._fence = fence
        self._on_failure = on_failure
        self._retries = retries
        self._delay = retry_delay
        # The watched claims and volumes; without it the binder reads them from the API.
        self._volumes = volumes
        self._volume_timeout = volume_bind_timeout
        self._volume_poll = volume_poll
        self.bound = 0
        self.failed = 0
        self.fenced = 0  # gangs not (wholly) sent because the fence said no

    async def bind_gang(self, decision: BindGang) -> list[BindResult]:
        """Bind the gang; raise :class:`FencedError` (reporting nothing) when fenced."""
        try:
            return await self._bind_gang(decision)
        except FencedError:
            self.fenced += 1
            log.error("not binding: no longer sure to lead", gang=decision.gang)
            raise

    async def _bind_gang(self, decision: BindGang) -> list[BindResult]:
        if self._fence is not None and not self._fence():
            raise FencedError("BIND", decision.gang)
        written: list[Written] = []
        if decision.claims:
            names = {b.pod.uid: b.pod.name for b in decision.bindings}
            why, written = await self.claims.write(decision.claims, names)
            if why:
                return self._all_failed(decision, f"allocating resource claims: {why}")
        if decision.volumes:
            why = await self.bind_volumes(decision.volumes)
            if why:
                log.warning("volume binding failed", gang=decision.gang, error=why)
                await self.claims.undo(written)
                return self._all_failed(decision, f"binding volumes: {why}")
        outcomes = await asyncio.gather(
            *(self.bind_one(b) for b in decision.bindings), return_exceptions=True
        )
        results: list[BindResult] = []
        for o in outcomes:
            if isinstance(o, BaseException):
                raise o
            results.append(o)
        unbound = {r.binding.pod.uid for r in results if not r.ok}
        if written and unbound:
            # the pods that did not bind stop holding their claims
            await self.claims.undo(written, unbound)
        for r in results:
            if r.ok:
                self.bound += 1
            else:
                self.failed += 1
                self._on_failure(r.binding.pod.uid, r.message)
        return list(results)

    def _all_failed(self, decision: BindGang, message: str) -> list[BindResult]:
        failed = [BindResult(b, False, message) for b in decision.bindings]
        for r in failed:
            self.failed += 1
            self._on_failure(r.binding.pod.uid, r.message)
        return failed

    async def bind_one(self, b: Binding) -> BindResult:
        pod = b.pod
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        meta: dict[str, Any] = {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid}
        annotations = self._annotations(b) if self._annotations is not None else {}
        if annotations:
            meta["annotations"] = dict(annotations)
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": b.node},
        }
        delay = self._delay
        for attempt in range(self._retries + 1):
            try:
                await self._client.post(path, body, fence=self._fence)
                return BindResult(b, True)
            except ApiError as e:
                if e.status == 409:
                    return await self._conflict(b, e)
                if e.status in (404, 410) or (e.status == 422 and "UID" in str(e)):
                    return BindResult(b, False, f"pod is gone: {e}")
                if not e.retriable or attempt == self._retries:
                    log.warning("bind failed", pod=f"{pod.namespace}/{pod.name}", error=str(e))
                    return BindResult(b, False, str(e))
                await asyncio.sleep(delay)
                delay *= 2
        return BindResult(b, False, "retries exhausted")

    async def _conflict(self, b: Binding, err: ApiError) -> BindResult:
        pod = b.pod
        try:
            current = await self._client.get(f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}")
        except ApiError as e:
            return BindResult(b, False, f"{err}; then {e}")
        meta = current.get("metadata") or {}
        node = (current.get("spec") or {}).get("nodeName")
        if meta.get("uid") != pod.uid:
            # the API server answers a failed UID precondition with 409 too
            return BindResult(b, False, f"pod is gone: recreated under the same name: {err}")
        if node == b.node:
            return BindResult(b, True)
        if node:
            return BindResult(b, False, f"already assigned to {node}: {err}")
        return BindResult(b, False, str(err))  # being deleted, or gated again

    # ---- PreBind: volumes ------------------------------------------------------------------
    async def bind_volumes(self, claims: Sequence[ClaimBinding]) -> str:
        """Write what the claims need, then wait until all are bound. '' on success, else
        why not."""
        for c in claims:
            if c.volume:
                why = await self._prebind_volume(c)
                if why:
                    return why
        for c in claims:
            if not c.volume:
                why = await self._select_node(c)
                if why:
                    return why
        return await self._wait_bound(claims)

    async def _call(self, call: Callable[[], Any]) -> Any:
        """An API call, retried like a binding on retriable errors."""
        delay = self._delay
        for attempt in range(self._retries + 1):
            try:
                return await call()
            except ApiError as e:
                if not e.retriable or attempt == self._retries:
                    raise
                await asyncio.sleep(delay)
                delay *= 2
        raise AssertionError("unreachable")

    async def _prebind_volume(self, c: ClaimBinding) -> str:
        path = f"/api/v1/persistentvolumes/{c.volume}"
        try:
            pv = await self._call(lambda: self._client.get(path))
        except ApiError as e:
            return f'reading persistentvolume "{c.volume}": {e}'
        meta = pv.get("metadata") or {}
        ref = (pv.get("spec") or {}).get("claimRef")
        ours = _refers_to(ref, c)
        if isinstance(ref, Mapping) and not ours:
            return (
                f'persistentvolume "{c.volume}" is already bound to claim '
                f"{ref.get('namespace', '')}/{ref.get('name', '')}"
            )
        patch_meta: dict[str, Any] = {"resourceVersion": meta.get("resourceVersion")}
        annotations = meta.get("annotations") or {}
        if not ours and ANN_BOUND_BY_CONTROLLER not in annotations:
            patch_meta["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
        claim_ref = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": c.namespace,
            "name": c.claim,
        }
        if c.claim_uid:
            claim_ref["uid"] = c.claim_uid
        body = {"metadata": patch_meta, "spec": {"claimRef": claim_ref}}
        try:
            await self._call(lambda: self._client.merge_patch(path, body, fence=self._fence))
        except ApiError as e:
            return f'binding persistentvolume "{c.volume}" to claim {c.namespace}/{c.claim}: {e}'
        log.info("pre-bound volume", pv=c.volume, pvc=f"{c.namespace}/{c.claim}")
        return ""

    async def _select_node(self, c: ClaimBinding) -> str:
        path = f"/api/v1/namespaces/{c.namespace}/persistentvolumeclaims/{c.claim}"
        meta: dict[str, Any] = {"annotations": {ANN_SELECTED_NODE: c.node}}
        if c.claim_uid:
            meta["uid"] = c.claim_uid  # a claim recreated under the same name is refused
        try:
            await self._call(
                lambda: self._client.merge_patch(path, {"metadata": meta}, fence=self._fence)
            )
        except ApiError as e:
            return f"selecting node {c.node} for claim {c.namespace}/{c.claim}: {e}"
        log.info("selected node for provisioning", pvc=f"{c.namespace}/{c.claim}", node=c.node)
        return ""

    async def _wait_bound(self, claims: Sequence[ClaimBinding]) -> str:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._volume_timeout
        seen: set[str] = set()  # claims whose write the watch has shown
        while True:
            done = True
            for c in claims:
                try:
                    verdict = await self._check(c, seen)
                except ApiError:
                    verdict = None  # the API could not be asked: ask again, until the deadline
                if verdict is None:
                    done = False
                elif verdict:
                    return verdict
            if done:
                return ""
            if loop.time() >= deadline:
                return f"timed out after {self._volume_timeout:g}s waiting for claims to be bound"
            await asyncio.sleep(self._volume_poll)

    async def _check(self, c: ClaimBinding, seen: set[str]) -> str | None:
        """'' when the claim is bound, None while it is not yet, else why it never will be
        (kube-scheduler's checkBindings)."""
        key = f"{c.namespace}/{c.claim}"
        claim = await self._read_claim(c)
        if claim is None:
            return f'persistentvolumeclaim "{key}" was deleted'
        if c.claim_uid and claim.uid and claim.uid != c.claim_uid:
            return f'persistentvolumeclaim "{key}" was recreated'
        if c.volume:
            pv = await self._read_volume(c.volume)
            ref = pv.claim_ref if pv is not None else None
            if ref is not None and (ref.namespace, ref.name) == (c.namespace, c.claim):
                seen.add(key)
            elif key in seen:
                return f'ClaimRef got reset for pv "{c.volume}"'
        elif claim.selected_node == c.node:
            seen.add(key)
        elif key in seen:
            return f'provisioning failed for PVC "{c.claim}"'
        return "" if claim.bound else None

    async def _read_claim(self, c: ClaimBinding) -> Claim | None:
        if self._volumes is not None:
            return self._volumes.claims.get(f"{c.namespace}/{c.claim}")
        path = f"/api/v1/namespaces/{c.namespace}/persistentvolumeclaims/{c.claim}"
        try:
            return claim_from(await self._client.get(path))
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def _read_volume(self, name: str) -> PersistentVolume | None:
        if self._volumes is not None:
            return self._volumes.volumes.get(name)
        try:
            return pv_from(await self._client.get(f"/api/v1/persistentvolumes/{name}"))
        except ApiError as e:
            if e.status == 404:
                return None
            raise


def _refers_to(ref: object, c: ClaimBinding) -> bool:
    """kube's IsVolumeBoundToClaim on a raw claimRef."""
    if not isinstance(ref, Mapping):
        return False
    if ref.get("name") != c.claim or ref.get("namespace") != c.namespace:
        return False
    uid = ref.get("uid")
    return not uid or uid == c.claim_uid
