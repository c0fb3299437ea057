"""Fuzzing the Kubernetes → core readers (gangsched.api: node, pod, podgroup).

Two families of properties:

- Hostile input. Random JSON-like values (None, booleans, integers including ones too large
  to print, floats including nan and infinities, text, lists, objects) are plugged in at random
  places of otherwise valid Pod / Node / PodGroup objects, or make up whole random objects.
  ``node_from``, ``pod_from``, ``podgroup_from``, ``xk8s_podgroup_from`` and
  ``volcano_podgroup_from`` never raise, and what they return is well-formed:

  * a Pod's ``requests`` is always a dict of non-empty resource name to positive int (zeros are
    dropped) with ``pods >= 1``, and exactly 1 unless the object itself mentions a ``pods``
    resource; a gang error from the labels is part of ``invalid_reason``; a valid Pod has a
    hashable, well-typed Placement and an int priority;
  * a Node is ready only if its last Ready condition says "True" and every allocatable entry was
    read; its allocatable is a dict of str to non-negative int;
  * a GangSpec either has ``invalid_reason`` set or has well-typed fields (min_member >= 1, a
    positive finite timeout or None, roles with minimums >= 0, a sorted gang group containing
    the gang itself); the scheduler-plugins and Volcano flavours never carry fields their APIs
    do not have.

  Whatever the pod, what other pods' plugins read from it (labels, inter-pod affinity terms,
  spread constraints, host ports, gates, volumes) is well-formed: selectors only with the
  label-selector operators and values as each needs, weights from 1 to 100, ports from 1 to
  65535 with a known protocol, no two spread constraints on the same key and action.

- Valid input. Objects built only from valid parts (quantities drawn from the Kubernetes
  grammar, with their exact value computed alongside) translate with no ``invalid_reason``, and
  every field equals an independent computation, the pod's effective request included; label
  selectors with matchLabelKeys / mismatchLabelKeys come either as the API server stores them
  (already merged) or not merged, and read the same. Adding fields gangsched refuses (resource
  claims, in-tree volumes, fields of kube-scheduler's NodeDeclaredFeatures) sets
  ``unsupported``, naming each, and changes nothing else.
"""

from __future__ import annotations

import calendar
import contextlib
import copy
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from gangsched.api import labels as lbl
from gangsched.api.membership import Membership
from gangsched.api.node import namespace_from, node_from
from gangsched.api.pod import pod_from
from gangsched.api.podgroup import podgroup_from, volcano_podgroup_from, xk8s_podgroup_from
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
from gangsched.core.quantity import parse_quantity

# One bug per test is reported (and shrunk): several distinct ones would make a failing run
# shrink each of them, far over this file's time budget.
FUZZ = settings(
    max_examples=300,
    deadline=None,
    report_multiple_bugs=False,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.filter_too_much,
        HealthCheck.large_base_example,
    ],
)
VALID = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

MAX_AMOUNT = 2**62  # the largest amount the translator accepts for one resource
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
Obj = dict[str, Any]


# ---- random JSON-like values --------------------------------------------------------------

# Every field name the translator reads, so random objects and added keys hit real fields.
FIELD_NAMES = [
    "metadata",
    "spec",
    "status",
    "name",
    "namespace",
    "uid",
    "labels",
    "annotations",
    "creationTimestamp",
    "deletionTimestamp",
    "containers",
    "initContainers",
    "resources",
    "requests",
    "limits",
    "overhead",
    "restartPolicy",
    "priority",
    "schedulerName",
    "nodeName",
    "nodeSelector",
    "affinity",
    "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution",
    "preferredDuringSchedulingIgnoredDuringExecution",
    "nodeSelectorTerms",
    "matchExpressions",
    "matchFields",
    "key",
    "operator",
    "values",
    "value",
    "weight",
    "preference",
    "tolerations",
    "effect",
    "phase",
    "conditions",
    "type",
    "allocatable",
    "capacity",
    "taints",
    "unschedulable",
    "podAffinity",
    "podAntiAffinity",
    "podAffinityTerm",
    "labelSelector",
    "matchLabels",
    "matchLabelKeys",
    "mismatchLabelKeys",
    "namespaces",
    "namespaceSelector",
    "topologyKey",
    "topologySpreadConstraints",
    "maxSkew",
    "minDomains",
    "whenUnsatisfiable",
    "nodeAffinityPolicy",
    "nodeTaintsPolicy",
    "ports",
    "hostPort",
    "containerPort",
    "protocol",
    "hostIP",
    "hostNetwork",
    "hostUsers",
    "schedulingGates",
    "volumes",
    "persistentVolumeClaim",
    "claimName",
    "ephemeral",
    "csi",
    "driver",
    "resourceClaims",
    "restartPolicyRules",
    "action",
    "gcePersistentDisk",
    "rbd",
    "minMember",
    "minResources",
    "scheduleTimeoutSeconds",
    "mode",
    "roles",
    "gangGroup",
    "topology",
    "antiAffinity",
    "onceSatisfied",
    "minTaskMember",
    "cpu",
    "memory",
    "pods",
    "nvidia.com/gpu",
    "hugepages-2Mi",
    lbl.POD_GROUP_LABEL,
    lbl.ROLE_LABEL,
    lbl.XK8S_POD_GROUP_LABEL,
    lbl.GROUP_NAME_ANNOTATION,
    lbl.GROUP_POD_NUM_ANNOTATION,
    lbl.VOLCANO_TASK_SPEC_ANNOTATION,
    lbl.POD_GROUP_NAME_LABEL,
    lbl.POD_GROUP_MIN_LABEL,
    lbl.KOORD_NAME,
    lbl.KOORD_MIN,
    lbl.KOORD_WAITING,
    lbl.KOORD_TOTAL,
    lbl.KOORD_MODE,
    lbl.KOORD_GROUPS,
]
INTERESTING_TEXT = [
    "",
    " ",
    "0",
    "1",
    "-1",
    "3",
    "1.5",
    "12Qi",
    "0.5",
    "500m",
    "1Gi",
    "-1Gi",
    "1e400",
    "1e30",
    "10E",
    "nan",
    "inf",
    "True",
    "False",
    "Unknown",
    "Ready",
    "Always",
    "In",
    "NotIn",
    "Exists",
    "DoesNotExist",
    "DoNotSchedule",
    "ScheduleAnyway",
    "Honor",
    "Ignore",
    "TCP",
    "UDP",
    "0.0.0.0",
    "RestartAllContainers",
    "kubernetes.io/hostname",
    "Gt",
    "Strict",
    "NonStrict",
    "Gang",
    "Independent",
    "Running",
    "default/x",
    "600s",
    "1h30m",
    "[]",
    '["a"]',
    "[[",
    "{}",
    "2024-05-01T12:00:00Z",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    "0001-01-01T00:00:00",
]
HUGE_INTS = [2**62 + 1, 2**63, -(2**63) - 1, 10**30, 10**400]
# Integers with more digits than Python will print (built lazily: the strategy's own repr
# must stay printable).
unprintable_ints = st.sampled_from([4400, 5000]).map(lambda d: 10**d) | st.sampled_from([4400]).map(
    lambda d: -(10**d)
)

keys = st.sampled_from(FIELD_NAMES) | st.text(max_size=8)
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from(HUGE_INTS)
    | unprintable_ints
    | st.floats()
    | st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -0.0, 0.5])
    | st.text(max_size=12)
    | st.sampled_from(INTERESTING_TEXT)
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=12,
)


