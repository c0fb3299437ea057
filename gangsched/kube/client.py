"""A thin JSON client over kubernetes-asyncio: its configuration, auth and connection pool,
with raw JSON in and out (no model classes on the hot path), a client-side rate limit and a
bound on requests in flight, so a burst of pods does not flood the API server. The rate limit
has two lanes: informational writes (sent inside :func:`background_lane`) never hold up a
binding.

A write may carry a fence (a callable that says whether it may still be sent): it is asked
after the rate limit and the bound on requests in flight, and again right before the request's
bytes are written to the connection; when it says no, nothing is sent and :class:`FencedError` is
raised."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import os
import platform
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

import aiohttp
from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client import ApiClient, Configuration

from gangsched import __version__

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


async def load_configuration(kubeconfig: str | None, context: str | None = None) -> Configuration:
    """A kubeconfig file when given (or $KUBECONFIG / ~/.kube/config), else in-cluster."""
    cfg = Configuration()
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path and not os.path.exists(os.path.expanduser(path.split(os.pathsep)[0])):
        raise kconfig.ConfigException(f"kubeconfig {path} does not exist")
    if path or not in_cluster:
        await kconfig.load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    else:
        kconfig.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
    return cfg


class KubeClient:
    def __init__(
        self,
        cfg: Configuration,
        qps: float = 50.0,
        burst: int = 100,
        max_in_flight: int = 32,
        *,
        agent: str | None = None,
    ) -> None:
        cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, max_in_flight + 8)
        self._api = ApiClient(configuration=cfg)
        self._api.user_agent = agent or user_agent("")
        self._bucket = _TokenBucket(qps, burst)
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self._fence_hooked = False
        self.host = str(cfg.host)

    def _hook_fence(self) -> None:
        """Ask the fence once more right before the bytes leave, from inside aiohttp: the last
        point where a request can still be held back (installed on the first fenced write)."""
        if self._fence_hooked:
            return
        trace = aiohttp.TraceConfig(trace_config_ctx_factory=SimpleNamespace)
        trace.on_request_headers_sent.append(_check_fence)
        trace.on_request_chunk_sent.append(_check_fence)
        trace.freeze()
        self._api.rest_client.pool_manager.trace_configs.append(trace)
        self._fence_hooked = True

    async def close(self) -> None:
        await self._api.close()

    async def _raw(
        self,
        method: str,
        path: str,
        params: Mapping[str, Any] | None,
        body: object,
        content_type: str | None,
        timeout: float | aiohttp.ClientTimeout | None,
    ) -> aiohttp.ClientResponse:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        try:
            resp: aiohttp.ClientResponse = await self._api.call_api(
                path,
                method,
                query_params=list((params or {}).items()),
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
                _preload_content=False,
                _request_timeout=timeout,
            )
        except (TimeoutError, aiohttp.ClientError, OSError) as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
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
        await self._bucket.take(_background.get())
        async with self._in_flight:
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
        try:
            data = json.loads(raw) if raw else {}
        except json.JSONDecodeError:
            data = {"message": raw[:500].decode("utf-8", "replace")}
        if not 200 <= resp.status <= 299:
            raise ApiError(resp.status, resp.reason or "", data)
        return data if isinstance(data, dict) else {"items": data}

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
        self._hook_fence()
        guard = _FenceGuard(fence)
        token = _guard.set(guard)
        try:
            return await self._raw(method, path, params, body, content_type, timeout)
        except Exception:
            if guard.tripped:  # whatever aiohttp made of the hook's exception
                raise FencedError(method, path) from None
            raise
        finally:
            _guard.reset(token)

    async def get(self, path: str, **params: Any) -> JSON:
        return await self.request("GET", path, params=params)

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

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[JSON]:
        """Stream watch events (one JSON object per line) until the server ends the watch."""
        await self._bucket.take(_background.get())
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None)
        resp = await self._raw("GET", path, {**params, "watch": "true"}, None, None, timeout)
        try:
            if not 200 <= resp.status <= 299:
                raw = await resp.read()
                try:
                    body: object = json.loads(raw)
                except json.JSONDecodeError:
                    body = raw[:500].decode("utf-8", "replace")
                raise ApiError(resp.status, resp.reason or "", body)
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if line.strip():
                        yield json.loads(line)
        except (TimeoutError, aiohttp.ClientError) as e:
            raise ApiError(0, type(e).__name__, str(e)) from e
        finally:
            resp.release()
