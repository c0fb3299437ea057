"""An independent checker of the required placement constraints of kube-scheduler v1.36.

It reads Kubernetes objects as the API returns them (JSON dicts: Nodes, Pods, namespace
labels) and says, for a pod placed on a node, which required constraint the placement breaks.
It shares no code with gangsched (neither its plugins nor its translation of API objects), so
a bug in one is not repeated in the other. Written from the Kubernetes API documentation and
kube-scheduler's filter plugins:

- NodeUnschedulable: ``spec.unschedulable`` unless the pod tolerates the
  ``node.kubernetes.io/unschedulable:NoSchedule`` taint.
- NodeAffinity: ``nodeSelector`` and ``requiredDuringSchedulingIgnoredDuringExecution``
  (terms ORed, expressions and fields ANDed, an empty term matches nothing, Gt/Lt compare
  integers).
- TaintToleration: every NoSchedule and NoExecute taint tolerated.
- NodeResourcesFit: the pod's requests (containers, sidecars, init containers, pod-level
  requests, overhead) fit in allocatable minus what the pods on the node request, and the
  node's pod count stays within ``pods``.
- NodePorts: no two pods on a node use the same host port and protocol on overlapping
  addresses (an empty ``hostIP`` is 0.0.0.0, which overlaps every address).
- InterPodAffinity: the incoming pod's required affinity and anti-affinity terms, and the
  required anti-affinity terms of pods already placed (symmetry). As in kube-scheduler, a
  pod counts for the incoming pod's affinity only when it matches *all* its required affinity
  terms, and the first-pod rule lets a pod whose terms select only itself go anywhere the
  topology keys exist when no pod in the cluster matches. Namespaces: the term's list, plus
  the namespaces its ``namespaceSelector`` selects (an empty selector selects all), the pod's
  own when neither is set. ``matchLabelKeys`` / ``mismatchLabelKeys`` are merged into the
  selector as the API server does (merging twice changes nothing).
- PodTopologySpread, ``whenUnsatisfiable: DoNotSchedule`` only: the node has every
  constraint's topology key; skew = matching pods in the node's domain + 1 if the pod matches
  its own selector - the minimum over eligible domains (0 when fewer than ``minDomains``
  domains exist), at most ``maxSkew``. Eligible domains: those of nodes with all the pod's
  topology keys that pass ``nodeAffinityPolicy`` (default Honor: the pod's nodeSelector and
  required node affinity) and ``nodeTaintsPolicy`` (default Ignore). Matching pods: same
  namespace, not terminating; an empty selector counts no pod, as in kube-scheduler.

Pods counted on a node are those bound to it (``spec.nodeName``) that have not finished
(phase Succeeded or Failed), as kube-scheduler's cache holds them.

A gang is a set of placements made together. The rule for a set: there is an order of its
members in which each one, placed after the ones before it, passes every filter against the
cluster plus those earlier members. That is exactly what kube-scheduler guarantees for pods
that arrive one after another (each is judged against the pods already placed, never
re-judged), so a gang gets the same guarantees, no weaker: constraints that hold both ways
(anti-affinity, host ports, resources) must hold between every two members whatever the
order, and a member's affinity or spread is judged against the members placed before it. A
set with no such order is reported with what each member breaks against all the others.
"""

from __future__ import annotations

import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

__all__ = [
    "Cluster",
    "Placed",
    "Violation",
    "check_gang",
    "check_pod",
    "parse_quantity",
    "pod_requests",
]

Obj = Mapping[str, Any]

HOSTNAME = "kubernetes.io/hostname"
UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_HARD_EFFECTS = ("NoSchedule", "NoExecute")
_TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class Violation:
    pod: str  # namespace/name
    node: str
    plugin: str  # the kube-scheduler filter whose constraint is broken
    detail: str

    def __str__(self) -> str:
        return f"{self.pod} on {self.node}: {self.plugin}: {self.detail}"


# ---- quantities ------------------------------------------------------------------------------

_QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 10**3),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes quantity ("500m", "4Gi", "1e3", 2) as an exact fraction."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        return Fraction(value)
    if not isinstance(value, str):
        raise ValueError(f"not a quantity: {value!r}")
    m = _QUANTITY.match(value.strip())
    if m is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = Fraction(m.group(1)), m.group(2)
    if suffix in _SUFFIXES:
        return number * _SUFFIXES[suffix]
    if suffix[:1] in ("e", "E") and re.fullmatch(r"[eE][+-]?[0-9]+", suffix):
        return number * Fraction(10) ** int(suffix[1:])
    raise ValueError(f"not a quantity: {value!r}")


