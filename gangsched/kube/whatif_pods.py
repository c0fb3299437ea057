"""The pods a Job or a JobSet would have, for ``kubectl gang what-if``: what their controllers
would create from the templates, so that the scheduler's core can be asked about them before
anything is submitted.

A Job (``batch/v1``) gives ``parallelism`` pods (default 1, at most ``completions``) from
``spec.template``, with the labels the Job controller adds (``batch.kubernetes.io/job-name``,
``job-name``; for an Indexed Job the completion index as a label and an annotation) and the
Job as their controller. A JobSet (``jobset.x-k8s.io``) gives, for each replicated job, its
``replicas`` Jobs (named ``<jobset>-<replicated job>-<index>``), each with the labels the
JobSet controller adds (``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``,
``job-index``, ``job-key``), then their pods as above. Other objects pass through unchanged.

JobSet's ``dependsOn`` and a suspended Job are not followed: every pod is counted as created
at once, which :func:`expand` reports.
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["expand"]

JSON = dict[str, Any]

JOB_NAME = "batch.kubernetes.io/job-name"
LEGACY_JOB_NAME = "job-name"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
JOB_KEY = "jobset.sigs.k8s.io/job-key"


def _count(spec: Mapping[str, Any]) -> int:
    parallelism = int(spec.get("parallelism", 1))
    completions = spec.get("completions")
    return max(0, min(parallelism, int(completions)) if completions is not None else parallelism)


def _job_pods(job: Mapping[str, Any], ns: str, extra_labels: Mapping[str, str]) -> list[JSON]:
    meta = job.get("metadata") or {}
    name = str(meta.get("name", ""))
    spec = job.get("spec") or {}
    template = spec.get("template") or {}
    indexed = spec.get("completionMode") == "Indexed"
    pods = []
    for i in range(_count(spec)):
        tmeta = copy.deepcopy(template.get("metadata") or {})
        labels = {**(tmeta.get("labels") or {}), **extra_labels}
        labels[JOB_NAME] = labels[LEGACY_JOB_NAME] = name
        annotations = dict(tmeta.get("annotations") or {})
        if indexed:
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(i)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": meta.get("namespace") or ns,
                    "labels": labels,
                    "annotations": annotations,
                    "ownerReferences": [
                        {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "name": name,
                            "uid": f"what-if-job-{name}",
                            "controller": True,
                        }
                    ],
                },
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
        )
    return pods


def _jobset_pods(jobset: Mapping[str, Any], ns: str) -> list[JSON]:
    meta = jobset.get("metadata") or {}
    name = str(meta.get("name", ""))
    namespace = str(meta.get("namespace") or ns)
    pods: list[JSON] = []
    for rj in (jobset.get("spec") or {}).get("replicatedJobs") or []:
        rj_name = str(rj.get("name", ""))
        for j in range(int(rj.get("replicas", 1))):
            job_name = f"{name}-{rj_name}-{j}"
            labels = {
                JOBSET_NAME: name,
                REPLICATED_JOB: rj_name,
                JOB_INDEX: str(j),
                JOB_KEY: hashlib.sha1(f"{namespace}/{job_name}".encode()).hexdigest(),
            }
            job = {
                "metadata": {"name": job_name, "namespace": namespace},
                "spec": (rj.get("template") or {}).get("spec") or {},
            }
            pods.extend(_job_pods(job, namespace, labels))
    return pods


def expand(objs: Sequence[Mapping[str, Any]], ns: str) -> tuple[list[JSON], list[str]]:
    """(``objs`` with every Job and JobSet replaced by the pods it would have, notes for the
    verdict)."""
    out: list[JSON] = []
    notes: list[str] = []
    for obj in objs:
        kind, api = obj.get("kind"), str(obj.get("apiVersion", ""))
        if kind == "Job" and api.startswith("batch/"):
            pods = _job_pods(obj, ns, {})
        elif kind == "JobSet" and api.startswith("jobset.x-k8s.io/"):
            pods = _jobset_pods(obj, ns)
            if any(rj.get("dependsOn") for rj in obj.get("spec", {}).get("replicatedJobs", [])):
                notes.append(
                    "JobSet dependsOn is not followed: every Job's pods are counted as created "
                    "at once"
                )
        else:
            out.append(dict(obj))
            continue
        name = (obj.get("metadata") or {}).get("name", "")
        notes.append(f"{kind} {name}: {len(pods)} pod(s) from its template")
        out.extend(pods)
    return out, notes
