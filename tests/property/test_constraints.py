"""Every placement the core commits satisfies every required constraint.

Random clusters (nodes with zone, rack and hostname labels, taints, cordons, GPUs), pods
already bound there (labels, required anti-affinity, host ports; some finished, some
terminating) and gangs whose pods carry random required and preferred pod (anti-)affinity,
spread constraints, node selectors and affinity, tolerations and host ports, all as the
Kubernetes API returns them. They go through the adapter's translation (``node_from``,
``pod_from``, ``podgroup_from``) into the core's ``Scheduler``, which runs until it is idle.
Each gang cycle's new reservations (which every ``BindGang`` is made of) are checked by the
independent checker of ``tests.support.checker`` against the pods counted before the cycle,
members of one gang among themselves included: some order of placing them one by one must
pass kube-scheduler's filters.

The checker is itself checked first, on hand-written cases, so a checker that lets
everything through cannot make the property pass.

More examples: ``GANGSCHED_CONSTRAINT_EXAMPLES=2000 .venv/bin/python -m pytest -q
-p no:cacheprovider tests/property/test_constraints.py``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from gangsched.api.node import node_from
from gangsched.api.pod import pod_from
from gangsched.api.podgroup import podgroup_from
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, GangUnschedulable
from gangsched.core.scheduler import Scheduler
from tests.support.checker import Cluster, Violation, check_gang, check_pod
from tests.support.specs import (
    GPU,
    GROUP_LABEL,
    HOSTNAME,
    NAMESPACES,
    RACK,
    ZONE,
    DrawChooser,
    NodeSpec,
    as_created,
    node_json,
    node_spec,
    pod_json,
    pod_spec,
)

Obj = dict[str, Any]

EXAMPLES = int(os.environ.get("GANGSCHED_CONSTRAINT_EXAMPLES", "100"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    report_multiple_bugs=False,
    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---- the checker on hand-written cases -------------------------------------------------------


def _node(
    name: str,
    zone: str | None = "z0",
    *,
    rack: str | None = None,
    gpus: int = 4,
    cpu: int = 16,
    pods: int = 110,
    taints: list[Obj] | None = None,
    unschedulable: bool = False,
    **labels: str,
) -> Obj:
    all_labels = {HOSTNAME: name, **labels}
    if zone is not None:
        all_labels[ZONE] = zone
    if rack is not None:
        all_labels[RACK] = rack
    return node_json(
        NodeSpec(name, cpu, 64, gpus, pods, all_labels, list(taints or []), unschedulable)
    )


def _pod(
    name: str,
    node: str = "",
    *,
    ns: str = "team",
    labels: dict[str, str] | None = None,
    gpus: int = 0,
    cpu: str = "1",
    phase: str = "Running",
    **spec: Any,
) -> Obj:
    requests = {"cpu": cpu, "memory": "1Gi", **({GPU: str(gpus)} if gpus else {})}
    ports = spec.pop("ports", None)
    container: Obj = {"name": "c", "image": "x", "resources": {"requests": requests}}
    if ports:
        container["ports"] = ports
    body = {"containers": [container], **spec}
    return pod_json(
        name,
        ns,
        dict(labels or {}),
        body,
        node=node,
        phase=phase if node else "Pending",
        scheduler="default-scheduler",
    )


def _term(key: str, ns_field: Obj | None = None, **match: str) -> Obj:
    return {"topologyKey": key, "labelSelector": {"matchLabels": match}, **(ns_field or {})}


def _anti(*terms: Obj) -> Obj:
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def _aff(*terms: Obj) -> Obj:
    return {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def _spread(key: str, max_skew: int = 1, **extra: Any) -> list[Obj]:
    return [
        {
            "maxSkew": max_skew,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "x"}},
            **extra,
        }
    ]


TWO_ZONES = [_node("a0", "z0"), _node("a1", "z0"), _node("b0", "z1"), _node("b1", "z1")]


@dataclass
class CheckerCase:
    name: str
    nodes: list[Obj]
    existing: list[Obj]
    pod: Obj
    node: str
    broken: set[str]  # plugins whose constraint the placement breaks


CHECKER_CASES = [
    CheckerCase("plain pod fits", TWO_ZONES, [], _pod("p"), "a0", set()),
    CheckerCase(
        "nodeSelector", TWO_ZONES, [], _pod("p", nodeSelector={ZONE: "z1"}), "a0", {"NodeAffinity"}
    ),
    CheckerCase(
        "node affinity Gt on a label",
        [_node("n", gpucount="4")],
        [],
        _pod(
            "p",
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "gpucount", "operator": "Gt", "values": ["4"]}
                                ]
                            }
                        ]
                    }
                }
            },
        ),
        "n",
        {"NodeAffinity"},
    ),
    CheckerCase(
        "NoSchedule taint",
        [_node("n", taints=[{"key": "k", "value": "v", "effect": "NoSchedule"}])],
        [],
        _pod("p"),
        "n",
        {"TaintToleration"},
    ),
    CheckerCase(
        "PreferNoSchedule taint is not a constraint",
        [_node("n", taints=[{"key": "k", "value": "v", "effect": "PreferNoSchedule"}])],
        [],
        _pod("p"),
        "n",
        set(),
    ),
    CheckerCase(
        "toleration with the wrong value",
        [_node("n", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])],
        [],
        _pod("p", tolerations=[{"key": "k", "operator": "Equal", "value": "w"}]),
        "n",
        {"TaintToleration"},
    ),
    CheckerCase(
        "cordoned node",
        [_node("n", unschedulable=True)],
        [],
        _pod("p"),
        "n",
        {"NodeUnschedulable"},
    ),
    CheckerCase(
        "cordoned node, tolerated",
        [_node("n", unschedulable=True)],
        [],
        _pod("p", tolerations=[{"operator": "Exists"}]),
        "n",
        set(),
    ),
    CheckerCase(
        "GPUs",
        [_node("n", gpus=4)],
        [_pod("e", "n", gpus=3)],
        _pod("p", gpus=2),
        "n",
        {"NodeResourcesFit"},
    ),
    CheckerCase(
        "a finished pod frees its GPUs",
        [_node("n", gpus=4)],
        [_pod("e", "n", gpus=3, phase="Succeeded")],
        _pod("p", gpus=2),
        "n",
        set(),
    ),
    CheckerCase(
        "pod count",
        [_node("n", pods=1)],
        [_pod("e", "n", cpu="0")],
        _pod("p", cpu="0"),
        "n",
        {"NodeResourcesFit"},
    ),
    CheckerCase(
        "host port, both on every address",
        TWO_ZONES,
        [_pod("e", "a0", ports=[{"containerPort": 1, "hostPort": 80}])],
        _pod("p", ports=[{"containerPort": 2, "hostPort": 80, "protocol": "TCP"}]),
        "a0",
        {"NodePorts"},
    ),
    CheckerCase(
        "host port, different addresses",
        TWO_ZONES,
        [_pod("e", "a0", ports=[{"containerPort": 1, "hostPort": 80, "hostIP": "10.0.0.1"}])],
        _pod("p", ports=[{"containerPort": 2, "hostPort": 80, "hostIP": "10.0.0.2"}]),
        "a0",
        set(),
    ),
    CheckerCase(
        "host port, one address against every address",
        TWO_ZONES,
        [_pod("e", "a0", ports=[{"containerPort": 1, "hostPort": 80, "hostIP": "10.0.0.1"}])],
        _pod("p", ports=[{"containerPort": 2, "hostPort": 80}]),
        "a0",
        {"NodePorts"},
    ),
    CheckerCase(
        "host port, other protocol",
        TWO_ZONES,
        [_pod("e", "a0", ports=[{"containerPort": 1, "hostPort": 80, "protocol": "UDP"}])],
        _pod("p", ports=[{"containerPort": 2, "hostPort": 80}]),
        "a0",
        set(),
    ),
    CheckerCase(
        "host port of a hostNetwork pod",
        TWO_ZONES,
        [_pod("e", "a0", ports=[{"containerPort": 80, "hostPort": 80}])],
        _pod("p", hostNetwork=True, ports=[{"containerPort": 80}]),
        "a0",
        {"NodePorts"},
    ),
    CheckerCase(
        "anti-affinity, same zone",
        TWO_ZONES,
        [_pod("e", "a1", labels={"app": "x"})],
        _pod("p", affinity=_anti(_term(ZONE, app="x"))),
        "a0",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "anti-affinity, other zone",
        TWO_ZONES,
        [_pod("e", "b1", labels={"app": "x"})],
        _pod("p", affinity=_anti(_term(ZONE, app="x"))),
        "a0",
        set(),
    ),
    CheckerCase(
        "anti-affinity, other namespace",
        TWO_ZONES,
        [_pod("e", "a0", ns="other", labels={"app": "x"})],
        _pod("p", affinity=_anti(_term(ZONE, app="x"))),
        "a0",
        set(),
    ),
    CheckerCase(
        "anti-affinity, namespace selected by labels",
        TWO_ZONES,
        [_pod("e", "a0", ns="other", labels={"app": "x"})],
        _pod(
            "p",
            affinity=_anti(
                _term(ZONE, {"namespaceSelector": {"matchLabels": {"env": "dev"}}}, app="x")
            ),
        ),
        "a0",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "anti-affinity, node without the topology key",
        [_node("n", None), _node("m", None)],
        [_pod("e", "m", labels={"app": "x"})],
        _pod("p", affinity=_anti(_term(ZONE, app="x"))),
        "n",
        set(),
    ),
    CheckerCase(
        "an existing pod's anti-affinity repels the incoming pod",
        TWO_ZONES,
        [_pod("e", "a1", affinity=_anti(_term(ZONE, app="x")))],
        _pod("p", labels={"app": "x"}),
        "a0",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "an existing pod's anti-affinity, namespace selector on the incoming pod's namespace",
        TWO_ZONES,
        [
            _pod(
                "e",
                "a1",
                ns="other",
                affinity=_anti(
                    _term(ZONE, {"namespaceSelector": {"matchLabels": {"env": "prod"}}}, app="x")
                ),
            )
        ],
        _pod("p", labels={"app": "x"}),
        "a0",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "affinity, matching pod in the zone",
        TWO_ZONES,
        [_pod("e", "a1", labels={"app": "x"})],
        _pod("p", affinity=_aff(_term(ZONE, app="x"))),
        "a0",
        set(),
    ),
    CheckerCase(
        "affinity, matching pod only in another zone",
        TWO_ZONES,
        [_pod("e", "b1", labels={"app": "x"})],
        _pod("p", affinity=_aff(_term(ZONE, app="x"))),
        "a0",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "affinity, first pod matching its own term",
        TWO_ZONES,
        [],
        _pod("p", labels={"app": "x"}, affinity=_aff(_term(ZONE, app="x"))),
        "a0",
        set(),
    ),
    CheckerCase(
        "affinity, first pod not matching its own term",
        TWO_ZONES,
        [],
        _pod("p", affinity=_aff(_term(ZONE, app="x"))),
        "a0",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "affinity, first pod on a node without the key",
        [_node("n", None)],
        [],
        _pod("p", labels={"app": "x"}, affinity=_aff(_term(ZONE, app="x"))),
        "n",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "affinity, two terms: a pod must match both to count",
        TWO_ZONES,
        [_pod("e1", "a1", labels={"app": "x"}), _pod("e2", "a1", labels={"tier": "y"})],
        _pod("p", affinity=_aff(_term(ZONE, app="x"), _term(ZONE, tier="y"))),
        "a0",
        {"InterPodAffinity"},
    ),
    CheckerCase(
        "spread, zone already ahead",
        TWO_ZONES,
        [_pod("e", "a1", labels={"app": "x"})],
        _pod("p", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE)),
        "a0",
        {"PodTopologySpread"},
    ),
    CheckerCase(
        "spread, the other zone",
        TWO_ZONES,
        [_pod("e", "a1", labels={"app": "x"})],
        _pod("p", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE)),
        "b0",
        set(),
    ),
    CheckerCase(
        "spread, other namespace does not count",
        TWO_ZONES,
        [_pod("e", "a1", ns="other", labels={"app": "x"})],
        _pod("p", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE)),
        "a0",
        set(),
    ),
    CheckerCase(
        "spread, terminating pod does not count",
        TWO_ZONES,
        [
            {
                **_pod("e", "a1", labels={"app": "x"}),
                "metadata": {
                    **_pod("e", "a1", labels={"app": "x"})["metadata"],
                    "deletionTimestamp": "2025-01-01T00:00:00Z",
                },
            }
        ],
        _pod("p", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE)),
        "a0",
        set(),
    ),
    CheckerCase(
        "spread, minDomains above the domains there are",
        TWO_ZONES,
        [_pod("e1", "a1", labels={"app": "x"}), _pod("e2", "b1", labels={"app": "x"})],
        _pod("p", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE, minDomains=3)),
        "b0",
        {"PodTopologySpread"},
    ),
    CheckerCase(
        "spread, domains outside the node selector do not count (nodeAffinityPolicy Honor)",
        [
            _node("a1", "z0", pool="main"),
            _node("b0", "z1", pool="main"),
            _node("b1", "z1", pool="main"),
            _node("c0", "z2", pool="other"),
        ],
        [_pod("e1", "a1", labels={"app": "x"}), _pod("e2", "b1", labels={"app": "x"})],
        _pod(
            "p",
            labels={"app": "x"},
            nodeSelector={"pool": "main"},
            topologySpreadConstraints=_spread(ZONE),
        ),
        "b0",
        set(),
    ),
    CheckerCase(
        "spread, nodeAffinityPolicy Ignore counts the empty zone",
        [*TWO_ZONES, _node("c0", "z2", pool="other")],
        [_pod("e1", "a1", labels={"app": "x"}), _pod("e2", "b1", labels={"app": "x"})],
        _pod(
            "p",
            labels={"app": "x"},
            topologySpreadConstraints=_spread(ZONE, nodeAffinityPolicy="Ignore"),
            affinity={
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "pool", "operator": "DoesNotExist"}]}
                        ]
                    }
                }
            },
        ),
        "b0",
        {"PodTopologySpread"},
    ),
    CheckerCase(
        "spread, nodeTaintsPolicy Honor leaves out the tainted zone",
        [
            *TWO_ZONES,
            _node("c0", "z2", taints=[{"key": "k", "value": "", "effect": "NoSchedule"}]),
        ],
        [_pod("e1", "a1", labels={"app": "x"}), _pod("e2", "b1", labels={"app": "x"})],
        _pod(
            "p",
            labels={"app": "x"},
            topologySpreadConstraints=_spread(ZONE, nodeTaintsPolicy="Honor"),
        ),
        "b0",
        set(),
    ),
    CheckerCase(
        "spread, node without the topology key",
        [*TWO_ZONES, _node("n", None)],
        [],
        _pod("p", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE)),
        "n",
        {"PodTopologySpread"},
    ),
    CheckerCase(
        "spread, an empty selector counts no pod",
        TWO_ZONES,
        [_pod("e1", "a1", labels={"app": "x"}), _pod("e2", "a0", labels={"app": "x"})],
        _pod(
            "p",
            labels={"app": "x"},
            topologySpreadConstraints=[{**_spread(ZONE)[0], "labelSelector": {}}],
        ),
        "a0",
        set(),
    ),
    CheckerCase(
        "spread, matchLabelKeys narrows the selector",
        TWO_ZONES,
        [_pod("e", "a1", labels={"app": "x", "job": "other"})],
        _pod(
            "p",
            labels={"app": "x", "job": "mine"},
            topologySpreadConstraints=_spread(ZONE, matchLabelKeys=["job"]),
        ),
        "a0",
        set(),
    ),
]


@pytest.mark.parametrize("case", CHECKER_CASES, ids=[c.name for c in CHECKER_CASES])
def test_checker_cases(case: CheckerCase) -> None:
    cluster = Cluster(case.nodes, case.existing, NAMESPACES)
    found = check_pod(cluster, case.pod, case.node)
    assert {v.plugin for v in found} == case.broken, [str(v) for v in found]


def test_checker_gang_anti_affinity_among_members() -> None:
    cluster = Cluster(TWO_ZONES, [], NAMESPACES)
    members = [
        _pod(f"m{i}", labels={"job": "j"}, affinity=_anti(_term(HOSTNAME, job="j")))
        for i in range(2)
    ]
    found = check_gang(cluster, [(members[0], "a0"), (members[1], "a0")])
    assert {v.plugin for v in found} == {"InterPodAffinity"}
    assert {v.pod for v in found} == {"team/m0", "team/m1"}
    assert check_gang(cluster, [(members[0], "a0"), (members[1], "a1")]) == []


def test_checker_gang_host_ports_and_resources_among_members() -> None:
    cluster = Cluster([_node("n", gpus=4)], [], NAMESPACES)
    port = [{"containerPort": 1, "hostPort": 29500}]
    a, b = _pod("a", ports=port), _pod("b", ports=port)
    assert {v.plugin for v in check_gang(cluster, [(a, "n"), (b, "n")])} == {"NodePorts"}
    c, d = _pod("c", gpus=3), _pod("d", gpus=2)
    assert {v.plugin for v in check_gang(cluster, [(c, "n"), (d, "n")])} == {"NodeResourcesFit"}


def test_checker_gang_judges_spread_in_some_order() -> None:
    """A member's spread is judged against the members placed before it: placing the
    constrained member first is a valid one-by-one order, so the set passes."""
    cluster = Cluster(TWO_ZONES, [], NAMESPACES)
    constrained = _pod("m1", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE))
    free = _pod("m2", labels={"app": "x"})
    assert check_gang(cluster, [(free, "a0"), (constrained, "a1")]) == []
    # Two constrained members in one zone: whichever goes second breaks the skew.
    other = _pod("m3", labels={"app": "x"}, topologySpreadConstraints=_spread(ZONE))
    found = check_gang(cluster, [(constrained, "a0"), (other, "a1")])
    assert {v.plugin for v in found} == {"PodTopologySpread"}


def test_checker_gang_affinity_needs_a_first_member() -> None:
    """Each member's affinity selects only the other: neither can go first."""
    cluster = Cluster(TWO_ZONES, [], NAMESPACES)
    a = _pod("a", labels={"app": "a"}, affinity=_aff(_term(ZONE, app="b")))
    b = _pod("b", labels={"app": "b"}, affinity=_aff(_term(ZONE, app="a")))
    assert check_gang(cluster, [(a, "a0"), (b, "a1")]) != []
    # A member matching its own term goes first; the other follows into its zone.
    c = _pod("c", labels={"app": "b"}, affinity=_aff(_term(ZONE, app="b")))
    assert check_gang(cluster, [(a, "a0"), (c, "a1")]) == []
    assert check_gang(cluster, [(a, "b0"), (c, "a1")]) != []


