"""A pod (JSON) into the core's ``Pod``, with what it says about its gang.

Nothing here raises on bad input: a pod that cannot be understood becomes a Pod with
``invalid_reason`` set (accounted where it runs, never scheduled, reported with an event).

A readable pod that asks for something gangsched does not implement (a placement-relevant
field that one of kube-scheduler v1.36's default plugins acts on and the core has no plugin
for) gets ``unsupported`` set, naming the field: it is refused the same way, never bound, and
accounted where it runs. The pod's other fields are still read, so a bound pod of that kind
keeps counting for host ports, inter-pod affinity and topology spread.

The fields are read by the modules named for them (``requests``, ``affinity``, ``spread``,
``volumes``, ``membership``, ``topology``, ``gpushare``); this one reads the pod's identity,
status, host ports, scheduling gates and the fields gangsched refuses, and puts them together.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gangsched.api.affinity import placement, pod_affinity
from gangsched.api.dra import pod_claims
from gangsched.api.extended import extended_asks, extended_claim_name
from gangsched.api.fields import (
    Obj,
    SpecError,
    as_list,
    as_map,
    as_written,
    identity,
    nonempty_str,
    scalar_text,
    str_map,
    timestamp,
    unreadable,
)
from gangsched.api.gpushare import devices_from
from gangsched.api.job import controller_job
from gangsched.api.membership import Membership, resolve_membership, scheduling_group
from gangsched.api.requests import effective_requests, zero_share
from gangsched.api.schedulererror import read_scheduler_error as read_held
from gangsched.api.spread import spread
from gangsched.api.topology import completion_index, kueue_domain, lws_leader_first
from gangsched.api.volumes import pod_volumes
from gangsched.core.model import HostPort, Pod, PodPhase, SchedulerError
from gangsched.core.quantity import QuantityError

__all__ = ["PodRead", "pod_from", "read_pod"]


@dataclass(frozen=True, slots=True)
class PodRead:
    """A pod as read: the core's Pod, its gang membership, and a problem the reading ignored
    for the caller to log: why the GPU device record of a bound pod cannot be read ('' when
    it can, or when there is none). Such a record is not the pod's fault, so it is never a
    refusal: the bound pod is counted on the devices the scheduler would pick."""

    pod: Pod
    membership: Membership
    device_record_error: str = ""


_PROTOCOLS = ("TCP", "UDP", "SCTP")
_ANY_IP = "0.0.0.0"


def _port(v: object, field: str) -> int:
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 65535:
        raise SpecError(f"{field}: must be an integer from 0 to 65535, got {as_written(v)}")
    return v


def _host_ports(spec: Obj) -> tuple[HostPort, ...]:
    """The host ports kube-scheduler's NodePorts counts: every ``hostPort`` above 0 of the
    app containers and of the restartable init containers (sidecars), which run for the pod's
    whole life. With ``hostNetwork`` a container port is a host port (the API server defaults
    ``hostPort`` to ``containerPort``; done here too for objects that missed it)."""
    host_network = spec.get("hostNetwork") is True
    out: list[HostPort] = []
    for key in ("initContainers", "containers"):
        for i, c in enumerate(as_list(spec.get(key), f"spec.{key}")):
            c = as_map(c, f"spec.{key}[{i}]")
            if key == "initContainers" and c.get("restartPolicy") != "Always":
                continue
            for j, p in enumerate(as_list(c.get("ports"), f"spec.{key}[{i}].ports")):
                field = f"spec.{key}[{i}].ports[{j}]"
                p = as_map(p, field)
                port = _port(p.get("hostPort"), f"{field}.hostPort")
                if host_network and port == 0:
                    port = _port(p.get("containerPort"), f"{field}.containerPort")
                if port == 0:
                    continue
                protocol = p.get("protocol") or "TCP"
                if not isinstance(protocol, str) or protocol not in _PROTOCOLS:
                    raise SpecError(
                        f"{field}.protocol: must be TCP, UDP or SCTP, got {as_written(protocol)}"
                    )
                ip = p.get("hostIP") or ""
                if not isinstance(ip, str):
                    raise SpecError(f"{field}.hostIP: expected a string, got {as_written(ip)}")
                out.append(HostPort(port, protocol, "" if ip == _ANY_IP else ip))
    return tuple(out)


def _gates(spec: Obj) -> tuple[str, ...]:
    field = "spec.schedulingGates"
    return tuple(
        nonempty_str(as_map(g, f"{field}[{i}]").get("name"), f"{field}[{i}].name")
        for i, g in enumerate(as_list(spec.get("schedulingGates"), field))
    )


def _unsupported_fields(spec: Obj) -> list[str]:
    """Placement-relevant fields of kube-scheduler v1.36's default plugins that gangsched has
    no plugin for, each named with why (volumes are looked at in ``volumes.pod_volumes``)."""
    out: list[str] = []
    # NodeDeclaredFeatures (beta, on by default in v1.36): these fields need nodes that
    # declare a feature in status.declaredFeatures, which gangsched does not read.
    for key in ("initContainers", "containers"):
        for i, c in enumerate(as_list(spec.get(key), f"spec.{key}")):
            c = as_map(c, f"spec.{key}[{i}]")
            rules = as_list(c.get("restartPolicyRules"), f"spec.{key}[{i}].restartPolicyRules")
            for j, rule in enumerate(rules):
                field = f"spec.{key}[{i}].restartPolicyRules[{j}].action"
                if as_map(rule, field).get("action") == "RestartAllContainers":
                    out.append(
                        f"{field}: RestartAllContainers needs a node that declares the "
                        "feature RestartAllContainersOnContainerExits; node declared features "
                        "are not supported by gangsched"
                    )
    if spec.get("hostNetwork") is True and spec.get("hostUsers") is False:
        out.append(
            "spec.hostUsers: a user namespace with hostNetwork needs a node that declares the "
            "feature UserNamespacesHostNetworkSupport; node declared features are not "
            "supported by gangsched"
        )
    return out


def _preemption_policy(v: object) -> str:
    """``spec.preemptionPolicy``: absent is ``PreemptLowerPriority`` (the API server's
    default); a value it should have refused is taken as ``Never``, so nothing is evicted
    on the strength of a field that cannot be read."""
    return "PreemptLowerPriority" if v in (None, "PreemptLowerPriority") else "Never"


def _active_deadline(v: object) -> float | None:
    """``spec.activeDeadlineSeconds``: a positive integer (the API server refuses anything
    else); what cannot be read is taken as not set (it only ever shortens a forecast)."""
    if type(v) is int and v > 0:
        return float(v)
    return None


def _pod_from(obj: Obj) -> PodRead:
    meta = as_map(obj.get("metadata"), "metadata")
    spec = as_map(obj.get("spec"), "spec")
    status = as_map(obj.get("status"), "status")
    raw_ns = meta.get("namespace")
    ns = str(raw_ns) if raw_ns not in (None, "") else "default"
    name = str(meta.get("name", ""))
    uid = str(meta.get("uid", "") or f"{ns}/{name}")
    pod = Pod(
        uid,
        ns,
        name,
        {"pods": 1},
        created=timestamp(meta.get("creationTimestamp")),
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        phase=_phase(status),
        node_name=str(spec.get("nodeName") or ""),
        deleting=bool(meta.get("deletionTimestamp")),
        resource_version=str(meta.get("resourceVersion") or ""),
        preemption_policy=_preemption_policy(spec.get("preemptionPolicy")),
        nominated_node=scalar_text(status.get("nominatedNodeName"), ""),
        disruption=_disruption(status),
        bound_at=_bound_at(status),
        scheduler_error=_held(spec.get("nodeName"), status),
        active_deadline_seconds=_active_deadline(spec.get("activeDeadlineSeconds")),
        owner_job=controller_job(meta.get("ownerReferences")),
    )
    labels = str_map(meta.get("labels"), "metadata.labels")
    annotations = str_map(meta.get("annotations"), "metadata.annotations")
    pod.labels = labels
    try:
        group_name = scheduling_group(spec)
    except ValueError as e:
        raise SpecError(str(e)) from None
    membership = resolve_membership(ns, labels, annotations, pod.created, group_name)
    pod.group, pod.role = membership.key, membership.role
    # The devices a bound pod's GPUs were recorded on. A record on a pending pod means nothing
    # (the binding writes it anew); an unreadable one is not the pod's fault, so it is ignored
    # and the bound pod counted on the devices the scheduler would pick.
    recorded = devices_from(annotations) if pod.node_name else ()
    device_record_error = ""
    if isinstance(recorded, str):
        device_record_error = recorded
    else:
        pod.gpu_devices = recorded
    problems = []
    if membership.error:
        problems.append(membership.error)
    unsupported: list[str] = []

    def resources() -> None:
        pod.requests = effective_requests(spec, status)
        pod.derive_gpu()
        if pod.invalid_reason:  # a GPU request that cannot be honoured, naming the field
            problems.append(pod.invalid_reason)
        if zero := zero_share(spec):
            problems.append(zero)
            pod.gpu = None
        priority = spec.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool):
            raise SpecError(f"spec.priority: expected an integer, got {as_written(priority)}")
        pod.priority = priority
        pod.placement = placement(spec)

    def constraints() -> None:
        pod.pod_affinity = pod_affinity(spec, ns, labels)
        pod.spread = spread(spec, labels)

    def ports() -> None:
        pod.host_ports = _host_ports(spec)

    def gates() -> None:
        pod.gates = _gates(spec)

    def volumes() -> None:
        pod.volumes = pod_volumes(spec, name, unsupported)

    def refused() -> None:
        unsupported[:0] = _unsupported_fields(spec)

    def claims() -> None:
        read = pod_claims(spec, status, ns)
        pod.resource_claims, pod.claims_waiting = read.keys, read.waiting

    def extended() -> None:
        pod.extended = extended_asks(spec)
        pod.extended_claim = extended_claim_name(status)

    def topology() -> None:
        pod.index = completion_index(annotations, labels)
        pod.domain = kueue_domain(annotations)
        pod.leader_first = lws_leader_first(annotations, labels)

    # Each part on its own, so that one bad field leaves the others read (a bound pod with a
    # bad spread constraint still holds its host ports) and every problem is reported.
    for part in (
        resources,
        constraints,
        ports,
        gates,
        volumes,
        refused,
        claims,
        extended,
        topology,
    ):
        try:
            part()
        except (QuantityError, SpecError, TypeError, ValueError) as e:
            problems.append(str(e))
    if problems:  # (a malformed list several parts read is reported once)
        pod.invalid_reason = "; ".join(dict.fromkeys(problems))
    pod.unsupported = "; ".join(unsupported)
    return PodRead(pod, membership, device_record_error)


def _phase(status: Obj) -> PodPhase:
    try:
        return PodPhase(str(status.get("phase", "Pending")))
    except ValueError:
        return PodPhase.UNKNOWN


def _disruption(status: Obj) -> str:
    """The message of a ``DisruptionTarget`` condition that is ``True`` with reason
    ``PreemptionByScheduler`` (a scheduler decided to evict the pod), else ''. Unreadable
    conditions say nothing."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return ""
    for c in conditions:
        if (
            isinstance(c, Mapping)
            and c.get("type") == "DisruptionTarget"
            and c.get("status") == "True"
            and c.get("reason") == "PreemptionByScheduler"
        ):
            return scalar_text(c.get("message"), "") or "(no message)"
    return ""


