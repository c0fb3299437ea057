"""DRA extended resources (KEP-5004, beta and on by default in Kubernetes 1.36): a pod asking
for an extended resource (``nvidia.com/gpu: 8``) that a DeviceClass serves gets its devices
through a ResourceClaim the scheduler makes for it, as kube-scheduler's DynamicResources plugin
does.

A DeviceClass serves the resource its ``spec.extendedResourceName`` names (of several
classes naming one, the newest) and always ``deviceclass.resource.kubernetes.io/<class>``.
kube-scheduler uses such a class on each node that does not offer the resource as allocatable
(no device plugin serves it there). gangsched decides it for the cluster: a resource a class
serves is asked through a claim when no ready node offers it as allocatable, and counted as
before otherwise (a cluster moving from a device plugin to a DRA driver places such pods on
the device plugin's nodes until none offers the resource; docs/dra.md).

For each pod that asks such a resource the core turns the request into a claim:

- its ``requests`` leave the resource out (``requests_asked`` keeps them as asked), so no
  node filter or GPU count sees it;
- ``resource_claims`` gains the claim (``extended_key``): the one made in the API for the pod
  when the watch shows it (annotated ``resource.kubernetes.io/extended-resource-claim``,
  controlled by the pod: one a crash left, or kube-scheduler made), else, for a pod this
  scheduler places, one the core makes (``Claim.unwritten``), with kube-scheduler's request
  layout (api/extended.py); it is allocated with the gang's other claims and created in the
  API, allocated and reserved, before the pod binds, and the pod's
  ``status.extendedResourceClaimStatus`` names it (kube/write/claims.py).

The decision is made again whenever the pod, a DeviceClass, or whether a ready node offers
the resource changes.
"""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.cache import ClusterCache
from gangsched.core.model import Pod
from gangsched.core.resourceclaims import Claim, DeviceRequest, ExactRequest

__all__ = ["ExtendedResources"]

# the name of a claim the core makes for a pod: its generateName (never a claim's name: a
# name cannot end with "-")
SUFFIX = "-extended-resources-"


class ExtendedResources:
    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._catalog = cache.resource_claims
        # pods that ask for an extended resource a class could serve: uid -> those resources
        self.asking: dict[str, tuple[str, ...]] = {}
        self._resources: dict[str, int] = {}  # resource -> how many of those pods ask it

    def served(self, resource: str) -> str:
        """The DeviceClass that serves ``resource`` for pods now, '' when none does (no class
        names it, or some ready node offers it as allocatable)."""
        if self._cache.total_allocatable.get(resource, 0) > 0:
            return ""
        return self._catalog.extended(resource)

    def state(self) -> tuple[tuple[str, str], ...]:
        """Which class serves each resource the pods ask for: when it changes, their claims
        change."""
        return tuple((r, self.served(r)) for r in sorted(self._resources))

    def _ask(self, uid: str, resources: tuple[str, ...]) -> None:
        old = self.asking.pop(uid, ())
        if old == resources:
            if resources:
                self.asking[uid] = resources
            return
        for r in old:
            self._resources[r] -= 1
            if not self._resources[r]:
                del self._resources[r]
        if resources:
            self.asking[uid] = resources
            for r in resources:
                self._resources[r] = self._resources.get(r, 0) + 1

    def apply(self, pod: Pod, ours: bool) -> Pod:
        """The pod as the core schedules and counts it: the extended resources a class serves
        asked through a claim. ``ours``: this scheduler places the pod (it may make the claim).
        Applying it again (to the pod it returned) gives the same pod."""
        self._ask(pod.uid, tuple(a.resource for a in pod.extended))
        if not pod.extended:
            return pod
        asked = pod.requests_asked if pod.requests_asked is not None else pod.requests
        claims = tuple(k for k in pod.resource_claims if k != pod.extended_key)
        served = {
            a.resource: cls
            for a in pod.extended
            if asked.get(a.resource, 0) > 0 and (cls := self.served(a.resource))
        }
        catalog = self._catalog
        if not served:
            self._release(pod.uid)
            if pod.requests_asked is None:
                return pod
            return replace(
                pod,
                requests=dict(asked),
                resource_claims=claims,
                extended_key="",
                requests_asked=None,
            )
        asks = [a for a in pod.extended if a.resource in served]
        catalog.map_requests(
            pod.uid, tuple((c, a.resource, r) for a in asks for c, r in a.mappings)
        )
        key = catalog.owned(pod.uid)
        if not key and pod.node_name and pod.extended_claim:
            key = f"{pod.namespace}/{pod.extended_claim}"
        if not key and ours and not pod.node_name:
            made = Claim(
                pod.namespace,
                pod.name + SUFFIX,
                "",
                tuple(
                    sorted(
                        (
                            DeviceRequest(name, ExactRequest(served[a.resource], count=n))
                            for a in asks
                            for name, n in a.requests
                        ),
                        key=lambda r: r.name,
                    )
                ),
                made_for=pod.uid,
            )
            catalog.make(made)
            key = made.key
        requests = {k: v for k, v in asked.items() if k not in served}
        return replace(
            pod,
            requests=requests,
            resource_claims=claims + ((key,) if key and key not in claims else ()),
            extended_key=key,
            requests_asked=dict(asked),
        )

    def gone(self, uid: str) -> None:
        self._ask(uid, ())
        self._release(uid)

    def _release(self, uid: str) -> None:
        """The pod asks nothing through a claim any more: the claim the core made for it, and
        its request mappings, go."""
        self._catalog.retire(uid)
        self._catalog.map_requests(uid, ())