def _amount(resource: str, value: object) -> int:
    """What kube-scheduler compares: millicores for cpu, whole units (rounded up) otherwise."""
    q = parse_quantity(value)
    return math.ceil(q * 1000) if resource == "cpu" else math.ceil(q)


def _add(into: dict[str, int], resources: Mapping[str, int]) -> None:
    for k, v in resources.items():
        into[k] = into.get(k, 0) + v


def _list_amounts(rl: object) -> dict[str, int]:
    if not isinstance(rl, Mapping):
        return {}
    return {str(k): _amount(str(k), v) for k, v in rl.items()}


def _requests_of(container: Obj) -> dict[str, int]:
    resources = container.get("resources") or {}
    return _list_amounts(resources.get("requests"))


def pod_requests(pod: Obj) -> dict[str, int]:
    """The pod's effective requests, as kube-scheduler's NodeResourcesFit computes them:
    the sum of its containers and sidecars (init containers with restartPolicy Always), at
    least what any init container needs on top of the sidecars started before it, pod-level
    cpu/memory/hugepages requests where set, plus the pod's overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, int] = {}
    for c in spec.get("containers") or []:
        _add(total, _requests_of(c))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for c in spec.get("initContainers") or []:
        req = _requests_of(c)
        if c.get("restartPolicy") == "Always":
            _add(total, req)
            _add(sidecars, req)
            need = dict(sidecars)
        else:
            need = dict(req)
            _add(need, sidecars)
        for k, v in need.items():
            init_peak[k] = max(init_peak.get(k, 0), v)
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0), v)
    pod_level = _list_amounts((spec.get("resources") or {}).get("requests"))
    for k, v in pod_level.items():
        if k in ("cpu", "memory") or k.startswith("hugepages-"):
            total[k] = v
    _add(total, _list_amounts(spec.get("overhead")))
    return total


# ---- label selectors -----------------------------------------------------------------------


def _expression_matches(expr: Obj, labels: Mapping[str, str]) -> bool:
    """One requirement of a metav1.LabelSelector (In, NotIn, Exists, DoesNotExist)."""
    key, op = expr.get("key", ""), expr.get("operator", "")
    values = [str(v) for v in expr.get("values") or []]
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    return False


def selector_matches(selector: Obj | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector: None (a nil selector) matches nothing, {} matches everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    return all(_expression_matches(e, labels) for e in selector.get("matchExpressions") or [])


def _selector_is_empty(selector: Obj | None) -> bool:
    """kube-scheduler's Selector.Empty(): a non-nil selector with no requirement."""
    return (
        selector is not None
        and not selector.get("matchLabels")
        and not selector.get("matchExpressions")
    )


def _merge_label_keys(
    selector: Obj | None,
    labels: Mapping[str, str],
    match_keys: Iterable[str],
    mismatch_keys: Iterable[str] = (),
) -> Obj | None:
    """``matchLabelKeys`` / ``mismatchLabelKeys`` merged into the selector as the API server
    does when it creates the pod; a nil selector stays nil (it matches nothing anyway)."""
    if selector is None:
        return None
    extra = [{"key": k, "operator": "In", "values": [labels[k]]} for k in match_keys if k in labels]
    extra += [
        {"key": k, "operator": "NotIn", "values": [labels[k]]} for k in mismatch_keys if k in labels
    ]
    if not extra:
        return selector
    return {
        "matchLabels": dict(selector.get("matchLabels") or {}),
        "matchExpressions": [*(selector.get("matchExpressions") or []), *extra],
    }


# ---- nodes -----------------------------------------------------------------------------------


def _int_value(s: str) -> int | None:
    try:
        return int(s, 10)
    except ValueError:
        return None


def _node_expression_matches(expr: Obj, labels: Mapping[str, str]) -> bool | None:
    """One NodeSelectorRequirement on node labels; None when it is malformed (the whole term
    then matches nothing, as kube-scheduler drops a term it cannot parse)."""
    op = str(expr.get("operator", ""))
    key = str(expr.get("key", ""))
    values = [str(v) for v in expr.get("values") or []]
    if op in ("In", "NotIn"):
        if not values:
            return None
        if op == "In":
            return key in labels and labels[key] in values
        return key not in labels or labels[key] not in values
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return (key in labels) == (op == "Exists")
    if op in ("Gt", "Lt"):
        if len(values) != 1 or _int_value(values[0]) is None:
            return None
        bound = _int_value(values[0])
        have = _int_value(labels[key]) if key in labels else None
        if bound is None or have is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return None


