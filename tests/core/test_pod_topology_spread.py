"""PodTopologySpread: table cases written from the Kubernetes documentation on topology spread
constraints and from kube-scheduler v1.36's behaviour (its filtering and scoring tests), then
gang cycles through the Scheduler."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import pytest

from gangsched.core.cache import ClusterCache
from gangsched.core.config import CoreConfig
from gangsched.core.framework import Code, CycleState, PluginSettings
from gangsched.core.model import (
    AffinityTerm,
    LabelSelector,
    Node,
    Pod,
    PodPhase,
    SpreadConstraint,
)
from gangsched.core.plugins.pod_topology_spread import (
    HOSTNAME,
    MISSING_LABEL,
    SKEW_MISMATCH,
    PodTopologySpread,
    PodTopologySpreadScore,
)
from tests.core.builders import make_node, make_pod, req, term
from tests.core.test_scheduler import Harness, binds, gpu_node, members, unschedulable

ZONE = "zone"
NODE = "node"
FOO = LabelSelector(match_labels=(("foo", ""),))
BAR = LabelSelector(match_labels=(("bar", ""),))
SKEW = "node(s) didn't match pod topology spread constraints"
MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"


def hard(
    max_skew: int, key: str, selector: LabelSelector | None = FOO, **kw: object
) -> SpreadConstraint:
    return SpreadConstraint(max_skew, key, "DoNotSchedule", selector, **kw)  # type: ignore[arg-type]


def soft(
    max_skew: int, key: str, selector: LabelSelector | None = FOO, **kw: object
) -> SpreadConstraint:
    return SpreadConstraint(max_skew, key, "ScheduleAnyway", selector, **kw)  # type: ignore[arg-type]


def node(name: str, taint: str = "", **labels: str) -> Node:
    b = make_node(name).cpu("32")
    for k, v in labels.items():
        b = b.label(k, v)
    if taint:
        b = b.taint(taint)
    return b.node()


def zoned(name: str, zone: str, **labels: str) -> Node:
    """A node with a zone and a ``node`` label (kube-scheduler's test fixtures' layout)."""
    return node(name, **{ZONE: zone, NODE: name, **labels})


ABXY = (
    zoned("node-a", "zone1"),
    zoned("node-b", "zone1"),
    zoned("node-x", "zone2"),
    zoned("node-y", "zone2"),
)
ALL_OK = dict.fromkeys(("node-a", "node-b", "node-x", "node-y"), "ok")
# node-z: a third zone, one node.
ABXYZ = (*ABXY, zoned("node-z", "zone3"))
# Three nodes, each its own ``node`` domain; then with ``foo`` on the first two only; then with
# the third tainted.
ABC = (node("node-a", node="node-a"), node("node-b", node="node-b"), node("node-c", node="node-c"))
FOO_ON_AB = (
    node("node-a", node="node-a", foo=""),
    node("node-b", node="node-b", foo=""),
    node("node-c", node="node-c"),
)
TAINTED_C = (*ABC[:2], node("node-c", taint="dedicated", node="node-c"))


def incoming(
    *spread: SpreadConstraint,
    labels: Mapping[str, str] | None = None,
    namespace: str = "default",
    group: str = "",
    selector: Mapping[str, str] | None = None,
    require: tuple[AffinityTerm, ...] | None = None,
    tolerate: str = "",
) -> Pod:
    """The pod to place: labelled ``foo`` unless told otherwise."""
    b = make_pod("incoming")
    for k, v in (selector or {}).items():
        b = b.selector(k, v)
    if require is not None:
        b = b.require(*require)
    if tolerate:
        b = b.tolerate(tolerate, "Exists")
    return replace(
        b.obj(),
        labels=dict({"foo": ""} if labels is None else labels),
        spread=spread,
        namespace=namespace,
        group=group,
    )


def on(
    node_name: str,
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    namespace: str = "default",
    group: str = "",
    deleting: bool = False,
) -> Pod:
    """An existing pod bound to ``node_name``."""
    return replace(
        make_pod(name).obj(),
        labels=dict({"foo": ""} if labels is None else labels),
        namespace=namespace,
        group=group,
        node_name=node_name,
        phase=PodPhase.RUNNING,
        deleting=deleting,
    )


def pods(**per_node: int) -> list[Pod]:
    """``pods(node_a=2, node_b=1)``: that many ``foo`` pods on each node (``_`` -> ``-``)."""
    out: list[Pod] = []
    for key, count in per_node.items():
        name = key.replace("_", "-")
        out += [on(name, f"p-{name}-{i}") for i in range(count)]
    return out


def cluster(nodes: Iterable[Node], existing: Iterable[Pod] = ()) -> ClusterCache:
    cache = ClusterCache()
    for n in nodes:
        cache.upsert_node(n)
    for p in existing:
        cache.upsert_pod(p)
    return cache


def verdicts(
    cache: ClusterCache, pod: Pod, settings: PluginSettings | None = None
) -> dict[str, str] | str:
    """'skip', or per node: 'ok', 'skew' or 'missing'."""
    plugin = PodTopologySpread(cache, settings)
    state = CycleState()
    pre = plugin.pre_filter(pod, state)
    if pre.code is Code.SKIP:
        return "skip"
    assert pre.ok
    out: dict[str, str] = {}
    for name, info in cache.nodes.items():
        if info.node is None:
            continue
        status = plugin.filter_with(pod, info, state)
        if status.ok:
            out[name] = "ok"
        elif status == SKEW_MISMATCH:
            out[name] = "skew"
        else:
            assert status == MISSING_LABEL
            out[name] = "missing"
    return out


@dataclass(frozen=True)
class FilterCase:
    name: str
    pod: Pod
    nodes: tuple[Node, ...]
    existing: list[Pod]
    want: dict[str, str] | str
    settings: PluginSettings | None = None


FILTER_CASES = [
    FilterCase(
        "clean cluster: every node fits",
        incoming(hard(1, ZONE)),
        ABXY,
        [],
        ALL_OK,
    ),
    FilterCase(
        # The documentation's first example: zoneA holds 2 matching pods, zoneB 1; with
        # maxSkew 1 the incoming pod can only go to zoneB.
        "documentation: 2/1 over two zones, only the emptier zone fits",
        incoming(hard(1, ZONE)),
        ABXY,
        pods(node_a=1, node_b=1, node_x=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "ok"},
    ),
    FilterCase(
        "maxSkew 2 tolerates a domain one pod ahead",
        incoming(hard(2, ZONE)),
        ABXY,
        pods(node_a=1, node_b=1, node_x=1),
        ALL_OK,
    ),
    FilterCase(
        "maxSkew 2, domains 3/1: the fuller zone is out",
        incoming(hard(2, ZONE)),
        ABXY,
        pods(node_a=2, node_b=1, node_y=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "ok"},
    ),
    FilterCase(
        # The documentation's second example: a zone and a node constraint; the zone one
        # leaves zoneB, the node one within it only the node with no matching pod.
        "documentation: zone and node constraints intersect",
        incoming(hard(1, ZONE), hard(1, NODE)),
        ABXY,
        pods(node_a=1, node_b=1, node_x=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "skew", "node-y": "ok"},
    ),
    FilterCase(
        "pods spread as 2/1/0/3 over nodes: only the empty node fits",
        incoming(hard(1, NODE)),
        ABXY,
        pods(node_a=2, node_b=1, node_y=3),
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "skew"},
    ),
    FilterCase(
        "pods spread as 2/1/0/3, maxSkew 2",
        incoming(hard(2, NODE)),
        ABXY,
        pods(node_a=2, node_b=1, node_y=3),
        {"node-a": "skew", "node-b": "ok", "node-x": "ok", "node-y": "skew"},
    ),
    FilterCase(
        "the incoming pod does not match its own selector: no +1 for itself",
        incoming(hard(1, NODE), labels={}),
        ABXY,
        pods(node_a=2, node_b=1, node_y=3),
        {"node-a": "skew", "node-b": "ok", "node-x": "ok", "node-y": "skew"},
    ),
    FilterCase(
        "the incoming pod matches its own selector: 2/1 zones, the fuller one is out",
        incoming(hard(1, ZONE)),
        ABXY,
        pods(node_a=2, node_x=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "ok"},
    ),
    FilterCase(
        "the same layout, the pod not matching itself: both zones fit",
        incoming(hard(1, ZONE), labels={"other": "x"}),
        ABXY,
        pods(node_a=2, node_x=1),
        ALL_OK,
    ),
    FilterCase(
        # kube-scheduler: "pods spread across zones as 1/2 due to absence of label 'zone'
        # on node-b": node-b's pod counts nowhere, node-b is unresolvable.
        "a node without the key: unresolvable, and its pods count nowhere",
        incoming(hard(1, ZONE)),
        (
            zoned("node-a", "zone1"),
            node("node-b", zon="zone1", node="node-b"),
            zoned("node-x", "zone2"),
            zoned("node-y", "zone2"),
        ),
        pods(node_a=1, node_b=1, node_x=1, node_y=1),
        {"node-a": "ok", "node-b": "missing", "node-x": "skew", "node-y": "skew"},
    ),
    FilterCase(
        "no node has the key: every node is unresolvable",
        incoming(hard(1, "rack")),
        ABXY,
        pods(node_a=1),
        {"node-a": "missing", "node-b": "missing", "node-x": "missing", "node-y": "missing"},
    ),
    FilterCase(
        # kube-scheduler: a node missing any key of the pod's constraints is no domain of
        # any of them (node-x lacks "node", so its zone counts only node-y's pod).
        "a node missing one key is left out of every constraint",
        incoming(hard(1, ZONE), hard(1, NODE)),
        (
            zoned("node-a", "zone1"),
            zoned("node-b", "zone1"),
            node("node-x", zone="zone2"),
            zoned("node-y", "zone2"),
        ),
        pods(node_a=1, node_y=1),
        {"node-a": "skew", "node-b": "ok", "node-x": "missing", "node-y": "skew"},
    ),
    FilterCase(
        "pods in another namespace do not count",
        incoming(hard(1, ZONE)),
        ABXY,
        [on("node-a", "p1", namespace="other"), on("node-b", "p2", namespace="other")],
        ALL_OK,
    ),
    FilterCase(
        "terminating pods do not count",
        incoming(hard(1, NODE)),
        ABXY,
        [
            on("node-a", "p1", deleting=True),
            on("node-b", "p2"),
            on("node-x", "p3"),
            on("node-y", "p4"),
        ],
        {"node-a": "ok", "node-b": "skew", "node-x": "skew", "node-y": "skew"},
    ),
    FilterCase(
        "pods that do not match the selector do not count",
        incoming(hard(1, ZONE)),
        ABXY,
        [on("node-a", "p1", {"bar": ""}), on("node-b", "p2", {"foo": "other"})],
        ALL_OK,
    ),
    FilterCase(
        "an absent selector matches nothing, the pod itself included",
        incoming(hard(1, NODE, None)),
        ABXY,
        pods(node_a=3),
        ALL_OK,
    ),
    FilterCase(
        # kube-scheduler v1.36 counts no pod for an empty selector (kubernetes#141339), yet
        # the pod matches it itself: the skew is always 1, within any maxSkew.
        "an empty selector counts no pod (kube-scheduler v1.36)",
        incoming(hard(1, NODE, LabelSelector())),
        ABXY,
        pods(node_a=3, node_b=1),
        ALL_OK,
    ),
    FilterCase(
        "a selector with expressions",
        incoming(
            hard(1, NODE, LabelSelector(match_expressions=(req("app", "In", "web", "api"),))),
            labels={"app": "web"},
        ),
        ABXY,
        [on("node-a", "p1", {"app": "api"}), on("node-b", "p2", {"app": "db"})],
        {"node-a": "skew", "node-b": "ok", "node-x": "ok", "node-y": "ok"},
    ),
    FilterCase(
        "two constraints with different selectors",
        incoming(hard(1, ZONE, FOO), hard(1, NODE, BAR), labels={"foo": "", "bar": ""}),
        ABXY,
        [on("node-a", "p1", {"foo": ""}), on("node-y", "p2", {"bar": ""})],
        # zone: 1/0 -> zone1 is out; node (bar): 0/0/0/1 -> node-y is out.
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "skew"},
    ),
    FilterCase(
        "two constraints on the same key, each with its own counts",
        incoming(hard(1, ZONE, FOO), hard(1, ZONE, BAR), labels={"foo": "", "bar": ""}),
        ABXY,
        [on("node-a", "p1", {"foo": ""}), on("node-x", "p2", {"bar": ""})],
        {"node-a": "skew", "node-b": "skew", "node-x": "skew", "node-y": "skew"},
    ),
    # ---- minDomains ----------------------------------------------------------------------
    FilterCase(
        "minDomains above the domain count: the global minimum is 0",
        incoming(hard(2, NODE, min_domains=4)),
        ABC,
        pods(node_a=2, node_b=2, node_c=1),
        {"node-a": "skew", "node-b": "skew", "node-c": "ok"},
    ),
    FilterCase(
        "minDomains below the domain count: the real minimum",
        incoming(hard(2, NODE, min_domains=2)),
        ABC,
        pods(node_a=2, node_b=2, node_c=1),
        {"node-a": "ok", "node-b": "ok", "node-c": "ok"},
    ),
    FilterCase(
        "minDomains equal to the domain count: the real minimum",
        incoming(hard(1, ZONE, min_domains=2)),
        ABXY,
        pods(node_a=1, node_x=1),
        ALL_OK,
    ),
    FilterCase(
        "minDomains 3 over two zones as 2/1, maxSkew 2",
        incoming(hard(2, ZONE, min_domains=3)),
        ABXY,
        pods(node_a=1, node_b=1, node_y=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "ok"},
    ),
    FilterCase(
        "minDomains 1 over two zones as 2/1, maxSkew 2",
        incoming(hard(2, ZONE, min_domains=1)),
        ABXY,
        pods(node_a=1, node_b=1, node_y=1),
        ALL_OK,
    ),
    FilterCase(
        # zone3 holds no pod but has a node: it is an eligible domain, so the minimum is 0.
        "an eligible domain with no pod keeps the minimum at 0",
        incoming(hard(1, ZONE)),
        ABXYZ,
        pods(node_a=1, node_x=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "skew", "node-y": "skew", "node-z": "ok"},
    ),
    # ---- nodeAffinityPolicy ---------------------------------------------------------------
    FilterCase(
        # Honor (the default): node-c fails the pod's nodeSelector, so its domain is not
        # eligible and its pods are not counted: nodes spread as 1/1/~1~.
        "nodeAffinityPolicy Honor with a nodeSelector: excluded nodes are no domain",
        incoming(hard(1, NODE), selector={"foo": ""}),
        FOO_ON_AB,
        pods(node_a=1, node_b=1, node_c=1),
        {"node-a": "ok", "node-b": "ok", "node-c": "ok"},
    ),
    FilterCase(
        "nodeAffinityPolicy Honor: an empty node outside the affinity is no domain",
        incoming(hard(1, NODE), selector={"foo": ""}),
        FOO_ON_AB,
        pods(node_a=1, node_b=1),
        {"node-a": "ok", "node-b": "ok", "node-c": "ok"},
    ),
    FilterCase(
        "nodeAffinityPolicy Ignore: the empty node outside the affinity sets the minimum",
        incoming(hard(1, NODE, node_affinity_policy="Ignore"), selector={"foo": ""}),
        FOO_ON_AB,
        pods(node_a=1, node_b=1),
        {"node-a": "skew", "node-b": "skew", "node-c": "ok"},
    ),
    FilterCase(
        "nodeAffinityPolicy Honor with required node affinity",
        incoming(hard(1, ZONE), require=(term(req(ZONE, "In", "zone1", "zone2")),)),
        ABXYZ,
        pods(node_a=1, node_x=1),
        {"node-a": "ok", "node-b": "ok", "node-x": "ok", "node-y": "ok", "node-z": "ok"},
    ),
    FilterCase(
        "nodeAffinityPolicy Ignore with required node affinity",
        incoming(
            hard(1, ZONE, node_affinity_policy="Ignore"),
            require=(term(req(ZONE, "In", "zone1", "zone2")),),
        ),
        ABXYZ,
        pods(node_a=1, node_x=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "skew", "node-y": "skew", "node-z": "ok"},
    ),
    # ---- nodeTaintsPolicy -----------------------------------------------------------------
    FilterCase(
        "nodeTaintsPolicy Ignore (the default): a tainted empty node sets the minimum",
        incoming(hard(1, NODE)),
        TAINTED_C,
        pods(node_a=1, node_b=1),
        {"node-a": "skew", "node-b": "skew", "node-c": "ok"},
    ),
    FilterCase(
        "nodeTaintsPolicy Honor: an untolerated tainted node is no domain",
        incoming(hard(1, NODE, node_taints_policy="Honor")),
        TAINTED_C,
        pods(node_a=1, node_b=1),
        {"node-a": "ok", "node-b": "ok", "node-c": "ok"},
    ),
    FilterCase(
        "nodeTaintsPolicy Honor: a tolerated taint keeps the node a domain",
        incoming(hard(1, NODE, node_taints_policy="Honor"), tolerate="dedicated"),
        TAINTED_C,
        pods(node_a=1, node_b=1),
        {"node-a": "skew", "node-b": "skew", "node-c": "ok"},
    ),
    FilterCase(
        # The policies are per constraint: zone honours the nodeSelector (zone2 holds no
        # node with foo, so zone1 is the only domain), node ignores it (node-x and node-y
        # count, 1/1/0/~1~ with node-x empty).
        "policies per constraint: zone Honor, node Ignore",
        incoming(hard(1, ZONE), hard(1, NODE, node_affinity_policy="Ignore"), selector={"foo": ""}),
        (
            zoned("node-a", "zone1", foo=""),
            zoned("node-b", "zone1", foo=""),
            zoned("node-x", "zone2"),
            zoned("node-y", "zone2"),
        ),
        pods(node_a=1, node_b=1, node_y=1),
        {"node-a": "skew", "node-b": "skew", "node-x": "ok", "node-y": "skew"},
    ),
    # ---- whenUnsatisfiable and skips ------------------------------------------------------
    FilterCase(
        "ScheduleAnyway constraints are not the filter's",
        incoming(soft(1, ZONE)),
        ABXY,
        pods(node_a=5),
        "skip",
    ),
    FilterCase(
        "only the DoNotSchedule constraint is checked",
        incoming(soft(1, NODE), hard(1, ZONE)),
        ABXY,
        pods(node_x=3),
        {"node-a": "ok", "node-b": "ok", "node-x": "skew", "node-y": "skew"},
    ),
    FilterCase("no constraints", incoming(), ABXY, pods(node_a=5), "skip"),
]


@pytest.mark.parametrize("case", FILTER_CASES, ids=lambda c: c.name)
def test_filter(case: FilterCase) -> None:
    cache = cluster(case.nodes, case.existing)
    assert verdicts(cache, case.pod, case.settings) == case.want


def test_filter_statuses_and_reasons() -> None:
    cache = cluster(
        (zoned("node-a", "zone1"), zoned("node-x", "zone2"), node("node-n")),
        pods(node_a=1),
    )
    plugin = PodTopologySpread(cache)
    pod = incoming(hard(1, ZONE))
    state = CycleState()
    assert plugin.pre_filter(pod, state).ok
    skew = plugin.filter_with(pod, cache.nodes["node-a"], state)
    assert (skew.code, skew.reason) == (Code.UNSCHEDULABLE, SKEW)
    missing = plugin.filter_with(pod, cache.nodes["node-n"], state)
    assert (missing.code, missing.reason) == (Code.UNRESOLVABLE, MISSING)
    assert plugin.filter_with(pod, cache.nodes["node-x"], state).ok
    assert plugin.name == "PodTopologySpread"
    assert plugin.static is False


def test_constraints_checked_in_order() -> None:
    """kube-scheduler stops at the first failing constraint: a skew failure on the first
    constraint wins over a missing key of the second."""
    nodes = (
        node("node-a", zone="z1"),
        node("node-a2", zone="z1", rack="r1"),
        node("node-b", zone="z2", rack="r2"),
        node("node-c", zone="z2"),
    )
    cache = cluster(nodes, pods(node_a2=2))
    pod = incoming(hard(1, ZONE), hard(1, "rack"))
    assert verdicts(cache, pod) == {
        "node-a": "skew",  # zone z1 holds 2 (on node-a2), z2 none
        "node-a2": "skew",
        "node-b": "ok",
        "node-c": "missing",  # zone z2 is fine, then no rack
    }


def test_assumed_pods_count_and_forgetting_uncounts() -> None:
    """Members reserved earlier in a gang cycle count for the next (kube-scheduler's AddPod),
    and a rolled-back reservation no longer counts."""
    cache = cluster(ABXY)
    member = replace(on("", "m1"), node_name="", phase=PodPhase.PENDING)
    cache.upsert_pod(member)
    pod = incoming(hard(1, ZONE))
    assert verdicts(cache, pod) == ALL_OK
    cache.assume(member.uid, "node-a")
    assert verdicts(cache, pod) == {
        "node-a": "skew",
        "node-b": "skew",
        "node-x": "ok",
        "node-y": "ok",
    }
    cache.forget(member.uid)
    assert verdicts(cache, pod) == ALL_OK


def test_domains_follow_node_label_changes() -> None:
    """The eligible domains are cached per pod shape and recomputed when a node changes."""
    cache = cluster(ABXY, pods(node_a=1, node_x=1))
    pod = incoming(hard(1, ZONE))
    assert verdicts(cache, pod) == ALL_OK
    cache.upsert_node(zoned("node-z", "zone3"))
    assert verdicts(cache, pod) == {
        "node-a": "skew",
        "node-b": "skew",
        "node-x": "skew",
        "node-y": "skew",
        "node-z": "ok",
    }
    cache.upsert_node(node("node-z", taint="dedicated", zone="zone3", node="node-z"))
    honoring = incoming(hard(1, ZONE, node_taints_policy="Honor"))
    assert verdicts(cache, honoring) == {
        "node-a": "ok",
        "node-b": "ok",
        "node-x": "ok",
        "node-y": "ok",
        "node-z": "ok",
    }


def test_terminal_pods_do_not_count() -> None:
    cache = cluster(ABXY, [on("node-a", "p1")])
    pod = incoming(hard(1, NODE))
    assert verdicts(cache, pod)["node-a"] == "skew"  # type: ignore[index]
    cache.upsert_pod(replace(cache.pods["uid-p1"], phase=PodPhase.SUCCEEDED))
    assert verdicts(cache, pod)["node-a"] == "ok"  # type: ignore[index]


# ---- default constraints (gang-mates) ---------------------------------------------------

DEFAULTS = PluginSettings(
    default_spread_constraints=(
        SpreadConstraint(1, ZONE, "DoNotSchedule"),
        SpreadConstraint(1, NODE, "ScheduleAnyway"),
    )
)


def test_default_constraints_count_gang_mates() -> None:
    existing = [
        on("node-a", "m1", {}, namespace="ml", group="ml/job"),
        # Same labels but another gang, and plain pods: not the gang's.
        on("node-x", "o1", {}, namespace="ml", group="ml/other"),
        on("node-x", "o2", {}, namespace="ml", group="ml/other"),
        on("node-y", "plain", {}, namespace="ml"),
    ]
    cache = cluster(ABXY, existing)
    pod = incoming(labels={}, namespace="ml", group="ml/job")
    assert verdicts(cache, pod, DEFAULTS) == {
        "node-a": "skew",
        "node-b": "skew",
        "node-x": "ok",
        "node-y": "ok",
    }


def test_default_constraints_skip_plain_pods_and_pods_with_their_own() -> None:
    cache = cluster(ABXY, [on("node-a", "m1", {}, namespace="ml", group="ml/job")])
    plain = incoming(labels={}, namespace="ml")
    assert verdicts(cache, plain, DEFAULTS) == "skip"
    # A pod with constraints of its own (even only soft ones) gets no default ones.
    own = incoming(soft(1, NODE), labels={}, namespace="ml", group="ml/job")
    assert verdicts(cache, own, DEFAULTS) == "skip"
    # Without configured defaults, nothing.
    assert verdicts(cache, incoming(labels={}, namespace="ml", group="ml/job")) == "skip"


def test_default_constraints_ignore_terminating_gang_mates() -> None:
    existing = [on("node-a", "m1", {}, namespace="ml", group="ml/job", deleting=True)]
    cache = cluster(ABXY, existing)
    pod = incoming(labels={}, namespace="ml", group="ml/job")
    assert verdicts(cache, pod, DEFAULTS) == ALL_OK


# ---- scoring ----------------------------------------------------------------------------


def scores(
    cache: ClusterCache,
    pod: Pod,
    feasible: Iterable[str],
    settings: PluginSettings | None = None,
) -> dict[str, int] | str:
    plugin = PodTopologySpreadScore(cache, settings)
    state = CycleState()
    pre = plugin.pre_score(pod, state)
    if pre.code is Code.SKIP:
        return "skip"
    assert pre.ok
    names = list(feasible)
    raw = [plugin.raw_score(pod, cache.nodes[n], state) for n in names]
    plugin.normalize(raw, state)
    assert all(0.0 <= r <= 100.0 for r in raw)
    return {n: int(r) for n, r in zip(names, raw, strict=True)}


def hosts(*names: str) -> tuple[Node, ...]:
    return tuple(node(n, **{HOSTNAME: n}) for n in names)


def nodes_by(key: str, *names: str) -> tuple[Node, ...]:
    return tuple(node(n, **{key: n}) for n in names)


@dataclass(frozen=True)
class ScoreCase:
    name: str
    pod: Pod
    nodes: tuple[Node, ...]
    existing: list[Pod]
    feasible: tuple[str, ...]
    want: dict[str, int] | str
    settings: PluginSettings | None = field(default=None)


HOST4 = hosts("node-a", "node-b", "node-c", "node-d")
ZONES_ABXY = (
    node("node-a", zone="zone1", **{HOSTNAME: "node-a"}),
    node("node-b", zone="zone1", **{HOSTNAME: "node-b"}),
    node("node-x", zone="zone2", **{HOSTNAME: "node-x"}),
    node("node-y", zone="zone2", **{HOSTNAME: "node-y"}),
)
# foo and bar pods over zones and hosts: the selectors of two constraints count differently.
FOO_BAR_PODS = [
    on("node-a", "a1", {"foo": ""}),
    on("node-b", "b1", {"foo": "", "bar": ""}),
    on("node-y", "y1", {"foo": ""}),
    on("node-y", "y2", {"bar": ""}),
]
SCORE_CASES = [
    ScoreCase(
        "hostname, no existing pods: every node scores 100",
        incoming(soft(1, HOSTNAME)),
        hosts("node-a", "node-b"),
        [],
        ("node-a", "node-b"),
        {"node-a": 100, "node-b": 100},
    ),
    ScoreCase(
        "hostname, a single feasible node scores 100",
        incoming(soft(1, HOSTNAME)),
        hosts("node-a", "node-b"),
        pods(node_a=2, node_b=1),
        ("node-a",),
        {"node-a": 100},
    ),
    ScoreCase(
        "hostname, same count everywhere",
        incoming(soft(1, HOSTNAME)),
        hosts("node-a", "node-b"),
        pods(node_a=1, node_b=1),
        ("node-a", "node-b"),
        {"node-a": 100, "node-b": 100},
    ),
    ScoreCase(
        "hostname, pods spread as 2/1/0/3",
        incoming(soft(1, HOSTNAME)),
        HOST4,
        pods(node_a=2, node_b=1, node_d=3),
        ("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 20, "node-b": 60, "node-c": 100, "node-d": 0},
    ),
    ScoreCase(
        "hostname, an absent selector counts nothing",
        incoming(soft(1, HOSTNAME, None)),
        HOST4,
        pods(node_a=2, node_b=1, node_d=3),
        ("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
    ),
    ScoreCase(
        "hostname, an empty selector counts nothing (kube-scheduler v1.36)",
        incoming(soft(1, HOSTNAME, LabelSelector())),
        HOST4,
        pods(node_a=2, node_b=1, node_d=3),
        ("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 100, "node-b": 100, "node-c": 100, "node-d": 100},
    ),
    ScoreCase(
        "hostname, 2/1/0/3 with maxSkew 2",
        incoming(soft(2, HOSTNAME)),
        HOST4,
        pods(node_a=2, node_b=1, node_d=3),
        ("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
    ),
    ScoreCase(
        "hostname, 4/3/2/1 with maxSkew 3",
        incoming(soft(3, HOSTNAME)),
        HOST4,
        pods(node_a=4, node_b=3, node_c=2, node_d=1),
        ("node-a", "node-b", "node-c", "node-d"),
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
    ),
    ScoreCase(
        # 4/2/1/~3~: node-y is not feasible; it is neither scored nor a domain.
        "hostname, 3 of 4 nodes feasible",
        incoming(soft(1, HOSTNAME)),
        hosts("node-a", "node-b", "node-x", "node-y"),
        pods(node_a=4, node_b=2, node_x=1, node_y=3),
        ("node-a", "node-b", "node-x"),
        {"node-a": 33, "node-b": 83, "node-x": 100},
    ),
    ScoreCase(
        "hostname, a feasible node without the key scores 0 and is no domain",
        incoming(soft(1, HOSTNAME)),
        (
            node("node-a", **{HOSTNAME: "node-a"}),
            node("node-b", n="node-b"),
            node("node-x", **{HOSTNAME: "node-x"}),
            node("node-y", **{HOSTNAME: "node-y"}),
        ),
        pods(node_a=4, node_b=2, node_x=1, node_y=3),
        ("node-a", "node-b", "node-x"),
        {"node-a": 16, "node-b": 0, "node-x": 100},
    ),
    ScoreCase(
        "zone, 3 of 4 nodes feasible: counts cover every node of the zone",
        incoming(soft(1, ZONE)),
        ZONES_ABXY,
        pods(node_a=4, node_b=2, node_x=1, node_y=3),
        ("node-a", "node-b", "node-x"),
        {"node-a": 75, "node-b": 75, "node-x": 100},
    ),
    ScoreCase(
        "zone and hostname, 2 of 4 nodes feasible",
        incoming(soft(1, ZONE), soft(1, HOSTNAME)),
        ZONES_ABXY,
        pods(node_a=2, node_b=1, node_x=2, node_y=4),
        ("node-a", "node-x"),
        {"node-a": 100, "node-x": 63},
    ),
    ScoreCase(
        "two constraints on zone with different selectors",
        incoming(soft(1, ZONE, FOO), soft(1, ZONE, BAR), labels={"foo": "", "bar": ""}),
        (
            node("node-a", zone="zone1"),
            node("node-b", zone="zone1"),
            node("node-x", zone="zone2"),
            node("node-y", zone="zone2"),
        ),
        [
            on("node-a", "a1", {"foo": "", "bar": ""}),
            on("node-a", "a2", {"foo": ""}),
            on("node-b", "b1", {"foo": "", "bar": ""}),
            on("node-y", "y1", {"foo": ""}),
            on("node-y", "y2", {"foo": "", "bar": ""}),
            on("node-y", "y3", {"foo": ""}),
        ],
        ("node-a", "node-x"),
        {"node-a": 85, "node-x": 100},
    ),
    ScoreCase(
        "zone and hostname with different selectors",
        incoming(soft(1, ZONE, FOO), soft(1, HOSTNAME, BAR), labels={"foo": "", "bar": ""}),
        ZONES_ABXY,
        FOO_BAR_PODS,
        ("node-a", "node-b", "node-x", "node-y"),
        {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
    ),
    ScoreCase(
        "zone and hostname with different selectors, some nodes hold no pod",
        incoming(soft(1, ZONE, FOO), soft(1, HOSTNAME, BAR), labels={"foo": "", "bar": ""}),
        ZONES_ABXY,
        [
            on("node-b", "b1", {"bar": ""}),
            on("node-x", "x1", {"foo": ""}),
            on("node-y", "y1", {"foo": "", "bar": ""}),
        ],
        ("node-a", "node-b", "node-x", "node-y"),
        {"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0},
    ),
    ScoreCase(
        "zone and hostname with different selectors, 3 of 4 feasible",
        incoming(soft(1, ZONE, FOO), soft(1, HOSTNAME, BAR), labels={"foo": "", "bar": ""}),
        ZONES_ABXY,
        FOO_BAR_PODS,
        ("node-a", "node-b", "node-x"),
        {"node-a": 50, "node-b": 25, "node-x": 100},
    ),
    ScoreCase(
        "pods in another namespace do not count",
        incoming(soft(1, HOSTNAME)),
        hosts("node-a", "node-b"),
        [on("node-a", "a1", namespace="ns1"), *pods(node_a=1, node_b=2)],
        ("node-a", "node-b"),
        {"node-a": 100, "node-b": 33},
    ),
    ScoreCase(
        "terminating pods do not count",
        incoming(soft(1, HOSTNAME)),
        hosts("node-a", "node-b"),
        [on("node-a", "a1", deleting=True), on("node-b", "b1")],
        ("node-a", "node-b"),
        {"node-a": 100, "node-b": 0},
    ),
    ScoreCase(
        "minDomains has no effect on scoring",
        incoming(soft(2, NODE, min_domains=10)),
        ABC,
        pods(node_a=2, node_b=2, node_c=1),
        ("node-a", "node-b", "node-c"),
        {"node-a": 75, "node-b": 75, "node-c": 100},
    ),
    ScoreCase(
        "nodeAffinityPolicy Honor: pods on nodes outside the affinity do not count",
        incoming(soft(1, NODE), selector={"foo": ""}),
        FOO_ON_AB,
        pods(node_a=2, node_b=1, node_c=1),
        ("node-a", "node-b", "node-c"),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    ScoreCase(
        "nodeAffinityPolicy Ignore: every node's pods count",
        incoming(soft(1, NODE, node_affinity_policy="Ignore"), selector={"foo": ""}),
        FOO_ON_AB,
        pods(node_a=2, node_b=1, node_c=1),
        ("node-a", "node-b", "node-c"),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    ScoreCase(
        "nodeAffinityPolicy Honor with required node affinity",
        incoming(soft(1, NODE), require=(term(req("foo", "In", "")),)),
        FOO_ON_AB,
        pods(node_a=2, node_b=1, node_c=1),
        ("node-a", "node-b", "node-c"),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    ScoreCase(
        "nodeTaintsPolicy Honor: pods on untolerated tainted nodes do not count",
        incoming(soft(1, NODE, node_taints_policy="Honor")),
        TAINTED_C,
        pods(node_a=2, node_b=1, node_c=1),
        ("node-a", "node-b", "node-c"),
        {"node-a": 0, "node-b": 33, "node-c": 100},
    ),
    ScoreCase(
        "nodeTaintsPolicy Ignore",
        incoming(soft(1, NODE)),
        TAINTED_C,
        pods(node_a=2, node_b=1, node_c=1),
        ("node-a", "node-b", "node-c"),
        {"node-a": 66, "node-b": 100, "node-c": 100},
    ),
    ScoreCase(
        "DoNotSchedule constraints are not the scorer's",
        incoming(hard(1, ZONE)),
        ZONES_ABXY,
        pods(node_a=2),
        ("node-a", "node-x"),
        "skip",
    ),
    ScoreCase("no constraints", incoming(), ZONES_ABXY, [], ("node-a",), "skip"),
]


@pytest.mark.parametrize("case", SCORE_CASES, ids=lambda c: c.name)
def test_score(case: ScoreCase) -> None:
    cache = cluster(case.nodes, case.existing)
    assert scores(cache, case.pod, case.feasible, case.settings) == case.want


def test_score_default_constraints_spread_gang_mates() -> None:
    existing = [
        on("node-a", "m1", {}, namespace="ml", group="ml/job"),
        on("node-a", "m2", {}, namespace="ml", group="ml/job"),
        on("node-b", "o1", {}, namespace="ml", group="ml/other"),
    ]
    cache = cluster(nodes_by(NODE, "node-a", "node-b"), existing)
    pod = incoming(labels={}, namespace="ml", group="ml/job")
    got = scores(cache, pod, ("node-a", "node-b"), DEFAULTS)
    assert got == {"node-a": 0, "node-b": 100}
    assert scores(cache, incoming(labels={}, namespace="ml"), ("node-a",), DEFAULTS) == "skip"


def test_score_order_prefers_emptier_domains() -> None:
    cache = cluster(ZONES_ABXY, pods(node_a=3, node_b=1, node_x=1))
    got = scores(cache, incoming(soft(1, ZONE)), ("node-a", "node-b", "node-x", "node-y"))
    assert isinstance(got, dict)
    assert got["node-x"] == got["node-y"] > got["node-a"] == got["node-b"]


# ---- gang cycles through the Scheduler ---------------------------------------------------

GANG_SEL = LabelSelector(match_labels=(("job", "spread"),))


def zone_gpu_node(name: str, zone: str, gpus: int) -> Node:
    n = gpu_node(name, gpus)
    n.labels = {ZONE: zone, HOSTNAME: name}
    return n


def zone_of(h: Harness, node_name: str) -> str:
    n = h.s.cache.nodes[node_name].node
    assert n is not None
    return n.labels[ZONE]


def spread_members(n: int, *spread: SpreadConstraint) -> list[Pod]:
    return [replace(p, labels={"job": "spread"}, spread=spread) for p in members("ml/spread", n)]


SIX_NODES = [zone_gpu_node(f"n-{z}{i}", z, 4) for z in ("a", "b", "c") for i in range(2)]


def test_gang_members_spread_across_zones() -> None:
    h = Harness(None, *SIX_NODES)
    h.gang("ml/spread", 6)
    h.add(*spread_members(6, SpreadConstraint(1, ZONE, "DoNotSchedule", GANG_SEL)))
    [bind] = binds(h.run())
    assert len(bind.bindings) == 6
    assert Counter(zone_of(h, b.node) for b in bind.bindings) == {"a": 2, "b": 2, "c": 2}


def test_without_the_constraint_the_gang_packs() -> None:
    """The control: GPU bin-packing alone does not spread the same gang."""
    h = Harness(None, *SIX_NODES)
    h.gang("ml/spread", 6)
    h.add(*spread_members(6))
    [bind] = binds(h.run())
    assert len(Counter(zone_of(h, b.node) for b in bind.bindings)) < 3


def test_soft_spread_prefers_emptier_zones() -> None:
    """ScheduleAnyway is a preference: with GPU bin-packing's weight (10) it loses to
    packing, so this profile scores with PodTopologySpread alone."""
    h = Harness(CoreConfig(score_weights={"PodTopologySpread": 2}), *SIX_NODES)
    h.gang("ml/spread", 3)
    h.add(*spread_members(3, SpreadConstraint(1, ZONE, "ScheduleAnyway", GANG_SEL)))
    [bind] = binds(h.run())
    assert Counter(zone_of(h, b.node) for b in bind.bindings) == {"a": 1, "b": 1, "c": 1}


def test_gang_spread_that_cannot_hold_is_unschedulable_and_holds_nothing() -> None:
    """Zone a has room for one member; with maxSkew 1 zone b may then take two: a gang of
    four cannot be placed, and nothing of it stays reserved."""
    h = Harness(None, zone_gpu_node("n-a", "a", 1), zone_gpu_node("n-b", "b", 8))
    h.gang("ml/spread", 4)
    h.add(*spread_members(4, SpreadConstraint(1, ZONE, "DoNotSchedule", GANG_SEL)))
    out = h.run()
    assert binds(out) == []
    [fail] = unschedulable(out)
    assert fail.reason == "Unschedulable"
    assert (
        "0/2 nodes are available: 1 Insufficient nvidia.com/gpu, "
        "1 node(s) didn't match pod topology spread constraints." in fail.message
    )
    assert h.s.cache.assumed == {}


def test_gang_spread_missing_label_diagnosis() -> None:
    unlabelled = gpu_node("n-x", 4)
    h = Harness(None, unlabelled, zone_gpu_node("n-a", "a", 1))
    h.gang("ml/spread", 2)
    h.add(*spread_members(2, SpreadConstraint(1, ZONE, "DoNotSchedule", GANG_SEL)))
    out = h.run()
    [fail] = unschedulable(out)
    assert (
        "1 node(s) didn't match pod topology spread constraints (missing required label)"
        in fail.message
    )


def test_default_constraints_spread_gangs_through_the_scheduler() -> None:
    config = CoreConfig(plugin_settings=DEFAULTS)
    h = Harness(config, *SIX_NODES)
    h.gang("ml/spread", 6)
    h.add(*members("ml/spread", 6))
    [bind] = binds(h.run())
    assert Counter(zone_of(h, b.node) for b in bind.bindings) == {"a": 2, "b": 2, "c": 2}


def test_spread_counts_bound_pods_of_earlier_gangs() -> None:
    """A second gang with the same selector continues the spread the first one left."""
    h = Harness(None, *SIX_NODES)
    sc = SpreadConstraint(1, ZONE, "DoNotSchedule", GANG_SEL)
    h.gang("ml/spread", 2)
    h.add(*spread_members(2, sc))
    [first] = binds(h.run())
    used = {zone_of(h, b.node) for b in first.bindings}
    assert len(used) == 2
    h.gang("ml/more", 1)
    more = replace(members("ml/more", 1)[0], labels={"job": "spread"}, spread=(sc,))
    h.add(more)
    [second] = binds(h.run())
    assert {zone_of(h, b.node) for b in second.bindings} == {"a", "b", "c"} - used
