"""Leader election on a coordination.k8s.io/v1 Lease.

As client-go does it: a replica takes the lease when it is free or when its record has not
changed for a whole lease duration *as observed locally* (so clock skew between replicas does
not matter), and every write carries the resourceVersion it read (so two replicas can never
both win). The leader renews every retry period; if it cannot renew within the renew
deadline it stops leading. The scheduler exits then, like kube-scheduler: a replica that is
no longer sure it leads must not bind anything, and its restart is a clean follower.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import structlog

from gangsched.kube.client import ApiError, KubeClient
from gangsched.kube.reporter import rfc3339

__all__ = ["LeaderElector"]

log = structlog.get_logger("gangsched.leader")


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if not retry_period < renew_deadline < lease_duration:
            raise ValueError("need retryPeriod < renewDeadline < leaseDuration")
        self._client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._now = monotonic
        self._observed_rv = ""
        self._observed_at = 0.0
        self._last_renew = 0.0
        self.is_leader = False
        self.transitions = 0

    @property
    def _path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    async def acquire(self) -> None:
        """Return once this replica leads."""
        log.info("waiting for the leader lease", lease=f"{self.namespace}/{self.name}")
        while not await self.try_acquire_or_renew():
            await asyncio.sleep(self.retry_period)
        log.info("leading", lease=f"{self.namespace}/{self.name}", identity=self.identity)

    async def hold(self) -> None:
        """Renew until the lease is lost; then return."""
        while True:
            await asyncio.sleep(self.retry_period)
            try:
                renewed = await asyncio.wait_for(
                    self.try_acquire_or_renew(), timeout=self.retry_period
                )
            except TimeoutError:
                renewed = False
            if not renewed and self._now() - self._last_renew > self.renew_deadline:
                self.is_leader = False
                log.error("lost the leader lease", lease=f"{self.namespace}/{self.name}")
                return

    async def release(self) -> None:
        """Give the lease up at shutdown, so another replica takes over at once."""
        if not self.is_leader:
            return
        try:
            lease = await self._client.get(f"{self._path}/{self.name}")
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != self.identity:
                return
            spec.update({"holderIdentity": None, "leaseDurationSeconds": 1})
            await self._client.request("PUT", f"{self._path}/{self.name}", body=lease)
        except ApiError as e:
            log.warning("could not release the lease", error=str(e))
        finally:
            self.is_leader = False

    async def try_acquire_or_renew(self) -> bool:
        now = self._now()
        try:
            lease = await self._client.get(f"{self._path}/{self.name}")
        except ApiError as e:
            if e.status != 404:
                log.warning("reading the lease failed", error=str(e))
                return False
            return await self._create(now)
        meta = lease.get("metadata") or {}
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        rv = str(meta.get("resourceVersion", ""))
        if rv != self._observed_rv:
            self._observed_rv, self._observed_at = rv, now
        holder = spec.get("holderIdentity") or ""
        mine = holder == self.identity
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and not mine and now < self._observed_at + duration:
            self.is_leader = False
            return False
        stamp = rfc3339(micro=True)
        if not mine:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "renewTime": stamp,
            }
        )
        body = {**lease, "spec": spec}
        try:
            updated = await self._client.request("PUT", f"{self._path}/{self.name}", body=body)
        except ApiError as e:
            if e.status != 409:
                log.warning("writing the lease failed", error=str(e))
            return self._still_leading(now)
        self._observed_rv = str((updated.get("metadata") or {}).get("resourceVersion", ""))
        self._observed_at = self._last_renew = now
        if not self.is_leader:
            self.transitions += 1
        self.is_leader = True
        return True

    def _still_leading(self, now: float) -> bool:
        return self.is_leader and now - self._last_renew <= self.renew_deadline

    async def _create(self, now: float) -> bool:
        stamp = rfc3339(micro=True)
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": stamp,
                "renewTime": stamp,
                "leaseTransitions": 0,
            },
        }
        try:
            created = await self._client.post(self._path, body)
        except ApiError as e:
            if e.status not in (409, 404):
                log.warning("creating the lease failed", error=str(e))
            return False
        self._observed_rv = str((created.get("metadata") or {}).get("resourceVersion", ""))
        self._observed_at = self._last_renew = now
        self.is_leader = True
        self.transitions += 1
        return True