def _node_term_matches(term: Obj, node_name: str, labels: Mapping[str, str]) -> bool:
    exprs = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not exprs and not fields:
        return False
    for e in exprs:
        if _node_expression_matches(e, labels) is not True:
            return False
    for f in fields:
        values = [str(v) for v in f.get("values") or []]
        if f.get("key") != "metadata.name" or len(values) != 1:
            return False
        op = f.get("operator")
        if op == "In" and node_name != values[0]:
            return False
        if op == "NotIn" and node_name == values[0]:
            return False
        if op not in ("In", "NotIn"):
            return False
    return True


@dataclass
class NodeView:
    name: str
    labels: dict[str, str]
    taints: list[Obj]
    unschedulable: bool
    allocatable: dict[str, int]

    @classmethod
    def of(cls, obj: Obj) -> NodeView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        return cls(
            name=str(meta.get("name", "")),
            labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
            taints=list(spec.get("taints") or []),
            unschedulable=spec.get("unschedulable") is True,
            allocatable=_list_amounts(status.get("allocatable")),
        )


def _tolerates(toleration: Obj, taint: Obj) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect", ""):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key", ""):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    return False  # Lt / Gt: behind a feature gate that is off by default


def _untolerated(pod: PodView, node: NodeView) -> list[Obj]:
    return [
        t
        for t in node.taints
        if t.get("effect") in _HARD_EFFECTS and not any(_tolerates(x, t) for x in pod.tolerations)
    ]


def _required_node_affinity(pod: PodView, node: NodeView) -> bool:
    for k, v in pod.node_selector.items():
        if node.labels.get(k) != v:
            return False
    if pod.required_node_terms is None:
        return True
    return any(_node_term_matches(t, node.name, node.labels) for t in pod.required_node_terms)


# ---- pods ------------------------------------------------------------------------------------


@dataclass
class Term:
    """A pod (anti-)affinity term of one pod, its label keys merged into the selector."""

    topology_key: str
    selector: Obj | None
    namespaces: frozenset[str]
    namespace_selector: Obj | None

    @classmethod
    def of(cls, raw: Obj, owner_labels: Mapping[str, str]) -> Term:
        return cls(
            topology_key=str(raw.get("topologyKey", "")),
            selector=_merge_label_keys(
                raw.get("labelSelector"),
                owner_labels,
                raw.get("matchLabelKeys") or (),
                raw.get("mismatchLabelKeys") or (),
            ),
            namespaces=frozenset(str(n) for n in raw.get("namespaces") or ()),
            namespace_selector=raw.get("namespaceSelector"),
        )


