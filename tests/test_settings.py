"""The configuration (gangsched.settings): the plugin arguments (InterPodAffinity's
hardPodAffinityWeight, PodTopologySpread's default constraints) from the file and the
environment into the core's PluginSettings, refused with the setting named when wrong; one
source for each setting (its default is the core's, Settings.core() and the simulator's
settings come from one table); node label keys checked as Kubernetes checks them."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic.alias_generators import to_snake

from gangsched.core.config import CoreConfig
from gangsched.core.framework import PluginSettings
from gangsched.core.model import SpreadConstraint
from gangsched.core.profile import PLACEMENT_PROFILES
from gangsched.settings import (
    CORE_SETTINGS,
    SIMULATED_SETTINGS,
    ConfigError,
    Settings,
    load_settings,
)
from gangsched.sim.run import core_config_from
from gangsched.sim.workload import WorkloadError

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def _load(tmp_path: Path, data: dict[str, Any], env: dict[str, str] | None = None) -> Settings:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_settings(str(path), {}, env=env or {})


def _error(tmp_path: Path, data: dict[str, Any], env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as e:
        _load(tmp_path, data, env)
    return str(e.value)


def test_defaults_leave_the_plugins_as_kube_scheduler_has_them() -> None:
    settings = Settings.model_validate({})
    assert settings.hard_pod_affinity_weight == 1
    assert settings.default_spread_constraints == []
    assert settings.core().plugin_settings == PluginSettings()
    assert PluginSettings().default_spread_constraints == ()


@pytest.mark.parametrize("weight", [0, 1, 50, 100])
def test_hard_pod_affinity_weight(tmp_path: Path, weight: int) -> None:
    settings = _load(tmp_path, {"hardPodAffinityWeight": weight})
    assert settings.core().plugin_settings.hard_pod_affinity_weight == weight


@pytest.mark.parametrize("weight", [-1, 101, "heavy", 1.5])
def test_hard_pod_affinity_weight_out_of_range(tmp_path: Path, weight: object) -> None:
    assert "hardPodAffinityWeight" in _error(tmp_path, {"hardPodAffinityWeight": weight})


def test_default_spread_constraints(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        {
            "defaultSpreadConstraints": [
                {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"},
                {
                    "maxSkew": 3,
                    "topologyKey": HOST,
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "nodeAffinityPolicy": "Ignore",
                    "nodeTaintsPolicy": "Honor",
                },
                {
                    "maxSkew": 2,
                    "topologyKey": HOST,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "minDomains": 4,
                },
            ]
        },
    )
    assert settings.core().plugin_settings.default_spread_constraints == (
        SpreadConstraint(1, ZONE, "DoNotSchedule", None),
        SpreadConstraint(3, HOST, "ScheduleAnyway", None, None, "Ignore", "Honor"),
        SpreadConstraint(2, HOST, "DoNotSchedule", None, 4),
    )
    assert settings.core().plugin_settings.hard_pod_affinity_weight == 1


def test_plugin_settings_from_the_environment(tmp_path: Path) -> None:
    settings = _load(
        tmp_path,
        {"hardPodAffinityWeight": 5},
        env={
            "GANGSCHED_HARD_POD_AFFINITY_WEIGHT": "20",
            "GANGSCHED_DEFAULT_SPREAD_CONSTRAINTS": (
                f'[{{maxSkew: 1, topologyKey: "{ZONE}", whenUnsatisfiable: ScheduleAnyway}}]'
            ),
        },
    )
    assert settings.core().plugin_settings == PluginSettings(
        20, (SpreadConstraint(1, ZONE, "ScheduleAnyway", None),)
    )


def test_environment_yaml_that_does_not_parse(tmp_path: Path) -> None:
    message = _error(tmp_path, {}, env={"GANGSCHED_DEFAULT_SPREAD_CONSTRAINTS": "[{maxSkew: "})
    assert "GANGSCHED_DEFAULT_SPREAD_CONSTRAINTS: not valid YAML" in message


GOOD = {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}

BAD_CONSTRAINTS: dict[str, tuple[list[dict[str, Any]], str]] = {
    "maxSkew 0": ([{**GOOD, "maxSkew": 0}], "defaultSpreadConstraints.0.maxSkew"),
    "maxSkew missing": (
        [{"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
        "defaultSpreadConstraints.0.maxSkew",
    ),
    "empty topologyKey": ([{**GOOD, "topologyKey": ""}], "defaultSpreadConstraints.0.topologyKey"),
    "unknown whenUnsatisfiable": (
        [{**GOOD, "whenUnsatisfiable": "Sometimes"}],
        "defaultSpreadConstraints.0.whenUnsatisfiable",
    ),
    "minDomains 0": ([{**GOOD, "minDomains": 0}], "defaultSpreadConstraints.0.minDomains"),
    "minDomains with ScheduleAnyway": (
        [{**GOOD, "whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}],
        "minDomains can only be set with whenUnsatisfiable DoNotSchedule",
    ),
    "unknown nodeTaintsPolicy": (
        [{**GOOD, "nodeTaintsPolicy": "honor"}],
        "defaultSpreadConstraints.0.nodeTaintsPolicy",
    ),
    "a labelSelector": (
        [GOOD, {**GOOD, "topologyKey": HOST, "labelSelector": {"matchLabels": {"a": "b"}}}],
        "labelSelector: a default constraint must not set a selector",
    ),
    "matchLabelKeys": (
        [{**GOOD, "matchLabelKeys": ["app"]}],
        "matchLabelKeys: a default constraint must not set a selector",
    ),
    "an unknown key": ([{**GOOD, "maxskew": 1}], "defaultSpreadConstraints.0.maxskew"),
    "the same topologyKey and whenUnsatisfiable twice": (
        [GOOD, {**GOOD, "maxSkew": 2}],
        "defaultSpreadConstraints.1: duplicate topologyKey",
    ),
    "not a list": ({**GOOD}, "defaultSpreadConstraints"),  # type: ignore[dict-item]
}


@pytest.mark.parametrize("case", BAD_CONSTRAINTS.values(), ids=BAD_CONSTRAINTS.keys())
def test_bad_default_spread_constraints(tmp_path: Path, case: tuple[Any, str]) -> None:
    constraints, expected = case
    message = _error(tmp_path, {"defaultSpreadConstraints": constraints})
    assert message.startswith("invalid configuration:")
    assert expected in message


# ---- one source for each setting -------------------------------------------------------------

# CoreConfig fields that no setting of the same name fills: the placement profile (with
# scoreWeights) makes the first two, CORE_SETTINGS' plugin entries the third.
NOT_SETTINGS = {"score_weights", "gpu_candidate_order", "plugin_settings"}


def test_every_core_field_is_a_setting_or_listed_as_none() -> None:
    aliases = {info.alias: name for name, info in Settings.model_fields.items()}
    assert set(CORE_SETTINGS) <= set(aliases), set(CORE_SETTINGS) - set(aliases)
    core = {to_snake(n) for n, s in CORE_SETTINGS.items() if not s.plugin}
    plugin = {to_snake(n) for n, s in CORE_SETTINGS.items() if s.plugin}
    assert core | plugin == {aliases[n] for n in CORE_SETTINGS}  # the same names, snake case
    assert {f.name for f in dataclasses.fields(CoreConfig)} == core | NOT_SETTINGS
    assert {f.name for f in dataclasses.fields(PluginSettings)} == plugin


def test_the_settings_defaults_are_the_cores() -> None:
    assert Settings().core() == CoreConfig()
    assert Settings().core().plugin_settings == PluginSettings()
    assert Settings().placement_profile == "fgd"
    assert PLACEMENT_PROFILES["fgd"].score_weights == CoreConfig().score_weights
    assert PLACEMENT_PROFILES["fgd"].gpu_candidate_order == CoreConfig().gpu_candidate_order


def test_core_copies_every_core_setting() -> None:
    """Each setting of CORE_SETTINGS, set to something other than its default, reaches the
    core's field of the same name."""
    given: dict[str, Any] = {
        "schedulerName": "other",
        "defaultScheduleTimeoutSeconds": 30.0,
        "scheduleTimeoutOverrideSeconds": 40.0,
        "backoffInitialSeconds": 2.0,
        "backoffMaxSeconds": 20.0,
        "unschedulableFlushSeconds": 70.0,
        "preemption": False,
        "preemptionHoldSeconds": 130.0,
        "reservationAfterSeconds": None,
        "nodesToScore": 7,
        "filters": ["NodeName", "NodeResourcesFit"],
        "topologyLevels": ["example.com/rack", HOST],
        "gpuRequestWindow": 10,
        "hardPodAffinityWeight": 9,
        "defaultSpreadConstraints": [GOOD],
        "gpuModelLabel": "example.com/gpu-model",
    }
    assert set(given) == set(CORE_SETTINGS)
    core = Settings.model_validate(given).core()
    for name, where in CORE_SETTINGS.items():
        value = getattr(core.plugin_settings if where.plugin else core, to_snake(name))
        default = getattr(PluginSettings() if where.plugin else CoreConfig(), to_snake(name))
        assert value != default, name
    assert core.filters == ("NodeName", "NodeResourcesFit")
    assert core.topology_levels == ("example.com/rack", HOST)
    assert core.plugin_settings.default_spread_constraints == (
        SpreadConstraint(1, ZONE, "DoNotSchedule", None),
    )


