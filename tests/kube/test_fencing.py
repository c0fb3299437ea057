"""Fencing a deposed leader: the elector's sureness by a monotonic clock (gangsched.kube.io.leader),
the client that sends nothing once a write's fence says no (gangsched.kube.io.client), and the
binder that stops a gang without reporting it failed (gangsched.kube.write.binder).

The elector and the binder run against fake API clients with an injected clock; the client runs
against a real HTTP server, since what matters there is which bytes leave the process.
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from gangsched.core.decisions import BindGang, Binding, ClaimBinding, PodRef
from gangsched.kube.io.client import ApiError, FencedError, KubeClient, user_agent
from gangsched.kube.io.leader import Fence, LeaderElector
from gangsched.kube.write.binder import Binder

LEASE = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/lease"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class FakeLeases:
    """One Lease, with resourceVersion preconditions; ``get_takes`` seconds pass on the clock
    while a read is in flight."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.lease: dict[str, Any] | None = None
        self.rv = 0
        self.get_takes = 0.0
        self.writes: list[dict[str, Any]] = []

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        self.writes.append(copy.deepcopy(self.lease))
        return copy.deepcopy(self.lease)

    def hold(self, holder: str, duration: int = 15) -> None:
        """Another replica writes the record."""
        body: dict[str, Any] = self.lease or {"metadata": {"name": "lease"}, "spec": {}}
        body["spec"].update({"holderIdentity": holder, "leaseDurationSeconds": duration})
        self._store(body)

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.clock.t += self.get_takes
        if self.lease is None:
            raise ApiError(404, "NotFound")
        return copy.deepcopy(self.lease)

    async def post(self, path: str, body: Any) -> dict[str, Any]:
        if self.lease is not None:
            raise ApiError(409, "AlreadyExists")
        return self._store(body)

    async def request(self, method: str, path: str, *, body: Any = None) -> dict[str, Any]:
        assert method == "PUT" and self.lease is not None
        if body["metadata"]["resourceVersion"] != self.lease["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict")
        return self._store(body)


def _elector(leases: FakeLeases, clock: Clock, identity: str = "a", **kw: float) -> LeaderElector:
    kw = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0, **kw}
    return LeaderElector(
        leases,  # type: ignore[arg-type]
        "ns",
        "lease",
        identity,
        monotonic=clock,
        **kw,
    )


async def test_sure_until_the_renew_deadline_from_when_the_renewal_was_started() -> None:
    clock = Clock()
    leases = FakeLeases(clock)
    leases.get_takes = 1.5  # the read is slow: sureness counts from before it was sent
    el = _elector(leases, clock)
    assert not el.sure(), "not sure before leading"
    started = clock.t
    assert await el.try_acquire_or_renew()
    assert el.is_leader and el.sure()
    clock.t = started + 9.999
    assert el.sure()
    clock.t = started + 10.0
    assert not el.sure(), "10 s after the renewal was started, not 10 s after it was answered"


async def test_a_pause_past_the_deadline_trips_the_fence_for_good() -> None:
    clock = Clock()
    leases = FakeLeases(clock)
    el = _elector(leases, clock)
    assert await el.try_acquire_or_renew()
    fence = el.fence
    assert fence.ok() and not fence.lost.is_set()
    clock.t += 2.0
    assert await el.try_acquire_or_renew()
    clock.t += 9.0  # within the deadline of the second renewal
    assert fence.ok()
    clock.t += 30.0  # paused (SIGSTOP, a long GC pause): the monotonic clock kept counting
    assert not fence.ok()
    assert fence.lost.is_set()
    # nobody took over and the next renewal succeeds: the fence stays shut all the same
    assert await el.try_acquire_or_renew()
    assert el.sure()
    assert not fence.ok()
    await asyncio.wait_for(fence.wait(), 1)


