"""gangsched against the real kube-scheduler v1.36, one generated pod at a time.

Two identical fresh control planes: the same labelled kwok nodes (zones, racks, hostnames,
GPUs, taints, a cordon), the same namespaces and the same pods already bound with
``spec.nodeName``. kube-scheduler runs against one, gangsched against the other. Each case is
one pod with seeded random constraints (resources, node selector and affinity, tolerations,
required and preferred pod (anti-)affinity with namespaces and namespace selectors, spread
constraints, host ports), many of them impossible to place. It is submitted to both and each
verdict awaited: bound, or ``PodScheduled=False`` with reason ``Unschedulable`` (the condition
kube-scheduler writes, and gangsched writes for a pod it cannot place). The two must agree on
schedulable versus unschedulable, and every placement must pass the independent checker of
``tests.support.checker``. The pod is then deleted on both, so the next case sees the same
state again. Disagreements are collected and reported together at the end, each with the pod,
both verdicts and both messages.

Needs ``kube-scheduler`` beside kube-apiserver (hack/control-plane.sh builds it; the test is
skipped when the binary is absent). The default run is 30 cases; the larger run:

    GANGSCHED_DIFF_CASES=500 GANGSCHED_CP_BIN=$(bash hack/control-plane.sh) \\
        .venv/bin/python -m pytest -q -s -p no:cacheprovider tests/e2e/test_differential.py

``GANGSCHED_DIFF_SEED`` picks another cluster and another sequence of pods.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import ssl
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.controlplane import find_binaries
from tests.support.checker import Cluster, check_pod
from tests.support.specs import (
    NAMESPACES,
    ZONE,
    ZONES,
    NodeSpec,
    RandomChooser,
    node_json,
    node_spec,
    pod_json,
    pod_spec,
)

from .conftest import REPO, SchedulerProcess
from .kube import wait_for
from .kube_scheduler import BINARY, KubeScheduler

Obj = dict[str, Any]

CASES = int(os.environ.get("GANGSCHED_DIFF_CASES", "30"))
SEED = int(os.environ.get("GANGSCHED_DIFF_SEED", "1"))
VERDICT_TIMEOUT = 30.0
N_NODES = 8
N_EXISTING = 20
# Taints some nodes always have, so that every world has some to tolerate.
FORCED_TAINTS: dict[int, Obj] = {
    1: {"key": "dedicated", "value": "train", "effect": "NoSchedule"},
    6: {"key": "maintenance", "value": "", "effect": "NoExecute"},
}


# ---- a small client ----------------------------------------------------------------------------


class Api:
    """JSON over HTTPS with the control plane's admin token (quicker than kubectl)."""

    def __init__(self, cp: ControlPlane) -> None:
        self._base = cp.server
        self._token = cp.token
        self._ctx = ssl.create_default_context(cafile=str(cp.ca_file))

    def call(
        self, method: str, path: str, body: object = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(
            self._base + path,
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self._token}", "Content-Type": content_type},
        )
        try:
            with urllib.request.urlopen(req, timeout=30, context=self._ctx) as resp:
                return int(resp.status), json.loads(resp.read() or b"null")
        except urllib.error.HTTPError as e:
            with e:
                text = e.read().decode(errors="replace")
            try:
                return e.code, json.loads(text)
            except ValueError:
                return e.code, text

    def get(self, path: str) -> Any:
        code, body = self.call("GET", path)
        if code == 404:
            return None
        assert code == 200, f"GET {path}: {code} {body}"
        return body

    def create(self, path: str, body: Obj) -> Obj:
        code, out = self.call("POST", path, body)
        assert code == 201, f"POST {path}: {code} {out}\n{json.dumps(body, indent=1)}"
        created: Obj = out
        return created

    def delete_now(self, path: str) -> None:
        code, out = self.call("DELETE", path, {"gracePeriodSeconds": 0})
        assert code in (200, 202, 404), f"DELETE {path}: {code} {out}"


def _pods_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


