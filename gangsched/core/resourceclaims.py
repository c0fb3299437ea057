"""Dynamic Resource Allocation (``resource.k8s.io/v1``) as the core sees it: devices that
drivers publish in ResourceSlices, the DeviceClasses that name kinds of device, and the
ResourceClaims that pods ask through. No Kubernetes types: the readers turn the API objects
into these, and compile every CEL selector into a ``Selector`` (a predicate over a device, with
its expression kept for messages), so the core evaluates no CEL itself.

What a claim asks, as kube-scheduler v1.36's structured allocator reads it:

- each request is either ``exactly`` one kind (a device class, selectors, ``ExactCount`` with a
  count or ``All``, admin access) or ``firstAvailable``: sub-requests tried in order, exactly
  one of which is used;
- ``constraints`` with ``matchAttribute``: every device allocated for the requests it names
  (all of the claim's when it names none) has the same value of that attribute;
- a claim already allocated holds its devices: they are used, by whoever asked.

Devices are local to one node (``node``), or reach several (``node`` empty, ``reach`` a node
selector term, or every node): a network-attached device, a fabric or a rack-level device that
a claim shared by a whole gang can use from every member's node. A device of a partitionable
pool consumes counters (``consumes``) from the pool's counter sets: devices that overlap (a
whole GPU and its MIG slices) share them, so allocating one leaves too little for the other.

The allocator that satisfies the claims of a whole gang at once is in core/claimalloc.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gangsched.core.model import AffinityTerm
from gangsched.core.resources import add_into

__all__ = [
    "CLASS_PREFIX",
    "AllocationMode",
    "CapacityPolicy",
    "Claim",
    "ClaimAllocation",
    "ConfigEntry",
    "CounterTotal",
    "Device",
    "DeviceClass",
    "DeviceId",
    "DeviceRequest",
    "DeviceTaint",
    "ExactRequest",
    "MatchAttribute",
    "Selector",
    "Toleration",
    "Version",
]


class Version(str):
    """An attribute whose value is a semantic version (semver.org 2.0.0), kept as written: a
    string to every comparison the core makes, a version to a CEL selector (``semver``)."""

    __slots__ = ()


# The extended resource every DeviceClass serves, whatever its spec says (KEP-5004).
CLASS_PREFIX = "deviceclass.resource.kubernetes.io/"

# A partitionable pool's counter: (driver, pool, counter set, counter, total).
CounterTotal = tuple[str, str, str, str, int]

# An attribute's value: a string, an integer, a boolean, or a version (kept as its text).
AttributeValue = str | int | bool


@dataclass(frozen=True, slots=True, order=True)
class DeviceId:
    """A device: ``<driver>/<pool>/<device>``, as an allocation result names it."""

    driver: str
    pool: str
    name: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


@dataclass(frozen=True, slots=True)
class DeviceTaint:
    """A taint on a device (``spec.devices[].taints``): ``NoSchedule`` and ``NoExecute`` keep
    it from being allocated to a request that does not tolerate it; ``None`` is a notice."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    @property
    def blocks(self) -> bool:
        return self.effect in ("NoSchedule", "NoExecute")


@dataclass(frozen=True, slots=True)
class Toleration:
    """A request's toleration of device taints, as kube's ``ToleratesTaint`` reads it: an
    empty effect or key matches any; ``Equal`` (the default) also wants the same value."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: DeviceTaint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.operator == "Equal" and self.value == taint.value


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """A capacity's ``requestPolicy`` (consumable capacity): what a request that names the
    capacity consumes of it (its amount rounded up to a valid value or a step of the valid
    range), and what one that does not name it consumes (``default``, else the whole value),
    as kube-scheduler v1.36's allocator computes it."""

    default: int | None = None
    valid_values: tuple[int, ...] = ()  # ascending
    min: int | None = None
    max: int | None = None
    step: int | None = None

    def consumed(self, asked: int | None, value: int) -> int:
        if asked is None:
            return self.default if self.default is not None else value
        if self.min is not None:
            if asked < self.min:
                return self.min
            if self.step is None:
                return asked
            n, rest = divmod(asked - self.min, self.step)
            return self.min + self.step * (n + (1 if rest else 0))
        for v in self.valid_values:
            if asked <= v:
                return v
        return asked

    def violated_by(self, amount: int) -> bool:
        if self.default is not None and amount == self.default:
            return False
        if self.min is not None:
            if self.max is not None and amount > self.max:
                return True
            return self.step is not None and (amount - self.min) % self.step != 0
        if self.valid_values:
            return amount not in self.valid_values
        return False


