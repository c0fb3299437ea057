"""Kubernetes objects (JSON dicts) into the core's model. The one place that knows both.

Nothing here raises on bad input: a pod that cannot be understood becomes a Pod with
``invalid_reason`` set (accounted where it runs, never scheduled, reported with an event); a
PodGroup that cannot be understood becomes a GangSpec with ``invalid_reason`` set.

A readable pod that asks for something gangsched does not implement (a placement-relevant
field that one of kube-scheduler v1.36's default plugins acts on and the core has no plugin
for) gets ``unsupported`` set, naming the field: it is refused the same way, never bound, and
accounted where it runs. The pod's other fields are still read, so a bound pod of that kind
keeps counting for host ports, inter-pod affinity and topology spread.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from datetime import datetime
from types import MappingProxyType
from typing import Any, NoReturn

import structlog

from gangsched.core.gpu import KOORD_SHARED
from gangsched.core.lifecycle import NONE, POLICIES
from gangsched.core.model import (
    AffinityTerm,
    GangMode,
    GangSpec,
    HostPort,
    LabelSelector,
    Node,
    NodeAffinity,
    Placement,
    Pod,
    PodAffinity,
    PodAffinityTerm,
    PodPhase,
    PodVolumes,
    PreferredTerm,
    Requirement,
    RoleSpec,
    SpreadConstraint,
    Taint,
    Toleration,
    TopologySpec,
    WeightedPodAffinityTerm,
)
from gangsched.core.quantity import QuantityError
from gangsched.core.resources import (
    ContainerRequests,
    ResourceList,
    parse_amount,
    parse_resource_list,
    pod_requests,
)
from gangsched.kube import labels as lbl
from gangsched.kube.gpushare import GpuLabels, devices_from
from gangsched.kube.membership import (
    MAX_MEMBERS,
    Membership,
    resolve_membership,
    scheduling_group,
)
from gangsched.kube.topology import completion_index, kueue_domain, podgroup_domain

__all__ = [
    "SpecError",
    "label_selector",
    "namespace_from",
    "node_from",
    "pod_from",
    "podgroup_from",
    "timestamp",
    "volcano_podgroup_from",
    "xk8s_podgroup_from",
]

Obj = Mapping[str, Any]

log = structlog.get_logger("gangsched.translate")
_GFD = GpuLabels()


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


_EMPTY: Obj = MappingProxyType({})


def _map(obj: object, field: str) -> Obj:
    if type(obj) is dict:  # what JSON decodes to: no ABC check
        return obj
    if obj is None:
        return _EMPTY
    if not isinstance(obj, Mapping):
        raise SpecError(f"{field}: expected an object")
    return obj


def _list(obj: object, field: str) -> list[Any]:
    if type(obj) is list:
        return obj
    if obj is None:
        return []
    if not isinstance(obj, list):
        raise SpecError(f"{field}: expected a list")
    return obj


def _str_map(obj: object, field: str) -> dict[str, str]:
    m = _map(obj, field)
    if not m:
        return {}
    return {str(k): str(v) for k, v in m.items()}


# ---- nodes ---------------------------------------------------------------------------------
def _node_from(obj: Obj, gpu_labels: GpuLabels) -> Node:
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
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in _list(spec.get("taints"), "spec.taints")
        if isinstance(t, Mapping)
    )
    labels = _str_map(meta.get("labels"), "metadata.labels")
    return Node(
        name,
        alloc,
        labels=labels,
        taints=taints,
        unschedulable=spec.get("unschedulable") is True,
        ready=ready,
        gpus=gpu_labels.devices(alloc, labels),
    )


def _namespace_from(obj: Obj) -> tuple[str, dict[str, str]]:
    meta = _map(obj.get("metadata"), "metadata")
    return str(meta.get("name", "")), _str_map(meta.get("labels"), "metadata.labels")


# ---- pods ----------------------------------------------------------------------------------
def _requirement(r: object, field: str) -> Requirement:
    r = _map(r, field)
    op = str(r.get("operator") or "")
    if op not in ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"):
        raise SpecError(f"{field}.operator: unknown operator {op!r}")
    values = tuple(str(v) for v in _list(r.get("values"), f"{field}.values"))
    return Requirement(str(r.get("key") or ""), op, values)


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
        raise SpecError(f"{field}.weight: must be an integer from 1 to 100, got {_shown(weight)}")
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
    tolerations = _tolerations(_list(spec.get("tolerations"), "spec.tolerations"))
    return Placement(
        node_selector=tuple(sorted(_str_map(spec.get("nodeSelector"), "nodeSelector").items())),
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


class _Resize:
    """What the pod's status says about in-place resizes (InPlacePodVerticalScaling, GA in
    v1.36, and its pod-level counterpart, beta): kube-scheduler's NodeResourcesFit counts a
    running pod at the larger of what its spec asks, what the kubelet allocated and what is
    actuated, so a pending resize neither frees nor overbooks the node. When the kubelet found
    the resize infeasible (condition PodResizePending, reason Infeasible) the spec is left out.
    A status that cannot be read is ignored (the spec alone counts), as a pending pod has
    none."""

    def __init__(self, status: Obj) -> None:
        self.infeasible = False
        self.containers: dict[str, Obj] = {}
        self.pod: Obj = {}
        try:
            for c in _list(status.get("conditions"), "status.conditions"):
                if isinstance(c, Mapping) and c.get("type") == "PodResizePending":
                    self.infeasible = c.get("reason") == "Infeasible"
                    break
            for key in ("containerStatuses", "initContainerStatuses"):
                for cs in _list(status.get(key), f"status.{key}"):
                    if isinstance(cs, Mapping) and isinstance(cs.get("name"), str):
                        self.containers[cs["name"]] = cs
            self.pod = status
        except SpecError:
            self.infeasible, self.containers, self.pod = False, {}, {}

    def effective(self, spec: ResourceList, st: Obj | None) -> ResourceList:
        """kube-scheduler's determineEffectiveRequests for one container (or the pod level,
        ``st`` being the pod status): spec, actuated and allocated, the largest of each."""
        if st is None or st.get("resources") is None:
            return spec
        try:
            actuated = parse_resource_list(
                _map(_map(st["resources"], "resources").get("requests"), "requests"), "status"
            )
            allocated = parse_resource_list(
                _map(st.get("allocatedResources"), "allocatedResources"), "status"
            )
        except (QuantityError, SpecError):
            return spec
        out: ResourceList = {} if self.infeasible else dict(spec)
        for amounts in (actuated, allocated):
            for name, amount in amounts.items():
                out[name] = max(out.get(name, 0), amount)
        return out


def _containers(spec: Obj, key: str, resize: _Resize) -> list[ContainerRequests]:
    out = []
    for i, c in enumerate(_list(spec.get(key), f"spec.{key}")):
        c = _map(c, f"spec.{key}[{i}]")
        res = _map(c.get("resources"), f"spec.{key}[{i}].resources")
        name = c.get("name", i)
        requests = parse_resource_list(
            _map(res.get("requests"), "requests"), f"spec.{key}[{name}].resources.requests"
        )
        restartable = c.get("restartPolicy") == "Always"
        if key == "containers" or restartable:  # what runs, and so may have been resized
            requests = resize.effective(requests, resize.containers.get(str(name)))
        out.append(ContainerRequests(requests, restartable))
    return out


_POD_LEVEL = frozenset({"cpu", "memory"})  # what Kubernetes accepts as pod-level requests


def _requests(spec: Obj, status: Obj) -> ResourceList:
    resize = _Resize(status)
    pod_level = _map(_map(spec.get("resources"), "spec.resources").get("requests"), "requests")
    level = (
        parse_resource_list(
            {k: v for k, v in pod_level.items() if k in _POD_LEVEL or k.startswith("hugepages-")},
            "spec.resources.requests",
        )
        if pod_level
        else None
    )
    if level:
        effective = resize.effective(level, resize.pod)
        level = {name: effective.get(name, 0) for name in level}
    return pod_requests(
        _containers(spec, "containers", resize),
        _containers(spec, "initContainers", resize),
        parse_resource_list(_map(spec.get("overhead"), "spec.overhead"), "spec.overhead"),
        level,
    )


def _zero_share(spec: Obj) -> str:
    """Why a container's ``koordinator.sh/gpu.shared`` of 0 cannot be honoured, or ''. The
    pod's effective request leaves zero amounts out, so the core never sees this one."""
    for key in ("containers", "initContainers"):
        for i, c in enumerate(_list(spec.get(key), f"spec.{key}")):
            res = _map(_map(c, f"spec.{key}[{i}]").get("resources"), "resources")
            raw = _map(res.get("requests"), "requests").get(KOORD_SHARED)
            if raw is None:
                continue
            field = f"spec.{key}[{c.get('name', i)}].resources.requests.{KOORD_SHARED}"
            if parse_amount(KOORD_SHARED, raw, field) < 1:
                return (
                    f"{field}: must be at least 1 (the number of GPUs the share is spread "
                    "over), got 0"
                )
    return ""


