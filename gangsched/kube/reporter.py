"""What people see: events on pods, the PodScheduled condition, and the scheduling part of
PodGroup status. All writes go through the outbox and are deduplicated, so an unschedulable
gang retried every few seconds does not write the same thing every few seconds.

Ownership of PodGroup status fields: this writer sets only ``conditions[Scheduled]``,
``message``, ``scheduleStartTime``, ``lastFailureTime`` and ``waiting``; the status
controller sets ``phase``, the member counts and ``observedGeneration``. Both use merge
patches of their own fields only, so they never overwrite each other.
"""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime

from gangsched.core.decisions import PodRef
from gangsched.kube import labels as lbl
from gangsched.kube.client import KubeClient
from gangsched.kube.outbox import Outbox

__all__ = ["Reporter", "rfc3339"]

COMPONENT = "gangsched"


def rfc3339(t: float | None = None, micro: bool = False) -> str:
    dt = datetime.fromtimestamp(time.time() if t is None else t, tz=UTC)
    if micro:
        return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return dt.strftime("%Y-%m-%dT%H:%M:%SZ")


class Reporter:
    def __init__(
        self, client: KubeClient, outbox: Outbox, instance: str, repeat_after: float = 60.0
    ) -> None:
        self._client = client
        self._outbox = outbox
        self._instance = instance
        self._repeat_after = repeat_after
        self._sent: dict[tuple[str, str], tuple[str, float]] = {}
        self._conditions: dict[str, str] = {}
        self._group_status: dict[str, dict[str, object]] = {}
        self._seq = itertools.count()

    # ---- events ------------------------------------------------------------------------
    def event(self, pod: PodRef, kind: str, reason: str, action: str, note: str) -> None:
        now = time.time()
        last = self._sent.get((pod.uid, reason))
        if last is not None and last[0] == note and now - last[1] < self._repeat_after:
            return
        self._sent[(pod.uid, reason)] = (note, now)
        body = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: the object name, a dot, and a unique hex suffix
            "metadata": {
                "name": f"{pod.name}.{time.time_ns():x}{next(self._seq):x}",
                "namespace": pod.namespace,
            },
            "eventTime": rfc3339(now, micro=True),
            "reportingController": f"{lbl.GROUP}/{COMPONENT}",
            "reportingInstance": self._instance,
            "action": action,
            "reason": reason,
            "note": note[:1024],
            "type": kind,
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": pod.namespace,
                "name": pod.name,
                "uid": pod.uid,
            },
        }
        path = f"/apis/events.k8s.io/v1/namespaces/{pod.namespace}/events"
        self._outbox.put("event", lambda: self._client.post(path, body))

    def scheduled(self, pod: PodRef, node: str) -> None:
        self._conditions.pop(pod.uid, None)
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
        path = f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status"
        self._outbox.put(
            "condition", lambda: self._client.strategic_patch(path, body), key=("cond", pod.uid)
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
        for key in [k for k in self._sent if k[0] == uid]:
            del self._sent[key]

    # ---- PodGroup status (scheduling fields only) ----------------------------------------
    def group_status(
        self,
        key: str,
        *,
        scheduled: bool,
        reason: str,
        message: str,
        waiting: int,
        start: float | None,
        last_failure: float | None,
    ) -> None:
        ns, _, name = key.partition("/")
        condition = {
            "type": "Scheduled",
            "status": "True" if scheduled else "False",
            "reason": reason or ("Scheduled" if scheduled else "Pending"),
            "message": message[:4096],
        }
        status: dict[str, object] = {
            "message": message[:1024],
            "waiting": waiting,
            "scheduleStartTime": rfc3339(start) if start else None,
            "lastFailureTime": rfc3339(last_failure) if last_failure else None,
        }
        signature: dict[str, object] = {**status, "condition": dict(condition)}
        if self._group_status.get(key) == signature:
            return
        self._group_status[key] = signature
        path = f"/apis/{lbl.GROUP}/{lbl.VERSION}/namespaces/{ns}/{lbl.PODGROUP_PLURAL}/{name}"

        async def write() -> object:
            current = await self._client.get(path)
            conds = [
                c
                for c in (current.get("status") or {}).get("conditions") or []
                if c.get("type") != "Scheduled"
            ]
            old = next(
                (
                    c
                    for c in (current.get("status") or {}).get("conditions") or []
                    if c.get("type") == "Scheduled"
                ),
                None,
            )
            changed = old is None or old.get("status") != condition["status"]
            cond = {
                **condition,
                "lastTransitionTime": rfc3339()
                if changed
                else old.get("lastTransitionTime", rfc3339())
                if old
                else rfc3339(),
                "observedGeneration": (current.get("metadata") or {}).get("generation", 0),
            }
            body = {"status": {**status, "conditions": [*conds, cond]}}
            try:
                return await self._client.merge_patch(f"{path}/status", body)
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
