"""Topology-aware placement as each convention writes it, read into a ``DomainConstraint``.

- gangsched's PodGroup: ``spec.topologyPlacement`` with ``required`` or ``preferred`` (a node
  label key) and optional ``slices: {podLabel | size, required}``.
- The upstream PodGroup (``scheduling.k8s.io``, gate TopologyAwareWorkloadScheduling):
  ``spec.schedulingConstraints.topology[0].key``, every member in one domain of it (required).
- Kueue's podset annotations on the pods: ``kueue.x-k8s.io/podset-required-topology``,
  ``podset-preferred-topology``, ``podset-slice-required-topology`` with ``podset-slice-size``.
- LeaderWorkerSet's ``leaderworkerset.sigs.k8s.io/exclusive-topology`` on a group's leader
  (with ``leaderworkerset.sigs.k8s.io/size``): a leader-first gang (core/leaderfirst.py).

Every reader raises ``ValueError`` naming the field for what it cannot honour.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from gangsched.core.labels import valid_label_key
from gangsched.core.model import DomainConstraint, LeaderFirst

__all__ = [
    "COMPLETION_INDEX",
    "KUEUE_PREFERRED",
    "KUEUE_REQUIRED",
    "KUEUE_SLICE_REQUIRED",
    "KUEUE_SLICE_SIZE",
    "completion_index",
    "kueue_domain",
    "podgroup_domain",
    "shown",
    "upstream_domain",
]

KUEUE_REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_SLICE_REQUIRED: Final = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"


# The most of a user's value a message shows: the messages land in events and the PodGroup's
# status, which must not echo an arbitrarily long value.
SHOWN_MAX = 63


def shown(v: object) -> str:
    """``repr(v)`` for a message, bounded: a longer string is cut to its first ``SHOWN_MAX``
    characters with an ellipsis and its length; any other value to as many characters."""
    if isinstance(v, str):
        if len(v) <= SHOWN_MAX:
            return repr(v)
        return f"{v[:SHOWN_MAX] + '...'!r} ({len(v)} characters)"
    if isinstance(v, int) and not isinstance(v, bool) and v.bit_length() > 200:
        return f"<integer of {v.bit_length()} bits>"
    try:
        text = repr(v)
    except ValueError:  # a container holding an integer too long to print
        return f"<unprintable {type(v).__name__}>"
    return text if len(text) <= SHOWN_MAX else text[:SHOWN_MAX] + "..."


def _label_key(v: object, field: str) -> str:
    """A node or pod label key, as Kubernetes validates one."""
    if not isinstance(v, str) or not v:
        raise ValueError(f"{field}: expected a label key, got {shown(v)}")
    if not valid_label_key(v):
        raise ValueError(
            f"{field}: {shown(v)} is not a valid label key (an optional DNS subdomain prefix of "
            "at most 253 characters and '/', then a name of at most 63 characters)"
        )
    return v


def _only(raw: Mapping[str, object], allowed: tuple[str, ...], field: str) -> None:
    unknown = sorted(shown(k) for k in raw if k not in allowed)
    if unknown:
        raise ValueError(
            f"{field}: unknown field(s) [{', '.join(unknown)}]; known: {list(allowed)}"
        )


def podgroup_domain(raw: object, field: str = "spec.topologyPlacement") -> DomainConstraint:
    """gangsched's ``spec.topologyPlacement``; absent (None) is no constraint."""
    if raw is None:
        return DomainConstraint()
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field}: expected an object, got {shown(raw)}")
    _only(raw, ("required", "preferred", "slices"), field)
    required = raw.get("required")
    preferred = raw.get("preferred")
    if required is not None and preferred is not None:
        raise ValueError(f"{field}: set at most one of required and preferred")
    out = DomainConstraint(
        required=_label_key(required, f"{field}.required") if required is not None else "",
        preferred=_label_key(preferred, f"{field}.preferred") if preferred is not None else "",
    )
    slices = raw.get("slices")
    if slices is None:
        return out
    where = f"{field}.slices"
    if not isinstance(slices, Mapping):
        raise ValueError(f"{where}: expected an object, got {shown(slices)}")
    _only(slices, ("podLabel", "size", "required"), where)
    label, size = slices.get("podLabel"), slices.get("size")
    if (label is None) == (size is None):
        raise ValueError(f"{where}: set exactly one of podLabel and size")
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"{where}.size: expected an integer >= 1, got {shown(size)}")
    return DomainConstraint(
        required=out.required,
        preferred=out.preferred,
        slice_required=_label_key(slices.get("required"), f"{where}.required"),
        slice_label=_label_key(label, f"{where}.podLabel") if label is not None else "",
        slice_size=size if isinstance(size, int) else 0,
    )


