"""JobSet (sigs.k8s.io/jobset) makes the Jobs, the Job controller makes their pods, gangsched
places them: a gangsched PodGroup over a JobSet's replicated Jobs, placed whole, and with
``topologyPlacement.slices`` keyed on JobSet's ``jobset.sigs.k8s.io/job-key`` label, one child
Job per rack.

The JobSet manager runs as a process beside the dev control plane with its webhooks on loopback
(the ``jobset`` fixture, gangsched_dev.devcluster.jobset); kwok runs the bound pods and finishes the
ones a Job owns, so the Jobs and the JobSet complete.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.jobset import API_VERSION, JOB_KEY_LABEL, JOBSET_NAME_LABEL, JobSet

from .conftest import SchedulerProcess
from .kube import (
    PodEvents,
    bound,
    condition,
    create,
    get_pg,
    pod,
    podgroup,
    pods,
    refused,
    wait_for,
)

Nodes = Callable[..., dict[str, str]]

GROUP_LABEL = "gangsched.io/pod-group"
RACK = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
# JobSet, then the Job controller, then gangsched, then kwok: generous, on a shared 2-core host.
STEP_TIMEOUT = 120.0


def jobset_manifest(
    name: str,
    ns: str,
    *,
    group: str,
    selector: Mapping[str, str],
    replicas: int,
    parallelism: int,
    gpus: int,
    scheduler: str = "gangsched",
) -> dict[str, Any]:
    """A JobSet with one replicated Job ``workers``: ``replicas`` Indexed Jobs of
    ``parallelism`` pods each, every pod a member of the gangsched PodGroup ``group``."""
    body = pod("template", ns, group=group, gpus=gpus, selector=selector, scheduler=scheduler)
    spec: dict[str, Any] = {**body["spec"], "restartPolicy": "Never"}
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "backoffLimit": 0,
                            "template": {
                                "metadata": {"labels": body["metadata"]["labels"]},
                                "spec": spec,
                            },
                        }
                    },
                }
            ]
        },
    }


def members(cp: ControlPlane, ns: str, jobset: str, count: int) -> dict[str, dict[str, Any]]:
    """The pods of ``jobset``'s child Jobs, once there are ``count`` of them (else {})."""
    made = {
        n: p
        for n, p in pods(cp, ns).items()
        if (p["metadata"].get("labels") or {}).get(JOBSET_NAME_LABEL) == jobset
    }
    return made if len(made) == count else {}


def jobset_condition(cp: ControlPlane, ns: str, name: str, kind: str) -> bool:
    cond = condition(cp.kubectl_json("get", "jobsets.jobset.x-k8s.io", name, "-n", ns), kind)
    return cond is not None and cond.get("status") == "True"


def pg_phase(cp: ControlPlane, ns: str, name: str) -> str:
    phase: str = (get_pg(cp, ns, name).get("status") or {}).get("phase", "")
    return phase


def finishes(cp: ControlPlane, ns: str, jobset: str, group: str, size: int) -> None:
    """kwok finishes the Jobs' pods: the JobSet reaches Completed, the PodGroup Succeeded."""
    wait_for(
        "the JobSet to reach its Completed condition",
        lambda: jobset_condition(cp, ns, jobset, "Completed"),
        timeout=STEP_TIMEOUT,
    )
    wait_for(
        "the PodGroup to reach Succeeded",
        lambda: pg_phase(cp, ns, group) == "Succeeded",
        timeout=STEP_TIMEOUT,
    )
    status = get_pg(cp, ns, group)["status"]
    assert (status["succeeded"], status["failed"]) == (size, 0)


