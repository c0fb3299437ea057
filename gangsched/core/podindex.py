"""Indexes over the pods counted on nodes, for the plugins that look at other pods.

``PodIndex`` finds the counted pods a (namespaces, selector) pair selects without walking
every pod: a selector's most selective positive requirement (a label pair, or a key that must
exist) picks a candidate set, and only those candidates are checked in full.

``TermIndex`` holds the inter-pod affinity terms of counted pods (for symmetry: an existing
pod's required anti-affinity repels an incoming pod; existing pods' affinity terms count when
scoring). Each term is filed under one anchor of its selector, so the terms that may select an
incoming pod are found from the incoming pod's own labels.

Both are kept by the cluster cache on every count change (bind, assume, forget, delete), so
what a cycle reserved is visible to the next member of the gang at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypeVar

from gangsched.core.labels import NamespaceLabels, selector_matches, term_selects
from gangsched.core.model import LabelSelector, Pod, PodAffinity, PodAffinityTerm

__all__ = ["PodIndex", "TermEntry", "TermIndex", "TermKind"]

Anchor = tuple[str, ...]
K = TypeVar("K")


def _anchor(selector: LabelSelector) -> Anchor:
    """("L", key, value): the label pair every selected pod has; ("K", key): a key every
    selected pod has; ("*",): nothing narrower."""
    for key, value in selector.match_labels:
        return ("L", key, value)
    for req in selector.match_expressions:
        if req.operator == "In" and len(req.values) == 1:
            return ("L", req.key, req.values[0])
    for req in selector.match_expressions:
        if (req.operator == "In" and req.values) or (req.operator == "Exists" and not req.values):
            return ("K", req.key)
    return ("*",)


class PodIndex:
    """Counted pods by namespace, gang, label pair and label key."""

    def __init__(self) -> None:
        self.by_namespace: dict[str, dict[str, None]] = {}
        self.by_group: dict[str, dict[str, None]] = {}  # gang key -> counted members
        self._by_pair: dict[tuple[str, str], set[str]] = {}
        self._by_key: dict[str, set[str]] = {}
        self._labels: dict[str, tuple[str, Mapping[str, str]]] = {}
        self._group: dict[str, str] = {}

    def __contains__(self, uid: str) -> bool:
        return uid in self._labels

    def labels_of(self, uid: str) -> Mapping[str, str] | None:
        entry = self._labels.get(uid)
        return entry[1] if entry is not None else None

    def add(self, pod: Pod) -> None:
        self.remove(pod.uid)
        labels = dict(pod.labels)
        self._labels[pod.uid] = (pod.namespace, labels)
        self.by_namespace.setdefault(pod.namespace, {})[pod.uid] = None
        if pod.group:
            self._group[pod.uid] = pod.group
            self.by_group.setdefault(pod.group, {})[pod.uid] = None
        for pair in labels.items():
            self._by_pair.setdefault(pair, set()).add(pod.uid)
            self._by_key.setdefault(pair[0], set()).add(pod.uid)

    def remove(self, uid: str) -> None:
        entry = self._labels.pop(uid, None)
        if entry is None:
            return
        ns, labels = entry
        pods = self.by_namespace[ns]
        del pods[uid]
        if not pods:
            del self.by_namespace[ns]
        group = self._group.pop(uid, None)
        if group is not None:
            members = self.by_group[group]
            del members[uid]
            if not members:
                del self.by_group[group]
        for pair in labels.items():
            _discard(self._by_pair, pair, uid)
            _discard(self._by_key, pair[0], uid)

    def select(
        self,
        selector: LabelSelector | None,
        namespaces: Iterable[str] | None,
    ) -> Iterator[str]:
        """Uids of counted pods in ``namespaces`` (None: any namespace) whose labels match
        ``selector``."""
        if selector is None:
            return
        allowed = None if namespaces is None else frozenset(namespaces)
        anchor = _anchor(selector)
        candidates: Iterable[str]
        if anchor[0] == "L":
            candidates = self._by_pair.get((anchor[1], anchor[2]), ())
        elif anchor[0] == "K":
            candidates = self._by_key.get(anchor[1], ())
        elif allowed is not None:
            candidates = (u for ns in allowed for u in self.by_namespace.get(ns, ()))
        else:
            candidates = self._labels
        for uid in candidates:
            ns, labels = self._labels[uid]
            if allowed is not None and ns not in allowed:
                continue
            if selector_matches(selector, labels):
                yield uid

    def select_term(
        self, term: PodAffinityTerm, namespace_labels: NamespaceLabels
    ) -> Iterator[str]:
        """Uids of counted pods an affinity term selects."""
        if term.selector is None:
            return
        sel = term.namespace_selector
        if sel is None:
            yield from self.select(term.selector, term.namespaces)
            return
        for uid in self.select(term.selector, None):
            ns, labels = self._labels[uid]
            if term_selects(term, ns, labels, namespace_labels):
                yield uid


class TermKind:
    REQUIRED_AFFINITY = "required-affinity"
    REQUIRED_ANTI = "required-anti"
    PREFERRED_AFFINITY = "preferred-affinity"
    PREFERRED_ANTI = "preferred-anti"


@dataclass(frozen=True, slots=True)
class TermEntry:
    uid: str  # the counted pod that carries the term
    kind: str  # a TermKind
    term: PodAffinityTerm
    weight: int = 0
    position: int = 0  # the term's place in the pod's spec: equal terms stay distinct


def _entries(uid: str, aff: PodAffinity) -> list[TermEntry]:
    out = [(TermKind.REQUIRED_AFFINITY, t, 0) for t in aff.required]
    out += [(TermKind.REQUIRED_ANTI, t, 0) for t in aff.required_anti]
    out += [(TermKind.PREFERRED_AFFINITY, w.term, w.weight) for w in aff.preferred]
    out += [(TermKind.PREFERRED_ANTI, w.term, w.weight) for w in aff.preferred_anti]
    return [
        TermEntry(uid, kind, term, weight, i)
        for i, (kind, term, weight) in enumerate(out)
        if term.selector is not None
    ]


class TermIndex:
    """The affinity terms of counted pods, filed by selector anchor."""

    def __init__(self) -> None:
        self._by_anchor: dict[Anchor, dict[TermEntry, None]] = {}
        self._of_pod: dict[str, list[tuple[Anchor, TermEntry]]] = {}
        self.required_anti_count = 0  # counted pods' required anti-affinity terms
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def affinity_of(self, uid: str) -> bool:
        return uid in self._of_pod

    def add(self, pod: Pod) -> None:
        self.remove(pod.uid)
        if not pod.pod_affinity:
            return
        filed: list[tuple[Anchor, TermEntry]] = []
        for entry in _entries(pod.uid, pod.pod_affinity):
            assert entry.term.selector is not None
            anchor = _anchor(entry.term.selector)
            self._by_anchor.setdefault(anchor, {})[entry] = None
            filed.append((anchor, entry))
            if entry.kind == TermKind.REQUIRED_ANTI:
                self.required_anti_count += 1
        if filed:
            self._of_pod[pod.uid] = filed
            self.count += len(filed)

    def remove(self, uid: str) -> None:
        filed = self._of_pod.pop(uid, None)
        if filed is None:
            return
        self.count -= len(filed)
        for anchor, entry in filed:
            bucket = self._by_anchor[anchor]
            del bucket[entry]
            if not bucket:
                del self._by_anchor[anchor]
            if entry.kind == TermKind.REQUIRED_ANTI:
                self.required_anti_count -= 1

    def selecting(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: NamespaceLabels
    ) -> Iterator[TermEntry]:
        """Terms of counted pods that select a pod in ``namespace`` with ``labels``."""
        if not self.count:
            return
        buckets: list[dict[TermEntry, None]] = []
        by_anchor = self._by_anchor
        for key, value in labels.items():
            b = by_anchor.get(("L", key, value))
            if b:
                buckets.append(b)
            b = by_anchor.get(("K", key))
            if b:
                buckets.append(b)
        b = by_anchor.get(("*",))
        if b:
            buckets.append(b)
        for bucket in buckets:
            for entry in bucket:
                if term_selects(entry.term, namespace, labels, namespace_labels):
                    yield entry


def _discard(index: dict[K, set[str]], key: K, uid: str) -> None:
    s = index.get(key)
    if s is not None:
        s.discard(uid)
        if not s:
            del index[key]
