"""A thin JSON client over kubernetes-asyncio: its configuration, auth and connection pool,
with raw JSON in and out (no model classes on the hot path), a client-side rate limit and a
bound on requests in flight, so a burst of pods does not flood the API server."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client import ApiClient, Configuration

__all__ = ["ApiError", "KubeClient", "load_configuration"]

JSON = dict[str, Any]


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


class _TokenBucket:
    def __init__(self, qps: float, burst: int) -> None:
        self._rate = qps
        self._capacity = float(max(1, burst))
        self._tokens = self._capacity
        self._stamp = time.monotonic()
        self._lock = asyncio.Lock()

    async def take(self) -> None:
        if self._rate <= 0:
            return
        async with self._lock:
            while True:
                now = time.monotonic()
                self._tokens = min(self._capacity, self._tokens + (now - self._stamp) * self._rate)
                self._stamp = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                await asyncio.sleep((1 - self._tokens) / self._rate)


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
        self, cfg: Configuration, qps: float = 50.0, burst: int = 100, max_in_flight: int = 32
    ) -> None:
        cfg.connection_pool_maxsize = max(cfg.connection_pool_maxsize or 0, max_in_flight + 8)
        self._api = ApiClient(configuration=cfg)
        self._bucket = _TokenBucket(qps, burst)
        self._in_flight = asyncio.Semaphore(max_in_flight)
        self.host = str(cfg.host)

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
    ) -> JSON:
        await self._bucket.take()
        async with self._in_flight:
            resp = await self._raw(method, path, params, body, content_type, timeout)
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

    async def get(self, path: str, **params: Any) -> JSON:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: object) -> JSON:
        return await self.request("POST", path, body=body, content_type="application/json")

    async def merge_patch(self, path: str, body: object) -> JSON:
        return await self.request(
            "PATCH", path, body=body, content_type="application/merge-patch+json"
        )

    async def strategic_patch(self, path: str, body: object) -> JSON:
        return await self.request(
            "PATCH", path, body=body, content_type="application/strategic-merge-patch+json"
        )

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[JSON]:
        """Stream watch events (one JSON object per line) until the server ends the watch."""
        await self._bucket.take()
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