# Values most likely to trip a translator, drawn as often as all other values together.
special_values = (
    st.sampled_from(
        [None, math.inf, -math.inf, math.nan, 10**400, 2**63, -1, 0, 1.5, "", "x", True]
    )
    # (copied: mutated() edits the containers it plants)
    | st.sampled_from([[], {}, [None], {"": None}, ["x"], {"x": "y"}]).map(copy.deepcopy)
    | unprintable_ints
)
replacements = special_values | json_values


def _flip(draw: st.DrawFn) -> bool:
    return draw(st.booleans())


def _paths(obj: object, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, (*prefix, i))


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        obj = obj[k]
    return obj


@st.composite
def mutated(draw: st.DrawFn, base: st.SearchStrategy[Obj]) -> Obj:
    """A valid object with one to four random edits: a value replaced by a random one, a key
    (usually one the translator reads) added, or an entry removed."""
    obj = copy.deepcopy(draw(base))
    for _ in range(draw(st.integers(1, 4))):
        paths = list(_paths(obj))
        leaves = [p for p in paths if not isinstance(_at(obj, p), dict | list) or not _at(obj, p)]
        path = draw(st.sampled_from(leaves if leaves and _flip(draw) else paths))
        action = draw(st.sampled_from(["replace", "replace", "add", "delete"]))
        target = _at(obj, path)
        if action == "add" and isinstance(target, dict):
            target[draw(keys)] = draw(replacements)
        elif action == "add" and isinstance(target, list):
            target.insert(draw(st.integers(0, len(target))), draw(replacements))
        elif not path:
            obj = draw(st.dictionaries(keys, json_values, max_size=4))
        elif action == "delete":
            del _at(obj, path[:-1])[path[-1]]
        else:
            _at(obj, path[:-1])[path[-1]] = draw(replacements)
    return obj


random_objects = st.dictionaries(keys, json_values, max_size=5) | st.fixed_dictionaries(
    {},
    optional={
        "apiVersion": st.just("v1"),
        "metadata": json_values,
        "spec": json_values,
        "status": json_values,
    },
)


def _mentions(obj: object, key: str) -> bool:
    if isinstance(obj, dict):
        return any(k == key or _mentions(v, key) for k, v in obj.items())
    if isinstance(obj, list):
        return any(_mentions(v, key) for v in obj)
    return False


# ---- quantities from the Kubernetes grammar -----------------------------------------------

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@st.composite
def quantities(draw: st.DrawFn) -> tuple[object, Fraction]:
    """A quantity as written in an object (usually a string) and its exact value.

    quantity ::= sign? number suffix;  number ::= digits | digits '.' digits? | '.' digits;
    suffix ::= binarySI | decimalSI | ('e' | 'E') sign? digits.
    """
    if draw(st.integers(0, 9)) == 0:  # a JSON integer
        n = draw(st.integers(0, 10**6))
        return n, Fraction(n)
    whole = draw(st.integers(0, 9999))
    digits = str(whole).zfill(draw(st.integers(1, 5)))  # leading zeros are allowed
    frac = draw(st.text("0123456789", min_size=1, max_size=4))
    form = draw(st.sampled_from(["int", "int", "int.", "int.frac", ".frac"]))
    if form == "int":
        number, value = digits, Fraction(whole)
    elif form == "int.":
        number, value = f"{digits}.", Fraction(whole)
    elif form == "int.frac":
        number, value = f"{digits}.{frac}", whole + Fraction(int(frac), 10 ** len(frac))
    else:
        number, value = f".{frac}", Fraction(int(frac), 10 ** len(frac))
    kind = draw(st.sampled_from(["decimal", "decimal", "binary", "exponent"]))
    if kind == "binary":
        suffix = draw(st.sampled_from(sorted(_BINARY)))
        value *= 2 ** _BINARY[suffix]
    elif kind == "decimal":
        suffix = draw(st.sampled_from(sorted(_DECIMAL)))
        value *= Fraction(10) ** _DECIMAL[suffix]
    else:
        exp = draw(st.integers(-9, 12))
        e = draw(st.sampled_from(["e", "E"]))
        sign = "+" if exp >= 0 and _flip(draw) else ""
        suffix = f"{e}{sign}{exp}"
        value *= Fraction(10) ** exp
    plus = "+" if draw(st.integers(0, 9)) == 0 else ""
    return f"{plus}{number}{suffix}", value


def _is_extended(name: str) -> bool:
    return "/" in name and "kubernetes.io/" not in name


def amount(name: str, value: Fraction) -> int:
    """Independent of the translator: milli-cores for cpu, whole units otherwise, rounded up."""
    scaled = value * 1000 if name == "cpu" else value
    return -((-scaled.numerator) // scaled.denominator)


def _quantities_for(name: str) -> st.SearchStrategy[tuple[object, Fraction]]:
    """Quantities valid for ``name``: whole for extended resources, at most MAX_AMOUNT."""
    q = quantities()
    if _is_extended(name):
        q = q.filter(lambda t: t[1].denominator == 1)
    return q.filter(lambda t: amount(name, t[1]) <= MAX_AMOUNT)


_QUANTITIES: dict[str, st.SearchStrategy[tuple[object, Fraction]]] = {}


@st.composite
def resource_lists(
    draw: st.DrawFn, names: list[str], max_size: int = 4
) -> tuple[dict[str, object], dict[str, int]]:
    """A valid ResourceList and its amounts in the scheduler's units."""
    chosen = draw(st.lists(st.sampled_from(names), unique=True, max_size=max_size))
    raw: dict[str, object] = {}
    parsed: dict[str, int] = {}
    for name in chosen:
        if name not in _QUANTITIES:
            _QUANTITIES[name] = _quantities_for(name)
        text, value = draw(_QUANTITIES[name])
        raw[name] = text
        parsed[name] = amount(name, value)
    return raw, parsed


CONTAINER_RESOURCES = [
    "cpu",
    "memory",
    "ephemeral-storage",
    "hugepages-2Mi",
    "nvidia.com/gpu",
    "example.com/foo",
]
NODE_RESOURCES = [*CONTAINER_RESOURCES, "pods", "hugepages-1Gi", "amd.com/gpu"]
POD_LEVEL_HONOURED = ("cpu", "memory", "hugepages-2Mi")

# ---- valid objects ------------------------------------------------------------------------

_ALNUM = "abcdefghijklmnopqrstuvwxyz0123456789"
dns_labels = st.text(_ALNUM, min_size=1, max_size=8) | st.sampled_from(
    ["worker", "ps", "launcher", "train-0", "a1-b2"]
)
label_keys = st.sampled_from(
    ["kubernetes.io/os", "topology.kubernetes.io/zone", "nvidia.com/gpu.product", "pool", "a"]
)
label_values = st.text(_ALNUM + "ABCXYZ", max_size=8) | st.sampled_from(
    ["NVIDIA-A100-SXM4-80GB", "us-east-1a", "a.b_c", "true"]
)
times = st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1))


