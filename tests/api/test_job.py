"""Jobs as start forecasts read them: the Job that controls a pod, and when a Job is stopped
at the latest."""

from __future__ import annotations

from gangsched.api.job import controller_job, job_deadline
from gangsched.api.pod import pod_from

JOB_REF = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u1", "controller": True}


def test_the_controlling_job_of_a_pod() -> None:
    assert controller_job([JOB_REF]) == "u1"
    assert controller_job([{**JOB_REF, "controller": False}]) == "", "an owner, not the controller"
    assert controller_job([{**JOB_REF, "kind": "ReplicaSet", "apiVersion": "apps/v1"}]) == ""
    assert controller_job("nonsense") == "" and controller_job(None) == ""
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "p1", "ownerReferences": [JOB_REF]},
        "spec": {"containers": [{"name": "c"}]},
    }
    p, _ = pod_from(pod)
    assert p.owner_job == "u1" and p.job_deadline is None


def test_a_jobs_deadline_is_its_start_and_active_deadline() -> None:
    job = {
        "metadata": {"uid": "u1"},
        "spec": {"activeDeadlineSeconds": 600},
        "status": {"startTime": "2026-11-27T10:00:00Z"},
    }
    uid, at = job_deadline(job)
    assert uid == "u1" and at is not None
    assert at - job_deadline({**job, "spec": {"activeDeadlineSeconds": 60}})[1] == 540  # type: ignore[operator]
    assert job_deadline({**job, "status": {}}) == ("u1", None), "not started: nothing yet"
    assert job_deadline({**job, "spec": {}}) == ("u1", None), "no deadline"
    for bad in ("600", True, -1, 0):
        assert job_deadline({**job, "spec": {"activeDeadlineSeconds": bad}})[1] is None