def test_jobset_gang_binds_whole_and_completes(
    jobset: JobSet, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = jobset.cp
    sel = nodes(2, gpus=4)
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    create(cp, podgroup("train", ns, 8))
    create(
        cp,
        jobset_manifest(
            "train", ns, group="train", selector=sel, replicas=2, parallelism=4, gpus=1
        ),
    )

    made = wait_for(
        "JobSet's two Jobs to create 8 pods",
        lambda: members(cp, ns, "train", 8),
        timeout=STEP_TIMEOUT,
    )
    assert {p["metadata"]["labels"][GROUP_LABEL] for p in made.values()} == {"train"}
    assert len({p["metadata"]["labels"][JOB_KEY_LABEL] for p in made.values()}) == 2
    placed = wait_for(
        "all 8 pods to bind",
        lambda: len(bound(cp, ns)) == 8 and bound(cp, ns),
        timeout=STEP_TIMEOUT,
    )
    assert set(placed) == set(made)

    # The watch, in the API server's order: every member was created before the first bound.
    seen = wait_for(
        "the watch to report the 8 bindings",
        lambda: (e := watch.events()) and {p for _, p, n in e if n} == set(made) and e,
        timeout=STEP_TIMEOUT,
    )
    first_bound = next(i for i, (_, _, node) in enumerate(seen) if node)
    created_before = {p for t, p, _ in seen[:first_bound] if t == "ADDED"}
    assert created_before == set(made), (
        f"a member bound before the 8th existed: {sorted(set(made) - created_before)} came later"
    )

    finishes(cp, ns, "train", "train", 8)


# ------------------------------------------------------------------------- one Job per rack


@pytest.fixture
def rack_scheduler(
    control_plane: ControlPlane, tmp_path: Path
) -> Iterator[tuple[str, SchedulerProcess]]:
    """gangsched with ``topologyLevels: [example.com/rack, kubernetes.io/hostname]``, under a
    scheduler name of its own (the session's gangsched runs with no levels)."""
    name = "gs-rack-" + uuid.uuid4().hex[:6]
    env = {"GANGSCHED_TOPOLOGY_LEVELS": f"{RACK},{HOSTNAME}"}
    proc = SchedulerProcess(
        control_plane, tmp_path / "gangsched.log", "--scheduler-name", name, env=env
    ).start()
    try:
        yield name, proc
    finally:
        proc.stop()


Racks = Callable[[], dict[str, str]]


@pytest.fixture
def two_racks(control_plane: ControlPlane, ns: str) -> Iterator[Racks]:
    """Two racks (``<ns>-a``, ``<ns>-b``) of two KWOK nodes with 4 GPUs each; returns the node
    selector that keeps other tests' pods off them."""
    made: list[str] = []

    def make() -> dict[str, str]:
        for rack in ("a", "b"):
            for i in range(2):
                name = f"{ns}-{rack}{i}"
                labels = {"e2e-test": ns, RACK: f"{ns}-{rack}"}
                control_plane.add_fake_node(name, "16", "64Gi", 4, labels=labels)
                made.append(name)
        return {"e2e-test": ns}

    yield make
    for name in made:
        control_plane.kubectl("delete", "node", name, "--wait=false", check=False)


SLICES = {"topologyPlacement": {"slices": {"podLabel": JOB_KEY_LABEL, "required": RACK}}}


def racks_by_job(
    cp: ControlPlane, ns: str, made: Mapping[str, Mapping[str, Any]]
) -> dict[str, set[str]]:
    """child Job (its job-key label) -> the racks its bound pods are in."""
    rack_of = {
        n["metadata"]["name"]: n["metadata"]["labels"].get(RACK, "")
        for n in cp.kubectl_json("get", "nodes", "-l", f"e2e-test={ns}")["items"]
    }
    out: dict[str, set[str]] = {}
    for name, node in bound(cp, ns).items():
        key = made[name]["metadata"]["labels"][JOB_KEY_LABEL]
        out.setdefault(key, set()).add(rack_of[node])
    return out


def assert_one_job_per_rack(cp: ControlPlane, ns: str, made: Mapping[str, Any]) -> None:
    by_job = racks_by_job(cp, ns, made)
    assert len(by_job) == 2, by_job
    assert all(len(racks) == 1 for racks in by_job.values()), f"a Job spans racks: {by_job}"
    assert set.union(*by_job.values()) == {f"{ns}-a", f"{ns}-b"}, f"Jobs share a rack: {by_job}"


def test_jobset_slices_put_each_child_job_in_its_own_rack(
    jobset: JobSet,
    rack_scheduler: tuple[str, SchedulerProcess],
    ns: str,
    two_racks: Racks,
) -> None:
    cp = jobset.cp
    sched, proc = rack_scheduler
    sel = two_racks()
    create(cp, podgroup("racked", ns, 8, **SLICES))
    create(
        cp,
        jobset_manifest(
            "racked",
            ns,
            group="racked",
            selector=sel,
            replicas=2,
            parallelism=4,
            gpus=2,
            scheduler=sched,
        ),
    )
    made = wait_for(
        "JobSet's two Jobs to create 8 pods",
        lambda: members(cp, ns, "racked", 8),
        timeout=STEP_TIMEOUT,
    )
    wait_for(
        f"all 8 pods to bind\n{proc.tail()}",
        lambda: len(bound(cp, ns)) == 8,
        timeout=STEP_TIMEOUT,
    )
    assert_one_job_per_rack(cp, ns, made)
    finishes(cp, ns, "racked", "racked", 8)


def test_jobset_slices_wait_naming_the_rack_while_a_rack_is_short(
    jobset: JobSet,
    rack_scheduler: tuple[str, SchedulerProcess],
    ns: str,
    two_racks: Racks,
) -> None:
    """One GPU taken on each node of rack b (by pods no scheduler places), and a node in no
    rack: the cluster has 18 GPUs free, rack b 6, and the second Job needs 8 in one rack.
    Nothing binds (not even on the node in no rack) and the PodGroup names the rack level; once
    those pods go, both Jobs bind, one per rack. (Cordoning would not do: the pods tolerate
    every NoSchedule taint, the cordon's included, as kube-scheduler lets them.)"""
    cp = jobset.cp
    sched, proc = rack_scheduler
    sel = two_racks()
    cp.add_fake_node(f"{ns}-loose", "16", "64Gi", 4, labels=dict(sel))
    for i in range(2):
        filler = pod(f"filler-{i}", ns, gpus=1, scheduler="none")
        filler["spec"]["nodeName"] = f"{ns}-b{i}"
        create(cp, filler)
    create(cp, podgroup("racked", ns, 8, **SLICES))
    create(
        cp,
        jobset_manifest(
            "racked",
            ns,
            group="racked",
            selector=sel,
            replicas=2,
            parallelism=4,
            gpus=2,
            scheduler=sched,
        ),
    )
    made = wait_for(
        "JobSet's two Jobs to create 8 pods",
        lambda: members(cp, ns, "racked", 8),
        timeout=STEP_TIMEOUT,
    )
    wait_for(
        f"gangsched to refuse every member\n{proc.tail()}",
        lambda: refused(cp, ns, made, says=RACK),
        timeout=STEP_TIMEOUT,
    )
    waiting = wait_for(
        f"the PodGroup's Scheduled condition to name the rack level\n{proc.tail()}",
        lambda: (
            (c := condition(get_pg(cp, ns, "racked"), "Scheduled"))
            and RACK in c.get("message", "")
            and c
        ),
        timeout=STEP_TIMEOUT,
    )
    assert waiting["status"] == "False"
    assert f"no {RACK} domain has the free capacity" in waiting["message"]
    assert set(bound(cp, ns)) == {"filler-0", "filler-1"}, "no member may bind"

    for i in range(2):
        cp.kubectl("delete", "pod", f"filler-{i}", "-n", ns, "--grace-period=0", "--force")
    wait_for(
        f"all 8 pods to bind once rack b is free\n{proc.tail()}",
        lambda: len(bound(cp, ns)) == 8,
        timeout=STEP_TIMEOUT,
    )
    assert_one_job_per_rack(cp, ns, made)
    assert f"{ns}-loose" not in bound(cp, ns).values()
    cp.kubectl("delete", "node", f"{ns}-loose", "--wait=false")