def rfc3339(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(t: datetime) -> float:
    return float(calendar.timegm(t.replace(microsecond=0).timetuple()))


@st.composite
def requirements(draw: st.DrawFn, field: bool = False) -> tuple[Obj, Requirement]:
    key = "metadata.name" if field else draw(label_keys)
    op = draw(st.sampled_from(OPERATORS))
    if op in ("Exists", "DoesNotExist"):
        values: list[str] = []
    elif op in ("Gt", "Lt"):
        values = [str(draw(st.integers(0, 10**6)))]
    else:
        values = draw(st.lists(label_values, min_size=1, max_size=3))
    raw: Obj = {"key": key, "operator": op}
    if values or _flip(draw):
        raw["values"] = values
    return raw, Requirement(key, op, tuple(values))


@st.composite
def terms(draw: st.DrawFn) -> tuple[Obj, AffinityTerm]:
    exprs = draw(st.lists(requirements(), max_size=3))
    fields = draw(st.lists(requirements(field=True), max_size=1))
    raw: Obj = {}
    if exprs:
        raw["matchExpressions"] = [r for r, _ in exprs]
    if fields:
        raw["matchFields"] = [r for r, _ in fields]
    return raw, AffinityTerm(tuple(e for _, e in exprs), tuple(e for _, e in fields))


@st.composite
def tolerations(draw: st.DrawFn) -> tuple[Obj, Toleration]:
    op = draw(st.sampled_from(["Equal", "Exists", None]))
    key = draw(st.sampled_from(["", "nvidia.com/gpu", "dedicated"]))
    effect = draw(st.sampled_from(["", "NoSchedule", "PreferNoSchedule", "NoExecute"]))
    value = draw(label_values) if op != "Exists" else ""
    raw: Obj = {}
    if key:
        raw["key"] = key
    if op:
        raw["operator"] = op
    if value:
        raw["value"] = value
    if effect:
        raw["effect"] = effect
    if effect == "NoExecute" and _flip(draw):
        raw["tolerationSeconds"] = draw(st.integers(0, 3600))
    return raw, Toleration(key, op or "Equal", value, effect)


@st.composite
def containers(draw: st.DrawFn, name: str, init: bool) -> tuple[Obj, dict[str, int], bool]:
    c: Obj = {"name": name, "image": "registry.example/app:1"}
    raw, parsed = draw(resource_lists(CONTAINER_RESOURCES))
    resources: Obj = {}
    if raw or _flip(draw):
        resources["requests"] = raw
    if draw(st.booleans()):  # limits are never read
        resources["limits"] = draw(resource_lists(CONTAINER_RESOURCES))[0]
    if resources or _flip(draw):
        c["resources"] = resources
    sidecar = init and _flip(draw)
    if sidecar:
        c["restartPolicy"] = "Always"
    elif init and _flip(draw):
        c["restartPolicy"] = draw(st.sampled_from(["OnFailure", "Never"]))
    return c, parsed, sidecar


def reference_requests(
    app: list[dict[str, int]],
    init: list[tuple[dict[str, int], bool]],
    overhead: dict[str, int],
    pod_level: dict[str, int],
) -> dict[str, int]:
    """A pod's effective request, computed per resource: the larger of (app containers plus
    sidecars) and the peak init step (its own request plus the sidecars started before it);
    pod-level figures replace that; overhead is added; one pod slot is taken."""
    names = {n for r in [*app, *(r for r, _ in init), overhead, pod_level] for n in r}
    out: dict[str, int] = {}
    for n in names:
        running = sum(r.get(n, 0) for r in app)
        sidecars = 0
        peak = 0
        for r, is_sidecar in init:
            if is_sidecar:
                sidecars += r.get(n, 0)
                running += r.get(n, 0)
                peak = max(peak, sidecars)
            else:
                peak = max(peak, sidecars + r.get(n, 0))
        total = max(running, peak)
        if n in pod_level:
            total = pod_level[n]
        out[n] = total + overhead.get(n, 0)
    out["pods"] = out.get("pods", 0) + 1
    return {n: v for n, v in out.items() if v > 0}


SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
TOPOLOGY_KEYS = ["kubernetes.io/hostname", "topology.kubernetes.io/zone", "rack"]
# Label keys pods may carry for matchLabelKeys / mismatchLabelKeys, disjoint from label_keys
# (which selectors use): the API refuses a key in both matchLabelKeys and the selector.
POD_LABEL_KEYS = ["job", "revision", "tier", "absent-key"]


@st.composite
def selector_requirements(draw: st.DrawFn) -> tuple[Obj, Requirement]:
    key = draw(label_keys)
    op = draw(st.sampled_from(SELECTOR_OPERATORS))
    values: list[str] = []
    if op in ("In", "NotIn"):
        values = draw(st.lists(label_values, min_size=1, max_size=3))
    raw: Obj = {"key": key, "operator": op}
    if values or _flip(draw):
        raw["values"] = values
    return raw, Requirement(key, op, tuple(values))


@st.composite
def label_selectors(draw: st.DrawFn) -> tuple[Obj | None, LabelSelector | None]:
    """A metav1.LabelSelector (absent: None, which selects nothing) and its model."""
    if draw(st.integers(0, 4)) == 0:
        return None, None
    labels = draw(st.dictionaries(label_keys, label_values, max_size=2))
    exprs = draw(st.lists(selector_requirements(), max_size=3))
    raw: Obj = {}
    if labels or _flip(draw):
        raw["matchLabels"] = labels
    if exprs or _flip(draw):
        raw["matchExpressions"] = [r for r, _ in exprs]
    return raw, LabelSelector(tuple(sorted(labels.items())), tuple(e for _, e in exprs))


@st.composite
def label_key_merge(
    draw: st.DrawFn,
    raw_selector: Obj | None,
    selector: LabelSelector | None,
    labels: Mapping[str, str],
    operators: tuple[str, ...],
) -> tuple[dict[str, list[str]], Obj | None, LabelSelector | None]:
    """matchLabelKeys (and mismatchLabelKeys when ``operators`` has NotIn) for a selector.

    The model's selector is the API server's merge (``key In/NotIn (the pod's value)`` for
    each key the pod has a label for, appended in order); the object holds the selector
    either already merged (as read back from a v1.36 API server) or not (an older one)."""
    keys = draw(st.lists(st.sampled_from(POD_LABEL_KEYS), unique=True, max_size=3))
    split = draw(st.integers(0, len(keys)))
    lists = {"matchLabelKeys": keys[:split], "mismatchLabelKeys": keys[split:]}
    if "NotIn" not in operators:
        lists = {"matchLabelKeys": keys}
    fields = {name: ks for name, ks in lists.items() if ks or _flip(draw)}
    if selector is None or raw_selector is None:
        return fields, raw_selector, selector
    merged = [
        Requirement(k, op, (labels[k],))
        for name, op in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn"))
        for k in lists.get(name, [])
        if k in labels
    ]
    expected = LabelSelector(selector.match_labels, (*selector.match_expressions, *merged))
    if merged and _flip(draw):
        raw_selector = copy.deepcopy(raw_selector)
        raw_selector.setdefault("matchExpressions", []).extend(
            {"key": r.key, "operator": r.operator, "values": list(r.values)} for r in merged
        )
    return fields, raw_selector, expected


@st.composite
def pod_affinity_terms(
    draw: st.DrawFn, ns: str, labels: Mapping[str, str]
) -> tuple[Obj, PodAffinityTerm]:
    topology = draw(st.sampled_from(TOPOLOGY_KEYS))
    raw_selector, selector = draw(label_selectors())
    keys, raw_selector, selector = draw(
        label_key_merge(raw_selector, selector, labels, ("In", "NotIn"))
    )
    raw: Obj = {"topologyKey": topology, **keys}
    if raw_selector is not None:
        raw["labelSelector"] = raw_selector
    namespaces = draw(st.lists(st.sampled_from(["default", "ml", "team-a", "kube-system"])))
    if namespaces or _flip(draw):
        raw["namespaces"] = namespaces
    raw_ns_selector, ns_selector = draw(label_selectors())
    if raw_ns_selector is not None:
        raw["namespaceSelector"] = raw_ns_selector
    chosen = frozenset(namespaces)
    if not chosen and ns_selector is None:
        chosen = frozenset({ns})
    return raw, PodAffinityTerm(topology, selector, chosen, ns_selector)


@st.composite
def pod_affinities(draw: st.DrawFn, ns: str, labels: Mapping[str, str]) -> tuple[Obj, PodAffinity]:
    raw: Obj = {}
    parts: dict[str, tuple[Any, ...]] = {}
    for kind, req_name, pref_name in (
        ("podAffinity", "required", "preferred"),
        ("podAntiAffinity", "required_anti", "preferred_anti"),
    ):
        required = draw(st.lists(pod_affinity_terms(ns, labels), max_size=2))
        preferred = []
        for term_raw, term in draw(st.lists(pod_affinity_terms(ns, labels), max_size=2)):
            weight = draw(st.integers(1, 100))
            preferred.append(
                (
                    {"weight": weight, "podAffinityTerm": term_raw},
                    WeightedPodAffinityTerm(weight, term),
                )
            )
        block: Obj = {}
        if required or _flip(draw):
            block[REQUIRED] = [r for r, _ in required]
        if preferred or _flip(draw):
            block[PREFERRED] = [r for r, _ in preferred]
        if block or _flip(draw):
            raw[kind] = block
        parts[req_name] = tuple(t for _, t in required)
        parts[pref_name] = tuple(t for _, t in preferred)
    return raw, PodAffinity(**parts)


@st.composite
def spread_constraints(
    draw: st.DrawFn, labels: Mapping[str, str]
) -> tuple[list[Obj], tuple[SpreadConstraint, ...]]:
    pairs = draw(
        st.lists(
            st.tuples(
                st.sampled_from(TOPOLOGY_KEYS), st.sampled_from(["DoNotSchedule", "ScheduleAnyway"])
            ),
            unique=True,
            max_size=3,
        )
    )
    raws: list[Obj] = []
    out: list[SpreadConstraint] = []
    for topology, when in pairs:
        skew = draw(st.integers(1, 10))
        raw: Obj = {"maxSkew": skew, "topologyKey": topology, "whenUnsatisfiable": when}
        raw_selector, selector = draw(label_selectors())
        keys, raw_selector, selector = draw(
            label_key_merge(raw_selector, selector, labels, ("In",))
        )
        raw.update(keys)
        if raw_selector is not None:
            raw["labelSelector"] = raw_selector
        min_domains = None
        if when == "DoNotSchedule" and _flip(draw):
            raw["minDomains"] = min_domains = draw(st.integers(1, 5))
        affinity_policy, taints_policy = "Honor", "Ignore"
        if draw(st.booleans()):
            raw["nodeAffinityPolicy"] = affinity_policy = draw(st.sampled_from(["Honor", "Ignore"]))
        if draw(st.booleans()):
            raw["nodeTaintsPolicy"] = taints_policy = draw(st.sampled_from(["Honor", "Ignore"]))
        raws.append(raw)
        out.append(
            SpreadConstraint(
                skew, topology, when, selector, min_domains, affinity_policy, taints_policy
            )
        )
    return raws, tuple(out)


@st.composite
def container_ports(draw: st.DrawFn, host_network: bool) -> tuple[list[Obj], list[HostPort]]:
    """A container's ports and the host ports they take (with hostNetwork, every container
    port is a host port)."""
    raws: list[Obj] = []
    taken: list[HostPort] = []
    for _ in range(draw(st.integers(0, 3))):
        container_port = draw(st.integers(1, 65535))
        raw: Obj = {"containerPort": container_port}
        host_port = 0
        if draw(st.booleans()):
            raw["hostPort"] = host_port = draw(st.integers(1, 65535))
        elif draw(st.booleans()):
            raw["hostPort"] = 0
        if host_network and host_port == 0:
            host_port = container_port
        protocol = "TCP"
        if draw(st.booleans()):
            raw["protocol"] = protocol = draw(st.sampled_from(["TCP", "UDP", "SCTP"]))
        ip = ""
        if draw(st.booleans()):
            raw["hostIP"] = chosen = draw(st.sampled_from(["", "0.0.0.0", "10.0.0.7", "::1"]))
            ip = "" if chosen == "0.0.0.0" else chosen
        raws.append(raw)
        if host_port:
            taken.append(HostPort(host_port, protocol, ip))
    return raws, taken


@st.composite
def pod_volumes(draw: st.DrawFn, pod_name: str) -> tuple[list[Obj], PodVolumes]:
    raws: list[Obj] = []
    claims: list[str] = []
    drivers: list[str] = []
    ephemeral: list[str] = []
    for i in range(draw(st.integers(0, 4))):
        name = f"v{i}"
        kind = draw(st.sampled_from(["pvc", "ephemeral", "csi", "configMap", "emptyDir"]))
        if kind == "pvc":
            claim = draw(dns_labels)
            raws.append({"name": name, "persistentVolumeClaim": {"claimName": claim}})
            claims.append(claim)
        elif kind == "ephemeral":
            raws.append({"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
            claims.append(f"{pod_name}-{name}")
            ephemeral.append(f"{pod_name}-{name}")
        elif kind == "csi":
            driver = draw(st.sampled_from(["secrets-store.csi.k8s.io", "ebs.csi.aws.com"]))
            raws.append({"name": name, "csi": {"driver": driver}})
            drivers.append(driver)
        elif kind == "configMap":
            raws.append({"name": name, "configMap": {"name": "cfg"}})
        else:
            raws.append({"name": name, "emptyDir": {}})
    return raws, PodVolumes(tuple(claims), tuple(drivers), tuple(ephemeral))


@st.composite
def valid_pods(draw: st.DrawFn) -> tuple[Obj, Pod]:
    """A valid pod object and the Pod it must translate to."""
    ns = draw(st.sampled_from(["default", "ml", "team-a"]))
    name = draw(dns_labels)
    meta: Obj = {"name": name, "namespace": ns}
    uid = f"{ns}/{name}"
    if draw(st.booleans()):
        uid = draw(st.uuids()).hex
        meta["uid"] = uid
    created = 0.0
    if draw(st.booleans()):
        t = draw(times)
        meta["creationTimestamp"] = rfc3339(t)
        created = epoch(t)
    deleting = draw(st.booleans())
    if deleting:
        meta["deletionTimestamp"] = rfc3339(draw(times))
    labels: Obj = {"app": name}
    group = role = ""
    if draw(st.booleans()):
        labels[lbl.POD_GROUP_LABEL] = g = draw(dns_labels)
        group = f"{ns}/{g}"
    if draw(st.booleans()):
        labels[lbl.ROLE_LABEL] = role = draw(dns_labels)
    labels.update(draw(st.dictionaries(st.sampled_from(POD_LABEL_KEYS[:-1]), label_values)))
    meta["labels"] = labels

    spec: Obj = {}
    app = [draw(containers(f"c{i}", init=False)) for i in range(draw(st.integers(0, 3)))]
    spec["containers"] = [c for c, _, _ in app]
    init = [draw(containers(f"i{i}", init=True)) for i in range(draw(st.integers(0, 3)))]
    if init or _flip(draw):
        spec["initContainers"] = [c for c, _, _ in init]
    # Host ports: those of sidecars (restartable init containers), then of app containers.
    host_network = draw(st.booleans())
    if host_network or _flip(draw):
        spec["hostNetwork"] = host_network
    host_ports: list[HostPort] = []
    for c, _, counted in [*init, *((c, r, True) for c, r, _ in app)]:
        raw_ports, taken = draw(container_ports(host_network))
        if raw_ports or _flip(draw):
            c["ports"] = raw_ports
        if counted:
            host_ports.extend(taken)
    raw_affinity, pod_affinity = draw(pod_affinities(ns, labels))
    raw_spread, spread = draw(spread_constraints(labels))
    if raw_spread or _flip(draw):
        spec["topologySpreadConstraints"] = raw_spread
    gates = draw(st.lists(st.sampled_from(["kueue.x-k8s.io/admission", "example.com/hold"])))
    if gates or _flip(draw):
        spec["schedulingGates"] = [{"name": g} for g in gates]
    raw_volumes, volumes = draw(pod_volumes(name))
    if raw_volumes or _flip(draw):
        spec["volumes"] = raw_volumes
    if draw(st.booleans()):
        spec["resourceClaims"] = []
    overhead: dict[str, int] = {}
    if draw(st.booleans()):
        spec["overhead"], overhead = draw(resource_lists(["cpu", "memory"]))
    pod_level: dict[str, int] = {}
    if draw(st.booleans()):
        raw, parsed = draw(
            resource_lists([*POD_LEVEL_HONOURED, "nvidia.com/gpu", "ephemeral-storage"])
        )
        spec["resources"] = {"requests": raw}
        pod_level = {k: v for k, v in parsed.items() if k in POD_LEVEL_HONOURED}
    priority = 0
    if draw(st.booleans()):
        spec["priority"] = priority = draw(st.integers(-(2**31), 10**9))
    scheduler = "default-scheduler"
    if draw(st.booleans()):
        spec["schedulerName"] = scheduler = draw(st.sampled_from(["gangsched", "other"]))
    node_name = ""
    if draw(st.booleans()):
        spec["nodeName"] = node_name = draw(dns_labels)
    selector = draw(st.dictionaries(label_keys, label_values, max_size=3))
    if selector:
        spec["nodeSelector"] = selector
    required = None
    preferred: list[tuple[Obj, PreferredTerm]] = []
    node_affinity: Obj = {}
    if draw(st.booleans()):
        req = draw(st.lists(terms(), max_size=3))
        node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [r for r, _ in req]
        }
        required = tuple(t for _, t in req)
    for raw_term, term in draw(st.lists(terms(), max_size=2)):
        weight = draw(st.integers(1, 100))
        preferred.append(({"weight": weight, "preference": raw_term}, PreferredTerm(weight, term)))
    if preferred:
        node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [r for r, _ in preferred]
    if node_affinity or raw_affinity:
        spec["affinity"] = dict(raw_affinity)
        if node_affinity or _flip(draw):
            spec["affinity"]["nodeAffinity"] = node_affinity
    tols = draw(st.lists(tolerations(), max_size=3))
    if tols:
        spec["tolerations"] = [r for r, _ in tols]
    obj: Obj = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    phase = PodPhase.PENDING
    if draw(st.booleans()):
        phase = draw(st.sampled_from(list(PodPhase)))
        obj["status"] = {"phase": str(phase)}

    requests = reference_requests(
        [p for _, p, _ in app], [(p, s) for _, p, s in init], overhead, pod_level
    )
    expected = Pod(
        uid,
        ns,
        name,
        requests,
        created=created,
        priority=priority,
        scheduler_name=scheduler,
        phase=phase,
        node_name=node_name,
        placement=Placement(
            node_selector=tuple(sorted(selector.items())),
            affinity=NodeAffinity(required, tuple(p for _, p in preferred)),
            tolerations=tuple(t for _, t in tols),
        ),
        group=group,
        role=role,
        deleting=deleting,
        labels=labels,
        pod_affinity=pod_affinity,
        spread=spread,
        host_ports=tuple(host_ports),
        gates=tuple(gates),
        volumes=volumes,
    )
    return obj, expected


CONDITION_TYPES = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure", "NetworkUnavailable"]


@st.composite
def valid_nodes(draw: st.DrawFn) -> tuple[Obj, Node]:
    name = draw(dns_labels)
    labels = {"kubernetes.io/hostname": name, **draw(st.dictionaries(label_keys, label_values))}
    spec: Obj = {}
    taints = []
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(["nvidia.com/gpu", "dedicated", "node.kubernetes.io/x"]))
        effect = draw(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"]))
        value = draw(st.sampled_from(["", "present", "training"]))
        raw: Obj = {"key": key, "effect": effect}
        if value:
            raw["value"] = value
        spec.setdefault("taints", []).append(raw)
        taints.append(Taint(key, value, effect))
    unschedulable = draw(st.booleans())
    if unschedulable or _flip(draw):
        spec["unschedulable"] = unschedulable
    conditions = []
    ready = False
    for ctype in draw(st.lists(st.sampled_from(CONDITION_TYPES), unique=True)):
        status = draw(st.sampled_from(["True", "False", "Unknown"]))
        conditions.append({"type": ctype, "status": status, "reason": "Kubelet"})
        if ctype == "Ready":
            ready = status == "True"
    raw_alloc, alloc = draw(resource_lists(NODE_RESOURCES, max_size=len(NODE_RESOURCES)))
    status_obj: Obj = {"conditions": conditions}
    if raw_alloc and _flip(draw):  # capacity stands in for a missing allocatable
        status_obj["capacity"] = raw_alloc
    else:
        status_obj["allocatable"] = raw_alloc
        if raw_alloc:  # (an empty allocatable would fall back to capacity)
            status_obj["capacity"] = draw(resource_lists(NODE_RESOURCES))[0]
    obj = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": status_obj,
    }
    return obj, Node(name, alloc, labels, tuple(taints), unschedulable, ready)


GANG_RESOURCES = ["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]


@st.composite
def valid_podgroups(draw: st.DrawFn) -> tuple[Obj, GangSpec]:
    ns = draw(st.sampled_from(["default", "ml"]))
    name = draw(dns_labels)
    key = f"{ns}/{name}"
    meta: Obj = {"name": name, "namespace": ns}
    created = 0.0
    if draw(st.booleans()):
        t = draw(times)
        meta["creationTimestamp"] = rfc3339(t)
        created = epoch(t)
    min_member = draw(st.integers(1, 1000))
    spec: Obj = {"minMember": min_member}
    raw_res, res = draw(resource_lists(GANG_RESOURCES))
    if raw_res or _flip(draw):
        spec["minResources"] = raw_res
    timeout = None
    if draw(st.booleans()):
        spec["scheduleTimeoutSeconds"] = t_s = draw(st.integers(1, 86400))
        timeout = float(t_s)
    mode = GangMode.STRICT
    if draw(st.booleans()):
        mode = draw(st.sampled_from(list(GangMode)))
        spec["mode"] = str(mode)
    role_names = draw(st.lists(dns_labels, unique=True, max_size=4))
    roles = tuple(RoleSpec(r, draw(st.integers(0, min_member))) for r in role_names)
    if roles or _flip(draw):
        spec["roles"] = [{"name": r.name, "minMember": r.min_member} for r in roles]
    group_names = draw(
        st.lists(st.tuples(st.sampled_from(["", "ml", "other"]), dns_labels), max_size=4)
    )
    raw_group = [f"{n}/{g}" if n else g for n, g in group_names]
    gang_group: tuple[str, ...] = ()
    if raw_group:
        spec["gangGroup"] = raw_group
        gang_group = tuple(sorted({key, *(f"{n or ns}/{g}" for n, g in group_names)}))
    topology = TopologySpec()
    if role_names and _flip(draw):
        aff = draw(st.lists(st.lists(st.sampled_from(role_names), min_size=1), max_size=2))
        anti = draw(st.lists(st.lists(st.sampled_from(role_names), min_size=1), max_size=2))
        spec["topology"] = {"affinity": aff, "antiAffinity": anti}
        topology = TopologySpec(tuple(map(tuple, aff)), tuple(map(tuple, anti)))
    alone = True
    if draw(st.booleans()):
        once = draw(st.sampled_from(["Independent", "Gang"]))
        spec["onceSatisfied"] = once
        alone = once == "Independent"
    obj = {"apiVersion": "gangsched.io/v1alpha1", "kind": "PodGroup", "metadata": meta}
    obj["spec"] = spec
    expected = GangSpec(
        key=key,
        min_member=min_member,
        min_resources=res,
        timeout_seconds=timeout,
        created=created,
        mode=mode,
        roles=roles,
        gang_group=gang_group,
        topology=topology,
        once_satisfied_alone=alone,
    )
    return obj, expected


@st.composite
def valid_volcano_podgroups(draw: st.DrawFn) -> tuple[Obj, GangSpec]:
    ns = draw(st.sampled_from(["default", "research"]))
    name = draw(dns_labels)
    min_member = draw(st.integers(1, 100))
    tasks = draw(st.dictionaries(dns_labels, st.integers(0, min_member), max_size=4))
    raw_res, res = draw(resource_lists(GANG_RESOURCES))
    spec: Obj = {"minMember": min_member, "queue": "default"}
    if tasks or _flip(draw):
        spec["minTaskMember"] = tasks
    if raw_res or _flip(draw):
        spec["minResources"] = raw_res
    obj = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
        "status": {"phase": "Pending"},
    }
    roles = tuple(RoleSpec(k, v) for k, v in sorted(tasks.items()))
    return obj, GangSpec(f"{ns}/{name}", min_member, res, roles=roles)


def _valid_only(pairs: st.SearchStrategy[tuple[Obj, Any]]) -> st.SearchStrategy[Obj]:
    return pairs.map(lambda pair: pair[0])


# ---- invariants ---------------------------------------------------------------------------


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _str_tuple(t: object) -> bool:
    return isinstance(t, tuple) and all(isinstance(x, str) for x in t)


def check_pod(obj: Mapping[str, Any], pod: Pod, membership: Membership) -> None:
    assert isinstance(pod, Pod)
    assert isinstance(membership, Membership)
    assert isinstance(pod.invalid_reason, str)
    for text in (pod.uid, pod.namespace, pod.name, pod.node_name, pod.group, pod.role):
        assert isinstance(text, str)
    assert pod.scheduler_name
    assert isinstance(pod.scheduler_name, str)
    assert isinstance(pod.phase, PodPhase)
    assert isinstance(pod.created, float)
    assert math.isfinite(pod.created)
    assert isinstance(pod.deleting, bool)
    # requests: always a resource list a node can be charged with
    assert type(pod.requests) is dict
    for k, v in pod.requests.items():
        assert isinstance(k, str)
        assert k
        assert _is_int(v)
        assert v > 0
    assert pod.requests.get("pods", 0) >= 1
    if not _mentions(obj, "pods"):
        assert pod.requests["pods"] == 1
    # membership
    assert (pod.group, pod.role) == (membership.key, membership.role)
    if membership.error:
        assert pod.group == ""
        assert membership.error in pod.invalid_reason
    # what other pods' plugins read is well-formed even on a pod that is refused
    assert isinstance(pod.unsupported, str)
    assert pod.refused == (pod.invalid_reason or pod.unsupported)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in pod.labels.items())
    check_pod_affinity(pod.pod_affinity)
    check_spread(pod.spread)
    for port in pod.host_ports:
        assert isinstance(port, HostPort)
        assert _is_int(port.port)
        assert 1 <= port.port <= 65535
        assert port.protocol in ("TCP", "UDP", "SCTP")
        assert isinstance(port.ip, str)
        assert port.ip != "0.0.0.0"
    assert _str_tuple(pod.gates)
    assert all(pod.gates)
    assert isinstance(pod.volumes, PodVolumes)
    for names in (pod.volumes.claims, pod.volumes.inline_csi, pod.volumes.ephemeral):
        assert _str_tuple(names)
        assert all(names)
    assert set(pod.volumes.ephemeral) <= set(pod.volumes.claims)
    if pod.invalid_reason:
        return
    assert _is_int(pod.priority)
    p = pod.placement
    assert isinstance(p, Placement)
    hash(p)  # pods with equal placements share a node-eligibility computation
    assert all(_str_tuple(kv) and len(kv) == 2 for kv in p.node_selector)
    assert list(p.node_selector) == sorted(p.node_selector)
    all_terms: list[AffinityTerm] = list(p.affinity.required or ())
    for pref in p.affinity.preferred:
        assert isinstance(pref, PreferredTerm)
        assert _is_int(pref.weight)
        all_terms.append(pref.term)
    for term in all_terms:
        assert isinstance(term, AffinityTerm)
        for r in (*term.match_expressions, *term.match_fields):
            assert isinstance(r, Requirement)
            assert r.operator in OPERATORS
            assert isinstance(r.key, str)
            assert _str_tuple(r.values)
    for t in p.tolerations:
        assert isinstance(t, Toleration)
        assert _str_tuple((t.key, t.operator, t.value, t.effect))


