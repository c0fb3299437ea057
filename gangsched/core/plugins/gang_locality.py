"""GangLocality: a gang's members on the nodes that already hold its members."""

from __future__ import annotations

from collections.abc import Mapping
from itertools import islice

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import GangLookup
from gangsched.core.model import Pod

__all__ = ["RECENT", "GangLocality"]

# How many of a gang's nodes, the most recent first, the scorer names.
RECENT = 8


class GangLocality:
    """Scorer: a node holding members of the pod's gang (bound, or reserved earlier in this
    cycle) scores 100, any other node 0; of a gang on many nodes, only the ``RECENT`` (8) nodes
    it came to last (the nodes it is filling). Members that share a node talk over its links
    (NVLink, PCIe, shared memory) rather than the network, and a gang on fewer nodes is hit by
    fewer node failures.

    Scoring by fragmentation alone scatters a gang: each member goes to whichever node its
    own size leaves least fragmented, often a different node per member. With this scorer
    weighted above the fragmentation score, the first member of a gang (and the first after
    its nodes fill) is placed by fragmentation, and the members after it fill that node
    while it has room.

    Every node scores alike (the scorer is not asked) for a pod without a gang, for the
    first member placed, for a gang that declares a task topology (roles affine and
    anti-affine: TaskTopology decides where its members go) and for a pod that says where
    it wants to be itself (pod affinity or anti-affinity, topology spread constraints,
    preferred node affinity): those decide, not this scorer.
    """

    name: str = "GangLocality"

    def __init__(self, cache: ClusterCache, gangs: GangLookup | None = None) -> None:
        self._cache = cache
        self._gangs = gangs

    def constant(self, pod: Pod) -> bool:
        return self.sparse(pod) is None

    def sparse(self, pod: Pod) -> Mapping[str, float] | None:
        """The nodes that score above 0 for ``pod`` and their scores (every other node scores
        0), or None when every node scores alike: the search adds these to the nodes it
        finds without asking the scorer node by node."""
        group = pod.group
        if not group:
            return None
        where = self._cache.gang_nodes.get(group)
        if not where:
            return None
        if pod.spread or pod.pod_affinity or pod.placement.affinity.preferred:
            return None
        if self._gangs is not None:
            spec = self._gangs(group)
            if spec is not None and (spec.topology.affinity or spec.topology.anti_affinity):
                return None
        # (the nodes the gang came to last: the ones it is filling; the older ones are
        # usually full, and naming every node of a gang of thousands would cost each member
        # a walk over them)
        return dict.fromkeys(islice(reversed(where), RECENT), 100.0)

    def score(self, pod: Pod, node: NodeInfo) -> float:
        table = self.sparse(pod)
        return 0.0 if table is None else table.get(node.name, 0.0)
