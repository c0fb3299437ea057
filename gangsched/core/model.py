"""The core's view of the cluster: nodes, pods and gangs, with no Kubernetes types.

The adapters translate API objects into these; the core never sees anything else.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Final

from gangsched.core.gpu import GpuDemand, GpuDevice, gpu_demand, node_devices
from gangsched.core.resources import ResourceList

__all__ = [
    "AffinityTerm",
    "DomainConstraint",
    "ExtendedAsk",
    "GangMode",
    "GangSpec",
    "HostPort",
    "LabelSelector",
    "LeaderFirst",
    "Node",
    "NodeAffinity",
    "Placement",
    "Pod",
    "PodAffinity",
    "PodAffinityTerm",
    "PodPhase",
    "PodVolumes",
    "PreferredTerm",
    "Requirement",
    "RoleSpec",
    "SchedulerError",
    "SpreadConstraint",
    "Taint",
    "Toleration",
    "TopologySpec",
    "WeightedPodAffinityTerm",
]


class PodPhase(enum.StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


TERMINAL_PHASES = frozenset({PodPhase.SUCCEEDED, PodPhase.FAILED})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"  # NoSchedule | PreferNoSchedule | NoExecute


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""  # empty with operator Exists tolerates every taint
    operator: str = "Equal"  # Equal | Exists
    value: str = ""
    effect: str = ""  # empty tolerates every effect


@dataclass(frozen=True, slots=True)
class Requirement:
    """A node selector requirement: ``key``, ``operator`` (In, NotIn, Exists, DoesNotExist,
    Gt, Lt) and ``values``. For ``matchFields`` the key is ``metadata.name``."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A node selector term: every expression and field requirement must hold."""

    match_expressions: tuple[Requirement, ...] = ()
    match_fields: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class NodeAffinity:
    """``required`` terms are ORed; None means no requirement (an empty tuple matches nothing)."""

    required: tuple[AffinityTerm, ...] | None = None
    preferred: tuple[PreferredTerm, ...] = ()


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A Kubernetes label selector: every ``match_labels`` pair and every expression (In,
    NotIn, Exists, DoesNotExist) must hold. An empty selector matches every label set; where
    Kubernetes has a nil selector (matching nothing) the model has ``None``."""

    match_labels: tuple[tuple[str, str], ...] = ()
    match_expressions: tuple[Requirement, ...] = ()


@dataclass(frozen=True, slots=True)
class PodAffinityTerm:
    """One inter-pod (anti-)affinity term, with ``matchLabelKeys`` / ``mismatchLabelKeys``
    already merged into ``selector`` (as the API server does when the pod is created).

    The pods it selects: those in ``namespaces`` or in a namespace whose labels match
    ``namespace_selector`` (``None``: no selector; empty: every namespace), whose labels
    match ``selector`` (``None`` matches no pod). When the pod spec names no namespace and
    no namespace selector, ``namespaces`` holds the pod's own namespace."""

    topology_key: str
    selector: LabelSelector | None
    namespaces: frozenset[str] = frozenset()
    namespace_selector: LabelSelector | None = None


