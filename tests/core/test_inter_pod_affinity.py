"""InterPodAffinity, filter and score, against kube-scheduler v1.36's behaviour.

Cases follow the Kubernetes documentation ("Assigning Pods to Nodes: inter-pod affinity and
anti-affinity") and kube-scheduler's interpodaffinity plugin: required affinity with the
first-pod rule, required anti-affinity, symmetry (an existing pod's required anti-affinity
repels an incoming pod), namespaces and namespace selectors, and preferred terms scored per
topology domain and normalized to 0..100.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import pytest

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, GangUnschedulable
from gangsched.core.framework import Code, CycleState, PluginContext, PluginSettings, Status
from gangsched.core.model import (
    GangSpec,
    LabelSelector,
    Node,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodPhase,
    WeightedPodAffinityTerm,
)
from gangsched.core.plugins import FILTERS, SCORERS
from gangsched.core.plugins.inter_pod_affinity import InterPodAffinity, InterPodAffinityScore
from gangsched.core.profile import build_finder
from gangsched.core.scheduler import Scheduler
from tests.core.builders import make_node, make_pod, missing_node, req

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"

OK = (Code.SUCCESS, "")
NO_AFFINITY = (Code.UNRESOLVABLE, AFFINITY)
NO_ANTI = (Code.UNSCHEDULABLE, ANTI)
NO_EXISTING = (Code.UNSCHEDULABLE, EXISTING)


# ---- building blocks ---------------------------------------------------------------------


def sel(**labels: str) -> LabelSelector:
    return LabelSelector(match_labels=tuple(sorted(labels.items())))


def pterm(
    key: str,
    selector: LabelSelector | None,
    namespaces: Sequence[str] = ("default",),
    ns_selector: LabelSelector | None = None,
) -> PodAffinityTerm:
    """A pod affinity term; ``namespaces`` defaults to the pod's own ('default'), as the
    adapter fills it in when the spec names neither namespaces nor a namespace selector."""
    return PodAffinityTerm(key, selector, frozenset(namespaces), ns_selector)


def weighted(weight: int, term: PodAffinityTerm) -> WeightedPodAffinityTerm:
    return WeightedPodAffinityTerm(weight, term)


def node(name: str, zone: str | None = "", gpus: int = 0, **labels: str) -> Node:
    """A node labelled with its hostname and (unless ``zone`` is None) a zone."""
    b = make_node(name).cpu("32").memory("64Gi").label(HOST, name)
    if zone is not None:
        b = b.label(ZONE, zone or "z1")
    if gpus:
        b = b.gpus(gpus)
    for k, v in labels.items():
        b = b.label(k, v)
    return b.node()


def pod(
    name: str,
    labels: Mapping[str, str] | None = None,
    on: str = "",
    namespace: str = "default",
    affinity: PodAffinity | None = None,
    phase: PodPhase = PodPhase.RUNNING,
    gpus: int = 0,
) -> Pod:
    """A pod; ``on`` binds it to a node (counted there unless terminal)."""
    b = make_pod(name).cpu("100m")
    if gpus:
        b = b.gpus(gpus)
    return replace(
        b.obj(),
        uid=f"uid-{namespace}-{name}",
        namespace=namespace,
        labels=dict(labels or {}),
        node_name=on,
        phase=phase if on else PodPhase.PENDING,
        pod_affinity=affinity or PodAffinity(),
    )


def cluster(
    nodes: Sequence[Node],
    pods: Sequence[Pod] = (),
    namespaces: Mapping[str, Mapping[str, str]] | None = None,
) -> ClusterCache:
    cache = ClusterCache()
    for n in nodes:
        cache.upsert_node(n)
    for p in pods:
        cache.upsert_pod(p)
    for name, labels in (namespaces or {}).items():
        cache.upsert_namespace(name, labels)
    return cache


def verdicts(cache: ClusterCache, incoming: Pod) -> dict[str, tuple[Code, str]] | None:
    """The filter's verdict on every node, or None when PreFilter skips the pod."""
    plugin = InterPodAffinity(cache)
    state = CycleState()
    pre = plugin.pre_filter(incoming, state)
    if pre.code is Code.SKIP:
        return None
    assert pre.ok
    out: dict[str, tuple[Code, str]] = {}
    for name, info in sorted(cache.nodes.items()):
        status = plugin.filter_with(incoming, info, state)
        assert status.ok is (status.code is Code.SUCCESS)
        out[name] = (status.code, status.reason)
    return out


# Three nodes: n1 and n2 in zone z1, n3 in zone z2.
THREE = (node("n1", "z1"), node("n2", "z1"), node("n3", "z2"))
S1 = {"security": "S1"}
S2 = {"security": "S2"}


def required(*terms: PodAffinityTerm) -> PodAffinity:
    return PodAffinity(required=terms)