# ---- the generated world -----------------------------------------------------------------------


@dataclass
class World:
    nodes: list[NodeSpec]
    existing: list[Obj]  # pods bound with spec.nodeName, as submitted

    @classmethod
    def generate(cls, seed: int) -> World:
        c = RandomChooser(random.Random(seed))
        nodes = []
        for i in range(N_NODES):
            node = node_spec(c, f"n{i}")
            node.labels.pop(ZONE, None)
            if i < N_NODES - 1:  # the last node has no zone label
                node.labels[ZONE] = ZONES[i % len(ZONES)]
            node.unschedulable = i == 3
            node.pods = 4 if i == 5 else 110
            if i in FORCED_TAINTS:
                node.taints = [FORCED_TAINTS[i]]
            nodes.append(node)
        names = [n.name for n in nodes]
        node_objs = [node_json(n) for n in nodes]
        cluster = Cluster(node_objs, [], NAMESPACES)
        existing: list[Obj] = []
        for i in range(N_EXISTING):
            labels, spec = pod_spec(c, c.pick(("old", "svc", "train")), names, constraints=50)
            spec.pop("topologySpreadConstraints", None)
            ns = c.pick(("team", "team", "other", "third"))
            pod = pod_json(f"e{i}", ns, labels, spec, scheduler="default-scheduler")
            # Bound where the kubelet would admit it: resources and host ports free.
            fits = [
                n
                for n in names
                if not any(
                    v.plugin in ("NodeResourcesFit", "NodePorts")
                    for v in check_pod(cluster, pod, n)
                )
            ]
            if not fits:
                continue
            # Uneven on purpose, so that spread constraints have a skew to refuse.
            crowded = [n for n in fits if n in names[::3]]
            pod["spec"]["nodeName"] = c.pick(crowded if crowded and c.chance(50) else fits)
            existing.append(pod)
            cluster = Cluster(node_objs, existing, NAMESPACES)
        return cls(nodes, existing)

    def case(self, seed: int, index: int) -> Obj:
        """The index-th pod to submit: its own seed, so a case replays alone."""
        c = RandomChooser(random.Random(f"{seed}/{index}"))
        job = c.pick(("train", "svc", f"case{index}", f"case{index}"))
        labels, spec = pod_spec(c, job, [n.name for n in self.nodes])
        return pod_json(f"c{index}", c.pick(("team", "team", "other", "third")), labels, spec)


def _for_create(pod: Obj, scheduler: str) -> Obj:
    body = copy.deepcopy(pod)
    body["metadata"] = {
        k: v for k, v in body["metadata"].items() if k in ("name", "namespace", "labels")
    }
    body.pop("status", None)
    body["spec"]["schedulerName"] = scheduler
    return body


# ---- the two sides -----------------------------------------------------------------------------


@dataclass
class Side:
    name: str
    cp: ControlPlane
    api: Api
    scheduler: str  # the pods' schedulerName
    process: KubeScheduler | SchedulerProcess

    def state(self) -> Cluster:
        """Nodes, counted pods and namespaces as this side's API server has them."""
        nodes = self.api.get("/api/v1/nodes")["items"]
        pods = self.api.get("/api/v1/pods")["items"]
        namespaces = {
            n["metadata"]["name"]: n["metadata"].get("labels") or {}
            for n in self.api.get("/api/v1/namespaces")["items"]
        }
        return Cluster(nodes, pods, namespaces)


def _build(side: Side, world: World) -> None:
    api = side.api
    for ns, labels in NAMESPACES.items():
        api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}},
        )
    for n in world.nodes:
        side.cp.add_fake_node(
            n.name, n.cpu, f"{n.memory_gi}Gi", n.gpus, labels=n.labels, pods=n.pods, taints=n.taints
        )
        if n.unschedulable:
            code, out = api.call(
                "PATCH",
                f"/api/v1/nodes/{n.name}",
                {"spec": {"unschedulable": True}},
                "application/merge-patch+json",
            )
            assert code == 200, out
    for p in world.existing:
        api.create(_pods_path(p["metadata"]["namespace"]), _for_create(p, "default-scheduler"))

    def ready() -> bool:
        items = api.get("/api/v1/nodes")["items"]
        return len(items) == len(world.nodes) and all(
            any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (n.get("status") or {}).get("conditions") or []
            )
            for n in items
        )

    wait_for(f"{side.name}: nodes Ready", ready, timeout=60)


