"""NodeAffinity: ``nodeSelector`` and node affinity, with Kubernetes semantics.

Required terms are ORed; within a term every ``matchExpressions`` and ``matchFields``
requirement must hold; a term with no requirements matches nothing. A requirement Kubernetes
would reject when building its selector makes its whole term match nothing (the scheduler
skips such terms): In/NotIn without values, Exists/DoesNotExist with values, Gt/Lt without
exactly one integer value, an unknown operator. ``matchFields`` supports only ``metadata.name``
with In or NotIn and exactly one value. Label key and value syntax is not checked.
"""

from __future__ import annotations

from gangsched.core.cache import NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.match import placement_matches, term_matches
from gangsched.core.model import Pod, PreferredTerm
from gangsched.core.plugins._common import NODE_NOT_FOUND

__all__ = ["NodeAffinity", "NodeAffinityScore"]

_MISMATCH = Status(Code.UNRESOLVABLE, "node(s) didn't match Pod's node affinity/selector")


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

    def constant(self, pod: Pod) -> bool:
        return not pod.placement.affinity.preferred

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
