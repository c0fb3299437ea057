"""``gangsched simulate --seeds N --profiles a,b``: each figure's mean and spread, per profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gangsched.cli import main
from gangsched.sim.spread import figures, format_spread, spread

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"


def _workload(tmp_path: Path, replay: str = "sample") -> Path:
    w = tmp_path / "w.yaml"
    w.write_text(
        "name: small\n"
        f"nodes: [{{trace: {DATA / 'openb_nodes_sample.csv'}}}]\n"
        f"tracePods: {{trace: {DATA / 'openb_pods_sample.csv'}, replay: {replay}, load: 1.3}}\n"
        "settings: {reservationAfterSeconds: null}\n"
    )
    return w


def test_seeds_and_profiles_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = _workload(tmp_path)
    code = main(["simulate", str(w), "--seeds", "3", "--profiles", "binpack,fgd", "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    doc = json.loads(out)
    assert doc["seeds"] == [1, 2, 3] and sorted(doc["profiles"]) == ["binpack", "fgd"]
    for per in doc["profiles"].values():
        share = per["gpu_share_allocated_at_full_arrival"]
        assert share["n"] == 3 and share["min"] <= share["mean"] <= share["max"] <= 1.0
        assert per["overcommitted_nodes"]["max"] == 0
        assert per["gpus_total"] == {"n": 3, "mean": 45.0, "stdev": 0.0, "min": 45, "max": 45}
    # different seeds draw different tasks
    assert doc["profiles"]["binpack"]["pods_total"]["stdev"] > 0

    code = main(["simulate", str(w), "--seeds", "2", "--profiles", "binpack,fgd"])
    out, _ = capsys.readouterr()
    assert code == 0
    head, table = out.split("\n\n", 1)
    assert "2 run(s) per profile (seeds 1, 2)" in head
    assert table.splitlines()[0].split() == ["figure", "binpack", "fgd"]
    assert any(
        line.startswith("gpu_share_allocated_at_full_arrival ") for line in table.splitlines()
    )


def test_seeds_need_a_sample_replay_and_profiles_are_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    w = _workload(tmp_path, replay="saturate")
    assert main(["simulate", str(w), "--seeds", "2"]) == 2
    assert "needs tracePods with replay: sample" in capsys.readouterr().err
    assert main(["simulate", str(w), "--profiles", "tightest"]) == 2
    assert "placementProfile" in capsys.readouterr().err
    assert main(["simulate", str(w), "--profiles", "fgd", "--plot", "x.png"]) == 2
    assert "--plot and --all show one run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["simulate", str(w), "--seeds", "0"])


def test_spread_flattens_nested_figures_and_skips_missing_ones() -> None:
    runs = [
        {"workload": "w", "a": 1, "b": None, "c": {"x": {"y": 2.0}}, "ok": True},
        {"workload": "w", "a": 3, "b": 0.5, "c": {"x": {"y": 4.0}}, "ok": False},
    ]
    assert figures(runs[0]) == {"a": 1.0, "c.x.y": 2.0}
    st = spread(runs)
    assert st["a"] == {"n": 2, "mean": 2.0, "stdev": 1.4142, "min": 1.0, "max": 3.0}
    assert st["b"]["n"] == 1
    text = format_spread({"p": st})
    assert "0.5 +- 0 [0.5, 0.5] (1 of 2 runs)" in text
