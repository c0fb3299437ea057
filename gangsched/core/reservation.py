"""Reservations: capacity set aside for a gang that has waited too long, so that it starts.

Without one, a large gang waits for a moment when all the capacity it needs is free at once,
which a steady stream of small jobs never leaves (the backfill problem the kube-batch PodGroup
design names). A gang that has waited ``reservation_after_seconds`` since its first attempt,
and failed for want of capacity, gets a reservation: the nodes where it will fit soonest, and
what it needs on each. From then on, work of lower or equal priority is placed on those nodes
only in capacity the reservation does not need (backfill), or, when its PodGroup declares an
expected run time, if it ends before the reservation is expected to be complete (short jobs
backfill too). Higher-priority work is not held back. The capacity accumulates as the running
pods end; the gang is tried as usual and binds whole once it fits.

Where it fits soonest: the what-if search of preemption (core/preemption.py), over every
running pod of lower or equal priority, with nothing evicted: the pods the gang would have to
wait for are chosen to be those expected to end first (by their declared run times; without
them, the oldest), and the nodes holding them are reserved.

One reservation at a time, for the gang first in queue order among those eligible; a better
gang (higher priority, or older at equal priority) takes it over. It is recomputed at each
attempt of its gang, and ends when the gang binds or goes away.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from gangsched.core.cache import NodeInfo
from gangsched.core.claimstate import ClaimCatalog
from gangsched.core.framework import SUCCESS, Code, Status
from gangsched.core.model import GangSpec, Pod
from gangsched.core.resources import ResourceList, add_into

__all__ = ["Reservation", "ReservationFilter"]

_HELD = Status(Code.UNSCHEDULABLE, "node(s) reserved for a gang that waited longer")
# what a reservation holds of a device class (DRA), among the resources of its need
DEVICES = "devices.resource.k8s.io/"


@dataclass(slots=True)
class Reservation:
    gang: str
    priority: int
    since: float  # when the gang first got it (kept while it is recomputed)
    need: dict[str, ResourceList] = field(default_factory=dict)  # node -> what the gang needs
    # When the pods it waits for are expected to have ended (None: unknown)
    ready_at: float | None = None
    reason: str = ""

    @property
    def nodes(self) -> tuple[str, ...]:
        return tuple(sorted(self.need))


class ReservationFilter:
    """Filter: on a reserved node, a pod of lower or equal priority than the reserved gang fits
    only in what is left once the reservation's need is set aside; a pod of a gang that declares
    an expected run time ending before the reservation is expected complete fits as usual."""

    name = "Reservation"
    static = False

    def __init__(
        self,
        spec_of: Callable[[str], GangSpec | None],
        now: Callable[[], float],
        on_change: Callable[[bool], None] | None = None,
        devices: ClaimCatalog | None = None,
    ) -> None:
        self._spec_of = spec_of
        # DRA devices: a pod's claims fit only in the devices the reservation does not need
        self._devices = devices
        self._now = now
        # Told whether a reservation now exists: the scheduler runs this filter only then, so
        # that placement pays nothing for it the rest of the time.
        self._on_change = on_change
        self._current: Reservation | None = None
        self._exempt: dict[str, bool] = {}  # gang key -> may ignore the reservation (per cycle)

    @property
    def current(self) -> Reservation | None:
        return self._current

    @current.setter
    def current(self, r: Reservation | None) -> None:
        was = self._current is not None
        self._current = r
        if self._on_change is not None and was != (r is not None):
            self._on_change(r is not None)

    def begin_cycle(self) -> None:
        self._exempt.clear()

    def filter(self, pod: Pod, node: NodeInfo) -> Status:
        r = self._current
        if r is None:
            return SUCCESS
        need = r.need.get(node.name)
        if need is None or self._exempt_pod(pod, r):
            return SUCCESS
        n = node.node
        if n is None:
            return SUCCESS
        requested = node.requested
        allocatable = n.allocatable
        for res, amount in pod.requests.items():
            held = need.get(res, 0)
            if held and allocatable.get(res, 0) - requested.get(res, 0) - held < amount:
                return _HELD
        devices = self._devices
        if devices is not None and pod.resource_claims:
            for cls, amount in devices.demand(pod).items():
                held = need.get(DEVICES + cls, 0)
                if held and devices.device_usage(node.name, cls)[0] - held < amount:
                    return _HELD
        return SUCCESS

    def memo_key(self, pod: Pod) -> Hashable:
        """What this filter's verdicts for ``pod`` depend on besides the node and the pod's
        requests: the reservation (its gang, priority, need) and whether the pod may ignore
        it. Pods with equal keys and requests get equal verdicts on every node."""
        r = self._current
        if r is None:
            return None
        need = tuple(sorted((n, tuple(sorted(v.items()))) for n, v in r.need.items()))
        return (r.gang, r.priority, need, self._exempt_pod(pod, r))

    def _exempt_pod(self, pod: Pod, r: Reservation) -> bool:
        key = pod.group or pod.uid
        cached = self._exempt.get(key)
        if cached is not None:
            return cached
        exempt = key == r.gang or pod.priority > r.priority
        if not exempt and pod.group and r.ready_at is not None:
            spec = self._spec_of(pod.group)
            runtime = spec.expected_runtime_seconds if spec is not None else None
            exempt = runtime is not None and self._now() + runtime <= r.ready_at
        self._exempt[key] = exempt
        return exempt


def need_by_node(
    placements: Mapping[str, str], pods: Mapping[str, Pod], devices: ClaimCatalog | None = None
) -> dict[str, ResourceList]:
    """What the placed pods request, per node; with ``devices``, the devices their claims
    take too (``devices.resource.k8s.io/<class>``)."""
    out: dict[str, ResourceList] = {}
    for uid, node in placements.items():
        pod = pods.get(uid)
        if pod is not None:
            need = out.setdefault(node, {})
            add_into(need, pod.requests)
            if devices is not None and pod.resource_claims:
                add_into(need, {DEVICES + c: n for c, n in devices.demand(pod).items()})
    return out
