"""The PodGroup status controller, on kopf.

It writes PodGroup status from the member pods: phase, member counts and the ``Scheduled``
condition, by the same rule as the scheduler (:func:`gangsched.core.status.group_status`),
with the scheduler's last reason and message (read from the condition) where the counts do not
contradict them. kopf watches member pods (those labelled ``gangsched.io/pod-group``) and
PodGroups; the controller keeps a small index of member phases and writes a merge patch, with
the object's resourceVersion as a precondition, a short debounce after the last event and only
when the status says something else. Every ``resync_seconds`` it lists the PodGroups and the
member pods again and repairs its index: kopf reports no deletion that happened while a watch
was down, so a member deleted then would otherwise be counted for ever.

It runs in the scheduler's process by default (one Deployment, one leader) on a thread and
event loop of its own: kopf takes over signal handling and, when it stops, cancels the tasks
of the loop it runs on, so it must not share the scheduler's loop. It can also run on its own
with ``gangsched status-controller``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable
from typing import Any

import kopf
from kubernetes_asyncio.client import Configuration

from gangsched.core.status import GroupStatus, MemberCounts, count_members, group_status
from gangsched.kube import labels as lbl
from gangsched.kube.client import JSON, ApiError, KubeClient
from gangsched.kube.events import rfc3339
from gangsched.kube.membership import resolve_membership
from gangsched.kube.podstatus import group_status_patch

__all__ = ["StatusController", "connection_info", "counts_of", "member_key"]

log = logging.getLogger("gangsched.statuscontroller")

PODGROUPS = f"/apis/{lbl.GROUP}/{lbl.VERSION}/{lbl.PODGROUP_PLURAL}"


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
    return count_members(members.values())


def member_key(body: dict[str, Any]) -> str:
    """The gangsched PodGroup a pod counts for (``namespace/name``), or '' when none: the
    ``gangsched.io/pod-group`` label, unless the pod's gang declarations are refused."""
    meta = body.get("metadata") or {}
    labels = meta.get("labels") or {}
    group = labels.get(lbl.POD_GROUP_LABEL) if isinstance(labels, dict) else None
    if not group:
        return ""
    ns = str(meta.get("namespace", ""))
    annotations = meta.get("annotations") or {}
    try:
        m = resolve_membership(ns, labels, annotations, 0.0)
    except Exception:  # an unreadable object: the scheduler refuses it too
        return ""
    key = f"{ns}/{group}"
    return key if m.key == key else ""


def _member(body: dict[str, Any]) -> tuple[str, bool]:
    phase = str((body.get("status") or {}).get("phase", "Pending"))
    bound = bool((body.get("spec") or {}).get("nodeName"))
    return phase, bound


