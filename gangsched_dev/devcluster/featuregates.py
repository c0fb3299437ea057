"""What the dev control plane's kube-apiserver is told to serve beyond its defaults, by version.

The upstream gang API (``scheduling.k8s.io`` Workload and PodGroup, KEP-4671) is off by default
in every release that has it:

- Kubernetes 1.35 and 1.36 serve it as ``v1alpha2`` (1.35: ``v1alpha1``) behind the alpha feature
  gates ``GenericWorkload`` (the API and the pod's ``spec.schedulingGroup``) and
  ``GangScheduling`` (kube-scheduler's gang plugin); ``TopologyAwareWorkloadScheduling`` (1.36)
  adds ``spec.schedulingConstraints.topology``;
- Kubernetes 1.37 serves it as ``v1beta1``: ``GangScheduling`` is merged into
  ``GenericWorkload`` (beta, still off by default) and no longer exists, so naming it would stop
  kube-apiserver from starting.

A beta or alpha API version is served only when ``--runtime-config`` asks for it.

DeviceTaintRules (``resource.k8s.io/v1beta2``, Dynamic Resource Allocation) are off by default
in 1.36 (the gate ``DRADeviceTaintRules`` is beta, off, as its API version is): the 1.36 dev
control plane serves them, so that the scheduler's handling of them can be tried.

kube-controller-manager's Job controller creates a Workload and a PodGroup for a Job and makes
its pods join it when it runs with the gate ``WorkloadWithJob`` (alpha in 1.36 and 1.37):
:func:`controller_manager_args`, off unless asked for, since such a Job's pods then join that
PodGroup too. In 1.36 it does so for an indexed Job whose ``parallelism`` equals its
``completions`` (> 1) and whose pod template names no ``schedulingGroup``: a gang of
``minCount`` = ``parallelism``. In 1.37 the Job says what it wants in ``spec.scheduling``
(``schedulingPolicy: {gang: {}}``: a gang of ``parallelism``; default ``basic``), a field the API
server keeps only with ``WorkloadWithJob`` on, which it therefore gets too (on 1.36 the gate
only adds the JobValidation admission check, which refuses a change of a gang Job's
``parallelism``).
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

__all__ = ["apiserver_args", "controller_manager_args", "server_version"]

_VERSION = re.compile(r"v(\d+)\.(\d+)")


@cache
def server_version(binary: Path) -> tuple[int, int] | None:
    """(major, minor) from ``kube-apiserver --version``; None when it cannot be told."""
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = _VERSION.search(out)
    return (int(m.group(1)), int(m.group(2))) if m else None


def apiserver_args(version: tuple[int, int] | None) -> list[str]:
    """The feature gates and API versions the upstream gang API needs on this version."""
    if version is None or version < (1, 36):
        return []
    if version < (1, 37):
        return [
            "--feature-gates=GenericWorkload=true,GangScheduling=true,"
            "TopologyAwareWorkloadScheduling=true,WorkloadWithJob=true,DRADeviceTaintRules=true",
            "--runtime-config=scheduling.k8s.io/v1alpha2=true,resource.k8s.io/v1beta2=true",
        ]
    return [
        "--feature-gates=GenericWorkload=true,TopologyAwareWorkloadScheduling=true,"
        "WorkloadWithJob=true",
        "--runtime-config=scheduling.k8s.io/v1beta1=true",
    ]


def controller_manager_args(version: tuple[int, int] | None) -> list[str]:
    """kube-controller-manager's gates for the Job controller to make the upstream Workload and
    PodGroup of an indexed Job (none before 1.36)."""
    if version is None or version < (1, 36):
        return []
    return ["--feature-gates=GenericWorkload=true,WorkloadWithJob=true"]
