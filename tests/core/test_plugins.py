"""Table-driven tests for the built-in filter and score plugins."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import (
    Code,
    CycleState,
    FilterPlugin,
    NormalizingScorePlugin,
    PluginContext,
    PreFilterPlugin,
    ScorePlugin,
)
from gangsched.core.match import toleration_matches
from gangsched.core.model import Pod, Taint, Toleration
from gangsched.core.plugins import (
    BINPACK_SCORE_WEIGHTS,
    DEFAULT_FILTERS,
    DEFAULT_SCORE_WEIGHTS,
    FILTERS,
    SCORERS,
    GPUBinPack,
    LeastAllocated,
    NodeAffinity,
    NodeAffinityScore,
    NodeName,
    NodeResourcesFit,
    NodeUnschedulable,
    TaintToleration,
    TaintTolerationScore,
)
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from tests.core.builders import field, make_node, make_pod, missing_node, req, term

GI = 2**30
UNSCHEDULABLE_KEY = "node.kubernetes.io/unschedulable"
NOT_FOUND = "node(s) not found"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"


@dataclass(frozen=True)
class FilterCase:
    pod: Pod
    node: NodeInfo
    code: Code = Code.SUCCESS
    reason: str = ""


def check_filter(plugin: FilterPlugin, case: FilterCase) -> None:
    status = plugin.filter(case.pod, case.node)
    assert (status.code, status.reason) == (case.code, case.reason)
    assert status.ok is (case.code is Code.SUCCESS)


def ok(pod: Pod, node: NodeInfo) -> FilterCase:
    return FilterCase(pod, node)


def fails(pod: Pod, node: NodeInfo, reason: str, code: Code = Code.UNRESOLVABLE) -> FilterCase:
    return FilterCase(pod, node, code, reason)


def score_of(plugin: ScorePlugin, pod: Pod, node: NodeInfo) -> float:
    value = plugin.score(pod, node)
    assert 0.0 <= value <= 100.0
    return value


# ---- NodeName ---------------------------------------------------------------------------

NODE_NAME_CASES = {
    "no-name-requested": ok(make_pod("p").obj(), make_node("n1").info()),
    "same-name": ok(make_pod("p").on("n1").obj(), make_node("n1").info()),
    "other-name": fails(
        make_pod("p").on("n2").obj(),
        make_node("n1").info(),
        "node(s) didn't match the requested node name",
    ),
    "missing-node-same-name": ok(make_pod("p").on("n1").obj(), missing_node("n1")),
}


@pytest.mark.parametrize("case", NODE_NAME_CASES.values(), ids=NODE_NAME_CASES.keys())
def test_node_name(case: FilterCase) -> None:
    check_filter(NodeName(), case)


# ---- NodeUnschedulable ------------------------------------------------------------------

CORDONED = make_node("n1").cordon()
NODE_UNSCHEDULABLE_CASES = {
    "schedulable": ok(make_pod("p").obj(), make_node("n1").info()),
    "missing": fails(make_pod("p").obj(), missing_node("n1"), NOT_FOUND),
    "not-ready": fails(
        make_pod("p").obj(),
        make_node("n1").not_ready().info(),
        "node(s) were not ready",
        Code.UNSCHEDULABLE,
    ),
    "not-ready-wins-over-cordoned": fails(
        make_pod("p").obj(),
        make_node("n1").not_ready().cordon().info(),
        "node(s) were not ready",
        Code.UNSCHEDULABLE,
    ),
    "not-ready-is-not-tolerated": fails(
        make_pod("p").tolerate(operator="Exists").obj(),
        make_node("n1").not_ready().info(),
        "node(s) were not ready",
        Code.UNSCHEDULABLE,
    ),
    "cordoned": fails(make_pod("p").obj(), CORDONED.info(), "node(s) were unschedulable"),
    "cordoned-tolerated-exists": ok(
        make_pod("p").tolerate(UNSCHEDULABLE_KEY, "Exists", effect="NoSchedule").obj(),
        CORDONED.info(),
    ),
    "cordoned-tolerated-any-effect": ok(
        make_pod("p").tolerate(UNSCHEDULABLE_KEY, "Exists").obj(), CORDONED.info()
    ),
    "cordoned-tolerated-equal-empty-value": ok(
        make_pod("p").tolerate(UNSCHEDULABLE_KEY, "Equal", "", "NoSchedule").obj(),
        CORDONED.info(),
    ),
    "cordoned-tolerate-everything": ok(
        make_pod("p").tolerate(operator="Exists").obj(), CORDONED.info()
    ),
    "cordoned-wrong-effect": fails(
        make_pod("p").tolerate(UNSCHEDULABLE_KEY, "Exists", effect="NoExecute").obj(),
        CORDONED.info(),
        "node(s) were unschedulable",
    ),
    "cordoned-wrong-value": fails(
        make_pod("p").tolerate(UNSCHEDULABLE_KEY, "Equal", "yes").obj(),
        CORDONED.info(),
        "node(s) were unschedulable",
    ),
    "cordoned-other-key": fails(
        make_pod("p").tolerate("node.kubernetes.io/not-ready", "Exists").obj(),
        CORDONED.info(),
        "node(s) were unschedulable",
    ),
}


@pytest.mark.parametrize(
    "case", NODE_UNSCHEDULABLE_CASES.values(), ids=NODE_UNSCHEDULABLE_CASES.keys()
)
def test_node_unschedulable(case: FilterCase) -> None:
    check_filter(NodeUnschedulable(), case)


# ---- toleration matching ----------------------------------------------------------------

MATCH_CASES = {
    # (toleration, taint, tolerated)
    "equal-same": (Toleration("k", "Equal", "v", "NoSchedule"), Taint("k", "v"), True),
    "equal-other-value": (Toleration("k", "Equal", "w", "NoSchedule"), Taint("k", "v"), False),
    "equal-empty-values": (Toleration("k", "Equal"), Taint("k"), True),
    "empty-operator-is-equal": (Toleration("k", "", "v"), Taint("k", "v"), True),
    "empty-operator-other-value": (Toleration("k", "", "x"), Taint("k", "v"), False),
    "exists-ignores-value": (Toleration("k", "Exists"), Taint("k", "anything"), True),
    "exists-other-key": (Toleration("k", "Exists"), Taint("j", "v"), False),
    "exists-empty-key-matches-all": (Toleration(operator="Exists"), Taint("any", "v"), True),
    "exists-empty-key-effect-limited": (
        Toleration(operator="Exists", effect="NoExecute"),
        Taint("any", "v", "NoSchedule"),
        False,
    ),
    "empty-effect-matches-all": (
        Toleration("k", "Exists"),
        Taint("k", "v", "NoExecute"),
        True,
    ),
    "effect-mismatch": (
        Toleration("k", "Exists", effect="NoSchedule"),
        Taint("k", "v", "NoExecute"),
        False,
    ),
    "effect-match-prefer": (
        Toleration("k", "Exists", effect="PreferNoSchedule"),
        Taint("k", "v", "PreferNoSchedule"),
        True,
    ),
    "unknown-operator": (Toleration("k", "Gt", "1"), Taint("k", "2"), False),
    "key-is-case-sensitive": (Toleration("K", "Exists"), Taint("k"), False),
}


@pytest.mark.parametrize(("toleration", "taint", "expected"), MATCH_CASES.values(), ids=MATCH_CASES)
def test_toleration_matches(toleration: Toleration, taint: Taint, expected: bool) -> None:
    assert toleration_matches(toleration, taint) is expected


# ---- TaintToleration filter -------------------------------------------------------------

GPU_TAINTED = make_node("n1").taint("dedicated", "gpu")
TAINT_CASES = {
    "no-taints": ok(make_pod("p").obj(), make_node("n1").info()),
    "missing-node": fails(make_pod("p").obj(), missing_node("n1"), NOT_FOUND),
    "untolerated-noschedule": fails(
        make_pod("p").obj(), GPU_TAINTED.info(), "node(s) had untolerated taint {dedicated: gpu}"
    ),
    "untolerated-noexecute": fails(
        make_pod("p").obj(),
        make_node("n1").taint("evict", "now", "NoExecute").info(),
        "node(s) had untolerated taint {evict: now}",
    ),
    "untolerated-empty-value": fails(
        make_pod("p").obj(),
        make_node("n1").taint("bare").info(),
        "node(s) had untolerated taint {bare: }",
    ),
    "prefer-no-schedule-is-not-filtered": ok(
        make_pod("p").obj(), make_node("n1").taint("soft", "x", "PreferNoSchedule").info()
    ),
    "tolerated-equal": ok(
        make_pod("p").tolerate("dedicated", "Equal", "gpu", "NoSchedule").obj(),
        GPU_TAINTED.info(),
    ),
    "tolerated-exists": ok(make_pod("p").tolerate("dedicated", "Exists").obj(), GPU_TAINTED.info()),
    "tolerate-everything": ok(
        make_pod("p").tolerate(operator="Exists").obj(),
        make_node("n1").taint("a", "1").taint("b", "2", "NoExecute").info(),
    ),
    "wrong-value": fails(
        make_pod("p").tolerate("dedicated", "Equal", "cpu").obj(),
        GPU_TAINTED.info(),
        "node(s) had untolerated taint {dedicated: gpu}",
    ),
    "wrong-effect": fails(
        make_pod("p").tolerate("dedicated", "Exists", effect="NoExecute").obj(),
        GPU_TAINTED.info(),
        "node(s) had untolerated taint {dedicated: gpu}",
    ),
    "names-the-untolerated-one": fails(
        make_pod("p").tolerate("a", "Exists").obj(),
        make_node("n1")
        .taint("a", "1")
        .taint("soft", "", "PreferNoSchedule")
        .taint("b", "2")
        .info(),
        "node(s) had untolerated taint {b: 2}",
    ),
    "all-tolerated-one-by-one": ok(
        make_pod("p").tolerate("a", "Exists").tolerate("b", "Equal", "2").obj(),
        make_node("n1").taint("a", "1").taint("b", "2", "NoExecute").info(),
    ),
}


@pytest.mark.parametrize("case", TAINT_CASES.values(), ids=TAINT_CASES.keys())
def test_taint_toleration_filter(case: FilterCase) -> None:
    check_filter(TaintToleration(), case)


# ---- TaintToleration score --------------------------------------------------------------

SOFT = "PreferNoSchedule"
TAINT_SCORE_CASES = {
    "no-taints": (make_pod("p").obj(), make_node("n1").info(), 100.0),
    "one-intolerable": (make_pod("p").obj(), make_node("n1").taint("a", "", SOFT).info(), 50.0),
    "two-intolerable": (
        make_pod("p").obj(),
        make_node("n1").taint("a", "", SOFT).taint("b", "", SOFT).info(),
        100.0 / 3,
    ),
    "tolerated": (
        make_pod("p").tolerate("a", "Exists", effect=SOFT).obj(),
        make_node("n1").taint("a", "", SOFT).info(),
        100.0,
    ),
    "one-of-two-tolerated": (
        make_pod("p").tolerate("a", "Exists").obj(),
        make_node("n1").taint("a", "", SOFT).taint("b", "", SOFT).info(),
        50.0,
    ),
    "hard-taints-ignored": (
        make_pod("p").obj(),
        make_node("n1").taint("a").taint("b", "", "NoExecute").info(),
        100.0,
    ),
    "noschedule-toleration-does-not-cover-prefer": (
        make_pod("p").tolerate("a", "Exists", effect="NoSchedule").obj(),
        make_node("n1").taint("a", "", SOFT).info(),
        50.0,
    ),
    "missing-node": (make_pod("p").obj(), missing_node("n1"), 0.0),
}


@pytest.mark.parametrize(
    ("pod", "node", "expected"), TAINT_SCORE_CASES.values(), ids=TAINT_SCORE_CASES.keys()
)
def test_taint_toleration_score(pod: Pod, node: NodeInfo, expected: float) -> None:
    assert score_of(TaintTolerationScore(), pod, node) == pytest.approx(expected)


def test_taint_toleration_score_decreases_with_each_taint() -> None:
    pod = make_pod("p").obj()
    builder = make_node("n1")
    scores = []
    for i in range(6):
        scores.append(score_of(TaintTolerationScore(), pod, builder.info()))
        builder = builder.taint(f"t{i}", "", SOFT)
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == len(scores)
    assert scores[-1] > 0


# ---- NodeAffinity filter ----------------------------------------------------------------

LABELLED = make_node("n1").label("zone", "a").label("gen", "5").label("gpu", "a100")


AFFINITY_CASES = {
    "no-constraints": ok(make_pod("p").obj(), LABELLED.info()),
    "missing-node": fails(make_pod("p").obj(), missing_node("n1"), NOT_FOUND),
    # nodeSelector
    "selector-match": ok(make_pod("p").selector("zone", "a").obj(), LABELLED.info()),
    "selector-all-match": ok(
        make_pod("p").selector("zone", "a").selector("gpu", "a100").obj(), LABELLED.info()
    ),
    "selector-wrong-value": fails(
        make_pod("p").selector("zone", "b").obj(), LABELLED.info(), AFFINITY_MISMATCH
    ),
    "selector-one-of-two-wrong": fails(
        make_pod("p").selector("zone", "a").selector("gpu", "h100").obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "selector-label-absent": fails(
        make_pod("p").selector("rack", "").obj(), LABELLED.info(), AFFINITY_MISMATCH
    ),
    # required terms
    "required-empty-list-matches-nothing": fails(
        make_pod("p").require().obj(), LABELLED.info(), AFFINITY_MISMATCH
    ),
    "empty-term-matches-nothing": fails(
        make_pod("p").require(term()).obj(), LABELLED.info(), AFFINITY_MISMATCH
    ),
    "empty-term-ored-with-match": ok(
        make_pod("p").require(term(), term(req("zone", "In", "a"))).obj(), LABELLED.info()
    ),
    "in-match": ok(make_pod("p").require(term(req("zone", "In", "b", "a"))).obj(), LABELLED.info()),
    "in-no-match": fails(
        make_pod("p").require(term(req("zone", "In", "b", "c"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "in-label-absent": fails(
        make_pod("p").require(term(req("rack", "In", "r1"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "in-without-values-is-invalid": fails(
        make_pod("p").require(term(req("zone", "In"))).obj(), LABELLED.info(), AFFINITY_MISMATCH
    ),
    "notin-label-absent": ok(
        make_pod("p").require(term(req("rack", "NotIn", "r1"))).obj(), LABELLED.info()
    ),
    "notin-other-value": ok(
        make_pod("p").require(term(req("zone", "NotIn", "b"))).obj(), LABELLED.info()
    ),
    "notin-listed-value": fails(
        make_pod("p").require(term(req("zone", "NotIn", "b", "a"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "notin-without-values-is-invalid": fails(
        make_pod("p").require(term(req("rack", "NotIn"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "exists": ok(make_pod("p").require(term(req("gpu", "Exists"))).obj(), LABELLED.info()),
    "exists-absent": fails(
        make_pod("p").require(term(req("rack", "Exists"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "exists-with-values-is-invalid": fails(
        make_pod("p").require(term(req("gpu", "Exists", "a100"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "does-not-exist": ok(
        make_pod("p").require(term(req("rack", "DoesNotExist"))).obj(), LABELLED.info()
    ),
    "does-not-exist-present": fails(
        make_pod("p").require(term(req("gpu", "DoesNotExist"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "gt": ok(make_pod("p").require(term(req("gen", "Gt", "4"))).obj(), LABELLED.info()),
    "gt-equal-is-false": fails(
        make_pod("p").require(term(req("gen", "Gt", "5"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "gt-negative-bound": ok(
        make_pod("p").require(term(req("gen", "Gt", "-10"))).obj(), LABELLED.info()
    ),
    "gt-signed-bound": ok(
        make_pod("p").require(term(req("gen", "Gt", "+4"))).obj(), LABELLED.info()
    ),
    "lt": ok(make_pod("p").require(term(req("gen", "Lt", "10"))).obj(), LABELLED.info()),
    "lt-equal-is-false": fails(
        make_pod("p").require(term(req("gen", "Lt", "5"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "lt-compares-numbers-not-strings": ok(
        make_pod("p").require(term(req("gen", "Lt", "10"))).obj(),
        make_node("n1").label("gen", "9").info(),
    ),
    "gt-label-not-integer": fails(
        make_pod("p").require(term(req("gpu", "Gt", "1"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "gt-label-absent": fails(
        make_pod("p").require(term(req("rack", "Gt", "1"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "gt-label-with-space": fails(
        make_pod("p").require(term(req("gen", "Gt", "1"))).obj(),
        make_node("n1").label("gen", " 5").info(),
        AFFINITY_MISMATCH,
    ),
    "gt-label-with-underscore": fails(
        make_pod("p").require(term(req("gen", "Gt", "1"))).obj(),
        make_node("n1").label("gen", "1_0").info(),
        AFFINITY_MISMATCH,
    ),
    "gt-label-beyond-int64": fails(
        make_pod("p").require(term(req("gen", "Gt", "1"))).obj(),
        make_node("n1").label("gen", str(2**63)).info(),
        AFFINITY_MISMATCH,
    ),
    "gt-value-not-integer": fails(
        make_pod("p").require(term(req("gen", "Gt", "4.5"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "gt-two-values": fails(
        make_pod("p").require(term(req("gen", "Gt", "1", "2"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "gt-no-values": fails(
        make_pod("p").require(term(req("gen", "Gt"))).obj(), LABELLED.info(), AFFINITY_MISMATCH
    ),
    "unknown-operator": fails(
        make_pod("p").require(term(req("zone", "Equals", "a"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "expressions-anded": fails(
        make_pod("p").require(term(req("zone", "In", "a"), req("gpu", "In", "h100"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "expressions-anded-all-true": ok(
        make_pod("p").require(term(req("zone", "In", "a"), req("gen", "Gt", "4"))).obj(),
        LABELLED.info(),
    ),
    "terms-ored": ok(
        make_pod("p").require(term(req("zone", "In", "b")), term(req("gpu", "In", "a100"))).obj(),
        LABELLED.info(),
    ),
    "terms-ored-none-true": fails(
        make_pod("p").require(term(req("zone", "In", "b")), term(req("gpu", "In", "h100"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "invalid-term-skipped-other-term-counts": ok(
        make_pod("p").require(term(req("zone", "In")), term(req("zone", "In", "a"))).obj(),
        LABELLED.info(),
    ),
    # matchFields
    "field-in": ok(make_pod("p").require(term(fields=(field("In", "n1"),))).obj(), LABELLED.info()),
    "field-in-other-node": fails(
        make_pod("p").require(term(fields=(field("In", "n2"),))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "field-notin": ok(
        make_pod("p").require(term(fields=(field("NotIn", "n2"),))).obj(), LABELLED.info()
    ),
    "field-notin-this-node": fails(
        make_pod("p").require(term(fields=(field("NotIn", "n1"),))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "field-two-values-is-invalid": fails(
        make_pod("p").require(term(fields=(field("In", "n1", "n2"),))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "field-other-key-is-invalid": fails(
        make_pod("p").require(term(fields=(field("In", "a", key="metadata.labels"),))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "field-exists-is-invalid": fails(
        make_pod("p").require(term(fields=(field("Exists"),))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "field-and-expression-anded": fails(
        make_pod("p").require(term(req("zone", "In", "b"), fields=(field("In", "n1"),))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "field-and-expression-both-true": ok(
        make_pod("p").require(term(req("zone", "In", "a"), fields=(field("In", "n1"),))).obj(),
        LABELLED.info(),
    ),
    # selector and affinity together
    "selector-and-affinity-anded": fails(
        make_pod("p").selector("zone", "b").require(term(req("gpu", "Exists"))).obj(),
        LABELLED.info(),
        AFFINITY_MISMATCH,
    ),
    "selector-and-affinity-both-true": ok(
        make_pod("p").selector("zone", "a").require(term(req("gpu", "Exists"))).obj(),
        LABELLED.info(),
    ),
    "preferred-terms-do-not-filter": ok(
        make_pod("p").prefer(100, term(req("zone", "In", "b"))).obj(), LABELLED.info()
    ),
}


@pytest.mark.parametrize("case", AFFINITY_CASES.values(), ids=AFFINITY_CASES.keys())
def test_node_affinity_filter(case: FilterCase) -> None:
    check_filter(NodeAffinity(), case)


# ---- NodeAffinity score -----------------------------------------------------------------

ZONE_A = term(req("zone", "In", "a"))
ZONE_B = term(req("zone", "In", "b"))
HAS_GPU = term(req("gpu", "Exists"))
AFFINITY_SCORE_CASES = {
    "no-preferred": (make_pod("p").obj(), LABELLED.info(), 0.0),
    "all-match": (
        make_pod("p").prefer(10, ZONE_A).prefer(5, HAS_GPU).obj(),
        LABELLED.info(),
        100.0,
    ),
    "weighted-part": (
        make_pod("p").prefer(80, ZONE_A).prefer(20, ZONE_B).obj(),
        LABELLED.info(),
        80.0,
    ),
    "weighted-other-part": (
        make_pod("p").prefer(80, ZONE_B).prefer(20, ZONE_A).obj(),
        LABELLED.info(),
        20.0,
    ),
    "none-match": (make_pod("p").prefer(50, ZONE_B).obj(), LABELLED.info(), 0.0),
    "zero-weight-ignored": (
        make_pod("p").prefer(0, ZONE_B).prefer(10, ZONE_A).obj(),
        LABELLED.info(),
        100.0,
    ),
    "empty-term-ignored": (
        make_pod("p").prefer(30, term()).prefer(10, ZONE_A).obj(),
        LABELLED.info(),
        100.0,
    ),
    "only-ignored-terms": (make_pod("p").prefer(0, ZONE_A).obj(), LABELLED.info(), 0.0),
    "field-preference": (
        make_pod("p").prefer(1, term(fields=(field("In", "n1"),))).prefer(3, ZONE_B).obj(),
        LABELLED.info(),
        25.0,
    ),
    "missing-node": (make_pod("p").prefer(10, ZONE_A).obj(), missing_node("n1"), 0.0),
}


@pytest.mark.parametrize(
    ("pod", "node", "expected"), AFFINITY_SCORE_CASES.values(), ids=AFFINITY_SCORE_CASES.keys()
)
def test_node_affinity_score(pod: Pod, node: NodeInfo, expected: float) -> None:
    assert score_of(NodeAffinityScore(), pod, node) == pytest.approx(expected)


def test_node_affinity_score_ignores_selector_and_required() -> None:
    pod = make_pod("p").selector("zone", "b").require(ZONE_B).obj()
    assert score_of(NodeAffinityScore(), pod, LABELLED.info()) == 0.0


# ---- NodeResourcesFit -------------------------------------------------------------------

BIG = make_node("n1").cpu("8").memory("32Gi").gpus(8).pods(3)
FIT_CASES = {
    "fits-empty-node": ok(make_pod("p").cpu("2").memory("4Gi").gpus(2).obj(), BIG.info()),
    "fits-exactly": ok(
        make_pod("p").cpu("2").memory("4Gi").gpus(2).obj(),
        BIG.info(requested={CPU: 6000, MEMORY: 28 * GI, GPU: 6, PODS: 2}),
    ),
    "no-requests": ok(make_pod("p").obj(), BIG.info()),
    "insufficient-cpu": fails(
        make_pod("p").cpu("2").obj(),
        BIG.info(requested={CPU: 6001}),
        "Insufficient cpu",
        Code.UNSCHEDULABLE,
    ),
    "insufficient-memory": fails(
        make_pod("p").memory("33Gi").obj(), BIG.info(), "Insufficient memory", Code.UNSCHEDULABLE
    ),
    "insufficient-gpu": fails(
        make_pod("p").gpus(3).obj(),
        BIG.info(requested={GPU: 6}),
        "Insufficient nvidia.com/gpu",
        Code.UNSCHEDULABLE,
    ),
    "gpu-on-cpu-node": fails(
        make_pod("p").gpus(1).obj(),
        make_node("n2").cpu("64").info(),
        "Insufficient nvidia.com/gpu",
        Code.UNSCHEDULABLE,
    ),
    "too-many-pods": fails(
        make_pod("p").obj(), BIG.info(requested={PODS: 3}), "Too many pods", Code.UNSCHEDULABLE
    ),
    "node-without-pods-allocatable": fails(
        make_pod("p").obj(),
        make_node("n2").without(PODS).info(),
        "Too many pods",
        Code.UNSCHEDULABLE,
    ),
    "extended-resource-absent-from-node": fails(
        make_pod("p").resource("example.com/fpga", 1).obj(),
        BIG.info(),
        "Insufficient example.com/fpga",
        Code.UNSCHEDULABLE,
    ),
    "zero-request-of-absent-resource": ok(
        make_pod("p").resource("example.com/fpga", 0).obj(), BIG.info()
    ),
    "overcommitted-node": fails(
        make_pod("p").cpu("100m").obj(),
        BIG.info(requested={CPU: 9000}),
        "Insufficient cpu",
        Code.UNSCHEDULABLE,
    ),
    "missing-node": fails(make_pod("p").cpu("1").obj(), missing_node("n1"), NOT_FOUND),
}


@pytest.mark.parametrize("case", FIT_CASES.values(), ids=FIT_CASES.keys())
def test_node_resources_fit(case: FilterCase) -> None:
    check_filter(NodeResourcesFit(), case)


def test_node_resources_fit_reuses_statuses() -> None:
    plugin = NodeResourcesFit()
    pod = make_pod("p").cpu("100").obj()
    node = BIG.info()
    assert plugin.filter(pod, node) is plugin.filter(pod, node)


# ---- GPUBinPack -------------------------------------------------------------------------

GPU8 = make_node("g1").cpu("64").gpus(8)
CPU_ONLY = make_node("c1").cpu("64")
BINPACK_CASES = {
    "one-gpu-empty-node": (make_pod("p").gpus(1).obj(), GPU8.info(), 12.5),
    "one-gpu-partly-used": (make_pod("p").gpus(1).obj(), GPU8.info(requested={GPU: 6}), 87.5),
    "fills-node": (make_pod("p").gpus(2).obj(), GPU8.info(requested={GPU: 6}), 100.0),
    "whole-node": (make_pod("p").gpus(8).obj(), GPU8.info(), 100.0),
    "overfull-capped": (make_pod("p").gpus(4).obj(), GPU8.info(requested={GPU: 6}), 100.0),
    "gpu-pod-on-cpu-node": (make_pod("p").gpus(1).obj(), CPU_ONLY.info(), 0.0),
    "cpu-pod-on-cpu-node": (make_pod("p").cpu("1").obj(), CPU_ONLY.info(), 100.0),
    "cpu-pod-on-gpu-node": (make_pod("p").cpu("1").obj(), GPU8.info(), 0.0),
    "cpu-pod-on-full-gpu-node": (make_pod("p").obj(), GPU8.info(requested={GPU: 8}), 0.0),
    "missing-node": (make_pod("p").gpus(1).obj(), missing_node("g1"), 0.0),
}


@pytest.mark.parametrize(
    ("pod", "node", "expected"), BINPACK_CASES.values(), ids=BINPACK_CASES.keys()
)
def test_gpu_binpack(pod: Pod, node: NodeInfo, expected: float) -> None:
    assert score_of(GPUBinPack(), pod, node) == pytest.approx(expected)


def test_gpu_binpack_prefers_partly_used_nodes() -> None:
    pod = make_pod("p").gpus(2).obj()
    plugin = GPUBinPack()
    empty = plugin.score(pod, GPU8.info())
    half = plugin.score(pod, GPU8.info(requested={GPU: 4}))
    tight = plugin.score(pod, GPU8.info(requested={GPU: 6}))
    assert empty < half < tight


def test_gpu_binpack_resource_is_configurable() -> None:
    plugin = GPUBinPack("amd.com/gpu")
    node = make_node("a1").resource("amd.com/gpu", 4).info(requested={"amd.com/gpu": 1})
    pod = make_pod("p").resource("amd.com/gpu", 1).obj()
    assert plugin.score(pod, node) == pytest.approx(50.0)
    # An nvidia pod is "not requesting" this plugin's resource.
    assert plugin.score(make_pod("q").gpus(1).obj(), node) == 0.0
    assert plugin.score(make_pod("q").gpus(1).obj(), GPU8.info()) == 100.0


# ---- LeastAllocated ---------------------------------------------------------------------

STD = make_node("s1").cpu("4").memory("8Gi")
LEAST_CASES = {
    "empty-node": (make_pod("p").cpu("1").memory("2Gi").obj(), STD.info(), 75.0),
    # cpu (4 - 2 - 1) / 4 = 25%, memory (8 - 0 - 4) / 8 = 50% -> mean 37.5
    "partly-used": (
        make_pod("p").cpu("1").memory("4Gi").obj(),
        STD.info(requested={CPU: 2000}),
        37.5,
    ),
    "no-requests-empty-node": (make_pod("p").obj(), STD.info(), 100.0),
    "full-after-placing": (make_pod("p").cpu("4").memory("8Gi").obj(), STD.info(), 0.0),
    # cpu overcommitted -> clamped to 0; memory (8 - 2) / 8 = 75% -> mean 37.5
    "overcommitted-clamped": (
        make_pod("p").cpu("2").memory("2Gi").obj(),
        STD.info(requested={CPU: 4000}),
        37.5,
    ),
    "no-memory-allocatable": (make_pod("p").cpu("1").obj(), make_node("x").cpu("4").info(), 75.0),
    "nothing-allocatable": (make_pod("p").cpu("1").obj(), make_node("x").info(), 0.0),
    "gpu-pod": (make_pod("p").gpus(1).cpu("1").obj(), STD.gpus(8).info(), 0.0),
    "missing-node": (make_pod("p").cpu("1").obj(), missing_node("s1"), 0.0),
}


@pytest.mark.parametrize(("pod", "node", "expected"), LEAST_CASES.values(), ids=LEAST_CASES.keys())
def test_least_allocated(pod: Pod, node: NodeInfo, expected: float) -> None:
    assert score_of(LeastAllocated(), pod, node) == pytest.approx(expected)


def test_least_allocated_prefers_emptier_nodes() -> None:
    pod = make_pod("p").cpu("1").memory("1Gi").obj()
    plugin = LeastAllocated()
    busy = plugin.score(pod, make_node("a").cpu("4").memory("8Gi").info(requested={CPU: 2000}))
    idle = plugin.score(pod, make_node("b").cpu("4").memory("8Gi").info())
    assert idle > busy


# ---- registry ---------------------------------------------------------------------------


def test_default_filters_order() -> None:
    assert DEFAULT_FILTERS == (
        "NodeUnschedulable",
        "NodeName",
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "GPUDevices",
        "NodePorts",
        "VolumeRestrictions",
        "NodeVolumeLimits",
        "VolumeBinding",
        "VolumeZone",
        "PodTopologySpread",
        "InterPodAffinity",
        "DynamicResources",
    )
    assert set(DEFAULT_FILTERS) <= set(FILTERS)


def test_default_score_weights() -> None:
    """The default is the fgd profile; binpack keeps best fit."""
    assert DEFAULT_SCORE_WEIGHTS == {
        "AvoidFreeGPUs": 2,
        "FragmentationGradient": 10,
        "GangLocality": 15,
        "InterPodAffinity": 2,
        "NodeAffinity": 2,
        "PodTopologySpread": 2,
        "TaintToleration": 1,
        "TaskTopology": 20,
    }
    assert BINPACK_SCORE_WEIGHTS == {
        "GPUBinPack": 10,
        "InterPodAffinity": 2,
        "LeastAllocated": 1,
        "NodeAffinity": 2,
        "PodTopologySpread": 2,
        "TaintToleration": 1,
        "TaskTopology": 20,
    }
    assert set(DEFAULT_SCORE_WEIGHTS) | set(BINPACK_SCORE_WEIGHTS) <= set(SCORERS)


_CTX = PluginContext(ClusterCache(), lambda key: None)


@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filter_factories(name: str) -> None:
    """Every registered filter lets a pod with no constraints through on an empty node."""
    plugin = FILTERS[name](_CTX)
    assert plugin.name == name
    pod, node = make_pod("p").obj(), make_node("n1").cpu("1").info()
    if isinstance(plugin, PreFilterPlugin):
        state = CycleState()
        pre = plugin.pre_filter(pod, state)
        assert pre.ok or pre.code is Code.SKIP
        if pre.ok:
            assert plugin.filter_with(pod, node, state).ok
        return
    assert plugin.static is (name not in ("NodeResourcesFit", "GPUDevices"))
    assert plugin.filter(pod, node).ok


@pytest.mark.parametrize("name", sorted(SCORERS))
def test_score_factories(name: str) -> None:
    plugin = SCORERS[name](_CTX)
    assert plugin.name == name
    pod, node = make_pod("p").obj(), make_node("n1").cpu("1").info()
    if isinstance(plugin, NormalizingScorePlugin):
        state = CycleState()
        if plugin.pre_score(pod, state).code is Code.SKIP:
            return
        raw = [plugin.raw_score(pod, node, state)]
        plugin.normalize(raw, state)
        assert 0.0 <= raw[0] <= 100.0
        return
    assert 0.0 <= plugin.score(pod, node) <= 100.0


def test_plugins_build_independent_instances() -> None:
    assert FILTERS["NodeResourcesFit"](_CTX) is not FILTERS["NodeResourcesFit"](_CTX)
