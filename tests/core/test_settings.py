"""The plugin arguments in the configuration (gangsched.settings): InterPodAffinity's
hardPodAffinityWeight and PodTopologySpread's default constraints, from the file and the
environment into the core's PluginSettings, and refused with the setting named when wrong."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched.core.framework import PluginSettings
from gangsched.core.model import SpreadConstraint
from gangsched.settings import ConfigError, Settings, load_settings

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