def upstream_domain(spec: Mapping[str, object]) -> DomainConstraint:
    """The upstream PodGroup's ``spec.schedulingConstraints.topology`` (at most one entry):
    all members in one domain of its key."""
    raw = spec.get("schedulingConstraints")
    if raw is None:
        return DomainConstraint()
    field = "spec.schedulingConstraints"
    if not isinstance(raw, Mapping):
        raise ValueError(f"{field}: expected an object, got {shown(raw)}")
    topology = raw.get("topology")
    if topology is None:
        return DomainConstraint()
    if not isinstance(topology, list):
        raise ValueError(f"{field}.topology: expected a list, got {shown(topology)}")
    if len(topology) > 1:
        raise ValueError(f"{field}.topology: at most one entry, got {len(topology)}")
    if not topology:
        return DomainConstraint()
    entry = topology[0]
    if not isinstance(entry, Mapping):
        raise ValueError(f"{field}.topology[0]: expected an object, got {shown(entry)}")
    return DomainConstraint(required=_label_key(entry.get("key"), f"{field}.topology[0].key"))


def kueue_domain(annotations: Mapping[str, str]) -> DomainConstraint:
    """Kueue's podset topology annotations on a pod (its Job's pod template carries them)."""
    field = "metadata.annotations"
    required = annotations.get(KUEUE_REQUIRED)
    preferred = annotations.get(KUEUE_PREFERRED)
    slice_required = annotations.get(KUEUE_SLICE_REQUIRED)
    if required is None and preferred is None and slice_required is None:
        return DomainConstraint()
    if required is not None and preferred is not None:
        raise ValueError(f"{field}: set at most one of {KUEUE_REQUIRED} and {KUEUE_PREFERRED}")
    size = 0
    if slice_required is not None:
        raw = annotations.get(KUEUE_SLICE_SIZE)
        if raw is None:
            raise ValueError(f"{field}[{KUEUE_SLICE_SIZE}]: required with {KUEUE_SLICE_REQUIRED}")
        if not raw.isdigit() or int(raw) < 1:
            raise ValueError(
                f"{field}[{KUEUE_SLICE_SIZE}]: expected an integer >= 1, got {shown(raw)}"
            )
        size = int(raw)
    return DomainConstraint(
        required=_label_key(required, f"{field}[{KUEUE_REQUIRED}]") if required else "",
        preferred=_label_key(preferred, f"{field}[{KUEUE_PREFERRED}]") if preferred else "",
        slice_required=(
            _label_key(slice_required, f"{field}[{KUEUE_SLICE_REQUIRED}]") if slice_required else ""
        ),
        slice_size=size,
    )


def completion_index(annotations: Mapping[str, str], labels: Mapping[str, str]) -> int:
    """The pod's index in an indexed Job, or -1 (none, or unreadable: the order then falls
    back to pod names, which is not an error)."""
    raw = annotations.get(COMPLETION_INDEX, labels.get(COMPLETION_INDEX, ""))
    return int(raw) if raw.isdigit() else -1


# LeaderWorkerSet: the exclusive topology of a group, its size, and the worker index (0: leader)
LWS_EXCLUSIVE: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
LWS_SIZE: Final = "leaderworkerset.sigs.k8s.io/size"
LWS_WORKER_INDEX: Final = "leaderworkerset.sigs.k8s.io/worker-index"


def lws_leader_first(
    annotations: Mapping[str, str], labels: Mapping[str, str]
) -> LeaderFirst | None:
    """The leader of a LeaderWorkerSet group with exclusive topology (LWS creates the group's
    workers only once the leader is bound, pinned to its domain), or None. Raises
    ``ValueError`` for an unreadable topology key or size."""
    level = annotations.get(LWS_EXCLUSIVE)
    if level is None or labels.get(LWS_WORKER_INDEX) != "0":
        return None
    field = "metadata.annotations"
    key = _label_key(level, f"{field}[{LWS_EXCLUSIVE}]")
    raw = annotations.get(LWS_SIZE, "")
    if not raw.isdigit():
        raise ValueError(f"{field}[{LWS_SIZE}]: expected the group's size, got {shown(raw)}")
    size = int(raw)
    return LeaderFirst(key, size) if size >= 2 else None
