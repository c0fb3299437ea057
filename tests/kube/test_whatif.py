"""``kubectl gang what-if`` on the fake API server: the verdict (fits, where, or why not and
when it is expected to start) from the production core on what the reads return, and not one
write."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.kube.whatif import ReadOnly, WriteRefusedError, render_verdict, what_if
from gangsched.settings import Settings
from tests.kube.test_service import NODES, PODGROUPS, PODS, members, node, pod, podgroup
from tests.support.fakekube import FakeKube


def cluster() -> FakeKube:
    """n0 and n1 of 8 GPUs; ml/busy runs on n0 with all of its GPUs, declaring nothing."""
    kube = FakeKube()
    kube.seed(NODES, node("n0", gpus=8), node("n1", gpus=8))
    busy = pod("busy", gpus=8)
    busy["spec"]["nodeName"] = "n0"
    busy["status"] = {"phase": "Running"}
    kube.seed(PODS, busy)
    return kube


def gang(gpus: int) -> list[dict[str, Any]]:
    objs = [podgroup("train", 2), *members("train", 2, gpus=gpus)]
    for obj in objs:
        obj["kind"] = obj.get("kind") or "Pod"
        obj["metadata"].pop("namespace", None)  # as a user writes them: -n gives it
    return objs


def _settings() -> Settings:
    return Settings.model_validate({})


async def test_a_gang_that_fits_is_placed_where_the_scheduler_would_and_nothing_is_written() -> (
    None
):
    kube = cluster()
    v = await what_if(kube, _settings(), gang(gpus=4), "ml")  # type: ignore[arg-type]
    assert v.gang == "ml/train" and v.fits
    assert {n: sorted(p) for n, p in v.nodes.items()} == {"n1": ["train-0", "train-1"]}
    assert v.victims == [] and v.expected is None
    assert {r.verb for r in kube.requests} <= {"list", "get"}, "what-if only reads"
    assert kube.list_objects(PODS)[-1]["metadata"]["name"] == "busy", "the gang is not created"
    text = render_verdict(v)
    assert "fits now: yes, on 1 node(s)" in text and "n1: train-0, train-1" in text


async def test_a_gang_that_does_not_fit_says_why_and_what_it_waits_for() -> None:
    kube = cluster()
    v = await what_if(kube, _settings(), gang(gpus=8), "ml")  # type: ignore[arg-type]
    assert not v.fits and v.nodes == {}
    assert "needs 16 nvidia.com/gpu" in v.reason
    assert v.expected is not None and v.expected.at is None
    assert v.expected.blockers == ("ml/busy",)
    text = render_verdict(v)
    assert "fits now: no" in text
    assert "expected start: unknown, waits for ml/busy, which declared no end" in text
    assert {r.verb for r in kube.requests} <= {"list", "get"}


async def test_what_if_needs_a_podgroup_and_its_pods() -> None:
    with pytest.raises(ValueError, match="a PodGroup and its pods"):
        await what_if(cluster(), _settings(), gang(gpus=1)[1:], "ml")  # type: ignore[arg-type]


async def test_the_read_only_client_refuses_every_write() -> None:
    ro = ReadOnly(cluster())  # type: ignore[arg-type]
    for write in (
        ro.post("/api/v1/namespaces/ml/pods", {}),
        ro.merge_patch("/api/v1/namespaces/ml/pods/a", {}),
        ro.strategic_patch("/api/v1/namespaces/ml/pods/a", {}),
        ro.apply("/api/v1/namespaces/ml/pods/a", {}, field_manager="x"),
        ro.request("DELETE", "/api/v1/namespaces/ml/pods/a"),
    ):
        with pytest.raises(WriteRefusedError):
            await write


def job_gang(gpus: int, kind: str) -> list[dict[str, Any]]:
    """The PodGroup ``train`` of 4 and a Job (or a JobSet of two Jobs) whose template makes
    its members."""
    template = members("train", 1, gpus=gpus)[0]
    template_meta = {"labels": template["metadata"]["labels"]}
    job_spec: dict[str, Any] = {
        "parallelism": 4 if kind == "Job" else 2,
        "completions": 4 if kind == "Job" else 2,
        "completionMode": "Indexed",
        "template": {"metadata": template_meta, "spec": template["spec"]},
    }
    if kind == "Job":
        workload = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "train"}}
        workload["spec"] = job_spec
    else:
        workload = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "train"},
            "spec": {
                "replicatedJobs": [
                    {"name": "workers", "replicas": 2, "template": {"spec": job_spec}}
                ]
            },
        }
    pg = podgroup("train", 4)
    pg["metadata"].pop("namespace", None)
    return [pg, workload]


@pytest.mark.parametrize("kind", ["Job", "JobSet"])
async def test_a_job_or_jobset_stands_for_the_pods_its_controller_would_make(kind: str) -> None:
    kube = cluster()
    v = await what_if(kube, _settings(), job_gang(2, kind), "ml")  # type: ignore[arg-type]
    assert v.fits, v.reason
    placed = sorted(p for pods in v.nodes.values() for p in pods)
    expected = (
        ["train-0", "train-1", "train-2", "train-3"]
        if kind == "Job"
        else ["train-workers-0-0", "train-workers-0-1", "train-workers-1-0", "train-workers-1-1"]
    )
    assert placed == expected and set(v.nodes) == {"n1"}
    assert f"{kind} train: 4 pod(s) from its template" in v.notes
    assert {r.verb for r in kube.requests} <= {"list", "get"}
    v = await what_if(cluster(), _settings(), job_gang(4, kind), "ml")  # type: ignore[arg-type]
    assert not v.fits and "needs 16 nvidia.com/gpu" in v.reason


async def test_the_pods_priority_class_is_resolved_as_the_api_server_would() -> None:
    """A pod of the file names a PriorityClass and says no priority (the API server's admission
    would set it): what-if gives it the class's value, so the gang preempts as it will."""
    kube = cluster()
    kube.seed(
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "high"}, "value": 1000},
        {"metadata": {"name": "low"}, "value": 0, "globalDefault": True},
    )
    objs = gang(gpus=8)
    for obj in objs[1:]:
        obj["spec"]["priorityClassName"] = "high"
    v = await what_if(kube, _settings(), objs, "ml")  # type: ignore[arg-type]
    assert not v.fits and v.victims == [("ml/busy", "")], v
    for obj in objs[1:]:
        assert "priority" not in obj["spec"], "the user's objects are left as they were"
    for obj in objs[1:]:
        obj["spec"]["priorityClassName"] = "missing"
    with pytest.raises(ValueError, match="no PriorityClass 'missing'"):
        await what_if(cluster(), _settings(), objs, "ml")  # type: ignore[arg-type]


async def test_a_waiting_gang_that_preempts_first_is_named_with_its_victims() -> None:
    """A gang of a higher priority waits in the cluster and could evict ml/busy: the scheduler
    tries it first, so what-if does, and says so (it is placed first, and ml/busy is evicted
    for it), then answers for the asked gang on what is left."""
    kube = cluster()
    kube.seed(PODGROUPS, podgroup("hi", 2))
    hi = members("hi", 2, gpus=8)
    for p in hi:
        p["spec"]["priority"] = 1000
        p["status"] = {"phase": "Pending"}
    kube.seed(PODS, *hi)
    v = await what_if(kube, _settings(), gang(gpus=1), "ml")  # type: ignore[arg-type]
    assert v.ahead == ["ml/hi"]
    assert v.ahead_victims == [("ml/busy", "", "ml/hi")]
    assert not v.fits and v.victims == []
    text = render_verdict(v)
    assert "placed first (ahead in the queue): ml/hi" in text
    assert "evicted first, for gangs ahead in the queue: 1 pod(s)\n  ml/busy, for ml/hi" in text