class StatusController:
    def __init__(
        self,
        cfg: Configuration,
        make_client: Callable[[], KubeClient],
        debounce: float = 0.2,
        resync_seconds: float = 60.0,
    ) -> None:
        self._conn = connection_info(cfg)
        self._make_client = make_client
        self._client: KubeClient | None = None
        self._debounce = debounce
        self._resync_seconds = resync_seconds
        self.members: dict[str, dict[str, tuple[str, bool]]] = {}  # key -> uid -> (phase, bound)
        self._key_of: dict[str, str] = {}  # uid -> key
        self.groups: dict[str, dict[str, Any]] = {}
        self._pending: dict[str, asyncio.TimerHandle] = {}
        # while a resync lists: what the watches deleted meanwhile (not to be brought back)
        self._deleted: set[str] | None = None
        self.registry = self._build_registry()
        self.writes = 0
        self.resyncs = 0

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
        uid = str((body.get("metadata") or {}).get("uid", ""))
        if not uid:
            return
        key = "" if kind == "DELETED" else member_key(body)
        if kind == "DELETED" and self._deleted is not None:
            self._deleted.add(uid)
        old = self._key_of.get(uid)
        if old is not None and old != key:
            self._drop(uid)
            self._schedule(old)
        if key:
            self.members.setdefault(key, {})[uid] = _member(body)
            self._key_of[uid] = key
            self._schedule(key)

    def _drop(self, uid: str) -> None:
        key = self._key_of.pop(uid, None)
        members = self.members.get(key, {}) if key is not None else {}
        members.pop(uid, None)
        if key is not None and not members:
            self.members.pop(key, None)

    def on_group(self, kind: str, body: dict[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        if kind == "DELETED":
            if self._deleted is not None:
                self._deleted.add(key)
            self._forget_group(key)
            return
        self.groups[key] = body
        self._schedule(key)

    def _forget_group(self, key: str) -> None:
        self.groups.pop(key, None)
        timer = self._pending.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _schedule(self, key: str) -> None:
        if key in self._pending or key not in self.groups:
            return
        loop = asyncio.get_running_loop()
        self._pending[key] = loop.call_later(
            self._debounce, lambda: asyncio.ensure_future(self._write(key))
        )

    # ---- status ------------------------------------------------------------------------
    def desired(self, key: str) -> GroupStatus | None:
        """The PodGroup's status by the scheduler's rule, from the member pods and the
        scheduler's last word on the gang (the condition's reason and message)."""
        body = self.groups.get(key)
        if body is None:
            return None
        spec = body.get("spec") or {}
        status = body.get("status") or {}
        min_member = spec.get("minMember", 1)
        if not isinstance(min_member, int) or min_member < 1:
            min_member = 1
        condition = next(
            (
                c
                for c in status.get("conditions") or []
                if isinstance(c, dict) and c.get("type") == "Scheduled"
            ),
            {},
        )
        return group_status(
            min_member,
            counts_of(self.members.get(key, {})),
            reason=str(condition.get("reason") or ""),
            message=str(condition.get("message") or ""),
            attempted=bool(status.get("scheduleStartTime")) or bool(status.get("waiting")),
            binding=True,  # only the scheduler knows when its bindings are confirmed
        )

    async def _write(self, key: str) -> None:
        self._pending.pop(key, None)
        want = self.desired(key)
        body = self.groups.get(key)
        if want is None or body is None or self._client is None:
            return
        patch = group_status_patch(body, want, now=rfc3339())
        if patch is None:
            return
        ns, _, name = key.partition("/")
        path = f"/apis/{lbl.GROUP}/{lbl.VERSION}/namespaces/{ns}/{lbl.PODGROUP_PLURAL}/{name}"
        try:
            written = await self._client.merge_patch(f"{path}/status", patch)
            self.writes += 1
            if key in self.groups:
                self.groups[key] = written
        except ApiError as e:
            if e.status == 404:
                return
            if e.status == 409:
                # changed since we read it (the scheduler wrote): decide again on the new one
                with contextlib.suppress(ApiError):
                    fresh = await self._client.get(path)
                    if key in self.groups:
                        self.groups[key] = fresh
            else:
                log.warning("status write failed for %s: %s", key, e)
            self._schedule(key)

    # ---- resync ------------------------------------------------------------------------
    async def _list(self, path: str, **params: Any) -> list[JSON]:
        assert self._client is not None
        items: list[JSON] = []
        cont = ""
        while True:
            more = {"continue": cont} if cont else {}
            page = await self._client.get(path, limit=500, **params, **more)
            items.extend(page.get("items") or [])
            cont = (page.get("metadata") or {}).get("continue") or ""
            if not cont:
                return items

    async def resync(self) -> None:
        """List PodGroups and member pods and repair the index: drop what is gone (a
        deletion no watch reported), add what is missing, and recompute every PodGroup."""
        pods_before, groups_before = set(self._key_of), set(self.groups)
        self._deleted = set()
        try:
            groups = await self._list(PODGROUPS)
            pods = await self._list("/api/v1/pods", labelSelector=lbl.POD_GROUP_LABEL)
            deleted = self._deleted
        finally:
            self._deleted = None
        listed_groups = {
            f"{(g.get('metadata') or {}).get('namespace', '')}/"
            f"{(g.get('metadata') or {}).get('name', '')}": g
            for g in groups
        }
        listed_pods = {str((p.get("metadata") or {}).get("uid", "")): p for p in pods}
        for key in groups_before - listed_groups.keys():
            self._forget_group(key)
        for key, body in listed_groups.items():
            if key not in self.groups and key not in deleted:
                self.on_group("ADDED", body)
        for uid in pods_before - listed_pods.keys():
            if uid in self._key_of:
                key = self._key_of[uid]
                self._drop(uid)
                self._schedule(key)
        for uid, body in listed_pods.items():
            if uid not in self._key_of and uid not in deleted:
                self.on_pod("ADDED", body)
        for key in self.groups:
            self._schedule(key)
        self.resyncs += 1

    async def _resync_forever(self) -> None:
        while True:
            await asyncio.sleep(self._resync_seconds)
            try:
                await self.resync()
            except Exception as e:  # the API server may be away; try again next period
                log.warning("status resync failed: %s", e)

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
            # Seed the index from full lists first: kopf lists PodGroups and pods on their own,
            # and a PodGroup written before its pods are listed would count none.
            await self.resync()
        except Exception as e:
            log.warning("listing PodGroups and member pods failed: %s", e)
        resync = (
            asyncio.create_task(self._resync_forever(), name="status-resync")
            if self._resync_seconds > 0
            else None
        )
        try:
            await kopf.operator(
                registry=self.registry,
                settings=settings,
                clusterwide=True,
                standalone=True,
                stop_flag=stop,
            )
        finally:
            if resync is not None:
                resync.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await resync
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
