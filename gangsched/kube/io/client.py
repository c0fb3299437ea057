"""A thin JSON client: the configuration from kubeconfig.py (kubeconfig, in-cluster), then
requests and watches on a small HTTP/1.1 client (http1.py; an aiohttp session when a proxy is
in the way) with raw JSON in and out (msgspec; no model classes), a client-side rate limit and
a bound on requests in flight, so a burst of pods does not flood the API server. The rate
limit has two lanes: informational writes (sent inside :func:`background_lane`) never hold up
a binding.

A write may carry a fence (a callable that says whether it may still be sent): it is asked
after the rate limit and the bound on requests in flight, and again right before the request's
bytes are written to the connection; when it says no, nothing is sent and :class:`FencedError` is
raised."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import importlib
import platform
import ssl
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import msgspec

from gangsched import __version__
from gangsched.kube.io.http1 import ConnectionFailedError, Http1Pool
from gangsched.kube.io.kubeconfig import ClusterConfig, from_kubernetes_asyncio
from gangsched.kube.io.kubeconfig import load as load_kubeconfig
from gangsched.kube.io.turns import Turns

if TYPE_CHECKING:
    # aiohttp carries watches (and requests through a proxy): imported when first needed, so
    # that the first lists can be under way before it is loaded (see gangsched/boot.py)
    import aiohttp
    from kubernetes_asyncio.client import Configuration

__all__ = [
    "ApiError",
    "FenceCheck",
    "FencedError",
    "KubeClient",
    "background_lane",
    "load_configuration",
    "user_agent",
]

JSON = dict[str, Any]
FenceCheck = Callable[[], bool]

_decode = msgspec.json.Decoder().decode
_encode = msgspec.json.Encoder().encode


# background requests in flight at most while a foreground one is (see _Share)
BACKGROUND_WHILE_BUSY = 2
# how long after its arrival an answer asked for ahead of time may still be taken
# (KubeClient.prefetch)
PREFETCH_KEEP = 2.0

_GetKey = tuple[str, tuple[tuple[str, str], ...]]


def _get_key(path: str, params: Mapping[str, Any]) -> _GetKey:
    return path, tuple(sorted((k, _param(v)) for k, v in params.items()))


# How long a watch waits for its answer's head once connected (the API server sends it as
# soon as the watch is registered; the events come after it, with no limit on the wait).
_WATCH_HEAD_TIMEOUT = 60.0

# what may stand unescaped in a request path (RFC 3986 pchar and "/")
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


def _param(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def user_agent(identity: str, component: str = "") -> str:
    """``gangsched/<version> (<os>/<arch>) <identity>[/<component>]``, as kube components name
    themselves, so the API server's audit log tells each process (and its part) apart."""
    system = f"{platform.system().lower()}/{platform.machine().lower()}"
    who = "/".join(part for part in (identity, component) if part)
    return f"gangsched/{__version__} ({system}) {who}".rstrip()


class FencedError(Exception):
    """A fenced write was not sent: its fence said no. Not an :class:`ApiError`, so no handler
    of API errors mistakes it for a failure worth retrying."""

    def __init__(self, method: str, path: str) -> None:
        super().__init__(f"{method} {path} not sent: no longer sure to lead")


class _FenceTrippedError(Exception):
    pass


class _FenceGuard:
    def __init__(self, fence: FenceCheck) -> None:
        self.fence = fence
        self.tripped = False


# The fence of the request the current task is sending (tasks copy it at creation, so aiohttp's
# body-writing task sees it too).
_guard: contextvars.ContextVar[_FenceGuard | None] = contextvars.ContextVar(
    "gangsched_fence", default=None
)


async def _check_fence(session: object, ctx: object, params: object) -> None:
    """aiohttp trace hook, called right before headers and before each body chunk is written."""
    guard = _guard.get()
    if guard is not None and (guard.tripped or not guard.fence()):
        guard.tripped = True
        raise _FenceTrippedError