def check_selector(selector: LabelSelector | None) -> None:
    if selector is None:
        return
    assert isinstance(selector, LabelSelector)
    assert all(_str_tuple(kv) and len(kv) == 2 and kv[0] for kv in selector.match_labels)
    for r in selector.match_expressions:
        assert isinstance(r, Requirement)
        assert isinstance(r.key, str)
        assert r.key
        assert _str_tuple(r.values)
        assert r.operator in ("In", "NotIn", "Exists", "DoesNotExist")
        assert bool(r.values) == (r.operator in ("In", "NotIn"))


def check_pod_affinity(affinity: PodAffinity) -> None:
    assert isinstance(affinity, PodAffinity)
    hash(affinity)
    weighted = (*affinity.preferred, *affinity.preferred_anti)
    for w in weighted:
        assert isinstance(w, WeightedPodAffinityTerm)
        assert _is_int(w.weight)
        assert 1 <= w.weight <= 100
    for term in (*affinity.required, *affinity.required_anti, *(w.term for w in weighted)):
        assert isinstance(term, PodAffinityTerm)
        assert isinstance(term.topology_key, str)
        assert term.topology_key
        assert isinstance(term.namespaces, frozenset)
        assert all(isinstance(n, str) and n for n in term.namespaces)
        assert term.namespaces or term.namespace_selector is not None
        check_selector(term.selector)
        check_selector(term.namespace_selector)