async def test_the_fence_expires_before_another_replica_can_take_over() -> None:
    """Replica b sees a's renewal only after its read returns (the read took 3 s); it may take
    over a whole lease duration later, by then a has not been sure for a while."""
    clock = Clock()
    leases = FakeLeases(clock)
    a = _elector(leases, clock, "a", lease_duration=4.0, renew_deadline=3.0, retry_period=0.5)
    b = _elector(leases, clock, "b", lease_duration=4.0, renew_deadline=3.0, retry_period=0.5)
    assert await a.try_acquire_or_renew()
    renewed = clock.t
    leases.get_takes = 3.0
    assert not await b.try_acquire_or_renew()
    leases.get_takes = 0.0
    first_take = None
    while first_take is None:
        clock.t += 0.1
        if await b.try_acquire_or_renew():
            first_take = clock.t
    assert first_take >= renewed + 3.0 + 4.0 - 1e-9, "observed when the reply came, not before"
    a_unsure = renewed + 3.0
    assert first_take - a_unsure >= 1.0 - 1e-9  # leaseDuration - renewDeadline, at least


async def test_the_record_never_promises_less_than_the_lease_duration() -> None:
    clock = Clock()
    leases = FakeLeases(clock)
    el = _elector(leases, clock, lease_duration=3.5, renew_deadline=3.2, retry_period=1.0)
    assert await el.try_acquire_or_renew()
    assert leases.writes[-1]["spec"]["leaseDurationSeconds"] == 4


async def test_a_replica_that_sees_another_holder_is_no_longer_sure() -> None:
    clock = Clock()
    leases = FakeLeases(clock)
    el = _elector(leases, clock)
    assert await el.try_acquire_or_renew()
    leases.hold("b")  # the record changed under us (b took over while we did not look)
    clock.t += 1.0
    assert not await el.try_acquire_or_renew()
    assert not el.fence.ok()


def test_fence_asks_until_the_first_no() -> None:
    answers = iter([True, True, False, True])
    asked: list[int] = []

    def sure() -> bool:
        asked.append(1)
        return next(answers)

    fence = Fence(sure)
    assert [fence.ok() for _ in range(5)] == [True, True, False, False, False]
    assert len(asked) == 3


# ---- the client: nothing leaves once the fence says no ------------------------------------


class Server:
    def __init__(self) -> None:
        self.requests: list[tuple[str, str, str]] = []


@pytest.fixture
async def server() -> AsyncIterator[tuple[Server, str]]:
    seen = Server()

    async def handle(request: web.Request) -> web.Response:
        # recorded as soon as the headers are in, before the body is read
        seen.requests.append((request.method, request.path, request.headers["User-Agent"]))
        body = await request.text()
        return web.json_response({"kind": "Status", "echo": body}, status=201)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield seen, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def _client(host: str) -> KubeClient:
    return KubeClient(Configuration(host=host), agent=user_agent("replica-a"))


def _nth_says_no(n: int) -> tuple[Callable[[], bool], list[int]]:
    """A fence whose n-th question (1-based) and every later one is answered no."""
    asked: list[int] = []

    def fence() -> bool:
        asked.append(1)
        return len(asked) < n

    return fence, asked


async def test_a_fenced_write_is_sent_while_the_fence_holds(server: tuple[Server, str]) -> None:
    seen, host = server
    client = _client(host)
    try:
        fence, asked = _nth_says_no(100)
        out = await client.post("/api/v1/namespaces/ns/pods/p/binding", {"x": 1}, fence=fence)
        assert json.loads(out["echo"]) == {"x": 1}  # the body as sent
        # asked after the rate limit, and right before the request's bytes (head and body, one
        # write) go out
        assert len(asked) == 2
        await client.get("/api/v1/pods")  # an unfenced request on the same hooked client
    finally:
        await client.close()
    assert [(m, p) for m, p, _ in seen.requests] == [
        ("POST", "/api/v1/namespaces/ns/pods/p/binding"),
        ("GET", "/api/v1/pods"),
    ]
    agent = seen.requests[0][2]
    assert agent.startswith("gangsched/") and agent.endswith(") replica-a"), agent


