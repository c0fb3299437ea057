"""The JSON client against a local HTTP server: errors as ApiError with the API server's
message and whether they are worth retrying, list answers, the bound on requests in flight, a
watch stream split anywhere, the fence asked after the rate limit; and the rate limit's two
lanes on a fake clock."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from types import SimpleNamespace

import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from gangsched.kube.io import client as kclient
from gangsched.kube.io.client import ApiError, FencedError, KubeClient

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Server:
    def __init__(self) -> None:
        self.routes: dict[str, Handler] = {}
        self.seen: list[tuple[str, str, dict[str, str]]] = []
        self.url = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.seen.append((request.method, request.path, dict(request.query)))
        return await self.routes[request.path](request)


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    srv = Server()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", srv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    srv.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield srv
    finally:
        await runner.cleanup()


def _client(url: str, **kw: float) -> KubeClient:
    return KubeClient(Configuration(host=url), **kw)  # type: ignore[arg-type]


def _answer(status: int, body: object) -> Handler:
    async def handle(_: web.Request) -> web.Response:
        if isinstance(body, str):
            return web.Response(status=status, text=body)
        return web.json_response(body, status=status)

    return handle


@pytest.mark.parametrize(
    ("status", "retriable"),
    [
        *[(s, True) for s in (0, 429, 500, 503, 504)],
        *[(s, False) for s in (400, 401, 403, 404, 409, 410, 422)],
    ],
)
def test_which_errors_are_worth_retrying(status: int, retriable: bool) -> None:
    assert ApiError(status, "x").retriable is retriable


async def test_answers_and_errors(server: Server) -> None:
    status = {"kind": "Status", "code": 409, "reason": "AlreadyExists", "message": "pods exists"}
    server.routes = {
        "/ok": _answer(200, {"kind": "Pod"}),
        "/array": _answer(200, [1, 2]),
        "/empty": _answer(200, ""),
        "/conflict": _answer(409, status),
        "/proxy": _answer(502, "<html>bad gateway</html>"),
    }
    client = _client(server.url)
    try:
        assert await client.get("/ok", limit=5) == {"kind": "Pod"}
        assert await client.get("/array") == {"items": [1, 2]}
        assert await client.get("/empty") == {}
        with pytest.raises(ApiError) as conflict:
            await client.post("/conflict", {"a": 1})
        assert (conflict.value.status, conflict.value.reason) == (409, "Conflict")
        assert conflict.value.body == status
        assert str(conflict.value) == "HTTP 409 Conflict: pods exists"
        with pytest.raises(ApiError) as proxy:
            await client.merge_patch("/proxy", {})
        assert proxy.value.status == 502 and proxy.value.retriable
        assert "bad gateway" in str(proxy.value)
    finally:
        await client.close()
    assert server.seen[0] == ("GET", "/ok", {"limit": "5"})


async def test_an_unreachable_server_is_status_zero_and_retriable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    client = _client(f"http://127.0.0.1:{port}")
    try:
        with pytest.raises(ApiError) as down:
            await client.get("/api/v1/pods")
        with pytest.raises(ApiError) as watch_down:
            async for _ in client.watch("/api/v1/pods", {}):
                pass
    finally:
        await client.close()
    assert down.value.status == 0 and down.value.retriable
    assert watch_down.value.status == 0


async def test_at_most_max_in_flight_requests_at_once(server: Server) -> None:
    inside, most = 0, 0
    release = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await release.wait()
        inside -= 1
        return web.json_response({})

    server.routes = {"/slow": slow}
    client = _client(server.url, max_in_flight=2, qps=0)
    try:
        calls = [asyncio.create_task(client.get("/slow")) for _ in range(6)]
        await asyncio.sleep(0.2)
        assert (inside, most) == (2, 2)
        release.set()
        await asyncio.gather(*calls)
    finally:
        await client.close()
    assert most == 2 and len(server.seen) == 6


async def test_background_writes_do_not_queue_behind_a_backlog_of_bindings(
    server: Server,
) -> None:
    """A quarter of the requests in flight is the background lane's own: with every other
    slot taken and more bindings queued, an event is still sent at once, and the two lanes
    together never exceed the bound."""
    inside, most = 0, 0
    release = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        await release.wait()
        inside -= 1
        return web.json_response({})

    async def quick(_: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    server.routes = {"/slow": slow, "/event": quick}
    client = _client(server.url, max_in_flight=4, qps=0)
    try:
        bindings = [asyncio.create_task(client.post("/slow", {})) for _ in range(10)]
        await asyncio.sleep(0.2)
        assert inside == 3  # the foreground lane's three slots
        with kclient.background_lane():
            answer = await asyncio.wait_for(client.post("/event", {}), 5)
        assert answer == {"ok": True}
        release.set()
        await asyncio.gather(*bindings)
    finally:
        await client.close()
    assert most == 3


async def test_while_bindings_are_in_flight_informational_writes_go_two_at_a_time(
    server: Server,
) -> None:
    """A foreground request in flight leaves the background lane BACKGROUND_WHILE_BUSY
    requests at once; when it is done, the background has every slot of its own again."""
    inside: dict[str, int] = {"/binding": 0, "/event": 0}
    most: dict[str, int] = {"/binding": 0, "/event": 0}
    release = {"/binding": asyncio.Event(), "/event": asyncio.Event()}

    def slow(path: str) -> Handler:
        async def handle(_: web.Request) -> web.Response:
            inside[path] += 1
            most[path] = max(most[path], inside[path])
            await release[path].wait()
            inside[path] -= 1
            return web.json_response({})

        return handle

    server.routes = {p: slow(p) for p in inside}
    client = _client(server.url, max_in_flight=32, qps=0)  # the background lane: 8 slots
    try:
        binding = asyncio.create_task(client.post("/binding", {}))
        await asyncio.sleep(0.1)
        with kclient.background_lane():
            events = [asyncio.create_task(client.post("/event", {})) for _ in range(12)]
        await asyncio.sleep(0.2)
        assert inside["/event"] == kclient.BACKGROUND_WHILE_BUSY
        release["/binding"].set()
        await binding
        await asyncio.sleep(0.2)
        assert inside["/event"] == 8, "the binding is done: the lane's every slot"
        release["/event"].set()
        await asyncio.gather(*events)
    finally:
        await client.close()
    assert most["/event"] == 8 and len(server.seen) == 13


async def test_writes_that_waited_for_their_share_still_go_out_at_the_rate_limit(
    server: Server,
) -> None:
    """Informational writes held back while a binding is in flight do not leave together
    when it is done: the server sees every request within the token bucket (burst + qps per
    second, in any window of arrivals)."""
    qps, burst = 20.0, 2
    arrivals: list[float] = []
    loop = asyncio.get_running_loop()
    release = asyncio.Event()

    async def binding(_: web.Request) -> web.Response:
        arrivals.append(loop.time())
        await release.wait()
        return web.json_response({})

    async def event(_: web.Request) -> web.Response:
        arrivals.append(loop.time())
        await asyncio.sleep(0.3)  # a slow server: the share's two slots stay taken
        return web.json_response({})

    server.routes = {"/binding": binding, "/event": event}
    client = _client(server.url, qps=qps, burst=burst)
    try:
        held = asyncio.create_task(client.post("/binding", {}))
        await asyncio.sleep(0.05)
        with kclient.background_lane():
            events = [asyncio.create_task(client.post("/event", {})) for _ in range(16)]
        await asyncio.sleep(1.0)
        release.set()
        await asyncio.gather(held, *events)
    finally:
        await client.close()
    assert len(arrivals) == 17
    worst = max(
        (j - i + 1) / (burst + qps * (arrivals[j] - arrivals[i]) + 1)  # one of slack for timing
        for i in range(len(arrivals))
        for j in range(i, len(arrivals))
    )
    assert worst <= 1.0, f"{worst:.2f} of what the rate limit allows"


async def test_a_prefetched_get_is_sent_once_and_taken_by_the_same_get(server: Server) -> None:
    server.routes = {
        "/api/v1/pods": _answer(200, {"items": [{"metadata": {"name": "a"}}]}),
        "/apis/x/v1/things": _answer(404, {"kind": "Status", "code": 404, "message": "gone"}),
    }
    client = _client(server.url)
    try:
        client.prefetch("/api/v1/pods", limit=1000)
        client.prefetch("/apis/x/v1/things", limit=500)
        await asyncio.sleep(0.1)
        assert len(server.seen) == 2, "both sent at once"
        # other parameters: a request of its own
        assert await client.get("/api/v1/pods", limit=500) == {
            "items": [{"metadata": {"name": "a"}}]
        }
        assert len(server.seen) == 3
        assert await client.get("/api/v1/pods", limit=1000) == {
            "items": [{"metadata": {"name": "a"}}]
        }
        with pytest.raises(ApiError) as gone:
            await client.get("/apis/x/v1/things", limit=500)
        assert gone.value.status == 404, "the early answer's error, as asking would have"
        assert len(server.seen) == 3, "taken, not asked again"
        await client.get("/api/v1/pods", limit=1000)
        assert len(server.seen) == 4, "taken once: the next get asks"
    finally:
        await client.close()


async def test_a_prefetched_answer_not_taken_in_time_is_dropped(server: Server) -> None:
    server.routes = {"/api/v1/nodes": _answer(200, {"items": []})}
    client = _client(server.url)
    try:
        client.prefetch("/api/v1/nodes", keep=0.05, limit=500)
        await asyncio.sleep(0.2)
        await client.get("/api/v1/nodes", limit=500)
        assert len(server.seen) == 2
    finally:
        await client.close()


async def test_warmed_connections_are_the_ones_requests_use(server: Server) -> None:
    server.routes = {"/ok": _answer(200, {})}
    client = _client(server.url)
    try:
        assert await client.warm(4) == 4
        assert await client.warm(4) == 0, "already idle"
        direct = client._direct
        assert direct is not None and direct.connections_made == 4
        await asyncio.gather(*(client.get("/ok") for _ in range(4)))
        assert direct.connections_made == 4
    finally:
        await client.close()


async def test_a_watch_stream_split_anywhere_is_read_line_by_line(server: Server) -> None:
    events = [{"type": "ADDED", "object": {"metadata": {"name": f"p{i}"}}} for i in range(3)]
    raw = b"".join(json.dumps(e).encode() + b"\n" for e in events) + b"\n"

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(request)
        for i in range(0, len(raw), 7):  # chunks that cut lines and JSON apart
            await resp.write(raw[i : i + 7])
            await asyncio.sleep(0)
        return resp

    server.routes = {"/api/v1/pods": stream}
    client = _client(server.url)
    try:
        got = [e async for e in client.watch("/api/v1/pods", {"resourceVersion": "5"})]
    finally:
        await client.close()
    assert got == events
    assert server.seen == [("GET", "/api/v1/pods", {"resourceVersion": "5", "watch": "true"})]


async def test_held_watches_start_once_their_gate_opens_and_lists_do_not_wait(
    server: Server,
) -> None:
    """hold_watches: no watch reaches the server before the gate returns (every watch waits
    for the same one); GETs go meanwhile."""
    event = {"type": "ADDED", "object": {"metadata": {"name": "p"}}}
    server.routes = {
        "/api/v1/pods": _answer(200, {"items": []}),
        "/api/v1/nodes": _answer(200, json.dumps(event) + "\n"),
    }
    opened = asyncio.Event()
    gate_calls = 0

    async def gate() -> None:
        nonlocal gate_calls
        gate_calls += 1
        await opened.wait()

    client = _client(server.url)
    client.hold_watches(gate)

    async def first(path: str) -> object:
        async for e in client.watch(path, {}):
            return e
        return None

    try:
        watches = [asyncio.create_task(first("/api/v1/nodes")) for _ in range(2)]
        assert await client.get("/api/v1/pods") == {"items": []}
        await asyncio.sleep(0.2)
        assert server.seen == [("GET", "/api/v1/pods", {})]  # the list, no watch yet
        opened.set()
        assert await asyncio.wait_for(asyncio.gather(*watches), 10) == [event, event]
    finally:
        await client.close()
    assert gate_calls == 1
    assert server.seen.count(("GET", "/api/v1/nodes", {"watch": "true"})) == 2


async def test_a_refused_watch_is_an_api_error(server: Server) -> None:
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"}
    server.routes = {"/api/v1/pods": _answer(410, gone)}
    client = _client(server.url)
    try:
        with pytest.raises(ApiError) as expired:
            async for _ in client.watch("/api/v1/pods", {"resourceVersion": "1"}):
                pass
    finally:
        await client.close()
    assert expired.value.status == 410 and "too old" in str(expired.value)


async def test_a_fenced_write_waiting_for_the_rate_limit_is_not_sent_once_fenced(
    server: Server,
) -> None:
    server.routes = {"/a": _answer(201, {}), "/b": _answer(201, {})}
    client = _client(server.url, qps=20, burst=1)
    sure = True
    try:
        await client.post("/a", {})  # takes the only token
        write = asyncio.create_task(client.post("/b", {}, fence=lambda: sure))
        await asyncio.sleep(0.01)  # waiting about 50 ms for a token
        sure = False
        with pytest.raises(FencedError):
            await write
    finally:
        await client.close()
    assert [p for _, p, _ in server.seen] == ["/a"]


# ---- the rate limit on a fake clock ---------------------------------------------------------


class FakeTime:
    """Replaces the client module's clock and sleep: sleeping moves the clock."""

    def __init__(self) -> None:
        self.t = 0.0
        self.real_sleep = asyncio.sleep

    def monotonic(self) -> float:
        return self.t

    async def sleep(self, seconds: float) -> None:
        self.t += seconds
        await self.real_sleep(0)


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> FakeTime:
    ft = FakeTime()
    monkeypatch.setattr(kclient, "time", SimpleNamespace(monotonic=ft.monotonic))
    monkeypatch.setattr(kclient, "asyncio", SimpleNamespace(sleep=ft.sleep, Lock=asyncio.Lock))
    return ft


