"""Task topology within a gang (Volcano's task-topology "bucket" plugin).

A gang's spec names roles that should share nodes (``affinity: [[ps, worker]]``; a group of
one role means the role is affine to itself) and roles that should not
(``antiAffinity: [[ps]]``). A role that is both affine and anti-affine to the same role is in
conflict and takes part in no bucket.

Two parts, both soft (they order and score; they never make a node infeasible):

- ``bucket_order``: the gang's pending members are placed bucket by bucket, each bucket one
  member of the scarcest affine role with its share of the other affine roles
  (ps1, w1, w2, ps2, w3, w4, ...); members in no bucket come last.
- ``TaskTopology`` score: a node scores higher for each gang-mate of an affine role already on
  it (placed earlier in this cycle or bound before) and lower for each of an anti-affine role.
  50 is neutral; only pods of gangs with a topology are affected.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.model import GangSpec, Pod, TopologySpec

__all__ = ["TaskTopology", "bucket_order", "relations"]

GangLookup = Callable[[str], GangSpec | None]


def _pairs(groups: tuple[tuple[str, ...], ...]) -> set[tuple[str, str]]:
    out: set[tuple[str, str]] = set()
    for roles in groups:
        if len(roles) == 1:
            out.add((roles[0], roles[0]))
        out.update((a, b) for a in roles for b in roles if a != b)
    return out


def relations(topo: TopologySpec) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(affine, anti) maps: role -> roles it should share nodes with / avoid. A pair that is
    both affine and anti-affine is a conflict and is dropped from both."""
    near, far = _pairs(topo.affinity), _pairs(topo.anti_affinity)
    clash = near & far
    affine: dict[str, set[str]] = defaultdict(set)
    anti: dict[str, set[str]] = defaultdict(set)
    for a, b in near - clash:
        affine[a].add(b)
    for a, b in far - clash:
        anti[a].add(b)
    return dict(affine), dict(anti)


def _conflicted(topo: TopologySpec) -> set[str]:
    """Roles in a conflicting pair: they take part in no bucket."""
    clash = _pairs(topo.affinity) & _pairs(topo.anti_affinity)
    return {r for pair in clash for r in pair}


def bucket_order(spec: GangSpec | None, pods: Sequence[Pod]) -> list[Pod]:
    """Pending members in bucket order (see the module docstring)."""
    if spec is None or not spec.topology.affinity:
        return list(pods)
    conflicted = _conflicted(spec.topology)
    by_role: dict[str, list[Pod]] = defaultdict(list)
    for p in pods:
        by_role[p.role].append(p)
    placed: set[str] = set()
    out: list[Pod] = []
    for group in spec.topology.affinity:
        roles = [r for r in dict.fromkeys(group) if r in by_role and r not in conflicted]
        roles = [r for r in roles if all(p.uid not in placed for p in by_role[r])]
        if not roles:
            continue
        buckets = max(1, min(len(by_role[r]) for r in roles))
        rows: list[list[Pod]] = [[] for _ in range(buckets)]
        for r in roles:
            members = by_role[r]
            for i, p in enumerate(members):
                rows[i * buckets // len(members)].append(p)
        for row in rows:
            out.extend(row)
            placed.update(p.uid for p in row)
    out.extend(p for p in pods if p.uid not in placed)
    return out


class TaskTopology:
    name = "TaskTopology"

    def __init__(self, cache: ClusterCache, gang: GangLookup) -> None:
        self._cache = cache
        self._gang = gang
        self._relations: dict[TopologySpec, tuple[dict[str, set[str]], dict[str, set[str]]]] = {}

    def constant(self, pod: Pod) -> bool:
        if not pod.group or not pod.role:
            return True
        spec = self._gang(pod.group)
        return spec is None or not (spec.topology.affinity or spec.topology.anti_affinity)

    def score(self, pod: Pod, node: NodeInfo) -> float:
        if not pod.group or not pod.role:
            return 0.0
        spec = self._gang(pod.group)
        if spec is None or not (spec.topology.affinity or spec.topology.anti_affinity):
            return 0.0
        rel = self._relations.get(spec.topology)
        if rel is None:
            rel = self._relations[spec.topology] = relations(spec.topology)
        affine = rel[0].get(pod.role, set())
        anti = rel[1].get(pod.role, set())
        if not affine and not anti:
            return 50.0
        near = far = 0
        pods = self._cache.pods
        for uid in node.pods:
            mate = pods.get(uid)
            if mate is None or mate.group != pod.group or mate.uid == pod.uid:
                continue
            if mate.role in affine:
                near += 1
            if mate.role in anti:
                far += 1
        return 50.0 + 50.0 * (near - far) / (near + far + 1)