@dataclass
class PodView:
    key: str
    namespace: str
    labels: dict[str, str]
    node_selector: dict[str, str]
    required_node_terms: list[Obj] | None
    tolerations: list[Obj]
    requests: dict[str, int]
    host_ports: list[tuple[str, str, int]]  # (ip, protocol, port)
    affinity: list[Term]
    anti_affinity: list[Term]
    spread: list[Obj]
    terminating: bool

    @classmethod
    def of(cls, obj: Obj) -> PodView:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
        affinity = spec.get("affinity") or {}
        node_aff = (affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        pod_aff = affinity.get("podAffinity") or {}
        pod_anti = affinity.get("podAntiAffinity") or {}
        req = "requiredDuringSchedulingIgnoredDuringExecution"
        return cls(
            key=f"{meta.get('namespace', 'default')}/{meta.get('name', '')}",
            namespace=str(meta.get("namespace", "default")),
            labels=labels,
            node_selector={str(k): str(v) for k, v in (spec.get("nodeSelector") or {}).items()},
            required_node_terms=list(node_aff.get("nodeSelectorTerms") or [])
            if node_aff is not None
            else None,
            tolerations=list(spec.get("tolerations") or []),
            requests=pod_requests(obj),
            host_ports=_host_ports(spec),
            affinity=[Term.of(t, labels) for t in pod_aff.get(req) or []],
            anti_affinity=[Term.of(t, labels) for t in pod_anti.get(req) or []],
            spread=list(spec.get("topologySpreadConstraints") or []),
            terminating=bool(meta.get("deletionTimestamp")),
        )


def _host_ports(spec: Obj) -> list[tuple[str, str, int]]:
    """Host ports of the containers and sidecars; with hostNetwork a port's hostPort is its
    containerPort (the API server's defaulting)."""
    host_network = spec.get("hostNetwork") is True
    containers = [
        *(c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"),
        *(spec.get("containers") or []),
    ]
    out = []
    for c in containers:
        for p in c.get("ports") or []:
            port = p.get("hostPort")
            if port is None and host_network:
                port = p.get("containerPort")
            if isinstance(port, int) and port > 0:
                out.append(
                    (str(p.get("hostIP") or "0.0.0.0"), str(p.get("protocol") or "TCP"), port)
                )
    return out


def _ports_conflict(a: tuple[str, str, int], b: tuple[str, str, int]) -> bool:
    return a[1:] == b[1:] and (a[0] == b[0] or a[0] == "0.0.0.0" or b[0] == "0.0.0.0")


@dataclass(frozen=True)
class Placed:
    """A pod counted on a node."""

    pod: PodView
    node: str


# ---- the cluster -----------------------------------------------------------------------------


class Cluster:
    """Nodes, the pods counted on them, and namespace labels."""

    def __init__(
        self,
        nodes: Iterable[Obj],
        pods: Iterable[Obj] = (),
        namespaces: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.nodes: dict[str, NodeView] = {}
        for n in nodes:
            view = NodeView.of(n)
            self.nodes[view.name] = view
        self.namespaces: dict[str, dict[str, str]] = {
            k: dict(v) for k, v in (namespaces or {}).items()
        }
        self.placed: list[Placed] = []
        for p in pods:
            node = (p.get("spec") or {}).get("nodeName")
            phase = (p.get("status") or {}).get("phase")
            if node and phase not in _TERMINAL:
                self.placed.append(Placed(PodView.of(p), str(node)))

    def with_placed(self, extra: Iterable[Placed]) -> Cluster:
        other = Cluster((), (), None)
        other.nodes = self.nodes
        other.namespaces = self.namespaces
        other.placed = [*self.placed, *extra]
        return other

    def on_node(self, name: str) -> list[PodView]:
        return [p.pod for p in self.placed if p.node == name]

    def on_known_nodes(self) -> Iterable[tuple[PodView, NodeView]]:
        for p in self.placed:
            node = self.nodes.get(p.node)
            if node is not None:
                yield p.pod, node

    # ---- namespaces of a term ------------------------------------------------------------
    def incoming_namespaces(self, term: Term, pod: PodView) -> tuple[frozenset[str], bool]:
        """The namespaces an incoming pod's term selects, and whether it selects all."""
        if not term.namespaces and term.namespace_selector is None:
            return frozenset({pod.namespace}), False
        if _selector_is_empty(term.namespace_selector):
            return term.namespaces, True
        chosen = set(term.namespaces)
        if term.namespace_selector is not None:
            chosen |= {
                ns
                for ns, labels in self.namespaces.items()
                if selector_matches(term.namespace_selector, labels)
            }
        return frozenset(chosen), False

    def incoming_term_selects(self, term: Term, owner: PodView, other: PodView) -> bool:
        namespaces, every = self.incoming_namespaces(term, owner)
        if not every and other.namespace not in namespaces:
            return False
        return selector_matches(term.selector, other.labels)

    def existing_term_selects(self, term: Term, owner: PodView, incoming: PodView) -> bool:
        """An existing pod's term against the incoming pod: the namespace selector is matched
        against the incoming pod's namespace labels."""
        if not term.namespaces and term.namespace_selector is None:
            in_ns = incoming.namespace == owner.namespace
        else:
            in_ns = incoming.namespace in term.namespaces or (
                term.namespace_selector is not None
                and selector_matches(
                    term.namespace_selector, self.namespaces.get(incoming.namespace, {})
                )
            )
        return in_ns and selector_matches(term.selector, incoming.labels)


# ---- the filters ---------------------------------------------------------------------------


def _check_node(pod: PodView, node: NodeView) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    if node.unschedulable and not any(
        _tolerates(t, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}) for t in pod.tolerations
    ):
        out.append(("NodeUnschedulable", "node(s) were unschedulable"))
    if not _required_node_affinity(pod, node):
        out.append(("NodeAffinity", "node(s) didn't match Pod's node affinity/selector"))
    bad = _untolerated(pod, node)
    if bad:
        taints = ", ".join(f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in bad)
        out.append(("TaintToleration", f"untolerated taint(s) {taints}"))
    return out


def _check_resources(pod: PodView, node: NodeView, cluster: Cluster) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    here = cluster.on_node(node.name)
    allowed = node.allocatable.get("pods", 0)
    if len(here) + 1 > allowed:
        out.append(("NodeResourcesFit", f"Too many pods ({len(here)} of {allowed} already)"))
    used: dict[str, int] = {}
    for p in here:
        _add(used, p.requests)
    for res, want in sorted(pod.requests.items()):
        if want <= 0 or res == "pods":
            continue
        free = node.allocatable.get(res, 0) - used.get(res, 0)
        if want > free:
            out.append(
                (
                    "NodeResourcesFit",
                    f"Insufficient {res}: wants {want}, {used.get(res, 0)} of "
                    f"{node.allocatable.get(res, 0)} used",
                )
            )
    return out


def _check_ports(pod: PodView, node: NodeView, cluster: Cluster) -> list[tuple[str, str]]:
    used = [(hp, p.key) for p in cluster.on_node(node.name) for hp in p.host_ports]
    out: list[tuple[str, str]] = []
    for want in pod.host_ports:
        for have, owner in used:
            if _ports_conflict(want, have):
                out.append(
                    (
                        "NodePorts",
                        f"host port {want[0]}:{want[2]}/{want[1]} conflicts with {owner} "
                        f"({have[0]}:{have[2]}/{have[1]})",
                    )
                )
    return out


def _check_inter_pod(pod: PodView, node: NodeView, cluster: Cluster) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    existing = list(cluster.on_known_nodes())
    # The incoming pod's required affinity: pods matching all its terms, counted per domain.
    if pod.affinity:
        counts: Counter[tuple[str, str]] = Counter()
        for other, where in existing:
            if all(cluster.incoming_term_selects(t, pod, other) for t in pod.affinity):
                for t in pod.affinity:
                    if t.topology_key in where.labels:
                        counts[(t.topology_key, where.labels[t.topology_key])] += 1
        missing = [t.topology_key for t in pod.affinity if t.topology_key not in node.labels]
        if missing:
            out.append(("InterPodAffinity", f"pod affinity: node lacks topology key(s) {missing}"))
        else:
            empty = [
                t.topology_key
                for t in pod.affinity
                if counts[(t.topology_key, node.labels[t.topology_key])] <= 0
            ]
            first_pod = not counts and all(
                cluster.incoming_term_selects(t, pod, pod) for t in pod.affinity
            )
            if empty and not first_pod:
                out.append(
                    (
                        "InterPodAffinity",
                        "node(s) didn't match pod affinity rules: no pod matching all terms "
                        f"in the node's domain of {empty}",
                    )
                )
    # The incoming pod's required anti-affinity.
    for t in pod.anti_affinity:
        value = node.labels.get(t.topology_key)
        if value is None:
            continue
        hits = [
            other.key
            for other, where in existing
            if where.labels.get(t.topology_key) == value
            and cluster.incoming_term_selects(t, pod, other)
        ]
        if hits:
            out.append(
                (
                    "InterPodAffinity",
                    f"node(s) didn't match pod anti-affinity rules: {t.topology_key}={value} "
                    f"holds {sorted(hits)}",
                )
            )
    # Existing pods' required anti-affinity against the incoming pod.
    for other, where in existing:
        for t in other.anti_affinity:
            value = where.labels.get(t.topology_key)
            if value is None or node.labels.get(t.topology_key) != value:
                continue
            if cluster.existing_term_selects(t, other, pod):
                out.append(
                    (
                        "InterPodAffinity",
                        "node(s) didn't satisfy existing pods anti-affinity rules: "
                        f"{other.key} on {where.name} repels it in {t.topology_key}={value}",
                    )
                )
    return out


def _spread_selector(c: Obj, pod: PodView) -> Obj | None:
    return _merge_label_keys(c.get("labelSelector"), pod.labels, c.get("matchLabelKeys") or ())


def _check_spread(pod: PodView, node: NodeView, cluster: Cluster) -> list[tuple[str, str]]:
    hard = [c for c in pod.spread if c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule"]
    if not hard:
        return []
    keys = [str(c.get("topologyKey", "")) for c in hard]
    missing = [k for k in keys if k not in node.labels]
    if missing:
        return [
            (
                "PodTopologySpread",
                f"node(s) didn't match pod topology spread constraints (missing required "
                f"label {missing})",
            )
        ]
    out: list[tuple[str, str]] = []
    by_node: dict[str, list[PodView]] = {}
    for p in cluster.placed:
        by_node.setdefault(p.node, []).append(p.pod)
    for c, key in zip(hard, keys, strict=True):
        selector = _spread_selector(c, pod)
        affinity_policy = c.get("nodeAffinityPolicy") or "Honor"
        taints_policy = c.get("nodeTaintsPolicy") or "Ignore"
        domains: dict[str, int] = {}
        for n in cluster.nodes.values():
            if any(k not in n.labels for k in keys):
                continue
            if affinity_policy == "Honor" and not _required_node_affinity(pod, n):
                continue
            if taints_policy == "Honor" and _untolerated(pod, n):
                continue
            count = 0
            if not _selector_is_empty(selector):
                count = sum(
                    1
                    for p in by_node.get(n.name, ())
                    if not p.terminating
                    and p.namespace == pod.namespace
                    and selector_matches(selector, p.labels)
                )
            domains[n.labels[key]] = domains.get(n.labels[key], 0) + count
        min_domains = c.get("minDomains") or 1
        lowest = min(domains.values()) if len(domains) >= min_domains else 0
        self_match = 1 if selector_matches(selector, pod.labels) else 0
        here = domains.get(node.labels[key], 0)
        skew = here + self_match - lowest
        if skew > int(c.get("maxSkew", 1)):
            out.append(
                (
                    "PodTopologySpread",
                    f"node(s) didn't match pod topology spread constraints: {key}="
                    f"{node.labels[key]} would hold {here + self_match}, global minimum "
                    f"{lowest} over {len(domains)} domain(s) {dict(sorted(domains.items()))}, "
                    f"skew {skew} > maxSkew {c.get('maxSkew')}",
                )
            )
    return out


def _violations(cluster: Cluster, pod: PodView, node_name: str) -> list[Violation]:
    node = cluster.nodes.get(node_name)
    if node is None:
        return [Violation(pod.key, node_name, "NodeName", "no such node")]
    found = [
        *_check_node(pod, node),
        *_check_resources(pod, node, cluster),
        *_check_ports(pod, node, cluster),
        *_check_inter_pod(pod, node, cluster),
        *_check_spread(pod, node, cluster),
    ]
    return [Violation(pod.key, node_name, plugin, detail) for plugin, detail in found]


def check_pod(cluster: Cluster, pod: Obj, node: str) -> list[Violation]:
    """Every required constraint that placing ``pod`` on ``node`` breaks, given the pods the
    cluster already counts."""
    return _violations(cluster, PodView.of(pod), node)


def check_gang(cluster: Cluster, placements: Sequence[tuple[Obj, str]]) -> list[Violation]:
    """Placements made together (one gang cycle): [] when some order of one-by-one
    placement passes every filter (see the module docstring); otherwise what each member
    breaks against the cluster plus all the other members, or, when each member passes that
    but no order works, the first failure of each order tried."""
    members = [Placed(PodView.of(p), n) for p, n in placements]
    if _some_order(cluster, members):
        return []
    found: list[Violation] = []
    for i, m in enumerate(members):
        others = cluster.with_placed(members[:i] + members[i + 1 :])
        found += _violations(others, m.pod, m.node)
    if found:
        return found
    for order in itertools.islice(itertools.permutations(range(len(members))), 3):
        done: list[Placed] = []
        for i in order:
            v = _violations(cluster.with_placed(done), members[i].pod, members[i].node)
            if v:
                found += [
                    Violation(x.pod, x.node, x.plugin, f"{x.detail} (placed after {len(done)})")
                    for x in v
                ]
                break
            done.append(members[i])
    return found or [
        Violation(members[0].pod.key, members[0].node, "Gang", "no order of placement passes")
    ]


def _some_order(cluster: Cluster, members: list[Placed]) -> bool:
    """Whether some order of the members passes one by one: a search over the subsets
    placed so far (what is placed, not its order, decides whether the next member passes)."""
    n = len(members)
    dead: set[int] = set()

    def extend(mask: int) -> bool:
        if mask == (1 << n) - 1:
            return True
        if mask in dead:
            return False
        placed = cluster.with_placed(members[i] for i in range(n) if mask >> i & 1)
        for i in range(n):
            if mask >> i & 1:
                continue
            if not _violations(placed, members[i].pod, members[i].node) and extend(mask | 1 << i):
                return True
        dead.add(mask)
        return False

    return extend(0)
