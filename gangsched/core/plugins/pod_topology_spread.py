"""PodTopologySpread: ``topologySpreadConstraints``, with kube-scheduler v1.36's semantics.

Constraints. A pod's own constraints apply; a pod with none gets the cluster-level defaults
from the configuration (``PluginSettings.default_spread_constraints``, off when empty).
kube-scheduler selects the pods a default constraint counts with the selectors of the
Services, ReplicaSets and StatefulSets that select the incoming pod; gangsched does not watch
those, and defines instead: **a default constraint counts the pods of the incoming pod's
gang** (pods whose ``Pod.group`` equals its own), so default spreading spreads gang-mates. A
plain pod (no gang) gets no default constraints, as a kube-scheduler pod no controller selects
gets none. Constraints with ``DoNotSchedule`` are the Filter's, ``ScheduleAnyway`` the Score's.

Which nodes count. A node counts for a constraint when it has *every* topology key of the
pod's constraints of that kind and passes the constraint's inclusion policies:
``nodeAffinityPolicy: Honor`` (the default) requires the pod's ``nodeSelector`` and required
node affinity to match it, ``nodeTaintsPolicy: Honor`` (default ``Ignore``) requires the pod
to tolerate its NoSchedule and NoExecute taints. Its ``(key, value)`` is then an eligible
domain, even with no pod in it. The pods counted in a domain are the counted pods (bound and
not terminal, or reserved by gangsched: members placed earlier in the same gang cycle
included) on its eligible nodes, in the incoming pod's namespace, not terminating, and
matching the constraint's selector. A constraint whose selector is empty (``{}``) counts no
pod at all, exactly as kube-scheduler v1.36 does (kubernetes/kubernetes#141339, fixed after
v1.36); an absent selector matches nothing.

Filter. On a node without one of the constraints' topology keys: "node(s) didn't match pod
topology spread constraints (missing required label)" (unresolvable). Otherwise, constraint by
constraint, ``count(node's domain) + (1 if the pod matches the selector) - global minimum``
must not exceed ``maxSkew`` ("node(s) didn't match pod topology spread constraints"); the
global minimum is the smallest count over the eligible domains, or 0 when there are fewer
eligible domains than ``minDomains`` (1 when unset).

Score. For a feasible node that has every topology key of the ``ScheduleAnyway``
constraints, the raw score is ``round(sum(count * log(domains + 2) + maxSkew - 1))`` over the
constraints, where ``count`` is the number of counted pods in the node's domain (for a
``kubernetes.io/hostname`` key: on the node itself, whatever its policies) and ``domains``
the number of distinct values among the feasible nodes with every key (for the hostname key:
the number of those nodes). NormalizeScore maps the raw scores to
``100 * (max + min - raw) // max`` (100 for every node when ``max`` is 0), so fewer matching
pods score higher; a feasible node missing a key scores 0. Nodes that lack a key are always
ignored, as kube-scheduler does for non-system-default constraints.

The eligible domains depend only on the nodes and on the pod's placement, so they are
computed once per (constraint keys and policies, node selector and affinity, tolerations)
and reused until a node's labels, taints or flags change; the counts come from the cache's
pod index (the pods the selector selects), never from a walk over every pod.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import (
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    PluginSettings,
    Status,
)
from gangsched.core.labels import selector_matches
from gangsched.core.match import NO_EXECUTE, NO_SCHEDULE, placement_matches, tolerates
from gangsched.core.model import LabelSelector, Node, Placement, Pod, SpreadConstraint
from gangsched.core.plugins._common import NODE_NOT_FOUND

__all__ = [
    "HOSTNAME",
    "MISSING_LABEL",
    "SKEW_MISMATCH",
    "PodTopologySpread",
    "PodTopologySpreadScore",
]

NAME = "PodTopologySpread"
HOSTNAME = "kubernetes.io/hostname"
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"

SKEW_MISMATCH = Status(Code.UNSCHEDULABLE, "node(s) didn't match pod topology spread constraints")
MISSING_LABEL = Status(
    Code.UNRESOLVABLE,
    "node(s) didn't match pod topology spread constraints (missing required label)",
)

_FILTER_KEY = "PreFilter" + NAME
_SCORE_KEY = "PreScore" + NAME
# Distinct (placement, constraints) shapes kept between node changes before starting over.
_MAX_SHAPES = 256


@dataclass(frozen=True, slots=True)
class _Constraint:
    """One constraint as the plugin applies it: a label selector in the pod's namespace, or
    (``gang`` set, for a default constraint) the pods of one gang."""

    max_skew: int
    key: str
    min_domains: int
    honor_affinity: bool
    honor_taints: bool
    selector: LabelSelector | None  # unused when ``gang`` is set
    gang: str = ""

    @property
    def counts_nothing(self) -> bool:
        """kube-scheduler v1.36 counts no pod for an empty selector, and an absent one
        matches none."""
        if self.gang:
            return False
        sel = self.selector
        if sel is None:
            return True
        return not (sel.match_labels or sel.match_expressions)

    def selects(self, labels: Mapping[str, str], group: str) -> bool:
        if self.gang:
            return group == self.gang
        return selector_matches(self.selector, labels)

    def policy(self) -> tuple[str, bool, bool]:
        return (self.key, self.honor_affinity, self.honor_taints)


def _convert(c: SpreadConstraint, gang: str = "") -> _Constraint:
    return _Constraint(
        max_skew=c.max_skew,
        key=c.topology_key,
        min_domains=c.min_domains if c.min_domains is not None else 1,
        honor_affinity=c.node_affinity_policy == HONOR,
        honor_taints=c.node_taints_policy == HONOR,
        selector=c.selector,
        gang=gang,
    )


def _constraints_of(
    pod: Pod, action: str, defaults: Sequence[SpreadConstraint]
) -> tuple[_Constraint, ...]:
    """The pod's constraints with ``whenUnsatisfiable == action``: its own when it has any,
    else the defaults, counting its gang-mates (none for a plain pod)."""
    if pod.spread:
        return tuple(_convert(c) for c in pod.spread if c.when_unsatisfiable == action)
    if not pod.group:
        return ()
    return tuple(_convert(c, pod.group) for c in defaults if c.when_unsatisfiable == action)


def _taints_tolerated(placement: Placement, node: Node) -> bool:
    tolerations = placement.tolerations
    for taint in node.taints:
        if taint.effect in (NO_SCHEDULE, NO_EXECUTE) and not tolerates(tolerations, taint):
            return False
    return True


@dataclass(frozen=True, slots=True)
class _Domains:
    """Per constraint: the eligible nodes' topology values, and how many distinct ones."""

    value_of: tuple[dict[str, str], ...]  # node name -> topology value
    domain_count: tuple[int, ...]


