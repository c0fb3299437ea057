"""The gang behaviours of the designs gangsched follows (scheduler-plugins Coscheduling,
kube-batch PodGroups, Koordinator gangs, Volcano task topology, delayed binding), in the
simulator and through the core directly."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.model import GangSpec, Node, Pod, PodPhase
from gangsched.sim.run import simulate

GPU = "nvidia.com/gpu"
GI = 2**30
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(tmp_path: Path, workload: dict[str, Any]) -> dict[str, Any]:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(workload))
    code, text, _ = simulate(str(path), as_json=True, plot_path=None, show_all=False, until=None)
    assert code == 0, text
    out: dict[str, Any] = json.loads(text)
    return out


def gang(name: str, pods: list[dict[str, Any]], **kw: Any) -> dict[str, Any]:
    return {"name": name, "duration": 100, "pods": pods, **kw}


def workers(n: int, role: str = "", cpu: str = "4", gpus: int = 1) -> dict[str, Any]:
    return {"count": n, "role": role, "cpu": cpu, "memory": "8Gi", "gpus": gpus}


# ---- roles (Koordinator bundles, Volcano minTaskMember) ----------------------------------------
def test_every_role_must_reach_its_own_minimum(tmp_path: Path) -> None:
    nodes = [{"name": "n", "cpu": "64", "memory": "256Gi", "gpus": 8}]
    pods = [workers(2, "ps", cpu="40", gpus=0), workers(2, "worker")]
    # Only one ps fits (40 of 64 CPUs): 3 members placeable, minMember 3 met, ps minimum 2 not.
    strict_roles = gang("job", pods, minMember=3, roles={"ps": 2, "worker": 1})
    out = run(tmp_path, {"nodes": nodes, "gangs": [strict_roles]})
    assert (out["gangs_bound"], out["pods_bound"], out["partial_gangs"]) == (0, 0, 0)
    relaxed = gang("job", pods, minMember=3, roles={"ps": 1, "worker": 2})
    out = run(tmp_path, {"nodes": nodes, "gangs": [relaxed]})
    # three bind together; the second ps binds on its own once the first three have finished
    # (a gang once satisfied schedules later members alone)
    assert (out["gangs_bound"], out["pods_bound"], out["partial_gangs"]) == (1, 4, 0)


# ---- Strict and NonStrict (Koordinator) --------------------------------------------------------
def test_nonstrict_holds_partial_placements_until_the_timeout(tmp_path: Path) -> None:
    nodes = [{"name": "n", "cpu": "64", "memory": "256Gi", "gpus": 2}]
    later = {"name": "later", "arrival": 5, "duration": 10, "cpu": "1", "memory": "1Gi", "gpus": 1}

    def workload(mode: str) -> dict[str, Any]:
        g = gang("big", [workers(3)], minMember=3, mode=mode, timeoutSeconds=30)
        return {
            "nodes": nodes,
            "gangs": [g],
            "pods": [later],
            "settings": {"backoffMaxSeconds": 60, "backoffInitialSeconds": 60},
        }

    strict = run(tmp_path, workload("Strict"))
    assert strict["plain_pods_bound"] == 1
    assert strict["permit_timeouts"] == 0
    assert strict["wait_seconds_p99"] == 0.0, "Strict holds nothing, so the pod starts at once"
    nonstrict = run(tmp_path, workload("NonStrict"))
    assert nonstrict["permit_timeouts"] >= 1, "the partial gang was released at its deadline"
    assert nonstrict["plain_pods_bound"] == 1
    assert nonstrict["wait_seconds_p99"] >= 25.0, "the pod waited for the partial hold to end"
    assert nonstrict["gangs_bound"] == 0 and nonstrict["overcommitted_nodes"] == 0


# ---- gang groups (Koordinator GangGroup) ----------------------------------------------------
def test_a_gang_group_binds_together_or_not_at_all(tmp_path: Path) -> None:
    nodes = [{"name": "n", "cpu": "64", "memory": "256Gi", "gpus": 4}]
    a = gang("a", [workers(2)], gangGroup=["a", "b"], timeoutSeconds=20)
    b = gang("b", [workers(2)], gangGroup=["a", "b"], timeoutSeconds=20, arrival=3)
    out = run(tmp_path, {"nodes": nodes, "gangs": [a, b]})
    assert out["gangs_bound"] == 2 and out["wait_seconds_p99"] >= 3.0
    too_big = gang("b", [workers(4)], gangGroup=["a", "b"], timeoutSeconds=20, arrival=3)
    out = run(tmp_path, {"nodes": nodes, "gangs": [a, too_big]})
    assert out["gangs_bound"] == 0, "a is satisfied alone but its group is not"
    assert out["permit_timeouts"] == 0, "a group that can never fit holds nothing"
    # The totals fit but the nodes do not (3-GPU pods on 2-GPU nodes): a reserves, waits for
    # b, and releases everything at its deadline.
    nodes2 = [{"name": "n", "count": 4, "cpu": "64", "memory": "256Gi", "gpus": 2}]
    frag = gang("b", [workers(2, gpus=3)], gangGroup=["a", "b"], timeoutSeconds=20, arrival=3)
    out = run(tmp_path, {"nodes": nodes2, "gangs": [a, frag]})
    assert out["gangs_bound"] == 0 and out["permit_timeouts"] >= 1
    assert out["partial_gangs"] == 0


# ---- task topology (Volcano) ---------------------------------------------------------------
def test_topology_puts_ps_and_workers_together(tmp_path: Path) -> None:
    workload = yaml.safe_load((EXAMPLES / "ps-worker.yaml").read_text())
    with_topology = run(tmp_path, workload)
    workload["settings"] = {"scoreWeights": {**CoreConfig().score_weights, "TaskTopology": 0}}
    without = run(tmp_path, workload)
    assert with_topology["gangs_bound"] == without["gangs_bound"] == 2
    assert with_topology["cross_node_affine_pairs"] < without["cross_node_affine_pairs"]


# ---- after the gang has started (kube-batch, Koordinator) ------------------------------------
def _core(once_alone: bool) -> tuple[Any, list[Pod]]:
    from gangsched.core.scheduler import Scheduler

    s = Scheduler(CoreConfig(), FakeClock(10.0))
    s.node_upsert(Node("n", {"cpu": 64000, "memory": 256 * GI, "pods": 110, GPU: 8}))
    s.gang_upsert(GangSpec("ns/g", 3, once_satisfied_alone=once_alone))
    req = {"cpu": 1000, "memory": GI, "pods": 1, GPU: 1}
    pods = [Pod(f"u{i}", "ns", f"g-{i}", dict(req), group="ns/g") for i in range(3)]
    for p in pods:
        s.pod_upsert(p)
    (bind,) = [d for d in s.run_until_idle() if isinstance(d, BindGang)]
    for b in bind.bindings:
        p = next(x for x in pods if x.uid == b.pod.uid)
        s.pod_upsert(replace(p, node_name=b.node, phase=PodPhase.RUNNING))
    s.run_until_idle()
    return s, pods


def test_succeeded_members_count_toward_the_gang() -> None:
    s, pods = _core(once_alone=False)
    s.pod_upsert(replace(pods[0], node_name="n", phase=PodPhase.SUCCEEDED))
    s.pod_delete(pods[1].uid)
    s.pod_upsert(Pod("u9", "ns", "g-9", {"cpu": 1000, "pods": 1, GPU: 1}, group="ns/g"))
    # held: one succeeded + one running + the replacement = 3 = minMember
    binds = [d for d in s.run_until_idle() if isinstance(d, BindGang)]
    assert [b.pod.name for d in binds for b in d.bindings] == ["g-9"]


def test_replacement_of_a_running_gang_schedules_alone_when_configured() -> None:
    for alone, expect in ((True, ["g-9"]), (False, [])):
        s, pods = _core(once_alone=alone)
        s.pod_delete(pods[0].uid)
        s.pod_delete(pods[1].uid)
        s.pod_upsert(Pod("u9", "ns", "g-9", {"cpu": 1000, "pods": 1, GPU: 1}, group="ns/g"))
        binds = [d for d in s.run_until_idle() if isinstance(d, BindGang)]
        assert [b.pod.name for d in binds for b in d.bindings] == expect, alone
