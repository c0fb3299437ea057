"""Kueue (sigs.k8s.io/kueue) admits, gangsched places: Jobs and Kueue pod groups that name a
LocalQueue wait, suspended or gated, until their ClusterQueue has quota; once Kueue admits one,
its pods come (from the Job controller, or out of Kueue's gate) and gangsched binds the gang
whole.

The Kueue manager runs as a process beside the dev control plane with the webhooks of its
objects, of Jobs and of pods on loopback (the ``kueue`` fixture,
gangsched_dev.devcluster.kueue), with ``waitForPodsReady`` on. Each test makes its own
ResourceFlavor (whose ``nodeLabels`` are the test's nodes' label, so that Kueue's admission
sends the pods there), ClusterQueues and LocalQueue, and watches its namespace's pods from
before anything is created: every gang is checked, in the API server's order, to have had all
its members when the first was bound, and to have been bound whole.

The policy between the two preemptions (docs/integrations/kueue.md): Kueue evicts whole
admitted workloads to give quota back, gangsched never evicts a pod that Kueue admitted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.jobset import JobSet
from gangsched_dev.devcluster.kueue import API_VERSION, QUEUE_LABEL, Kueue

from .conftest import SchedulerProcess
from .kube import (
    PodEvents,
    bound,
    by_label,
    condition,
    create,
    gang_bindings,
    pod,
    podgroup,
    pods,
    refused,
    wait_for,
)
from .test_jobset import jobset_condition, jobset_manifest

Nodes = Callable[..., dict[str, str]]

GROUP_LABEL = "gangsched.io/pod-group"
POD_GROUP_NAME = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
RACK = "example.com/rack"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
# Kueue, then the Job controller, then gangsched, then kwok: generous, on a shared 2-core host.
STEP_TIMEOUT = 120.0
# Kueue's waitForPodsReady: long enough for a gang that fits to run on a loaded 2-core host,
# short enough for the test of what happens to one that cannot be placed.
PODS_READY_TIMEOUT = "25s"


@pytest.fixture(scope="module")
def kueue(jobset: JobSet) -> Iterator[Kueue]:
    """Kueue v0.19 with its Job, JobSet and pod integrations (the JobSet manager runs too),
    ``waitForPodsReady`` on (a quick requeue), for the tests of this module."""
    settings = {
        "waitForPodsReady": {
            "timeout": PODS_READY_TIMEOUT,
            "blockAdmission": False,
            "requeuingStrategy": {
                "timestamp": "Eviction",
                "backoffBaseSeconds": 1,
                "backoffMaxSeconds": 4,
            },
        }
    }
    frameworks = ("batch/job", "jobset.x-k8s.io/jobset", "pod")
    with Kueue(jobset.cp, frameworks=frameworks, settings=settings) as k:
        yield k


# ------------------------------------------------------------------------------ objects


def flavor(name: str, ns: str, topology: str | None = None) -> dict[str, Any]:
    """A ResourceFlavor for the test's nodes (those labelled ``e2e-test: <ns>``)."""
    spec: dict[str, Any] = {"nodeLabels": {"e2e-test": ns}}
    if topology:
        spec["topologyName"] = topology
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": spec,
    }


