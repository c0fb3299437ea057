"""Leader election on a coordination.k8s.io/v1 Lease.

As client-go does it: a replica takes the lease when it is free or when its record has not
changed for a whole lease duration *as observed locally* (so clock skew between replicas does
not matter), and every write carries the resourceVersion it read (so two replicas can never
both win). The leader renews every retry period; if it cannot renew within the renew
deadline it stops leading. The scheduler exits then, like kube-scheduler: a replica that is
no longer sure it leads must not bind anything, and its restart is a clean follower.

Being sure is a matter of time, not of what the last renewal answered: the leader is sure
while less than the renew deadline has passed, by a monotonic clock (which keeps counting
while the process is paused), since it sent its last successful renewal. Another replica
takes over only a whole lease duration after it saw that renewal, so a replica that is sure
has not been replaced. :class:`Fence` turns that into a check that every write committing a
decision passes right before it is sent.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from typing import Any

import structlog

from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import ApiError
from gangsched.kube.io.times import rfc3339

__all__ = ["Fence", "LeaderElector"]

log = structlog.get_logger("gangsched.leader")


class Fence:
    """Whether this process may still commit decisions: ``ok()`` asks ``sure`` until it first
    says no, then never again (a replica that was deposed stays deposed, even should a later
    renewal succeed), and sets ``lost``."""

    def __init__(self, sure: Callable[[], bool]) -> None:
        self._sure = sure
        self.lost = asyncio.Event()

    def ok(self) -> bool:
        if self.lost.is_set():
            return False
        if self._sure():
            return True
        self.lost.set()
        log.error("no longer sure to lead; sending nothing more")
        return False

    async def wait(self) -> None:
        """Return once ``ok()`` has said no."""
        await self.lost.wait()


class LeaderElector:
    def __init__(
        self,
        client: KubeApi,
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
        self._last_renew = 0.0  # when the last successful renewal was started
        self.is_leader = False
        self.transitions = 0
        self.fence = Fence(self.sure)

    def sure(self) -> bool:
        """Leading, and the last successful renewal was started less than the renew deadline
        ago: no other replica can have taken the lease over yet."""
        return self.is_leader and self._now() - self._last_renew < self.renew_deadline

    @property
    def _duration_seconds(self) -> int:
        """What the record says others must wait: whole seconds, rounded up (never below the
        renew deadline the fence relies on)."""
        return math.ceil(self.lease_duration)

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
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a
                # cancellation that arrives as the renewal completes, and hold() would not stop.
                async with asyncio.timeout(self.retry_period):
                    renewed = await self.try_acquire_or_renew()
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

    async def close(self) -> None:
        """Close the client the elector was given (its own, in the app)."""
        await self._client.close()

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
            # When the record was seen, not when it was asked for: a reply can show a renewal
            # made after the request left, and the lease duration counts from that renewal.
            self._observed_rv, self._observed_at = rv, self._now()
        holder = spec.get("holderIdentity") or ""
        mine = holder == self.identity
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration)
        if holder and not mine and self._now() < self._observed_at + duration:
            self.is_leader = False
            return False
        stamp = rfc3339(micro=True)
        if not mine:
            spec["acquireTime"] = stamp
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
        spec.update(
            {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self._duration_seconds,
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
                "leaseDurationSeconds": self._duration_seconds,
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
