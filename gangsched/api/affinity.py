"""Where a pod may run, as its spec says: node selector, node affinity and tolerations (a
``Placement``), and inter-pod affinity and anti-affinity (a ``PodAffinity``), with the label
keys of ``matchLabelKeys`` and ``mismatchLabelKeys`` merged as the API server does."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gangsched.api.fields import (
    Obj,
    SpecError,
    as_list,
    as_map,
    as_written,
    nonempty_str,
    nonempty_strs,
    str_map,
)
from gangsched.api.selector import label_selector, with_label_keys
from gangsched.core.model import (
    AffinityTerm,
    NodeAffinity,
    Placement,
    PodAffinity,
    PodAffinityTerm,
    PreferredTerm,
    Requirement,
    Toleration,
    WeightedPodAffinityTerm,
)

__all__ = ["node_selector_term", "placement", "pod_affinity"]


def _requirement(r: object, field: str) -> Requirement:
    r = as_map(r, field)
    op = str(r.get("operator") or "")
    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        raise SpecError(f"{field}.operator: unknown operator {op!r}")
    values = tuple(str(v) for v in as_list(r.get("values"), f"{field}.values"))
    return Requirement(str(r.get("key") or ""), op, values)


def node_selector_term(t: object, field: str) -> AffinityTerm:
    """A node selector term (``matchExpressions`` and ``matchFields``)."""
    t = as_map(t, field)
    return AffinityTerm(
        tuple(
            _requirement(r, f"{field}.matchExpressions[{i}]")
            for i, r in enumerate(as_list(t.get("matchExpressions"), field))
        ),
        tuple(
            _requirement(r, f"{field}.matchFields[{i}]")
            for i, r in enumerate(as_list(t.get("matchFields"), field))
        ),
    )


def _preferred(p: object, field: str) -> PreferredTerm:
    p = as_map(p, field)
    weight = p.get("weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        raise SpecError(
            f"{field}.weight: must be an integer from 1 to 100, got {as_written(weight)}"
        )
    return PreferredTerm(weight, node_selector_term(p.get("preference"), f"{field}.preference"))


def placement(spec: Obj) -> Placement:
    na = as_map(as_map(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "nodeAffinity")
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    required: tuple[AffinityTerm, ...] | None = None
    if req is not None:
        terms = as_list(as_map(req, "required").get("nodeSelectorTerms"), "nodeSelectorTerms")
        required = tuple(
            node_selector_term(t, f"nodeSelectorTerms[{i}]") for i, t in enumerate(terms)
        )
    preferred = tuple(
        _preferred(p, f"preferredDuringSchedulingIgnoredDuringExecution[{i}]")
        for i, p in enumerate(
            as_list(na.get("preferredDuringSchedulingIgnoredDuringExecution"), "preferred")
        )
    )
    tolerations = _tolerations(as_list(spec.get("tolerations"), "spec.tolerations"))
    return Placement(
        node_selector=tuple(sorted(str_map(spec.get("nodeSelector"), "nodeSelector").items())),
        affinity=NodeAffinity(required, preferred),
        tolerations=tolerations,
    )


def _toleration(t: Obj) -> Toleration:
    return Toleration(
        str(t.get("key", "") or ""),
        str(t.get("operator", "Equal") or "Equal"),
        str(t.get("value", "") or ""),
        str(t.get("effect", "") or ""),
    )


# Tolerations already read, by what they say: nearly every pod has the same few (the API
# server adds not-ready and unreachable to each), read once each.
_TOLERATIONS: dict[tuple[object, ...], Toleration] = {}
_TOLERATIONS_MAX = 4096


def _tolerations(raw: list[Any]) -> tuple[Toleration, ...]:
    out = []
    for t in raw:
        if not isinstance(t, Mapping):
            continue
        key = (
            t.get("key"),
            t.get("operator"),
            t.get("value"),
            t.get("effect"),
        )
        try:
            toleration = _TOLERATIONS.get(key)
        except TypeError:  # something unhashable where a string belongs
            out.append(_toleration(t))
            continue
        if toleration is None:
            toleration = _toleration(t)
            if len(_TOLERATIONS) >= _TOLERATIONS_MAX:
                _TOLERATIONS.clear()
            _TOLERATIONS[key] = toleration
        out.append(toleration)
    return tuple(out)


def _pod_affinity_term(
    t: object, field: str, namespace: str, labels: Mapping[str, str]
) -> PodAffinityTerm:
    t = as_map(t, field)
    selector = label_selector(t.get("labelSelector"), f"{field}.labelSelector")
    selector = with_label_keys(
        selector,
        nonempty_strs(t.get("matchLabelKeys"), f"{field}.matchLabelKeys"),
        "In",
        labels,
        once_per_key=True,
    )
    selector = with_label_keys(
        selector,
        nonempty_strs(t.get("mismatchLabelKeys"), f"{field}.mismatchLabelKeys"),
        "NotIn",
        labels,
        once_per_key=True,
    )
    namespaces = frozenset(nonempty_strs(t.get("namespaces"), f"{field}.namespaces"))
    ns_selector = label_selector(t.get("namespaceSelector"), f"{field}.namespaceSelector")
    if not namespaces and ns_selector is None:
        namespaces = frozenset({namespace})
    return PodAffinityTerm(
        nonempty_str(t.get("topologyKey"), f"{field}.topologyKey"),
        selector,
        namespaces,
        ns_selector,
    )


def _weight(v: object, field: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100:
        raise SpecError(f"{field}: must be an integer from 1 to 100, got {as_written(v)}")
    return v


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _pod_affinity_terms(
    obj: object, field: str, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[PodAffinityTerm, ...], tuple[WeightedPodAffinityTerm, ...]]:
    a = as_map(obj, field)
    required = tuple(
        _pod_affinity_term(t, f"{field}.{_REQUIRED}[{i}]", namespace, labels)
        for i, t in enumerate(as_list(a.get(_REQUIRED), f"{field}.{_REQUIRED}"))
    )
    preferred = []
    for i, p in enumerate(as_list(a.get(_PREFERRED), f"{field}.{_PREFERRED}")):
        f = f"{field}.{_PREFERRED}[{i}]"
        p = as_map(p, f)
        weight = _weight(p.get("weight"), f"{f}.weight")
        term = p.get("podAffinityTerm")
        if term is None:
            raise SpecError(f"{f}.podAffinityTerm: required")
        preferred.append(
            WeightedPodAffinityTerm(
                weight, _pod_affinity_term(term, f"{f}.podAffinityTerm", namespace, labels)
            )
        )
    return required, tuple(preferred)


_NO_POD_AFFINITY = PodAffinity()


def pod_affinity(spec: Obj, namespace: str, labels: Mapping[str, str]) -> PodAffinity:
    affinity = as_map(spec.get("affinity"), "spec.affinity")
    if "podAffinity" not in affinity and "podAntiAffinity" not in affinity:
        return _NO_POD_AFFINITY  # (frozen: one object serves every pod without any)
    required, preferred = _pod_affinity_terms(
        affinity.get("podAffinity"), "spec.affinity.podAffinity", namespace, labels
    )
    required_anti, preferred_anti = _pod_affinity_terms(
        affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity", namespace, labels
    )
    return PodAffinity(required, preferred, required_anti, preferred_anti)
