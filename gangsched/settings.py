"""The daemon's configuration: one pydantic model, from a YAML file, then environment
variables (``GANGSCHED_<FIELD>``, upper snake case), then command-line flags, each overriding
the one before. Invalid configuration fails at start with a message naming the field.
Every field is documented in docs/configuration.md."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Final, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake

from gangsched.core.config import CoreConfig
from gangsched.core.framework import PluginSettings
from gangsched.core.gpu import MEMORY_LABEL
from gangsched.core.labels import valid_label_key
from gangsched.core.model import SpreadConstraint
from gangsched.core.plugins import FILTERS, SCORERS
from gangsched.core.profile import PLACEMENT_PROFILES

__all__ = [
    "CORE_SETTINGS",
    "SIMULATED_SETTINGS",
    "ConfigError",
    "CoreSetting",
    "DefaultSpreadConstraint",
    "Settings",
    "load_settings",
]


class ConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class CoreSetting:
    """Where a setting goes in the core's configuration: the field of CoreConfig (with
    ``plugin``, of its PluginSettings) of the same name as the setting's ``Settings`` field.
    ``simulated``: a workload's ``settings`` may set it (``gangsched simulate``)."""

    plugin: bool = False
    simulated: bool = True


# The settings that the core reads, by their name in the configuration file. Each takes its
# default from the core's field (the core's defaults are the only ones) and Settings.core()
# copies it there. Besides these, placementProfile and scoreWeights (both simulated) make the
# core's score_weights and gpu_candidate_order; every other setting is the adapters'.
CORE_SETTINGS: Final[Mapping[str, CoreSetting]] = MappingProxyType(
    {
        "schedulerName": CoreSetting(simulated=False),
        "defaultScheduleTimeoutSeconds": CoreSetting(),
        "scheduleTimeoutOverrideSeconds": CoreSetting(),
        "backoffInitialSeconds": CoreSetting(),
        "backoffMaxSeconds": CoreSetting(),
        "unschedulableFlushSeconds": CoreSetting(),
        "preemption": CoreSetting(),
        "preemptionHoldSeconds": CoreSetting(),
        "reservationAfterSeconds": CoreSetting(),
        "nodesToScore": CoreSetting(),
        "filters": CoreSetting(),
        "topologyLevels": CoreSetting(),
        "gpuRequestWindow": CoreSetting(plugin=True),
        "hardPodAffinityWeight": CoreSetting(plugin=True, simulated=False),
        "defaultSpreadConstraints": CoreSetting(plugin=True, simulated=False),
        "gpuModelLabel": CoreSetting(plugin=True, simulated=False),
    }
)
# The settings a simulated workload may set (sim/run.py).
SIMULATED_SETTINGS: Final = frozenset(
    {name for name, s in CORE_SETTINGS.items() if s.simulated}
    | {"placementProfile", "scoreWeights"}
)


def _core_default(name: str) -> Any:
    """The default of the core's field for setting ``name`` (camelCase)."""
    where = PluginSettings if CORE_SETTINGS[name].plugin else CoreConfig
    (f,) = (f for f in dataclasses.fields(where) if f.name == to_snake(name))
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _to_core(value: Any) -> Any:
    """A setting's value as the core holds it: lists as tuples, default constraints as the
    core's SpreadConstraint."""
    if isinstance(value, list):
        return tuple(_to_core(v) for v in value)
    if isinstance(value, DefaultSpreadConstraint):
        return value.core()
    return value


def _shown(key: str) -> str:
    return repr(key) if len(key) <= 63 else f"{key[:63] + '...'!r} ({len(key)} characters)"


def _label_key_error(key: str) -> str | None:
    """Why ``key`` is no label key (the check a PodGroup's keys get: core/labels.py)."""
    if valid_label_key(key):
        return None
    return (
        f"{_shown(key)} is not a valid label key (an optional DNS subdomain prefix of at most "
        "253 characters and '/', then a name of at most 63 characters)"
    )


def _label_key(key: str) -> str:
    if error := _label_key_error(key):
        raise ValueError(error)
    return key


# A node label key, as Kubernetes validates one.
LabelKey = Annotated[str, AfterValidator(_label_key)]