class _DomainCache:
    """Eligible domains per pod shape, valid until a node's static attributes change."""

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._generation = -1
        self._shapes: dict[object, _Domains] = {}

    def get(self, constraints: Sequence[_Constraint], placement: Placement) -> _Domains:
        gen = self._cache.static_generation
        if gen != self._generation:
            self._generation = gen
            self._shapes.clear()
        honor_affinity = any(c.honor_affinity for c in constraints)
        honor_taints = any(c.honor_taints for c in constraints)
        key = (
            tuple(c.policy() for c in constraints),
            (placement.node_selector, placement.affinity.required) if honor_affinity else None,
            placement.tolerations if honor_taints else None,
        )
        domains = self._shapes.get(key)
        if domains is None:
            if len(self._shapes) >= _MAX_SHAPES:
                self._shapes.clear()
            domains = self._build(constraints, placement)
            self._shapes[key] = domains
        return domains

    def _build(self, constraints: Sequence[_Constraint], placement: Placement) -> _Domains:
        keys = tuple({c.key for c in constraints})
        value_of: list[dict[str, str]] = [{} for _ in constraints]
        for name, info in self._cache.nodes.items():
            node = info.node
            if node is None:
                continue
            labels = node.labels
            if not all(k in labels for k in keys):
                continue
            affinity_ok: bool | None = None
            taints_ok: bool | None = None
            for i, c in enumerate(constraints):
                if c.honor_affinity:
                    if affinity_ok is None:
                        affinity_ok = placement_matches(placement, node)
                    if not affinity_ok:
                        continue
                if c.honor_taints:
                    if taints_ok is None:
                        taints_ok = _taints_tolerated(placement, node)
                    if not taints_ok:
                        continue
                value_of[i][name] = labels[c.key]
        return _Domains(
            value_of=tuple(value_of),
            domain_count=tuple(len(set(v.values())) for v in value_of),
        )


