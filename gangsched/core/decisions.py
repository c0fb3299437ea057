"""What the core asks the outside world to do. Adapters carry these out; the simulator
applies them to its in-memory cluster."""

from __future__ import annotations

from dataclasses import dataclass

from gangsched.core.model import Pod
from gangsched.core.resourceclaims import Claim, ClaimAllocation

__all__ = [
    "BindGang",
    "Binding",
    "ClaimBinding",
    "ClaimWrite",
    "Decision",
    "DeviceConflict",
    "Evict",
    "GangTimedOut",
    "GangUnschedulable",
    "GangWaiting",
    "MemberLoss",
    "PodRef",
    "Preempt",
    "Victim",
    "pod_ref",
]


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str


def pod_ref(pod: Pod) -> PodRef:
    """How a decision names a pod."""
    return PodRef(pod.uid, pod.namespace, pod.name)


@dataclass(frozen=True, slots=True)
class Binding:
    pod: PodRef
    node: str
    # The GPU devices (indexes) the pod's shares were placed on, for pods that ask through
    # the sharing convention (recorded in the pod by the adapter); empty otherwise.
    devices: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimBinding:
    """PreBind for one PersistentVolumeClaim, as kube-scheduler's volume binder does it:
    pre-bind the static PersistentVolume ``volume`` to the claim (its ``claimRef``), or, when
    ``volume`` is empty, ask for the claim to be provisioned on ``node`` (the
    ``volume.kubernetes.io/selected-node`` annotation); then wait until the claim is bound."""

    namespace: str
    claim: str
    claim_uid: str
    node: str
    volume: str = ""


@dataclass(frozen=True, slots=True)
class ClaimWrite:
    """PreBind for one resource claim (Dynamic Resource Allocation): write its
    ``status.allocation`` (the devices chosen, on ``allocation.node``) unless the claim is
    allocated already (then to this same allocation), and add ``pods`` (uids) to its
    consumers (``status.reservedFor``), with the claim's ``uid`` as the precondition."""

    claim: str  # namespace/name
    uid: str
    allocation: ClaimAllocation
    pods: tuple[str, ...]
    # DRA extended resources: the claim serves the extended resources of the pod ``made_for``
    # (uid), whose ``status.extendedResourceClaimStatus`` is then written to name it, with
    # ``mappings`` (container, resource, request); ``create``: the claim as the core made
    # it, to be created first (``claim`` is then its generateName)
    made_for: str = ""
    mappings: tuple[tuple[str, str, str], ...] = ()
    create: Claim | None = None


@dataclass(frozen=True, slots=True)
class BindGang:
    """Bind all of these now. The gang has reached quorum with these reservations.

    ``volumes`` must be carried out first, for the whole gang: only once every claim is bound
    are the pods bound; if that fails or times out, no pod is bound and every reservation is
    released (``bind_failed``)."""

    gang: str
    bindings: tuple[Binding, ...]
    volumes: tuple[ClaimBinding, ...] = ()
    # Resource claims to allocate first, every one before any pod binds (none is written yet).
    claims: tuple[ClaimWrite, ...] = ()


@dataclass(frozen=True, slots=True)
class GangUnschedulable:
    """An attempt failed (or could not start). ``reason`` is a short CamelCase word:
    Unschedulable, WaitingForMembers, PodGroupNotFound, InvalidSpec, InvalidPod."""

    gang: str
    pods: tuple[PodRef, ...]
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class GangWaiting:
    """Reservations are held at Permit until ``deadline``."""

    gang: str
    reserved: int
    deadline: float
    message: str


@dataclass(frozen=True, slots=True)
class GangTimedOut:
    """Every reservation of a waiting gang was released: at its Permit deadline (reason
    ``Timeout``), or because a node or the PodGroup it relied on went away (``Released``)."""

    gang: str
    released: tuple[PodRef, ...]
    message: str
    reason: str = "Timeout"


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod to evict so that a gang of higher priority fits. ``gang`` is the victim's own
    gang key (a plain pod's is empty)."""

    pod: PodRef
    node: str
    priority: int
    gang: str = ""
    # It carries this scheduler's preemption mark already (an eviction being carried out
    # again): the adapter leaves the mark as it is.
    marked: bool = False


@dataclass(frozen=True, slots=True)
class Preempt:
    """Gang ``gang`` (priority ``priority``) fits once ``victims`` are gone. The adapter marks
    each victim (a ``DisruptionTarget`` condition, reason ``PreemptionByScheduler``, and a
    ``Preempted`` event carrying ``message``) and deletes it with its graceful termination;
    it sets ``status.nominatedNodeName`` on each preemptor pod in ``nominations``. The core
    holds the nominated capacity for the gang (no gang of lower priority may take it) until
    the victims are gone, then binds the gang whole with an ordinary ``BindGang``, or gives
    the capacity back at ``deadline``."""

    gang: str
    priority: int
    nominations: tuple[Binding, ...]
    victims: tuple[Victim, ...]
    deadline: float
    message: str


@dataclass(frozen=True, slots=True)
class MemberLoss:
    """A gang that had reached quorum has fewer than ``min_member`` members running or
    succeeded (a member failed or was deleted). The adapter records it (an event, and the
    PodGroup's status from ``group_status``); under the ``RestartGang`` policy it deletes the
    members in ``restart`` (every member left that holds a node) so that their controller
    recreates them and the gang is scheduled again whole. ``members``: every member left that
    has not finished and is not being deleted (the event goes on each). The rule is
    core/lifecycle.py's."""

    gang: str
    running: int
    min_member: int
    message: str
    restart: tuple[PodRef, ...] = ()
    members: tuple[PodRef, ...] = ()


@dataclass(frozen=True, slots=True)
class Evict:
    """Carry out an eviction decided earlier and not finished: a preemption interrupted after
    it marked some of its victims (the process crashed, or lost its lease), or a victim whose
    deletion failed. The adapter marks each victim not marked yet as a preemption does, then
    deletes them all (core/eviction.py has the rule). ``gang``: the victims' gang (or gang
    group) key, '' for a pod alone; ``message``: why, for the victims' events."""

    gang: str
    victims: tuple[Victim, ...]
    message: str


@dataclass(frozen=True, slots=True)
class DeviceConflict:
    """A running pod's GPU devices, as recorded (or as what the records leave for a pod
    without one), over-commit a device of ``node``: the records are kept as they are (a
    recorded share is never moved) and the adapter reports it (a Warning event on the pod and
    a metric). ``gang``: the pod's gang key, '' for a pod alone."""

    gang: str
    pod: PodRef
    node: str
    devices: tuple[int, ...]
    message: str


Decision = (
    BindGang
    | GangUnschedulable
    | GangWaiting
    | GangTimedOut
    | Preempt
    | MemberLoss
    | Evict
    | DeviceConflict
)