def required_anti(*terms: PodAffinityTerm) -> PodAffinity:
    return PodAffinity(required_anti=terms)


# ---- filter: table -----------------------------------------------------------------------


@dataclass(frozen=True)
class FilterCase:
    nodes: tuple[Node, ...]
    existing: tuple[Pod, ...]
    incoming: Pod
    expected: dict[str, tuple[Code, str]] | None  # None: PreFilter skips
    namespaces: Mapping[str, Mapping[str, str]] | None = None


FILTER_CASES: dict[str, FilterCase] = {
    # -- no constraints at all
    "no-terms-no-existing-skips": FilterCase(THREE, (pod("e", S1, "n1"),), pod("p", S1), None),
    # -- required affinity
    "affinity-hostname-match": FilterCase(
        THREE,
        (pod("e", S1, "n1"),),
        pod("p", affinity=required(pterm(HOST, sel(**S1)))),
        {"n1": OK, "n2": NO_AFFINITY, "n3": NO_AFFINITY},
    ),
    "affinity-zone-match-whole-domain": FilterCase(
        THREE,
        (pod("e", S1, "n1"),),
        pod("p", affinity=required(pterm(ZONE, sel(**S1)))),
        {"n1": OK, "n2": OK, "n3": NO_AFFINITY},
    ),
    "affinity-in-expression": FilterCase(
        THREE,
        (pod("e", S2, "n3"),),
        pod(
            "p",
            affinity=required(
                pterm(ZONE, LabelSelector(match_expressions=(req("security", "In", "S1", "S2"),)))
            ),
        ),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": OK},
    ),
    "affinity-no-match-anywhere": FilterCase(
        THREE,
        (pod("e", S2, "n1"),),
        pod("p", affinity=required(pterm(HOST, sel(**S1)))),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": NO_AFFINITY},
    ),
    "affinity-node-missing-topology-key": FilterCase(
        (node("n1", "z1"), node("nz", None)),
        (pod("e", S1, "n1"),),
        pod("p", affinity=required(pterm(ZONE, sel(**S1)))),
        {"n1": OK, "nz": NO_AFFINITY},
    ),
    "first-pod-rule": FilterCase(
        THREE,
        (pod("e", S2, "n1"),),
        pod("p", S1, affinity=required(pterm(ZONE, sel(**S1)))),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    "first-pod-rule-still-needs-topology-key": FilterCase(
        (node("n1", "z1"), node("nz", None)),
        (),
        pod("p", S1, affinity=required(pterm(ZONE, sel(**S1)))),
        {"n1": OK, "nz": NO_AFFINITY},
    ),
    "first-pod-rule-not-when-a-match-exists": FilterCase(
        THREE,
        (pod("e", S1, "n3"),),
        pod("p", S1, affinity=required(pterm(ZONE, sel(**S1)))),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": OK},
    ),
    "first-pod-rule-when-matches-sit-on-nodes-without-the-key": FilterCase(
        (node("n1", "z1"), node("nz", None)),
        (pod("e", S1, "nz"),),
        pod("p", S1, affinity=required(pterm(ZONE, sel(**S1)))),
        {"n1": OK, "nz": NO_AFFINITY},
    ),
    "pod-matching-only-some-of-its-own-terms": FilterCase(
        THREE,
        (),
        pod(
            "p",
            S1,
            affinity=required(pterm(ZONE, sel(**S1)), pterm(ZONE, sel(app="db"))),
        ),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": NO_AFFINITY},
    ),
    "one-pod-must-match-all-terms": FilterCase(
        # e1 matches the first term only, e2 the second only: no pod matches both, so no
        # domain counts, and the first-pod rule applies to a pod matching both itself.
        THREE,
        (pod("e1", S1, "n1"), pod("e2", {"app": "db"}, "n3")),
        pod(
            "p",
            {"app": "db", **S1},
            affinity=required(pterm(HOST, sel(**S1)), pterm(ZONE, sel(app="db"))),
        ),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    "one-pod-must-match-all-terms-without-self-match": FilterCase(
        THREE,
        (pod("e1", S1, "n1"), pod("e2", {"app": "db"}, "n3")),
        pod("p", affinity=required(pterm(HOST, sel(**S1)), pterm(ZONE, sel(app="db")))),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": NO_AFFINITY},
    ),
    "every-term-domain-must-hold-the-match": FilterCase(
        # e on n1 matches both terms: n1 has both pairs; n2 shares the zone pair but not the
        # hostname pair.
        THREE,
        (pod("e", {"app": "db", **S1}, "n1"),),
        pod("p", affinity=required(pterm(HOST, sel(**S1)), pterm(ZONE, sel(app="db")))),
        {"n1": OK, "n2": NO_AFFINITY, "n3": NO_AFFINITY},
    ),
    "every-term-domain-must-hold-the-match-any-order": FilterCase(
        THREE,
        (pod("e", {"app": "db", **S1}, "n1"),),
        pod("p", affinity=required(pterm(ZONE, sel(app="db")), pterm(HOST, sel(**S1)))),
        {"n1": OK, "n2": NO_AFFINITY, "n3": NO_AFFINITY},
    ),
    "every-term-topology-key-must-exist": FilterCase(
        (node("n1", "z1"), node("nz", None)),
        (pod("e", S1, "n1"),),
        pod("p", S1, affinity=required(pterm(HOST, sel(**S1)), pterm(ZONE, sel(**S1)))),
        {"n1": OK, "nz": NO_AFFINITY},
    ),
    "affinity-selector-none-matches-nothing": FilterCase(
        THREE,
        (pod("e", S1, "n1"),),
        pod("p", S1, affinity=required(pterm(HOST, None))),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": NO_AFFINITY},
    ),
    "affinity-empty-selector-matches-every-pod-in-namespace": FilterCase(
        THREE,
        (pod("e", {"x": "y"}, "n2"), pod("o", {"x": "y"}, "n3", namespace="other")),
        pod("p", affinity=required(pterm(HOST, LabelSelector()))),
        {"n1": NO_AFFINITY, "n2": OK, "n3": NO_AFFINITY},
    ),
    # -- required anti-affinity of the incoming pod
    "anti-hostname": FilterCase(
        THREE,
        (pod("e", {"app": "web"}, "n1"),),
        pod("p", affinity=required_anti(pterm(HOST, sel(app="web")))),
        {"n1": NO_ANTI, "n2": OK, "n3": OK},
    ),
    "anti-zone": FilterCase(
        THREE,
        (pod("e", {"app": "web"}, "n2"),),
        pod("p", affinity=required_anti(pterm(ZONE, sel(app="web")))),
        {"n1": NO_ANTI, "n2": NO_ANTI, "n3": OK},
    ),
    "anti-node-without-key-passes": FilterCase(
        (node("n1", "z1"), node("nz", None)),
        (pod("e", {"app": "web"}, "nz"), pod("f", {"app": "web"}, "n1")),
        pod("p", affinity=required_anti(pterm(ZONE, sel(app="web")))),
        {"n1": NO_ANTI, "nz": OK},
    ),
    "anti-no-matching-pod": FilterCase(
        THREE,
        (pod("e", {"app": "db"}, "n1"),),
        pod("p", affinity=required_anti(pterm(HOST, sel(app="web")))),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    "anti-self-selecting-first-pod-goes-anywhere": FilterCase(
        THREE,
        (),
        pod("p", {"app": "web"}, affinity=required_anti(pterm(HOST, sel(app="web")))),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    "anti-selector-none-matches-nothing": FilterCase(
        THREE,
        (pod("e", {"app": "web"}, "n1"),),
        pod("p", affinity=required_anti(pterm(HOST, None))),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    "anti-any-term-rejects": FilterCase(
        THREE,
        (pod("e", {"app": "web"}, "n1"), pod("f", {"app": "db"}, "n3")),
        pod(
            "p",
            affinity=required_anti(pterm(HOST, sel(app="web")), pterm(ZONE, sel(app="db"))),
        ),
        {"n1": NO_ANTI, "n2": OK, "n3": NO_ANTI},
    ),
    # -- symmetry: existing pods' required anti-affinity
    "existing-anti-hostname-repels": FilterCase(
        THREE,
        (pod("e", on="n1", affinity=required_anti(pterm(HOST, sel(app="web")))),),
        pod("p", {"app": "web"}),
        {"n1": NO_EXISTING, "n2": OK, "n3": OK},
    ),
    "existing-anti-zone-repels-whole-zone": FilterCase(
        THREE,
        (pod("e", on="n3", affinity=required_anti(pterm(ZONE, sel(app="web")))),),
        pod("p", {"app": "web"}),
        {"n1": OK, "n2": OK, "n3": NO_EXISTING},
    ),
    "existing-anti-not-selecting-skips": FilterCase(
        THREE,
        (pod("e", on="n1", affinity=required_anti(pterm(HOST, sel(app="db")))),),
        pod("p", {"app": "web"}),
        None,
    ),
    "existing-anti-on-node-without-key-skips": FilterCase(
        (node("n1", "z1"), node("nz", None)),
        (pod("e", on="nz", affinity=required_anti(pterm(ZONE, sel(app="web")))),),
        pod("p", {"app": "web"}),
        None,
    ),
    "existing-anti-selector-none-skips": FilterCase(
        THREE,
        (pod("e", on="n1", affinity=required_anti(pterm(HOST, None))),),
        pod("p", {"app": "web"}),
        None,
    ),
    "existing-preferred-anti-does-not-filter": FilterCase(
        THREE,
        (
            pod(
                "e",
                on="n1",
                affinity=PodAffinity(preferred_anti=(weighted(100, pterm(HOST, sel(app="web"))),)),
            ),
        ),
        pod("p", {"app": "web"}),
        None,
    ),
    "only-existing-required-anti-filters": FilterCase(
        # Existing affinity terms (required or preferred) selecting the pod never repel it,
        # even while other pods carry required anti-affinity.
        THREE,
        (
            pod("e", on="n1", affinity=required(pterm(HOST, sel(app="web")))),
            pod(
                "f",
                on="n2",
                affinity=PodAffinity(
                    preferred=(weighted(50, pterm(HOST, sel(app="web"))),),
                    preferred_anti=(weighted(50, pterm(HOST, sel(app="web"))),),
                ),
            ),
            pod("g", on="n3", affinity=required_anti(pterm(HOST, sel(app="db")))),
        ),
        pod("p", {"app": "web"}),
        None,
    ),
    "affinity-failure-reported-before-anti": FilterCase(
        THREE,
        (
            pod("e", {"app": "web"}, "n1", affinity=required_anti(pterm(HOST, sel(app="web")))),
            pod("f", S1, "n3"),
        ),
        pod(
            "p",
            {"app": "web"},
            affinity=PodAffinity(
                required=(pterm(ZONE, sel(**S1)),),
                required_anti=(pterm(HOST, sel(app="web")),),
            ),
        ),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": OK},
    ),
    "own-anti-reported-before-existing-anti": FilterCase(
        THREE,
        (pod("e", {"app": "web"}, "n1", affinity=required_anti(pterm(HOST, sel(app="web")))),),
        pod("p", {"app": "web"}, affinity=required_anti(pterm(HOST, sel(app="web")))),
        {"n1": NO_ANTI, "n2": OK, "n3": OK},
    ),
    # -- which pods count
    "terminal-pods-do-not-count": FilterCase(
        THREE,
        (pod("e", {"app": "web"}, "n1", phase=PodPhase.SUCCEEDED),),
        pod("p", affinity=required_anti(pterm(HOST, sel(app="web")))),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    "unbound-pods-do-not-count": FilterCase(
        THREE,
        (pod("e", {"app": "web"}),),
        pod("p", affinity=required_anti(pterm(HOST, sel(app="web")))),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    # -- namespaces
    "term-namespaces-exclude-other-namespaces": FilterCase(
        THREE,
        (pod("e", {"app": "web"}, "n1"), pod("o", {"app": "web"}, "n3", namespace="other")),
        pod("p", affinity=required_anti(pterm(HOST, sel(app="web"), namespaces=("other",)))),
        {"n1": OK, "n2": OK, "n3": NO_ANTI},
    ),
    "term-own-namespace-by-default": FilterCase(
        THREE,
        (pod("o", {"app": "web"}, "n3", namespace="other"),),
        pod("p", affinity=required_anti(pterm(HOST, sel(app="web")))),
        {"n1": OK, "n2": OK, "n3": OK},
    ),
    "existing-anti-in-other-namespace-ignores-pod": FilterCase(
        THREE,
        (
            pod(
                "e",
                on="n1",
                namespace="other",
                affinity=required_anti(pterm(HOST, sel(app="web"), namespaces=("other",))),
            ),
        ),
        pod("p", {"app": "web"}),
        None,
    ),
    "existing-anti-naming-pod-namespace-repels": FilterCase(
        THREE,
        (
            pod(
                "e",
                on="n2",
                namespace="other",
                affinity=required_anti(pterm(HOST, sel(app="web"), namespaces=("default",))),
            ),
        ),
        pod("p", {"app": "web"}),
        {"n1": OK, "n2": NO_EXISTING, "n3": OK},
    ),
    # -- namespaceSelector
    "empty-namespace-selector-selects-every-namespace": FilterCase(
        THREE,
        (pod("o", {"app": "web"}, "n3", namespace="unknown-ns"),),
        pod(
            "p",
            affinity=required_anti(
                pterm(HOST, sel(app="web"), namespaces=(), ns_selector=LabelSelector())
            ),
        ),
        {"n1": OK, "n2": OK, "n3": NO_ANTI},
    ),
    "labelled-namespace-selector": FilterCase(
        THREE,
        (
            pod("a", {"app": "web"}, "n1", namespace="ml"),
            pod("b", {"app": "web"}, "n2", namespace="web"),
            pod("c", {"app": "web"}, "n3", namespace="unlabelled"),
        ),
        pod(
            "p",
            affinity=required_anti(
                pterm(HOST, sel(app="web"), namespaces=(), ns_selector=sel(team="ml"))
            ),
        ),
        {"n1": NO_ANTI, "n2": OK, "n3": OK},
        namespaces={"ml": {"team": "ml"}, "web": {"team": "web"}},
    ),
    "namespace-selector-ored-with-namespaces": FilterCase(
        THREE,
        (
            pod("a", {"app": "web"}, "n1", namespace="ml"),
            pod("b", {"app": "web"}, "n2", namespace="web"),
        ),
        pod(
            "p",
            affinity=required_anti(
                pterm(HOST, sel(app="web"), namespaces=("web",), ns_selector=sel(team="ml"))
            ),
        ),
        {"n1": NO_ANTI, "n2": NO_ANTI, "n3": OK},
        namespaces={"ml": {"team": "ml"}, "web": {"team": "web"}},
    ),
    "namespace-selector-affinity": FilterCase(
        THREE,
        (pod("a", S1, "n3", namespace="ml"), pod("b", S1, "n1", namespace="web")),
        pod(
            "p",
            affinity=required(pterm(ZONE, sel(**S1), namespaces=(), ns_selector=sel(team="ml"))),
        ),
        {"n1": NO_AFFINITY, "n2": NO_AFFINITY, "n3": OK},
        namespaces={"ml": {"team": "ml"}, "web": {"team": "web"}},
    ),
    "existing-anti-namespace-selector-matches-incoming-namespace": FilterCase(
        THREE,
        (
            pod(
                "e",
                on="n1",
                namespace="ml",
                affinity=required_anti(
                    pterm(HOST, sel(app="web"), namespaces=(), ns_selector=sel(team="ml"))
                ),
            ),
        ),
        pod("p", {"app": "web"}, namespace="ml"),
        {"n1": NO_EXISTING, "n2": OK, "n3": OK},
        namespaces={"ml": {"team": "ml"}},
    ),
    "existing-anti-namespace-selector-misses-incoming-namespace": FilterCase(
        THREE,
        (
            pod(
                "e",
                on="n1",
                namespace="ml",
                affinity=required_anti(
                    pterm(HOST, sel(app="web"), namespaces=(), ns_selector=sel(team="ml"))
                ),
            ),
        ),
        pod("p", {"app": "web"}, namespace="web"),
        None,
        namespaces={"ml": {"team": "ml"}, "web": {"team": "web"}},
    ),
}


@pytest.mark.parametrize("case", FILTER_CASES.values(), ids=FILTER_CASES.keys())
def test_filter(case: FilterCase) -> None:
    cache = cluster(case.nodes, case.existing, case.namespaces)
    assert verdicts(cache, case.incoming) == case.expected


# ---- filter: behaviours --------------------------------------------------------------


def test_reserved_pods_count() -> None:
    incoming = pod("p", affinity=required_anti(pterm(HOST, sel(app="web"))))
    reserved = pod("r", {"app": "web"})
    cache = cluster(THREE, (reserved,))
    assert verdicts(cache, incoming) == {"n1": OK, "n2": OK, "n3": OK}
    cache.assume(reserved.uid, "n2")
    assert verdicts(cache, incoming) == {"n1": OK, "n2": NO_ANTI, "n3": OK}
    cache.forget(reserved.uid)
    assert verdicts(cache, incoming) == {"n1": OK, "n2": OK, "n3": OK}


def test_pod_never_counts_against_itself() -> None:
    # Already counted on n1 (a re-placement): its own labels and terms must not repel it.
    me = pod(
        "p",
        {"app": "web"},
        on="n1",
        affinity=PodAffinity(
            required=(pterm(HOST, sel(app="web")),),
            required_anti=(pterm(HOST, sel(app="web")),),
        ),
    )
    cache = cluster(THREE, (me,))
    assert verdicts(cache, me) == {"n1": OK, "n2": OK, "n3": OK}


def test_label_change_of_existing_pod_is_seen() -> None:
    existing = pod("e", {"app": "db"}, "n1")
    incoming = pod("p", affinity=required_anti(pterm(HOST, sel(app="web"))))
    cache = cluster(THREE, (existing,))
    assert verdicts(cache, incoming) == {"n1": OK, "n2": OK, "n3": OK}
    cache.upsert_pod(replace(existing, labels={"app": "web"}))
    assert verdicts(cache, incoming) == {"n1": NO_ANTI, "n2": OK, "n3": OK}


def test_namespace_relabel_is_seen() -> None:
    term = pterm(HOST, sel(app="web"), namespaces=(), ns_selector=sel(team="ml"))
    incoming = pod("p", affinity=required_anti(term))
    cache = cluster(THREE, (pod("a", {"app": "web"}, "n1", namespace="ns"),), {"ns": {}})
    assert verdicts(cache, incoming) == {"n1": OK, "n2": OK, "n3": OK}
    cache.upsert_namespace("ns", {"team": "ml"})
    assert verdicts(cache, incoming) == {"n1": NO_ANTI, "n2": OK, "n3": OK}


def test_missing_node_is_not_found() -> None:
    cache = cluster(THREE, (pod("e", {"app": "web"}, "n1"),))
    plugin = InterPodAffinity(cache)
    state = CycleState()
    incoming = pod("p", affinity=required_anti(pterm(HOST, sel(app="web"))))
    assert plugin.pre_filter(incoming, state).ok
    assert plugin.filter_with(incoming, missing_node("gone"), state) == Status(
        Code.UNRESOLVABLE, "node(s) not found"
    )


def test_pods_on_a_node_whose_object_is_gone_do_not_count() -> None:
    cache = cluster(THREE, (pod("e", {"app": "web"}, "n1"),))
    cache.remove_node("n1")
    incoming = pod("p", affinity=required_anti(pterm(ZONE, sel(app="web"))))
    assert verdicts(cache, incoming) == {
        "n1": (Code.UNRESOLVABLE, "node(s) not found"),
        "n2": OK,
        "n3": OK,
    }


def test_registered_with_defaults() -> None:
    ctx = PluginContext(ClusterCache(), lambda key: None)
    assert isinstance(FILTERS["InterPodAffinity"](ctx), InterPodAffinity)
    assert isinstance(SCORERS["InterPodAffinity"](ctx), InterPodAffinityScore)
    assert "InterPodAffinity" in CoreConfig().filters
    assert CoreConfig().score_weights["InterPodAffinity"] == 2


# ---- score -------------------------------------------------------------------------------


def scores(
    cache: ClusterCache, incoming: Pod, hard_weight: int = 1
) -> tuple[list[float], list[float]] | None:
    """(raw, normalized) scores of every node in name order, or None when PreScore skips."""
    plugin = InterPodAffinityScore(cache, PluginSettings(hard_pod_affinity_weight=hard_weight))
    state = CycleState()
    if plugin.pre_score(incoming, state).code is Code.SKIP:
        return None
    infos = [info for _, info in sorted(cache.nodes.items())]
    raw = [plugin.raw_score(incoming, info, state) for info in infos]
    normalized = list(raw)
    plugin.normalize(normalized, state)
    return raw, normalized


def preferred(*terms: WeightedPodAffinityTerm) -> PodAffinity:
    return PodAffinity(preferred=terms)


def preferred_anti(*terms: WeightedPodAffinityTerm) -> PodAffinity:
    return PodAffinity(preferred_anti=terms)


@dataclass(frozen=True)
class ScoreCase:
    existing: tuple[Pod, ...]
    incoming: Pod
    expected: tuple[list[float], list[float]] | None  # (raw, normalized) on n1, n2, n3
    hard_weight: int = 1


SCORE_CASES: dict[str, ScoreCase] = {
    "nothing-to-score-skips": ScoreCase((pod("e", S1, "n1"),), pod("p", S1), None),
    "preferred-terms-matching-nothing-skip": ScoreCase(
        (pod("e", S2, "n1"),),
        pod("p", affinity=preferred(weighted(5, pterm(HOST, sel(**S1))))),
        None,
    ),
    "preferred-affinity-hostname": ScoreCase(
        (pod("e", S1, "n1"),),
        pod("p", affinity=preferred(weighted(5, pterm(HOST, sel(**S1))))),
        ([5, 0, 0], [100, 0, 0]),
    ),
    "preferred-affinity-zone-counts-every-matching-pod": ScoreCase(
        (pod("e", S1, "n1"), pod("f", S1, "n2"), pod("g", S1, "n3")),
        pod("p", affinity=preferred(weighted(5, pterm(ZONE, sel(**S1))))),
        ([10, 10, 5], [100, 100, 0]),
    ),
    "preferred-anti-affinity": ScoreCase(
        (pod("e", S1, "n1"),),
        pod("p", affinity=preferred_anti(weighted(5, pterm(HOST, sel(**S1))))),
        ([-5, 0, 0], [0, 100, 100]),
    ),
    "mixed-terms-truncate-like-integer-scores": ScoreCase(
        # zone z1 +3 (n1, n2), host n1 -2: raw 1, 3, 0 -> 33.33 truncated to 33.
        (pod("e", S1, "n1"),),
        pod(
            "p",
            affinity=PodAffinity(
                preferred=(weighted(3, pterm(ZONE, sel(**S1))),),
                preferred_anti=(weighted(2, pterm(HOST, sel(**S1))),),
            ),
        ),
        ([1, 3, 0], [33, 100, 0]),
    ),
    "equal-raw-scores-normalize-to-zero": ScoreCase(
        (pod("e", S1, "n1"), pod("f", S1, "n2"), pod("g", S1, "n3")),
        pod("p", affinity=preferred(weighted(4, pterm(HOST, sel(**S1))))),
        ([4, 4, 4], [0, 0, 0]),
    ),
    "existing-required-affinity-adds-hard-weight": ScoreCase(
        (pod("e", on="n3", affinity=required(pterm(HOST, sel(app="web")))),),
        pod("p", {"app": "web"}),
        ([0, 0, 7], [0, 0, 100]),
        hard_weight=7,
    ),
    "hard-weight-zero-ignores-existing-required-affinity": ScoreCase(
        (pod("e", on="n3", affinity=required(pterm(HOST, sel(app="web")))),),
        pod("p", {"app": "web"}),
        None,
        hard_weight=0,
    ),
    "existing-preferred-affinity": ScoreCase(
        (pod("e", on="n1", affinity=preferred(weighted(8, pterm(ZONE, sel(app="web"))))),),
        pod("p", {"app": "web"}),
        ([8, 8, 0], [100, 100, 0]),
    ),
    "existing-preferred-anti-affinity": ScoreCase(
        (pod("e", on="n1", affinity=preferred_anti(weighted(8, pterm(ZONE, sel(app="web"))))),),
        pod("p", {"app": "web"}),
        ([-8, -8, 0], [0, 0, 100]),
    ),
    "existing-required-anti-affinity-does-not-score": ScoreCase(
        (pod("e", on="n1", affinity=required_anti(pterm(HOST, sel(app="web")))),),
        pod("p", {"app": "web"}),
        None,
    ),
    "existing-terms-not-selecting-skip": ScoreCase(
        (pod("e", on="n1", affinity=preferred(weighted(8, pterm(HOST, sel(app="db"))))),),
        pod("p", {"app": "web"}),
        None,
    ),
    "incoming-and-existing-terms-add-up": ScoreCase(
        (
            pod("e", S1, "n1"),
            pod("f", on="n2", affinity=preferred(weighted(2, pterm(HOST, sel(app="web"))))),
            pod("g", on="n3", affinity=required(pterm(HOST, sel(app="web")))),
        ),
        pod("p", {"app": "web"}, affinity=preferred(weighted(6, pterm(HOST, sel(**S1))))),
        ([6, 2, 1], [100, 20, 0]),
    ),
    "preferred-term-namespaces": ScoreCase(
        (pod("e", S1, "n1", namespace="other"), pod("f", S1, "n2")),
        pod("p", affinity=preferred(weighted(5, pterm(HOST, sel(**S1), namespaces=("other",))))),
        ([5, 0, 0], [100, 0, 0]),
    ),
    "preferred-term-selector-none": ScoreCase(
        (pod("e", S1, "n1"),),
        pod("p", affinity=preferred(weighted(5, pterm(HOST, None)))),
        None,
    ),
}


@pytest.mark.parametrize("case", SCORE_CASES.values(), ids=SCORE_CASES.keys())
def test_score(case: ScoreCase) -> None:
    cache = cluster(THREE, case.existing)
    got = scores(cache, case.incoming, case.hard_weight)
    assert got == case.expected
    if got is not None:
        assert all(0 <= s <= 100 for s in got[1])


def test_score_factory_reads_hard_weight_from_settings() -> None:
    cache = cluster(THREE, (pod("e", on="n2", affinity=required(pterm(HOST, sel(app="w")))),))
    ctx = PluginContext(cache, lambda key: None, PluginSettings(hard_pod_affinity_weight=9))
    plugin = SCORERS["InterPodAffinity"](ctx)
    assert isinstance(plugin, InterPodAffinityScore)
    state = CycleState()
    incoming = pod("p", {"app": "w"})
    assert plugin.pre_score(incoming, state).ok
    assert plugin.raw_score(incoming, cache.nodes["n2"], state) == 9


def test_normalize_empty_list() -> None:
    values: list[float] = []
    InterPodAffinityScore(ClusterCache(), PluginSettings()).normalize(values, CycleState())
    assert values == []


# ---- through the node finder and the scheduler ----------------------------------------


def test_diagnose_names_anti_affinity_on_every_node() -> None:
    nodes = (node("n1", "z1"), node("n2", "z1"), node("n3", "z2"))
    web = [pod(f"w{i}", {"app": "web"}, f"n{i}") for i in (1, 2, 3)]
    cache = cluster(nodes, web)
    finder = build_finder(cache, CoreConfig(), lambda key: None)
    incoming = pod("p", affinity=required_anti(pterm(HOST, sel(app="web"))))
    cache.upsert_pod(incoming)
    assert finder.find(incoming) is None
    assert finder.diagnose(incoming) == (
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )


def test_diagnose_mixes_reasons() -> None:
    nodes = (node("n1", "z1"), node("n2", "z1"), node("n3", "z2"))
    existing = [
        pod("e", S1, "n3", affinity=required_anti(pterm(HOST, sel(app="web")))),
    ]
    cache = cluster(nodes, existing)
    finder = build_finder(cache, CoreConfig(), lambda key: None)
    incoming = pod("p", {"app": "web"}, affinity=required(pterm(ZONE, sel(**S1))))
    cache.upsert_pod(incoming)
    assert finder.find(incoming) is None
    assert finder.diagnose(incoming) == (
        "0/3 nodes are available: 2 node(s) didn't match pod affinity rules, "
        "1 node(s) didn't satisfy existing pods anti-affinity rules."
    )


def test_finder_follows_preferred_affinity() -> None:
    nodes = (node("n1", "z1"), node("n2", "z1"), node("n3", "z2"))
    cache = cluster(nodes, (pod("e", S1, "n3"),))
    finder = build_finder(
        cache, CoreConfig(score_weights={"InterPodAffinity": 1}), lambda key: None
    )
    incoming = pod("p", affinity=preferred(weighted(10, pterm(ZONE, sel(**S1)))))
    cache.upsert_pod(incoming)
    found = finder.find(incoming)
    assert found is not None and found.name == "n3"
    avoid = pod("q", affinity=preferred_anti(weighted(10, pterm(ZONE, sel(**S1)))))
    cache.upsert_pod(avoid)
    found = finder.find(avoid)
    assert found is not None and found.name in ("n1", "n2")


T0 = 1000.0


def run_gang(
    nodes: Sequence[Node], members: Sequence[Pod], key: str = "default/train"
) -> tuple[Scheduler, list[object]]:
    s = Scheduler(CoreConfig(), FakeClock(T0))
    for n in nodes:
        s.node_upsert(n)
    s.gang_upsert(GangSpec(key, len(members), created=T0))
    for m in members:
        s.pod_upsert(replace(m, group=key, created=T0))
    return s, list(s.run_until_idle())


def gang_members(
    n: int,
    affinity: PodAffinity | None = None,
    gpus: int = 1,
    labels: Mapping[str, str] | None = None,
) -> list[Pod]:
    return [
        pod(f"train-{i}", dict(labels or {"job": "train"}), affinity=affinity, gpus=gpus)
        for i in range(n)
    ]


SPREAD = required_anti(pterm(HOST, sel(job="train")))


def test_gang_without_anti_affinity_packs_one_node() -> None:
    nodes = [node(f"n{i}", "z1", gpus=4) for i in range(1, 5)]
    _, out = run_gang(nodes, gang_members(4))
    [bind] = [d for d in out if isinstance(d, BindGang)]
    assert len({b.node for b in bind.bindings}) == 1


def test_gang_with_hostname_anti_affinity_spreads_one_per_node() -> None:
    nodes = [node(f"n{i}", "z1", gpus=4) for i in range(1, 5)]
    _, out = run_gang(nodes, gang_members(4, SPREAD))
    [bind] = [d for d in out if isinstance(d, BindGang)]
    assert len(bind.bindings) == 4
    assert sorted(b.node for b in bind.bindings) == ["n1", "n2", "n3", "n4"]


def test_gang_larger_than_the_nodes_fails_whole_with_the_reason() -> None:
    nodes = [node(f"n{i}", "z1", gpus=4) for i in range(1, 4)]
    s, out = run_gang(nodes, gang_members(4, SPREAD))
    assert not [d for d in out if isinstance(d, BindGang)]
    [fail] = [d for d in out if isinstance(d, GangUnschedulable)]
    assert fail.reason == "Unschedulable"
    assert fail.message.endswith(
        "0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules."
    )
    assert s.cache.assumed == {}
    assert all(not info.pods for info in s.cache.nodes.values())


def test_gang_members_repel_bound_pods_of_the_same_job() -> None:
    nodes = [node(f"n{i}", "z1", gpus=4) for i in range(1, 5)]
    s = Scheduler(CoreConfig(), FakeClock(T0))
    for n in nodes:
        s.node_upsert(n)
    s.pod_upsert(pod("old", {"job": "train"}, on="n2", gpus=1))
    s.gang_upsert(GangSpec("default/train", 3, created=T0))
    for m in gang_members(3, SPREAD):
        s.pod_upsert(replace(m, group="default/train", created=T0))
    out = s.run_until_idle()
    [bind] = [d for d in out if isinstance(d, BindGang)]
    assert sorted(b.node for b in bind.bindings) == ["n1", "n3", "n4"]


def test_gang_with_zone_self_affinity_lands_in_one_zone() -> None:
    # n1 and n3 are the tightest fits; bin packing alone would use both zones.
    nodes = [
        node("n1", "za", gpus=1),
        node("n2", "za", gpus=4),
        node("n3", "zb", gpus=1),
        node("n4", "zb", gpus=4),
    ]
    together = required(pterm(ZONE, sel(job="train")))
    _, plain = run_gang(nodes, gang_members(4))
    [bind] = [d for d in plain if isinstance(d, BindGang)]
    zone_of = {n.name: n.labels[ZONE] for n in nodes}
    assert len({zone_of[b.node] for b in bind.bindings}) == 2
    _, out = run_gang(nodes, gang_members(4, together))
    [bind] = [d for d in out if isinstance(d, BindGang)]
    assert len({zone_of[b.node] for b in bind.bindings}) == 1
