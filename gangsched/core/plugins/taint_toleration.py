"""TaintToleration: taints repel pods that do not tolerate them.

Matching follows Kubernetes ``Toleration.ToleratesTaint``: a toleration with an effect
matches only that effect (empty matches every effect); with a key matches only that key
(empty matches every key); operator ``Exists`` ignores the value, ``Equal`` (or empty)
compares it; any other operator matches nothing.
"""

from __future__ import annotations

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.match import (
    NO_EXECUTE,
    NO_SCHEDULE,
    PREFER_NO_SCHEDULE,
    tolerates,
)
from gangsched.core.model import Pod
from gangsched.core.plugins._common import NODE_NOT_FOUND

__all__ = ["TaintToleration", "TaintTolerationScore"]


class TaintToleration:
    """Filter: fails on the first NoSchedule or NoExecute taint the pod does not tolerate."""

    name: str = "TaintToleration"
    static: bool = True

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        n = node.node
        if n is None:
            return NODE_NOT_FOUND
        if not n.taints:
            return SUCCESS
        tolerations = pod.placement.tolerations
        for taint in n.taints:
            if taint.effect not in (NO_SCHEDULE, NO_EXECUTE):
                continue
            if not tolerates(tolerations, taint):
                return Status(
                    Code.UNRESOLVABLE,
                    f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}",
                )
        return SUCCESS


class TaintTolerationScore:
    """Scorer: prefers nodes with fewer PreferNoSchedule taints the pod does not tolerate.

    With ``k`` such taints the score is ``100 / (k + 1)``: 100 for none, 50 for one, 33.3 for
    two, strictly decreasing in ``k`` and always positive. A missing node scores 0.
    """

    name: str = "TaintToleration"

    def __init__(self, cache: ClusterCache | None = None) -> None:
        # with the cache: whether any node has a PreferNoSchedule taint, as of its static
        # generation (none: every node scores 100, whatever the pod)
        self._cache = cache
        self._known: tuple[int, bool] = (-1, True)

    def constant(self, pod: Pod) -> bool:
        cache = self._cache
        if cache is None:
            return False
        gen, preferring = self._known
        if gen != cache.static_generation:
            preferring = any(
                t.effect == PREFER_NO_SCHEDULE
                for info in cache.nodes.values()
                if info.node is not None
                for t in info.node.taints
            )
            self._known = (cache.static_generation, preferring)
        return not preferring

    def score(self, pod: Pod, node: NodeInfo) -> float:
        n = node.node
        if n is None:
            return 0.0
        if not n.taints:
            return 100.0
        tolerations = pod.placement.tolerations
        count = 0
        for taint in n.taints:
            if taint.effect == PREFER_NO_SCHEDULE and not tolerates(tolerations, taint):
                count += 1
        return 100.0 / (count + 1)
