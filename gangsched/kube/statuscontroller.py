"""The PodGroup controller, on kopf: it owns the gangsched PodGroup objects' ``Accepted``
condition.

It watches PodGroups only (no pods: member counts come from the scheduler's one pod watch, and
the scheduler alone writes the phase, the counts and the ``Scheduled`` condition, see
reporter.py). For each PodGroup it checks the spec by the scheduler's own rule
(:func:`gangsched.api.podgroup.podgroup_from`: what the CRD's schema cannot say, such as a
``minResources`` quantity the scheduler cannot use, or an object stored without the CRD's
current validation) and writes the verdict as the ``Accepted`` condition: ``True`` (reason
``Accepted``) or ``False`` (reason ``InvalidSpec``, the message naming the field), with the
``observedGeneration`` it was decided on. It writes only when the object says something else,
a short debounce after the last event, by server-side apply as ``gangsched-controller`` (its
one field: see podstatus.py); a failed write is tried again with a backoff.

It runs in the scheduler's process by default (one Deployment, one leader) on a thread and
event loop of its own: kopf takes over signal handling and, when it stops, cancels the tasks
of the loop it runs on, so it must not share the scheduler's loop. The process's health is
its health: if the thread ends while the scheduler runs, ``/healthz`` fails and the process
exits with an error (see app.py). It can also run on its own with
``gangsched status-controller``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gangsched.api import labels as lbl
from gangsched.api.podgroup import podgroup_from
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON, ApiError
from gangsched.kube.io.kubeconfig import ClusterConfig, from_kubernetes_asyncio
from gangsched.kube.io.times import rfc3339
from gangsched.kube.kopfimport import import_kopf
from gangsched.kube.write.podstatus import (
    CONTROLLER_MANAGER,
    apply_body,
    find_condition,
    podgroup_status_path,
    says,
    transition_time,
)

if TYPE_CHECKING:
    # kopf is imported when the controller starts, on its thread: not on the daemon's start
    import kopf
    from kubernetes_asyncio.client import Configuration

__all__ = [
    "ACCEPTED",
    "StatusController",
    "Verdict",
    "accepted_status",
    "connection_info",
    "verdict",
]

log = logging.getLogger("gangsched.statuscontroller")

ACCEPTED = "Accepted"  # the condition type this controller owns
RETRY_MAX = 30.0  # seconds between tries of a write that keeps failing, at most


def connection_info(cfg: ClusterConfig) -> kopf.ConnectionInfo:
    import kopf

    header = cfg.authorization or ""
    if cfg.token_file:
        with contextlib.suppress(OSError):
            header = "Bearer " + Path(cfg.token_file).read_text().strip()
    scheme, _, credential = header.partition(" ")
    username = password = None
    token = None
    if scheme == "Basic" and credential:
        username, _, password = base64.b64decode(credential).decode().partition(":")
    elif credential:
        token = credential
    return kopf.ConnectionInfo(
        server=cfg.host,
        ca_path=cfg.ssl_ca_cert or None,
        insecure=not cfg.verify_ssl,
        scheme=scheme if token else None,
        token=token,
        username=username,
        password=password,
        certificate_path=cfg.cert_file or None,
        private_key_path=cfg.key_file or None,
    )


# ---- the rule ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether the scheduler can use a PodGroup's spec, as the ``Accepted`` condition says."""

    accepted: bool
    reason: str
    message: str


def verdict(obj: Mapping[str, Any]) -> Verdict:
    """The verdict on a gangsched PodGroup: the scheduler's own reading of it, so the
    condition never says a spec is fine that the scheduler refuses, or the other way round."""
    problem = podgroup_from(obj).invalid_reason
    if problem:
        return Verdict(False, "InvalidSpec", problem)
    return Verdict(True, "Accepted", "the spec is valid")


def _generation(obj: Mapping[str, Any]) -> int:
    generation = (obj.get("metadata") or {}).get("generation")
    return generation if isinstance(generation, int) else 0


def accepted_status(obj: Mapping[str, Any], now: str) -> JSON | None:
    """The status this controller applies to PodGroup ``obj`` (its one condition), or None
    when the object already says it. ``lastTransitionTime`` is the object's own unless the
    condition's status flips."""
    v = verdict(obj)
    current = obj.get("status") or {}
    previous = find_condition(current, ACCEPTED)
    status = "True" if v.accepted else "False"
    want: JSON = {
        "conditions": [
            {
                "type": ACCEPTED,
                "status": status,
                "reason": v.reason,
                "message": v.message[:4096],
                "observedGeneration": _generation(obj),
                "lastTransitionTime": transition_time(previous, status, now),
            }
        ]
    }
    return None if says(current, want) else want


