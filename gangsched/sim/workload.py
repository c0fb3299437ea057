"""The simulator's workload file: nodes, gangs and plain pods with arrival times and durations.

YAML (or JSON) validated by pydantic; every error names the field. See docs/simulator.md.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from gangsched.core.model import DomainConstraint
from gangsched.core.quantity import QuantityError
from gangsched.core.resources import CPU, GPU, MEMORY, PODS, parse_amount
from gangsched.sim.topology import Racks, check_label_key

__all__ = [
    "GangDef",
    "NodeDef",
    "NodeTopology",
    "PodDef",
    "PodTemplate",
    "SlicesDef",
    "TopologyPlacementDef",
    "TraceNodes",
    "TracePods",
    "Workload",
    "WorkloadError",
    "load_workload",
]


class WorkloadError(ValueError):
    pass


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


def _check_quantity(name: str, value: Any) -> Any:
    if value is None:
        return value
    try:
        parse_amount(name, value, name)
    except QuantityError as e:
        raise ValueError(str(e)) from None
    return value


class Resources(_Strict):
    cpu: str | int | float = "1"
    memory: str | int = "1Gi"
    gpus: int = Field(0, ge=0)
    extra: dict[str, str | int] = Field(default_factory=dict)

    @field_validator("cpu")
    @classmethod
    def _cpu(cls, v: Any) -> Any:
        return _check_quantity(CPU, v)

    @field_validator("memory")
    @classmethod
    def _mem(cls, v: Any) -> Any:
        return _check_quantity(MEMORY, v)

    def as_requests(self) -> dict[str, int]:
        out = {
            CPU: parse_amount(CPU, self.cpu, "cpu"),
            MEMORY: parse_amount(MEMORY, self.memory, "memory"),
        }
        if self.gpus:
            out[GPU] = self.gpus
        for k, v in self.extra.items():
            out[k] = parse_amount(k, v, f"extra.{k}")
        return out


class DevicesDef(_Strict):
    """Devices a DRA driver publishes for each node of the entry, as one node-local
    ResourceSlice: ``count`` devices ``<prefix>-<i>``, each with the same ``attributes`` and
    ``capacity`` (values as a ResourceSlice writes them: ``{string: ...}``, ``{int: ...}``,
    ``{bool: ...}``, ``{version: ...}``; ``{value: ...}`` for a capacity). Read by the
    scheduler's own ResourceSlice reader."""

    driver: str
    count: int = Field(1, ge=1, le=1024)
    prefix: str = "gpu"
    attributes: dict[str, dict[str, Any]] = Field(default_factory=dict)
    capacity: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # what each device takes from the node's counter sets while allocated (a partitionable
    # pool), as a ResourceSlice writes it: [{counterSet: ..., counters: {name: {value: ...}}}]
    consumes_counters: list[dict[str, Any]] = Field(default_factory=list, alias="consumesCounters")


class CounterSetDef(_Strict):
    """A counter set of a driver's pool on each node of the entry (``sharedCounters``, in a
    slice of its own): ``counters`` as a ResourceSlice writes them (``{memory: {value:
    80Gi}}``)."""

    driver: str
    name: str
    counters: dict[str, dict[str, Any]]


class SharedDevicesDef(_Strict):
    """Devices for many nodes (a slice with a node selector, or for every node): ``count``
    devices ``<prefix>-<i>`` that every node whose labels include ``nodeLabels`` reaches
    (every node when it is empty)."""

    driver: str
    pool: str
    count: int = Field(1, ge=1, le=1024)
    prefix: str = "device"
    node_labels: dict[str, str] = Field(default_factory=dict, alias="nodeLabels")
    attributes: dict[str, dict[str, Any]] = Field(default_factory=dict)