def _start_plane(with_crds: bool) -> ControlPlane:
    cp = ControlPlane()
    cp.start()
    try:
        if with_crds:
            cp.apply(REPO / "crds")
        cp.start_kwok()
    except BaseException:
        cp.stop()
        raise
    return cp


@pytest.fixture(scope="module")
def world() -> World:
    return World.generate(SEED)


@pytest.fixture(scope="module")
def sides(world: World, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    bin_dir = find_binaries()  # builds them (hack/control-plane.sh) unless GANGSCHED_CP_BIN
    if not os.access(bin_dir / BINARY, os.X_OK):
        pytest.skip(
            f"{BINARY} not found in {bin_dir}: hack/control-plane.sh builds it beside "
            "kube-apiserver (point GANGSCHED_CP_BIN at its output)"
        )
    logs = tmp_path_factory.mktemp("differential")
    ref_cp = _start_plane(with_crds=False)
    ours_cp: ControlPlane | None = None
    ref: Side | None = None
    ours: Side | None = None
    try:
        ours_cp = _start_plane(with_crds=True)
        ref = Side(
            "kube-scheduler",
            ref_cp,
            Api(ref_cp),
            "default-scheduler",
            KubeScheduler(ref_cp, logs / "kube-scheduler.log"),
        )
        ours = Side(
            "gangsched",
            ours_cp,
            Api(ours_cp),
            "gangsched",
            SchedulerProcess(ours_cp, logs / "gangsched.log"),
        )
        for side in (ref, ours):
            _build(side, world)
            side.process.start()
        warm = pod_json("warm-up", "third", {}, {"containers": [{"name": "c", "image": "x"}]})
        for side in (ref, ours):
            side.api.create(_pods_path("third"), _for_create(warm, side.scheduler))
        for side in (ref, ours):
            wait_for(
                f"{side.name} to bind a pod with no constraints",
                functools.partial(_node_of, side, "third", "warm-up"),
                timeout=90,
            )
        _delete_everywhere((ref, ours), "third", "warm-up")
        yield ref, ours
    finally:
        for started in (ref, ours):
            if started is not None:
                started.process.stop()
        if ours_cp is not None:
            ours_cp.stop()
        ref_cp.stop()


# ---- verdicts ----------------------------------------------------------------------------------


@dataclass
class Verdict:
    outcome: str  # "bound" | "unschedulable" | "none" (no verdict in time)
    node: str = ""
    message: str = ""
    pod: Obj | None = None

    def __str__(self) -> str:
        if self.outcome == "bound":
            return f"bound to {self.node}"
        return f"{self.outcome}: {self.message}"


def _verdict_of(pod: Obj | None) -> Verdict | None:
    if pod is None:
        return None
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return Verdict("bound", node=node, pod=pod)
    for c in (pod.get("status") or {}).get("conditions") or []:
        if (c.get("type"), c.get("status"), c.get("reason")) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        ):
            return Verdict("unschedulable", message=c.get("message", ""), pod=pod)
    return None


def _await_verdicts(sides: tuple[Side, ...], ns: str, name: str) -> list[Verdict]:
    found: list[Verdict | None] = [None] * len(sides)
    last: list[Obj | None] = [None] * len(sides)
    deadline = time.monotonic() + VERDICT_TIMEOUT
    while time.monotonic() < deadline and any(v is None for v in found):
        for i, side in enumerate(sides):
            if found[i] is None:
                last[i] = side.api.get(_pods_path(ns, name))
                found[i] = _verdict_of(last[i])
        if any(v is None for v in found):
            time.sleep(0.1)
    return [
        v if v is not None else Verdict("none", message="no verdict in time", pod=last[i])
        for i, v in enumerate(found)
    ]