# ---- pods: constraints on other pods, ports, gates, volumes --------------------------------
def _name(v: object, field: str) -> str:
    """A required, non-empty string (a label key, topology key, gate or object name)."""
    if not isinstance(v, str) or not v:
        raise SpecError(f"{field}: expected a non-empty string, got {_shown(v)}")
    return v


def _names(v: object, field: str) -> tuple[str, ...]:
    return tuple(_name(x, f"{field}[{i}]") for i, x in enumerate(_list(v, field)))


def _shown(v: object) -> str:
    """``repr`` for error messages, short and safe for any value; JSON's words for null and
    booleans, as the user wrote them."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    try:
        text = repr(v)
    except ValueError:  # an integer too large to print
        return "<an integer too large to print>"
    return text if len(text) <= 80 else text[:77] + "..."


_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _selector_requirement(r: object, field: str) -> Requirement:
    r = _map(r, field)
    key = _name(r.get("key"), f"{field}.key")
    op = r.get("operator")
    if not isinstance(op, str) or op not in _SELECTOR_OPERATORS:
        raise SpecError(f"{field}.operator: unknown operator {_shown(op)}")
    values = tuple(
        v if isinstance(v, str) else _bad(f"{field}.values[{i}]", v)
        for i, v in enumerate(_list(r.get("values"), f"{field}.values"))
    )
    if op in ("In", "NotIn") and not values:
        raise SpecError(f"{field}.values: must be non-empty for operator {op}")
    if op in ("Exists", "DoesNotExist") and values:
        raise SpecError(f"{field}.values: must be empty for operator {op}")
    return Requirement(key, op, values)


def _bad(field: str, got: object) -> NoReturn:
    raise SpecError(f"{field}: expected a string, got {_shown(got)}")


def _selector(obj: object, field: str) -> LabelSelector | None:
    """A metav1.LabelSelector; absent (nil, matching nothing) is None."""
    if obj is None:
        return None
    s = _map(obj, field)
    pairs = []
    for k, v in _map(s.get("matchLabels"), f"{field}.matchLabels").items():
        key = _name(k, f"{field}.matchLabels")
        pairs.append((key, v if isinstance(v, str) else _bad(f"{field}.matchLabels.{key}", v)))
    exprs = tuple(
        _selector_requirement(r, f"{field}.matchExpressions[{i}]")
        for i, r in enumerate(_list(s.get("matchExpressions"), f"{field}.matchExpressions"))
    )
    return LabelSelector(tuple(sorted(pairs)), exprs)


def label_selector(obj: object, field: str) -> LabelSelector | None:
    """A metav1.LabelSelector as pod affinity terms read it (absent: None, matching nothing);
    raises :class:`SpecError`, naming ``field``, when it cannot be read."""
    return _selector(obj, field)


def _with_label_keys(
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


def _pod_affinity_term(
    t: object, field: str, namespace: str, labels: Mapping[str, str]
) -> PodAffinityTerm:
    t = _map(t, field)
    selector = _selector(t.get("labelSelector"), f"{field}.labelSelector")
    selector = _with_label_keys(
        selector,
        _names(t.get("matchLabelKeys"), f"{field}.matchLabelKeys"),
        "In",
        labels,
        once_per_key=True,
    )
    selector = _with_label_keys(
        selector,
        _names(t.get("mismatchLabelKeys"), f"{field}.mismatchLabelKeys"),
        "NotIn",
        labels,
        once_per_key=True,
    )
    namespaces = frozenset(_names(t.get("namespaces"), f"{field}.namespaces"))
    ns_selector = _selector(t.get("namespaceSelector"), f"{field}.namespaceSelector")
    if not namespaces and ns_selector is None:
        namespaces = frozenset({namespace})
    return PodAffinityTerm(
        _name(t.get("topologyKey"), f"{field}.topologyKey"), selector, namespaces, ns_selector
    )


def _weight(v: object, field: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 100:
        raise SpecError(f"{field}: must be an integer from 1 to 100, got {_shown(v)}")
    return v


_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _pod_affinity_terms(
    obj: object, field: str, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[PodAffinityTerm, ...], tuple[WeightedPodAffinityTerm, ...]]:
    a = _map(obj, field)
    required = tuple(
        _pod_affinity_term(t, f"{field}.{_REQUIRED}[{i}]", namespace, labels)
        for i, t in enumerate(_list(a.get(_REQUIRED), f"{field}.{_REQUIRED}"))
    )
    preferred = []
    for i, p in enumerate(_list(a.get(_PREFERRED), f"{field}.{_PREFERRED}")):
        f = f"{field}.{_PREFERRED}[{i}]"
        p = _map(p, f)
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


def _pod_affinity(spec: Obj, namespace: str, labels: Mapping[str, str]) -> PodAffinity:
    affinity = _map(spec.get("affinity"), "spec.affinity")
    if "podAffinity" not in affinity and "podAntiAffinity" not in affinity:
        return _NO_POD_AFFINITY  # (frozen: one object serves every pod without any)
    required, preferred = _pod_affinity_terms(
        affinity.get("podAffinity"), "spec.affinity.podAffinity", namespace, labels
    )
    required_anti, preferred_anti = _pod_affinity_terms(
        affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity", namespace, labels
    )
    return PodAffinity(required, preferred, required_anti, preferred_anti)


_WHEN_UNSATISFIABLE = ("DoNotSchedule", "ScheduleAnyway")
_INCLUSION_POLICIES = ("Honor", "Ignore")


def _policy(v: object, field: str, default: str) -> str:
    if v is None:
        return default
    if not isinstance(v, str) or v not in _INCLUSION_POLICIES:
        raise SpecError(f"{field}: must be Honor or Ignore, got {_shown(v)}")
    return v


def _spread_constraint(c: object, field: str, labels: Mapping[str, str]) -> SpreadConstraint:
    c = _map(c, field)
    max_skew = c.get("maxSkew")
    if isinstance(max_skew, bool) or not isinstance(max_skew, int) or max_skew < 1:
        raise SpecError(f"{field}.maxSkew: must be an integer >= 1, got {_shown(max_skew)}")
    when = c.get("whenUnsatisfiable")
    if not isinstance(when, str) or when not in _WHEN_UNSATISFIABLE:
        raise SpecError(
            f"{field}.whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway, "
            f"got {_shown(when)}"
        )
    min_domains = c.get("minDomains")
    if min_domains is not None:
        if isinstance(min_domains, bool) or not isinstance(min_domains, int) or min_domains < 1:
            raise SpecError(
                f"{field}.minDomains: must be an integer >= 1, got {_shown(min_domains)}"
            )
        if when != "DoNotSchedule":
            raise SpecError(
                f"{field}.minDomains: can only be set when whenUnsatisfiable is DoNotSchedule"
            )
    selector = _with_label_keys(
        _selector(c.get("labelSelector"), f"{field}.labelSelector"),
        _names(c.get("matchLabelKeys"), f"{field}.matchLabelKeys"),
        "In",
        labels,
        once_per_key=False,
    )
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=_name(c.get("topologyKey"), f"{field}.topologyKey"),
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


def _spread(spec: Obj, labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    field = "spec.topologySpreadConstraints"
    out: list[SpreadConstraint] = []
    for i, c in enumerate(_list(spec.get("topologySpreadConstraints"), field)):
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


_PROTOCOLS = ("TCP", "UDP", "SCTP")
_ANY_IP = "0.0.0.0"


def _port(v: object, field: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
        raise SpecError(f"{field}: must be an integer from 0 to 65535, got {_shown(v)}")
    return v


def _host_ports(spec: Obj) -> tuple[HostPort, ...]:
    """The host ports kube-scheduler's NodePorts counts: every ``hostPort`` above 0 of the
    app containers and of the restartable init containers (sidecars), which run for the pod's
    whole life. With ``hostNetwork`` a container port is a host port (the API server defaults
    ``hostPort`` to ``containerPort``; done here too for objects that missed it)."""
    host_network = spec.get("hostNetwork") is True
    out: list[HostPort] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(_list(spec.get(key), f"spec.{key}")):
            c = _map(c, f"spec.{key}[{i}]")
            if key == "initContainers" and c.get("restartPolicy") != "Always":
                continue
            for j, p in enumerate(_list(c.get("ports"), f"spec.{key}[{i}].ports")):
                field = f"spec.{key}[{i}].ports[{j}]"
                p = _map(p, field)
                port = _port(p.get("hostPort"), f"{field}.hostPort")
                if host_network and port == 0:
                    port = _port(p.get("containerPort"), f"{field}.containerPort")
                if port == 0:
                    continue
                protocol = p.get("protocol") or "TCP"
                if not isinstance(protocol, str) or protocol not in _PROTOCOLS:
                    raise SpecError(
                        f"{field}.protocol: must be TCP, UDP or SCTP, got {_shown(protocol)}"
                    )
                ip = p.get("hostIP") or ""
                if not isinstance(ip, str):
                    raise SpecError(f"{field}.hostIP: expected a string, got {_shown(ip)}")
                out.append(HostPort(port, protocol, "" if ip == _ANY_IP else ip))
    return tuple(out)


def _gates(spec: Obj) -> tuple[str, ...]:
    field = "spec.schedulingGates"
    return tuple(
        _name(_map(g, f"{field}[{i}]").get("name"), f"{field}[{i}].name")
        for i, g in enumerate(_list(spec.get("schedulingGates"), field))
    )


# Inline (in-tree) volume sources kube-scheduler v1.36 acts on that gangsched does not: the
# ones VolumeRestrictions checks for conflicts between pods on a node, and the ones
# NodeVolumeLimits counts against a node's CSI attach limits through CSI migration
# (k8s.io/csi-translation-lib). Volumes through a PersistentVolumeClaim are read instead.
_IN_TREE_VOLUMES: dict[str, str] = {
    "gcePersistentDisk": "conflicts between pods (VolumeRestrictions) and attach limits",
    "awsElasticBlockStore": "conflicts between pods (VolumeRestrictions) and attach limits",
    "rbd": "conflicts between pods (VolumeRestrictions)",
    "iscsi": "conflicts between pods (VolumeRestrictions)",
    "azureDisk": "attach limits",
    "azureFile": "attach limits",
    "cinder": "attach limits",
    "vsphereVolume": "attach limits",
    "portworxVolume": "attach limits",
}


def _volumes(spec: Obj, pod_name: str, unsupported: list[str]) -> PodVolumes:
    claims: list[str] = []
    drivers: list[str] = []
    ephemeral: list[str] = []
    for i, v in enumerate(_list(spec.get("volumes"), "spec.volumes")):
        field = f"spec.volumes[{i}]"
        v = _map(v, field)
        if v.get("persistentVolumeClaim") is not None:
            pvc = _map(v["persistentVolumeClaim"], f"{field}.persistentVolumeClaim")
            claims.append(_name(pvc.get("claimName"), f"{field}.persistentVolumeClaim.claimName"))
        if v.get("ephemeral") is not None:
            _map(v["ephemeral"], f"{field}.ephemeral")
            claim = f"{pod_name}-{_name(v.get('name'), f'{field}.name')}"
            claims.append(claim)
            ephemeral.append(claim)
        if v.get("csi") is not None:
            csi = _map(v["csi"], f"{field}.csi")
            drivers.append(_name(csi.get("driver"), f"{field}.csi.driver"))
        for source, checks in _IN_TREE_VOLUMES.items():
            if v.get(source) is not None:
                unsupported.append(
                    f"{field}.{source}: inline {source} volumes are not supported by gangsched "
                    f"(kube-scheduler checks their {checks} per node); use a "
                    "PersistentVolumeClaim"
                )
    return PodVolumes(tuple(claims), tuple(drivers), tuple(ephemeral))


def _unsupported_fields(spec: Obj) -> list[str]:
    """Placement-relevant fields of kube-scheduler v1.36's default plugins that gangsched has
    no plugin for, each named with why (volumes are looked at in ``_volumes``)."""
    out: list[str] = []
    if _list(spec.get("resourceClaims"), "spec.resourceClaims"):
        out.append(
            "spec.resourceClaims: resource claims (Dynamic Resource Allocation) are not "
            "supported by gangsched"
        )
    # NodeDeclaredFeatures (beta, on by default in v1.36): these fields need nodes that
    # declare a feature in status.declaredFeatures, which gangsched does not read.
    for key in ("initContainers", "containers"):
        for i, c in enumerate(_list(spec.get(key), f"spec.{key}")):
            c = _map(c, f"spec.{key}[{i}]")
            rules = _list(c.get("restartPolicyRules"), f"spec.{key}[{i}].restartPolicyRules")
            for j, rule in enumerate(rules):
                field = f"spec.{key}[{i}].restartPolicyRules[{j}].action"
                if _map(rule, field).get("action") == "RestartAllContainers":
                    out.append(
                        f"{field}: RestartAllContainers needs a node that declares the "
                        "feature RestartAllContainersOnContainerExits; node declared features "
                        "are not supported by gangsched"
                    )
    if spec.get("hostNetwork") is True and spec.get("hostUsers") is False:
        out.append(
            "spec.hostUsers: a user namespace with hostNetwork needs a node that declares the "
            "feature UserNamespacesHostNetworkSupport; node declared features are not "
            "supported by gangsched"
        )
    return out


def _preemption_policy(v: object) -> str:
    """``spec.preemptionPolicy``: absent is ``PreemptLowerPriority`` (the API server's
    default); a value it should have refused is taken as ``Never``, so nothing is evicted
    on the strength of a field that cannot be read."""
    return "PreemptLowerPriority" if v in (None, "PreemptLowerPriority") else "Never"


def _pod_from(obj: Obj) -> tuple[Pod, Membership]:
    meta = _map(obj.get("metadata"), "metadata")
    spec = _map(obj.get("spec"), "spec")
    status = _map(obj.get("status"), "status")
    raw_ns = meta.get("namespace")
    ns = str(raw_ns) if raw_ns not in (None, "") else "default"
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
        resource_version=str(meta.get("resourceVersion") or ""),
        preemption_policy=_preemption_policy(spec.get("preemptionPolicy")),
        nominated_node=_text(status.get("nominatedNodeName"), ""),
        disruption=_disruption(status),
        bound_at=_bound_at(status),
    )
    labels = _str_map(meta.get("labels"), "metadata.labels")
    annotations = _str_map(meta.get("annotations"), "metadata.annotations")
    pod.labels = labels
    try:
        group_name = scheduling_group(spec)
    except ValueError as e:
        raise SpecError(str(e)) from None
    membership = resolve_membership(ns, labels, annotations, pod.created, group_name)
    pod.group, pod.role = membership.key, membership.role
    # The devices a bound pod's GPUs were recorded on. A record on a pending pod means nothing
    # (the binding writes it anew); an unreadable one is not the pod's fault, so it is ignored
    # and the bound pod counted on the devices the scheduler would pick.
    recorded = devices_from(annotations) if pod.node_name else ()
    if isinstance(recorded, str):
        log.warning("ignoring an unreadable GPU device record", pod=f"{ns}/{name}", error=recorded)
    else:
        pod.gpu_devices = recorded
    problems = []
    if membership.error:
        problems.append(membership.error)
    unsupported: list[str] = []

    def resources() -> None:
        pod.requests = _requests(spec, status)
        pod.derive_gpu()
        if pod.invalid_reason:  # a GPU request that cannot be honoured, naming the field
            problems.append(pod.invalid_reason)
        if zero := _zero_share(spec):
            problems.append(zero)
            pod.gpu = None
        priority = spec.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise SpecError(f"spec.priority: expected an integer, got {_shown(priority)}")
        pod.priority = priority
        pod.placement = _placement(spec)

    def constraints() -> None:
        pod.pod_affinity = _pod_affinity(spec, ns, labels)
        pod.spread = _spread(spec, labels)

    def ports() -> None:
        pod.host_ports = _host_ports(spec)

    def gates() -> None:
        pod.gates = _gates(spec)

    def volumes() -> None:
        pod.volumes = _volumes(spec, name, unsupported)

    def refused() -> None:
        unsupported[:0] = _unsupported_fields(spec)

    def topology() -> None:
        pod.index = completion_index(annotations, labels)
        pod.domain = kueue_domain(annotations)

    # Each part on its own, so that one bad field leaves the others read (a bound pod with a
    # bad spread constraint still holds its host ports) and every problem is reported.
    for part in (resources, constraints, ports, gates, volumes, refused, topology):
        try:
            part()
        except (QuantityError, SpecError, TypeError, ValueError) as e:
            problems.append(str(e))
    if problems:  # (a malformed list several parts read is reported once)
        pod.invalid_reason = "; ".join(dict.fromkeys(problems))
    pod.unsupported = "; ".join(unsupported)
    return pod, membership


# ---- PodGroups -----------------------------------------------------------------------------
def _int(v: object, field: str, minimum: int = 0, maximum: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise SpecError(f"{field}: expected an integer, got {_shown(v)}")
    if v < minimum:
        raise SpecError(f"{field}: must be >= {minimum}, got {_shown(v)}")
    if maximum is not None and v > maximum:
        raise SpecError(f"{field}: must be <= {maximum}, got {_shown(v)}")
    return v


def _role(r: object, field: str) -> RoleSpec:
    if r is None:
        raise SpecError(f"{field}: expected an object, got null")
    role = _map(r, field)
    return RoleSpec(str(role.get("name", "")), _int(role.get("minMember", 0), f"{field}.minMember"))


def _podgroup_from(obj: Obj) -> GangSpec:
    meta = _map(obj.get("metadata"), "metadata")
    ns = str(meta.get("namespace", "default"))
    key = f"{ns}/{meta.get('name', '')}"
    created = timestamp(meta.get("creationTimestamp"))
    try:
        spec = _map(obj.get("spec"), "spec")
        min_member = _int(spec.get("minMember", 1), "spec.minMember", 1, MAX_MEMBERS)
        timeout = spec.get("scheduleTimeoutSeconds")
        roles = tuple(
            _role(r, f"spec.roles[{i}]")
            for i, r in enumerate(_list(spec.get("roles"), "spec.roles"))
        )
        topo = _map(spec.get("topology"), "spec.topology")
        mode = spec.get("mode", "Strict")
        if mode not in ("Strict", "NonStrict"):
            raise SpecError(f"spec.mode: must be Strict or NonStrict, got {_shown(mode)}")
        group = tuple(
            g if "/" in g else f"{ns}/{g}"
            for g in (str(x) for x in _list(spec.get("gangGroup"), "spec.gangGroup"))
        )
        once = spec.get("onceSatisfied", "Independent")
        if once not in ("Independent", "Gang"):
            raise SpecError(f"spec.onceSatisfied: must be Independent or Gang, got {_shown(once)}")
        preempt = _preempts(spec.get("preemptionPolicy"), "spec.preemptionPolicy")
        on_loss = _on_member_loss(spec.get("onMemberLoss"), "spec.onMemberLoss")
        runtime = _runtime(spec.get("expectedRuntimeSeconds"), "spec.expectedRuntimeSeconds")
        domain = podgroup_domain(spec.get("topologyPlacement"))
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
    raise SpecError(f"{field}: must be None or RestartGang, got {_shown(v)}")


def _preempts(v: object, field: str) -> bool:
    """``PreemptLowerPriority`` (the default) or ``Never``: whether the gang may preempt."""
    if v is None or v == "PreemptLowerPriority":
        return True
    if v == "Never":
        return False
    raise SpecError(f"{field}: must be PreemptLowerPriority or Never, got {_shown(v)}")


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
        raise SpecError(f"{field}: expected a number of seconds, got {_shown(v)}")
    if not math.isfinite(seconds) or seconds <= 0:
        raise SpecError(f"{field}: must be a number of seconds > 0, got {_shown(v)}")
    return float(seconds)


def _annotated(obj: Obj, gang: GangSpec) -> GangSpec:
    """A PodGroup of another convention with what its gangsched annotations say
    (``gangsched.io/preemption-policy``, ``gangsched.io/expected-runtime-seconds``)."""
    if gang.invalid_reason:
        return gang
    meta = _map(obj.get("metadata"), "metadata")
    try:
        annotations = _str_map(meta.get("annotations"), "metadata.annotations")
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
    spec = dict(_map(obj.get("spec"), "spec"))
    keep = {
        k: spec[k] for k in ("minMember", "minResources", "scheduleTimeoutSeconds") if k in spec
    }
    if keep.get("scheduleTimeoutSeconds") == 0:
        # 0 is "not set" here: the MPI operator writes it by default and Kubeflow Trainer
        # documents 0 as "the default timeout"; gangsched's own PodGroup refuses it.
        del keep["scheduleTimeoutSeconds"]
    return _annotated(obj, _podgroup_from({"metadata": obj.get("metadata"), "spec": keep}))


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
    return _annotated(obj, _podgroup_from({"metadata": obj.get("metadata"), "spec": body}))


# ---- the public translators: total functions ------------------------------------------------
def _disruption(status: Obj) -> str:
    """The message of a ``DisruptionTarget`` condition that is ``True`` with reason
    ``PreemptionByScheduler`` (a scheduler decided to evict the pod), else ''. Unreadable
    conditions say nothing."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return ""
    for c in conditions:
        if (
            isinstance(c, Mapping)
            and c.get("type") == "DisruptionTarget"
            and c.get("status") == "True"
            and c.get("reason") == "PreemptionByScheduler"
        ):
            return _text(c.get("message"), "") or "(no message)"
    return ""


