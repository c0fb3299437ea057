"""Writes about one pod that the scheduler makes outside binding: evicting a preemption victim
(preemptor.py) and deleting a member to restart its gang (restarter.py).

Both delete a pod as kube-scheduler does, with its UID as a precondition (a pod recreated
under the same name is never deleted) and its own graceful termination, retry retriable
errors (0, 429, 5xx) with backoff, and then write an event on the pod directly (the event
recorder's series are dropped as soon as their pod is deleted, which here is at once).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum
from typing import Any, TypeVar

from gangsched.api import labels as lbl
from gangsched.core.decisions import PodRef
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON, ApiError
from gangsched.kube.io.times import rfc3339

__all__ = ["Written", "all_of", "delete_options", "pod_path", "post_pod_event", "retried"]

T = TypeVar("T")

REPORTING_CONTROLLER = f"{lbl.GROUP}/gangsched"  # as the reporter's events say


class Written(StrEnum):
    DONE = "done"
    GONE = "gone"  # 404: the pod is already deleted
    REPLACED = "replaced"  # the write found another pod under the name: left alone
    FAILED = "failed"  # not retriable, or still failing after the retries


async def all_of(writes: Iterable[Awaitable[T]]) -> list[T]:
    """Run writes concurrently and let every one finish; then their results, or the first
    exception (a fence that said no) once none is left half-done."""
    outcomes = await asyncio.gather(*writes, return_exceptions=True)
    results: list[T] = []
    for o in outcomes:
        if isinstance(o, BaseException):
            raise o
        results.append(o)
    return results


def pod_path(pod: PodRef) -> str:
    return f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}"


def delete_options(uid: str) -> JSON:
    """A delete of exactly this pod, with its own grace period."""
    return {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}


def uid_mismatch(e: ApiError) -> bool:
    """A delete's UID precondition failed: 409 is the only conflict it can get."""
    return e.status == 409


async def retried(
    call: Callable[[], Awaitable[Any]],
    *,
    what: str,
    retries: int,
    delay: float,
    replaced: Callable[[ApiError], bool] = uid_mismatch,
) -> tuple[Written, str]:
    """Make one write, retrying retriable errors with a doubling delay: (outcome, message)."""
    for attempt in range(retries + 1):
        try:
            await call()
            return Written.DONE, ""
        except ApiError as e:
            if e.status == 404:
                return Written.GONE, str(e)
            if replaced(e):
                return Written.REPLACED, str(e)
            if not e.retriable or attempt == retries:
                return Written.FAILED, f"{what}: {e}"
            await asyncio.sleep(delay)
            delay *= 2
    raise AssertionError("unreachable")  # pragma: no cover - the loop always returns


async def post_pod_event(
    client: KubeApi,
    pod: PodRef,
    *,
    kind: str,
    reason: str,
    action: str,
    note: str,
    instance: str,
) -> JSON:
    """Write one events.k8s.io/v1 Event about ``pod`` (``kind``: Normal or Warning)."""
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{pod.name}.{time.time_ns():x}", "namespace": pod.namespace},
        "eventTime": rfc3339(time.time(), micro=True),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance,
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
    return await client.post(f"/apis/events.k8s.io/v1/namespaces/{pod.namespace}/events", body)