def check_spread(spread: tuple[SpreadConstraint, ...]) -> None:
    assert isinstance(spread, tuple)
    hash(spread)
    for c in spread:
        assert isinstance(c, SpreadConstraint)
        assert _is_int(c.max_skew)
        assert c.max_skew >= 1
        assert isinstance(c.topology_key, str)
        assert c.topology_key
        assert c.when_unsatisfiable in ("DoNotSchedule", "ScheduleAnyway")
        assert c.min_domains is None or (_is_int(c.min_domains) and c.min_domains >= 1)
        if c.min_domains is not None:
            assert c.when_unsatisfiable == "DoNotSchedule"
        assert c.node_affinity_policy in ("Honor", "Ignore")
        assert c.node_taints_policy in ("Honor", "Ignore")
        check_selector(c.selector)
    pairs = [(c.topology_key, c.when_unsatisfiable) for c in spread]
    assert len(pairs) == len(set(pairs))


def check_node(obj: Mapping[str, Any], node: Node) -> None:
    assert isinstance(node, Node)
    assert isinstance(node.name, str)
    assert isinstance(node.ready, bool)
    assert isinstance(node.unschedulable, bool)
    assert type(node.allocatable) is dict
    for k, v in node.allocatable.items():
        assert isinstance(k, str)
        assert _is_int(v)
        assert v >= 0
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in node.labels.items())
    for t in node.taints:
        assert isinstance(t, Taint)
        assert _str_tuple((t.key, t.value, t.effect))
    if node.ready:
        status = obj["status"]
        ready = [
            c for c in status["conditions"] if isinstance(c, Mapping) and c.get("type") == "Ready"
        ]
        assert ready
        assert ready[-1].get("status") == "True"
        raw = status.get("allocatable") or status.get("capacity")
        assert set(raw or {}) == set(node.allocatable)


