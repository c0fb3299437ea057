"""The simulator end to end: the deadlock example, the CLI, and malformed workloads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gangsched.cli import main
from gangsched.sim.run import simulate

ROOT = Path(__file__).resolve().parents[2]
DEADLOCK = ROOT / "examples" / "deadlock.yaml"


def _check_deadlock_summary(s: dict[str, object]) -> None:
    assert s["workload"] == "deadlock"
    assert s["gangs_total"] == 16
    assert s["gangs_bound"] == s["gangs_total"]
    assert s["gangs_failed"] == 0
    assert s["partial_gangs"] == 0
    assert s["overcommitted_nodes"] == 0
    assert s["pods_bound"] == s["pods_total"] == 72
    assert s["nodes"] == 2


def test_deadlock_example_every_gang_binds() -> None:
    code, text, result = simulate(
        str(DEADLOCK), as_json=True, plot_path=None, show_all=False, until=None
    )
    assert code == 0
    _check_deadlock_summary(json.loads(text))
    assert result.partial_gangs == set()
    assert result.overcommitted_nodes == set()
    assert all(j.started is not None for j in result.jobs)
    # Never more than the 16 GPUs of the two nodes allocated at once.
    assert max(used for _, used, _, _ in result.timeline) <= 16


def test_deadlock_example_is_deterministic() -> None:
    runs = [
        simulate(str(DEADLOCK), as_json=True, plot_path=None, show_all=False, until=None)[2]
        for _ in range(2)
    ]
    assert runs[0].timeline == runs[1].timeline
    assert [(j.key, j.started, j.finished) for j in runs[0].jobs] == [
        (j.key, j.started, j.finished) for j in runs[1].jobs
    ]


def test_cli_simulate_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(DEADLOCK), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    _check_deadlock_summary(json.loads(out))
    assert "invariant violated" not in err


def test_cli_simulate_table(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["simulate", str(DEADLOCK), "--all"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert "GANG" in out
    assert "default/g8a" in out
    assert "partial_gangs" in out


GANG_OK = "{name: g, pods: [{count: 2, gpus: 1}]}"
NODE_OK = "{name: n, gpus: 2}"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        (
            f"nodes: [{NODE_OK}]\ngangs:\n  - {{name: g, pods: [{{count: 2, memory: 12Qi}}]}}\n",
            "gangs.0.pods.0.memory",
            ["12Qi"],
        ),
        (
            "nodes: [{name: n, gpus: 2, cpu: 12Qi}]\n",
            "nodes.0",
            ["cpu", "12Qi"],
        ),
        (
            f"nodes: [{NODE_OK}]\ngangs:\n  - {{name: g, minMember: 3, pods: [{{count: 2}}]}}\n",
            "gangs.0",
            ["minMember 3"],
        ),
        (
            f"nodes: [{NODE_OK}]\ngangs:\n  - {{name: g, colour: red, pods: [{{count: 1}}]}}\n",
            "gangs.0.colour",
            ["Extra inputs are not permitted"],
        ),
        (
            f"nodes: [{NODE_OK}]\ngangs: [{GANG_OK}]\nsurprise: 1\n",
            "surprise",
            [],
        ),
    ],
    ids=["bad-quantity", "bad-node-quantity", "minmember-exceeds-pods", "unknown-field", "top"],
)
def test_cli_rejects_malformed_workloads(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    body: str,
    field: str,
    words: list[str],
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(body)
    code = main(["simulate", str(path), "--json"])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert field in err, err
    for w in words:
        assert w in err, err


def test_cli_missing_and_non_mapping_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["simulate", str(tmp_path / "nope.yaml")]) == 2
    assert "nope.yaml" in capsys.readouterr().err
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    assert main(["simulate", str(listy)]) == 2
    assert "mapping" in capsys.readouterr().err


def test_simulate_terminates_on_a_gang_that_never_fits(tmp_path: Path) -> None:
    """A gang that can never fit is retried at every flush until the simulator decides nothing
    can change, then the run ends with the gang reported unbound. Run in a child process: if
    the run never ends, the test fails instead of hanging the suite."""
    path = tmp_path / "never.yaml"
    path.write_text(
        "name: never\n"
        "nodes: [{name: n, gpus: 2}]\n"
        "gangs:\n"
        "  - {name: toobig, arrival: 0.1, pods: [{count: 3, gpus: 1}]}\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-m", "gangsched.cli", "simulate", str(path), "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("gangsched simulate did not finish within 10 s (simulated clock stuck)")
    assert done.returncode == 0, done.stderr
    s = json.loads(done.stdout)
    assert (s["gangs_total"], s["gangs_bound"], s["partial_gangs"]) == (1, 0, 0)
