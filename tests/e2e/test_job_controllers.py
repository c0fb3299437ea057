"""Real workload controllers create the pods: kube-controller-manager's Job and StatefulSet
controllers on the dev control plane, gangsched placing what they create, kwok running the pods
(and finishing the pods a Job owns, so the Job completes).

What users run: a gangsched PodGroup next to the workload, and a pod template that carries
``schedulerName: gangsched`` and the label ``gangsched.io/pod-group``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import GPU, bound, condition, create, get_pg, pod, podgroup, pods, refused, wait_for

Nodes = Callable[..., dict[str, str]]

GROUP_LABEL = "gangsched.io/pod-group"
ROLE_LABEL = "gangsched.io/role"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"

# Controllers create pods in batches and kwok then runs them: generous, on a shared 2-core host.
STEP_TIMEOUT = 90.0


def template(
    ns: str,
    *,
    group: str,
    selector: Mapping[str, str],
    gpus: int,
    labels: Mapping[str, str],
    restart_policy: str | None = None,
) -> dict[str, Any]:
    """A pod template (metadata + spec) for gangsched: the same pod as the other e2e tests."""
    body = pod("template", ns, group=group, gpus=gpus, selector=selector, labels=labels)
    spec: dict[str, Any] = body["spec"]
    if restart_policy is not None:
        spec["restartPolicy"] = restart_policy
    return {"metadata": {"labels": body["metadata"]["labels"]}, "spec": spec}


def owned_by(kind: str, name: str, p: Mapping[str, Any]) -> bool:
    """True when ``p``'s controller owner (``ownerReferences[controller=true]``) is kind/name."""
    return any(
        ref.get("controller") and ref.get("kind") == kind and ref.get("name") == name
        for ref in p["metadata"].get("ownerReferences") or []
    )


def members_of(
    cp: ControlPlane, ns: str, kind: str, name: str, count: int
) -> dict[str, dict[str, Any]]:
    """The pods ``kind/name`` created, once there are ``count`` of them (else {})."""
    made = {n: p for n, p in pods(cp, ns).items() if owned_by(kind, name, p)}
    return made if len(made) == count else {}


def indexed_job(
    name: str, ns: str, size: int, selector: Mapping[str, str], group: str
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "completionMode": "Indexed",
            "completions": size,
            "parallelism": size,
            "backoffLimit": 0,
            "template": template(
                ns,
                group=group,
                selector=selector,
                gpus=1,
                labels={"app": name},
                restart_policy="Never",
            ),
        },
    }


def statefulset(
    name: str,
    ns: str,
    replicas: int,
    *,
    group: str,
    role: str,
    gpus: int,
    selector: Mapping[str, str],
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "serviceName": group,
            # The default OrderedReady creates pod n+1 only once pod n is Ready: a gang's second
            # member would never exist, so the first would wait for it forever.
            "podManagementPolicy": "Parallel",
            "selector": {"matchLabels": {"app": name}},
            "template": template(
                ns,
                group=group,
                selector=selector,
                gpus=gpus,
                labels={"app": name, ROLE_LABEL: role},
            ),
        },
    }


def job_condition(cp: ControlPlane, ns: str, name: str, kind: str) -> bool:
    job = cp.kubectl_json("get", "job", name, "-n", ns)
    cond = condition(job, kind)
    return cond is not None and cond.get("status") == "True"


def pg_phase(cp: ControlPlane, ns: str, name: str) -> str:
    phase: str = (get_pg(cp, ns, name).get("status") or {}).get("phase", "")
    return phase