def check_gang(obj: Mapping[str, Any], spec: GangSpec) -> None:
    assert isinstance(spec, GangSpec)
    assert isinstance(spec.key, str)
    assert "/" in spec.key
    assert isinstance(spec.invalid_reason, str)
    assert isinstance(spec.created, float)
    meta = obj.get("metadata")
    if isinstance(meta, Mapping) and all(
        isinstance(meta.get(k), str) for k in ("name", "namespace")
    ):
        assert spec.key == f"{meta['namespace']}/{meta['name']}"
    if spec.invalid_reason:
        return
    assert _is_int(spec.min_member)
    assert spec.min_member >= 1
    for k, v in spec.min_resources.items():
        assert isinstance(k, str)
        assert _is_int(v)
        assert v >= 0
    if spec.timeout_seconds is not None:
        assert isinstance(spec.timeout_seconds, float)
        assert math.isfinite(spec.timeout_seconds)
        assert spec.timeout_seconds >= 1
    assert isinstance(spec.mode, GangMode)
    for r in spec.roles:
        assert isinstance(r, RoleSpec)
        assert isinstance(r.name, str)
        assert _is_int(r.min_member)
        assert r.min_member >= 0
    if spec.gang_group:
        assert spec.key in spec.gang_group
        assert list(spec.gang_group) == sorted(set(spec.gang_group))
        assert all(isinstance(g, str) and "/" in g for g in spec.gang_group)
    assert all(_str_tuple(g) for g in (*spec.topology.affinity, *spec.topology.anti_affinity))
    assert isinstance(spec.once_satisfied_alone, bool)


