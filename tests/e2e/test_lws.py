"""LeaderWorkerSet (sigs.k8s.io/lws) makes the groups, the StatefulSet controller makes their
pods, gangsched places each group whole: LWS's gang scheduling (its Volcano provider) annotates
every pod of a group ``scheduling.k8s.io/group-name`` and creates a Volcano PodGroup per group
with ``minMember`` = the group's size, which gangsched reads.

The LWS manager runs as a process beside the dev control plane with its webhooks on loopback
(the ``lws`` fixture, gangsched_dev.devcluster.lws); kwok runs the bound pods. Every test
watches the namespace's pods from before anything is created and checks, in the API server's
order, that each group's members all existed before the first of them was bound.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.lws import (
    API_VERSION,
    EXCLUSIVE_TOPOLOGY,
    GROUP_INDEX_LABEL,
    GROUP_NAME_ANNOTATION,
    NAME_LABEL,
    REVISION_LABEL,
    WORKER_INDEX_LABEL,
    LeaderWorkerSet,
)

from .conftest import SchedulerProcess
from .kube import PodEvents, bound, create, gang_bindings, pod, pods, refused, wait_for

Nodes = Callable[..., dict[str, str]]

RACK = "example.com/rack"
# LWS, then the StatefulSet controller (twice: leaders, then each group's workers), then
# gangsched, then kwok: generous, on a shared 2-core host.
STEP_TIMEOUT = 120.0


def lws_manifest(
    name: str,
    ns: str,
    *,
    replicas: int,
    size: int,
    gpus: int,
    selector: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    image: str = "registry.invalid/serve:1",
) -> dict[str, Any]:
    """A LeaderWorkerSet of ``replicas`` groups of ``size`` pods (a leader and ``size - 1``
    workers), each asking for ``gpus`` GPUs, scheduled by gangsched."""
    spec = pod("template", ns, gpus=gpus, selector=selector)["spec"]
    spec["containers"][0]["image"] = image
    template = {"spec": spec}
    return {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": ns, "annotations": dict(annotations or {})},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {
                "size": size,
                "leaderTemplate": template,
                "workerTemplate": template,
            },
        },
    }


def group_of(obj: Mapping[str, Any]) -> str | None:
    """The gang of an LWS pod: its ``scheduling.k8s.io/group-name`` annotation."""
    annotations = obj.get("metadata", {}).get("annotations") or {}
    group = annotations.get(GROUP_NAME_ANNOTATION)
    return str(group) if group else None


def workers_of(obj: Mapping[str, Any]) -> str | None:
    """The gang of an LWS worker (not its leader)."""
    labels = obj.get("metadata", {}).get("labels") or {}
    return group_of(obj) if labels.get(WORKER_INDEX_LABEL, "0") != "0" else None


def members(cp: ControlPlane, ns: str, lws: str, count: int) -> dict[str, dict[str, Any]]:
    """The pods of ``lws``, once there are ``count`` of them (else {})."""
    made = {
        n: p
        for n, p in pods(cp, ns).items()
        if (p["metadata"].get("labels") or {}).get(NAME_LABEL) == lws
        and not p["metadata"].get("deletionTimestamp")
    }
    return made if len(made) == count else {}


def assert_groups_bound_whole(watch: PodEvents, size: int, groups: int) -> dict[str, set[str]]:
    """Every group seen on the watch was bound whole (all ``size`` members existed before the
    first was bound, and all were bound); returns group -> the pods bound."""
    seen = gang_bindings(watch, group_of)
    assert len(seen) == groups, f"groups bound: {sorted(seen)}"
    for group, (existed, placed) in seen.items():
        assert len(existed) == size, f"{group}: {sorted(existed)} existed at its first binding"
        assert placed == existed, f"{group}: bound {sorted(placed)}, members {sorted(existed)}"
    return {g: placed for g, (_, placed) in seen.items()}


def volcano_podgroups(cp: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    items = cp.kubectl_json("get", "podgroups.scheduling.volcano.sh", "-n", ns)["items"]
    return {pg["metadata"]["name"]: pg for pg in items}


def test_each_group_binds_whole(
    lws: LeaderWorkerSet, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = lws.cp
    sel = nodes(2, gpus=8)
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    create(cp, lws_manifest("infer", ns, replicas=2, size=4, gpus=2, selector=sel))

    made = wait_for(
        "LWS and the StatefulSet controller to create 2 groups of 4 pods",
        lambda: members(cp, ns, "infer", 8),
        timeout=STEP_TIMEOUT,
    )
    groups = {group_of(p) for p in made.values()}
    assert len(groups) == 2 and None not in groups, "LWS's webhook names each pod's group"
    pgs = wait_for("LWS to create a Volcano PodGroup per group", lambda: volcano_podgroups(cp, ns))
    assert set(pgs) == groups
    assert {pg["spec"]["minMember"] for pg in pgs.values()} == {4}
    wait_for(
        "all 8 pods to bind",
        lambda: len(bound(cp, ns)) == 8,
        timeout=STEP_TIMEOUT,
    )
    wait_for("the watch to see the 8 bindings", lambda: len(gang_bindings(watch, group_of)) == 2)
    wait_for(
        "the watch to see every binding",
        lambda: sum(len(p) for _, p in gang_bindings(watch, group_of).values()) == 8,
    )
    placed = assert_groups_bound_whole(watch, size=4, groups=2)
    for group, names in placed.items():
        indices = {made[n]["metadata"]["labels"][GROUP_INDEX_LABEL] for n in names}
        assert len(indices) == 1, f"{group} mixes groups {indices}"


def test_a_group_that_does_not_fit_waits_whole(
    lws: LeaderWorkerSet, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """Room for one group of 4 and three more pods: one group binds whole, the other binds
    nothing and says why."""
    cp = lws.cp
    sel = nodes(7, gpus=1)
    watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
    create(cp, lws_manifest("infer", ns, replicas=2, size=4, gpus=1, selector=sel))
    made = wait_for("2 groups of 4 pods", lambda: members(cp, ns, "infer", 8), timeout=STEP_TIMEOUT)
    wait_for("one group to bind", lambda: len(bound(cp, ns)) == 4, timeout=STEP_TIMEOUT)
    placed = bound(cp, ns)
    waiting = sorted(set(made) - set(placed))
    # (a pod of the second group may first say PodGroupNotFound, truly: LWS's webhook names
    # the group before its controller creates the PodGroup; what it waits for then is GPUs)
    messages = wait_for(
        "the other group's pods to say they wait for GPUs",
        lambda: refused(cp, ns, waiting, says="nvidia.com/gpu"),
        timeout=STEP_TIMEOUT,
    )
    assert len({group_of(made[n]) for n in waiting}) == 1
    assert all("gpu" in m.lower() for m in messages.values()), messages
    assert len(bound(cp, ns)) == 4, "nothing of the second group was bound meanwhile"
    assert_groups_bound_whole(watch, size=4, groups=1)


def test_exclusive_topology_keeps_each_group_in_its_own_rack(
    lws: LeaderWorkerSet,
    running_scheduler: SchedulerProcess,
    control_plane: ControlPlane,
    ns: str,
) -> None:
    """``leaderworkerset.sigs.k8s.io/exclusive-topology: <rack label>``: LWS creates a group's
    workers only once its leader is bound, pinned to the leader's rack, and its pod webhook
    gives every pod an affinity to its group's rack and an anti-affinity to other groups'.
    gangsched binds each leader alone in a rack that holds its whole group, holds the room of
    the workers to come, and binds them there when they come (core/leaderfirst.py)."""
    cp = control_plane
    made_nodes: list[str] = []
    try:
        for rack in ("a", "b"):
            for i in range(2):
                name = f"{ns}-{rack}{i}"
                labels = {"e2e-test": ns, RACK: f"{ns}-{rack}"}
                cp.add_fake_node(name, "16", "64Gi", 4, labels=labels)
                made_nodes.append(name)
        sel = {"e2e-test": ns}
        watch = PodEvents(cp, ns, seconds=int(3 * STEP_TIMEOUT))
        create(
            cp,
            lws_manifest(
                "infer",
                ns,
                replicas=2,
                size=4,
                gpus=2,
                selector=sel,
                annotations={EXCLUSIVE_TOPOLOGY: RACK},
            ),
        )
        made = wait_for(
            "2 groups of 4 pods", lambda: members(cp, ns, "infer", 8), timeout=STEP_TIMEOUT
        )
        affinity = next(iter(made.values()))["spec"].get("affinity") or {}
        assert "podAffinity" in affinity and "podAntiAffinity" in affinity, affinity
        wait_for("all 8 pods to bind", lambda: len(bound(cp, ns)) == 8, timeout=STEP_TIMEOUT)
        rack_of = {
            n["metadata"]["name"]: n["metadata"]["labels"][RACK]
            for n in cp.kubectl_json("get", "nodes", "-l", f"e2e-test={ns}")["items"]
        }
        racks: dict[str, set[str]] = {}
        for name, node in bound(cp, ns).items():
            racks.setdefault(str(group_of(made[name])), set()).add(rack_of[node])
        assert sorted(len(r) for r in racks.values()) == [1, 1], racks
        assert len(set().union(*racks.values())) == 2, "each group in a rack of its own"
        wait_for(
            "the watch to see every binding",
            lambda: sum(len(p) for _, p in gang_bindings(watch, group_of).values()) == 8,
        )
        # Each leader bound alone (its workers did not exist yet), then its three workers
        # all bound once all three existed.
        for group, (existed, placed) in gang_bindings(watch, group_of).items():
            assert len(existed) == 1 and len(placed) == 4, (group, existed, placed)
            [leader] = existed
            assert made[leader]["metadata"]["labels"][WORKER_INDEX_LABEL] == "0"
        seen = gang_bindings(watch, workers_of)
        assert len(seen) == 2
        for group, (existed, placed) in seen.items():
            assert len(existed) == 3 and placed == existed, (group, existed, placed)
    finally:
        for name in made_nodes:
            cp.kubectl("delete", "node", name, "--wait=false", check=False)


def test_a_rolling_update_replaces_groups_whole(
    lws: LeaderWorkerSet, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """A new template rolls out group by group (LWS's maxUnavailable 1, maxSurge 0): each new
    group is a new gang (the PodGroup name carries the revision) and binds whole; no group
    of either revision is ever partly bound."""
    cp = lws.cp
    sel = nodes(2, gpus=8)
    watch = PodEvents(cp, ns, seconds=int(6 * STEP_TIMEOUT))
    create(cp, lws_manifest("infer", ns, replicas=2, size=4, gpus=2, selector=sel))
    first = wait_for(
        "the first revision's 8 pods to bind",
        lambda: (m := members(cp, ns, "infer", 8)) and len(bound(cp, ns)) == 8 and m,
        timeout=STEP_TIMEOUT,
    )
    old = {p["metadata"]["labels"][REVISION_LABEL] for p in first.values()}
    assert len(old) == 1
    patch = [
        {
            "op": "replace",
            "path": f"/spec/leaderWorkerTemplate/{t}/spec/containers/0/image",
            "value": "registry.invalid/serve:2",
        }
        for t in ("leaderTemplate", "workerTemplate")
    ]
    kind = "leaderworkersets.leaderworkerset.x-k8s.io"
    cp.kubectl("patch", kind, "infer", "-n", ns, "--type=json", "-p", json.dumps(patch))

    def updated() -> dict[str, dict[str, Any]]:
        made = members(cp, ns, "infer", 8)
        revisions = {p["metadata"]["labels"][REVISION_LABEL] for p in made.values()}
        placed = bound(cp, ns)
        done = revisions and not revisions & old and all(n in placed for n in made)
        return made if done else {}

    wait_for("both groups to roll to the new revision and bind", updated, timeout=3 * STEP_TIMEOUT)
    wait_for(
        "the watch to see the 16 bindings",
        lambda: sum(len(p) for _, p in gang_bindings(watch, group_of).values()) == 16,
    )
    assert_groups_bound_whole(watch, size=4, groups=4)