def cluster_queue(
    name: str,
    flavor_name: str,
    gpus: int,
    *,
    cohort: str | None = None,
    preemption: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A ClusterQueue with ``gpus`` GPUs of nominal quota (CPU and memory plenty)."""
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", GPU],
                "flavors": [
                    {
                        "name": flavor_name,
                        "resources": [
                            {"name": "cpu", "nominalQuota": "100"},
                            {"name": "memory", "nominalQuota": "1000Gi"},
                            {"name": GPU, "nominalQuota": str(gpus)},
                        ],
                    }
                ],
            }
        ],
    }
    if cohort:
        spec["cohortName"] = cohort
    if preemption:
        spec["preemption"] = dict(preemption)
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": spec,
    }


def local_queue(name: str, ns: str, cq: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"clusterQueue": cq},
    }


def job(
    name: str,
    ns: str,
    queue: str,
    *,
    n: int,
    gpus: int,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """An Indexed Job of ``n`` pods, the gangsched PodGroup ``name``, queued in ``queue`` (no
    node selector: Kueue's admission adds the flavor's)."""
    body = pod("template", ns, group=name, gpus=gpus, annotations=annotations)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_LABEL: queue}},
        "spec": {
            "parallelism": n,
            "completions": n,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "labels": body["metadata"]["labels"],
                    "annotations": body["metadata"]["annotations"],
                },
                "spec": {**body["spec"], "restartPolicy": "Never"},
            },
        },
    }


def submit_pod_group(
    cp: ControlPlane, name: str, ns: str, queue: str, *, n: int, gpus: int, priority_class: str
) -> None:
    """A Kueue pod group of ``n`` plain pods (they run until deleted), queued in ``queue``,
    and the gangsched PodGroup ``name`` they form."""
    create(cp, podgroup(name, ns, n))
    for i in range(n):
        body = pod(
            f"{name}-{i}",
            ns,
            group=name,
            gpus=gpus,
            labels={QUEUE_LABEL: queue, POD_GROUP_NAME: name},
            annotations={POD_GROUP_COUNT: str(n)},
        )
        body["spec"]["priorityClassName"] = priority_class
        body["spec"]["terminationGracePeriodSeconds"] = 1  # evicted: gone a second later
        create(cp, body)


group_of = by_label(GROUP_LABEL)


def workload_of(cp: ControlPlane, ns: str, owner: str) -> dict[str, Any] | None:
    """The Workload Kueue made for the Job ``owner`` (or the pod group ``owner``)."""
    for wl in cp.kubectl_json("get", "workloads.kueue.x-k8s.io", "-n", ns)["items"]:
        owners = {o.get("name") for o in wl["metadata"].get("ownerReferences") or []}
        if owner in owners or wl["metadata"]["name"] == owner:
            found: dict[str, Any] = wl
            return found
    return None


def true(obj: Mapping[str, Any] | None, kind: str) -> bool:
    cond = condition(obj or {}, kind)
    return cond is not None and cond.get("status") == "True"


def job_complete(cp: ControlPlane, ns: str, name: str) -> bool:
    return true(cp.kubectl_json("get", "job", name, "-n", ns), "Complete")


@pytest.fixture
def cluster_scoped(control_plane: ControlPlane) -> Iterator[Callable[[dict[str, Any]], None]]:
    """Create cluster-scoped objects (flavors, ClusterQueues, Topologies, PriorityClasses),
    deleted when the test ends (ClusterQueues first: a flavor in use is not deleted)."""
    made: list[tuple[str, str]] = []

    def make(obj: dict[str, Any]) -> None:
        create(control_plane, obj)
        group = obj["apiVersion"].split("/")[0] if "/" in obj["apiVersion"] else ""
        kind = obj["kind"].lower() + "s" + (f".{group}" if group else "")
        made.append((kind, obj["metadata"]["name"]))

    yield make
    for kind, name in reversed(made):
        control_plane.kubectl("delete", kind, name, "--wait=false", check=False)


def one_queue(
    cp: ControlPlane,
    ns: str,
    cluster_scoped: Callable[[dict[str, Any]], None],
    *,
    gpus: int,
    preemption: Mapping[str, Any] | None = None,
) -> None:
    """The test's flavor, a ClusterQueue of ``gpus`` GPUs over it, and the LocalQueue ``q``."""
    cluster_scoped(flavor(f"{ns}-gpu", ns))
    cluster_scoped(cluster_queue(f"{ns}-cq", f"{ns}-gpu", gpus=gpus, preemption=preemption))
    create(cp, local_queue("q", ns, f"{ns}-cq"))


def assert_bound_whole(watch: PodEvents, sizes: Mapping[str, int]) -> None:
    seen = gang_bindings(watch, group_of)
    assert set(seen) == set(sizes), f"gangs bound: {sorted(seen)}"
    for gang, (existed, placed) in seen.items():
        assert len(existed) == sizes[gang], f"{gang}: {sorted(existed)} at its first binding"
        assert placed == existed, f"{gang}: bound {sorted(placed)} of {sorted(existed)}"


def bindings_seen(watch: PodEvents) -> int:
    return sum(len(p) for _, p in gang_bindings(watch, group_of).values())


# -------------------------------------------------------------------------------- quota


def test_jobs_are_admitted_within_quota_and_each_is_placed_whole(
    kueue: Kueue,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    cluster_scoped: Callable[[dict[str, Any]], None],
) -> None:
    """Two 8-GPU Jobs, 16 GPUs of nodes, 8 GPUs of quota: Kueue admits one; the other stays
    suspended, with no pods at all, until the first has finished; each binds whole."""
    cp = kueue.cp
    nodes(2, gpus=8)
    one_queue(cp, ns, cluster_scoped, gpus=8)
    watch = PodEvents(cp, ns, seconds=int(4 * STEP_TIMEOUT))
    for name in ("a", "b"):
        create(cp, podgroup(name, ns, 8))
        create(cp, job(name, ns, "q", n=8, gpus=1))
    for name in ("a", "b"):
        wait_for(f"Job {name} to complete", lambda n=name: job_complete(cp, ns, n), STEP_TIMEOUT)
    wait_for("the watch to see the 16 bindings", lambda: bindings_seen(watch) == 16)
    assert_bound_whole(watch, {"a": 8, "b": 8})

    # In the API server's order: the second Job's first pod came after every pod of the
    # first had finished (its quota was held until then).
    objects = watch.objects()
    first = group_of(next(o for t, o in objects if t == "ADDED"))
    second = "b" if first == "a" else "a"
    start = next(i for i, (t, o) in enumerate(objects) if group_of(o) == second)
    finished = {
        o["metadata"]["name"]
        for _, o in objects[:start]
        if group_of(o) == first and (o.get("status") or {}).get("phase") == "Succeeded"
    }
    assert len(finished) == 8, f"{second}'s pods came while {first} ran: {sorted(finished)}"


def test_a_job_borrows_from_its_cohort_and_is_placed_whole(
    kueue: Kueue,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    cluster_scoped: Callable[[dict[str, Any]], None],
) -> None:
    cp = kueue.cp
    nodes(1, gpus=8)
    cluster_scoped(flavor(f"{ns}-gpu", ns))
    cluster_scoped(cluster_queue(f"{ns}-a", f"{ns}-gpu", gpus=4, cohort=f"{ns}-co"))
    cluster_scoped(cluster_queue(f"{ns}-b", f"{ns}-gpu", gpus=4, cohort=f"{ns}-co"))
    create(cp, local_queue("q", ns, f"{ns}-a"))
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    create(cp, podgroup("big", ns, 4))
    create(cp, job("big", ns, "q", n=4, gpus=2))  # 8 GPUs: 4 of its own, 4 borrowed
    wait_for("Job big to complete", lambda: job_complete(cp, ns, "big"), STEP_TIMEOUT)
    wl = workload_of(cp, ns, "big")
    admission = ((wl or {}).get("status") or {}).get("admission") or {}
    assert admission.get("clusterQueue") == f"{ns}-a", wl
    [assigned] = admission["podSetAssignments"]
    assert assigned["resourceUsage"][GPU] == "8", "4 GPUs of its own and 4 borrowed"
    wait_for("the watch to see the 4 bindings", lambda: bindings_seen(watch) == 4)
    assert_bound_whole(watch, {"big": 4})


def test_a_jobset_is_admitted_by_kueue_and_placed_whole(
    kueue: Kueue,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    cluster_scoped: Callable[[dict[str, Any]], None],
) -> None:
    """A JobSet of two Jobs of 4 pods naming a LocalQueue: Kueue suspends it, admits it whole
    (one workload for both Jobs), and gangsched binds its one gang of 8 whole."""
    cp = kueue.cp
    sel = nodes(2, gpus=4)
    one_queue(cp, ns, cluster_scoped, gpus=8)
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    create(cp, podgroup("train", ns, 8))
    body = jobset_manifest(
        "train", ns, group="train", selector=sel, replicas=2, parallelism=4, gpus=1
    )
    body["metadata"]["labels"] = {QUEUE_LABEL: "q"}
    created = create(cp, body)
    assert created["spec"].get("suspend") is True, "Kueue's webhook suspends it"
    wait_for(
        "the JobSet to complete",
        lambda: jobset_condition(cp, ns, "train", "Completed"),
        STEP_TIMEOUT,
    )
    wl = workload_of(cp, ns, "train")
    assert wl is not None and ((wl.get("status") or {}).get("admission") or {}), wl
    wait_for("the watch to see the 8 bindings", lambda: bindings_seen(watch) == 8)
    assert_bound_whole(watch, {"train": 8})


# ----------------------------------------------------------------------- waitForPodsReady


def test_an_admitted_gang_that_cannot_be_placed_says_why_and_is_requeued_by_kueue(
    kueue: Kueue,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    cluster_scoped: Callable[[dict[str, Any]], None],
) -> None:
    """Quota for 8 GPUs, nodes of 2 GPUs, a Job of two 4-GPU pods: admitted, but no node can
    hold a member. gangsched's reason is on the pods; Kueue evicts the workload when
    ``waitForPodsReady`` times out and requeues it; once nodes that fit exist, the requeued
    Job's pods are placed whole."""
    cp = kueue.cp
    nodes(4, gpus=2)
    one_queue(cp, ns, cluster_scoped, gpus=8)
    watch = PodEvents(cp, ns, seconds=int(5 * STEP_TIMEOUT))
    create(cp, podgroup("wide", ns, 2))
    create(cp, job("wide", ns, "q", n=2, gpus=4))

    made = wait_for(
        "the Job's 2 pods", lambda: len(pods(cp, ns)) == 2 and pods(cp, ns), STEP_TIMEOUT
    )
    # (a member alone for a moment says WaitingForMembers first: the reason naming the
    # GPUs is written after it)
    messages = wait_for(
        "gangsched's reason on the pods", lambda: refused(cp, ns, made, says=GPU), STEP_TIMEOUT
    )
    assert all(GPU in m for m in messages.values()), messages

    def requeued() -> dict[str, Any] | None:
        wl = workload_of(cp, ns, "wide")
        count = ((wl or {}).get("status") or {}).get("requeueState", {}).get("count", 0)
        return wl if count >= 1 else None

    wl = wait_for("Kueue to evict and requeue the workload", requeued, STEP_TIMEOUT)
    evicted = condition(wl, "Evicted") or {}
    assert evicted.get("reason") in ("PodsReadyTimeout", None), evicted
    assert not bound(cp, ns), "nothing was bound meanwhile"

    nodes(2, gpus=4)
    wait_for("the requeued Job to complete", lambda: job_complete(cp, ns, "wide"), 2 * STEP_TIMEOUT)
    wait_for("the watch to see the 2 bindings", lambda: bindings_seen(watch) == 2)
    assert_bound_whole(watch, {"wide": 2})


# ----------------------------------------------------------------------------- preemption


@pytest.fixture
def priorities(cluster_scoped: Callable[[dict[str, Any]], None], ns: str) -> tuple[str, str]:
    """Two PriorityClasses of this test: (low, high)."""
    names = (f"{ns}-low", f"{ns}-high")
    for name, value in zip(names, (10, 1000), strict=True):
        cluster_scoped(
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
            }
        )
    return names