class ApiError(Exception):
    def __init__(self, status: int, reason: str, body: object = None) -> None:
        self.status = status
        self.reason = reason
        self.body = body
        message = body.get("message", "") if isinstance(body, Mapping) else str(body or "")
        super().__init__(f"HTTP {status} {reason}: {message}".strip())

    @property
    def retriable(self) -> bool:
        return self.status in (0, 429) or self.status >= 500


# Requests sent while this is set (the outbox's informational writes: events, conditions, status)
# go in the background lane of the client's rate limit; see _TokenBucket.
_background: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "gangsched_background", default=False
)


@contextlib.contextmanager
def background_lane() -> Iterator[None]:
    """Send the requests made inside in the background lane of the rate limit: after every
    request of the foreground lane (bindings, watches, lists, reads), and never out of the
    half of the burst kept for it."""
    token = _background.set(True)
    try:
        yield
    finally:
        _background.reset(token)


class _Share:
    """How the two lanes share the API server's time: while a foreground request is in
    flight, at most ``busy_limit`` background requests are. Informational writes then go one
    or two at a time (client-go's event recorder writes one event at a time) instead of taking
    a share of the server that a gang's bindings are waiting for; when nothing else is in
    flight they have the background lane's every slot."""

    def __init__(self, busy_limit: int) -> None:
        self.foreground = 0
        self.background = 0
        self._limit = max(1, busy_limit)
        self._waiters = Turns()

    async def enter_background(self) -> None:
        while self.foreground and self.background >= self._limit:
            await self._waiters.wait()
        self.background += 1

    def leave_background(self) -> None:
        self.background -= 1
        self._waiters.give()

    def leave_foreground(self) -> None:
        self.foreground -= 1
        if not self.foreground:
            self._waiters.give(len(self._waiters))