async def test_the_foreground_lane_uses_the_burst_then_the_rate(fake_time: FakeTime) -> None:
    bucket = kclient._TokenBucket(qps=10, burst=4)
    stamps = []
    for _ in range(8):
        await bucket.take()
        stamps.append(round(fake_time.t, 3))
    assert stamps == [0, 0, 0, 0, 0.1, 0.2, 0.3, 0.4]


async def test_the_background_lane_leaves_half_the_burst_to_the_foreground(
    fake_time: FakeTime,
) -> None:
    bucket = kclient._TokenBucket(qps=10, burst=4)
    for _ in range(2):
        await bucket.take(background=True)
    assert fake_time.t == 0, "down to the reserve at once"
    await bucket.take(background=True)
    assert fake_time.t > 0, "the reserve is not the background lane's"
    t = fake_time.t
    for _ in range(2):  # the reserve: a gang's bindings find it at once
        await bucket.take()
    assert fake_time.t == t


async def test_the_background_lane_waits_while_a_foreground_request_waits(
    fake_time: FakeTime,
) -> None:
    bucket = kclient._TokenBucket(qps=10, burst=2)
    order: list[str] = []

    async def take(name: str, background: bool) -> None:
        await bucket.take(background)
        order.append(name)

    await bucket.take()
    await bucket.take()  # empty
    # the informational write asks first, then three bindings
    tasks = [asyncio.create_task(take("info", True))]
    tasks += [asyncio.create_task(take(f"bind{i}", False)) for i in range(3)]
    await asyncio.gather(*tasks)
    assert order == ["bind0", "bind1", "bind2", "info"]


