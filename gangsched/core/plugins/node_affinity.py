"""NodeAffinity: ``nodeSelector`` and node affinity, with Kubernetes semantics.

Required terms are ORed; within a term every ``matchExpressions`` and ``matchFields``
requirement must hold; a term with no requirements matches nothing. A requirement Kubernetes
would reject when building its selector makes its whole term match nothing (the scheduler
skips such terms): In/NotIn without values, Exists/DoesNotExist with values, Gt/Lt without
exactly one integer value, an unknown operator. ``matchFields`` supports only ``metadata.name``
with In or NotIn and exactly one value. Label key and value syntax is not checked.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.model import AffinityTerm, Node, Placement, Pod, PreferredTerm, Requirement
from gangsched.core.plugins._common import NODE_NOT_FOUND

__all__ = [
    "NodeAffinity",
    "NodeAffinityScore",
    "placement_matches",
    "requirement_matches",
    "term_matches",
]

_MISMATCH = Status(Code.UNRESOLVABLE, "node(s) didn't match Pod's node affinity/selector")

# strconv.ParseInt(s, 10, 64): optional sign, ASCII digits, within int64.
_INT_RE = re.compile(r"[+-]?[0-9]+")
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1


def _parse_int64(text: str) -> int | None:
    if _INT_RE.fullmatch(text) is None:
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def requirement_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    """Whether one ``matchExpressions`` requirement holds for a node's labels."""
    op = req.operator
    values = req.values
    if op == "In":
        have = labels.get(req.key)
        return bool(values) and have is not None and have in values
    if op == "NotIn":
        have = labels.get(req.key)
        return bool(values) and (have is None or have not in values)
    if op == "Exists":
        return not values and req.key in labels
    if op == "DoesNotExist":
        return not values and req.key not in labels
    if op == "Gt" or op == "Lt":
        if len(values) != 1:
            return False
        bound = _parse_int64(values[0])
        raw = labels.get(req.key)
        if bound is None or raw is None:
            return False
        number = _parse_int64(raw)
        if number is None:
            return False
        return number > bound if op == "Gt" else number < bound
    return False


def _field_matches(req: Requirement, node_name: str) -> bool:
    if req.key != "metadata.name" or len(req.values) != 1:
        return False
    if req.operator == "In":
        return node_name == req.values[0]
    if req.operator == "NotIn":
        return node_name != req.values[0]
    return False


def term_matches(term: AffinityTerm, labels: Mapping[str, str], node_name: str) -> bool:
    """Whether a node selector term holds; an empty term matches nothing."""
    if not term.match_expressions and not term.match_fields:
        return False
    for req in term.match_expressions:
        if not requirement_matches(req, labels):
            return False
    return all(_field_matches(req, node_name) for req in term.match_fields)


def placement_matches(placement: Placement, node: Node) -> bool:
    """Every ``nodeSelector`` label matches and, when there is required node affinity, at
    least one required term does (kube-scheduler's GetRequiredNodeAffinity)."""
    labels = node.labels
    for key, value in placement.node_selector:
        if labels.get(key) != value:
            return False
    required = placement.affinity.required
    if required is None:
        return True
    return any(term_matches(term, labels, node.name) for term in required)


class NodeAffinity:
    """Filter: every ``nodeSelector`` label must match, and (when the pod has required node
    affinity) at least one required term."""

    name: str = "NodeAffinity"
    static: bool = True

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        return SUCCESS if placement_matches(pod.placement, n) else _MISMATCH


def _counts(pref: PreferredTerm) -> bool:
    # Kubernetes skips zero-weight and empty preferred terms entirely.
    term = pref.term
    return pref.weight > 0 and bool(term.match_expressions or term.match_fields)


class NodeAffinityScore:
    """Scorer: the weight of the preferred terms a node matches, as a percentage of the
    pod's total preferred weight (zero-weight and empty terms ignored). A pod with no
    preferred terms, or a missing node, scores 0."""

    name: str = "NodeAffinity"

    def score(self, pod: Pod, node: NodeInfo) -> float:
        preferred = pod.placement.affinity.preferred
        n = node.node
        if not preferred or n is None:
            return 0.0
        labels = n.labels
        total = 0
        matched = 0
        for pref in preferred:
            if not _counts(pref):
                continue
            total += pref.weight
            if term_matches(pref.term, labels, n.name):
                matched += pref.weight
        if total <= 0:
            return 0.0
        return 100.0 * matched / total