@pytest.mark.parametrize("no_at", [1, 2], ids=["after-rate-limit", "before-the-bytes"])
async def test_nothing_is_sent_once_the_fence_says_no(
    server: tuple[Server, str], no_at: int
) -> None:
    """Whichever of its checks the fence fails (the pause can come at any point of sending),
    the request never reaches the server, and the error is not an ApiError to retry."""
    seen, host = server
    client = _client(host)
    try:
        await client.get("/warm")  # a pooled connection, as under load
        fence, _ = _nth_says_no(no_at)
        with pytest.raises(FencedError):
            await client.post("/api/v1/namespaces/ns/pods/p/binding", {}, fence=fence)
        with pytest.raises(FencedError):
            await client.merge_patch("/api/v1/persistentvolumes/pv", {}, fence=fence)
        await client.get("/after")  # the client is still usable
    finally:
        await client.close()
    assert [p for _, p, _ in seen.requests] == ["/warm", "/after"]


# ---- the binder ----------------------------------------------------------------------------


class FakeApi:
    def __init__(self, fence_after: int | None = None) -> None:
        self.posts: list[str] = []
        self.patches: list[str] = []
        self.fence_after = fence_after

    def _check(self, method: str, path: str, fence: Callable[[], bool] | None) -> None:
        if fence is not None and not fence():
            raise FencedError(method, path)

    async def post(
        self, path: str, body: Any, *, fence: Callable[[], bool] | None = None
    ) -> dict[str, Any]:
        self._check("POST", path, fence)
        self.posts.append(path)
        return {}

    async def merge_patch(
        self, path: str, body: Any, *, fence: Callable[[], bool] | None = None
    ) -> dict[str, Any]:
        self._check("PATCH", path, fence)
        self.patches.append(path)
        return {}

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        return {"metadata": {"resourceVersion": "1"}, "spec": {}}


def _gang(n: int = 4, volumes: tuple[ClaimBinding, ...] = ()) -> BindGang:
    pods = tuple(Binding(PodRef(f"u{i}", "ml", f"p{i}"), "n1") for i in range(n))
    return BindGang("ml/g", pods, volumes)


async def test_binder_sends_nothing_of_a_gang_once_fenced() -> None:
    api = FakeApi()
    failures: dict[str, str] = {}
    fence, _ = _nth_says_no(1)
    binder = Binder(api, failures.__setitem__, retries=0, fence=fence)  # type: ignore[arg-type]
    with pytest.raises(FencedError):
        await binder.bind_gang(_gang())
    with pytest.raises(FencedError):
        await binder.bind_gang(_gang(1, (ClaimBinding("ml", "c", "uc", "n1", "pv"),)))
    assert api.posts == [] and api.patches == []
    assert failures == {}, "a fenced gang is not reported failed (nothing retries it)"
    assert binder.fenced == 2 and binder.failed == 0


async def test_binder_stops_mid_gang_without_failure_callbacks() -> None:
    api = FakeApi()
    failures: dict[str, str] = {}
    fence, _ = _nth_says_no(4)  # the gang's check, two bindings, then no
    binder = Binder(api, failures.__setitem__, retries=0, fence=fence)  # type: ignore[arg-type]
    with pytest.raises(FencedError):
        await binder.bind_gang(_gang())
    assert len(api.posts) == 2
    assert failures == {}


async def test_prebind_writes_are_fenced() -> None:
    api = FakeApi()
    failures: dict[str, str] = {}
    fence, _ = _nth_says_no(2)  # the gang's check passes, the volume's claimRef write does not
    binder = Binder(api, failures.__setitem__, retries=0, fence=fence)  # type: ignore[arg-type]
    claims = (ClaimBinding("ml", "c", "uc", "n1", "pv"), ClaimBinding("ml", "d", "ud", "n1"))
    with pytest.raises(FencedError):
        await binder.bind_gang(_gang(2, claims))
    assert api.patches == [] and api.posts == []
    assert failures == {}


async def test_without_a_fence_the_binder_binds() -> None:
    api = FakeApi()
    failures: dict[str, str] = {}
    binder = Binder(api, failures.__setitem__, retries=0)  # type: ignore[arg-type]
    results = await binder.bind_gang(_gang())
    assert all(r.ok for r in results) and len(api.posts) == 4
