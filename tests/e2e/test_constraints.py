"""Pod constraints kube-scheduler honours, honoured for whole gangs on a real control plane.

Each test builds the cluster a new user tried: 4 nodes x 4 GPUs in two zones, labelled for this
test only, and gangs whose members carry required pod anti-affinity, host ports, zone spread,
pod affinity or scheduling gates. A constraint gangsched cannot meet leaves the whole gang
pending with a message naming it; a field gangsched does not implement is refused by name.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, condition, create, get_pg, pod, podgroup, pods, wait_for

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture
def zoned(control_plane: ControlPlane, ns: str) -> Iterator[dict[str, str]]:
    """Four 4-GPU nodes, n0/n1 in zone a and n2/n3 in zone b; returns their node selector."""
    names = [f"{ns}-n{i}" for i in range(4)]
    for i, name in enumerate(names):
        control_plane.add_fake_node(
            name, "16", "64Gi", 4, labels={"e2e-test": ns, ZONE: f"{ns}-{'ab'[i // 2]}"}
        )
    yield {"e2e-test": ns}
    for name in names:
        control_plane.kubectl("delete", "node", name, "--wait=false", check=False)


def _member(name: str, ns: str, group: str, sel: dict[str, str], **spec: Any) -> dict[str, Any]:
    obj = pod(name, ns, group=group, selector=sel, labels={"job": group})
    obj["spec"].update(spec)
    return obj


def _job_term(group: str, key: str) -> dict[str, Any]:
    return {"labelSelector": {"matchLabels": {"job": group}}, "topologyKey": key}


def _zone_of(cp: ControlPlane, node: str) -> str:
    labels: dict[str, str] = cp.kubectl_json("get", "node", node)["metadata"]["labels"]
    return labels[ZONE]


def _unschedulable_message(cp: ControlPlane, ns: str, name: str) -> str:
    c = condition(pods(cp, ns)[name], "PodScheduled")
    if c is None or c.get("status") != "False" or c.get("reason") != "Unschedulable":
        return ""
    return str(c.get("message", ""))


def test_required_anti_affinity_puts_one_member_per_node(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, zoned: dict[str, str]
) -> None:
    cp = control_plane
    anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}}
    anti["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].append(
        _job_term("ddp", HOSTNAME)
    )
    create(cp, podgroup("ddp", ns, 4))
    for i in range(4):
        create(cp, _member(f"ddp-{i}", ns, "ddp", zoned, affinity=anti))
    placed = wait_for("4 members bound", lambda: len(bound(cp, ns)) == 4 and bound(cp, ns))
    assert len(set(placed.values())) == 4, placed

    # A fifth-node gang of five cannot be placed: none of it binds, and the message says why.
    create(cp, podgroup("big", ns, 5))
    anti5 = json.loads(json.dumps(anti).replace('"ddp"', '"big"'))
    for i in range(5):
        create(cp, _member(f"big-{i}", ns, "big", zoned, affinity=anti5))

    def said_why() -> str:
        msg = _unschedulable_message(cp, ns, "big-0")
        # While its members are still being created the gang waits for them, and says so.
        return "" if msg.startswith("WaitingForMembers:") else msg

    msg = wait_for("big-0 unschedulable, all five members in", said_why)
    assert "didn't match pod anti-affinity rules" in msg, msg
    assert not any(n.startswith("big-") for n in bound(cp, ns))


def test_members_asking_for_one_host_port_never_share_a_node(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, zoned: dict[str, str]
) -> None:
    cp = control_plane
    create(cp, podgroup("nccl", ns, 3))
    for i in range(3):
        member = _member(f"nccl-{i}", ns, "nccl", zoned)
        member["spec"]["containers"][0]["ports"] = [
            {"containerPort": 29500, "hostPort": 29500, "protocol": "TCP"}
        ]
        create(cp, member)
    placed = wait_for("3 members bound", lambda: len(bound(cp, ns)) == 3 and bound(cp, ns))
    assert len(set(placed.values())) == 3, placed


def test_zone_spread_with_max_skew_one_splits_the_gang_evenly(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, zoned: dict[str, str]
) -> None:
    cp = control_plane
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"job": "tp"}},
        }
    ]
    create(cp, podgroup("tp", ns, 4))
    for i in range(4):
        create(cp, _member(f"tp-{i}", ns, "tp", zoned, topologySpreadConstraints=spread))
    placed = wait_for("4 members bound", lambda: len(bound(cp, ns)) == 4 and bound(cp, ns))
    zones = Counter(_zone_of(cp, node) for node in placed.values())
    assert sorted(zones.values()) == [2, 2], zones


def test_required_pod_affinity_follows_an_existing_pod_into_its_zone(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, zoned: dict[str, str]
) -> None:
    cp = control_plane
    cache = pod("cache", ns, gpus=0, scheduler="default-scheduler", labels={"app": "cache"})
    cache["spec"]["nodeName"] = f"{ns}-n3"  # zone b, bound directly
    create(cp, cache)
    near = {
        "podAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": ZONE}
            ]
        }
    }
    create(cp, podgroup("reader", ns, 3))
    for i in range(3):
        create(cp, _member(f"reader-{i}", ns, "reader", zoned, affinity=near))
    placed = wait_for(
        "3 members bound",
        lambda: (
            (b := {k: v for k, v in bound(cp, ns).items() if k != "cache"}) and len(b) == 3 and b
        ),
    )
    assert {_zone_of(cp, node) for node in placed.values()} == {f"{ns}-b"}, placed


def test_a_gang_with_gated_members_waits_for_its_gates_then_binds_whole(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, zoned: dict[str, str]
) -> None:
    cp = control_plane
    create(cp, podgroup("held", ns, 3))
    for i in range(3):
        member = _member(f"held-{i}", ns, "held", zoned)
        if i == 2:
            member["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
        create(cp, member)
    status = wait_for(
        "the PodGroup to say it waits for gates",
        lambda: (
            (s := get_pg(cp, ns, "held").get("status") or {})
            and "scheduling gates" in json.dumps(s)
            and s
        ),
    )
    assert bound(cp, ns) == {}, status
    cp.kubectl(
        "patch", "pod", "held-2", "-n", ns, "--type=json",
        "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]',
    )  # fmt: skip
    wait_for("all 3 members bound", lambda: len(bound(cp, ns)) == 3)


def test_a_pod_naming_a_resource_claim_that_does_not_exist_waits_naming_it(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, zoned: dict[str, str]
) -> None:
    cp = control_plane
    dra = pod("dra", ns, selector=zoned)
    dra["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "some-claim"}]
    create(cp, dra)
    msg = wait_for("a condition naming the claim", lambda: _unschedulable_message(cp, ns, "dra"))
    assert f"resource claim {ns}/some-claim does not exist yet" in msg, msg
    assert "dra" not in bound(cp, ns)
