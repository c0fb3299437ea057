"""What the core asks the outside world to do. Adapters carry these out; the simulator
applies them to its in-memory cluster."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "BindGang",
    "Binding",
    "ClaimBinding",
    "Decision",
    "GangTimedOut",
    "GangUnschedulable",
    "GangWaiting",
    "PodRef",
]


@dataclass(frozen=True, slots=True)
class PodRef:
    uid: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class Binding:
    pod: PodRef
    node: str


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
class BindGang:
    """Bind all of these now. The gang has reached quorum with these reservations.

    ``volumes`` must be carried out first, for the whole gang: only once every claim is bound
    are the pods bound; if that fails or times out, no pod is bound and every reservation is
    released (``bind_failed``)."""

    gang: str
    bindings: tuple[Binding, ...]
    volumes: tuple[ClaimBinding, ...] = ()


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


Decision = BindGang | GangUnschedulable | GangWaiting | GangTimedOut