async def test_no_rate_limit_when_qps_is_zero(fake_time: FakeTime) -> None:
    bucket = kclient._TokenBucket(qps=0, burst=1)
    for _ in range(100):
        await bucket.take()
        await bucket.take(background=True)
    assert fake_time.t == 0


_WITHOUT_AIOHTTP = """
import asyncio, sys
from gangsched.kube.io.client import KubeClient
from gangsched.kube.io.kubeconfig import ClusterConfig

WATCH = b'{"type":"ADDED","object":{"metadata":{"name":"a"}}}\\n'

async def serve(reader, writer):
    head = await reader.readuntil(b"\\r\\n\\r\\n")
    if b"watch=true" in head:
        writer.write(b"HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n")
        writer.write(b"%x\\r\\n%s\\r\\n0\\r\\n\\r\\n" % (len(WATCH), WATCH))
    else:
        body = b'{"items":[],"metadata":{"resourceVersion":"7"}}'
        writer.write(b"HTTP/1.1 200 OK\\r\\nContent-Length: %d\\r\\n\\r\\n%s" % (len(body), body))
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = KubeClient(ClusterConfig(host=f"http://127.0.0.1:{port}"))
    listed = await client.get("/api/v1/pods")
    events = [e async for e in client.watch("/api/v1/pods", {"resourceVersion": "7"})]
    await client.close()
    server.close()
    print(listed["metadata"]["resourceVersion"], len(events), "aiohttp" in sys.modules)

asyncio.run(main())
"""


def test_lists_and_watches_need_no_aiohttp() -> None:
    """Without a proxy, the scheduler's lists and watches go on the small HTTP/1.1 client:
    aiohttp (about a fifth of a CPU-second to import, with its TLS contexts) is not imported
    while the scheduler starts."""
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_AIOHTTP], capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7", "1", "False"]
