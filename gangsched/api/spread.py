"""A pod's topology spread constraints (``spec.topologySpreadConstraints``), as kube-scheduler
v1.36 reads them, with the label keys of ``matchLabelKeys`` merged into the selector."""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.api.fields import (
    Obj,
    SpecError,
    as_list,
    as_map,
    as_written,
    nonempty_str,
    nonempty_strs,
)
from gangsched.api.selector import label_selector, with_label_keys
from gangsched.core.model import SpreadConstraint

__all__ = ["spread"]


_WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_INCLUSION_POLICIES = ("Honor", "Ignore")


def _policy(v: object, field: str, default: str) -> str:
    if v is None:
        return default
    if not isinstance(v, str) or v not in _INCLUSION_POLICIES:
        raise SpecError(f"{field}: must be Honor or Ignore, got {as_written(v)}")
    return v


def _spread_constraint(c: object, field: str, labels: Mapping[str, str]) -> SpreadConstraint:
    c = as_map(c, field)
    max_skew = c.get("maxSkew")
    if isinstance(max_skew, bool) or not isinstance(max_skew, int) or max_skew < 1:
        raise SpecError(f"{field}.maxSkew: must be an integer >= 1, got {as_written(max_skew)}")
    when = c.get("whenUnsatisfiable")
    if not isinstance(when, str) or when not in _WHEN_UNSATISFIABLE:
        raise SpecError(
            f"{field}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, "
            f"got {as_written(when)}"
        )
    min_domains = c.get("minDomains")
    if min_domains is not None:
        if isinstance(min_domains, bool) or not isinstance(min_domains, int) or min_domains < 1:
            raise SpecError(
                f"{field}.minDomains: must be an integer >= 1, got {as_written(min_domains)}"
            )
        if when != "DoNotSchedule":
            raise SpecError(
                f"{field}.minDomains: can only be set when whenUnsatisfiable is DoNotSchedule"
            )
    selector = with_label_keys(
        label_selector(c.get("labelSelector"), f"{field}.labelSelector"),
        nonempty_strs(c.get("matchLabelKeys"), f"{field}.matchLabelKeys"),
        "In",
        labels,
        once_per_key=False,
    )
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=nonempty_str(c.get("topologyKey"), f"{field}.topologyKey"),
        when_unsatisfiable=when,
        selector=selector,
        min_domains=min_domains,
        node_affinity_policy=_policy(
            c.get("nodeAffinityPolicy"), f"{field}.nodeAffinityPolicy", "Honor"
        ),
        node_taints_policy=_policy(
            c.get("nodeTaintsPolicy"), f"{field}.nodeTaintsPolicy", "Ignore"
        ),
    )


def spread(spec: Obj, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    field = "spec.topologySpreadConstraints"
    out: list[SpreadConstraint] = []
    for i, c in enumerate(as_list(spec.get("topologySpreadConstraints"), field)):
        constraint = _spread_constraint(c, f"{field}[{i}]", labels)
        for other in out:
            if (other.topology_key, other.when_unsatisfiable) == (
                constraint.topology_key,
                constraint.when_unsatisfiable,
            ):
                raise SpecError(
                    f"{field}[{i}]: duplicate {{{constraint.topology_key}, "
                    f"{constraint.when_unsatisfiable}}}"
                )
        out.append(constraint)
    return tuple(out)