class _TokenBucket:
    """``qps`` and ``burst`` for every request of one client, in two lanes.

    The foreground lane (the default) takes a token as soon as there is one, first come first
    served. The background lane takes one only while no foreground request is waiting and
    more than ``reserve`` tokens (half the burst) are left: a backlog of informational writes
    drains at the full rate when nothing else is sent, yet a gang's bindings always find
    that reserve and never queue behind it. Both lanes together never exceed ``qps`` and
    ``burst``."""

    def __init__(self, qps: float, burst: int) -> None:
        self._rate = qps
        self._capacity = float(max(1, burst))
        self.reserve = float(max(1, burst) // 2)
        self._tokens = self._capacity
        self._stamp = time.monotonic()
        # one waiter per lane at a time, in arrival order
        self._foreground = asyncio.Lock()
        self._background = asyncio.Lock()

    def _refill(self) -> None:
        now = time.monotonic()
        self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
        self._stamp = now

    async def take(self, background: bool = False) -> None:
        if self._rate <= 0:
            return
        # Nobody waiting in this lane (nor, for the background, in the foreground) and a
        # token to spare: take it at once, without the lane's lock (the usual case).
        if not self._foreground.locked() and (not background or not self._background.locked()):
            self._refill()
            if self._tokens >= (1 + self.reserve if background else 1):
                self._tokens -= 1
                return
        if not background:
            async with self._foreground:
                while True:
                    self._refill()
                    if self._tokens >= 1:
                        self._tokens -= 1
                        return
                    await asyncio.sleep((1 - self._tokens) / self._rate)
        async with self._background:
            floor = 1 + self.reserve
            while True:
                self._refill()
                if not self._foreground.locked() and self._tokens >= floor:
                    self._tokens -= 1
                    return
                need = 1.0 if self._foreground.locked() else floor - self._tokens
                await asyncio.sleep(max(need, 0.01) / self._rate)


async def load_configuration(kubeconfig: str | None, context: str | None = None) -> ClusterConfig:
    """A kubeconfig file when given (or $KUBECONFIG / ~/.kube/config), else in-cluster (see
    kubeconfig.py)."""
    return await load_kubeconfig(kubeconfig, context)


def _ssl_context(cfg: ClusterConfig) -> ssl.SSLContext:
    """The TLS settings the configuration names."""
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


def _env_proxy(url: str) -> str | None:
    """The proxy $HTTPS_PROXY / $HTTP_PROXY name for the API server, unless $NO_PROXY exempts it
    (client-go's ProxyFromEnvironment). Looked up once, not per request."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if not host or urllib.request.proxy_bypass(host):
        return None
    proxies = urllib.request.getproxies_environment()
    return proxies.get(parts.scheme or "https")


class KubeClient:
    """Requests and watches on the small HTTP/1.1 client (http1.py; aiohttp when a proxy is
    in the way), JSON bodies encoded and decoded by msgspec. The configuration (server,
    TLS, credentials) comes from kubeconfig.py; a token file or refreshed credential is read
    again once a minute (a rotated service-account token, a refreshed exec credential) and
    after a 401."""

    def __init__(
        self,
        cfg: ClusterConfig | Configuration,
        qps: float = 50.0,
        burst: int = 100,
        max_in_flight: int = 32,
        *,
        agent: str | None = None,
    ) -> None:
        if not isinstance(cfg, ClusterConfig):
            cfg = from_kubernetes_asyncio(cfg)
        self._cfg = cfg
        self.host = cfg.host.rstrip("/")
        self._agent = agent or user_agent("")
        self._bucket = _TokenBucket(qps, burst)
        # A quarter of the requests in flight is the background lane's own, so informational
        # writes never queue behind a backlog of thousands of bindings, nor bindings behind them.
        background = max_in_flight // 4
        self._in_flight = asyncio.Semaphore(max_in_flight - background)
        self._in_flight_background = (
            asyncio.Semaphore(background) if background else self._in_flight
        )
        self.background_slots = background or max_in_flight
        self._share = _Share(BACKGROUND_WHILE_BUSY)
        self._pool = max_in_flight + 8
        self._ssl: ssl.SSLContext | bool = (
            _ssl_context(cfg) if self.host.startswith("https:") else False
        )
        self._server_hostname: str | None = cfg.tls_server_name
        self._proxy: str | None = cfg.proxy or _env_proxy(self.host)
        self._session: aiohttp.ClientSession | None = None
        # Requests (all but watches) on the small HTTP/1.1 client, unless a proxy is in the way.
        parts = urllib.parse.urlsplit(self.host)
        self._host_header = f"Host: {parts.netloc}"
        self._direct: Http1Pool | None = None
        if self._proxy is None and parts.hostname:
            secure = parts.scheme == "https"
            self._direct = Http1Pool(
                parts.hostname,
                parts.port or (443 if secure else 80),
                ssl_context=self._ssl if isinstance(self._ssl, ssl.SSLContext) else None,
                server_hostname=self._server_hostname or parts.hostname,
            )
        # a second session, with the fence's trace hook, for fenced writes only
        self._fenced_session: aiohttp.ClientSession | None = None
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}
        # GETs asked for ahead of time, each for the first get() with the same path and
        # parameters to take (see prefetch)
        self._prefetched: dict[_GetKey, asyncio.Task[JSON]] = {}
        # What the first watch waits for (see hold_watches), and the one wait all share
        self._watch_gate: Callable[[], Awaitable[None]] | None = None
        self._watches_open: asyncio.Future[None] | None = None

    def hold_watches(self, gate: Callable[[], Awaitable[None]]) -> None:
        """Start no watch before ``gate()`` returns. Opening the watches (a connection and a
        TLS handshake each, twenty of them) takes CPU that the scheduler's first decisions,
        which need only the lists, would otherwise wait for. So the scheduler holds its
        watches until its first pass over the lists is done (bounded): they open while the
        first bindings wait on the API server, not before them (through a proxy, aiohttp is
        imported then, on a worker thread). Nothing is missed: each watch starts from its
        list's resourceVersion."""
        self._watch_gate = gate

    def _new_session(self, trace: bool = False) -> aiohttp.ClientSession:
        import aiohttp

        traces = []
        if trace:
            # Ask the fence once more right before the bytes leave, from inside aiohttp: the
            # last point where a request can still be held back.
            t = aiohttp.TraceConfig(trace_config_ctx_factory=SimpleNamespace)
            t.on_request_headers_sent.append(_check_fence)
            t.on_request_chunk_sent.append(_check_fence)
            t.freeze()
            traces.append(t)
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self._pool, ssl=self._ssl),
            trust_env=False,  # the proxy is looked up once (see _env_proxy)
            trace_configs=traces,
            # watch events of large objects exceed aiohttp's default read buffer
            read_bufsize=2**21,
            skip_auto_headers=("Accept-Encoding",),
        )

    def _session_for(self, fenced: bool) -> aiohttp.ClientSession:
        if fenced:
            if self._fenced_session is None:
                self._fenced_session = self._new_session(trace=True)
            return self._fenced_session
        if self._session is None:
            self._session = self._new_session()
        return self._session

    async def close(self) -> None:
        for task in self._prefetched.values():
            task.cancel()
        self._prefetched.clear()
        if self._direct is not None:
            await self._direct.aclose()
        for session in (self._session, self._fenced_session):
            if session is not None:
                await session.close()
        self._session = self._fenced_session = None

    async def _authorization(self) -> str | None:
        return await self._cfg.auth_header()

    def _timeout(self, timeout: float | aiohttp.ClientTimeout | None) -> aiohttp.ClientTimeout:
        import aiohttp

        if isinstance(timeout, aiohttp.ClientTimeout):
            return timeout
        seconds = 30.0 if timeout is None else float(timeout)
        cached = self._timeouts.get(seconds)
        if cached is None:
            cached = self._timeouts[seconds] = aiohttp.ClientTimeout(total=seconds)
        return cached

    async def _raw(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: object,
        content_type: str | None,
        timeout: float | aiohttp.ClientTimeout | None,
        *,
        fenced: bool = False,
    ) -> aiohttp.ClientResponse:
        import aiohttp

        headers = {"Accept": "application/json", "User-Agent": self._agent}
        auth = await self._authorization()
        if auth:
            headers["Authorization"] = auth
        data: bytes | None = None
        if body is not None:
            data = body if isinstance(body, bytes) else _encode(body)
            headers["Content-Type"] = content_type or "application/json"
        query = [(k, _param(v)) for k, v in params.items()] if params else None
        try:
            resp = await self._session_for(fenced).request(
                method,
                self.host + path,
                params=query,
                data=data,
                headers=headers,
                timeout=self._timeout(timeout),
                proxy=self._proxy,
                server_hostname=self._server_hostname,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        if resp.status == 401:
            self._cfg.invalidate()  # the credential may have rotated: ask again
        return resp

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: object = None,
        content_type: str | None = None,
        timeout: float = 30.0,
        fence: FenceCheck | None = None,
    ) -> JSON:
        background = _background.get()
        share = self._share
        if background:
            await share.enter_background()
        else:
            share.foreground += 1
        try:
            async with self._in_flight_background if background else self._in_flight:
                # The token is taken last, right before the request is sent: one taken before
                # a wait (for a slot in flight, for the lanes' share) would let the requests
                # that waited go out together, faster than the rate limit allows.
                await self._bucket.take(background)
                if self._direct is not None:
                    status, reason, raw = await self._direct_exchange(
                        method, path, params, body, content_type, timeout, fence
                    )
                else:
                    status, reason, raw = await self._aiohttp_exchange(
                        method, path, params, body, content_type, timeout, fence
                    )
        finally:
            if background:
                share.leave_background()
            else:
                share.leave_foreground()
        try:
            data = _decode(raw) if raw else {}
        except msgspec.DecodeError:
            data = {"message": raw[:500].decode("utf-8", "replace")}
        if not 200 <= status <= 299:
            raise ApiError(status, reason, data)
        return data if isinstance(data, dict) else {"items": data}

    async def _head_lines(
        self, method: str, path: str, params: Mapping[str, Any] | None
    ) -> list[str]:
        """A request's line and the headers every request on the small HTTP/1.1 client
        carries (Host, Accept, User-Agent, Authorization when there is one)."""
        target = urllib.parse.quote(path, safe=_PATH_SAFE)
        if params:
            target += "?" + urllib.parse.urlencode([(k, _param(v)) for k, v in params.items()])
        lines = [
            f"{method} {target} HTTP/1.1",
            self._host_header,
            "Accept: application/json",
            f"User-Agent: {self._agent}",
        ]
        auth = await self._authorization()
        if auth:
            lines.append(f"Authorization: {auth}")
        return lines

    async def _direct_exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: object,
        content_type: str | None,
        timeout: float,
        fence: FenceCheck | None,
    ) -> tuple[int, str, bytes]:
        """One request on the small HTTP/1.1 client (http1.py)."""
        assert self._direct is not None
        if fence is not None and not fence():
            raise FencedError(method, path)
        lines = await self._head_lines(method, path, params)
        data = b""
        if body is not None:
            data = body if isinstance(body, bytes) else _encode(body)
            lines.append(f"Content-Type: {content_type or 'application/json'}")
        if data or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(data)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

        def last_look() -> None:
            if fence is not None and not fence():
                raise _FenceTrippedError

        try:
            resp = await self._direct.request(head, data, timeout, last_look if fence else None)
        except _FenceTrippedError:
            raise FencedError(method, path) from None
        except ConnectionFailedError as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        if resp.status == 401:
            self._cfg.invalidate()  # the credential may have rotated: ask again
        return resp.status, resp.reason, resp.body

    async def _aiohttp_exchange(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: object,
        content_type: str | None,
        timeout: float,
        fence: FenceCheck | None,
    ) -> tuple[int, str, bytes]:
        """One request through aiohttp (when a proxy is in the way)."""
        import aiohttp

        if fence is None:
            resp = await self._raw(method, path, params, body, content_type, timeout)
        else:
            resp = await self._fenced(fence, method, path, params, body, content_type, timeout)
        try:
            raw = await resp.read()
        except (TimeoutError, aiohttp.ClientError) as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        finally:
            resp.release()
        return resp.status, resp.reason or "", raw

    async def _fenced(
        self,
        fence: FenceCheck,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: object,
        content_type: str | None,
        timeout: float,
    ) -> aiohttp.ClientResponse:
        if not fence():
            raise FencedError(method, path)
        guard = _FenceGuard(fence)
        token = _guard.set(guard)
        try:
            return await self._raw(method, path, params, body, content_type, timeout, fenced=True)
        except Exception:
            if guard.tripped:  # whatever aiohttp made of the hook's exception
                raise FencedError(method, path) from None
            raise
        finally:
            _guard.reset(token)

    async def get(self, path: str, **params: Any) -> JSON:
        if self._prefetched:
            ahead = self._prefetched.pop(_get_key(path, params), None)
            if ahead is not None:
                return await ahead
        return await self.request("GET", path, params=params)

    async def warm(self, connections: int) -> int:
        """Open up to ``connections`` connections ahead of the requests that will use them
        (see Http1Pool.warm); how many were opened."""
        if self._direct is None:
            return 0
        return await self._direct.warm(min(connections, self._pool))

    def prefetch(self, path: str, keep: float = PREFETCH_KEEP, **params: Any) -> None:
        """Send ``GET path?params`` now, for the first :meth:`get` with the same path and
        parameters to take, answer or error, instead of asking again. The scheduler's start
        asks for its first lists so, while the rest of it is still being loaded (see
        gangsched/boot.py). An answer is taken only within ``keep`` seconds of its arrival:
        later it is dropped and the get asks again (a list read then would act on what the
        cluster was, not what it is: a scheduler must not decide on it)."""
        key = _get_key(path, params)
        if key in self._prefetched:
            return
        task = asyncio.ensure_future(self.request("GET", path, params=params))
        self._prefetched[key] = task
        loop = asyncio.get_running_loop()

        def drop() -> None:
            if self._prefetched.get(key) is task:
                del self._prefetched[key]

        def arrived(t: asyncio.Task[JSON]) -> None:
            if not t.cancelled():
                t.exception()  # an error is the taker's to see; untaken, not worth a warning
            loop.call_later(keep, drop)

        task.add_done_callback(arrived)

    async def post(self, path: str, body: object, *, fence: FenceCheck | None = None) -> JSON:
        return await self.request(
            "POST", path, body=body, content_type="application/json", fence=fence
        )

    async def merge_patch(
        self, path: str, body: object, *, fence: FenceCheck | None = None
    ) -> JSON:
        return await self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json", fence=fence
        )

    async def strategic_patch(self, path: str, body: object) -> JSON:
        return await self.request(
            "PATCH", path, body=body, content_type="application/strategic-merge-patch+json"
        )

    async def apply(self, path: str, body: object, *, field_manager: str) -> JSON:
        """Server-side apply ``body`` (a JSON object, which is YAML) as ``field_manager``,
        taking over fields another manager holds (``force=true``): one request, no read
        first. The manager owns exactly the fields it sends; a field it sent before and
        leaves out is removed."""
        return await self.request(
            "PATCH",
            path,
            params={"fieldManager": field_manager, "force": "true"},
            body=body,
            content_type="application/apply-patch+yaml",
        )

    async def _open_watches(self) -> None:
        """What the first watch waits for: the gate (hold_watches), then, when watches go
        through aiohttp (a proxy is in the way), aiohttp imported on a worker thread, so that
        the loop keeps turning meanwhile."""
        if self._watch_gate is not None:
            await self._watch_gate()
        if self._direct is None and "aiohttp" not in sys.modules:
            await asyncio.to_thread(importlib.import_module, "aiohttp")

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[JSON]:
        """Stream watch events (one JSON object per line) until the server ends the watch."""
        if self._watches_open is None:
            self._watches_open = asyncio.ensure_future(self._open_watches())
        await asyncio.shield(self._watches_open)
        if self._direct is not None:
            async for event in self._direct_watch(path, params):
                yield event
            return
        import aiohttp

        await self._bucket.take(_background.get())
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        resp = await self._raw("GET", path, {**params, "watch": "true"}, None, None, timeout)
        try:
            if not 200 <= resp.status <= 299:
                raise _refusal(resp.status, resp.reason or "", await resp.read())
            async for event in _events(resp.content.iter_any()):
                yield event
        except (TimeoutError, aiohttp.ClientError) as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        finally:
            resp.release()

    async def _direct_watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[JSON]:
        """A watch on a connection of its own from the small HTTP/1.1 client (http1.py)."""
        assert self._direct is not None
        await self._bucket.take(_background.get())
        lines = await self._head_lines("GET", path, {**params, "watch": "true"})
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        try:
            stream = await self._direct.stream(head, _WATCH_HEAD_TIMEOUT)
        except ConnectionFailedError as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        try:
            if stream.status == 401:
                self._cfg.invalidate()  # the credential may have rotated: ask again
            if not 200 <= stream.status <= 299:
                raise _refusal(stream.status, stream.reason, await stream.read())
            async for event in _events(stream.pieces()):
                yield event
        except ConnectionFailedError as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        finally:
            stream.close()


def _refusal(status: int, reason: str, raw: bytes) -> ApiError:
    """The error of a watch the server refused, with its answer (a Status, or its text)."""
    try:
        body: object = _decode(raw)
    except msgspec.DecodeError:
        body = raw[:500].decode("utf-8", "replace")
    return ApiError(status, reason, body)


async def _events(pieces: AsyncIterator[bytes]) -> AsyncIterator[JSON]:
    """A watch's events from its body's bytes: one JSON object per line; a piece holds
    several lines, or part of one."""
    rest = b""
    async for piece in pieces:
        if rest:
            piece = rest + piece
        lines = piece.split(b"\n")
        rest = lines.pop()
        for line in lines:
            if line:
                yield _decode(line)