def consumed_capacity(
    capacity: Mapping[str, int],
    policies: Mapping[str, CapacityPolicy],
    asked: Mapping[str, int],
) -> dict[str, int] | None:
    """What a request asking ``asked`` (by capacity name) consumes of each capacity of a
    device, or None when a policy refuses it."""
    out: dict[str, int] = {}
    for name, value in capacity.items():
        policy = policies.get(name)
        want = asked.get(name)
        if policy is None:
            amount = value if want is None else want
        else:
            amount = policy.consumed(want, value)
            if policy.violated_by(amount):
                return None
        out[name] = amount
    return out


@dataclass(frozen=True, slots=True)
class Device:
    """A device a driver published for a node (a node-local ResourceSlice). Attribute and
    capacity names are fully qualified (``gpu.nvidia.com/model``); a name without a domain
    in the slice is qualified with the driver's name by the reader."""

    id: DeviceId
    node: str
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    capacity: Mapping[str, int] = field(default_factory=dict)
    taints: tuple[DeviceTaint, ...] = ()
    # where a device not local to one node (``node`` empty) may be used: the nodes a selector
    # term matches (the slice's or the device's ``nodeSelector``), or every node (None)
    reach: AffinityTerm | None = None
    # counters it takes from its pool's counter sets while allocated: (set, counter, amount)
    consumes: tuple[tuple[str, str, int], ...] = ()
    # binding conditions (DRADeviceBindingConditions): the pod binds only once the driver
    # reports every ``binding_conditions`` condition True on the allocated device (and none
    # of ``binding_failure_conditions``); ``binds_to_node``: its allocation is for the one
    # node the pod goes to, wherever else the device reaches
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False
    # consumable capacity (DRAConsumableCapacity): ``multi`` (allowMultipleAllocations): any
    # number of claims may share the device while what they consume of its capacity fits;
    # ``policies``: the capacities' request policies, by (qualified) name
    multi: bool = False
    policies: Mapping[str, CapacityPolicy] = field(default_factory=dict)
    # the capacity names as the slice wrote them -> qualified, when any was written without
    # its domain (a request's capacity names the capacity as the slice wrote it)
    written: Mapping[str, str] = field(default_factory=dict)

    def capacity_named(self, name: str) -> str:
        """The qualified name of the capacity the slice wrote as ``name``, '' if none."""
        if self.written:
            return self.written.get(name, "")
        return name if name in self.capacity else ""

    def written_name(self, qualified: str) -> str:
        """The capacity's name as the slice wrote it (as allocations name it)."""
        for written, q in self.written.items():
            if q == qualified:
                return written
        return qualified

    @property
    def consumable(self) -> bool:
        """What a request consumes of the device's capacity decides whether it fits."""
        return self.multi or bool(self.policies)

    @property
    def driver(self) -> str:
        return self.id.driver

    @property
    def tainted(self) -> bool:
        """A taint keeps it from requests that do not tolerate it."""
        return any(t.blocks for t in self.taints)

    def usable_by(self, tolerations: tuple[Toleration, ...]) -> bool:
        """Every taint that blocks allocation is tolerated."""
        return all(
            any(t.tolerates(taint) for t in tolerations) for taint in self.taints if taint.blocks
        )


@dataclass(frozen=True, slots=True)
class Selector:
    """A compiled CEL selector: ``matches(device)``; ``expression`` as written, for messages."""

    expression: str
    matches: Callable[[Device], bool] = field(compare=False)


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """Opaque driver configuration (a class's ``spec.config[]`` or a claim's
    ``spec.devices.config[]``): for ``driver``, with ``parameters`` as written (JSON text, so
    it stays hashable and immutable); ``requests`` it applies to (every request when empty).
    The scheduler does not look inside: it copies it into the allocation for the driver."""

    driver: str
    parameters: str
    requests: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[Selector, ...] = ()
    config: tuple[ConfigEntry, ...] = ()
    # spec.extendedResourceName: pods asking this extended resource are served by devices of
    # this class on nodes that do not offer it as allocatable (KEP-5004, core/extended.py)
    extended_resource: str = ""
    # metadata.creationTimestamp: of two classes naming the same extended resource, the newer
    # serves it (the name breaks a tie), as kube-scheduler picks
    created: float = 0.0


