"""Carries out BindGang decisions through the pods/binding subresource.

Bindings of a gang go out concurrently (bounded by the client). Each binding carries the pod's
UID as a precondition, so a pod deleted and recreated under the same name is never bound by
mistake. Outcomes per pod:

- 201: bound; the watch confirms it into the cache.
- 409 (already assigned): if it is assigned where we meant, that is success (a retry after a
  lost response); otherwise the reservation is dropped and the watch brings the truth.
- 404 / UID mismatch: the pod is gone; its reservation is dropped.
- 0 / 429 / 5xx: retried with backoff, then given up: the reservation is dropped and the gang
  retried. Pods cannot be unbound, so members already bound stay bound.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from gangsched.core.decisions import BindGang, Binding
from gangsched.kube.client import ApiError, KubeClient

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
        client: KubeClient,
        on_failure: Callable[[str, str], None],
        retries: int = 3,
        retry_delay: float = 0.5,
    ) -> None:
        self._client = client
        self._on_failure = on_failure
        self._retries = retries
        self._delay = retry_delay
        self.bound = 0
        self.failed = 0

    async def bind_gang(self, decision: BindGang) -> list[BindResult]:
        results = await asyncio.gather(*(self.bind_one(b) for b in decision.bindings))
        for r in results:
            if r.ok:
                self.bound += 1
            else:
                self.failed += 1
                self._on_failure(r.binding.pod.uid, r.message)
        return list(results)

    async def bind_one(self, b: Binding) -> BindResult:
        pod = b.pod
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/binding"
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": pod.name, "namespace": pod.namespace, "uid": pod.uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": b.node},
        }
        delay = self._delay
        for attempt in range(self._retries + 1):
            try:
                await self._client.post(path, body)
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
        if meta.get("uid") == pod.uid and node == b.node:
            return BindResult(b, True)
        return BindResult(b, False, f"already assigned to {node or 'another node'}: {err}")
