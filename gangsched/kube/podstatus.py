"""Status writes that must not land on a newer object than the one they were decided on.

PodGroup status: phase, member counts and the ``Scheduled`` condition come from one
:class:`~gangsched.core.status.GroupStatus` and go out in one merge patch, so the object never
mixes two computations. Both writers (the scheduler's reporter and the status controller) send
the object's ``metadata.resourceVersion`` with the patch: the API server refuses it (409) if
the object changed since it was read, and the writer reads it again.

Pod ``PodScheduled=False``: sent only while the pod is unbound, with the resourceVersion of
the unbound pod as a precondition. A binding changes the pod (``spec.nodeName``, and
``PodScheduled=True``), so a condition decided before the binding is refused instead of
moving the pod back from scheduled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gangsched.core.decisions import PodRef
from gangsched.core.status import GroupStatus
from gangsched.kube.client import JSON, ApiError, KubeClient

__all__ = ["UnboundVersion", "group_status_patch", "write_group_status", "write_pod_condition"]

# The resourceVersion of a pod as last seen unbound ('' when not known), or None when it is
# bound or gone.
UnboundVersion = Callable[[str], str | None]

CONFLICT_RETRIES = 3


def _scheduled_condition(obj: Mapping[str, Any]) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Scheduled":
            return c
    return None


def group_status_patch(
    obj: Mapping[str, Any],
    st: GroupStatus,
    extra: Mapping[str, object] | None = None,
    *,
    now: str,
) -> JSON | None:
    """The merge patch that makes PodGroup ``obj`` say ``st`` (and the fields of ``extra``),
    with ``obj``'s resourceVersion as a precondition; None when it already says so.
    ``lastTransitionTime`` changes only when the condition's status flips."""
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    generation = meta.get("generation", 0)
    c = st.counts
    want: dict[str, object] = {
        "phase": st.phase,
        "scheduled": c.scheduled,
        "running": c.running,
        "succeeded": c.succeeded,
        "failed": c.failed,
        "message": st.message[:1024],
        "observedGeneration": generation,
        **(extra or {}),
    }
    old = _scheduled_condition(obj)
    cond: dict[str, object] = {
        "type": "Scheduled",
        "status": "True" if st.scheduled else "False",
        "reason": st.reason,
        "message": st.message[:4096],
        "observedGeneration": generation,
    }
    same = old is not None and all(old.get(k) == v for k, v in cond.items())
    if same and all(status.get(k) == v for k, v in want.items()):
        return None
    kept = old.get("lastTransitionTime") if old is not None else None
    flipped = old is None or old.get("status") != cond["status"]
    cond["lastTransitionTime"] = now if flipped or not kept else kept
    others = [
        x
        for x in status.get("conditions") or []
        if isinstance(x, dict) and x.get("type") != "Scheduled"
    ]
    patch: JSON = {"status": {**want, "conditions": [*others, cond]}}
    if meta.get("resourceVersion"):
        patch["metadata"] = {"resourceVersion": meta["resourceVersion"]}
    return patch


async def write_group_status(
    client: KubeClient,
    path: str,
    st: GroupStatus,
    extra: Mapping[str, object],
    now: Callable[[], str],
) -> JSON | None:
    """Read the PodGroup at ``path`` and patch its status to say ``st``, read again and retry
    when it changed in between (409). Returns the object written, or None when it already
    said so."""
    for attempt in range(CONFLICT_RETRIES):
        obj = await client.get(path)
        patch = group_status_patch(obj, st, extra, now=now())
        if patch is None:
            return None
        try:
            return await client.merge_patch(f"{path}/status", patch)
        except ApiError as e:
            if e.status != 409 or attempt == CONFLICT_RETRIES - 1:
                raise
    return None


async def write_pod_condition(
    client: KubeClient, pod: PodRef, body: JSON, unbound_version: UnboundVersion | None
) -> JSON | None:
    """Patch a pod's status with ``body`` (a ``PodScheduled=False`` condition) only while the
    pod is unbound: with the resourceVersion of the unbound pod as a precondition, from
    ``unbound_version`` (the watch's view) or else read from the API server. A pod bound or
    gone meanwhile is left alone (None)."""
    path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
    version: str | None = ""
    if unbound_version is not None:
        version = unbound_version(pod.uid)
        if version is None:
            return None
    for _ in range(CONFLICT_RETRIES):
        if not version:
            try:
                current = await client.get(path)
            except ApiError as e:
                if e.status == 404:
                    return None
                raise
            meta = current.get("metadata") or {}
            if (
                meta.get("uid") != pod.uid
                or meta.get("deletionTimestamp")
                or (current.get("spec") or {}).get("nodeName")
            ):
                return None
            version = str(meta.get("resourceVersion") or "")
            if not version:
                return None
        patch = {**body, "metadata": {"uid": pod.uid, "resourceVersion": version}}
        try:
            return await client.strategic_patch(f"{path}/status", patch)
        except ApiError as e:
            if e.status == 404:
                return None
            if e.status != 409:
                raise
        version = None  # changed since: read it again
    return None
