"""The MPI operator, run with ``--gang-scheduling=gangsched``, sets gangsched as the scheduler of
an MPIJob's launcher and workers and makes a scheduler-plugins PodGroup of them; it makes the
workers' pods itself and the launcher as a Job, whose pod the Job controller makes; gangsched
binds the launcher and the workers whole.

The operator runs as a process beside the dev control plane (the ``mpi_operator`` fixture); kwok
runs the bound pods and finishes the launcher's (a Job's), so the MPIJob succeeds. The second
test shows the pitfall docs/integrations/kubeflow.md names: with ``launcherCreationPolicy:
WaitForWorkersReady`` the default ``minMember`` counts a launcher that comes only once the
workers run, so they wait for ever; ``schedulingPolicy.minAvailable`` = the workers fixes it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.mpi import API_VERSION, MPIOperator

from .conftest import SchedulerProcess
from .kube import (
    PodEvents,
    bound,
    by_label,
    condition,
    create,
    gang_bindings,
    pod,
    pods,
    refused,
    scheduler_plugins_podgroup,
    wait_for,
)

Nodes = Callable[..., dict[str, str]]

PG_LABEL = "scheduling.x-k8s.io/pod-group"
# The operator, then the Job controller (the launcher), then gangsched, then kwok.
STEP_TIMEOUT = 120.0


def mpi_job(
    name: str,
    ns: str,
    selector: Mapping[str, str],
    *,
    workers: int,
    gpus: int,
    launcher_policy: str | None = None,
    min_available: int | None = None,
) -> dict[str, Any]:
    def template(role: str, gpus: int) -> dict[str, Any]:
        spec = pod("template", ns, gpus=gpus, selector=selector)["spec"]
        spec["containers"][0]["name"] = role
        spec.pop("schedulerName")  # the operator sets it
        return {"spec": spec}

    scheduling: dict[str, Any] = {"scheduleTimeoutSeconds": 120}
    if min_available is not None:
        scheduling["minAvailable"] = min_available
    spec: dict[str, Any] = {
        "slotsPerWorker": 1,
        "runPolicy": {"cleanPodPolicy": "Running", "schedulingPolicy": scheduling},
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "template": template("launcher", 0)},
            "Worker": {"replicas": workers, "template": template("worker", gpus)},
        },
    }
    if launcher_policy:
        spec["launcherCreationPolicy"] = launcher_policy
    return {
        "apiVersion": API_VERSION,
        "kind": "MPIJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


group_of = by_label(PG_LABEL)


def succeeded(cp: ControlPlane, ns: str, name: str) -> bool:
    job = cp.kubectl_json("get", "mpijobs.kubeflow.org", name, "-n", ns)
    cond = condition(job, "Succeeded")
    return cond is not None and cond.get("status") == "True"


def test_an_mpijob_is_placed_whole_launcher_and_workers(
    mpi_operator: MPIOperator, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = mpi_operator.cp
    sel = nodes(2, gpus=2)
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    create(cp, mpi_job("pi", ns, sel, workers=4, gpus=1))
    pg = wait_for(
        "the operator's PodGroup", lambda: scheduler_plugins_podgroup(cp, ns, "pi"), STEP_TIMEOUT
    )
    assert pg["spec"]["minMember"] == 5, "4 workers and the launcher"
    made = wait_for(
        "the launcher's and the workers' pods",
        lambda: len(pods(cp, ns)) == 5 and pods(cp, ns),
        STEP_TIMEOUT,
    )
    assert {p["spec"]["schedulerName"] for p in made.values()} == {"gangsched"}
    assert {group_of(p) for p in made.values()} == {"pi"}
    wait_for("the MPIJob to succeed", lambda: succeeded(cp, ns, "pi"), STEP_TIMEOUT)
    wait_for(
        "the watch to see the 5 bindings",
        lambda: sum(len(p) for _, p in gang_bindings(watch, group_of).values()) == 5,
    )
    [(existed, placed)] = gang_bindings(watch, group_of).values()
    assert len(existed) == 5 and placed == existed, (sorted(existed), sorted(placed))


def test_a_launcher_that_waits_for_ready_workers_needs_min_available(
    mpi_operator: MPIOperator, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = mpi_operator.cp
    sel = nodes(2, gpus=2)
    create(cp, mpi_job("late", ns, sel, workers=2, gpus=1, launcher_policy="WaitForWorkersReady"))
    workers = wait_for(
        "the workers' pods", lambda: len(pods(cp, ns)) == 2 and pods(cp, ns), STEP_TIMEOUT
    )
    wait_for(
        "gangsched's reason on the workers: the launcher counts",
        lambda: refused(cp, ns, workers, says="2 of 3 members exist"),
        STEP_TIMEOUT,
    )
    assert not bound(cp, ns), "the workers wait for a launcher that waits for them"

    watch = PodEvents(cp, ns, seconds=int(2 * STEP_TIMEOUT))
    create(
        cp,
        mpi_job(
            "fixed",
            ns,
            sel,
            workers=2,
            gpus=1,
            launcher_policy="WaitForWorkersReady",
            min_available=2,
        ),
    )
    wait_for(
        "the MPIJob with minAvailable 2 to succeed",
        lambda: succeeded(cp, ns, "fixed"),
        STEP_TIMEOUT,
    )
    placed = {n for _, n, node in watch.events() if node and n.startswith("fixed-")}
    assert len(placed) == 3, f"its launcher and 2 workers ran: {sorted(placed)}"
    assert not {n for n in bound(cp, ns) if n.startswith("late-")}, "the other still waits"
