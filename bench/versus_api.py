"""A small asyncio HTTP client for the side-by-side benchmark (bench/versus.py).

Talks to kube-apiserver with a kubeconfig's bearer token and CA: creates many objects
concurrently (kubectl creates one at a time), lists with pagination, and reads the API server's
own ``/metrics`` (``apiserver_request_total``), which counts every request by verb, resource,
subresource and response code, whoever sent it.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import aiohttp
import yaml

__all__ = [
    "Api",
    "RequestTotals",
    "binding_count",
    "parse_request_totals",
    "request_key",
]

_RETRY_CODES: Final = frozenset({429, 500, 502, 503, 504})
_RETRIES: Final = 8
_LABEL: Final = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_METRIC: Final = "apiserver_request_total{"

# (verb, group, resource, subresource, code) -> count since the API server started
RequestTotals = dict[tuple[str, str, str, str, str], float]


class ApiStatusError(RuntimeError):
    """The API server answered a request with an unexpected status."""

    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:500]}")
        self.status = status


@dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    token: str
    ca_pem: str

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Credentials:
        """The current context's server, bearer token and CA (inline data or file)."""
        config: Any = yaml.safe_load(path.read_text())
        current = config.get("current-context")
        context = next(c["context"] for c in config["contexts"] if c["name"] == current)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        if "certificate-authority-data" in cluster:
            ca = base64.b64decode(cluster["certificate-authority-data"]).decode()
        else:
            ca = Path(cluster["certificate-authority"]).read_text()
        return cls(str(cluster["server"]).rstrip("/"), str(user["token"]), ca)


class Api:
    """``async with Api(creds, connections) as api``: one aiohttp session, JSON in and out."""

    def __init__(self, creds: Credentials, connections: int = 64) -> None:
        self.creds = creds
        self.connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        context = ssl.create_default_context(cadata=self.creds.ca_pem)
        self._session = aiohttp.ClientSession(
            base_url=self.creds.server,
            connector=aiohttp.TCPConnector(ssl=context, limit=self.connections),
            headers={"Authorization": f"Bearer {self.creds.token}"},
            timeout=aiohttp.ClientTimeout(total=120),
        )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("use Api as an async context manager")
        return self._session

    async def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        params: Mapping[str, str] | None = None,
        ok: Iterable[int] = (200, 201),
    ) -> tuple[int, Any]:
        """Send one request (retrying throttling and server errors); return (status, JSON).

        A status outside ``ok`` (after the retries) raises ApiStatusError.
        """
        data = None if body is None else json.dumps(body, separators=(",", ":"))
        headers = {"Content-Type": "application/json"} if data is not None else None
        accepted = set(ok)
        delay = 0.05
        for attempt in range(_RETRIES + 1):
            async with self.session.request(
                method, path, data=data, params=params, headers=headers
            ) as resp:
                text = await resp.text()
                if resp.status in accepted:
                    return resp.status, json.loads(text) if text else None
                if resp.status not in _RETRY_CODES or attempt == _RETRIES:
                    raise ApiStatusError(method, path, resp.status, text)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    async def create_all(
        self, items: Iterable[tuple[str, Mapping[str, Any]]], concurrency: int
    ) -> int:
        """POST every (collection path, object), ``concurrency`` at a time, in order of
        submission per worker; return how many were created."""
        queue = iter(items)
        created = 0

        async def worker() -> None:
            nonlocal created
            for path, obj in queue:
                await self.call("POST", path, obj, ok=(201,))
                created += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return created

    async def list_all(
        self, path: str, params: Mapping[str, str] | None = None, page: int = 5000
    ) -> list[dict[str, Any]]:
        """Every item of a collection, page by page."""
        items: list[dict[str, Any]] = []
        cont = ""
        while True:
            query = {**(params or {}), "limit": str(page)}
            if cont:
                query["continue"] = cont
            _, body = await self.call("GET", path, params=query)
            items.extend(body.get("items") or [])
            cont = (body.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items

    async def request_totals(self) -> RequestTotals:
        """``apiserver_request_total`` from the API server's /metrics."""
        async with self.session.get("/metrics") as resp:
            if resp.status != 200:
                raise ApiStatusError("GET", "/metrics", resp.status, await resp.text())
            return parse_request_totals(await resp.text())


def parse_request_totals(text: str) -> RequestTotals:
    """The ``apiserver_request_total`` samples of a Prometheus text exposition, summed per
    (verb, group, resource, subresource, code); requests to non-resource URLs are left out."""
    totals: RequestTotals = {}
    start = 0
    while True:
        at = text.find(_METRIC, start)
        if at < 0:
            return totals
        end = text.find("\n", at)
        line = text[at : end if end >= 0 else len(text)]
        start = at + len(line)
        labels_end = line.rfind("}")
        labels = dict(_LABEL.findall(line[len(_METRIC) : labels_end]))
        if not labels.get("resource"):
            continue
        key = (
            labels.get("verb", ""),
            labels.get("group", ""),
            labels["resource"],
            labels.get("subresource", ""),
            labels.get("code", ""),
        )
        totals[key] = totals.get(key, 0.0) + float(line[labels_end + 1 :].split()[0])


def binding_count(totals: RequestTotals) -> int:
    """Successful pods/binding POSTs (HTTP 201)."""
    return int(totals.get(("POST", "", "pods", "binding", "201"), 0.0))


def request_key(verb: str, group: str, resource: str, subresource: str) -> str:
    """``PATCH podgroups.scheduling.x-k8s.io/status``, ``POST pods/binding``, as kubectl names
    resources."""
    name = f"{resource}.{group}" if group else resource
    return f"{verb} {name}/{subresource}" if subresource else f"{verb} {name}"