def _key(body: Mapping[str, Any]) -> str:
    meta = body.get("metadata") or {}
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


# ---- the controller ------------------------------------------------------------------------
class StatusController:
    def __init__(
        self,
        cfg: ClusterConfig | Configuration,
        make_client: Callable[[], KubeApi],
        debounce: float = 0.2,
    ) -> None:
        self._cfg = cfg if isinstance(cfg, ClusterConfig) else from_kubernetes_asyncio(cfg)
        self._make_client = make_client
        self._client: KubeApi | None = None
        self._debounce = debounce
        self.groups: dict[str, dict[str, Any]] = {}  # key -> the PodGroup as last seen
        self._pending: dict[str, asyncio.TimerHandle] = {}
        self._failures: dict[str, int] = {}  # key -> writes failed in a row
        self._registry: kopf.OperatorRegistry | None = None
        self.writes = 0

    @property
    def registry(self) -> kopf.OperatorRegistry:
        """kopf's handlers (kopf is imported when they are first asked for: on the
        controller's thread, not on the daemon's start)."""
        if self._registry is None:
            self._registry = self._build_registry()
        return self._registry

    def _build_registry(self) -> kopf.OperatorRegistry:
        import kopf

        registry = kopf.OperatorRegistry()
        cfg = self._cfg

        @kopf.on.login(registry=registry)
        def login(**_: Any) -> kopf.ConnectionInfo:
            return connection_info(cfg)  # at every login: a rotated token is read anew

        @kopf.on.event(lbl.GROUP, lbl.VERSION, lbl.PODGROUP_PLURAL, registry=registry)
        async def group_event(*, type: str, body: kopf.Body, **_: Any) -> None:
            self.on_group(type or "", dict(body))

        return registry

    # ---- events ------------------------------------------------------------------------
    def on_group(self, kind: str, body: dict[str, Any]) -> None:
        key = _key(body)
        if kind == "DELETED":
            self._forget(key)
            return
        self.groups[key] = body
        self._schedule(key, self._debounce)

    def _forget(self, key: str) -> None:
        self.groups.pop(key, None)
        self._failures.pop(key, None)
        timer = self._pending.pop(key, None)
        if timer is not None:
            timer.cancel()

    def _schedule(self, key: str, delay: float) -> None:
        if key in self._pending or key not in self.groups:
            return
        loop = asyncio.get_running_loop()
        self._pending[key] = loop.call_later(delay, lambda: asyncio.ensure_future(self._write(key)))

    # ---- the write ---------------------------------------------------------------------
    def desired(self, key: str) -> JSON | None:
        """The apply body for PodGroup ``key``, or None when it already says its verdict."""
        body = self.groups.get(key)
        if body is None:
            return None
        status = accepted_status(body, rfc3339())
        return None if status is None else apply_body(key, status)

    async def _write(self, key: str) -> None:
        self._pending.pop(key, None)
        want = self.desired(key)
        if want is None or self._client is None:
            self._failures.pop(key, None)
            return
        try:
            written = await self._client.apply(
                podgroup_status_path(key), want, field_manager=CONTROLLER_MANAGER
            )
        except ApiError as e:
            if e.status == 404:  # deleted meanwhile
                self._forget(key)
                return
            failures = self._failures[key] = self._failures.get(key, 0) + 1
            log.warning("status write failed for %s (try %d): %s", key, failures, e)
            self._schedule(key, min(RETRY_MAX, self._debounce * 2**failures))
            return
        self.writes += 1
        self._failures.pop(key, None)
        if key in self.groups:
            self.groups[key] = written

    # ---- running -----------------------------------------------------------------------
    async def run(self, stop: threading.Event | None = None) -> None:
        """Run until ``stop`` is set (or, without one, until kopf's own signal handling stops
        it). Creates its API client on the running loop."""
        import_kopf()  # the first import of kopf, without the client libraries (kopfimport.py)
        import kopf

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
            for timer in self._pending.values():
                timer.cancel()
            self._pending.clear()
            await self._client.close()
            self._client = None

    def start_thread(
        self,
        stop: threading.Event,
        on_exit: Callable[[BaseException | None], None] | None = None,
    ) -> threading.Thread:
        """Run on a thread with its own event loop (see the module docstring); ``on_exit`` is
        called on that thread when it ends, with the error that ended it (None when kopf
        returned)."""

        def main() -> None:
            error: BaseException | None = None
            try:
                asyncio.run(self.run(stop))
            except BaseException as e:
                error = e
                log.exception("the PodGroup controller stopped")
            finally:
                if on_exit is not None:
                    on_exit(error)

        thread = threading.Thread(target=main, name="podgroup-controller", daemon=True)
        thread.start()
        return thread
