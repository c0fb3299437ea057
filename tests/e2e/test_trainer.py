"""Kubeflow Trainer v2 makes a JobSet of a TrainJob and, when its runtime's ``podGroupPolicy``
asks for ``coscheduling``, a scheduler-plugins PodGroup of every pod of the job; the JobSet
manager makes the Jobs, the Job controller the pods, gangsched binds them whole.

The Trainer and JobSet managers run as processes beside the dev control plane with their
webhooks on loopback (the ``trainer`` fixture); kwok runs the bound pods and finishes them, so
the TrainJob completes. The second test shows the pitfall docs/integrations/kubeflow.md names:
a runtime whose trainer nodes wait for an initializer cannot be gang scheduled whole.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.trainer import API_VERSION, Trainer

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
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
# Trainer, then JobSet, then the Job controller, then gangsched, then kwok.
STEP_TIMEOUT = 120.0


def replicated_job(
    name: str, ns: str, selector: Mapping[str, str], step: str, gpus: int
) -> dict[str, Any]:
    spec = pod("template", ns, gpus=gpus, selector=selector)["spec"]
    spec["containers"][0]["name"] = "node" if step == "trainer" else step
    spec["restartPolicy"] = "Never"
    return {
        "name": name,
        "template": {
            "metadata": {"labels": {ANCESTOR: step}},
            "spec": {"template": {"spec": spec}},
        },
    }


def runtime(name: str, ns: str, jobs: list[dict[str, Any]], timeout: int = 120) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainingRuntime",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "podGroupPolicy": {"coscheduling": {"scheduleTimeoutSeconds": timeout}},
            "template": {"spec": {"replicatedJobs": jobs}},
        },
    }


def train_job(name: str, ns: str, runtime_name: str, nodes: int, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "runtimeRef": {
                "apiGroup": "trainer.kubeflow.org",
                "kind": "TrainingRuntime",
                "name": runtime_name,
            },
            "trainer": {
                "numNodes": nodes,
                "resourcesPerNode": {"limits": {"nvidia.com/gpu": str(gpus)}},
            },
        },
    }


group_of = by_label(PG_LABEL)


def trainjob_complete(cp: ControlPlane, ns: str, name: str) -> bool:
    tj = cp.kubectl_json("get", "trainjobs.trainer.kubeflow.org", name, "-n", ns)
    cond = condition(tj, "Complete")
    return cond is not None and cond.get("status") == "True"


def test_a_trainjob_with_coscheduling_is_placed_whole(
    trainer: Trainer, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = trainer.cp
    sel = nodes(2, gpus=2)
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    create(cp, runtime("torch-gang", ns, [replicated_job("node", ns, sel, "trainer", 1)]))
    create(cp, train_job("llm", ns, "torch-gang", nodes=4, gpus=1))

    pg = wait_for(
        "Trainer's scheduler-plugins PodGroup",
        lambda: scheduler_plugins_podgroup(cp, ns, "llm"),
        STEP_TIMEOUT,
    )
    assert pg["spec"]["minMember"] == 4
    made = wait_for(
        "the 4 node pods", lambda: len(pods(cp, ns)) == 4 and pods(cp, ns), STEP_TIMEOUT
    )
    assert {group_of(p) for p in made.values()} == {"llm"}
    wait_for("the TrainJob to complete", lambda: trainjob_complete(cp, ns, "llm"), STEP_TIMEOUT)
    wait_for(
        "the watch to see the 4 bindings",
        lambda: sum(len(p) for _, p in gang_bindings(watch, group_of).values()) == 4,
    )
    [(existed, placed)] = gang_bindings(watch, group_of).values()
    assert len(existed) == 4 and placed == existed, (sorted(existed), sorted(placed))


def test_a_runtime_whose_nodes_wait_for_an_initializer_never_starts_under_a_gang(
    trainer: Trainer, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """The PodGroup counts the initializer and the trainer nodes (minMember 3), but JobSet
    creates the nodes only once the initializer has completed: the initializer alone is short
    of the quorum, so nothing binds and gangsched says it waits for members. Gang scheduling
    needs runtimes whose replicated jobs start together."""
    cp = trainer.cp
    sel = nodes(2, gpus=2)
    init = replicated_job("dataset-initializer", ns, sel, "dataset-initializer", 0)
    node = replicated_job("node", ns, sel, "trainer", 1)
    node["dependsOn"] = [{"name": "dataset-initializer", "status": "Complete"}]
    create(cp, runtime("init-gang", ns, [init, node]))
    create(cp, train_job("staged", ns, "init-gang", nodes=2, gpus=1))

    pg = wait_for(
        "Trainer's scheduler-plugins PodGroup",
        lambda: scheduler_plugins_podgroup(cp, ns, "staged"),
        STEP_TIMEOUT,
    )
    assert pg["spec"]["minMember"] == 3, "the initializer counts"
    made = wait_for(
        "the initializer's pod", lambda: len(pods(cp, ns)) == 1 and pods(cp, ns), STEP_TIMEOUT
    )
    messages = wait_for(
        "gangsched's reason on the initializer",
        lambda: refused(cp, ns, made, says="1 of 3 members exist"),
        STEP_TIMEOUT,
    )
    assert messages
    assert not bound(cp, ns) and len(pods(cp, ns)) == 1, "no node pod was ever made"