def test_kueue_preempts_a_lower_priority_workload_and_gangsched_places_the_preemptor(
    kueue: Kueue,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    cluster_scoped: Callable[[dict[str, Any]], None],
    priorities: tuple[str, str],
) -> None:
    """Kueue's preemption (quota, within the ClusterQueue): it evicts the low-priority pod
    group whole; gangsched evicts nothing itself and binds the high-priority gang whole once
    the victims are gone."""
    cp = kueue.cp
    low, high = priorities
    nodes(1, gpus=8)
    one_queue(cp, ns, cluster_scoped, gpus=8, preemption={"withinClusterQueue": "LowerPriority"})
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    submit_pod_group(cp, "low", ns, "q", n=4, gpus=2, priority_class=low)
    wait_for("the low-priority gang to bind", lambda: len(bound(cp, ns)) == 4, STEP_TIMEOUT)

    submit_pod_group(cp, "high", ns, "q", n=4, gpus=2, priority_class=high)

    def running() -> set[str]:
        return {
            n
            for n, p in pods(cp, ns).items()
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed")
        }

    wait_for(
        "the high-priority gang to bind, and the victims to end",
        lambda: running() == {f"high-{i}" for i in range(4)},
        STEP_TIMEOUT,
    )
    wait_for("the watch to see the 8 bindings", lambda: bindings_seen(watch) == 8)
    assert_bound_whole(watch, {"low": 4, "high": 4})
    objects = watch.objects()
    first_high = next(
        i for i, (_, o) in enumerate(objects) if group_of(o) == "high" and o["spec"].get("nodeName")
    )
    ended = {
        o["metadata"]["name"]
        for t, o in objects[:first_high]
        if t == "DELETED" or (o.get("status") or {}).get("phase") == "Failed"
    }
    assert ended == {f"low-{i}" for i in range(4)}, "the victims ended before the preemptor bound"
    ours = [
        e
        for e in cp.kubectl_json("get", "events.events.k8s.io", "-n", ns)["items"]
        if e.get("reason") == "Preempted" and "gangsched" in (e.get("reportingController") or "")
    ]
    assert not ours, "gangsched evicted nothing: Kueue did"


