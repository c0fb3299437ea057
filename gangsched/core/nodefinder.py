"""Finding the best node for one pod: filter, then score.

Candidates come from the cache's indexes: a pod asking for GPUs walks only nodes with enough
free GPUs, tightest first; any other pod walks all nodes from a rotating start. Static filter
verdicts (labels, taints, flags) are cached per (Placement, node) until a node changes, so the
members of a gang, which share one Placement, pay for them once. As in kube-scheduler, the
search stops after ``nodes_to_score`` feasible nodes and the best of those wins; ties go to the
node found first, so placements are deterministic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import FilterPlugin, ScorePlugin, Status
from gangsched.core.model import Placement, Pod
from gangsched.core.resources import GPU

__all__ = ["NodeFinder"]


class NodeFinder:
    def __init__(
        self,
        cache: ClusterCache,
        filters: Sequence[FilterPlugin],
        scorers: Sequence[tuple[ScorePlugin, int]],
        nodes_to_score: int = 100,
    ) -> None:
        self._cache = cache
        self._static = [f for f in filters if f.static]
        self._dynamic = [f for f in filters if not f.static]
        self._scorers = [(s, w) for s, w in scorers if w > 0]
        self._nodes_to_score = max(1, nodes_to_score)
        self._verdicts: dict[Placement, dict[str, Status]] = {}
        self._generation = -1
        self._order: list[str] = []
        self._next_start = 0

    # ---- the hot path ------------------------------------------------------------------
    def find(self, pod: Pod) -> NodeInfo | None:
        """The best feasible node for ``pod`` in the cache as it stands, or None."""
        self._refresh()
        verdicts = self._verdicts.setdefault(pod.placement, {})
        best: NodeInfo | None = None
        best_score = -1.0
        found = 0
        for info in self._candidates(pod):
            if not self._feasible(pod, info, verdicts):
                continue
            found += 1
            if self._scorers:
                score = 0.0
                for plugin, weight in self._scorers:
                    score += weight * plugin.score(pod, info)
            else:
                score = 0.0
            if score > best_score:
                best, best_score = info, score
            if found >= self._nodes_to_score:
                break
        return best

    def diagnose(self, pod: Pod) -> str:
        """Why no node fits, kube-scheduler style: '0/3 nodes are available: 2 Insufficient
        nvidia.com/gpu, 1 node(s) had untolerated taint {k: v}.' Walks every node; call it only
        on failure."""
        self._refresh()
        verdicts = self._verdicts.setdefault(pod.placement, {})
        reasons: Counter[str] = Counter()
        total = 0
        for name in self._order:
            info = self._cache.nodes.get(name)
            if info is None or info.node is None:
                continue
            total += 1
            status = self._static_verdict(pod, info, verdicts)
            if status.ok:
                for f in self._dynamic:
                    status = f.filter(pod, info)
                    if not status.ok:
                        break
            if not status.ok:
                reasons[status.reason] += 1
        if not reasons:
            return f"0/{total} nodes are available."
        parts = ", ".join(
            f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0]))
        )
        return f"0/{total} nodes are available: {parts}."

    # ---- internals ---------------------------------------------------------------------
    def _feasible(self, pod: Pod, info: NodeInfo, verdicts: dict[str, Status]) -> bool:
        status = verdicts.get(info.name)
        if status is None:
            status = self._static_verdict(pod, info, verdicts)
        if not status.ok:
            return False
        for f in self._dynamic:  # noqa: SIM110 - a plain loop is faster on the hot path
            if not f.filter(pod, info).ok:
                return False
        return True

    def _static_verdict(self, pod: Pod, info: NodeInfo, verdicts: dict[str, Status]) -> Status:
        status = verdicts.get(info.name)
        if status is not None:
            return status
        status = Status()
        for f in self._static:
            status = f.filter(pod, info)
            if not status.ok:
                break
        verdicts[info.name] = status
        return status

    def _candidates(self, pod: Pod) -> Iterable[NodeInfo]:
        wanted = pod.placement.node_name
        if wanted:
            info = self._cache.nodes.get(wanted)
            return (info,) if info is not None and info.node is not None else ()
        gpus = pod.requests.get(GPU, 0)
        if gpus > 0:
            return self._cache.gpu_candidates(gpus)
        return self._rotating()

    def _rotating(self) -> Iterable[NodeInfo]:
        order = self._order
        n = len(order)
        if n == 0:
            return
        start = self._next_start % n
        self._next_start = start + 1
        nodes = self._cache.nodes
        for i in range(n):
            info = nodes.get(order[(start + i) % n])
            if info is not None and info.node is not None:
                yield info

    def _refresh(self) -> None:
        gen = self._cache.static_generation
        if gen != self._generation:
            self._generation = gen
            self._verdicts.clear()
            self._order = [n for n, i in self._cache.nodes.items() if i.node is not None]
