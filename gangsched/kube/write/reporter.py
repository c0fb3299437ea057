"""What people see: events on pods, the PodScheduled condition, and PodGroup status. All
writes go through the outbox and are deduplicated, so an unschedulable gang retried every few
seconds does not write the same thing every few seconds.

On pods gangsched writes only events and the ``PodScheduled`` condition (``pods/status``), as
kube-scheduler does: never the pod itself, so it needs no ``patch`` on pods. A gang whose
reservations were released at its deadline says so in both: a ``GangTimeout`` event and
``PodScheduled=False`` with the message ``Timeout: <why>``. A waiting gang's start forecast
ends its pods' ``PodScheduled`` message too (``; expected to start at <time>, <basis>``), so
gangs of every PodGroup convention show it; it is rewritten when the forecast changes.

PodGroup status: this is the only writer of the phase, the member counts, the ``Scheduled``
condition, ``scheduleStartTime``, ``lastFailureTime`` and ``waiting``, from the core's one rule
(:func:`gangsched.core.status.group_status`) on the scheduler's pod watch. It writes them all
at once by server-side apply as ``gangsched-scheduler`` (see podstatus.py): one request, no
read first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any, NamedTuple

from gangsched.api import labels as lbl
from gangsched.core.decisions import PodRef
from gangsched.core.status import Expected, GroupStatus, with_forecast
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.io.times import rfc3339
from gangsched.kube.write.events import EventRecorder
from gangsched.kube.write.podstatus import (
    SCHEDULER_MANAGER,
    UnboundVersion,
    apply_body,
    find_condition,
    podgroup_status_path,
    says,
    scheduler_status,
    transition_time,
    unscheduled_condition,
    write_pod_condition,
)

__all__ = ["Reporter", "rfc3339", "scheduled_event_name"]

COMPONENT = "gangsched"


# Events that tell the outcome of a binding go before the other writes (see outbox.py).
URGENT_EVENTS = frozenset({"Scheduled", "FailedBinding"})


# the gang's reasons a pod's PodScheduled condition keeps as they are (every other is said
# as Unschedulable, with the gang's reason in the message)
KEPT_REASONS = frozenset({"SchedulingGated", "SchedulerError"})


class Reported(NamedTuple):
    """What the reporter last sent for a PodGroup: the status it said (for the tests and the
    dedup), the signature of everything it sent, and its ``Scheduled`` condition (whose
    ``lastTransitionTime`` the next write keeps unless the condition's status flips)."""

    status: GroupStatus
    signature: tuple[object, ...]
    condition: Mapping[str, Any] | None


def scheduled_event_name(pod: PodRef) -> str:
    """``<pod name>.<12 hex digits of the UID's hash>``: the same for every process."""
    digest = hashlib.sha256(pod.uid.encode()).hexdigest()[:12]
    return f"{pod.name[:240]}.{digest}"


class Reporter:
    def __init__(
        self, client: KubeApi, outbox: Outbox, instance: str, repeat_after: float = 60.0
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
        # The unschedulable pods' conditions before their forecast (pod, reason, message), by
        # gang and pod UID, and each gang's forecast: a new forecast rewrites them.
        self._waiting: dict[str, dict[str, tuple[PodRef, str, str]]] = {}
        self._gang_of: dict[str, str] = {}
        self._forecasts: dict[str, Expected] = {}
        self._group_status: dict[str, Reported] = {}
        # Where the pod watch says which pods are still unbound (set by the service); without
        # it a condition write reads the pod first.
        self.pod_version: UnboundVersion | None = None

    # ---- events ------------------------------------------------------------------------
    def event(self, pod: PodRef, kind: str, reason: str, action: str, note: str) -> None:
        self._events.record(pod, kind, reason, action, note, urgent=reason in URGENT_EVENTS)

    def scheduled(self, pod: PodRef, node: str) -> None:
        """The Scheduled event, under a name fixed by the pod's UID: a restarted scheduler
        that sends it again for a pod its predecessor bound (the event may have been lost
        with the process) writes it only if it is not there."""
        self._conditions.pop(pod.uid, None)
        self._not_waiting(pod.uid)
        self._events.forget(pod.uid, "FailedScheduling")  # what it had not sent is moot now
        self._events.record(
            pod,
            "Normal",
            "Scheduled",
            "Binding",
            f"Successfully assigned {pod.namespace}/{pod.name} to {node}",
            urgent="Scheduled" in URGENT_EVENTS,
            name=scheduled_event_name(pod),
        )

    def unschedulable(self, pod: PodRef, reason: str, message: str, gang: str = "") -> None:
        """A FailedScheduling event and ``PodScheduled=False``, as kube-scheduler does, with
        the gang's reason and message (``<reason>: <message>``). The condition's reason is
        Unschedulable, except for a gang held back by scheduling gates: SchedulingGated, the
        reason the API server gives a gated pod, and for one held back after gangsched failed
        on it: SchedulerError, kube-scheduler's reason for an error of its own; so that
        nothing (a cluster autoscaler) takes the gang for one that needs more nodes. Refused
        pods (InvalidPod, Unsupported) get the field that is wrong or not supported in the
        message. The condition's message ends with ``gang``'s start forecast, when there is
        one (:meth:`forecast`); the event does not (events are history, and a series is
        counted by its message)."""
        self.event(pod, "Warning", "FailedScheduling", "Scheduling", message)
        condition_reason = reason if reason in KEPT_REASONS else "Unschedulable"
        said = f"{reason}: {message}"
        self._not_waiting(pod.uid)
        if gang:
            self._waiting.setdefault(gang, {})[pod.uid] = (pod, condition_reason, said)
            self._gang_of[pod.uid] = gang
            expected = self._forecasts.get(gang)
            if expected is not None:
                said = with_forecast(said, expected)
        self._pod_condition(pod, condition_reason, said)

    def forecast(self, gang: str, expected: Expected | None) -> None:
        """The gang's start forecast is now ``expected`` (None: none): the conditions of its
        unschedulable pods say it."""
        if expected is None:
            if self._forecasts.pop(gang, None) is None:
                return
        elif self._forecasts.get(gang) == expected:
            return
        else:
            self._forecasts[gang] = expected
        for pod, reason, said in list(self._waiting.get(gang, {}).values()):
            self._pod_condition(
                pod, reason, said if expected is None else with_forecast(said, expected)
            )

    def _not_waiting(self, uid: str) -> None:
        gang = self._gang_of.pop(uid, None)
        if gang is not None:
            pods = self._waiting.get(gang)
            if pods is not None:
                pods.pop(uid, None)
                if not pods:
                    del self._waiting[gang]

    def timed_out(self, pod: PodRef, message: str) -> None:
        """``PodScheduled=False`` (reason Unschedulable, message ``Timeout: <message>``) on a
        pod whose gang's reservations were released at its deadline, next to the
        ``GangTimeout`` event the service records: where users (and tools that read
        conditions) see that the gang timed out. gangsched writes nothing else on the pod."""
        self._not_waiting(pod.uid)
        self._pod_condition(pod, "Unschedulable", f"Timeout: {message}")

    def _pod_condition(self, pod: PodRef, reason: str, message: str) -> None:
        signature = f"{reason}/{message}"
        said = self._conditions.get(pod.uid)
        if said == signature:
            return
        self._conditions[pod.uid] = signature
        body = {"status": {"conditions": [unscheduled_condition(reason, message, rfc3339())]}}
        # Fenced: never lands on a pod bound since (see podstatus.py).
        first = said is None

        def dropped() -> None:  # (unsent: the next report sends it again, first if it was)
            if self._conditions.get(pod.uid) == signature:
                if first:
                    del self._conditions[pod.uid]
                else:
                    self._conditions[pod.uid] = ""

        # (the pod's first condition from this scheduler goes before the backlog of updates)
        self._outbox.put(
            "condition",
            lambda: write_pod_condition(self._client, pod, body, self.pod_version),
            key=("cond", pod.uid),
            first=first,
            on_drop=dropped,
        )

    def forget_pod(self, uid: str) -> None:
        self._conditions.pop(uid, None)
        self._not_waiting(uid)
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
        seen: Mapping[str, Any] | None = None,
        force: bool = False,
        reservation: Mapping[str, Any] | None = None,
        expected: tuple[str, str] | None = None,
    ) -> None:
        """Apply a gangsched PodGroup's status (every field the scheduler owns) when it
        changed since the last report; with ``force`` (a relist, the periodic resync) when
        ``seen``, the object as the watch last saw it, says something else.

        ``seen`` also gives the spec's generation (``observedGeneration``) and what the
        reporter does not know after a restart: the ``Scheduled`` condition's
        ``lastTransitionTime`` and the times, which are never cleared (a scheduler that
        restarted has not tried yet, but the gang was tried)."""
        meta = (seen or {}).get("metadata") or {}
        current = (seen or {}).get("status") or {}
        generation = meta.get("generation")
        generation = generation if isinstance(generation, int) else 0
        start_at = rfc3339(start) if start else str(current.get("scheduleStartTime") or "")
        failed_at = (
            rfc3339(last_failure) if last_failure else str(current.get("lastFailureTime") or "")
        )
        held = dict(reservation) if reservation else None
        signature = (status, generation, waiting, start_at, failed_at, repr(held), expected)
        last = self._group_status.get(key)
        if not force and last is not None and last.signature == signature:
            return
        previous = last.condition if last is not None else find_condition(current, "Scheduled")
        since = transition_time(previous, "True" if status.scheduled else "False", rfc3339())
        want = scheduler_status(
            status,
            generation=generation,
            waiting=waiting,
            start=start_at,
            last_failure=failed_at,
            since=since,
            reservation=held,
            expected=expected,
        )
        if force and seen is not None and says(current, want):
            self._group_status[key] = Reported(
                status, signature, find_condition(current, "Scheduled")
            )
            return
        self._group_status[key] = Reported(status, signature, want["conditions"][0])
        path, body = podgroup_status_path(key), apply_body(key, want)

        def unsent() -> None:  # forget it, so the next report for this gang writes again
            now = self._group_status.get(key)
            if now is not None and now.signature == signature:
                self._group_status.pop(key, None)

        async def write() -> object:
            try:
                return await self._client.apply(path, body, field_manager=SCHEDULER_MANAGER)
            except Exception:
                unsent()
                raise

        # the gang's first Scheduled condition goes before the backlog of updates
        self._outbox.put(
            "podgroup-status",
            write,
            key=("podgroup", key),
            first=previous is None,
            on_drop=unsent,
        )

    @property
    def outbox(self) -> Outbox:
        """Where the reporter's writes queue (other status writers share it)."""
        return self._outbox

    @property
    def dropped(self) -> int:
        """Writes the outbox dropped because the API server could not keep up."""
        return self._outbox.dropped

    def forget_group(self, key: str) -> None:
        self._group_status.pop(key, None)
        self._forecasts.pop(key, None)
