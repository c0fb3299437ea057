"""Random clusters and pod specs with placement constraints, as Kubernetes JSON.

One vocabulary serves the hypothesis properties (choices drawn from hypothesis, so failures
shrink) and the differential test against kube-scheduler (choices from a seeded
``random.Random``, so a case can be replayed): both go through a ``Chooser``.

Everything generated is valid for the API server (what it would accept on create), so the same
pod can be submitted to a real cluster; ``as_created`` applies what the API server itself adds
on create that placement depends on (``matchLabelKeys`` / ``mismatchLabelKeys`` merged into
label selectors), for tests that feed pods to the core without an API server.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from hypothesis import strategies as st

__all__ = [
    "GPU",
    "HOSTNAME",
    "NAMESPACES",
    "RACK",
    "ZONE",
    "Chooser",
    "DrawChooser",
    "NodeSpec",
    "RandomChooser",
    "as_created",
    "node_json",
    "node_spec",
    "pod_json",
    "pod_spec",
]

T = TypeVar("T")
Obj = dict[str, Any]

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
RACK = "example.com/rack"
GPU_COUNT = "example.com/gpu-count"
POOL = "example.com/pool"
GPU = "nvidia.com/gpu"
GROUP_LABEL = "gangsched.io/pod-group"
ZONES = ("z0", "z1", "z2")
RACKS = ("r0", "r1", "r2", "r3")
APPS = ("web", "db", "train")
TIERS = ("a", "b")
# Namespaces and their labels (what a namespaceSelector sees).
NAMESPACES: dict[str, dict[str, str]] = {
    "team": {"env": "prod", "owner": "ml"},
    "other": {"env": "dev"},
    "third": {},
}


class Chooser(Protocol):
    def pick(self, options: Sequence[T]) -> T: ...

    def chance(self, percent: int) -> bool:
        """True with about this probability (in percent)."""
        ...

    def integer(self, lo: int, hi: int) -> int: ...


class DrawChooser:
    """Choices drawn from hypothesis: they shrink towards the first option, False, and lo."""

    def __init__(self, draw: st.DrawFn) -> None:
        self._draw = draw

    def pick(self, options: Sequence[T]) -> T:
        return self._draw(st.sampled_from(options))

    def chance(self, percent: int) -> bool:
        return self._draw(st.integers(0, 99)) >= 100 - percent

    def integer(self, lo: int, hi: int) -> int:
        return self._draw(st.integers(lo, hi))


class RandomChooser:
    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def pick(self, options: Sequence[T]) -> T:
        return options[self._rng.randrange(len(options))]

    def chance(self, percent: int) -> bool:
        return self._rng.randrange(100) < percent

    def integer(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)


def _subset(c: Chooser, options: Sequence[T], lo: int = 0, hi: int | None = None) -> list[T]:
    hi = len(options) if hi is None else min(hi, len(options))
    n = c.integer(lo, hi)
    pool = list(options)
    out: list[T] = []
    for _ in range(n):
        out.append(pool.pop(c.integer(0, len(pool) - 1)))
    return out


# ---- nodes -----------------------------------------------------------------------------------

TAINTS: tuple[Obj, ...] = (
    {"key": "dedicated", "value": "train", "effect": "NoSchedule"},
    {"key": "maintenance", "value": "", "effect": "NoExecute"},
    {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
    {"key": GPU, "value": "present", "effect": "NoSchedule"},
)


@dataclass
class NodeSpec:
    name: str
    cpu: int  # cores
    memory_gi: int
    gpus: int
    pods: int
    labels: dict[str, str] = field(default_factory=dict)
    taints: list[Obj] = field(default_factory=list)
    unschedulable: bool = False


def node_spec(c: Chooser, name: str) -> NodeSpec:
    gpus = c.pick((0, 2, 4, 8))
    labels = {HOSTNAME: name, GPU_COUNT: str(gpus)}
    if not c.chance(10):
        labels[ZONE] = c.pick(ZONES)
    if c.chance(70):
        labels[RACK] = c.pick(RACKS)
    if c.chance(50):
        labels[POOL] = c.pick(("blue", "green"))
    return NodeSpec(
        name=name,
        cpu=c.pick((4, 8, 16, 32)),
        memory_gi=c.pick((16, 64, 128)),
        gpus=gpus,
        pods=c.pick((110, 110, 110, 3)),
        labels=labels,
        taints=[dict(t) for t in _subset(c, TAINTS, 1, 2)] if c.chance(20) else [],
        unschedulable=c.chance(8),
    )


def node_json(spec: NodeSpec) -> Obj:
    """A Node as the API returns it once its kubelet (here: the test) reports it Ready."""
    alloc = {
        "cpu": str(spec.cpu),
        "memory": f"{spec.memory_gi}Gi",
        "pods": str(spec.pods),
        GPU: str(spec.gpus),
    }
    node_spec_obj: Obj = {}
    if spec.taints:
        node_spec_obj["taints"] = [dict(t) for t in spec.taints]
    if spec.unschedulable:
        node_spec_obj["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": spec.name, "labels": dict(spec.labels), "uid": f"node-{spec.name}"},
        "spec": node_spec_obj,
        "status": {
            "capacity": dict(alloc),
            "allocatable": alloc,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


# ---- pod constraints -------------------------------------------------------------------------

TOLERATIONS: tuple[Obj, ...] = (
    {"key": "dedicated", "operator": "Equal", "value": "train", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Equal", "value": "infer", "effect": "NoSchedule"},
    {"key": "dedicated", "operator": "Exists"},
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute"},
    {"key": GPU, "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
)


def _selector(c: Chooser, job: str, allow_nil: bool = False) -> Obj | None:
    kind = c.integer(0, 8 if allow_nil else 7)
    if kind == 0:
        return {"matchLabels": {"job": job}}
    if kind == 1:
        return {"matchLabels": {"app": c.pick(APPS)}}
    if kind == 2:
        return {
            "matchExpressions": [
                {"key": "app", "operator": "In", "values": sorted(_subset(c, APPS, 1))}
            ]
        }
    if kind == 3:
        return {
            "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": [c.pick(TIERS)]}]
        }
    if kind == 4:
        return {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    if kind == 5:
        return {"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}
    if kind == 6:
        return {
            "matchLabels": {"app": c.pick(APPS)},
            "matchExpressions": [{"key": "job", "operator": "NotIn", "values": [job]}],
        }
    if kind == 7:
        return {}
    return None


def _selector_keys(selector: Obj | None) -> set[str]:
    if selector is None:
        return set()
    keys = set((selector.get("matchLabels") or {}).keys())
    keys |= {e["key"] for e in selector.get("matchExpressions") or []}
    return keys


def _affinity_term(c: Chooser, job: str, anti: bool) -> Obj:
    selector = _selector(c, job, allow_nil=True)
    term: Obj = {
        "topologyKey": c.pick((HOSTNAME, ZONE, HOSTNAME, RACK, ZONE)),
    }
    if selector is not None:
        term["labelSelector"] = selector
    ns_kind = c.integer(0, 6)
    if ns_kind == 1:
        term["namespaces"] = [c.pick(tuple(NAMESPACES))]
    elif ns_kind == 2:
        term["namespaces"] = ["team", "other"]
    elif ns_kind == 3:
        term["namespaceSelector"] = {}
    elif ns_kind == 4:
        term["namespaceSelector"] = {"matchLabels": {"env": "prod"}}
    elif ns_kind == 5:
        term["namespaceSelector"] = {
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]
        }
        if c.chance(50):
            term["namespaces"] = ["third"]
    if selector is not None and "job" not in _selector_keys(selector) and c.chance(25):
        term["mismatchLabelKeys" if anti and c.chance(60) else "matchLabelKeys"] = ["job"]
    return term


def _spread(c: Chooser, job: str) -> list[Obj]:
    out: list[Obj] = []
    seen: set[tuple[str, str]] = set()
    for _ in range(c.pick((1, 1, 2))):
        key = c.pick((ZONE, HOSTNAME, RACK))
        when = "ScheduleAnyway" if c.chance(20) else "DoNotSchedule"
        if (key, when) in seen:
            continue
        seen.add((key, when))
        selector = {"matchLabels": {"job": job}} if c.chance(50) else _selector(c, job, True)
        con: Obj = {"maxSkew": c.pick((1, 1, 2, 3)), "topologyKey": key, "whenUnsatisfiable": when}
        if selector is not None:
            con["labelSelector"] = selector
            if "job" not in _selector_keys(selector) and c.chance(20):
                con["matchLabelKeys"] = ["job"]
        if when == "DoNotSchedule" and c.chance(30):
            con["minDomains"] = c.integer(1, 4)
        if c.chance(30):
            con["nodeAffinityPolicy"] = c.pick(("Honor", "Ignore"))
        if c.chance(30):
            con["nodeTaintsPolicy"] = c.pick(("Honor", "Ignore"))
        out.append(con)
    return out


def _node_affinity(c: Chooser, node_names: Sequence[str]) -> Obj:
    exprs: tuple[Callable[[], Obj], ...] = (
        lambda: {"key": ZONE, "operator": "In", "values": sorted(_subset(c, ZONES, 1, 2))},
        lambda: {"key": ZONE, "operator": "NotIn", "values": [c.pick(ZONES)]},
        lambda: {"key": RACK, "operator": "Exists"},
        lambda: {"key": RACK, "operator": "DoesNotExist"},
        lambda: {"key": GPU_COUNT, "operator": "Gt", "values": [str(c.pick((0, 2, 4)))]},
        lambda: {"key": GPU_COUNT, "operator": "Lt", "values": [str(c.pick((2, 4, 8)))]},
        lambda: {"key": POOL, "operator": "In", "values": [c.pick(("blue", "green", "red"))]},
    )
    terms = []
    for _ in range(c.pick((1, 1, 2))):
        term: Obj = {"matchExpressions": [c.pick(exprs)() for _ in range(c.pick((1, 1, 2)))]}
        if node_names and c.chance(15):
            term["matchFields"] = [
                {
                    "key": "metadata.name",
                    "operator": c.pick(("In", "NotIn")),
                    "values": [c.pick(node_names)],
                }
            ]
        terms.append(term)
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}


def _weighted(c: Chooser, term: Obj) -> Obj:
    return {"weight": c.integer(1, 100), "podAffinityTerm": term}


def pod_spec(
    c: Chooser,
    job: str,
    node_names: Sequence[str] = (),
    *,
    constraints: int = 100,
) -> tuple[dict[str, str], Obj]:
    """Labels and a spec (containers with requests and ports, node selector and affinity,
    tolerations, pod (anti-)affinity, spread constraints) for a pod of ``job``.
    ``constraints`` is the percent chance of each kind of constraint being drawn at all."""

    def maybe(percent: int) -> bool:
        return c.chance(percent * constraints // 100)

    labels = {"job": job, "app": c.pick(APPS)}
    if c.chance(60):
        labels["tier"] = c.pick(TIERS)
    requests: dict[str, str] = {
        "cpu": c.pick(("100m", "500m", "1", "2", "6")),
        "memory": c.pick(("256Mi", "1Gi", "4Gi", "16Gi")),
    }
    limits: dict[str, str] = {}
    gpus = c.pick((0, 0, 0, 1, 1, 2, 4, 8))
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    container: Obj = {
        "name": "main",
        "image": "registry.invalid/train:1",
        "resources": {"requests": requests, **({"limits": limits} if limits else {})},
    }
    spec: Obj = {"containers": [container]}
    host_network = False
    if maybe(35):
        host_network = c.chance(20)
        ports = []
        used: set[tuple[int, str]] = set()
        for i in range(c.pick((1, 1, 2))):
            port, proto = c.pick((8080, 29500)), c.pick(("TCP", "TCP", "UDP"))
            if (port, proto) in used:
                continue
            used.add((port, proto))
            p: Obj = {"containerPort": port if host_network else 7000 + i, "hostPort": port}
            p["protocol"] = proto
            if not host_network and c.chance(30):
                p["hostIP"] = c.pick(("10.0.0.1", "10.0.0.2"))
            ports.append(p)
        container["ports"] = ports
        if host_network:
            spec["hostNetwork"] = True
    if maybe(20):
        spec["nodeSelector"] = c.pick(({ZONE: c.pick(ZONES)}, {POOL: c.pick(("blue", "green"))}))
    affinity: Obj = {}
    if maybe(25):
        affinity["nodeAffinity"] = _node_affinity(c, node_names)
    pod_aff: Obj = {}
    pod_anti: Obj = {}
    req = "requiredDuringSchedulingIgnoredDuringExecution"
    pref = "preferredDuringSchedulingIgnoredDuringExecution"
    if maybe(30):
        pod_aff[req] = [_affinity_term(c, job, False) for _ in range(c.pick((1, 1, 2)))]
    if maybe(40):
        pod_anti[req] = [_affinity_term(c, job, True) for _ in range(c.pick((1, 1, 2)))]
    if maybe(20):
        pod_aff[pref] = [_weighted(c, _affinity_term(c, job, False))]
    if maybe(20):
        pod_anti[pref] = [_weighted(c, _affinity_term(c, job, True))]
    if pod_aff:
        affinity["podAffinity"] = pod_aff
    if pod_anti:
        affinity["podAntiAffinity"] = pod_anti
    if affinity:
        spec["affinity"] = affinity
    if maybe(45):
        spec["topologySpreadConstraints"] = _spread(c, job)
    if maybe(40):
        spec["tolerations"] = [dict(t) for t in _subset(c, TOLERATIONS, 1, 2)]
    return labels, spec


def pod_json(
    name: str,
    namespace: str,
    labels: dict[str, str],
    spec: Obj,
    *,
    scheduler: str = "gangsched",
    node: str = "",
    phase: str = "Pending",
    created: int = 0,
    group: str = "",
) -> Obj:
    """A Pod object as the API returns it."""
    all_labels = dict(labels)
    if group:
        all_labels[GROUP_LABEL] = group
    body = copy.deepcopy(spec)
    body["schedulerName"] = scheduler
    if node:
        body["nodeName"] = node
    minute, second = divmod(created, 60)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"{namespace}.{name}",
            "labels": all_labels,
            "creationTimestamp": f"2025-01-01T00:{minute:02d}:{second:02d}Z",
        },
        "spec": body,
        "status": {"phase": phase},
    }


def _merge_keys(selector: Obj, labels: dict[str, str], keys: Sequence[str], op: str) -> None:
    for k in keys:
        if k in labels:
            selector.setdefault("matchExpressions", []).append(
                {"key": k, "operator": op, "values": [labels[k]]}
            )


def as_created(pod: Obj) -> Obj:
    """The pod as the API server stores it: ``matchLabelKeys`` and ``mismatchLabelKeys`` of
    pod (anti-)affinity terms and ``matchLabelKeys`` of spread constraints merged into their
    label selectors (the fields themselves kept)."""
    out = copy.deepcopy(pod)
    labels = out["metadata"].get("labels") or {}
    spec = out["spec"]
    for kind in ("podAffinity", "podAntiAffinity"):
        section = (spec.get("affinity") or {}).get(kind) or {}
        terms = list(section.get("requiredDuringSchedulingIgnoredDuringExecution") or [])
        terms += [
            w["podAffinityTerm"]
            for w in section.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        for t in terms:
            if t.get("labelSelector") is not None:
                _merge_keys(t["labelSelector"], labels, t.get("matchLabelKeys") or (), "In")
                _merge_keys(t["labelSelector"], labels, t.get("mismatchLabelKeys") or (), "NotIn")
    for con in spec.get("topologySpreadConstraints") or []:
        if con.get("labelSelector") is not None:
            _merge_keys(con["labelSelector"], labels, con.get("matchLabelKeys") or (), "In")
    return out
