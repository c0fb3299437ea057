"""The daemon's configuration: one pydantic model, from a YAML file, then environment
variables (``GANGSCHED_<FIELD>``, upper snake case), then command-line flags, each overriding
the one before. Invalid configuration fails at start with a message naming the field.
Every field is documented in docs/configuration.md."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from gangsched.core.config import CoreConfig
from gangsched.core.framework import PluginSettings
from gangsched.core.model import SpreadConstraint
from gangsched.core.plugins import FILTERS, SCORERS
from gangsched.core.profile import PLACEMENT_PROFILES

__all__ = ["ConfigError", "DefaultSpreadConstraint", "Settings", "load_settings"]


class ConfigError(ValueError):
    pass


class DefaultSpreadConstraint(BaseModel):
    """One entry of ``defaultSpreadConstraints``: kube-scheduler's PodTopologySpread
    ``defaultConstraints``, a topologySpreadConstraint without a selector."""

    model_config = ConfigDict(
        extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True
    )

    max_skew: int = Field(ge=1)
    topology_key: str = Field(min_length=1, max_length=316)
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

    scheduler_name: str = Field("gangsched", min_length=1, max_length=253)
    kubeconfig: str | None = None
    context: str | None = None
    # Gang timing
    default_schedule_timeout_seconds: float = Field(300.0, gt=0, le=86400)
    schedule_timeout_override_seconds: float | None = Field(None, gt=0, le=86400)
    backoff_initial_seconds: float = Field(1.0, gt=0, le=3600)
    backoff_max_seconds: float = Field(10.0, gt=0, le=3600)
    unschedulable_flush_seconds: float = Field(60.0, gt=0, le=86400)
    # A full cluster: whole-gang preemption, reservations
    preemption: bool = True
    preemption_hold_seconds: float = Field(120.0, gt=0, le=86400)
    reservation_after_seconds: float | None = Field(60.0, ge=0, le=86400)
    # Placement
    nodes_to_score: int = Field(100, ge=1, le=100_000)
    filters: list[str] = Field(default_factory=lambda: list(CoreConfig().filters), min_length=1)
    # binpack | fgd | spread: the scorers and weights used unless scoreWeights is given.
    placement_profile: Literal["binpack", "fgd", "spread"] = "binpack"
    score_weights: dict[str, int] | None = None  # None: the placement profile's
    # FragmentationGradient: how many recent GPU pods the mix of request classes holds.
    gpu_request_window: int = Field(1000, ge=1, le=1_000_000)
    # Topology-aware gang placement: node label keys, largest domain first (block, rack, ...)
    topology_levels: list[str] = Field(default_factory=list, max_length=16)
    # Plugin arguments (kube-scheduler's pluginConfig)
    hard_pod_affinity_weight: int = Field(1, ge=0, le=100)
    default_spread_constraints: list[DefaultSpreadConstraint] = Field(default_factory=list)
    # GPU devices: the node labels that give a node's GPU model and per-device memory (MiB)
    gpu_model_label: str = Field("nvidia.com/gpu.product", min_length=1, max_length=316)
    gpu_memory_label: str = Field("nvidia.com/gpu.memory", min_length=1, max_length=316)
    # API client
    api_qps: float = Field(50.0, ge=0)
    api_burst: int = Field(100, ge=1)
    max_in_flight: int = Field(64, ge=1, le=1024)
    bind_retries: int = Field(3, ge=0, le=20)
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
            if not key or len(key) > 316:
                raise ValueError(f"topologyLevels.{i}: a node label key of 1-316 characters")
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
        profile = PLACEMENT_PROFILES[self.placement_profile]
        weights = profile.score_weights if self.score_weights is None else self.score_weights
        return CoreConfig(
            scheduler_name=self.scheduler_name,
            default_schedule_timeout_seconds=self.default_schedule_timeout_seconds,
            schedule_timeout_override_seconds=self.schedule_timeout_override_seconds,
            backoff_initial_seconds=self.backoff_initial_seconds,
            backoff_max_seconds=self.backoff_max_seconds,
            unschedulable_flush_seconds=self.unschedulable_flush_seconds,
            preemption=self.preemption,
            preemption_hold_seconds=self.preemption_hold_seconds,
            reservation_after_seconds=self.reservation_after_seconds,
            topology_levels=tuple(self.topology_levels),
            nodes_to_score=self.nodes_to_score,
            filters=tuple(self.filters),
            score_weights=dict(weights),
            gpu_candidate_order=profile.gpu_candidate_order,
            plugin_settings=PluginSettings(
                hard_pod_affinity_weight=self.hard_pod_affinity_weight,
                default_spread_constraints=tuple(c.core() for c in self.default_spread_constraints),
                gpu_request_window=self.gpu_request_window,
                gpu_model_label=self.gpu_model_label,
            ),
        )


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