def _bound_at(status: Obj) -> float:
    """When the ``PodScheduled`` condition turned ``True``, 0 when it has not (or cannot be
    read)."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return 0.0
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled":
            if c.get("status") != "True":
                return 0.0
            return timestamp(c.get("lastTransitionTime"))
    return 0.0


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


def node_from(obj: Obj, gpu_labels: GpuLabels = _GFD) -> Node:
    """A Node; one that cannot be read is never a candidate (ready=False, nothing allocatable).
    Its GPU devices' model and memory come from the labels ``gpu_labels`` names."""
    try:
        return _node_from(obj, gpu_labels)
    except Exception:
        _, name, _, _ = _identity(obj)
        return Node(name, {}, ready=False)


def namespace_from(obj: Obj) -> tuple[str, dict[str, str]]:
    """A Namespace's name and labels (what namespaceSelector terms match); labels that cannot
    be read are taken as none."""
    try:
        return _namespace_from(obj)
    except Exception:
        return _identity(obj)[1], {}


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


def _crd_rules(obj: Obj, gang: GangSpec) -> str:
    """The rules the gangsched PodGroup CRD states as validation expressions, for an object
    stored without them (an older CRD, a server that does not evaluate them): '' when it
    keeps them, else what it breaks, naming the field."""
    spec = _map(obj.get("spec"), "spec")
    total = spec.get("totalMember")
    if total is not None and _int(total, "spec.totalMember", 1) < gang.min_member:
        return f"spec.totalMember: must be >= spec.minMember ({gang.min_member}), got {total}"
    declared: set[str] = set()
    for i, role in enumerate(gang.roles):
        if role.min_member > gang.min_member:
            return (
                f"spec.roles[{i}].minMember: must be <= spec.minMember ({gang.min_member}), "
                f"got {role.min_member}"
            )
        if role.name in declared:
            return f"spec.roles[{i}].name: role {_shown(role.name)} is declared twice"
        declared.add(role.name)
    topology = _map(spec.get("topology"), "spec.topology")
    for field in ("affinity", "antiAffinity"):
        where = f"spec.topology.{field}"
        for i, names in enumerate(_list(topology.get(field), where)):
            unknown = [
                _shown(n)
                for n in _list(names, f"{where}[{i}]")
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
