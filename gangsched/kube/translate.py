"""Kubernetes objects (JSON dicts) into the core's model. The one place that knows both.

Nothing here raises on bad input: a pod that cannot be understood becomes a Pod with
``invalid_reason`` set (accounted where it runs, never scheduled, reported with an event); a
PodGroup that cannot be understood becomes a GangSpec with ``invalid_reason`` set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from gangsched.core.model import (
    AffinityTerm,
    GangMode,
    GangSpec,
    Node,
    NodeAffinity,
    Placement,
    Pod,
    PodPhase,
    PreferredTerm,
    Requirement,
    RoleSpec,
    Taint,
    Toleration,
    TopologySpec,
)
from gangsched.core.quantity import QuantityError
from gangsched.core.resources import (
    ContainerRequests,
    ResourceList,
    parse_resource_list,
    pod_requests,
)
from gangsched.kube.membership import Membership, resolve_membership

__all__ = [
    "SpecError",
    "node_from",
    "pod_from",
    "podgroup_from",
    "timestamp",
    "volcano_podgroup_from",
    "xk8s_podgroup_from",
]

Obj = Mapping[str, Any]


class SpecError(ValueError):
    pass


def timestamp(value: object) -> float:
    """RFC 3339 to seconds since the epoch; 0.0 when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _map(obj: object, field: str) -> Obj:
    if obj is None:
        return {}
    if not isinstance(obj, Mapping):
        raise SpecError(f"{field}: expected an object")
    return obj


def _list(obj: object, field: str) -> list[Any]:
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise SpecError(f"{field}: expected a list")
    return obj


def _str_map(obj: object, field: str) -> dict[str, str]:
    return {str(k): str(v) for k, v in _map(obj, field).items()}


# ---- nodes ---------------------------------------------------------------------------------
def _node_from(obj: Obj) -> Node:
    meta = _map(obj.get("metadata"), "metadata")
    name = str(meta.get("name", ""))
    spec = _map(obj.get("spec"), "spec")
    status = _map(obj.get("status"), "status")
    ready = False
    for c in _list(status.get("conditions"), "status.conditions"):
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            ready = c.get("status") == "True"
    try:
        alloc = parse_resource_list(
            _map(status.get("allocatable") or status.get("capacity"), "status.allocatable"),
            f"node {name}: status.allocatable",
        )
    except (QuantityError, SpecError):
        alloc, ready = {}, False  # a node we cannot read is never a candidate
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value", "")), str(t.get("effect", "")))
        for t in _list(spec.get("taints"), "spec.taints")
        if isinstance(t, Mapping)
    )
    return Node(
        name,
        alloc,
        labels=_str_map(meta.get("labels"), "metadata.labels"),
        taints=taints,
        unschedulable=spec.get("unschedulable") is True,
        ready=ready,
    )


# ---- pods ----------------------------------------------------------------------------------
def _requirement(r: object, field: str) -> Requirement:
    r = _map(r, field)
    op = str(r.get("operator", ""))
    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        raise SpecError(f"{field}.operator: unknown operator {op!r}")
    values = tuple(str(v) for v in _list(r.get("values"), f"{field}.values"))
    return Requirement(str(r.get("key", "")), op, values)


def _term(t: object, field: str) -> AffinityTerm:
    t = _map(t, field)
    return AffinityTerm(
        tuple(
            _requirement(r, f"{field}.matchExpressions[{i}]")
            for i, r in enumerate(_list(t.get("matchExpressions"), field))
        ),
        tuple(
            _requirement(r, f"{field}.matchFields[{i}]")
            for i, r in enumerate(_list(t.get("matchFields"), field))
        ),
    )


def _preferred(p: object, field: str) -> PreferredTerm:
    p = _map(p, field)
    weight = p.get("weight", 0)
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
        raise SpecError(f"{field}.weight: must be an integer from 1 to 100, got {weight!r}")
    return PreferredTerm(weight, _term(p.get("preference"), f"{field}.preference"))


def _placement(spec: Obj) -> Placement:
    na = _map(_map(spec.get("affinity"), "spec.affinity").get("nodeAffinity"), "nodeAffinity")
    req = na.get("requiredDuringSchedulingIgnoredDuringExecution")
    required: tuple[AffinityTerm, ...] | None = None
    if req is not None:
        terms = _list(_map(req, "required").get("nodeSelectorTerms"), "nodeSelectorTerms")
        required = tuple(_term(t, f"nodeSelectorTerms[{i}]") for i, t in enumerate(terms))
    preferred = tuple(
        _preferred(p, f"preferredDuringSchedulingIgnoredDuringExecution[{i}]")
        for i, p in enumerate(
            _list(na.get("preferredDuringSchedulingIgnoredDuringExecution"), "preferred")
        )
    )
    tolerations = tuple(
        Toleration(
            str(t.get("key", "") or ""),
            str(t.get("operator", "Equal") or "Equal"),
            str(t.get("value", "") or ""),
            str(t.get("effect", "") or ""),
        )
        for t in _list(spec.get("tolerations"), "spec.tolerations")
        if isinstance(t, Mapping)
    )
    return Placement(
        node_selector=tuple(sorted(_str_map(spec.get("nodeSelector"), "nodeSelector").items())),
        affinity=NodeAffinity(required, preferred),
        tolerations=tolerations,
    )