def test_gangsched_does_not_evict_pods_that_kueue_admitted(
    kueue: Kueue,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    cluster_scoped: Callable[[dict[str, Any]], None],
    priorities: tuple[str, str],
) -> None:
    """Two ClusterQueues of 8 GPUs each over 8 GPUs of nodes: both gangs are admitted, the
    low-priority one runs; gangsched does not evict it for the high-priority one (Kueue
    alone preempts what it admitted) and says so on the waiting pods."""
    cp = kueue.cp
    low, high = priorities
    nodes(1, gpus=8)
    cluster_scoped(flavor(f"{ns}-gpu", ns))
    cluster_scoped(cluster_queue(f"{ns}-low", f"{ns}-gpu", gpus=8))
    cluster_scoped(cluster_queue(f"{ns}-high", f"{ns}-gpu", gpus=8))
    create(cp, local_queue("low", ns, f"{ns}-low"))
    create(cp, local_queue("high", ns, f"{ns}-high"))
    submit_pod_group(cp, "low", ns, "low", n=4, gpus=2, priority_class=low)
    wait_for("the low-priority gang to bind", lambda: len(bound(cp, ns)) == 4, STEP_TIMEOUT)
    running = bound(cp, ns)

    submit_pod_group(cp, "high", ns, "high", n=4, gpus=2, priority_class=high)
    messages = wait_for(
        "the high-priority gang's pods to say why they wait",
        lambda: refused(cp, ns, [f"high-{i}" for i in range(4)], says="admitted by Kueue"),
        STEP_TIMEOUT,
    )
    assert all("preemption" in m for m in messages.values()), messages
    assert bound(cp, ns) == running, "the low-priority gang still runs where it was"
    assert all(not p["metadata"].get("deletionTimestamp") for p in pods(cp, ns).values())


