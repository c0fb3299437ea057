"""Kubernetes' matching rules, as kube-scheduler's component-helpers write them: a node
selector requirement and term against a node's labels and name, a pod's required placement
against a node, a toleration against a taint. The plugins (node affinity, taints, topology
spread, node unschedulable) and the volume rules share them; nothing here depends on the cache.

Node selector terms: required terms are ORed; within a term every ``matchExpressions`` and
``matchFields`` requirement must hold; a term with no requirements matches nothing. A
requirement Kubernetes would reject when building its selector makes its whole term match
nothing (the scheduler skips such terms): In/NotIn without values, Exists/DoesNotExist with
values, Gt/Lt without exactly one integer value, an unknown operator. ``matchFields``
supports only ``metadata.name`` with In or NotIn and exactly one value.

Tolerations follow ``Toleration.ToleratesTaint``: a toleration with an effect matches only that
effect (empty matches every effect); with a key matches only that key (empty matches every
key); operator ``Exists`` ignores the value, ``Equal`` (or empty) compares it; any other
operator matches nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from gangsched.core.model import AffinityTerm, Node, Placement, Requirement, Taint, Toleration

__all__ = [
    "NO_EXECUTE",
    "NO_SCHEDULE",
    "PREFER_NO_SCHEDULE",
    "placement_matches",
    "requirement_matches",
    "term_matches",
    "tolerates",
    "toleration_matches",
]

NO_SCHEDULE = "NoSchedule"
PREFER_NO_SCHEDULE = "PreferNoSchedule"
NO_EXECUTE = "NoExecute"


def toleration_matches(toleration: Toleration, taint: Taint) -> bool:
    """Whether one toleration tolerates one taint (Kubernetes semantics)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    op = toleration.operator
    if op == "Exists":
        return True
    if op in ("Equal", ""):
        return toleration.value == taint.value
    return False


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """Whether any of ``tolerations`` tolerates ``taint``."""
    return any(toleration_matches(t, taint) for t in tolerations)


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