def check_xk8s(obj: Mapping[str, Any], spec: GangSpec) -> None:
    check_gang(obj, spec)
    if not spec.invalid_reason:  # the scheduler-plugins API has none of these
        assert spec.mode is GangMode.STRICT
        assert (spec.roles, spec.gang_group, spec.topology) == ((), (), TopologySpec())
        assert spec.once_satisfied_alone is True


def check_volcano(obj: Mapping[str, Any], spec: GangSpec) -> None:
    check_gang(obj, spec)
    if not spec.invalid_reason:  # Volcano's PodGroup has none of these
        assert spec.mode is GangMode.STRICT
        assert spec.timeout_seconds is None
        assert (spec.gang_group, spec.topology) == ((), TopologySpec())
        assert spec.once_satisfied_alone is True


def _run(translate: Callable[[Any], Any], obj: Obj) -> Any:
    note(f"object: {_shown(obj)}")
    return translate(obj)


def _shown(obj: object) -> str:
    try:
        return repr(obj)
    except ValueError:  # an integer too large to print
        return "<object holding an integer too large to print>"


# ---- hostile input never raises -----------------------------------------------------------

pod_objects = mutated(_valid_only(valid_pods())) | random_objects
node_objects = mutated(_valid_only(valid_nodes())) | random_objects
podgroup_objects = mutated(_valid_only(valid_podgroups())) | random_objects
volcano_objects = mutated(_valid_only(valid_volcano_podgroups())) | random_objects


@FUZZ
@given(obj=pod_objects)
def test_pod_from_never_raises(obj: Obj) -> None:
    pod, membership = _run(pod_from, obj)
    check_pod(obj, pod, membership)


@FUZZ
@given(obj=node_objects)
def test_node_from_never_raises(obj: Obj) -> None:
    check_node(obj, _run(node_from, obj))


@FUZZ
@given(obj=podgroup_objects)
def test_podgroup_from_never_raises(obj: Obj) -> None:
    check_gang(obj, _run(podgroup_from, obj))
    check_xk8s(obj, xk8s_podgroup_from(obj))


@FUZZ
@given(obj=volcano_objects)
def test_volcano_podgroup_from_never_raises(obj: Obj) -> None:
    check_volcano(obj, _run(volcano_podgroup_from, obj))


@FUZZ
@given(obj=random_objects)
def test_every_translator_never_raises_on_random_objects(obj: Obj) -> None:
    note(f"object: {_shown(obj)}")
    check_node(obj, node_from(obj))
    check_pod(obj, *pod_from(obj))
    check_gang(obj, podgroup_from(obj))
    check_xk8s(obj, xk8s_podgroup_from(obj))
    check_volcano(obj, volcano_podgroup_from(obj))


@FUZZ
@given(obj=random_objects)
def test_namespace_from_never_raises(obj: Obj) -> None:
    name, labels = _run(namespace_from, obj)
    assert isinstance(name, str)
    assert type(labels) is dict
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())


def _each_field_replaced(obj: Obj, value: object) -> Iterator[tuple[tuple[Any, ...], Obj]]:
    """``obj`` with ``value`` put in place of each of its fields and items in turn (edited in
    place and restored after each step: the translators never modify their input)."""
    for path in list(_paths(obj)):
        if path:
            parent = _at(obj, path[:-1])
            original = parent[path[-1]]
            parent[path[-1]] = value
            try:
                yield path, obj
            finally:
                parent[path[-1]] = original


@contextlib.contextmanager
def _failing_path(path: tuple[Any, ...]) -> Iterator[None]:
    try:
        yield
    except BaseException:
        note(f"the value replaced the field at {path}")
        raise


EVERY_FIELD = settings(FUZZ, max_examples=60)


@EVERY_FIELD
@given(case=valid_pods(), value=replacements)
def test_pod_from_never_raises_whatever_one_field_holds(
    case: tuple[Obj, Pod], value: object
) -> None:
    """Every field of a valid pod in turn replaced by the same hostile value."""
    for path, obj in _each_field_replaced(case[0], value):
        with _failing_path(path):
            check_pod(obj, *pod_from(obj))


@EVERY_FIELD
@given(case=valid_nodes(), value=replacements)
def test_node_from_never_raises_whatever_one_field_holds(
    case: tuple[Obj, Node], value: object
) -> None:
    for path, obj in _each_field_replaced(case[0], value):
        with _failing_path(path):
            check_node(obj, node_from(obj))