class AllocationMode(StrEnum):
    EXACT_COUNT = "ExactCount"
    ALL = "All"


@dataclass(frozen=True, slots=True)
class ExactRequest:
    """One kind of device: of ``device_class``, matching every selector, ``count`` of them
    (``ExactCount``) or every matching device (``All``)."""

    device_class: str
    selectors: tuple[Selector, ...] = ()
    mode: AllocationMode = AllocationMode.EXACT_COUNT
    count: int = 1
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    # consumable capacity: how much of each capacity (named as the slice writes it) the
    # request needs of one device
    capacity: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A request of a claim: ``exactly`` one kind, or the first of ``first_available`` (named
    sub-requests, in order of preference) that can be satisfied."""

    name: str
    exactly: ExactRequest | None = None
    first_available: tuple[tuple[str, ExactRequest], ...] = ()

    def options(self) -> tuple[tuple[str, ExactRequest], ...]:
        """The alternatives, in order: (``<request>`` or ``<request>/<sub-request>``, what)."""
        if self.exactly is not None:
            return ((self.name, self.exactly),)
        return tuple((f"{self.name}/{sub}", r) for sub, r in self.first_available)


@dataclass(frozen=True, slots=True)
class MatchAttribute:
    """Devices of ``requests`` (every request of the claim when empty) share ``attribute``
    (``matchAttribute``), or, ``distinct``, each have a value of it no other has
    (``distinctAttribute``)."""

    attribute: str
    requests: tuple[str, ...] = ()
    distinct: bool = False


@dataclass(frozen=True, slots=True)
class ClaimAllocation:
    """Which devices satisfy which request (``<request>`` or ``<request>/<sub-request>``);
    the node it is for, or (``node`` empty, none of its devices local to one node) the node
    selector term its devices' reach makes (``reach``; None: every node)."""

    node: str
    results: tuple[tuple[str, DeviceId], ...]
    reach: AffinityTerm | None = None
    # the allocated devices that have binding conditions: (device, conditions, failure
    # conditions), copied into the allocation's results; the pods wait for them to bind
    conditions: tuple[tuple[DeviceId, tuple[str, ...], tuple[str, ...]], ...] = field(
        default=(), compare=False
    )
    # consumable capacity: the results (by index) that share a device allocatable many times,
    # with what they consume of its capacity (by name as the slice wrote it, amount)
    shares: tuple[tuple[int, tuple[tuple[str, int], ...]], ...] = ()

    def consumption(self) -> dict[DeviceId, dict[str, int]]:
        """What the shared results consume, by device."""
        out: dict[DeviceId, dict[str, int]] = {}
        for i, consumed in self.shares:
            add_into(out.setdefault(self.results[i][1], {}), dict(consumed))
        return out

    @property
    def exclusive(self) -> tuple[DeviceId, ...]:
        """The devices the allocation holds alone (all but the shared ones)."""
        if not self.shares:
            return self.devices
        shared = {i for i, _ in self.shares}
        return tuple(d for i, (_, d) in enumerate(self.results) if i not in shared)

    @property
    def where(self) -> str:
        """The node, or the nodes, for messages."""
        if self.node:
            return f"on node {self.node}"
        if self.reach is None:
            return "for every node"
        return "for the nodes its node selector matches"

    @property
    def devices(self) -> tuple[DeviceId, ...]:
        return tuple(d for _, d in self.results)


@dataclass(frozen=True, slots=True)
class Claim:
    """A ResourceClaim: ``namespace/name``; its requests and constraints; its allocation when
    one was written (by this scheduler or another), and the pods it is reserved for."""

    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...] = ()
    constraints: tuple[MatchAttribute, ...] = ()
    allocation: ClaimAllocation | None = None
    reserved_for: tuple[str, ...] = ()
    # metadata.deletionTimestamp is set: no pod may start using it.
    deleting: bool = False
    # spec.devices.config, copied into the allocation (with the classes' config)
    config: tuple[ConfigEntry, ...] = ()
    # the uid of the pod whose extended resources it serves (DRA extended resources: the
    # claim kube-scheduler or gangsched made for the pod, annotated
    # resource.kubernetes.io/extended-resource-claim and owned by the pod); '' for others
    made_for: str = ""

    @property
    def unwritten(self) -> bool:
        """Made by the core for a pod's extended resources, not created in the API yet: its
        name is the ``generateName`` it will be created with."""
        return not self.uid and self.name.endswith("-")

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