@dataclass(frozen=True, slots=True)
class WeightedPodAffinityTerm:
    weight: int
    term: PodAffinityTerm


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """``spec.affinity.podAffinity`` and ``podAntiAffinity``."""

    required: tuple[PodAffinityTerm, ...] = ()
    preferred: tuple[WeightedPodAffinityTerm, ...] = ()
    required_anti: tuple[PodAffinityTerm, ...] = ()
    preferred_anti: tuple[WeightedPodAffinityTerm, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred or self.required_anti or self.preferred_anti)


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One ``topologySpreadConstraints`` entry, ``matchLabelKeys`` merged into ``selector``."""

    max_skew: int
    topology_key: str
    when_unsatisfiable: str = "DoNotSchedule"  # DoNotSchedule | ScheduleAnyway
    selector: LabelSelector | None = None
    min_domains: int | None = None
    node_affinity_policy: str = "Honor"  # Honor | Ignore
    node_taints_policy: str = "Ignore"  # Honor | Ignore


@dataclass(frozen=True, slots=True)
class HostPort:
    """A host port a container asks for: ``ip`` empty means every address (0.0.0.0)."""

    port: int
    protocol: str = "TCP"
    ip: str = ""


@dataclass(frozen=True, slots=True)
class PodVolumes:
    """What the pod's volumes ask of placement: the PersistentVolumeClaims it mounts (by
    name, in its namespace; a generic ephemeral volume is the claim ``<pod>-<volume>``) and
    the CSI drivers of its inline CSI volumes. ``ephemeral`` names the claims of ``claims``
    that come from generic ephemeral volumes (created for, and owned by, the pod)."""

    claims: tuple[str, ...] = ()
    inline_csi: tuple[str, ...] = ()
    ephemeral: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.claims or self.inline_csi)


@dataclass(frozen=True, slots=True)
class Placement:
    """Everything about a pod that decides which nodes it may use, apart from resources.

    Hashable, so pods with the same placement share one node-eligibility computation.
    """

    node_selector: tuple[tuple[str, str], ...] = ()
    affinity: NodeAffinity = field(default_factory=NodeAffinity)
    tolerations: tuple[Toleration, ...] = ()
    node_name: str = ""  # spec.nodeName requested before binding


@dataclass(slots=True)
class Node:
    name: str
    allocatable: ResourceList
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    ready: bool = True
    # The node's GPU devices; derived from ``allocatable`` and the GPU feature discovery
    # labels when not given (core/gpu.py).
    gpus: tuple[GpuDevice, ...] | None = None

    def __post_init__(self) -> None:
        if self.gpus is None:
            self.gpus = node_devices(self.allocatable, self.labels)

    def static_signature(self) -> tuple[object, ...]:
        """What node filters depend on besides resources."""
        return (tuple(sorted(self.labels.items())), self.taints, self.unschedulable, self.ready)


@dataclass(frozen=True, slots=True)
class LeaderFirst:
    """A leader whose gang's other members are created only once it is bound, in its topology
    domain (a LeaderWorkerSet group with ``exclusive-topology``): the leader binds alone when
    one domain of ``level`` holds the whole group of ``size``, and the room of the others is
    held there until they come (core/leaderfirst.py)."""

    level: str  # the node label of the domain
    size: int  # the group's members, leader included


@dataclass(frozen=True, slots=True)
class DomainConstraint:
    """Topology-aware gang placement: where, in the nodes' topology, a gang must (or should)
    be placed. Levels are node label keys (a domain is one value of the key); the operator's
    ``topologyLevels`` setting orders them from the largest to the smallest.

    ``required``: every member in one domain of that level, or the gang waits.
    ``preferred``: one domain of that level if any can hold the gang, else one domain of the
    next larger configured level, and so on, else anywhere.
    ``slice_required``: the gang is cut into slices (members sharing the value of the pod
    label ``slice_label``, or runs of ``slice_size`` members in completion-index order) and
    each slice is placed in one domain of that level (inside the gang's domain, if any).
    Among the domains that can hold a gang (or a slice) the tightest is taken: the one with
    the least free capacity left over, so large domains stay whole for large gangs."""

    required: str = ""
    preferred: str = ""
    slice_required: str = ""
    slice_label: str = ""
    slice_size: int = 0

    def __bool__(self) -> bool:
        return bool(self.required or self.preferred or self.slice_required)

    def describe(self) -> str:
        """The constraint as a user wrote it, for messages."""
        parts = []
        if self.required:
            parts.append(f"required {self.required}")
        if self.preferred:
            parts.append(f"preferred {self.preferred}")
        if self.slice_required:
            by = (
                f"pod label {self.slice_label}"
                if self.slice_label
                else f"{self.slice_size} members"
            )
            parts.append(f"slices ({by}) required {self.slice_required}")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class ExtendedAsk:
    """What a pod asks of one extended resource (``nvidia.com/gpu``,
    ``deviceclass.resource.kubernetes.io/<class>``) in the form a ResourceClaim would ask it,
    should a DeviceClass serve the resource through Dynamic Resource Allocation (DRA extended
    resources, KEP-5004), laid out as kube-scheduler v1.36 lays it out: the device requests
    (``container-<i>-request-<j>``, with their counts) and which container uses which request
    (the pod's ``status.extendedResourceClaimStatus.requestMappings``)."""

    resource: str
    requests: tuple[tuple[str, int], ...]
    mappings: tuple[tuple[str, str], ...]  # (container, request)


@dataclass(frozen=True, slots=True)
class SchedulerError:
    """An attempt to decide the pod's gang failed inside gangsched (a bug, not the gang's
    fault): the scheduler recorded it on the gang's pending pods before it exited, so that
    the next process holds the gang back until ``until`` (seconds since the epoch) and
    every other gang goes on (core/steps/quarantine.py)."""

    count: int  # how many times it happened (each doubles the hold)
    until: float
    error: str  # the exception, as ``Type: message``


@dataclass(slots=True)
class Pod:
    uid: str
    namespace: str
    name: str
    requests: ResourceList
    created: float = 0.0
    priority: int = 0
    scheduler_name: str = "gangsched"
    phase: PodPhase = PodPhase.PENDING
    node_name: str = ""
    placement: Placement = field(default_factory=Placement)
    group: str = ""  # gang key "namespace/name"; empty for a plain pod
    role: str = ""
    deleting: bool = False
    # Set when the adapter could not make sense of the pod (unparsable requests, conflicting
    # group declarations). The pod is accounted where it runs but never scheduled.
    invalid_reason: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    pod_affinity: PodAffinity = field(default_factory=PodAffinity)
    spread: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    # spec.schedulingGates: while any is left the pod is not ready to be scheduled.
    gates: tuple[str, ...] = ()
    volumes: PodVolumes = field(default_factory=PodVolumes)
    # A placement-relevant field gangsched does not implement, named with the reason
    # (e.g. "spec.resourceClaims: ..."): accounted where it runs, never scheduled.
    unsupported: str = ""
    # The API object's version this was read from (opaque; the adapter's write preconditions).
    resource_version: str = ""
    # spec.preemptionPolicy: "PreemptLowerPriority" (the default) or "Never".
    preemption_policy: str = "PreemptLowerPriority"
    # status.nominatedNodeName as last read (set by a preemption that is waiting for its victims).
    nominated_node: str = ""
    # The message of the pod's ``DisruptionTarget`` condition when it is ``True`` with reason
    # ``PreemptionByScheduler``: a scheduler decided to evict the pod (core/eviction.py reads
    # whether it was this one); empty otherwise.
    disruption: str = ""
    # When the pod's PodScheduled condition turned True (its binding), 0 when unknown.
    bound_at: float = 0.0
    # spec.activeDeadlineSeconds: the kubelet stops the pod this long after it started, so it
    # runs no longer (the start forecast's upper bound on its end; None: not set).
    active_deadline_seconds: float | None = None
    # The uid of the Job that controls the pod (its controller ownerReference), '' when none.
    owner_job: str = ""
    # When that Job is stopped at the latest (its status.startTime + spec.activeDeadlineSeconds,
    # seconds since the epoch), None when it declares no deadline or is not known.
    job_deadline: float | None = None
    # The resource claims (Dynamic Resource Allocation) the pod uses, as namespace/name keys.
    resource_claims: tuple[str, ...] = ()
    # Why the pod cannot be placed yet for want of a claim that is still to be made from a
    # template (kube-controller-manager's resourceclaim controller names it in the pod's
    # status); empty when every claim is named.
    claims_waiting: str = ""
    # Extended resources the pod asks for, laid out as a claim would ask them: a DeviceClass
    # that serves one through DRA turns it into a claim (core/extended.py).
    extended: tuple[ExtendedAsk, ...] = ()
    # status.extendedResourceClaimStatus.resourceClaimName: the claim made for them, once
    # one was written for the pod.
    extended_claim: str = ""
    # Set by the core when a DeviceClass serves some of ``extended`` (core/extended.py): the
    # key of the claim among ``resource_claims`` that asks for them, and the requests as
    # asked (``requests`` then leaves those resources out).
    extended_key: str = ""
    requests_asked: ResourceList | None = None
    # The devices this pod's GPUs were recorded on (Koordinator's device-allocated
    # annotation), by index; empty when none is recorded.
    gpu_devices: tuple[int, ...] = ()
    # Topology-aware placement asked for on the pod itself (Kueue's podset topology
    # annotations); the gang's own ``GangSpec.domain`` wins when it has one.
    domain: DomainConstraint = field(default_factory=DomainConstraint)
    # The pod's index in its Job (batch.kubernetes.io/job-completion-index), -1 when none:
    # slices of ``slice_size`` members are cut in this order.
    index: int = -1
    # The leader of a group whose other members come only once it is bound (LeaderFirst).
    leader_first: LeaderFirst | None = None
    # An earlier attempt to decide the pod's gang failed inside gangsched (read from the
    # pending pod's gangsched.io/SchedulerError condition): held back until its time.
    scheduler_error: SchedulerError | None = None
    # What the pod asks of GPU devices; always derived from ``requests`` (core/gpu.py). A
    # request that cannot be honoured sets ``invalid_reason``.
    gpu: GpuDemand | None = field(default=None, init=False, compare=False)

    def __post_init__(self) -> None:
        self.derive_gpu()

    def derive_gpu(self) -> None:
        """Set ``gpu`` from ``requests``; call it again after changing ``requests``."""
        self.gpu = None
        demand = gpu_demand(self.requests)
        if isinstance(demand, str):
            if not self.invalid_reason:
                self.invalid_reason = demand
        else:
            self.gpu = demand

    def copy(self) -> Pod:
        """A shallow copy, as ``dataclasses.replace(pod)`` makes it (the fields' values shared)
        but without running ``__init__`` again: a third of its time, for the twins that copy
        every pod of a cluster (core/forecast.py). Change ``requests`` on the copy only with
        ``derive_gpu`` after it."""
        new = object.__new__(Pod)
        for name in _POD_SLOTS:
            setattr(new, name, getattr(self, name))
        return new

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def refused(self) -> str:
        """Why this pod is never scheduled (unreadable or unsupported), or ''."""
        return self.invalid_reason or self.unsupported


_POD_SLOTS: Final = tuple(f.name for f in fields(Pod))


class GangMode(enum.StrEnum):
    STRICT = "Strict"
    NON_STRICT = "NonStrict"


@dataclass(frozen=True, slots=True)
class RoleSpec:
    name: str
    min_member: int


@dataclass(frozen=True, slots=True)
class TopologySpec:
    """Task topology within a gang: roles that should share nodes, and roles that should not."""

    affinity: tuple[tuple[str, ...], ...] = ()
    anti_affinity: tuple[tuple[str, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class GangSpec:
    """What the core needs from a PodGroup (or an annotation-declared group)."""

    key: str  # "namespace/name"
    min_member: int = 1
    min_resources: Mapping[str, int] = field(default_factory=dict)
    timeout_seconds: float | None = None  # None: the scheduler-wide default
    created: float = 0.0
    mode: GangMode = GangMode.STRICT
    roles: tuple[RoleSpec, ...] = ()
    gang_group: tuple[str, ...] = ()  # keys of gangs that must all be satisfied together
    topology: TopologySpec = field(default_factory=TopologySpec)
    # Topology-aware placement of the whole gang (and of its slices) in the nodes' topology.
    domain: DomainConstraint = field(default_factory=DomainConstraint)
    # After the gang has once been satisfied, replacement members schedule on their own.
    once_satisfied_alone: bool = True
    # Spec errors found while translating; a gang with an error is never scheduled.
    invalid_reason: str = ""
    # False: the gang never preempts others, whatever its priority (the PodGroup's opt-out;
    # a member with preemptionPolicy Never opts the whole gang out too).
    preempt: bool = True
    # How long a run of the gang is expected to take, when its PodGroup says (backfill: a
    # gang that ends before a reservation is complete may use the reserved capacity).
    expected_runtime_seconds: float | None = None
    # What follows when a gang that ran has fewer than minMember members running or
    # succeeded: "None" (its controller decides) or "RestartGang" (delete the rest).
    on_member_loss: str = "None"

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    @property
    def name(self) -> str:
        return self.key.partition("/")[2]

    # ---- quorum: the one rule every part of the scheduler asks -----------------------------
    def quorum(self, count: int, by_role: Mapping[str, int]) -> bool:
        """``count`` members (of whatever state the caller counts: bound, up, live, held),
        ``by_role`` of them per role, reach the gang's quorum: at least minMember in all and
        each role's own minimum. O(roles)."""
        return count >= self.min_member and all(
            by_role.get(r.name, 0) >= r.min_member for r in self.roles
        )

    def missing(self, count: int, by_role: Mapping[str, int]) -> tuple[int, dict[str, int]]:
        """How far ``count`` members (``by_role`` per role) are from the quorum: (overall,
        per role short of its minimum). (0, {}) exactly when ``quorum`` holds."""
        need = max(0, self.min_member - count)
        per_role = {
            r.name: r.min_member - by_role.get(r.name, 0)
            for r in self.roles
            if by_role.get(r.name, 0) < r.min_member
        }
        return need, per_role


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as preemption reads it: which pods it covers (in its namespace)
    and how many of them may still be disrupted (``status.disruptionsAllowed``). As in
    kube-scheduler's preemption, a nil or empty selector matches nothing."""

    namespace: str
    name: str
    selector: LabelSelector | None
    allowed: int
