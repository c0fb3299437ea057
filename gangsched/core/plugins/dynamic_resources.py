"""DynamicResources: a pod's resource claims (Dynamic Resource Allocation) can be served by the
node's devices, together with the claims of the pods already reserved there in this gang
cycle (core/claimstate.py; the search is core/claimalloc.py's).

PreFilter returns SKIP for a pod without claims, so the Filter costs nothing for others. A claim
allocated already (by this scheduler or another) serves only its node; a claim that does not
exist yet (the resourceclaim controller makes claims from templates) keeps the pod off every
node, saying so.
"""

from __future__ import annotations

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import SKIP, SUCCESS, Code, CycleState, Status
from gangsched.core.model import Pod

__all__ = ["DynamicResources", "dra_note"]


def dra_note(cache: ClusterCache, pod: Pod) -> str:
    """What to add when the pod is short of an extended resource that a DeviceClass also
    serves through Dynamic Resource Allocation (``spec.extendedResourceName``, KEP-5004) while
    some ready node offers it as allocatable: the pod is placed on those nodes, and asks for it
    through a claim only once none does (core/extended.py). '' otherwise."""
    for resource in pod.requests:
        if "/" not in resource or cache.total_allocatable.get(resource, 0) <= 0:
            continue
        cls = cache.resource_claims.extended(resource)
        if cls:
            return (
                f"DeviceClass {cls} also serves {resource} through Dynamic Resource "
                f"Allocation; gangsched asks for it through a claim only once no ready node "
                "offers it as allocatable"
            )
    return ""


class DynamicResources:
    """Filter: the pod's resource claims can be allocated on the node."""

    name: str = "DynamicResources"
    static: bool = False

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._catalog = cache.resource_claims

    def pre_filter(self, pod: Pod, state: CycleState) -> Status:
        if not pod.resource_claims and not pod.claims_waiting:
            return SKIP
        why = self._catalog.why_not(pod)
        return Status(Code.UNRESOLVABLE, why) if why else SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        why = self._catalog.fits(pod, node.name)
        return Status(Code.UNSCHEDULABLE, why) if why else SUCCESS