# ---- the property ----------------------------------------------------------------------------


@dataclass
class Case:
    nodes: list[Obj]
    existing: list[Obj]
    groups: list[Obj]  # PodGroups
    pending: list[Obj]  # pods for gangsched to place

    def describe(self) -> str:
        return json.dumps(
            {
                "nodes": self.nodes,
                "existing": self.existing,
                "groups": self.groups,
                "pending": self.pending,
            },
            indent=1,
        )


@st.composite
def cases(draw: st.DrawFn, max_nodes: int = 7, max_gangs: int = 3) -> Case:
    c = DrawChooser(draw)
    n_nodes = c.integer(2, max_nodes)
    specs = [node_spec(c, f"n{i}") for i in range(n_nodes)]
    nodes = [node_json(s) for s in specs]
    names = [s.name for s in specs]
    existing = []
    for i in range(c.integer(0, 8)):
        labels, spec = pod_spec(c, c.pick(("old", "svc", "train")), names, constraints=50)
        spec.pop("topologySpreadConstraints", None)
        pod = pod_json(
            f"e{i}",
            c.pick(tuple(NAMESPACES)),
            labels,
            spec,
            scheduler="default-scheduler",
            node=c.pick(names),
            phase="Succeeded" if c.chance(10) else "Running",
        )
        if c.chance(8):
            pod["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        existing.append(as_created(pod))
    groups: list[Obj] = []
    pending: list[Obj] = []
    created = 0
    for g in range(c.integer(1, max_gangs)):
        job = f"g{g}"
        ns = c.pick(("team", "other"))
        size = c.integer(1, 4)
        labels, spec = pod_spec(c, job, names)
        plain = size == 1 and c.chance(30)
        if not plain:
            groups.append(
                {
                    "apiVersion": "gangsched.io/v1alpha1",
                    "kind": "PodGroup",
                    "metadata": {"name": job, "namespace": ns, "uid": f"pg-{ns}-{job}"},
                    "spec": {"minMember": c.integer(1, size)},
                }
            )
        for m in range(size):
            if m and c.chance(20):
                labels, spec = pod_spec(c, job, names)  # a member unlike the others
            created += 1
            pod = pod_json(
                f"{job}-{m}", ns, labels, spec, created=created, group="" if plain else job
            )
            pending.append(as_created(pod))
    return Case(nodes, existing, groups, pending)


def _bound_copy(pod: Obj, node: str) -> Obj:
    return {
        **pod,
        "spec": {**pod["spec"], "nodeName": node},
        "status": {**pod["status"], "phase": "Running"},
    }


def _report(case: Case, found: list[Violation], placed: dict[str, str]) -> str:
    lines = [str(v) for v in found]
    return (
        "the core committed a placement that breaks a required constraint:\n  "
        + "\n  ".join(lines)
        + f"\nplacements of the cycle: {placed}\ncase:\n{case.describe()}"
    )


class Driver:
    """The case's objects through the adapter's translation into a Scheduler; bindings are
    confirmed at once, as the API would."""

    def __init__(self, case: Case) -> None:
        self.case = case
        self.clock = FakeClock(0.0)
        self.config = CoreConfig()
        self.s = Scheduler(self.config, self.clock)
        for ns, labels in NAMESPACES.items():
            self.s.namespace_upsert(ns, labels)
        for n in case.nodes:
            self.s.node_upsert(node_from(n))
        self.truth: dict[str, Obj] = {}  # uid -> the pod as the API has it
        for p in case.existing + case.pending:
            self.truth[p["metadata"]["uid"]] = p
            self.s.pod_upsert(pod_from(p)[0])
        for g in case.groups:
            self.s.gang_upsert(podgroup_from(g))
        self.checked: dict[str, str] = {}
        self.last_message: dict[str, str] = {}  # gang -> its last unschedulable message
        self.cycles = 0

    def step(self) -> int | None:
        """One gang cycle, its new reservations checked. None when there was nothing to do;
        otherwise the number of pods bound."""
        s = self.s
        before = dict(s.cache.assumed)
        out = s.schedule_one()
        if out is None:
            return None
        self.cycles += 1
        assert self.cycles < 2_000, "the scheduler does not go idle"
        after = dict(s.cache.assumed)
        new = {u: n for u, n in after.items() if before.get(u) != n}
        if new:
            counted = [p for p in self.truth.values() if p["spec"].get("nodeName")]
            counted += [_bound_copy(self.truth[u], n) for u, n in after.items() if u not in new]
            cluster = Cluster(self.case.nodes, counted, NAMESPACES)
            found = check_gang(cluster, [(self.truth[u], n) for u, n in sorted(new.items())])
            assert not found, _report(self.case, found, new)
            self.checked.update(new)
        bound = 0
        for d in out:
            if isinstance(d, GangUnschedulable):
                self.last_message[d.gang] = f"{d.reason}: {d.message}"
            if not isinstance(d, BindGang):
                continue
            for b in d.bindings:
                assert self.checked.get(b.pod.uid) == b.node, (
                    f"{b.pod.uid} bound to {b.node} without a reservation there"
                )
                self.truth[b.pod.uid] = _bound_copy(self.truth[b.pod.uid], b.node)
                s.pod_upsert(pod_from(self.truth[b.pod.uid])[0])
                bound += 1
        return bound

    def drain(self) -> None:
        """Cycles until idle, then on through every retry due within two flush periods."""
        horizon = 2 * (self.config.unschedulable_flush_seconds + self.config.backoff_max_seconds)
        while True:
            if self.step() is not None:
                continue
            wake = self.s.next_wakeup()
            if wake is None or wake > horizon:
                return
            self.clock.set(max(wake, self.clock.now()))

    def settle(self) -> None:
        """Retry everything until a round of retries binds nothing: every gang still pending
        was then last tried against the cluster as it is now."""
        self.drain()
        for _ in range(20):
            self.clock.advance(
                self.config.unschedulable_flush_seconds + self.config.backoff_max_seconds + 1
            )
            bound = 0
            while (n := self.step()) is not None:
                bound += n
            if not bound:
                return
        raise AssertionError("retries kept binding pods after 20 rounds")

    def cluster(self) -> Cluster:
        counted = [p for p in self.truth.values() if p["spec"].get("nodeName")]
        return Cluster(self.case.nodes, counted, NAMESPACES)

    def placed(self) -> int:
        return sum(
            1 for p in self.case.pending if self.truth[p["metadata"]["uid"]]["spec"].get("nodeName")
        )


def _lone(case: Case) -> list[Obj]:
    """Pending pods that are a gang by themselves: plain pods, and single-member groups."""
    sizes: dict[str, int] = {}
    for p in case.pending:
        group = p["metadata"]["labels"].get(GROUP_LABEL, "")
        if group:
            sizes[group] = sizes.get(group, 0) + 1
    return [
        p for p in case.pending if sizes.get(p["metadata"]["labels"].get(GROUP_LABEL, ""), 1) == 1
    ]


@PROPERTY
@given(case=cases())
def test_every_committed_placement_satisfies_the_required_constraints(case: Case) -> None:
    Driver(case).drain()


@PROPERTY
@given(case=cases(max_nodes=4, max_gangs=2))
def test_small_crowded_clusters(case: Case) -> None:
    """Few nodes: members compete for the same domains, ports and GPUs."""
    Driver(case).settle()


@PROPERTY
@given(case=cases())
def test_a_lone_pod_that_fits_somewhere_is_placed(case: Case) -> None:
    """The other way round: a pod that is a gang by itself and that the checker lets onto
    some node is not left pending once the cluster has settled (kube-scheduler would place
    it there)."""
    d = Driver(case)
    d.settle()
    cluster = d.cluster()
    for pod in _lone(case):
        uid = pod["metadata"]["uid"]
        if d.truth[uid]["spec"].get("nodeName"):
            continue
        fits = [n for n in cluster.nodes if not check_pod(cluster, pod, n)]
        group = pod["metadata"]["labels"].get(GROUP_LABEL, "")
        key = f"{pod['metadata']['namespace']}/{group}" if group else f"pod:{uid}"
        assert not fits, (
            f"{uid} left pending although it fits on {fits}; gangsched said: "
            f"{d.last_message.get(key)!r}\npod: {json.dumps(pod, indent=1)}\n"
            f"case:\n{case.describe()}"
        )


def test_an_overcommitted_node_does_not_hide_free_gpus_elsewhere() -> None:
    """A node whose GPUs are over-committed (its device plugin now reports fewer than its
    running pods hold) leaves the other nodes' free GPUs usable: a pod that fits on another
    node is placed, as kube-scheduler places it."""
    nodes = [_node("n0", gpus=0), _node("n1", gpus=2)]
    existing = [_pod("e0", "n0", gpus=1)]
    pod = pod_json(
        "p",
        "team",
        {},
        {"containers": [{"name": "c", "image": "x", "resources": {"requests": {GPU: "2"}}}]},
    )
    case = Case(nodes, existing, [], [pod])
    assert [n for n in ("n0", "n1") if not check_pod(Cluster(nodes, existing), pod, n)] == ["n1"]
    d = Driver(case)
    d.settle()
    assert d.placed() == 1, d.last_message
