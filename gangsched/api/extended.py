"""A pod's extended resources as a ResourceClaim would ask for them (DRA extended resources,
KEP-5004, beta and on by default in Kubernetes 1.36).

A DeviceClass may serve an extended resource: the one its ``spec.extendedResourceName`` names,
and always ``deviceclass.resource.kubernetes.io/<class>``. A pod asking for such a resource on
a node that does not offer it as allocatable (no device plugin serves it there) gets its
devices through a claim the scheduler makes for the pod. This module lays the pod's requests
out as kube-scheduler v1.36 lays out that claim, whatever class ends up serving them (the core
decides that, core/extended.py):

- every container, init containers first, is numbered ``i`` in ``initContainers`` followed by
  ``containers``; a container asking ``n`` of the resource asks request
  ``container-<i>-request-<j>`` for ``n`` devices, ``j`` being the resource's place among the
  container's request names, sorted;
- an init container that runs to completion before the others (no ``restartPolicy: Always``)
  first reuses the requests of the containers that run after it (its later sidecars and the
  regular containers), in order, and asks only for what they leave short; of such init
  containers only the one asking most keeps its request, and the others are mapped to it;
- the requests are ordered by name; the mappings (container, resource, request) say which
  container uses which request, long-running containers first.
"""

from __future__ import annotations

from dataclasses import dataclass

from gangsched.api.fields import Obj, SpecError, as_list, as_map, as_written, nonempty_str
from gangsched.core.model import ExtendedAsk
from gangsched.core.quantity import parse_quantity
from gangsched.core.resourceclaims import CLASS_PREFIX

__all__ = ["extended_asks", "extended_claim_name", "is_dra_extended"]

_REQUESTS_PREFIX = "requests."


def is_dra_extended(name: str) -> bool:
    """A resource name a DeviceClass may serve: an extended resource (``<domain>/<name>``
    outside ``kubernetes.io``), or a class's own ``deviceclass.resource.kubernetes.io/<class>``."""
    if name.startswith(CLASS_PREFIX):
        return True
    return "/" in name and "kubernetes.io/" not in name and not name.startswith(_REQUESTS_PREFIX)


@dataclass(slots=True)
class _Request:
    name: str
    count: int


def _count(v: object, field: str) -> int:
    """A whole, positive count of devices; 0 for a fraction or nothing (kube's ``AsInt64``
    leaves such a container out)."""
    q = parse_quantity(v, field)
    return int(q) if q.denominator == 1 and q > 0 else 0


def _container_request(
    index: int,
    container: Obj,
    resource: str,
    reusable: list[_Request | None],
    field: str,
) -> tuple[_Request | None, list[tuple[str, str]]]:
    """The request a container adds for ``resource`` (None: none, or what ``reusable``
    already gives it), and its mappings (container, request)."""
    requests = as_map(
        as_map(container.get("resources"), f"{field}.resources").get("requests"),
        f"{field}.resources.requests",
    )
    if resource not in requests:
        return None, []
    wanted = _count(requests[resource], f"{field}.resources.requests[{resource}]")
    if wanted == 0:
        return None, []
    cname = str(container.get("name", ""))
    mappings: list[tuple[str, str]] = []
    total = 0
    for r in reusable:
        if r is None:
            continue
        total += r.count
        mappings.append((cname, r.name))
        if total >= wanted:
            return None, mappings
    j = sorted(requests).index(resource)
    made = _Request(f"container-{index}-request-{j}", wanted - total)
    mappings.append((cname, made.name))
    return made, mappings


def extended_asks(spec: Obj) -> tuple[ExtendedAsk, ...]:
    """For every extended resource a DeviceClass could serve that the pod's containers ask
    for, the requests and mappings of a claim asking it, by resource name. Raises SpecError
    (or QuantityError) naming the field."""
    inits = [
        as_map(c, f"spec.initContainers[{i}]")
        for i, c in enumerate(as_list(spec.get("initContainers"), "spec.initContainers"))
    ]
    regular = [
        as_map(c, f"spec.containers[{i}]")
        for i, c in enumerate(as_list(spec.get("containers"), "spec.containers"))
    ]
    containers = inits + regular
    fields = [f"spec.initContainers[{i}]" for i in range(len(inits))] + [
        f"spec.containers[{i}]" for i in range(len(regular))
    ]
    names: set[str] = set()
    for c, f in zip(containers, fields, strict=True):
        reqs = as_map(
            as_map(c.get("resources"), f"{f}.resources").get("requests"), f"{f}.resources.requests"
        )
        names.update(str(k) for k in reqs if is_dra_extended(str(k)))
    if not names:
        return ()
    short_lived = [i for i in range(len(inits)) if containers[i].get("restartPolicy") != "Always"]
    long_lived = [i for i in range(len(containers)) if i not in short_lived]
    out: list[ExtendedAsk] = []
    for resource in sorted(names):
        long_requests: list[_Request | None] = [None] * len(containers)
        long_maps: list[tuple[str, str]] = []
        for i in long_lived:
            made, maps = _container_request(i, containers[i], resource, [], fields[i])
            long_requests[i] = made
            long_maps += maps
        biggest: _Request | None = None
        short_names: set[str] = set()
        short_maps: list[tuple[str, str]] = []
        for i in short_lived:
            made, maps = _container_request(
                i, containers[i], resource, long_requests[i:], fields[i]
            )
            if made is not None:
                short_names.add(made.name)
                if biggest is None or biggest.count < made.count:
                    biggest = made
            short_maps += maps
        if biggest is not None and len(short_names) > 1:
            short_names.discard(biggest.name)
            short_maps = [(c, biggest.name if r in short_names else r) for c, r in short_maps]
        requests = ([biggest] if biggest is not None else []) + [
            r for r in long_requests if r is not None
        ]
        if not requests and not long_maps and not short_maps:
            continue
        out.append(
            ExtendedAsk(
                resource,
                tuple((r.name, r.count) for r in requests),
                tuple(long_maps + short_maps),
            )
        )
    return tuple(out)


def extended_claim_name(status: Obj) -> str:
    """``status.extendedResourceClaimStatus.resourceClaimName``, '' when none is set. Raises
    SpecError naming the field."""
    v = status.get("extendedResourceClaimStatus")
    if v is None:
        return ""
    m = as_map(v, "status.extendedResourceClaimStatus")
    name = m.get("resourceClaimName")
    if name is None:
        return ""
    if not isinstance(name, str):
        raise SpecError(
            "status.extendedResourceClaimStatus.resourceClaimName: expected a string, got "
            f"{as_written(name)}"
        )
    return nonempty_str(name, "status.extendedResourceClaimStatus.resourceClaimName")
