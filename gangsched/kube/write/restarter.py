"""Carries out the ``RestartGang`` policy of a ``MemberLoss`` decision: the members the core
lists in ``restart`` are deleted, so that their controller recreates them and the gang is
scheduled again whole (core/lifecycle.py has the rule).

Each member is deleted as a preemption victim is (preemptor.py), as kube-scheduler deletes one:
with its UID as a precondition (a pod recreated under the same name is never deleted) and its
own graceful termination (no ``gracePeriodSeconds`` in the request: the kubelet stops it as on
any delete). Once the delete is accepted a ``Warning`` event ``GangRestart`` is written on the
pod, directly and in the background lane, not through the event recorder's series (those are
dropped when their pod is deleted, which here is at once).

A member already gone (404) needs nothing more; one whose name now belongs to another pod (the
UID precondition failed: 409) is left alone. A retriable error (0, 429, 5xx) is retried with
backoff; a delete that still fails is reported (``FAILED``) so that the service tells the core
(``Scheduler.delete_failed``): the member counts as the watch shows it again. Every delete
commits the decision and carries the leader's fence, as bindings do.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import structlog

from gangsched.core.decisions import MemberLoss, PodRef
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import ApiError, FenceCheck, FencedError, background_lane
from gangsched.kube.write.podwrites import (
    Written,
    all_of,
    delete_options,
    pod_path,
    post_pod_event,
    retried,
)

__all__ = ["EVENT_REASON", "LOST_REASON", "Deleted", "GangRestarter", "RestartResult"]

log = structlog.get_logger("gangsched.restarter")

LOST_REASON = "GangMembersLost"  # the event on every remaining member (service.py)
EVENT_REASON = "GangRestart"  # the event on each member deleted to restart its gang
EVENT_ACTION = "Deleting"


class Deleted(StrEnum):
    DELETED = "deleted"  # deletion accepted: it terminates gracefully
    GONE = "gone"  # already deleted
    REPLACED = "replaced"  # the name now belongs to another pod: left alone
    FAILED = "failed"  # could not be deleted


@dataclass(frozen=True, slots=True)
class RestartResult:
    pod: PodRef
    outcome: Deleted
    message: str = ""


class GangRestarter:
    def __init__(
        self,
        client: KubeApi,
        *,
        instance: str = "gangsched",
        fence: FenceCheck | None = None,
        retries: int = 3,
        retry_delay: float = 0.5,
    ) -> None:
        self._client = client
        self._instance = instance
        self._fence = fence
        self._retries = retries
        self._delay = retry_delay
        self.deleted = 0
        self.failed = 0

    async def restart(self, d: MemberLoss) -> list[RestartResult]:
        """Delete every member in ``d.restart`` (concurrently); raise :class:`FencedError`
        (having deleted nothing more) when no longer sure to lead."""
        if self._fence is not None and not self._fence():
            raise FencedError("DELETE", d.gang)
        results = await all_of(self._delete(p, d) for p in d.restart)
        log.info(
            "restarting gang",
            gang=d.gang,
            deleted=sum(1 for r in results if r.outcome is Deleted.DELETED),
            failed=sum(1 for r in results if r.outcome is Deleted.FAILED),
        )
        return results

    async def _delete(self, pod: PodRef, d: MemberLoss) -> RestartResult:
        name = f"{pod.namespace}/{pod.name}"
        written, message = await retried(
            lambda: self._client.request(
                "DELETE", pod_path(pod), body=delete_options(pod.uid), fence=self._fence
            ),
            what=f"deleting {name}",
            retries=self._retries,
            delay=self._delay,
        )
        if written is Written.GONE:
            return RestartResult(pod, Deleted.GONE, message)
        if written is Written.REPLACED:
            return RestartResult(pod, Deleted.REPLACED, message)
        if written is Written.FAILED:
            self.failed += 1
            log.warning("could not delete a member to restart its gang", error=message)
            return RestartResult(pod, Deleted.FAILED, message)
        self.deleted += 1
        note = f"Deleted to restart gang {d.gang} (onMemberLoss RestartGang): {d.message}"
        try:
            with background_lane():
                await post_pod_event(
                    self._client,
                    pod,
                    kind="Warning",
                    reason=EVENT_REASON,
                    action=EVENT_ACTION,
                    note=note,
                    instance=self._instance,
                )
        except ApiError as e:
            log.warning("could not record the GangRestart event", error=str(e))
        return RestartResult(pod, Deleted.DELETED)
