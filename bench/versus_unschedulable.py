"""The probe of the ``kai-unschedulable`` workload (bench/versus.py): once the scheduler has
filled the cluster, how long until a job that cannot fit is reported unschedulable.

KAI's scale test ("measure time for reclaim to fail on distributed job last pod") creates a
10-pod, 80-GPU job ten times, one after another, and takes the time from the PodGroup's
creation to its ``UnschedulableOnNodePool`` scheduling condition (both in the API server's
whole seconds); its published average is 249.5 s. Here each sample is timed by the benchmark's
own clock, from just before the job's first object is created to the first poll (every
``POLL_S``) that sees the report:

- KAI: its PodGroup's ``status.schedulingConditions`` has ``UnschedulableOnNodePool``;
- every other scheduler: each of the job's pods has ``PodScheduled=False`` with the reason it
  cannot be placed (kube-scheduler and gangsched write it on a pod they could not place;
  neither writes a scheduler-plugins PodGroup's status); a wait for the gang's other members,
  which gangsched reports while the job's pods are still being created, does not count.

The first pod's report and the API server's own whole-second figure (KAI's way) are recorded
beside it. A sample in which a pod of the job gets bound says so (the job cannot fit: a
binding means the filler pods were not what the workload made them). The job is deleted, and
its pods waited for until gone, before the next sample.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from datetime import datetime
from typing import Any, Final

from versus_api import Api
from versus_workload import (
    JOB_LABEL,
    JOB_PODS,
    KAI_API,
    KAI_QUEUE,
    NAMESPACE,
    POD_PATH,
    PODGROUP_PATH,
    Workload,
)

__all__ = ["probe_unschedulable"]

POLL_S: Final = 0.1
GONE_S: Final = 120.0
KAI_CONDITION: Final = "UnschedulableOnNodePool"
# what a pod's PodScheduled=False message starts with while its gang is incomplete
WAITING_FOR_MEMBERS: Final = ("WaitingForMembers:", "pre-filter pod")


def _time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _pod_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    """A pod's ``PodScheduled=False`` condition, if it has one and it is not a wait for the
    gang's other members (which gangsched and Coscheduling report while the job's pods are
    still being created)."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            message = str(c.get("message") or "")
            if message.startswith(WAITING_FOR_MEMBERS):
                return None
            return dict(c)
    return None


def _kai_condition(group: dict[str, Any]) -> dict[str, Any] | None:
    for c in (group.get("status") or {}).get("schedulingConditions") or []:
        if c.get("type") == KAI_CONDITION:
            return dict(c)
    return None


async def _set_kai_quota(api: Api, gpus: int) -> None:
    """The fillers' queue's GPU quota (KAI's test sets it once the cluster is full)."""
    path = f"{KAI_API}/v2/queues/{KAI_QUEUE}"
    _, queue = await api.call("GET", path)
    queue["spec"]["resources"]["gpu"]["quota"] = gpus
    await api.call("PUT", path, queue)


async def _delete_job(api: Api, name: str, peer: str) -> None:
    selector = {"labelSelector": f"{JOB_LABEL}={name}"}
    for pod in await api.list_all(POD_PATH, selector):
        await api.call(
            "DELETE",
            f"{POD_PATH}/{pod['metadata']['name']}",
            {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0},
            ok=(200, 202, 404),
        )
    group_path = (
        f"{KAI_API}/v2alpha2/namespaces/{NAMESPACE}/podgroups" if peer == "kai" else PODGROUP_PATH
    )
    await api.call("DELETE", f"{group_path}/{name}", ok=(200, 202, 404))
    deadline = time.monotonic() + GONE_S
    while await api.list_all(POD_PATH, selector):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the pods of {name} still there {GONE_S:g} s after deletion")
        await asyncio.sleep(0.2)


async def _sample(
    api: Api, w: Workload, name: str, scheduler_name: str, peer: str, timeout: float
) -> dict[str, Any]:
    objects = list(w.job_objects(name, scheduler_name, peer))
    group_path, group = objects[0]
    t0 = time.monotonic()
    _, created = await api.call("POST", group_path, group, ok=(201,))
    created_at = _time(created["metadata"].get("creationTimestamp"))
    await asyncio.gather(*(api.call("POST", p, o, ok=(201,)) for p, o in objects[1:]))
    selector = {"labelSelector": f"{JOB_LABEL}={name}"}
    first_pod: float | None = None
    all_pods: float | None = None
    group_s: float | None = None
    bound = 0
    server_s: float | None = None
    message = ""
    while True:
        elapsed = time.monotonic() - t0
        pods = await api.list_all(POD_PATH, selector)
        conditions = [c for p in pods if (c := _pod_condition(p)) is not None]
        bound = sum(1 for p in pods if (p.get("spec") or {}).get("nodeName"))
        if conditions and first_pod is None:
            first_pod = elapsed
            if peer != "kai":
                message = str(conditions[0].get("message") or "")
        if len(conditions) >= JOB_PODS and all_pods is None:
            all_pods = elapsed
            stamps = [t for c in conditions if (t := _time(c.get("lastTransitionTime")))]
            if peer != "kai" and stamps and created_at is not None:
                server_s = max(stamps) - created_at
        if peer == "kai" and group_s is None:
            _, current = await api.call("GET", f"{group_path}/{name}")
            condition = _kai_condition(current)
            if condition is not None:
                group_s = elapsed
                message = str(condition.get("message") or "")
                at = _time(condition.get("lastTransitionTime"))
                if at is not None and created_at is not None:
                    server_s = at - created_at
        reported = group_s if peer == "kai" else all_pods
        if reported is not None or bound or elapsed >= timeout:
            break
        await asyncio.sleep(POLL_S)
    return {
        "job": name,
        "seconds_to_unschedulable": None if reported is None else round(reported, 2),
        "seconds_to_first_pod_reported": None if first_pod is None else round(first_pod, 2),
        "seconds_to_every_pod_reported": None if all_pods is None else round(all_pods, 2),
        "seconds_by_apiserver_clock": None if server_s is None else round(server_s, 0),
        "pods_bound": bound,
        "timed_out": reported is None and not bound,
        "message": message[:400],
    }


async def probe_unschedulable(
    api: Api, w: Workload, scheduler_name: str, peer: str, samples: int, timeout: float
) -> dict[str, Any]:
    """``samples`` jobs that cannot fit, one at a time; the run record's fields for them."""
    results: list[dict[str, Any]] = []
    error = ""
    try:
        if peer == "kai":
            await _set_kai_quota(api, w.kai_filler_quota())
        for s in range(samples):
            name = f"unschedulable-{s:02d}"
            results.append(await _sample(api, w, name, scheduler_name, peer, timeout))
            await _delete_job(api, name, peer)
    except Exception as e:  # the fill's figures stand; say what broke the probe
        error = f"{type(e).__name__}: {e}"
    times = [t for r in results if (t := r["seconds_to_unschedulable"]) is not None]
    return {
        "unschedulable_samples": results,
        "unschedulable_seconds_mean": round(statistics.fmean(times), 2) if times else None,
        "unschedulable_reported": f"{len(times)}/{samples}",
        "unschedulable_probe_error": error,
        "unschedulable_report": (
            f"KAI PodGroup condition {KAI_CONDITION}"
            if peer == "kai"
            else f"PodScheduled=False on all {JOB_PODS} pods"
        ),
    }
