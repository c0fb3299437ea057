"""InterPodAffinity: required and preferred pod affinity and anti-affinity, with
kube-scheduler's semantics.

Filter. PreFilter computes, once per pod, three sets of topology pairs ``(key, value)`` from
the cluster cache's indexes (never by walking every pod or node):

- the pairs where a counted pod whose *required anti-affinity* term selects the incoming pod
  runs (symmetry: ``(term.topologyKey, that pod's node's value)``);
- per required anti-affinity term of the incoming pod, the pairs where a counted pod the
  term selects runs;
- for the incoming pod's required affinity, the pairs where a counted pod that matches *all*
  of its affinity terms runs, one pair per term.

A pod on a node without the term's topology key contributes no pair. A node then fails, in
this order:

1. "node(s) didn't match pod affinity rules" (unresolvable) when it lacks a topology key of
   a required affinity term, or when some term's pair on it holds no matching pod. The
   first-pod rule: when no pair was found anywhere and the pod matches all of its own
   affinity terms, a node with every topology key passes;
2. "node(s) didn't match pod anti-affinity rules" when one of the pod's required
   anti-affinity terms' pairs on the node holds a pod the pod's terms select;
3. "node(s) didn't satisfy existing pods anti-affinity rules" when the node carries one of
   the pairs existing pods' anti-affinity forbids.

PreFilter returns SKIP when the pod has no required terms and no existing term forbids any
pair.

Score. PreScore accumulates a weight per topology pair: for every counted pod that matches
one of the incoming pod's preferred affinity (anti-affinity) terms, plus (minus) the term's
weight on the pair of the pod's node; for every term of a counted pod that selects the
incoming pod, ``hard_pod_affinity_weight`` for a required affinity term, plus the weight of
a preferred affinity term, minus that of a preferred anti-affinity term. A node's raw score
is the sum over topology keys of the weight of its pair; NormalizeScore maps raw scores
linearly from [min, max] to [0, 100], truncating like kube-scheduler's integer scores, and
gives every node 0 when all raw scores are equal.

Counted pods are those bound and not terminal, or reserved by gangsched (members placed
earlier in the same gang cycle included). A term with no label selector selects nothing; a
namespace selector is matched against the namespace's labels (an empty one selects every
namespace).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import (
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    PluginSettings,
    Status,
)
from gangsched.core.labels import term_selects
from gangsched.core.model import Pod, PodAffinityTerm
from gangsched.core.plugins._common import NODE_NOT_FOUND
from gangsched.core.podindex import TermEntry, TermKind

__all__ = ["InterPodAffinity", "InterPodAffinityScore"]

NAME = "InterPodAffinity"
_FILTER_KEY = "PreFilter" + NAME
_SCORE_KEY = "PreScore" + NAME
# The counted pods' terms that select the incoming pod, found once by PreFilter and reused by
# PreScore in the same cycle.
_SELECTING_KEY = NAME + "/selecting"

AFFINITY_MISMATCH = Status(Code.UNRESOLVABLE, "node(s) didn't match pod affinity rules")
ANTI_AFFINITY_MISMATCH = Status(Code.UNSCHEDULABLE, "node(s) didn't match pod anti-affinity rules")
EXISTING_ANTI_AFFINITY_MISMATCH = Status(
    Code.UNSCHEDULABLE, "node(s) didn't satisfy existing pods anti-affinity rules"
)

Pair = tuple[str, str]


def _node_labels(cache: ClusterCache, uid: str) -> Mapping[str, str] | None:
    """Labels of the node a counted pod runs on; None when the Node object is unknown."""
    name = cache.node_of(uid)
    if not name:
        return None
    info = cache.nodes.get(name)
    if info is None or info.node is None:
        return None
    return info.node.labels


def _selecting(cache: ClusterCache, pod: Pod, state: CycleState) -> list[TermEntry]:
    """Terms of counted pods (other than ``pod``) that select ``pod``."""
    found = state.read(_SELECTING_KEY)
    if isinstance(found, list):
        return found
    entries: list[TermEntry] = []
    if len(cache.term_index):
        uid = pod.uid
        entries = [
            e
            for e in cache.term_index.selecting(pod.namespace, pod.labels, cache.namespace_labels)
            if e.uid != uid
        ]
    state.write(_SELECTING_KEY, entries)
    return entries


def _selected(cache: ClusterCache, term: PodAffinityTerm, pod: Pod) -> Iterable[str]:
    """Uids of counted pods other than ``pod`` that ``term`` selects."""
    uid = pod.uid
    for other in cache.pod_index.select_term(term, cache.namespace_labels):
        if other != uid:
            yield other


def _matches_all(
    cache: ClusterCache,
    terms: tuple[PodAffinityTerm, ...],
    namespace: str,
    labels: Mapping[str, str],
) -> bool:
    """Whether a pod in ``namespace`` with ``labels`` is selected by every term (and there is
    at least one)."""
    if not terms:
        return False
    ns_labels = cache.namespace_labels
    return all(term_selects(t, namespace, labels, ns_labels) for t in terms)


class _FilterState:
    __slots__ = (
        "affinity_keys",
        "affinity_pairs",
        "anti_keys",
        "anti_pairs",
        "first_pod",
        "forbidden",
    )

    def __init__(self) -> None:
        # Required affinity: the distinct topology keys, the pairs holding a pod that matches
        # every term, and whether the first-pod rule applies.
        self.affinity_keys: tuple[str, ...] = ()
        self.affinity_pairs: set[Pair] = set()
        self.first_pod = False
        # The pod's own required anti-affinity.
        self.anti_keys: tuple[str, ...] = ()
        self.anti_pairs: set[Pair] = set()
        # Existing pods' required anti-affinity: topology key -> values the pod may not join.
        self.forbidden: dict[str, set[str]] = {}


class InterPodAffinity:
    """Filter on required pod affinity and anti-affinity, the incoming pod's and (for
    anti-affinity) the counted pods'."""

    name: str = NAME
    static: bool = False

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        cache = self._cache
        aff = pod.pod_affinity
        required = aff.required
        required_anti = aff.required_anti
        fs = _FilterState()

        if cache.term_index.required_anti_count:
            forbidden = fs.forbidden
            for entry in _selecting(cache, pod, state):
                if entry.kind != TermKind.REQUIRED_ANTI:
                    continue
                labels = _node_labels(cache, entry.uid)
                if labels is None:
                    continue
                key = entry.term.topology_key
                value = labels.get(key)
                if value is not None:
                    forbidden.setdefault(key, set()).add(value)

        if not required and not required_anti and not fs.forbidden:
            return SKIP

        if required_anti:
            fs.anti_keys = tuple(dict.fromkeys(t.topology_key for t in required_anti))
            pairs = fs.anti_pairs
            for term in required_anti:
                key = term.topology_key
                for uid in _selected(cache, term, pod):
                    labels = _node_labels(cache, uid)
                    if labels is not None:
                        value = labels.get(key)
                        if value is not None:
                            pairs.add((key, value))

        if required:
            fs.affinity_keys = tuple(dict.fromkeys(t.topology_key for t in required))
            pairs = fs.affinity_pairs
            first, rest = required[0], required[1:]
            pods = cache.pods
            for uid in _selected(cache, first, pod):
                if rest:
                    other = pods.get(uid)
                    if other is None or not _matches_all(
                        cache, rest, other.namespace, other.labels
                    ):
                        continue
                labels = _node_labels(cache, uid)
                if labels is None:
                    continue
                for term in required:
                    value = labels.get(term.topology_key)
                    if value is not None:
                        pairs.add((term.topology_key, value))
            fs.first_pod = not pairs and _matches_all(cache, required, pod.namespace, pod.labels)

        state.write(_FILTER_KEY, fs)
        return SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        fs = state.read(_FILTER_KEY)
        if not isinstance(fs, _FilterState):
            return SUCCESS
        labels = n.labels
        if fs.affinity_keys:
            found = True
            pairs = fs.affinity_pairs
            for key in fs.affinity_keys:
                value = labels.get(key)
                if value is None:
                    return AFFINITY_MISMATCH
                if (key, value) not in pairs:
                    found = False
            if not found and not fs.first_pod:
                return AFFINITY_MISMATCH
        if fs.anti_pairs:
            pairs = fs.anti_pairs
            for key in fs.anti_keys:
                value = labels.get(key)
                if value is not None and (key, value) in pairs:
                    return ANTI_AFFINITY_MISMATCH
        for key, values in fs.forbidden.items():
            value = labels.get(key)
            if value is not None and value in values:
                return EXISTING_ANTI_AFFINITY_MISMATCH
        return SUCCESS