def _containers(spec: Obj, key: str) -> list[ContainerRequests]:
    out = []
    for i, c in enumerate(_list(spec.get(key), f"spec.{key}")):
        c = _map(c, f"spec.{key}[{i}]")
        res = _map(c.get("resources"), f"spec.{key}[{i}].resources")
        name = c.get("name", i)
        requests = parse_resource_list(
            _map(res.get("requests"), "requests"), f"spec.{key}[{name}].resources.requests"
        )
        out.append(ContainerRequests(requests, c.get("restartPolicy") == "Always"))
    return out


_POD_LEVEL = frozenset({"cpu", "memory"})  # what Kubernetes accepts as pod-level requests


def _requests(spec: Obj) -> ResourceList:
    pod_level = _map(_map(spec.get("resources"), "spec.resources").get("requests"), "requests")
    return pod_requests(
        _containers(spec, "containers"),
        _containers(spec, "initContainers"),
        parse_resource_list(_map(spec.get("overhead"), "spec.overhead"), "spec.overhead"),
        parse_resource_list(
            {k: v for k, v in pod_level.items() if k in _POD_LEVEL or k.startswith("hugepages-")},
            "spec.resources.requests",
        )
        if pod_level
        else None,
    )


def _pod_from(obj: Obj) -> tuple[Pod, Membership]:
    meta = _map(obj.get("metadata"), "metadata")
    spec = _map(obj.get("spec"), "spec")
    status = _map(obj.get("status"), "status")
    ns = str(meta.get("namespace", "default"))
    name = str(meta.get("name", ""))
    uid = str(meta.get("uid", "") or f"{ns}/{name}")
    try:
        phase = PodPhase(str(status.get("phase", "Pending")))
    except ValueError:
        phase = PodPhase.UNKNOWN
    pod = Pod(
        uid,
        ns,
        name,
        {"pods": 1},
        created=timestamp(meta.get("creationTimestamp")),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        phase=phase,
        node_name=str(spec.get("nodeName") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
    )
    labels = _str_map(meta.get("labels"), "metadata.labels")
    annotations = _str_map(meta.get("annotations"), "metadata.annotations")
    membership = resolve_membership(ns, labels, annotations, pod.created)
    pod.group, pod.role = membership.key, membership.role
    problems = []
    if membership.error:
        problems.append(membership.error)
    try:
        pod.requests = _requests(spec)
        priority = spec.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise SpecError(f"spec.priority: expected an integer, got {priority!r}")
        pod.priority = priority
        pod.placement = _placement(spec)
    except (QuantityError, SpecError, TypeError, ValueError) as e:
        problems.append(str(e))
    if problems:
        pod.invalid_reason = "; ".join(problems)
    return pod, membership


# ---- PodGroups -----------------------------------------------------------------------------
def _int(v: object, field: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{field}: expected an integer, got {v!r}")
    if v < minimum:
        raise SpecError(f"{field}: must be >= {minimum}, got {v}")
    return v


def _podgroup_from(obj: Obj) -> GangSpec:
    meta = _map(obj.get("metadata"), "metadata")
    ns = str(meta.get("namespace", "default"))
    key = f"{ns}/{meta.get('name', '')}"
    created = timestamp(meta.get("creationTimestamp"))
    try:
        spec = _map(obj.get("spec"), "spec")
        min_member = _int(spec.get("minMember", 1), "spec.minMember", 1)
        timeout = spec.get("scheduleTimeoutSeconds")
        roles = tuple(
            RoleSpec(str(_map(r, "role").get("name", "")), _int(r.get("minMember", 0), "role"))
            for r in _list(spec.get("roles"), "spec.roles")
        )
        topo = _map(spec.get("topology"), "spec.topology")
        mode = str(spec.get("mode", "Strict"))
        if mode not in ("Strict", "NonStrict"):
            raise SpecError(f"spec.mode: must be Strict or NonStrict, got {mode!r}")
        group = tuple(
            g if "/" in g else f"{ns}/{g}"
            for g in (str(x) for x in _list(spec.get("gangGroup"), "spec.gangGroup"))
        )
        once = str(spec.get("onceSatisfied", "Independent"))
        if once not in ("Independent", "Gang"):
            raise SpecError(f"spec.onceSatisfied: must be Independent or Gang, got {once!r}")
        return GangSpec(
            key=key,
            min_member=min_member,
            min_resources=parse_resource_list(
                _map(spec.get("minResources"), "spec.minResources"), "spec.minResources"
            ),
            timeout_seconds=float(_int(timeout, "spec.scheduleTimeoutSeconds", 1))
            if timeout is not None
            else None,
            created=created,
            mode=GangMode(mode),
            roles=roles,
            gang_group=tuple(sorted({key, *group})) if group else (),
            topology=TopologySpec(
                affinity=tuple(
                    tuple(str(x) for x in _list(a, "affinity"))
                    for a in _list(topo.get("affinity"), "topology.affinity")
                ),
                anti_affinity=tuple(
                    tuple(str(x) for x in _list(a, "antiAffinity"))
                    for a in _list(topo.get("antiAffinity"), "topology.antiAffinity")
                ),
            ),
            once_satisfied_alone=once != "Gang",
        )
    except (QuantityError, SpecError, TypeError, ValueError) as e:
        return GangSpec(key=key, created=created, invalid_reason=str(e))


def _xk8s_podgroup_from(obj: Obj) -> GangSpec:
    spec = dict(_map(obj.get("spec"), "spec"))
    keep = {
        k: spec[k] for k in ("minMember", "minResources", "scheduleTimeoutSeconds") if k in spec
    }
    return _podgroup_from({"metadata": obj.get("metadata"), "spec": keep})


def _volcano_podgroup_from(obj: Obj) -> GangSpec:
    spec = _map(obj.get("spec"), "spec")
    roles = [
        {"name": str(k), "minMember": v}
        for k, v in sorted(_map(spec.get("minTaskMember"), "spec.minTaskMember").items())
    ]
    body: dict[str, Any] = {"minMember": spec.get("minMember", 1)}
    if spec.get("minResources"):
        body["minResources"] = spec["minResources"]
    if roles:
        body["roles"] = roles
    return _podgroup_from({"metadata": obj.get("metadata"), "spec": body})


# ---- the public translators: total functions ------------------------------------------------
def _text(v: object, default: str) -> str:
    if isinstance(v, str):
        return v
    if v is None or isinstance(v, bool):
        return default
    if isinstance(v, int) and v.bit_length() > 64:
        return default
    if isinstance(v, int | float):
        return str(v)
    return default


def _identity(obj: object) -> tuple[str, str, str, float]:
    """(namespace, name, uid, creation) read as safely as possible from a broken object."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        meta = {}
    ns = _text(meta.get("namespace"), "default")
    name = _text(meta.get("name"), "")
    uid = _text(meta.get("uid"), "") or f"{ns}/{name}"
    return ns, name, uid, timestamp(meta.get("creationTimestamp"))


def _broken(e: BaseException) -> str:
    try:
        detail = str(e)
    except ValueError:
        detail = ""
    return f"unreadable object ({type(e).__name__}{': ' + detail[:300] if detail else ''})"


def node_from(obj: Obj) -> Node:
    """A Node; one that cannot be read is never a candidate (ready=False, nothing allocatable)."""
    try:
        return _node_from(obj)
    except Exception:
        _, name, _, _ = _identity(obj)
        return Node(name, {}, ready=False)


def pod_from(obj: Obj) -> tuple[Pod, Membership]:
    """The core's Pod and what the pod says about its gang. Never raises: a pod that cannot be
    read is returned with ``invalid_reason`` set, accounted where it runs but never scheduled."""
    try:
        return _pod_from(obj)
    except Exception as e:
        ns, name, uid, created = _identity(obj)
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        node = _text(spec.get("nodeName"), "") if isinstance(spec, Mapping) else ""
        sched = _text(spec.get("schedulerName"), "") if isinstance(spec, Mapping) else ""
        pod = Pod(
            uid,
            ns,
            name,
            {"pods": 1},
            created=created,
            scheduler_name=sched or "default-scheduler",
            node_name=node,
            invalid_reason=_broken(e),
        )
        return pod, Membership(error=pod.invalid_reason)


def _spec_guard(parse: Callable[[Obj], GangSpec], obj: Obj) -> GangSpec:
    try:
        return parse(obj)
    except Exception as e:
        ns, name, _, created = _identity(obj)
        return GangSpec(key=f"{ns}/{name}", created=created, invalid_reason=_broken(e))


def podgroup_from(obj: Obj) -> GangSpec:
    """A gangsched.io/v1alpha1 PodGroup as a GangSpec (``invalid_reason`` set when bad)."""
    return _spec_guard(_podgroup_from, obj)


def xk8s_podgroup_from(obj: Obj) -> GangSpec:
    """A scheduler-plugins ``scheduling.x-k8s.io/v1alpha1`` PodGroup."""
    return _spec_guard(_xk8s_podgroup_from, obj)


def volcano_podgroup_from(obj: Obj) -> GangSpec:
    """A Volcano ``scheduling.volcano.sh/v1beta1`` PodGroup: minMember and minTaskMember
    (per-task minimums, which become roles)."""
    return _spec_guard(_volcano_podgroup_from, obj)
