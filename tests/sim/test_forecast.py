"""The start forecast in the simulator: asked at each job's first failure and set beside the
actual start. With every run declared, every forecast is a time, close to the start; with
nothing declared, every one is unknown. The forecast leaves the run itself as it was."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangsched.cli import main
from gangsched.sim.run import simulate

ROOT = Path(__file__).resolve().parents[2]
STARVATION = ROOT / "examples" / "starvation.yaml"
PREEMPTION = ROOT / "examples" / "preemption.yaml"


def _summary(path: Path, *args: str, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    assert main(["simulate", str(path), "--json", *args]) == 0
    return dict(json.loads(capsys.readouterr().out))


def test_declared_runs_give_forecasts_close_to_the_actual_starts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    s = _summary(STARVATION, "--forecast", "--declare-runtimes", capsys=capsys)
    assert s["estimates_made"] == s["estimates_known"] == 203
    assert s["estimates_unknown"] == 0
    assert isinstance(s["estimate_error_p50"], float) and s["estimate_error_p50"] <= 0.2
    assert isinstance(s["estimate_error_p90"], float) and s["estimate_error_p90"] <= 0.5


@pytest.mark.parametrize("workload", [STARVATION, PREEMPTION])
def test_without_declared_runs_every_forecast_is_unknown(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    s = _summary(workload, "--forecast", capsys=capsys)
    made = s["estimates_made"]
    assert isinstance(made, int) and made > 0
    assert s["estimates_unknown"] == made and s["estimates_known"] == 0


def test_the_forecast_does_not_change_the_run() -> None:
    def starts(forecast: bool) -> list[tuple[str, float | None]]:
        _, _, r = simulate(
            str(STARVATION),
            as_json=True,
            plot_path=None,
            show_all=False,
            until=None,
            forecast=forecast,
            declare_runtimes=True,
        )
        return [(j.key, j.first_started) for j in r.jobs]

    assert starts(True) == starts(False)


def test_the_unknown_names_what_it_waits_for() -> None:
    _, _, r = simulate(
        str(STARVATION), as_json=True, plot_path=None, show_all=False, until=None, forecast=True
    )
    big = next(j for j in r.jobs if j.key == "default/big")
    assert big.estimate is not None and big.estimate.at is None
    assert big.estimate.blockers and all(
        b.startswith("default/small-") for b in big.estimate.blockers
    )
    assert big.estimate.basis.startswith("waits for default/small-")