def _delete_everywhere(sides: tuple[Side, ...], ns: str, name: str) -> None:
    for side in sides:
        side.api.delete_now(_pods_path(ns, name))
    for side in sides:
        wait_for(
            f"{ns}/{name} gone from {side.name}",
            functools.partial(_gone, side, ns, name),
            timeout=30,
        )


def _node_of(side: Side, ns: str, name: str) -> str:
    pod = side.api.get(_pods_path(ns, name)) or {}
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _gone(side: Side, ns: str, name: str) -> bool:
    return side.api.get(_pods_path(ns, name)) is None


def _reasons(message: str) -> Counter[str]:
    """kube-scheduler's "0/8 nodes are available: 2 Insufficient cpu, 6 node(s) ...":
    the reasons with their node counts."""
    out: Counter[str] = Counter()
    _, _, tail = message.partition("are available: ")
    for part in tail.split(". ")[0].rstrip(".").split(", "):
        count, _, reason = part.strip().partition(" ")
        if count.isdigit():
            out[reason.rstrip(".")] += int(count)
    return out


def _check_placement(side: Side, before: Cluster, verdict: Verdict) -> list[str]:
    assert verdict.pod is not None
    return [f"{side.name}: {v}" for v in check_pod(before, verdict.pod, verdict.node)]


# ---- the test ----------------------------------------------------------------------------------


def test_gangsched_agrees_with_kube_scheduler(world: World, sides: tuple[Side, Side]) -> None:
    ref, ours = sides
    before = {s.name: s.state() for s in sides}
    problems: list[str] = []
    tally = {"bound": 0, "unschedulable": 0}
    reasons: Counter[str] = Counter()
    for index in range(CASES):
        pod = world.case(SEED, index)
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for side in sides:
            side.api.create(_pods_path(ns), _for_create(pod, side.scheduler))
        verdicts = _await_verdicts(sides, ns, name)
        findings: list[str] = []
        if verdicts[0].outcome != verdicts[1].outcome or "none" in (
            verdicts[0].outcome,
            verdicts[1].outcome,
        ):
            findings.append("they disagree")
        for side, v in zip(sides, verdicts, strict=True):
            if v.outcome == "bound":
                findings += _check_placement(side, before[side.name], v)
        if findings:
            problems.append(
                f"case {index} ({ns}/{name}): " + "; ".join(findings) + "\n"
                f"  kube-scheduler: {verdicts[0]}\n"
                f"  gangsched:      {verdicts[1]}\n"
                f"  pod spec: {json.dumps(_for_create(pod, 'default-scheduler'))}"
            )
        elif verdicts[0].outcome in tally:
            tally[verdicts[0].outcome] += 1
            reasons.update(_reasons(verdicts[0].message))
        _delete_everywhere(sides, ns, name)
    assert ours.process.alive(), f"gangsched exited:\n{ours.process.tail()}"
    assert ref.process.alive(), f"kube-scheduler exited:\n{ref.process.tail()}"
    print(f"differential: {CASES} cases, agreed {tally}, {len(problems)} problem(s)")
    print("kube-scheduler's reasons in agreed unschedulable cases (node counts summed):")
    for reason, n in reasons.most_common():
        print(f"  {n:5d}  {reason}")
    assert not problems, (
        f"{len(problems)} of {CASES} cases (seed {SEED}) went wrong:\n\n" + "\n\n".join(problems)
    )


def test_the_generated_world_is_replayable() -> None:
    """The same seed gives the same cluster and the same pods (a case can be rerun alone)."""
    a, b = World.generate(SEED), World.generate(SEED)
    assert a == b
    assert [a.case(SEED, i) for i in range(5)] == [b.case(SEED, i) for i in range(5)]
    assert a.case(SEED, 3) == World.generate(SEED).case(SEED, 3)
