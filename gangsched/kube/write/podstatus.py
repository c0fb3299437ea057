"""Status writes, and the rules that keep them from contradicting the objects they land on.

PodGroup status has two writers, and each field has exactly one: both write by server-side
apply (one PATCH of ``podgroups/<name>/status``, no read first) under a field manager of their
own, with ``force=true``:

- the scheduler (``gangsched-scheduler``, :class:`~gangsched.kube.write.reporter.Reporter`): the
  phase, the member counts, ``waiting``, ``scheduleStartTime``, ``lastFailureTime``,
  ``message``, ``observedGeneration`` and the ``Scheduled`` condition, all from one
  :class:`~gangsched.core.status.GroupStatus`, so the object never mixes two computations;
- the PodGroup controller (``gangsched-controller``, statuscontroller.py): the ``Accepted``
  condition.

The CRD declares ``status.conditions`` a map list keyed by ``type``, so each writer's condition
is an entry of its own that the other's writes leave alone. A writer sends every field it owns
each time: a field it sent before and leaves out is removed. A condition's
``lastTransitionTime`` changes only when its ``status`` does (:func:`transition_time`).

Pod ``PodScheduled=False``: sent only while the pod is unbound, with the resourceVersion of
the unbound pod as a precondition. A binding changes the pod (``spec.nodeName``, and
``PodScheduled=True``), so a condition decided before the binding is refused instead of
moving the pod back from scheduled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gangsched.api import labels as lbl
from gangsched.core.decisions import PodRef
from gangsched.core.status import Expected, GroupStatus, with_forecast
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON, ApiError

__all__ = [
    "CONTROLLER_MANAGER",
    "SCHEDULER_MANAGER",
    "UnboundVersion",
    "apply_body",
    "find_condition",
    "podgroup_status_path",
    "says",
    "scheduler_status",
    "transition_time",
    "unscheduled_condition",
    "write_pod_condition",
]

# The field managers of the two PodGroup status writers (see the module docstring).
SCHEDULER_MANAGER = "gangsched-scheduler"
CONTROLLER_MANAGER = "gangsched-controller"

# The resourceVersion of a pod as last seen unbound ('' when not known), or None when it is
# bound or gone.
UnboundVersion = Callable[[str], str | None]

CONFLICT_RETRIES = 3


def podgroup_status_path(key: str) -> str:
    """The status subresource of the gangsched PodGroup ``namespace/name``."""
    ns, _, name = key.partition("/")
    return f"/apis/{lbl.GROUP}/{lbl.VERSION}/namespaces/{ns}/{lbl.PODGROUP_PLURAL}/{name}/status"


def find_condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    """The condition of type ``kind`` in a status, or None."""
    for c in status.get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


def transition_time(previous: Mapping[str, Any] | None, status: str, now: str) -> str:
    """The ``lastTransitionTime`` of a condition that says ``status`` now: the previous one's
    when that said the same status (and has a time), else ``now``."""
    if previous is not None and previous.get("status") == status:
        kept = previous.get("lastTransitionTime")
        if isinstance(kept, str) and kept:
            return kept
    return now


def scheduler_status(
    st: GroupStatus,
    *,
    generation: int,
    waiting: int,
    start: str,
    last_failure: str,
    since: str,
    reservation: JSON | None = None,
    expected: Expected | None = None,
) -> JSON:
    """Every status field the scheduler owns, as it applies them: ``st`` (phase, counts and
    the ``Scheduled`` condition, whose ``lastTransitionTime`` is ``since``), the spec
    ``generation`` it was computed from, and its own fields (a time that is '' is left out).
    ``expected``: the start forecast of a gang not yet scheduled, (time, basis), the time ''
    when unknown: ``expectedStart`` and ``expectedStartBasis``, and the condition's message
    says it too."""
    c = st.counts
    status: JSON = {
        "phase": st.phase,
        "scheduled": c.scheduled,
        "running": c.running,
        "succeeded": c.succeeded,
        "failed": c.failed,
        "waiting": waiting,
        "message": st.message[:1024],
        "observedGeneration": generation,
    }
    if start:
        status["scheduleStartTime"] = start
    if last_failure:
        status["lastFailureTime"] = last_failure
    if reservation:
        status["reservation"] = reservation
    message = st.message
    if expected is not None and not st.scheduled:
        at, basis = expected
        if at:
            status["expectedStart"] = at
        status["expectedStartBasis"] = basis[:1024]
        message = with_forecast(message, expected)
        status["message"] = message[:1024]
    status["conditions"] = [
        {
            "type": "Scheduled",
            "status": "True" if st.scheduled else "False",
            "reason": st.reason,
            "message": message[:4096],
            "observedGeneration": generation,
            "lastTransitionTime": since,
        }
    ]
    return status


def says(current: Mapping[str, Any], want: Mapping[str, Any]) -> bool:
    """Whether the status ``current`` already says every field of ``want`` (a status as
    applied: its conditions are compared by type, without ``lastTransitionTime``)."""
    for field, value in want.items():
        if field != "conditions":
            if current.get(field) != value:
                return False
            continue
        for cond in value:
            have = find_condition(current, cond["type"])
            if have is None or any(
                have.get(k) != v for k, v in cond.items() if k != "lastTransitionTime"
            ):
                return False
    return True


def apply_body(key: str, status: Mapping[str, Any]) -> JSON:
    """The server-side apply body that sets a gangsched PodGroup's ``status``."""
    ns, _, name = key.partition("/")
    return {
        "apiVersion": f"{lbl.GROUP}/{lbl.VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "status": dict(status),
    }


def unscheduled_condition(reason: str, message: str, now: str) -> JSON:
    """A pod's ``PodScheduled=False`` condition, as the scheduler writes it."""
    return {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message[:4096],
        "lastTransitionTime": now,
    }


async def write_pod_condition(
    client: KubeApi, pod: PodRef, body: JSON, unbound_version: UnboundVersion | None
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
