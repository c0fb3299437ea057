"""Label selectors and pod-affinity terms matched against labels, with Kubernetes semantics.

A selector's requirements are ANDed; an empty selector matches everything and a missing one
(``None``) matches nothing. In and NotIn need values, Exists and DoesNotExist take none; a
malformed requirement (or an operator label selectors do not have) matches nothing, as the
API would have refused it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from gangsched.core.model import LabelSelector, PodAffinityTerm, Requirement

__all__ = [
    "NamespaceLabels",
    "expression_matches",
    "selector_matches",
    "term_selects",
    "valid_label_key",
]

_KEY_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_KEY_PREFIX = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def valid_label_key(key: str) -> bool:
    """A label key as Kubernetes validates one: an optional DNS-subdomain prefix (at most 253
    characters) and '/', then a name of at most 63 characters."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _KEY_PREFIX.match(prefix)):
        return False
    return bool(_KEY_NAME.match(name))


# Namespace name -> its labels (None when the namespace is unknown).
NamespaceLabels = Callable[[str], Mapping[str, str] | None]


def expression_matches(req: Requirement, labels: Mapping[str, str]) -> bool:
    op = req.operator
    if op == "In":
        have = labels.get(req.key)
        return bool(req.values) and have is not None and have in req.values
    if op == "NotIn":
        have = labels.get(req.key)
        return bool(req.values) and (have is None or have not in req.values)
    if op == "Exists":
        return not req.values and req.key in labels
    if op == "DoesNotExist":
        return not req.values and req.key not in labels
    return False


def selector_matches(selector: LabelSelector | None, labels: Mapping[str, str]) -> bool:
    if selector is None:
        return False
    for key, value in selector.match_labels:
        if labels.get(key) != value:
            return False
    return all(expression_matches(r, labels) for r in selector.match_expressions)


def term_selects(
    term: PodAffinityTerm,
    namespace: str,
    labels: Mapping[str, str],
    namespace_labels: NamespaceLabels,
) -> bool:
    """Whether ``term`` selects a pod in ``namespace`` with ``labels``."""
    if namespace not in term.namespaces:
        sel = term.namespace_selector
        if sel is None:
            return False
        if sel.match_labels or sel.match_expressions:
            ns_labels = namespace_labels(namespace)
            if ns_labels is None or not selector_matches(sel, ns_labels):
                return False
    return selector_matches(term.selector, labels)
