"""Leader election on a Lease in the fake API server: acquire a free lease, renew it, wait a
whole lease duration (as observed locally) before taking over another holder's, lose a race
on the resourceVersion, lose the lease when renewals fail past the renew deadline (the fence
then says no for good), and release it so a standby takes over at once."""

from __future__ import annotations

import asyncio
from typing import Any

from gangsched.kube.io.leader import LeaderElector
from tests.support.fakekube import FakeKube, Request

LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
LEASE = f"{LEASES}/gangsched"


class Clock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


def _elector(kube: FakeKube, identity: str, clock: Clock | None = None, **kw: Any) -> LeaderElector:
    if clock is not None:
        kw["monotonic"] = clock
    return LeaderElector(kube, "kube-system", "gangsched", identity, **kw)


def _spec(kube: FakeKube) -> dict[str, Any]:
    lease = kube.get_object(LEASE)
    assert lease is not None
    spec: dict[str, Any] = lease["spec"]
    return spec


async def test_a_free_lease_is_created_and_then_renewed() -> None:
    kube, clock = FakeKube(), Clock()
    a = _elector(kube, "a", clock)
    assert await a.try_acquire_or_renew()
    assert a.is_leader and a.fence.ok()
    spec = _spec(kube)
    assert spec["holderIdentity"] == "a" and spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert spec["acquireTime"] == spec["renewTime"]
    clock.t += 2
    assert await a.try_acquire_or_renew()
    renewed = _spec(kube)
    assert renewed["holderIdentity"] == "a" and renewed["leaseTransitions"] == 0
    assert renewed["acquireTime"] == spec["acquireTime"]
    assert [r.verb for r in kube.requests] == ["get", "create", "get", "update"]
    put = kube.sent("update")[0]
    assert put.body["metadata"]["resourceVersion"], "every write carries the version it read"


async def test_another_holders_lease_is_taken_only_a_lease_duration_after_it_last_changed() -> None:
    kube, clock = FakeKube(), Clock()
    b = _elector(kube, "b", clock)
    assert await b.try_acquire_or_renew()
    a = _elector(kube, "a", clock)
    assert not await a.try_acquire_or_renew()  # first seen now
    clock.t += 10
    assert await b.try_acquire_or_renew()  # b renews: the record changes
    assert not await a.try_acquire_or_renew()  # a sees the change now
    clock.t += 10
    assert not await a.try_acquire_or_renew(), "10 s since a saw the record change"
    clock.t += 6
    assert await a.try_acquire_or_renew(), "16 s without a change: b is gone"
    spec = _spec(kube)
    assert spec["holderIdentity"] == "a" and spec["leaseTransitions"] == 1
    assert spec["acquireTime"] == spec["renewTime"]
    assert not await b.try_acquire_or_renew()
    assert not b.is_leader


async def test_of_two_replicas_writing_the_same_version_one_wins() -> None:
    kube, clock = FakeKube(), Clock()
    old = _elector(kube, "old", clock)
    await old.try_acquire_or_renew()
    a, b = _elector(kube, "a", clock), _elector(kube, "b", clock)
    await a.try_acquire_or_renew()
    await b.try_acquire_or_renew()
    clock.t += 16

    def b_first(_: Request) -> None:  # b's write lands between a's read and a's write
        lease = kube.get_object(LEASE)
        assert lease is not None
        lease["spec"]["holderIdentity"] = "b"
        kube.seed(LEASES, lease)

    kube.before("update", "/leases/gangsched$", b_first)
    assert not await a.try_acquire_or_renew()
    assert not a.is_leader
    assert kube.sent("update")[-1].body["spec"]["holderIdentity"] == "a", "a tried"
    assert _spec(kube)["holderIdentity"] == "b"


async def test_renewals_failing_past_the_renew_deadline_lose_the_lease_for_good() -> None:
    kube = FakeKube()
    a = _elector(kube, "a", lease_duration=0.3, renew_deadline=0.1, retry_period=0.02)
    await asyncio.wait_for(a.acquire(), 1)
    kube.fail("update", "/leases/", 503, times=None)
    await asyncio.wait_for(a.hold(), 1)  # returns once the lease is lost
    assert not a.is_leader and not a.fence.ok() and a.fence.lost.is_set()
    kube.rules.clear()
    assert await a.try_acquire_or_renew()  # a later renewal succeeds...
    assert not a.fence.ok(), "...but a replica deposed once stays deposed"


async def test_a_leader_that_stalls_is_no_longer_sure_before_another_can_take_over() -> None:
    kube, clock = FakeKube(), Clock()
    a = _elector(kube, "a", clock)
    await a.try_acquire_or_renew()
    clock.t += 9.9
    assert a.fence.ok()
    clock.t += 0.2  # past the renew deadline (10 s), still within the lease duration (15 s)
    assert not a.fence.ok() and a.fence.lost.is_set()


async def test_release_hands_the_lease_to_a_standby_at_once() -> None:
    kube, clock = FakeKube(), Clock()
    a, b = _elector(kube, "a", clock), _elector(kube, "b", clock)
    await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    spec = _spec(kube)
    assert spec["holderIdentity"] is None and spec["leaseDurationSeconds"] == 1
    assert not a.is_leader
    assert await b.try_acquire_or_renew(), "no holder: taken without waiting"
    assert _spec(kube)["holderIdentity"] == "b"


async def test_release_leaves_a_lease_another_replica_holds_alone() -> None:
    kube, clock = FakeKube(), Clock()
    a = _elector(kube, "a", clock)
    await a.try_acquire_or_renew()
    lease = kube.get_object(LEASE)
    assert lease is not None
    lease["spec"]["holderIdentity"] = "b"
    kube.seed(LEASES, lease)
    writes = len(kube.sent("update"))
    await a.release()
    assert len(kube.sent("update")) == writes
    assert _spec(kube)["holderIdentity"] == "b" and not a.is_leader
