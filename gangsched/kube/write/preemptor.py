"""Carries out Preempt decisions: the preemptor's pods are nominated, the victims are marked and
deleted.

First each preemptor pod's ``status.nominatedNodeName`` is set (a status patch, as
kube-scheduler does), so that people and tools such as the cluster autoscaler see where the gang
is going. It goes out before any victim is deleted: the gang can bind only once its victims are
gone, and the API server clears the field at the binding, so a nomination never lands on a pod
already bound.

Then the victims are evicted in two phases, each victim as kube-scheduler v1.36's preemption
executor does it for one pod:

1. **mark, every victim first**: its status gets a ``DisruptionTarget`` condition (status
   ``True``, reason ``PreemptionByScheduler``, a message ``<scheduler>: preempting to
   accommodate a higher priority gang <ns>/<name> (priority <p>)``), by a strategic merge
   patch of ``pods/<name>/status`` that carries the victim's UID, so that a pod recreated under
   the same name is never marked. No victim is deleted before every mark is written: the marks
   are the durable record of the decision, and a process that dies (or loses its lease) after
   them leaves the next leader enough to finish the eviction (core/eviction.py);
2. **delete**: each marked victim is deleted with a UID precondition and its own graceful
   termination (no ``gracePeriodSeconds`` in the request): the kubelet stops it as it would on
   any delete;
3. once the delete is accepted, a ``Normal`` event ``Preempted`` (action ``Preempting``) is
   written on it: ``Preempted by gang <ns>/<name> (priority <p>) on node <node>``
   (kube-scheduler's says ``Preempted by pod <uid> on node <node>``). It is written here, in
   the background lane, not through the event recorder's series: those are dropped when their
   pod is deleted, which for a victim is at once.

An :class:`~gangsched.core.decisions.Evict` decision (an eviction decided earlier, carried out
now) goes through the same two phases; victims that carry the mark already keep it.

A victim that is already gone (404) needs nothing more; one whose name now belongs to another
pod (the UID precondition failed) is left alone. Victims are handled concurrently, like the
bindings of a gang.

Every write commits the decision, so every one carries the leader's fence, as bindings do: a
replica no longer sure it leads evicts nothing (:class:`FencedError`, nothing reported). They
go in the client's foreground lane: an eviction never waits behind informational writes.
A write that fails with a retriable error (0, 429, 5xx) is retried with backoff; one that still
fails is reported (``failed``) and the core's hold expires at its deadline as if the victim
never went.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import structlog

from gangsched.core.decisions import Binding, Evict, PodRef, Preempt, Victim
from gangsched.core.gang import PLAIN_PREFIX
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON, ApiError, FenceCheck, FencedError, background_lane
from gangsched.kube.io.times import rfc3339
from gangsched.kube.write import failpoints
from gangsched.kube.write.podwrites import (
    Written,
    all_of,
    delete_options,
    pod_path,
    post_pod_event,
    retried,
    uid_mismatch,
)

__all__ = [
    "CONDITION_REASON",
    "CONDITION_TYPE",
    "EVENT_REASON",
    "Outcome",
    "PreemptResult",
    "Preemptor",
    "VictimResult",
    "preemptor_name",
]

log = structlog.get_logger("gangsched.preemptor")

CONDITION_TYPE = "DisruptionTarget"  # v1.DisruptionTarget
CONDITION_REASON = "PreemptionByScheduler"  # v1.PodReasonPreemptionByScheduler
EVENT_REASON = "Preempted"
EVENT_ACTION = "Preempting"
STRATEGIC = "application/strategic-merge-patch+json"


class Outcome(StrEnum):
    EVICTED = "evicted"  # marked and deleted (deletion accepted: it terminates gracefully)
    GONE = "gone"  # already deleted
    REPLACED = "replaced"  # the name now belongs to another pod: left alone
    FAILED = "failed"  # could not be marked or deleted


_OUTCOME = {
    Written.GONE: Outcome.GONE,
    Written.REPLACED: Outcome.REPLACED,
    Written.FAILED: Outcome.FAILED,
}


@dataclass(frozen=True, slots=True)
class VictimResult:
    victim: Victim
    outcome: Outcome
    message: str = ""


@dataclass(frozen=True, slots=True)
class PreemptResult:
    victims: tuple[VictimResult, ...]
    nominated: int  # preemptor pods whose nominatedNodeName was written


def preemptor_name(d: Preempt) -> str:
    """How messages name the preemptor: ``gang <ns>/<name>``, or ``pod <ns>/<name>`` for a
    pod without a gang."""
    if d.gang.startswith(PLAIN_PREFIX) and len(d.nominations) == 1:
        pod = d.nominations[0].pod
        return f"pod {pod.namespace}/{pod.name}"
    return f"gang {d.gang}"


def _patch_of_another_pod(e: ApiError) -> bool:
    """A patch carrying the victim's UID landed on another pod of that name: it would change
    ``metadata.uid`` (422, ``field is immutable``)."""
    return e.status == 422 and "metadata.uid" in str(e)


def _never(e: ApiError) -> bool:
    return False


class Preemptor:
    def __init__(
        self,
        client: KubeApi,
        *,
        instance: str = "",
        scheduler_name: str = "gangsched",
        fence: FenceCheck | None = None,
        retries: int = 3,
        retry_delay: float = 0.5,
    ) -> None:
        self._client = client
        self._instance = instance or scheduler_name
        self._scheduler = scheduler_name
        self._fence = fence
        self._retries = retries
        self._delay = retry_delay
        self.evicted = 0
        self.failed = 0
        self.fenced = 0  # decisions not (wholly) carried out because the fence said no

    async def preempt(self, d: Preempt) -> PreemptResult:
        """Nominate the preemptor's pods, then evict the victims; raise :class:`FencedError`
        (having reported nothing) when fenced."""
        try:
            return await self._preempt(d)
        except FencedError:
            self.fenced += 1
            log.error("not preempting: no longer sure to lead", gang=d.gang)
            raise

    async def _preempt(self, d: Preempt) -> PreemptResult:
        if self._fence is not None and not self._fence():
            raise FencedError("DELETE", d.gang)
        done = sum(await all_of(self.nominate(b) for b in d.nominations))
        who = preemptor_name(d)
        reason = f"preempting to accommodate a higher priority {who} (priority {d.priority})"
        results = await self._evict_all(
            d.victims, reason, lambda v: f"Preempted by {who} (priority {d.priority})"
        )
        log.info(
            "preempted",
            gang=d.gang,
            priority=d.priority,
            victims=len(d.victims),
            evicted=sum(1 for r in results if r.outcome is Outcome.EVICTED),
            failed=sum(1 for r in results if r.outcome is Outcome.FAILED),
        )
        return PreemptResult(tuple(results), done)

    async def evict(self, d: Evict) -> tuple[VictimResult, ...]:
        """Carry out an eviction decided earlier (marking the victims not marked yet, then
        deleting them all); raise :class:`FencedError` (having reported nothing) when fenced."""
        try:
            if self._fence is not None and not self._fence():
                raise FencedError("DELETE", d.gang)
            results = await self._evict_all(d.victims, d.message, lambda v: d.message)
        except FencedError:
            self.fenced += 1
            log.error("not evicting: no longer sure to lead", gang=d.gang)
            raise
        log.info(
            "eviction carried out",
            gang=d.gang,
            victims=len(d.victims),
            evicted=sum(1 for r in results if r.outcome is Outcome.EVICTED),
            failed=sum(1 for r in results if r.outcome is Outcome.FAILED),
        )
        return tuple(results)

    async def _evict_all(
        self, victims: tuple[Victim, ...], reason: str, note: Callable[[Victim], str]
    ) -> list[VictimResult]:
        """Mark every victim, then delete those marked: none is deleted before every mark is
        written (or has failed), so the marks always record the whole decision."""
        message = f"{self._scheduler}: {reason}"
        marks = await all_of(self._mark(v, message) for v in victims)
        deleting = [v for v, m in zip(victims, marks, strict=True) if m is None]
        deleted = iter(await all_of(self._delete(v, note(v)) for v in deleting))
        return [m if m is not None else next(deleted) for m in marks]

    async def _mark(self, v: Victim, message: str) -> VictimResult | None:
        """The DisruptionTarget condition on the victim: None once it carries it."""
        if v.marked:
            return None
        pod = v.pod
        condition = {
            "type": CONDITION_TYPE,
            "status": "True",
            "reason": CONDITION_REASON,
            "message": message,
            "lastTransitionTime": rfc3339(),
        }
        mark = {"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}}
        outcome = await self._write(
            pod,
            "marking",
            lambda: self._request("PATCH", f"{pod_path(pod)}/status", mark, STRATEGIC),
            _patch_of_another_pod,
        )
        if outcome is not None:
            return self._done(v, *outcome)
        failpoints.reached("evict.marked")
        return None

    async def _delete(self, v: Victim, what: str) -> VictimResult:
        pod = v.pod
        path = pod_path(pod)
        options = delete_options(pod.uid)
        outcome = await self._write(
            pod,
            "deleting",
            lambda: self._request("DELETE", path, options, None),
            uid_mismatch,
        )
        if outcome is not None:
            return self._done(v, *outcome)
        failpoints.reached("evict.deleted")
        note = f"{what} on node {v.node}"
        with background_lane():
            written = await self._write(
                pod, "recording an event on", lambda: self._event(pod, note), _never
            )
        if written is not None and written[0] is Outcome.FAILED:
            log.warning("could not record the Preempted event", error=written[1])
        return self._done(v, Outcome.EVICTED, "")

    async def _event(self, pod: PodRef, note: str) -> JSON:
        return await post_pod_event(
            self._client,
            pod,
            kind="Normal",
            reason=EVENT_REASON,
            action=EVENT_ACTION,
            note=note,
            instance=self._instance,
        )

    def _done(self, v: Victim, outcome: Outcome, message: str) -> VictimResult:
        if outcome is Outcome.EVICTED:
            self.evicted += 1
        elif outcome is Outcome.FAILED:
            self.failed += 1
            log.warning(
                "preemption failed",
                victim=f"{v.pod.namespace}/{v.pod.name}",
                node=v.node,
                error=message,
            )
        return VictimResult(v, outcome, message)

    async def _request(
        self, method: str, path: str, body: object, content_type: str | None
    ) -> JSON:
        return await self._client.request(
            method, path, body=body, content_type=content_type, fence=self._fence
        )

    async def _write(
        self,
        pod: PodRef,
        what: str,
        call: Callable[[], Awaitable[Any]],
        replaced: Callable[[ApiError], bool],
    ) -> tuple[Outcome, str] | None:
        """One write about ``pod`` (podwrites.retried): None when it was done, else the
        outcome: gone (404), replaced (``replaced`` says the write found another pod under the
        name), failed."""
        written, message = await retried(
            call,
            what=f"{what} {pod.namespace}/{pod.name}",
            retries=self._retries,
            delay=self._delay,
            replaced=replaced,
        )
        if written is Written.DONE:
            return None
        return _OUTCOME[written], message

    async def nominate(self, b: Binding) -> int:
        """Set ``status.nominatedNodeName`` of a preemptor pod: 1 when written, 0 when the pod
        is gone or replaced, or the write failed (it only informs)."""
        return await self._nominated_node(b.pod, b.node)

    async def clear_nomination(self, pod: PodRef) -> int:
        """Clear ``status.nominatedNodeName`` (the hold was given back)."""
        return await self._nominated_node(pod, None)

    async def _nominated_node(self, pod: PodRef, node: str | None) -> int:
        body = {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node}}
        path = f"{pod_path(pod)}/status"
        outcome = await self._write(
            pod,
            "nominating",
            lambda: self._request("PATCH", path, body, STRATEGIC),
            _patch_of_another_pod,
        )
        if outcome is None:
            return 1
        if outcome[0] is Outcome.FAILED:
            log.warning("could not write nominatedNodeName", error=outcome[1])
        return 0
