"""Resource lists and the arithmetic the scheduler does on them.

A resource list is a plain ``dict[str, int]``: CPU in milli-cores, memory and storage in bytes,
``pods`` as a count, extended resources (``vendor/name``, ``nvidia.com/gpu`` first among them)
as whole units. Plain dicts keep the hot path cheap; the functions below are the only
arithmetic done on them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from gangsched.core.quantity import QuantityError, parse_quantity, to_milli, to_units

__all__ = [
    "CPU",
    "GPU",
    "MEMORY",
    "PODS",
    "ContainerRequests",
    "ResourceList",
    "add_into",
    "format_amount",
    "parse_resource_list",
    "pod_requests",
    "sub_into",
]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"
EPHEMERAL_STORAGE = "ephemeral-storage"

ResourceList = dict[str, int]

# Largest amount accepted for any resource (2^62): anything larger is certainly an input error
# and would only overflow the arithmetic of other components.
MAX_AMOUNT = 2**62


def _is_extended(name: str) -> bool:
    return "/" in name and "kubernetes.io/" not in name


def parse_amount(name: str, value: object, field: str) -> int:
    """Parse one resource amount into the scheduler's integer unit for ``name``."""
    q = parse_quantity(value, field)
    if q < 0:
        raise QuantityError(field, value, "must not be negative")
    if name == CPU:
        amount = to_milli(q)
    else:
        if _is_extended(name) and q.denominator != 1:
            raise QuantityError(field, value, f"extended resource {name} must be a whole number")
        amount = to_units(q)
    if amount > MAX_AMOUNT:
        raise QuantityError(field, value, "value is too large")
    return amount


def parse_resource_list(raw: Mapping[str, object] | None, field: str) -> ResourceList:
    """Parse a Kubernetes ResourceList (``{"cpu": "500m", ...}``); errors name the field."""
    out: ResourceList = {}
    if raw is None:
        return out
    if not isinstance(raw, Mapping):
        raise QuantityError(field, raw, "expected a mapping of resource name to quantity")
    for name, value in raw.items():
        if type(value) is str:
            amount = _parsed.get((name, value))
            if amount is not None:
                out[name] = amount
                continue
        if not isinstance(name, str) or not name:
            raise QuantityError(field, name, "resource names must be non-empty strings")
        amount = parse_amount(name, value, f"{field}.{name}")
        if type(value) is str:
            if len(_parsed) >= _PARSED_MAX:
                _parsed.clear()
            _parsed[name, value] = amount
        out[name] = amount
    return out


# Amounts already parsed, by (resource name, quantity string): a cluster's pods ask for a few
# distinct quantities ("1", "500m", "16Gi"), parsed once each. Only valid ones are kept.
_parsed: dict[tuple[str, str], int] = {}
_PARSED_MAX = 4096


def add_into(target: ResourceList, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        target[k] = target.get(k, 0) + v


def sub_into(target: ResourceList, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        left = target.get(k, 0) - v
        if left:
            target[k] = left
        else:
            target.pop(k, None)


def _max_into(target: ResourceList, other: Mapping[str, int]) -> None:
    for k, v in other.items():
        if v > target.get(k, 0):
            target[k] = v


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """The requests of one container; ``restartable`` marks a sidecar init container
    (``restartPolicy: Always``)."""

    requests: Mapping[str, int] = field(default_factory=dict)
    restartable: bool = False


def pod_requests(
    containers: Iterable[ContainerRequests],
    init_containers: Iterable[ContainerRequests] = (),
    overhead: Mapping[str, int] | None = None,
    pod_level: Mapping[str, int] | None = None,
) -> ResourceList:
    """A pod's effective request, as Kubernetes computes it.

    The sum of the app containers plus every sidecar, or the largest init-container step
    (an init container's own request plus the sidecars started before it), whichever is
    larger per resource; then pod-level requests (where set) replace the container figures,
    and the pod overhead is added. One ``pods`` slot is always consumed.
    """
    total: ResourceList = {}
    for c in containers:
        add_into(total, c.requests)
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for c in init_containers:
        if c.restartable:
            add_into(total, c.requests)
            add_into(sidecars, c.requests)
            step = dict(sidecars)
        else:
            step = dict(c.requests)
            add_into(step, sidecars)
        _max_into(init_peak, step)
    _max_into(total, init_peak)
    if pod_level:
        for k, v in pod_level.items():
            total[k] = v
    if overhead:
        add_into(total, overhead)
    total[PODS] = total.get(PODS, 0) + 1
    return {k: v for k, v in total.items() if v}


def format_amount(name: str, amount: int) -> str:
    """Human form of an amount, for messages: ``1500m``, ``2Gi``, ``8``."""
    if name == CPU:
        return f"{amount // 1000}" if amount % 1000 == 0 else f"{amount}m"
    if name in (MEMORY, EPHEMERAL_STORAGE) or name.startswith("hugepages-"):
        for unit, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= size and amount % size == 0:
                return f"{amount // size}{unit}"
        return str(amount)
    return str(amount)
