"""Jobs (``batch/v1``) as the start forecast reads them: the uid of the Job that controls a
pod, and when a Job is stopped at the latest (``spec.activeDeadlineSeconds`` after its
``status.startTime``: the Job controller then ends its pods), an upper bound on when its pods
end (core/forecast.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched.api.fields import timestamp

__all__ = ["controller_job", "job_deadline"]


def controller_job(refs: object) -> str:
    """The uid of the Job among a pod's ``ownerReferences`` that is its controller, or ''."""
    if not isinstance(refs, list):
        return ""
    for ref in refs:
        if (
            isinstance(ref, Mapping)
            and ref.get("kind") == "Job"
            and str(ref.get("apiVersion", "")).startswith("batch/")
            and ref.get("controller") is True
        ):
            return str(ref.get("uid") or "")
    return ""


def job_deadline(obj: Mapping[str, Any]) -> tuple[str, float | None]:
    """(the Job's uid, when it is stopped at the latest), None when it declares no deadline,
    has not started, or says something unreadable (then there is nothing to rely on)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    uid = str(meta.get("uid") or "")
    seconds = spec.get("activeDeadlineSeconds")
    started = timestamp(status.get("startTime"))
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds <= 0 or not started:
        return uid, None
    return uid, started + float(seconds)