def _matching(cache: ClusterCache, c: _Constraint, namespace: str) -> Iterator[str]:
    """Uids of counted, non-terminating pods in ``namespace`` that ``c`` counts."""
    if c.counts_nothing:
        return
    pods = cache.pods
    uids: Iterable[str]
    if c.gang:
        uids = cache.pod_index.by_group.get(c.gang, ())
    else:
        uids = cache.pod_index.select(c.selector, (namespace,))
    for uid in uids:
        pod = pods.get(uid)
        if pod is None or pod.deleting:
            continue
        if c.gang and pod.group != c.gang:
            continue
        yield uid


def _count_by_value(
    cache: ClusterCache, c: _Constraint, namespace: str, value_of: Mapping[str, str]
) -> dict[str, int]:
    counts: dict[str, int] = {}
    for uid in _matching(cache, c, namespace):
        value = value_of.get(cache.node_of(uid))
        if value is not None:
            counts[value] = counts.get(value, 0) + 1
    return counts


def _count_by_node(cache: ClusterCache, c: _Constraint, namespace: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for uid in _matching(cache, c, namespace):
        node = cache.node_of(uid)
        if node:
            counts[node] = counts.get(node, 0) + 1
    return counts


@dataclass(frozen=True, slots=True)
class _FilterState:
    # Per constraint: topology key, pods per domain value, and the most pods a domain may
    # already hold for the node to pass (maxSkew + global minimum - self match).
    checks: tuple[tuple[str, dict[str, int], int], ...]


class PodTopologySpread:
    """Filter on the pod's ``DoNotSchedule`` constraints (or the default ones)."""

    name: str = NAME
    static: bool = False

    def __init__(self, cache: ClusterCache, settings: PluginSettings | None = None) -> None:
        self._cache = cache
        self._defaults = settings.default_spread_constraints if settings is not None else ()
        self._domains = _DomainCache(cache)

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        constraints = _constraints_of(pod, DO_NOT_SCHEDULE, self._defaults)
        if not constraints:
            return SKIP
        cache = self._cache
        domains = self._domains.get(constraints, pod.placement)
        checks: list[tuple[str, dict[str, int], int]] = []
        for i, c in enumerate(constraints):
            counts = _count_by_value(cache, c, pod.namespace, domains.value_of[i])
            n_domains = domains.domain_count[i]
            if n_domains < c.min_domains or len(counts) < n_domains:
                minimum = 0  # too few domains, or some eligible domain holds no pod
            else:
                minimum = min(counts.values())
            self_match = 1 if c.selects(pod.labels, pod.group) else 0
            checks.append((c.key, counts, c.max_skew + minimum - self_match))
        state.write(_FILTER_KEY, _FilterState(tuple(checks)))
        return SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        fs = state.read(_FILTER_KEY)
        if not isinstance(fs, _FilterState):
            return SUCCESS
        labels = n.labels
        for key, counts, limit in fs.checks:
            value = labels.get(key)
            if value is None:
                return MISSING_LABEL
            if counts.get(value, 0) > limit:
                return SKEW_MISMATCH
        return SUCCESS


class _ScoreState:
    __slots__ = ("by_node", "constraints", "counts", "nodes")

    def __init__(self, constraints: tuple[_Constraint, ...], counts: list[dict[str, int]]) -> None:
        self.constraints = constraints
        # Per constraint: pods per domain value, or per node name for the hostname key.
        self.counts = counts
        self.by_node = tuple(c.key == HOSTNAME for c in constraints)
        self.nodes: list[NodeInfo] = []  # the feasible nodes, in the order they were scored


def _go_round(x: float) -> int:
    """Go's math.Round: half away from zero."""
    f = math.floor(x)
    diff = x - f
    if x >= 0:
        return int(f) + (1 if diff >= 0.5 else 0)
    return int(f) + (1 if diff > 0.5 else 0)


class PodTopologySpreadScore:
    """Scorer on the pod's ``ScheduleAnyway`` constraints (or the default ones): nodes in
    domains with fewer matching pods score higher.

    kube-scheduler's PreScore sees the feasible nodes before Score, and the weight of each
    constraint (``log(domains + 2)``) is counted over them. Here the feasible nodes are known
    only once all have been scored, so ``raw_score`` records each node and ``normalize``
    computes the raw scores, with their weights, and normalizes them."""

    name: str = NAME

    def __init__(self, cache: ClusterCache, settings: PluginSettings | None = None) -> None:
        self._cache = cache
        self._defaults = settings.default_spread_constraints if settings is not None else ()
        self._domains = _DomainCache(cache)

    def pre_score(self, pod: Pod, state: CycleState) -> Status:
        constraints = _constraints_of(pod, SCHEDULE_ANYWAY, self._defaults)
        if not constraints:
            return SKIP
        cache = self._cache
        domains = self._domains.get(constraints, pod.placement)
        counts: list[dict[str, int]] = []
        for i, c in enumerate(constraints):
            if c.key == HOSTNAME:
                counts.append(_count_by_node(cache, c, pod.namespace))
            else:
                counts.append(_count_by_value(cache, c, pod.namespace, domains.value_of[i]))
        state.write(_SCORE_KEY, _ScoreState(constraints, counts))
        return SUCCESS

    def raw_score(self, pod: Pod, node: NodeInfo, state: CycleState) -> float:
        st = state.read(_SCORE_KEY)
        if isinstance(st, _ScoreState):
            st.nodes.append(node)
        return 0.0

    def normalize(self, scores: list[float], state: CycleState) -> None:
        st = state.read(_SCORE_KEY)
        if not isinstance(st, _ScoreState) or not scores:
            return
        nodes, st.nodes = st.nodes, []
        if len(nodes) != len(scores):
            raise ValueError(
                f"{NAME}: {len(scores)} scores to normalize, {len(nodes)} nodes scored"
            )
        constraints = st.constraints
        keys = tuple({c.key for c in constraints})
        considered: list[Node | None] = []
        for info in nodes:
            n = info.node
            if n is None or not all(k in n.labels for k in keys):
                considered.append(None)  # ignored: scores 0
            else:
                considered.append(n)
        kept = [n for n in considered if n is not None]
        weights = []
        for c in constraints:
            size = len(kept) if c.key == HOSTNAME else len({n.labels[c.key] for n in kept})
            weights.append(math.log(size + 2))

        raw: list[int | None] = []
        for n in considered:
            if n is None:
                raw.append(None)
                continue
            total = 0.0
            for i, c in enumerate(constraints):
                where = n.name if st.by_node[i] else n.labels[c.key]
                total += st.counts[i].get(where, 0) * weights[i] + (c.max_skew - 1)
            raw.append(_go_round(total))

        values = [r for r in raw if r is not None]
        low = min(values, default=0)
        high = max(values, default=0)
        for i, r in enumerate(raw):
            if r is None:
                scores[i] = 0.0
            elif high <= 0:
                scores[i] = 100.0
            else:
                scores[i] = float(100 * (high + low - r) // high)
