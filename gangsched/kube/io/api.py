"""The narrow API-server interface the adapters use: what they call on :class:`KubeClient`, and
nothing more. Adapters take a :class:`KubeApi`, so their logic runs against an in-memory fake in
unit tests and against :class:`KubeClient` in the daemon.

Paths are API paths (``/api/v1/namespaces/ml/pods/p``), bodies and answers raw JSON. A non-2xx
answer raises :class:`~gangsched.kube.io.client.ApiError` (status 0 for a connection error); a
write whose ``fence`` says no is not sent and raises
:class:`~gangsched.kube.io.client.FencedError`."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol

from gangsched.kube.io.client import JSON, FenceCheck

__all__ = ["KubeApi"]


class KubeApi(Protocol):
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
        """Any verb; the methods below are shorthands."""
        ...

    async def get(self, path: str, **params: Any) -> JSON:
        """One object, or one page of a list (``limit``, ``continue``, ``labelSelector``)."""
        ...

    async def post(self, path: str, body: object, *, fence: FenceCheck | None = None) -> JSON:
        """Create (or a subresource such as ``pods/<name>/binding``)."""
        ...

    async def merge_patch(
        self, path: str, body: object, *, fence: FenceCheck | None = None
    ) -> JSON:
        """A JSON merge patch (RFC 7386); ``metadata.resourceVersion`` in it is a precondition."""
        ...

    async def strategic_patch(self, path: str, body: object) -> JSON:
        """A strategic merge patch (lists such as ``status.conditions`` merged by key)."""
        ...

    async def apply(self, path: str, body: object, *, field_manager: str) -> JSON:
        """Server-side apply as ``field_manager`` (forced): it owns exactly the fields sent."""
        ...

    def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[JSON]:
        """Watch events (``{"type": ..., "object": ...}``) until the server ends the watch."""
        ...

    async def close(self) -> None: ...
