"""Label selectors (metav1.LabelSelector), as pod affinity terms, topology spread constraints
and PodDisruptionBudgets write them, and the label keys the API server merges into them."""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.api.fields import SpecError, as_list, as_map, as_written, nonempty_str, not_a_string
from gangsched.core.model import LabelSelector, Requirement

__all__ = ["label_selector", "with_label_keys"]


_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _selector_requirement(r: object, field: str) -> Requirement:
    r = as_map(r, field)
    key = nonempty_str(r.get("key"), f"{field}.key")
    op = r.get("operator")
    if not isinstance(op, str) or op not in _SELECTOR_OPERATORS:
        raise SpecError(f"{field}.operator: unknown operator {as_written(op)}")
    values = tuple(
        v if isinstance(v, str) else not_a_string(f"{field}.values[{i}]", v)
        for i, v in enumerate(as_list(r.get("values"), f"{field}.values"))
    )
    if op in ("In", "NotIn") and not values:
        raise SpecError(f"{field}.values: must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise SpecError(f"{field}.values: must be empty for operator {op}")
    return Requirement(key, op, values)


def _selector(obj: object, field: str) -> LabelSelector | None:
    """A metav1.LabelSelector; absent (nil, matching nothing) is None."""
    if obj is None:
        return None
    s = as_map(obj, field)
    pairs = []
    for k, v in as_map(s.get("matchLabels"), f"{field}.matchLabels").items():
        key = nonempty_str(k, f"{field}.matchLabels")
        pairs.append(
            (key, v if isinstance(v, str) else not_a_string(f"{field}.matchLabels.{key}", v))
        )
    exprs = tuple(
        _selector_requirement(r, f"{field}.matchExpressions[{i}]")
        for i, r in enumerate(as_list(s.get("matchExpressions"), f"{field}.matchExpressions"))
    )
    return LabelSelector(tuple(sorted(pairs)), exprs)


def label_selector(obj: object, field: str) -> LabelSelector | None:
    """A metav1.LabelSelector as pod affinity terms read it (absent: None, matching nothing);
    raises :class:`SpecError`, naming ``field``, when it cannot be read."""
    return _selector(obj, field)


def with_label_keys(
    selector: LabelSelector | None,
    keys: tuple[str, ...],
    operator: str,
    labels: Mapping[str, str],
    *,
    once_per_key: bool,
) -> LabelSelector | None:
    """``selector`` with ``key <operator> (pod's value)`` added for each of ``keys`` the pod
    has a label for, as the API server does at creation (a nil selector stays nil: it matches
    nothing either way).

    Idempotent: the API server has usually merged them already. With ``once_per_key`` a key
    that already has a single-valued requirement with that operator is left alone (the API
    server's merge, made with the labels the pod had at creation, is what kube-scheduler
    reads for inter-pod affinity); without it only an identical requirement is skipped
    (kube-scheduler merges topology spread keys again itself, with the current labels)."""
    if selector is None or not keys:
        return selector
    exprs = list(selector.match_expressions)
    for key in keys:
        value = labels.get(key)
        if value is None:
            continue
        req = Requirement(key, operator, (value,))
        if once_per_key:
            if any(r.key == key and r.operator == operator and len(r.values) == 1 for r in exprs):
                continue
        elif req in exprs:
            continue
        exprs.append(req)
    return LabelSelector(selector.match_labels, tuple(exprs))