class InterPodAffinityScore:
    """Scorer on preferred pod affinity and anti-affinity, the incoming pod's and the counted
    pods' (whose required affinity terms count ``hard_pod_affinity_weight``)."""

    name: str = NAME

    def __init__(self, cache: ClusterCache, settings: PluginSettings) -> None:
        self._cache = cache
        self._hard_weight = settings.hard_pod_affinity_weight

    def pre_score(self, pod: Pod, state: CycleState) -> Status:
        cache = self._cache
        aff = pod.pod_affinity
        preferred = aff.preferred
        preferred_anti = aff.preferred_anti
        entries = _selecting(cache, pod, state)
        if not preferred and not preferred_anti and not entries:
            return SKIP

        scores: dict[str, dict[str, int]] = {}
        contributed = False

        def add(labels: Mapping[str, str], key: str, weight: int) -> None:
            nonlocal contributed
            value = labels.get(key)
            if value is None:
                return
            contributed = True
            by_value = scores.get(key)
            if by_value is None:
                by_value = scores[key] = {}
            by_value[value] = by_value.get(value, 0) + weight

        for sign, weighted in ((1, preferred), (-1, preferred_anti)):
            for wt in weighted:
                key = wt.term.topology_key
                for uid in _selected(cache, wt.term, pod):
                    labels = _node_labels(cache, uid)
                    if labels is not None:
                        add(labels, key, sign * wt.weight)

        hard = self._hard_weight
        for entry in entries:
            kind = entry.kind
            if kind == TermKind.REQUIRED_AFFINITY:
                if hard <= 0:
                    continue
                weight = hard
            elif kind == TermKind.PREFERRED_AFFINITY:
                weight = entry.weight
            elif kind == TermKind.PREFERRED_ANTI:
                weight = -entry.weight
            else:
                continue
            labels = _node_labels(cache, entry.uid)
            if labels is not None:
                add(labels, entry.term.topology_key, weight)

        if not contributed:
            return SKIP
        state.write(_SCORE_KEY, scores)
        return SUCCESS

    def raw_score(self, pod: Pod, node: NodeInfo, state: CycleState) -> float:
        n = node.node
        scores = state.read(_SCORE_KEY)
        if n is None or not isinstance(scores, dict):
            return 0.0
        labels = n.labels
        total = 0
        for key, by_value in scores.items():
            value = labels.get(key)
            if value is not None:
                total += by_value.get(value, 0)
        return float(total)

    def normalize(self, scores: list[float], state: CycleState) -> None:
        if not scores:
            return
        low = min(scores)
        spread = max(scores) - low
        for i, raw in enumerate(scores):
            scores[i] = float(int(100.0 * (raw - low) / spread)) if spread > 0 else 0.0