class DefaultSpreadConstraint(BaseModel):
    """One entry of ``defaultSpreadConstraints``: kube-scheduler's PodTopologySpread
    ``defaultConstraints``, a topologySpreadConstraint without a selector."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    max_skew: int = Field(ge=1)
    topology_key: LabelKey = Field(min_length=1, max_length=316)
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    min_domains: int | None = Field(None, ge=1)
    node_affinity_policy: Literal["Honor", "Ignore"] = "Honor"
    node_taints_policy: Literal["Honor", "Ignore"] = "Ignore"

    @model_validator(mode="before")
    @classmethod
    def _no_selector(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key in ("labelSelector", "matchLabelKeys"):
                if key in data:
                    raise ValueError(
                        f"{key}: a default constraint must not set a selector; it counts the "
                        "pods of the incoming pod's gang"
                    )
        return data

    @model_validator(mode="after")
    def _check(self) -> DefaultSpreadConstraint:
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError("minDomains can only be set with whenUnsatisfiable DoNotSchedule")
        return self

    def core(self) -> SpreadConstraint:
        return SpreadConstraint(
            max_skew=self.max_skew,
            topology_key=self.topology_key,
            when_unsatisfiable=self.when_unsatisfiable,
            selector=None,
            min_domains=self.min_domains,
            node_affinity_policy=self.node_affinity_policy,
            node_taints_policy=self.node_taints_policy,
        )


class Settings(BaseModel):
    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    scheduler_name: str = Field(_core_default("schedulerName"), min_length=1, max_length=253)
    kubeconfig: str | None = None
    context: str | None = None
    # Gang timing
    default_schedule_timeout_seconds: float = Field(
        _core_default("defaultScheduleTimeoutSeconds"), gt=0, le=86400
    )
    schedule_timeout_override_seconds: float | None = Field(
        _core_default("scheduleTimeoutOverrideSeconds"), gt=0, le=86400
    )
    backoff_initial_seconds: float = Field(_core_default("backoffInitialSeconds"), gt=0, le=3600)
    backoff_max_seconds: float = Field(_core_default("backoffMaxSeconds"), gt=0, le=3600)
    unschedulable_flush_seconds: float = Field(
        _core_default("unschedulableFlushSeconds"), gt=0, le=86400
    )
    # A full cluster: whole-gang preemption, reservations
    preemption: bool = _core_default("preemption")
    preemption_hold_seconds: float = Field(_core_default("preemptionHoldSeconds"), gt=0, le=86400)
    reservation_after_seconds: float | None = Field(
        _core_default("reservationAfterSeconds"), ge=0, le=86400
    )
    # Placement
    nodes_to_score: int = Field(_core_default("nodesToScore"), ge=1, le=100_000)
    filters: list[str] = Field(default_factory=lambda: list(_core_default("filters")), min_length=1)
    # binpack | fgd | spread: the scorers and weights used unless scoreWeights is given.
    placement_profile: Literal["binpack", "fgd", "spread"] = "fgd"
    score_weights: dict[str, int] | None = None  # None: the placement profile's
    # FragmentationGradient: how many recent GPU pods the mix of request classes holds.
    gpu_request_window: int = Field(_core_default("gpuRequestWindow"), ge=1, le=1_000_000)
    # Topology-aware gang placement: node label keys, largest domain first (block, rack, ...)
    topology_levels: list[str] = Field(
        default_factory=lambda: list(_core_default("topologyLevels")), max_length=16
    )
    # Plugin arguments (kube-scheduler's pluginConfig)
    hard_pod_affinity_weight: int = Field(_core_default("hardPodAffinityWeight"), ge=0, le=100)
    # (the core's default is none: a test checks that Settings().core() == CoreConfig())
    default_spread_constraints: list[DefaultSpreadConstraint] = Field(default_factory=list)
    # GPU devices: the node labels that give a node's GPU model and per-device memory (MiB)
    gpu_model_label: LabelKey = Field(_core_default("gpuModelLabel"), min_length=1, max_length=316)
    gpu_memory_label: LabelKey = Field(MEMORY_LABEL, min_length=1, max_length=316)
    # API client
    api_qps: float = Field(50.0, ge=0)
    api_burst: int = Field(100, ge=1)
    max_in_flight: int = Field(128, ge=1, le=1024)
    bind_retries: int = Field(3, ge=0, le=20)
    # how long a gang's pods wait for their devices' binding conditions (DRA) before the
    # attempt is undone
    device_binding_timeout_seconds: float = Field(600.0, gt=0, le=86400)
    # High availability
    leader_elect: bool = False
    lease_name: str = Field("gangsched", min_length=1, max_length=253)
    lease_namespace: str = Field("gangsched-system", min_length=1, max_length=63)
    lease_duration_seconds: float = Field(15.0, gt=0, le=3600)
    renew_deadline_seconds: float = Field(10.0, gt=0, le=3600)
    retry_period_seconds: float = Field(2.0, gt=0, le=3600)
    identity: str | None = None  # default: hostname and process id
    # Process
    http_bind_address: str = Field("0.0.0.0:10261", pattern=r"^(|[^:]*:[0-9]{1,5})$")
    status_controller: bool = True
    status_resync_seconds: float = Field(60.0, ge=0, le=86400)
    # Start forecasts of waiting gangs (status.expectedStart): made when the cluster changed,
    # at most this often (0: none)
    start_forecast_seconds: float = Field(30.0, ge=0, le=86400)
    # A gang gangsched failed on (an error inside the scheduler while deciding it) is held back
    # this long the first time, twice as long each time after (core/steps/quarantine.py)
    scheduler_error_hold_seconds: float = Field(600.0, gt=0, le=86400)
    log_format: Literal["json", "console"] = "json"
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @model_validator(mode="after")
    def _check(self) -> Settings:
        if self.backoff_max_seconds < self.backoff_initial_seconds:
            raise ValueError("backoffMaxSeconds must be >= backoffInitialSeconds")
        if self.http_bind_address:
            port = int(self.http_bind_address.rpartition(":")[2])
            if not 0 < port < 65536:
                raise ValueError(f"httpBindAddress: port {port} is out of range 1-65535")
        if not (
            self.retry_period_seconds < self.renew_deadline_seconds < self.lease_duration_seconds
        ):
            raise ValueError(
                "need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds"
            )
        unknown = [f for f in self.filters if f not in FILTERS]
        if unknown:
            raise ValueError(f"filters: unknown plugin(s) {unknown}; known: {sorted(FILTERS)}")
        weights = self.score_weights or {}
        bad = [s for s in weights if s not in SCORERS]
        if bad:
            known = sorted(SCORERS)
            raise ValueError(f"scoreWeights: unknown plugin(s) {bad}; known: {known}")
        if any(w < 0 for w in weights.values()):
            raise ValueError("scoreWeights: weights must be >= 0")
        for i, key in enumerate(self.topology_levels):
            if error := _label_key_error(key):
                raise ValueError(f"topologyLevels.{i}: {error}")
            if key in self.topology_levels[:i]:
                raise ValueError(f"topologyLevels.{i}: duplicate level {key!r}")
        seen: set[tuple[str, str]] = set()
        for i, c in enumerate(self.default_spread_constraints):
            pair = (c.topology_key, c.when_unsatisfiable)
            if pair in seen:
                raise ValueError(
                    f"defaultSpreadConstraints.{i}: duplicate topologyKey {c.topology_key!r} "
                    f"with whenUnsatisfiable {c.when_unsatisfiable}"
                )
            seen.add(pair)
        return self

    def core(self) -> CoreConfig:
        """The core's configuration: CORE_SETTINGS copied over, and the scorers and GPU
        candidate order of the placement profile (scoreWeights, when set, replaces its
        weights)."""
        profile = PLACEMENT_PROFILES[self.placement_profile]
        weights = profile.score_weights if self.score_weights is None else self.score_weights
        return CoreConfig(
            **self._core_values(plugin=False),
            score_weights=dict(weights),
            gpu_candidate_order=profile.gpu_candidate_order,
            plugin_settings=PluginSettings(**self._core_values(plugin=True)),
        )

    def _core_values(self, *, plugin: bool) -> dict[str, Any]:
        return {
            to_snake(name): _to_core(getattr(self, to_snake(name)))
            for name, where in CORE_SETTINGS.items()
            if where.plugin == plugin
        }


def _env_name(field: str) -> str:
    return "GANGSCHED_" + field.upper()


def _from_env(env: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, info in Settings.model_fields.items():
        raw = env.get(_env_name(name))
        if raw is None:
            continue
        if info.annotation in (list[str],):
            out[name] = [x.strip() for x in raw.split(",") if x.strip()]
        elif info.annotation == float | None and raw.strip().lower() in ("", "null", "none"):
            out[name] = None  # a setting that null turns off
        elif name in ("score_weights", "default_spread_constraints"):
            try:
                out[name] = yaml.safe_load(raw)
            except yaml.YAMLError as e:
                raise ConfigError(f"{_env_name(name)}: not valid YAML: {e}") from None
        else:
            out[name] = raw
    return out


def load_settings(
    path: str | None, overrides: dict[str, Any], env: dict[str, str] | None = None
) -> Settings:
    """File < environment < flags. ``overrides`` holds flag values that were given."""
    data: dict[str, Any] = {}
    if path:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except OSError as e:
            raise ConfigError(f"{path}: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML: {e}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: expected a mapping at the top level")
        data.update(loaded or {})
    merged = {to_camel(k): v for k, v in data.items()}
    for k, v in {**_from_env(dict(os.environ if env is None else env)), **overrides}.items():
        merged[to_camel(k)] = v
    try:
        return Settings.model_validate(merged)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(settings)"
            lines.append(f"  {loc}: {err['msg']}")
        raise ConfigError("invalid configuration:\n" + "\n".join(lines)) from None
