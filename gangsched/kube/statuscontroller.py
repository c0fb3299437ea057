"""The PodGroup status controller, on kopf.

It owns ``status.phase``, the member counts (``scheduled``, ``running``, ``succeeded``,
``failed``) and ``observedGeneration``; the scheduler owns the scheduling fields (see
reporter.py). Phase and counts follow the pods: kopf watches member pods (those labelled
``gangsched.io/pod-group``) and PodGroups, keeps a small index of member phases, and writes a
merge patch of its own fields only when they change, a short debounce after the last event.

It runs in the scheduler's process by default (one Deployment, one leader) on a thread and
event loop of its own: kopf takes over signal handling and, when it stops, cancels the tasks
of the loop it runs on, so it must not share the scheduler's loop. It can also run on its own
with ``gangsched status-controller``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import kopf
from kubernetes_asyncio.client import Configuration

from gangsched.core.status import MemberCounts, podgroup_phase
from gangsched.kube import labels as lbl
from gangsched.kube.client import ApiError, KubeClient

__all__ = ["StatusController", "connection_info"]

log = logging.getLogger("gangsched.statuscontroller")


def connection_info(cfg: Configuration) -> kopf.ConnectionInfo:
    token = (cfg.api_key or {}).get("BearerToken") or (cfg.api_key or {}).get("authorization")
    scheme = None
    if token and " " in token:
        scheme, token = token.split(" ", 1)
    return kopf.ConnectionInfo(
        server=str(cfg.host),
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme or ("Bearer" if token else None),
        token=token or None,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
    )


def counts_of(members: dict[str, tuple[str, bool]]) -> MemberCounts:
    phases = [p for p, _ in members.values()]
    return MemberCounts(
        total=len(members),
        scheduled=sum(1 for phase, bound in members.values() if bound and phase != "Failed"),
        running=phases.count("Running"),
        succeeded=phases.count("Succeeded"),
        failed=phases.count("Failed"),
    )


class StatusController:
    def __init__(
        self, cfg: Configuration, make_client: Callable[[], KubeClient], debounce: float = 0.2
    ) -> None:
        self._conn = connection_info(cfg)
        self._make_client = make_client
        self._client: KubeClient | None = None
        self._debounce = debounce
        self.members: dict[str, dict[str, tuple[str, bool]]] = {}  # key -> uid -> (phase, bound)
        self.groups: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._written: dict[str, dict[str, Any]] = {}
        self.registry = self._build_registry()
        self.writes = 0

    def _build_registry(self) -> kopf.OperatorRegistry:
        registry = kopf.OperatorRegistry()
        conn = self._conn

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return conn

        @kopf.on.event(
            "", "v1", "pods", labels={lbl.POD_GROUP_LABEL: kopf.PRESENT}, registry=registry
        )
        async def pod_event(*, type: str, body: kopf.Body, **_: Any) -> None:
            self.on_pod(type or "", dict(body))

        @kopf.on.event(lbl.GROUP, lbl.VERSION, lbl.PODGROUP_PLURAL, registry=registry)
        async def group_event(*, type: str, body: kopf.Body, **_: Any) -> None:
            self.on_group(type or "", dict(body))

        return registry

    # ---- events ------------------------------------------------------------------------
    def on_pod(self, kind: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        group = (meta.get("labels") or {}).get(lbl.POD_GROUP_LABEL)
        uid = str(meta.get("uid", ""))
        if not group or not uid:
            return
        key = f"{meta.get('namespace', '')}/{group}"
        members = self.members.setdefault(key, {})
        if kind == "DELETED":
            members.pop(uid, None)
        else:
            phase = str((body.get("status") or {}).get("phase", "Pending"))
            bound = bool((body.get("spec") or {}).get("nodeName"))
            members[uid] = (phase, bound)
        self._schedule(key)

    def on_group(self, kind: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if kind == "DELETED":
            self.groups.pop(key, None)
            self._written.pop(key, None)
            return
        self.groups[key] = body
        self._schedule(key)

    def _schedule(self, key: str) -> None:
        if key in self._pending:
            return
        loop = asyncio.get_running_loop()
        self._pending[key] = loop.call_later(
            self._debounce, lambda: asyncio.ensure_future(self._write(key))
        )

    # ---- status ------------------------------------------------------------------------
    def desired(self, key: str) -> dict[str, Any] | None:
        body = self.groups.get(key)
        if body is None:
            return None
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        min_member = spec.get("minMember", 1)
        if not isinstance(min_member, int) or min_member < 1:
            min_member = 1
        counts = counts_of(self.members.get(key, {}))
        attempted = bool(status.get("scheduleStartTime")) or bool(status.get("waiting"))
        return {
            "phase": podgroup_phase(min_member, counts, attempted),
            "scheduled": counts.scheduled,
            "running": counts.running,
            "succeeded": counts.succeeded,
            "failed": counts.failed,
            "observedGeneration": (body.get("metadata") or {}).get("generation", 0),
        }

    async def _write(self, key: str) -> None:
        self._pending.pop(key, None)
        want = self.desired(key)
        if want is None:
            return
        current = (self.groups.get(key) or {}).get("status") or {}
        if all(current.get(k) == v for k, v in want.items()) or self._written.get(key) == want:
            return
        ns, _, name = key.partition("/")
        path = f"/apis/{lbl.GROUP}/{lbl.VERSION}/namespaces/{ns}/{lbl.PODGROUP_PLURAL}/{name}"
        if self._client is None:
            return
        try:
            await self._client.merge_patch(f"{path}/status", {"status": want})
            self._written[key] = want
            self.writes += 1
        except ApiError as e:
            if e.status != 404:
                log.warning("status write failed for %s: %s", key, e)
                self._schedule(key)

    # ---- running -----------------------------------------------------------------------
    async def run(self, stop: threading.Event | None = None) -> None:
        """Run until ``stop`` is set (or, without one, until kopf's own signal handling stops
        it). Creates its API client on the running loop."""
        settings = kopf.OperatorSettings()
        settings.posting.enabled = False
        settings.watching.server_timeout = 300
        settings.networking.request_timeout = 60
        self._client = self._make_client()
        try:
            await kopf.operator(
                registry=self.registry,
                settings=settings,
                clusterwide=True,
                standalone=True,
                stop_flag=stop,
            )
        finally:
            await self._client.close()
            self._client = None

    def start_thread(self, stop: threading.Event) -> threading.Thread:
        """Run on a thread with its own event loop (see the module docstring)."""

        def main() -> None:
            try:
                asyncio.run(self.run(stop))
            except Exception:
                log.exception("the PodGroup status controller stopped")

        thread = threading.Thread(target=main, name="status-controller", daemon=True)
        thread.start()
        return thread