def test_the_simulator_takes_the_simulated_settings_and_refuses_others() -> None:
    assert set(SIMULATED_SETTINGS) <= {info.alias for info in Settings.model_fields.values()}
    for name in SIMULATED_SETTINGS:
        default = getattr(Settings(), to_snake(name))
        assert core_config_from({name: default}) == CoreConfig(), name
    with pytest.raises(WorkloadError) as e:
        core_config_from({"apiQps": 5.0})
    assert str(e.value) == f"settings: unknown ['apiQps']; known: {sorted(SIMULATED_SETTINGS)}"


BAD_KEY = "not a key"
LABEL_KEY_RULE = (
    "is not a valid label key (an optional DNS subdomain prefix of at most 253 characters and "
    "'/', then a name of at most 63 characters)"
)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"topologyLevels": ["example.com/rack", BAD_KEY]}, "topologyLevels.1: 'not a key'"),
        ({"topologyLevels": ["-rack"]}, "topologyLevels.0: '-rack'"),
        ({"topologyLevels": ["Example.com/rack"]}, "topologyLevels.0: 'Example.com/rack'"),
        ({"topologyLevels": ["example.com/" + "r" * 64]}, "topologyLevels.0: 'example.com/rrr"),
        ({"gpuModelLabel": BAD_KEY}, "gpuModelLabel: Value error, 'not a key'"),
        ({"gpuMemoryLabel": "nvidia.com/"}, "gpuMemoryLabel: Value error, 'nvidia.com/'"),
        (
            {"defaultSpreadConstraints": [{**GOOD, "topologyKey": BAD_KEY}]},
            "defaultSpreadConstraints.0.topologyKey: Value error, 'not a key'",
        ),
    ],
)
def test_label_keys_are_checked_as_kubernetes_checks_them(
    tmp_path: Path, data: dict[str, Any], expected: str
) -> None:
    """The node label keys of the configuration get the check a PodGroup's keys get
    (core/labels.py): refused at start, the setting and the key named."""
    message = _error(tmp_path, data)
    assert message.startswith("invalid configuration:")
    assert expected in message and LABEL_KEY_RULE in message


def test_valid_label_keys_are_taken() -> None:
    settings = Settings.model_validate(
        {
            "topologyLevels": ["example.com/block", "rack", HOST],
            "gpuModelLabel": "example.com/gpu.product",
            "gpuMemoryLabel": "memory",
        }
    )
    assert settings.core().topology_levels == ("example.com/block", "rack", HOST)


def test_every_setting_has_a_row_in_the_configuration_doc() -> None:
    doc = (Path(__file__).resolve().parents[1] / "docs" / "configuration.md").read_text()
    missing = [
        info.alias
        for info in Settings.model_fields.values()
        if f"\n| `{info.alias}` | `GANGSCHED_{to_snake(str(info.alias)).upper()}`" not in doc
    ]
    assert not missing, f"docs/configuration.md has no row for {missing}"
