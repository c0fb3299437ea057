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

__all__ = ["DynamicResources", "dra_only"]


def dra_only(cache: ClusterCache, pod: Pod) -> str:
    """Why the pod cannot be placed when it asks for an extended resource that no ready node
    offers as allocatable but a DeviceClass serves through DRA (``spec.extendedResourceName``,
    KEP-5004): kube-scheduler would allocate a claim for it, which gangsched does not do yet.
    '' otherwise."""
    for resource in pod.requests:
        if "/" not in resource or cache.total_allocatable.get(resource, 0) > 0:
            continue
        cls = cache.resource_claims.extended(resource)
        if cls:
            return (
                f"{resource} is served on this cluster only through Dynamic Resource Allocation "
                f"(DeviceClass {cls}, spec.extendedResourceName); DRA extended resources are "
                "not supported by gangsched yet: ask for the devices with spec.resourceClaims"
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
        if self._catalog.classes:
            why = dra_only(self._cache, pod)
            if why:
                return Status(Code.UNRESOLVABLE, why)
        if not pod.resource_claims and not pod.claims_waiting:
            return SKIP
        why = self._catalog.why_not(pod)
        return Status(Code.UNRESOLVABLE, why) if why else SUCCESS

    def filter_with(self, pod: Pod, node: NodeInfo, state: CycleState) -> Status:
        why = self._catalog.fits(pod, node.name)
        return Status(Code.UNSCHEDULABLE, why) if why else SUCCESS
