"""What a pod requests: its effective requests as kube-scheduler's NodeResourcesFit counts them
(containers, init containers and sidecars, pod overhead and pod-level requests), during an
in-place resize too."""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.api.fields import Obj, SpecError, as_list, as_map
from gangsched.core.gpu import KOORD_SHARED
from gangsched.core.quantity import QuantityError
from gangsched.core.resources import (
    ContainerRequests,
    ResourceList,
    parse_amount,
    parse_resource_list,
    pod_requests,
)

__all__ = ["effective_requests", "zero_share"]


class _Resize:
    """What the pod's status says about in-place resizes (InPlacePodVerticalScaling, GA in
    v1.36, and its pod-level counterpart, beta): kube-scheduler's NodeResourcesFit counts a
    running pod at the larger of what its spec asks, what the kubelet allocated and what is
    actuated, so a pending resize neither frees nor overbooks the node. When the kubelet found
    the resize infeasible (condition PodResizePending, reason Infeasible) the spec is left out.
    A status that cannot be read is ignored (the spec alone counts), as a pending pod has
    none."""

    def __init__(self, status: Obj) -> None:
        self.infeasible = False
        self.containers: dict[str, Obj] = {}
        self.pod: Obj = {}
        try:
            for c in as_list(status.get("conditions"), "status.conditions"):
                if isinstance(c, Mapping) and c.get("type") == "PodResizePending":
                    self.infeasible = c.get("reason") == "Infeasible"
                    break
            for key in ("containerStatuses", "initContainerStatuses"):
                for cs in as_list(status.get(key), f"status.{key}"):
                    if isinstance(cs, Mapping) and isinstance(cs.get("name"), str):
                        self.containers[cs["name"]] = cs
            self.pod = status
        except SpecError:
            self.infeasible, self.containers, self.pod = False, {}, {}

    def effective(self, spec: ResourceList, st: Obj | None) -> ResourceList:
        """kube-scheduler's determineEffectiveRequests for one container (or the pod level,
        ``st`` being the pod status): spec, actuated and allocated, the largest of each."""
        if st is None or st.get("resources") is None:
            return spec
        try:
            actuated = parse_resource_list(
                as_map(as_map(st["resources"], "resources").get("requests"), "requests"), "status"
            )
            allocated = parse_resource_list(
                as_map(st.get("allocatedResources"), "allocatedResources"), "status"
            )
        except (QuantityError, SpecError):
            return spec
        out: ResourceList = {} if self.infeasible else dict(spec)
        for amounts in (actuated, allocated):
            for name, amount in amounts.items():
                out[name] = max(out.get(name, 0), amount)
        return out


def _containers(spec: Obj, key: str, resize: _Resize) -> list[ContainerRequests]:
    out = []
    for i, c in enumerate(as_list(spec.get(key), f"spec.{key}")):
        c = as_map(c, f"spec.{key}[{i}]")
        res = as_map(c.get("resources"), f"spec.{key}[{i}].resources")
        name = c.get("name", i)
        requests = parse_resource_list(
            as_map(res.get("requests"), "requests"), f"spec.{key}[{name}].resources.requests"
        )
        restartable = c.get("restartPolicy") == "Always"
        if key == "containers" or restartable:  # what runs, and so may have been resized
            requests = resize.effective(requests, resize.containers.get(str(name)))
        out.append(ContainerRequests(requests, restartable))
    return out


_POD_LEVEL = frozenset({"cpu", "memory"})  # what Kubernetes accepts as pod-level requests


def effective_requests(spec: Obj, status: Obj) -> ResourceList:
    resize = _Resize(status)
    pod_level = as_map(as_map(spec.get("resources"), "spec.resources").get("requests"), "requests")
    level = (
        parse_resource_list(
            {k: v for k, v in pod_level.items() if k in _POD_LEVEL or k.startswith("hugepages-")},
            "spec.resources.requests",
        )
        if pod_level
        else None
    )
    if level:
        effective = resize.effective(level, resize.pod)
        level = {name: effective.get(name, 0) for name in level}
    return pod_requests(
        _containers(spec, "containers", resize),
        _containers(spec, "initContainers", resize),
        parse_resource_list(as_map(spec.get("overhead"), "spec.overhead"), "spec.overhead"),
        level,
    )


def zero_share(spec: Obj) -> str:
    """Why a container's ``koordinator.sh/gpu.shared`` of 0 cannot be honoured, or ''. The
    pod's effective request leaves zero amounts out, so the core never sees this one."""
    for key in ("containers", "initContainers"):
        for i, c in enumerate(as_list(spec.get(key), f"spec.{key}")):
            res = as_map(as_map(c, f"spec.{key}[{i}]").get("resources"), "resources")
            raw = as_map(res.get("requests"), "requests").get(KOORD_SHARED)
            if raw is None:
                continue
            field = f"spec.{key}[{c.get('name', i)}].resources.requests.{KOORD_SHARED}"
            if parse_amount(KOORD_SHARED, raw, field) < 1:
                return (
                    f"{field}: must be at least 1 (the number of GPUs the share is spread "
                    "over), got 0"
                )
    return ""