def test_indexed_job_binds_whole_and_its_podgroup_succeeds(
    controller_manager: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = controller_manager
    sel = nodes(3, gpus=2)  # 6 GPUs: one short of the 8 the gang needs
    create(cp, podgroup("train", ns, 8))
    create(cp, indexed_job("train", ns, 8, sel, group="train"))

    made = wait_for(
        "the Job controller to create 8 pods",
        lambda: members_of(cp, ns, "Job", "train", 8),
        timeout=STEP_TIMEOUT,
    )
    assert sorted(int(p["metadata"]["annotations"][INDEX_ANNOTATION]) for p in made.values()) == (
        list(range(8))
    )
    assert {p["metadata"]["labels"][GROUP_LABEL] for p in made.values()} == {"train"}
    wait_for(
        "gangsched to refuse every member (8 GPUs asked, 6 in the nodes)",
        lambda: refused(cp, ns, made, GPU),
        timeout=STEP_TIMEOUT,
    )
    assert bound(cp, ns) == {}, "no member may bind while the whole gang cannot"

    nodes(1, gpus=2)  # now 8 GPUs: the gang fits, exactly
    placed = wait_for(
        "the whole Job to bind",
        lambda: len(bound(cp, ns)) == 8 and bound(cp, ns),
        timeout=STEP_TIMEOUT,
    )
    assert set(placed) == set(made)
    assert sorted(placed.values()) == sorted(f"{ns}-n{i}" for i in range(4) for _ in range(2))

    # kwok's pod-complete stage finishes Running pods owned by a Job: the Job completes.
    wait_for(
        "the Job to complete",
        lambda: job_condition(cp, ns, "train", "Complete"),
        timeout=STEP_TIMEOUT,
    )
    job = cp.kubectl_json("get", "job", "train", "-n", ns)
    assert job["status"].get("succeeded") == 8
    assert job["status"].get("completedIndexes") == "0-7"
    wait_for(
        "the PodGroup to reach Succeeded",
        lambda: pg_phase(cp, ns, "train") == "Succeeded",
        timeout=STEP_TIMEOUT,
    )
    status = get_pg(cp, ns, "train")["status"]
    assert (status["succeeded"], status["failed"]) == (8, 0)
    scheduled = condition(get_pg(cp, ns, "train"), "Scheduled")
    assert scheduled is not None and scheduled["status"] == "True"


def test_statefulset_ps_worker_pair_binds_whole(
    controller_manager: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = controller_manager
    sel = nodes(2, gpus=2)  # room for the 4 one-GPU workers; the parameter servers use no GPU
    roles = [{"name": "ps", "minMember": 2}, {"name": "worker", "minMember": 4}]
    create(cp, podgroup("tf", ns, 6, roles=roles))
    create(cp, statefulset("tf-ps", ns, 2, group="tf", role="ps", gpus=0, selector=sel))

    ps = wait_for(
        "the StatefulSet controller to create both parameter servers",
        lambda: members_of(cp, ns, "StatefulSet", "tf-ps", 2),
        timeout=STEP_TIMEOUT,
    )
    assert sorted(ps) == ["tf-ps-0", "tf-ps-1"]
    wait_for(
        "the parameter servers told they wait for the workers",
        lambda: refused(cp, ns, ps, "2 of 6 members exist"),
        timeout=STEP_TIMEOUT,
    )
    assert bound(cp, ns) == {}, "half a gang may not bind"

    create(cp, statefulset("tf-worker", ns, 4, group="tf", role="worker", gpus=1, selector=sel))
    workers = wait_for(
        "the StatefulSet controller to create the 4 workers",
        lambda: members_of(cp, ns, "StatefulSet", "tf-worker", 4),
        timeout=STEP_TIMEOUT,
    )
    placed = wait_for(
        "both StatefulSets to bind, whole",
        lambda: len(bound(cp, ns)) == 6 and bound(cp, ns),
        timeout=STEP_TIMEOUT,
    )
    assert set(placed) == set(ps) | set(workers)
    per_node = sorted(n for w, n in placed.items() if w in workers)
    assert per_node == [f"{ns}-n0", f"{ns}-n0", f"{ns}-n1", f"{ns}-n1"]

    wait_for(
        "the PodGroup to run",
        lambda: pg_phase(cp, ns, "tf") == "Running",
        timeout=STEP_TIMEOUT,
    )
    status = get_pg(cp, ns, "tf")["status"]
    assert (status["scheduled"], status["running"], status["failed"]) == (6, 6, 0)
    # The StatefulSet controller sees its pods Ready (kwok), as it would on real kubelets.
    wait_for(
        "both StatefulSets to report every replica ready",
        lambda: all(
            (cp.kubectl_json("get", "statefulset", n, "-n", ns).get("status") or {}).get(
                "readyReplicas"
            )
            == want
            for n, want in (("tf-ps", 2), ("tf-worker", 4))
        ),
        timeout=STEP_TIMEOUT,
    )


def test_replicaset_pods_bind_whole_and_go_with_their_owner(
    controller_manager: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = controller_manager
    sel = nodes(1, gpus=4)
    create(cp, podgroup("serve", ns, 3))
    create(
        cp,
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": {"name": "serve", "namespace": ns},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "serve"}},
                "template": template(
                    ns, group="serve", selector=sel, gpus=1, labels={"app": "serve"}
                ),
            },
        },
    )
    made = wait_for(
        "the ReplicaSet controller to create 3 pods",
        lambda: members_of(cp, ns, "ReplicaSet", "serve", 3),
        timeout=STEP_TIMEOUT,
    )
    placed = wait_for(
        "the 3 replicas to bind",
        lambda: len(bound(cp, ns)) == 3 and bound(cp, ns),
        timeout=STEP_TIMEOUT,
    )
    assert set(placed) == set(made)
    # The garbage collector deletes the pods of a deleted owner (kwok then removes them).
    cp.kubectl("delete", "replicaset", "serve", "-n", ns, "--wait=false")
    wait_for("the replicas to be gone", lambda: not pods(cp, ns), timeout=STEP_TIMEOUT)