class NodeDef(Resources):
    name: str
    count: int = Field(1, ge=1, le=100_000)
    cpu: str | int | float = "64"
    memory: str | int = "256Gi"
    pods: int = Field(110, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[dict[str, str]] = Field(default_factory=list)
    devices: list[DevicesDef] = Field(default_factory=list)  # DRA devices, per node
    counter_sets: list[CounterSetDef] = Field(default_factory=list, alias="counterSets")

    def allocatable(self) -> dict[str, int]:
        out = self.as_requests()
        out[PODS] = self.pods
        return out


class TraceNodes(_Strict):
    """Nodes from a trace inventory CSV (openb_node_list_*.csv or spotgpu_node_info.csv)."""

    trace: str
    limit: int | None = Field(None, ge=1)
    memory_per_cpu: str = "4Gi"  # spotgpu rows carry no memory figure


class PodTemplate(Resources):
    count: int = Field(1, ge=1, le=10_000)
    role: str = ""
    node_selector: dict[str, str] = Field(default_factory=dict, alias="nodeSelector")
    labels: dict[str, str] = Field(default_factory=dict)  # e.g. the slice label of a slice
    # ResourceClaimTemplates' specs as written (``{devices: {requests: [...], constraints:
    # [...]}}``): each pod gets a claim of each, read by the scheduler's own claim reader.
    resource_claims: list[dict[str, Any]] = Field(default_factory=list, alias="resourceClaims")


# A node or pod label key, validated as Kubernetes validates one.
LabelKey = Annotated[str, AfterValidator(check_label_key)]


class SlicesDef(_Strict):
    """``topologyPlacement.slices``: members sharing the value of pod label ``podLabel`` (or
    runs of ``size`` members, in the order the gang's pods are listed) each in one domain of
    ``required``."""

    pod_label: LabelKey | None = Field(None, alias="podLabel")
    size: int | None = Field(None, ge=1)
    required: LabelKey

    @model_validator(mode="after")
    def _one(self) -> SlicesDef:
        if (self.pod_label is None) == (self.size is None):
            raise ValueError("set exactly one of podLabel and size")
        return self


class TopologyPlacementDef(_Strict):
    """A gang's ``topologyPlacement``, as in the PodGroup's ``spec.topologyPlacement``: at most
    one of ``required`` / ``preferred`` (a topology level, a node label key), and optional
    ``slices``."""

    required: LabelKey | None = None
    preferred: LabelKey | None = None
    slices: SlicesDef | None = None

    @model_validator(mode="after")
    def _one(self) -> TopologyPlacementDef:
        if self.required is not None and self.preferred is not None:
            raise ValueError("set at most one of required and preferred")
        return self

    def constraint(self) -> DomainConstraint:
        s = self.slices
        return DomainConstraint(
            required=self.required or "",
            preferred=self.preferred or "",
            slice_required=s.required if s else "",
            slice_label=(s.pod_label or "") if s else "",
            slice_size=(s.size or 0) if s else 0,
        )


class TopologyLabels(_Strict):
    rack: LabelKey
    block: LabelKey | None = None


class NodeTopology(_Strict):
    """Racks (and blocks) synthesised over every node, in inventory order: the traces carry no
    topology. Each node also gets ``kubernetes.io/hostname``; labels a node sets win."""

    rack_size: int = Field(alias="rackSize", ge=1, le=100_000)
    racks_per_block: int | None = Field(None, alias="racksPerBlock", ge=1, le=100_000)
    labels: TopologyLabels

    @model_validator(mode="after")
    def _block(self) -> NodeTopology:
        if (self.racks_per_block is None) != (self.labels.block is None):
            raise ValueError("racksPerBlock and labels.block go together: set both or neither")
        return self

    def racks(self) -> Racks:
        return Racks(
            self.rack_size, self.labels.rack, self.racks_per_block or 0, self.labels.block or ""
        )


class MemberFailureDef(_Strict):
    """``members`` running members of a gang fail ``after`` seconds after it first starts
    (their containers exit with an error); their controller makes them again."""

    after: float = Field(ge=0)
    members: int = Field(1, ge=1)


# The fields of a gang that say what its PodGroup's spec says (the shorthand): a gang that
# embeds the PodGroup's ``spec:`` itself sets none of them.
PODGROUP_SHORTHAND = (
    "min_member",
    "timeout_seconds",
    "expected_runtime_seconds",
    "mode",
    "roles",
    "topology",
    "gang_group",
    "topology_placement",
    "on_member_loss",
)


class GangDef(_Strict):
    """A gang: its PodGroup (``spec:``, exactly as a gangsched.io/v1alpha1 PodGroup's spec is
    written, or the shorthand fields below), its pods and its timing."""

    name: str
    namespace: str = "default"
    arrival: float = Field(0.0, ge=0)
    duration: float = Field(600.0, gt=0)
    min_member: int | None = Field(None, ge=1, alias="minMember")
    timeout_seconds: float | None = Field(None, gt=0, alias="timeoutSeconds")
    priority: int = 0
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = Field(
        "PreemptLowerPriority", alias="preemptionPolicy"
    )
    # the PodGroup's expected run time (backfill next to a reservation); none by default
    expected_runtime_seconds: float | None = Field(None, gt=0, alias="expectedRuntimeSeconds")
    mode: Literal["Strict", "NonStrict"] = "Strict"
    roles: dict[str, int] = Field(default_factory=dict)  # role -> its own minMember
    topology: dict[str, list[list[str]]] = Field(default_factory=dict)
    gang_group: list[str] = Field(default_factory=list, alias="gangGroup")
    topology_placement: TopologyPlacementDef | None = Field(None, alias="topologyPlacement")
    # The PodGroup's spec.onMemberLoss: what follows when members of the running gang are lost.
    on_member_loss: Literal["None", "RestartGang"] = Field("None", alias="onMemberLoss")
    member_failures: list[MemberFailureDef] = Field(default_factory=list, alias="memberFailures")
    # The PodGroup's spec as written (gangsched.io/v1alpha1), read by the scheduler's own reader.
    spec: dict[str, Any] | None = None
    pods: list[PodTemplate]

    @model_validator(mode="after")
    def _spec_or_shorthand(self) -> GangDef:
        if self.spec is not None:
            both = sorted(
                GangDef.model_fields[f].alias or f
                for f in PODGROUP_SHORTHAND
                if f in self.model_fields_set
            )
            if both:
                raise ValueError(f"with spec, set {', '.join(both)} in the spec instead")
        return self

    @model_validator(mode="after")
    def _min(self) -> GangDef:
        total = sum(p.count for p in self.pods)
        if self.min_member is not None and self.min_member > total:
            raise ValueError(f"minMember {self.min_member} exceeds the {total} pods declared")
        return self

    @property
    def total(self) -> int:
        return sum(p.count for p in self.pods)


class PodDef(Resources):
    name: str
    namespace: str = "default"
    arrival: float = Field(0.0, ge=0)
    duration: float = Field(600.0, gt=0)
    priority: int = 0
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = Field(
        "PreemptLowerPriority", alias="preemptionPolicy"
    )
    # A stream: ``repeat`` pods like this, named <name>-0 ... <name>-<repeat-1>, the i-th
    # arriving at ``arrival + i * every``.
    repeat: int = Field(1, ge=1, le=1_000_000)
    every: float = Field(0.0, ge=0)


class TracePods(_Strict):
    """Tasks from an openb pod list. Each task is one pod on one node (see docs/simulator.md,
    Trace rules): N whole GPUs as ``nvidia.com/gpu: N``, a share of one GPU as Koordinator's
    ``koordinator.sh/gpu-core`` percent, no GPU as a plain CPU pod; ``multi_gpu: gang`` makes
    a task of N >= 2 whole GPUs a gang of N one-GPU workers instead."""

    trace: str
    limit: int | None = Field(None, ge=1)
    # Leave out tasks without a GPU. Default: true for ``timeline`` and ``saturate``; false
    # for ``sample``, which draws from the whole pod list as the openb paper's simulator does.
    gpu_only: bool | None = None
    time_scale: float = Field(1.0, gt=0)  # divide every trace time by this
    # Divide arrival times (only) by this: > 1 compresses arrivals, so demand exceeds capacity
    # as in the openb paper's fragmentation experiments.
    arrival_scale: float = Field(1.0, gt=0)
    max_duration: float | None = Field(None, gt=0)
    # timeline: arrivals and durations from the trace. saturate: tasks in trace order, one
    # every ``interval`` seconds, never finishing, until their GPU demand reaches ``load``
    # times the cluster's GPU capacity. sample: the same, but each task drawn at random (with
    # replacement, from ``seed``) from the pod list, as the openb paper's simulator does.
    replay: Literal["timeline", "saturate", "sample"] = "timeline"
    interval: float = Field(1.0, gt=0)
    # Default: 1.2 for saturate, 1.0 for sample.
    load: float | None = Field(None, gt=0, le=10)
    seed: int = Field(1, ge=0)
    # pod: a task of N GPUs is one pod asking for N (it needs one node). gang: N one-GPU
    # workers in a gang of minMember N, which may spread over nodes.
    multi_gpu: Literal["pod", "gang"] = Field("pod", alias="multiGpu")

    @property
    def skip_cpu_only(self) -> bool:
        return self.gpu_only if self.gpu_only is not None else self.replay != "sample"

    @property
    def load_factor(self) -> float:
        if self.load is not None:
            return self.load
        return 1.0 if self.replay == "sample" else 1.2


class Workload(_Strict):
    name: str = "workload"
    description: str = ""
    nodes: list[NodeDef | TraceNodes] = Field(default_factory=list)
    node_topology: NodeTopology | None = Field(None, alias="nodeTopology")
    gangs: list[GangDef] = Field(default_factory=list)
    pods: list[PodDef] = Field(default_factory=list)
    trace_pods: TracePods | None = Field(None, alias="tracePods")
    # DeviceClasses as written (``{name: ..., selectors: [CEL expression, ...]}``), for the
    # pods' resource claims.
    device_classes: list[dict[str, Any]] = Field(default_factory=list, alias="deviceClasses")
    shared_devices: list[SharedDevicesDef] = Field(default_factory=list, alias="sharedDevices")
    settings: dict[str, Any] = Field(default_factory=dict)
    # How long an evicted (preempted) pod takes to go once its deletion is asked for.
    termination_grace_period_seconds: float = Field(
        0.0, ge=0, le=86400, alias="terminationGracePeriodSeconds"
    )
    # Every job declares how long it runs, exactly: a gang's expectedRuntimeSeconds (where it
    # sets none), a plain or trace pod's activeDeadlineSeconds (its duration).
    declare_runtimes: bool = Field(False, alias="declareRuntimes")
    # At each job's first failure, the core's start forecast (core/forecast.py) is asked for
    # and kept, to be set beside the actual start in the summary.
    forecast: bool = False

    @model_validator(mode="after")
    def _unique(self) -> Workload:
        seen: set[str] = set()
        for g in self.gangs:
            key = f"{g.namespace}/{g.name}"
            if key in seen:
                raise ValueError(f"gang {key} is declared twice")
            seen.add(key)
        return self


def trace_dirs(base: Path) -> list[Path]:
    dirs = [base]
    env = os.environ.get("GANGSCHED_TRACE_DIR")
    if env:
        dirs.append(Path(env))
    repo = Path(__file__).resolve().parents[2]
    dirs.append(repo / "examples" / "traces")
    return dirs


def resolve_trace(name: str, base: Path) -> Path:
    p = Path(name)
    if p.is_absolute():
        if p.exists():
            return p
        raise WorkloadError(f"trace file {name} not found")
    for d in trace_dirs(base):
        if (d / p).exists():
            return d / p
    looked = ", ".join(str(d) for d in trace_dirs(base))
    raise WorkloadError(
        f"trace file {name} not found (looked in {looked}; set GANGSCHED_TRACE_DIR)"
    )


def load_workload(path: str | Path) -> tuple[Workload, Path]:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as e:
        raise WorkloadError(f"{path}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise WorkloadError(f"{path}: not valid YAML: {e}") from None
    if not isinstance(raw, dict):
        raise WorkloadError(f"{path}: expected a mapping at the top level")
    try:
        return Workload.model_validate(raw), path.parent
    except ValidationError as e:
        lines = [f"  {'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()]
        raise WorkloadError(f"{path}: invalid workload:\n" + "\n".join(lines)) from None
