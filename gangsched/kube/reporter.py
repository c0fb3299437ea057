"""What people see: events on pods, the PodScheduled condition, and PodGroup status. All
writes go through the outbox and are deduplicated, so an unschedulable gang retried every few
seconds does not write the same thing every few seconds.

PodGroup status: phase, member counts and the ``Scheduled`` condition come from the core's one
rule (:func:`gangsched.core.status.group_status`) and are written together, with the object's
resourceVersion as a precondition (see podstatus.py); the status controller writes the same
fields by the same rule from its own view of the pods. Only this writer sets
``scheduleStartTime``, ``lastFailureTime`` and ``waiting``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched.core.decisions import PodRef
from gangsched.core.status import GroupStatus
from gangsched.kube import labels as lbl
from gangsched.kube.client import KubeClient
from gangsched.kube.events import EventRecorder, rfc3339
from gangsched.kube.outbox import Outbox
from gangsched.kube.podstatus import (
    UnboundVersion,
    group_status_patch,
    write_group_status,
    write_pod_condition,
)

__all__ = ["Reporter", "rfc3339"]

COMPONENT = "gangsched"


# Events that tell the outcome of a binding go before the other writes (see outbox.py).
URGENT_EVENTS = frozenset({"Scheduled", "FailedBinding"})


class Reporter:
    def __init__(
        self, client: KubeClient, outbox: Outbox, instance: str, repeat_after: float = 60.0
    ) -> None:
        self._client = client
        self._outbox = outbox
        self._instance = instance
        self._repeat_after = repeat_after
        # Repeats of an event are counted into its series (see events.py).
        self._events = EventRecorder(
            client, outbox, f"{lbl.GROUP}/{COMPONENT}", instance, refresh=repeat_after
        )
        self._conditions: dict[str, str] = {}
        self._group_status: dict[str, object] = {}
        # Where the pod watch says which pods are still unbound (set by the service); without
        # it a condition write reads the pod first.
        self.pod_version: UnboundVersion | None = None

    # ---- events ------------------------------------------------------------------------
    def event(self, pod: PodRef, kind: str, reason: str, action: str, note: str) -> None:
        self._events.record(pod, kind, reason, action, note, urgent=reason in URGENT_EVENTS)

    def scheduled(self, pod: PodRef, node: str) -> None:
        self._conditions.pop(pod.uid, None)
        self._events.forget(pod.uid, "FailedScheduling")  # what it had not sent is moot now
        self.event(
            pod,
            "Normal",
            "Scheduled",
            "Binding",
            f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
        )

    def unschedulable(self, pod: PodRef, reason: str, message: str) -> None:
        """A FailedScheduling event and ``PodScheduled=False``, as kube-scheduler does, with
        the gang's reason and message (``<reason>: <message>``). The condition's reason is
        Unschedulable, except for a gang held back by scheduling gates: SchedulingGated, the
        reason the API server gives a gated pod, so that nothing (a cluster autoscaler) takes
        the gang for one that needs more nodes. Refused pods (InvalidPod, Unsupported) get
        the field that is wrong or not supported in the message."""
        self.event(pod, "Warning", "FailedScheduling", "Scheduling", message)
        condition_reason = "SchedulingGated" if reason == "SchedulingGated" else "Unschedulable"
        signature = f"{condition_reason}/{reason}: {message}"
        if self._conditions.get(pod.uid) == signature:
            return
        self._conditions[pod.uid] = signature
        body = {
            "status": {
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": condition_reason,
                        "message": f"{reason}: {message}"[:4096],
                        "lastTransitionTime": rfc3339(),
                    }
                ]
            }
        }
        # Fenced: never lands on a pod bound since (see podstatus.py).
        self._outbox.put(
            "condition",
            lambda: write_pod_condition(self._client, pod, body, self.pod_version),
            key=("cond", pod.uid),
        )

    def mark_timeout(self, pod: PodRef) -> None:
        """Annotate a pod whose gang timed out (as Koordinator does)."""
        body = {
            "metadata": {"annotations": {lbl.TIMEOUT_ANNOTATION: "true", lbl.KOORD_TIMEOUT: "true"}}
        }
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"
        self._outbox.put("annotate", lambda: self._client.merge_patch(path, body))

    def forget_pod(self, uid: str) -> None:
        self._conditions.pop(uid, None)
        self._events.forget(uid)

    def flush(self) -> None:
        """Queue every write that waits for its time (event series), to be sent now."""
        self._events.flush()

    # ---- PodGroup status ----------------------------------------------------------------
    def group_status(
        self,
        key: str,
        status: GroupStatus,
        *,
        waiting: int,
        start: float | None,
        last_failure: float | None,
        current: Mapping[str, Any] | None = None,
    ) -> None:
        """Write a gangsched PodGroup's status when it changed since the last report; with
        ``current`` (the object as the watch last saw it: a relist, the periodic resync) when
        that object says something else."""
        ns, _, name = key.partition("/")
        # The times are never cleared: a scheduler that restarted has not tried yet, but the
        # gang was tried (the service gives the core the start time back from the object).
        extra: dict[str, object] = {"waiting": waiting}
        if start:
            extra["scheduleStartTime"] = rfc3339(start)
        if last_failure:
            extra["lastFailureTime"] = rfc3339(last_failure)
        signature = (status, tuple(extra.items()))
        if current is not None:
            if group_status_patch(current, status, extra, now="") is None:
                self._group_status[key] = signature
                return
        elif self._group_status.get(key) == signature:
            return
        self._group_status[key] = signature
        path = f"/apis/{lbl.GROUP}/{lbl.VERSION}/namespaces/{ns}/{lbl.PODGROUP_PLURAL}/{name}"

        async def write() -> object:
            try:
                return await write_group_status(self._client, path, status, extra, rfc3339)
            except Exception:
                # not written: forget it, so the next report for this gang writes again
                if self._group_status.get(key) == signature:
                    self._group_status.pop(key, None)
                raise

        self._outbox.put("podgroup-status", write, key=("podgroup", key))

    @property
    def dropped(self) -> int:
        """Writes the outbox dropped because the API server could not keep up."""
        return self._outbox.dropped

    def forget_group(self, key: str) -> None:
        self._group_status.pop(key, None)