@EVERY_FIELD
@given(case=valid_podgroups(), value=replacements)
def test_podgroup_from_never_raises_whatever_one_field_holds(
    case: tuple[Obj, GangSpec], value: object
) -> None:
    for path, obj in _each_field_replaced(case[0], value):
        with _failing_path(path):
            check_gang(obj, podgroup_from(obj))
            check_xk8s(obj, xk8s_podgroup_from(obj))


@EVERY_FIELD
@given(case=valid_volcano_podgroups(), value=replacements)
def test_volcano_podgroup_from_never_raises_whatever_one_field_holds(
    case: tuple[Obj, GangSpec], value: object
) -> None:
    for path, obj in _each_field_replaced(case[0], value):
        with _failing_path(path):
            check_volcano(obj, volcano_podgroup_from(obj))


# ---- valid input translates exactly -------------------------------------------------------


@VALID
@given(case=valid_pods())
def test_valid_pod_translates_exactly(case: tuple[Obj, Pod]) -> None:
    obj, expected = case
    pod, membership = pod_from(obj)
    assert pod.invalid_reason == ""
    assert pod.requests == expected.requests
    check_extended(obj, pod)
    assert replace(pod, extended=()) == expected
    assert membership.error == ""
    check_pod(obj, pod, membership)


def check_extended(obj: Obj, pod: Pod) -> None:
    """The layout of the pod's extended resources as a claim would ask them (compared with
    kube-scheduler's own in tests/e2e/test_dra.py): one entry per extended resource some
    container asks a whole, positive amount of; request names unique; every mapping names a
    container that asks the resource and a request of it."""
    spec = obj["spec"]
    containers = [*(spec.get("initContainers") or []), *spec["containers"]]
    asked: dict[str, set[str]] = {}
    for c in containers:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            if "/" in k and "kubernetes.io/" not in k and parse_quantity(v) > 0:
                asked.setdefault(k, set()).add(c["name"])
    assert [a.resource for a in pod.extended] == sorted(asked)
    for a in pod.extended:
        names = [n for n, _ in a.requests]
        assert len(set(names)) == len(names) and all(n > 0 for _, n in a.requests)
        assert {r for _, r in a.mappings} <= set(names)
        assert {c for c, _ in a.mappings} == asked[a.resource]


IN_TREE_VOLUMES = [
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "rbd",
    "iscsi",
    "azureDisk",
    "azureFile",
    "cinder",
    "vsphereVolume",
    "portworxVolume",
]


@st.composite
def unsupported_additions(draw: st.DrawFn, obj: Obj) -> tuple[Obj, list[str]]:
    """``obj`` (a valid pod) with one or more fields gangsched refuses added, and the field
    path each one must be named by."""
    obj = copy.deepcopy(obj)
    spec = obj["spec"]
    named: list[str] = []
    choices = st.sampled_from(["volume", "restartRule", "hostUsers"])
    for kind in draw(st.lists(choices, min_size=1, max_size=3, unique=True)):
        if kind == "volume":
            source = draw(st.sampled_from(IN_TREE_VOLUMES))
            volumes = spec.setdefault("volumes", [])
            at = draw(st.integers(0, len(volumes)))
            volumes.insert(at, {"name": "legacy", source: {}})
            named.append(f"spec.volumes[{at}].{source}")
        elif kind == "restartRule" and spec["containers"]:
            i = draw(st.integers(0, len(spec["containers"]) - 1))
            spec["containers"][i]["restartPolicyRules"] = [{"action": "RestartAllContainers"}]
            named.append(f"spec.containers[{i}].restartPolicyRules[0].action")
        elif kind == "hostUsers":
            spec["hostNetwork"] = True
            spec["hostUsers"] = False
            named.append("spec.hostUsers")
    return obj, named


@VALID
@given(data=st.data(), case=valid_pods())
def test_unsupported_fields_are_named_and_refused(
    data: st.DataObject, case: tuple[Obj, Pod]
) -> None:
    """A valid pod with fields gangsched does not implement is refused (``unsupported``)
    naming each of them, and still read exactly otherwise (it is accounted where it runs)."""
    obj, expected = case
    refused, named = data.draw(unsupported_additions(obj))
    if not named:
        return
    pod, membership = pod_from(refused)
    assert pod.invalid_reason == ""
    for field in named:
        assert field in pod.unsupported
    assert pod.refused == pod.unsupported
    check_pod(refused, pod, membership)
    if "spec.hostUsers" in named:  # hostNetwork turned on: container ports became host ports
        pod.host_ports = expected.host_ports
    pod.unsupported = ""
    pod.extended = ()
    expected.volumes = PodVolumes(
        expected.volumes.claims, expected.volumes.inline_csi, expected.volumes.ephemeral
    )
    assert pod == expected


@VALID
@given(case=valid_nodes())
def test_valid_node_translates_exactly(case: tuple[Obj, Node]) -> None:
    obj, expected = case
    node = node_from(obj)
    assert node == expected
    check_node(obj, node)


@VALID
@given(case=valid_podgroups())
def test_valid_podgroup_translates_exactly(case: tuple[Obj, GangSpec]) -> None:
    obj, expected = case
    spec = podgroup_from(obj)
    assert spec == expected
    check_gang(obj, spec)


@VALID
@given(case=valid_podgroups())
def test_valid_xk8s_podgroup_keeps_only_its_fields(case: tuple[Obj, GangSpec]) -> None:
    obj, full = case
    obj = {**obj, "apiVersion": "scheduling.x-k8s.io/v1alpha1"}
    spec = xk8s_podgroup_from(obj)
    assert spec == GangSpec(
        full.key,
        full.min_member,
        full.min_resources,
        timeout_seconds=full.timeout_seconds,
        created=full.created,
    )


@VALID
@given(case=valid_volcano_podgroups())
def test_valid_volcano_podgroup_translates_exactly(case: tuple[Obj, GangSpec]) -> None:
    obj, expected = case
    spec = volcano_podgroup_from(obj)
    assert spec == expected
    check_volcano(obj, spec)


@VALID
@given(q=quantities(), name=st.sampled_from(CONTAINER_RESOURCES))
def test_grammar_quantities_are_read_exactly(q: tuple[object, Fraction], name: str) -> None:
    """One container with one grammar-built quantity: the request is its exact value, rounded
    up to the resource's unit; a fractional extended resource is refused."""
    text, value = q
    obj = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {name: text}}}]},
    }
    pod, _ = pod_from(obj)
    want = amount(name, value)
    if (_is_extended(name) and value.denominator != 1) or want > MAX_AMOUNT:
        assert f"spec.containers[c].resources.requests.{name}" in pod.invalid_reason
    else:
        assert pod.invalid_reason == ""
        assert pod.requests == ({name: want} if want else {}) | {"pods": 1}


def test_reference_requests_matches_hand_computed_examples() -> None:
    """The independent reference itself, on the Kubernetes documentation's sidecar example."""
    app = [{"cpu": 1000}]
    init = [({"cpu": 500}, True), ({"cpu": 2000}, False), ({"cpu": 100}, True)]
    assert reference_requests(app, init, {}, {}) == {"cpu": 2500, "pods": 1}
    assert reference_requests(app, init, {"cpu": 10}, {"cpu": 50}) == {"cpu": 60, "pods": 1}
    assert reference_requests([], [], {}, {}) == {"pods": 1}
    assert datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp() == epoch(datetime(2024, 5, 1, 12))
