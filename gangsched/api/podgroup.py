"""PodGroups of three conventions (JSON) into the core's ``GangSpec``: gangsched's own
(``gangsched.io/v1alpha1``), scheduler-plugins' (``scheduling.x-k8s.io/v1alpha1``) and Volcano's
(``scheduling.volcano.sh/v1beta1``); the upstream one (``scheduling.k8s.io``) is read by
``workloadapi.py``.

The one rule for what a valid PodGroup is, shared by the scheduler, the PodGroup controller and
``kubectl gang``. Nothing here raises on bad input: a PodGroup that cannot be understood
becomes a GangSpec with ``invalid_reason`` set, naming the field.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from gangsched.api import labels as lbl
from gangsched.api.fields import (
    Obj,
    SpecError,
    as_list,
    as_map,
    as_written,
    identity,
    integer,
    str_map,
    timestamp,
    unreadable,
)
from gangsched.api.membership import MAX_MEMBERS
from gangsched.api.topology import podgroup_domain
from gangsched.core.lifecycle import NONE, POLICIES
from gangsched.core.model import GangMode, GangSpec, RoleSpec, TopologySpec
from gangsched.core.quantity import QuantityError
from gangsched.core.resources import parse_resource_list

__all__ = ["min_member_of", "podgroup_from", "volcano_podgroup_from", "xk8s_podgroup_from"]


def _role(r: object, field: str) -> RoleSpec:
    if r is None:
        raise SpecError(f"{field}: expected an object, got null")
    role = as_map(r, field)
    return RoleSpec(
        str(role.get("name", "")), integer(role.get("minMember", 0), f"{field}.minMember")
    )


def min_member_of(spec: Obj) -> int:
    """A gangsched PodGroup's ``spec.minMember`` as the scheduler reads it (1 when absent): an
    integer from 1 to ``MAX_MEMBERS``, else a :class:`SpecError` naming the field."""
    return integer(spec.get("minMember", 1), "spec.minMember", 1, MAX_MEMBERS)


def _podgroup_from(obj: Obj) -> GangSpec:
    meta = as_map(obj.get("metadata"), "metadata")
    ns = str(meta.get("namespace", "default"))
    key = f"{ns}/{meta.get('name', '')}"
    created = timestamp(meta.get("creationTimestamp"))
    try:
        spec = as_map(obj.get("spec"), "spec")
        min_member = min_member_of(spec)
        timeout = spec.get("scheduleTimeoutSeconds")
        roles = tuple(
            _role(r, f"spec.roles[{i}]")
            for i, r in enumerate(as_list(spec.get("roles"), "spec.roles"))
        )
        topo = as_map(spec.get("topology"), "spec.topology")
        mode = spec.get("mode", "Strict")
        if mode not in ("Strict", "NonStrict"):
            raise SpecError(f"spec.mode: must be Strict or NonStrict, got {as_written(mode)}")
        group = tuple(
            g if "/" in g else f"{ns}/{g}"
            for g in (str(x) for x in as_list(spec.get("gangGroup"), "spec.gangGroup"))
        )
        once = spec.get("onceSatisfied", "Independent")
        if once not in ("Independent", "Gang"):
            raise SpecError(
                f"spec.onceSatisfied: must be Independent or Gang, got {as_written(once)}"
            )
        preempt = _preempts(spec.get("preemptionPolicy"), "spec.preemptionPolicy")
        on_loss = _on_member_loss(spec.get("onMemberLoss"), "spec.onMemberLoss")
        runtime = _runtime(spec.get("expectedRuntimeSeconds"), "spec.expectedRuntimeSeconds")
        domain = podgroup_domain(spec.get("topologyPlacement"))
        return GangSpec(
            key=key,
            min_member=min_member,
            min_resources=parse_resource_list(
                as_map(spec.get("minResources"), "spec.minResources"), "spec.minResources"
            ),
            timeout_seconds=float(integer(timeout, "spec.scheduleTimeoutSeconds", 1))
            if timeout is not None
            else None,
            created=created,
            mode=GangMode(mode),
            roles=roles,
            gang_group=tuple(sorted({key, *group})) if group else (),
            topology=TopologySpec(
                affinity=tuple(
                    tuple(str(x) for x in as_list(a, "affinity"))
                    for a in as_list(topo.get("affinity"), "topology.affinity")
                ),
                anti_affinity=tuple(
                    tuple(str(x) for x in as_list(a, "antiAffinity"))
                    for a in as_list(topo.get("antiAffinity"), "topology.antiAffinity")
                ),
            ),
            domain=domain,
            once_satisfied_alone=once != "Gang",
            preempt=preempt,
            expected_runtime_seconds=runtime,
            on_member_loss=on_loss,
        )
    except (QuantityError, SpecError, TypeError, ValueError) as e:
        return GangSpec(key=key, created=created, invalid_reason=str(e))


def _on_member_loss(v: object, field: str) -> str:
    """What follows when a gang that ran loses members (core/lifecycle.py): ``None`` (the
    default, when absent) or ``RestartGang``."""
    if v is None:
        return NONE
    if v in POLICIES:
        return str(v)
    raise SpecError(f"{field}: must be None or RestartGang, got {as_written(v)}")


def _preempts(v: object, field: str) -> bool:
    """``PreemptLowerPriority`` (the default) or ``Never``: whether the gang may preempt."""
    if v is None or v == "PreemptLowerPriority":
        return True
    if v == "Never":
        return False
    raise SpecError(f"{field}: must be PreemptLowerPriority or Never, got {as_written(v)}")


def _runtime(v: object, field: str, *, text: bool = False) -> float | None:
    """A run time in seconds, a finite number > 0 (with ``text``, a string holding one: an
    annotation's value)."""
    if v is None:
        return None
    seconds: object = v
    if text and isinstance(v, str):
        try:
            seconds = float(v)
        except ValueError:
            seconds = v
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise SpecError(f"{field}: expected a number of seconds, got {as_written(v)}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise SpecError(f"{field}: must be a number of seconds > 0, got {as_written(v)}")
    return float(seconds)


def _annotated(obj: Obj, gang: GangSpec) -> GangSpec:
    """A PodGroup of another convention with what its gangsched annotations say
    (``gangsched.io/preemption-policy``, ``gangsched.io/expected-runtime-seconds``)."""
    if gang.invalid_reason:
        return gang
    meta = as_map(obj.get("metadata"), "metadata")
    try:
        annotations = str_map(meta.get("annotations"), "metadata.annotations")
        policy = annotations.get(lbl.PREEMPTION_POLICY_ANNOTATION)
        runtime = annotations.get(lbl.EXPECTED_RUNTIME_ANNOTATION)
        on_loss = _on_member_loss(
            annotations.get(lbl.ON_MEMBER_LOSS_ANNOTATION),
            f"metadata.annotations[{lbl.ON_MEMBER_LOSS_ANNOTATION}]",
        )
        preempt = _preempts(policy, f"metadata.annotations[{lbl.PREEMPTION_POLICY_ANNOTATION}]")
        seconds = _runtime(
            runtime, f"metadata.annotations[{lbl.EXPECTED_RUNTIME_ANNOTATION}]", text=True
        )
    except SpecError as e:
        return GangSpec(key=gang.key, created=gang.created, invalid_reason=str(e))
    return dataclasses.replace(
        gang, preempt=preempt, expected_runtime_seconds=seconds, on_member_loss=on_loss
    )


def _xk8s_podgroup_from(obj: Obj) -> GangSpec:
    spec = dict(as_map(obj.get("spec"), "spec"))
    keep = {
        k: spec[k] for k in ("minMember", "minResources", "scheduleTimeoutSeconds") if k in spec
    }
    if keep.get("scheduleTimeoutSeconds") == 0:
        # 0 is "not set" here: the MPI operator writes it by default and Kubeflow Trainer
        # documents 0 as "the default timeout"; gangsched's own PodGroup refuses it.
        del keep["scheduleTimeoutSeconds"]
    return _annotated(obj, _podgroup_from({"metadata": obj.get("metadata"), "spec": keep}))


def _volcano_podgroup_from(obj: Obj) -> GangSpec:
    spec = as_map(obj.get("spec"), "spec")
    roles = [
        {"name": str(k), "minMember": v}
        for k, v in sorted(as_map(spec.get("minTaskMember"), "spec.minTaskMember").items())
    ]
    body: dict[str, Any] = {"minMember": spec.get("minMember", 1)}
    if spec.get("minResources"):
        body["minResources"] = spec["minResources"]
    if roles:
        body["roles"] = roles
    return _annotated(obj, _podgroup_from({"metadata": obj.get("metadata"), "spec": body}))


def _spec_guard(parse: Callable[[Obj], GangSpec], obj: Obj) -> GangSpec:
    try:
        return parse(obj)
    except Exception as e:
        ns, name, _, created = identity(obj)
        return GangSpec(key=f"{ns}/{name}", created=created, invalid_reason=unreadable(e))


def _crd_rules(obj: Obj, gang: GangSpec) -> str:
    """The rules the gangsched PodGroup CRD states as validation expressions, for an object
    stored without them (an older CRD, a server that does not evaluate them): '' when it
    keeps them, else what it breaks, naming the field."""
    spec = as_map(obj.get("spec"), "spec")
    total = spec.get("totalMember")
    if total is not None and integer(total, "spec.totalMember", 1) < gang.min_member:
        return f"spec.totalMember: must be >= spec.minMember ({gang.min_member}), got {total}"
    declared: set[str] = set()
    for i, role in enumerate(gang.roles):
        if role.min_member > gang.min_member:
            return (
                f"spec.roles[{i}].minMember: must be <= spec.minMember ({gang.min_member}), "
                f"got {role.min_member}"
            )
        if role.name in declared:
            return f"spec.roles[{i}].name: role {as_written(role.name)} is declared twice"
        declared.add(role.name)
    topology = as_map(spec.get("topology"), "spec.topology")
    for field in ("affinity", "antiAffinity"):
        where = f"spec.topology.{field}"
        for i, names in enumerate(as_list(topology.get(field), where)):
            unknown = [
                as_written(n)
                for n in as_list(names, f"{where}[{i}]")
                if not isinstance(n, str) or n not in declared
            ]
            if unknown:
                declares = "names role(s) spec.roles does not declare"
                return f"{where}[{i}]: {declares}: {', '.join(unknown)}"
    return ""


def _checked_podgroup_from(obj: Obj) -> GangSpec:
    gang = _podgroup_from(obj)
    if gang.invalid_reason:
        return gang
    try:
        problem = _crd_rules(obj, gang)
    except SpecError as e:
        problem = str(e)
    if problem:
        return GangSpec(key=gang.key, created=gang.created, invalid_reason=problem)
    return gang


def podgroup_from(obj: Obj) -> GangSpec:
    """A gangsched.io/v1alpha1 PodGroup as a GangSpec (``invalid_reason`` set when bad: a field
    the scheduler cannot read, or one of the CRD's rules across fields broken). The one rule
    for what a valid PodGroup is: the scheduler refuses what it names, and the PodGroup
    controller reports it in the ``Accepted`` condition."""
    return _spec_guard(_checked_podgroup_from, obj)


def xk8s_podgroup_from(obj: Obj) -> GangSpec:
    """A scheduler-plugins ``scheduling.x-k8s.io/v1alpha1`` PodGroup."""
    return _spec_guard(_xk8s_podgroup_from, obj)


def volcano_podgroup_from(obj: Obj) -> GangSpec:
    """A Volcano ``scheduling.volcano.sh/v1beta1`` PodGroup: minMember and minTaskMember
    (per-task minimums, which become roles)."""
    return _spec_guard(_volcano_podgroup_from, obj)