def _bound_at(status: Obj) -> float:
    """When the ``PodScheduled`` condition turned ``True``, 0 when it has not (or cannot be
    read)."""
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return 0.0
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == "PodScheduled":
            if c.get("status") != "True":
                return 0.0
            return timestamp(c.get("lastTransitionTime"))
    return 0.0


def with_status(pod: Pod, meta: Obj, status: Obj, **changes: Any) -> Pod:
    """A copy of ``pod`` with what a full read takes from the metadata and status but not the
    spec (phase, deletion, resourceVersion, nominated node, preemption mark, when it was
    bound), and ``changes``: for an event that changed nothing else scheduling reads."""
    return replace(
        pod,
        phase=_phase(status),
        deleting=bool(meta.get("deletionTimestamp")),
        resource_version=str(meta.get("resourceVersion") or ""),
        nominated_node=scalar_text(status.get("nominatedNodeName"), ""),
        disruption=_disruption(status),
        bound_at=_bound_at(status),
        scheduler_error=_held(changes.get("node_name", pod.node_name), status),
        **changes,
    )


def _held(node_name: object, status: Obj) -> SchedulerError | None:
    """The record of a failure inside gangsched while deciding the pod's gang, on a pod not
    bound to a node (on a bound one it holds nothing back)."""
    return None if node_name else read_held(status)