# ------------------------------------------------------------------------------- topology


def test_kueue_topology_aware_scheduling_keeps_the_gang_in_one_rack(
    kueue: Kueue,
    running_scheduler: SchedulerProcess,
    control_plane: ControlPlane,
    ns: str,
    cluster_scoped: Callable[[dict[str, Any]], None],
) -> None:
    """A Kueue Topology (rack, hostname) and a flavor that names it; a Job asking for one rack
    (``kueue.x-k8s.io/podset-required-topology``): Kueue chooses the rack when it admits,
    gates the pods (``kueue.x-k8s.io/topology``) and lifts the gate with each pod's node
    selector; gangsched waits for the gates and binds the gang whole inside that rack."""
    cp = control_plane
    made_nodes: list[str] = []
    try:
        for rack in ("a", "b"):
            for i in range(2):
                name = f"{ns}-{rack}{i}"
                cp.add_fake_node(
                    name, "16", "64Gi", 4, labels={"e2e-test": ns, RACK: f"{ns}-{rack}"}
                )
                made_nodes.append(name)
        levels = [{"nodeLabel": RACK}, {"nodeLabel": HOSTNAME}]
        cluster_scoped(
            {
                "apiVersion": API_VERSION,
                "kind": "Topology",
                "metadata": {"name": f"{ns}-topo"},
                "spec": {"levels": levels},
            }
        )
        cluster_scoped(flavor(f"{ns}-tas", ns, topology=f"{ns}-topo"))
        cluster_scoped(cluster_queue(f"{ns}-cq", f"{ns}-tas", gpus=16))
        create(cp, local_queue("q", ns, f"{ns}-cq"))
        watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
        create(cp, podgroup("rack", ns, 4))
        create(cp, job("rack", ns, "q", n=4, gpus=2, annotations={REQUIRED_TOPOLOGY: RACK}))
        wait_for("the Job to complete", lambda: job_complete(cp, ns, "rack"), STEP_TIMEOUT)
        wait_for("the watch to see the 4 bindings", lambda: bindings_seen(watch) == 4)
        assert_bound_whole(watch, {"rack": 4})

        objects = watch.objects()
        created = [o for t, o in objects if t == "ADDED"]
        gates = [{g["name"] for g in o["spec"].get("schedulingGates") or []} for o in created]
        assert all(TOPOLOGY_GATE in g for g in gates), f"Kueue's gate on every new pod: {gates}"
        rack_of = {
            n["metadata"]["name"]: n["metadata"]["labels"][RACK]
            for n in cp.kubectl_json("get", "nodes", "-l", f"e2e-test={ns}")["items"]
        }
        nodes_used = {o["spec"]["nodeName"] for _, o in objects if o["spec"].get("nodeName")}
        assert len({rack_of[n] for n in nodes_used}) == 1, f"one rack: {sorted(nodes_used)}"
    finally:
        for name in made_nodes:
            cp.kubectl("delete", "node", name, "--wait=false", check=False)
