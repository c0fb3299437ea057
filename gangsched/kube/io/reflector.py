"""List and watch one kind of object, forever, feeding a callback.

resourceVersion bookkeeping with bookmarks; a watch that expires (410 Gone, or an ERROR event
carrying 410) is followed by a fresh list, and the list is delivered as a whole so the consumer
can drop what disappeared meanwhile (no lost and no double-counted objects). A handler may
return an awaitable (a list of 50,000 pods handled in slices that yield to the event loop); it
is awaited before the next event is handed over, so events stay in order.

A failed list or watch is retried with jittered exponential backoff, capped by what the error
says. While the API server cannot be reached or says it cannot serve (connection refused or
reset, 429, 5xx: an outage, a restart, overload), at most OUTAGE_RETRY_MAX apart, so the watch
resumes within about a second of the server being back; the cost is about one connection
attempt per resource and second while it is down. After an error that retrying will not soon
fix (401, 403, another 4xx), doubling up to ERROR_RETRY_MAX. Any progress (a list, a watch
event) starts the backoff afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON, ApiError
from gangsched.kube.io.heap import collector_paused

__all__ = ["Reflector"]

log = structlog.get_logger("gangsched.reflector")

# (event type, object): ADDED, MODIFIED, DELETED; and ("SYNC", {"items": [...]}) after a list,
# or, for a paged reflector, ("LISTING", {}), ("PAGE", {"items": [...]}) per page, ("LISTED", {}).
Handler = Callable[[str, JSON], Awaitable[None] | None]

RETRY_INITIAL = 0.2
OUTAGE_RETRY_MAX = 1.0
ERROR_RETRY_MAX = 30.0
FAILURE_LOG_EVERY = 30.0  # while failing, a warning at most this often


class Reflector:
    def __init__(
        self,
        client: KubeApi,
        path: str,
        handler: Handler,
        *,
        name: str,
        page_size: int = 500,
        watch_timeout: int = 300,
        label_selector: str | None = None,
        absent_recheck: float = 60.0,
        paged: bool = False,
    ) -> None:
        self._client = client
        self._path = path
        self._handler = handler
        self.name = name
        self._page = page_size
        self._watch_timeout = watch_timeout
        self._selector = label_selector
        self._absent_recheck = absent_recheck
        self._paged = paged
        self.resource_version = ""
        self.synced = asyncio.Event()
        self.relists = 0
        self.watch_restarts = 0
        self.absent = False  # the resource is not served (a CRD that is not installed)
        self.handler_errors = 0
        self._progress = False  # a list or a watch event since the last failure
        self.failures = 0  # failed lists and watches in a row
        self._failing_since = 0.0

    async def _emit(self, kind: str, obj: JSON) -> None:
        """Hand one event to the consumer. A consumer bug is logged, counted and survived:
        one bad object must not stop the watch for every other object."""
        try:
            result = self._handler(kind, obj)
            if result is not None:
                await result
        except Exception:
            self.handler_errors += 1
            meta = obj.get("metadata") or {}
            log.exception(
                "event handler failed",
                resource=self.name,
                kind=kind,  # not "event": structlog takes that for the message
                object=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            )

    async def list_all(self) -> None:
        # a list of thousands of objects is read and handled with the collector paused, and
        # what the first one loaded is frozen (see heap.py)
        with collector_paused(freeze=not self.synced.is_set()):
            await self._list_all()

    async def _list_paged(self) -> None:
        """The list page by page: ("LISTING", {}), then ("PAGE", {"items": [...]}) for each
        page as it comes, while the next one is already being fetched, then ("LISTED", {}).
        A list that fails half-way is started again from the beginning (a new LISTING)."""
        await self._emit("LISTING", {})
        fetch = asyncio.ensure_future(self._fetch_page(""))
        try:
            while True:
                page = await fetch
                meta = page.get("metadata") or {}
                cont = str(meta.get("continue") or "")
                if cont:
                    fetch = asyncio.ensure_future(self._fetch_page(cont))
                else:
                    self.resource_version = str(meta.get("resourceVersion", ""))
                self._made_progress()
                await self._emit("PAGE", {"items": page.get("items") or []})
                if not cont:
                    break
        finally:
            if not fetch.done():
                fetch.cancel()
                with contextlib.suppress(asyncio.CancelledError, ApiError):
                    await fetch
        if self.synced.is_set() and not self.absent:
            self.relists += 1
        await self._emit("LISTED", {})
        self.synced.set()

    async def _fetch_page(self, cont: str) -> JSON:
        params: dict[str, Any] = {"limit": self._page}
        if cont:
            params["continue"] = cont
        if self._selector:
            params["labelSelector"] = self._selector
        return await self._client.get(self._path, **params)

    async def _list_all(self) -> None:
        if self._paged:
            await self._list_paged()
            return
        items: list[JSON] = []
        cont = ""
        while True:
            params: dict[str, Any] = {"limit": self._page}
            if cont:
                params["continue"] = cont
            if self._selector:
                params["labelSelector"] = self._selector
            page = await self._client.get(self._path, **params)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or ""
            if not cont:
                self.resource_version = str(meta.get("resourceVersion", ""))
                break
        if self.synced.is_set() and not self.absent:
            self.relists += 1  # a list after the first: the watch could not resume
        self._made_progress()
        await self._emit("SYNC", {"items": items})
        self.synced.set()

    def _made_progress(self) -> None:
        self._progress = True
        if self.failures:
            log.info(
                "watch resumed",
                resource=self.name,
                failures=self.failures,
                after=round(time.monotonic() - self._failing_since, 1),
            )
            self.failures = 0

    async def run(self) -> None:
        backoff = RETRY_INITIAL
        need_list = True
        logged = 0.0
        while True:
            self._progress = False
            try:
                if need_list:
                    await self.list_all()
                    need_list = False
                    if self.absent:
                        self.absent = False
                        log.info("resource now served; watching it", resource=self.name)
                await self._watch_once()
                backoff = RETRY_INITIAL
            except ApiError as e:
                if self._progress:
                    backoff = RETRY_INITIAL
                if e.status == 410:
                    log.info("watch expired, relisting", resource=self.name)
                    need_list = True
                    continue
                if e.status == 404 and (need_list or not self.synced.is_set()):
                    # A CRD that is not installed (yet): look again now and then.
                    if not self.absent:
                        log.info("resource not served; will look again", resource=self.name)
                    self.absent = True
                    self.synced.set()
                    need_list = True
                    await asyncio.sleep(self._absent_recheck)
                    continue
                cap = OUTAGE_RETRY_MAX if e.retriable else ERROR_RETRY_MAX
                backoff = min(backoff, cap)
                delay = backoff * (0.5 + random.random() / 2)
                self.failures += 1
                now = time.monotonic()
                if self.failures == 1:
                    self._failing_since = now
                if self.failures == 1 or now - logged >= FAILURE_LOG_EVERY:
                    logged = now
                    log.warning(
                        "watch failed",
                        resource=self.name,
                        error=str(e),
                        failures=self.failures,
                        retry_in=round(delay, 2),
                    )
                await asyncio.sleep(delay)
                backoff = min(backoff * 2, cap)
                if e.status in (401, 403, 404):
                    need_list = True

    async def _watch_once(self) -> None:
        params: dict[str, Any] = {
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": self._watch_timeout,
        }
        if self._selector:
            params["labelSelector"] = self._selector
        self.watch_restarts += 1
        async for event in self._client.watch(self._path, params):
            kind = str(event.get("type", ""))
            obj = event.get("object") or {}
            if kind == "ERROR":
                code = int(obj.get("code", 0) or 0)
                raise ApiError(code or 500, str(obj.get("reason", "")), obj)
            if not self._progress:
                self._made_progress()
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if rv:
                self.resource_version = str(rv)
            if kind == "BOOKMARK":
                continue
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                await self._emit(kind, obj)