def as_bound(pod: Pod, node: str, meta: Obj, status: Obj) -> Pod | None:
    """``pod``, read while it was pending, as its binding to ``node`` left it: a binding sets
    ``spec.nodeName`` and the ``PodScheduled`` condition and nothing else of what scheduling
    reads (the caller has checked that the rest is as it was). None when the pod's GPU device
    record cannot be read: a full read reports that."""
    annotations = meta.get("annotations")
    recorded = devices_from(annotations) if isinstance(annotations, Mapping) else ()
    if isinstance(recorded, str):
        return None
    return with_status(pod, meta, status, node_name=node, gpu_devices=recorded)


def read_pod(obj: Obj) -> PodRead:
    """The core's Pod and what the pod says about its gang. Never raises: a pod that cannot be
    read is returned with ``invalid_reason`` set, accounted where it runs but never scheduled."""
    try:
        return _pod_from(obj)
    except Exception as e:
        ns, name, uid, created = identity(obj)
        spec = obj.get("spec") if isinstance(obj, Mapping) else None
        node = scalar_text(spec.get("nodeName"), "") if isinstance(spec, Mapping) else ""
        sched = scalar_text(spec.get("schedulerName"), "") if isinstance(spec, Mapping) else ""
        pod = Pod(
            uid,
            ns,
            name,
            {"pods": 1},
            created=created,
            scheduler_name=sched or "default-scheduler",
            node_name=node,
            invalid_reason=unreadable(e),
        )
        return PodRead(pod, Membership(error=pod.invalid_reason))


def pod_from(obj: Obj) -> tuple[Pod, Membership]:
    """:func:`read_pod`'s Pod and membership."""
    read = read_pod(obj)
    return read.pod, read.membership
