"""The simulator end to end: the deadlock example, the CLI, and malformed workloads."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gangsched.cli import main
from gangsched.sim.engine import SimResult
from gangsched.sim.jobs import build_jobs
from gangsched.sim.run import simulate
from gangsched.sim.workload import load_workload

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
    # Never more than the 16 GPUs of the two nodes allocated at once (in milli-GPUs).
    assert max(used for _, used, _, _ in result.timeline) == 16_000


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
        (
            f"nodes: [{NODE_OK}]\ngangs: [{GANG_OK}]\nterminationGracePeriodSeconds: -1\n",
            "terminationGracePeriodSeconds",
            ["greater than or equal to 0"],
        ),
        (
            f"nodes: [{NODE_OK}]\npods: [{{name: p, repeat: 0}}]\n",
            "pods.0.repeat",
            ["greater than or equal to 1"],
        ),
        (
            f"nodes: [{NODE_OK}]\ngangs:\n"
            "  - {name: g, preemptionPolicy: Sometimes, pods: [{}]}\n",
            "gangs.0.preemptionPolicy",
            ["PreemptLowerPriority", "Never"],
        ),
    ],
    ids=[
        "bad-quantity",
        "bad-node-quantity",
        "minmember-exceeds-pods",
        "unknown-field",
        "top",
        "negative-grace",
        "zero-repeat",
        "bad-preemption-policy",
    ],
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


# ---- full clusters: preemption, starvation, honest wait figures ----------------------------

STARVATION = ROOT / "examples" / "starvation.yaml"
PREEMPTION = ROOT / "examples" / "preemption.yaml"


def _run(path: Path) -> tuple[dict[str, Any], SimResult]:
    code, text, result = simulate(
        str(path), as_json=True, plot_path=None, show_all=False, until=None
    )
    assert code == 0, text
    summary: dict[str, Any] = json.loads(text)
    return summary, result


def test_preemption_example_evicts_whole_gangs_and_they_run_again() -> None:
    s, r = _run(PREEMPTION)
    jobs = {j.key: j for j in r.jobs}
    high, polite = jobs["default/high"], jobs["default/polite"]
    evicted = sorted(k for k, j in jobs.items() if j.evictions)
    # Two 4-GPU gangs make room for 8 GPUs: the youngest two of the lowest priority.
    assert evicted == ["default/low-c", "default/low-d"]
    assert (s["preemptions"], s["victim_pods"], s["victim_gangs"]) == (1, 8, 2)
    # The victims go after the 30 s grace period; the high gang binds then, whole.
    assert high.first_started == 90.0 and high.waited == 30.0
    assert len(high.bound_pods) == 8
    # GPUs x how long each victim had run: 4 x (90 - 2) + 4 x (90 - 3).
    assert s["gpu_seconds_lost"] == 4 * 88 + 4 * 87
    for key in evicted:
        j = jobs[key]
        assert j.first_started is not None and j.first_started < 60
        assert j.evictions == 1 and j.started is not None and j.started > 90
        assert j.finished == j.started + j.duration, "the run restarts from the start"
        assert len(j.waits) == 2 and j.waits[1][0] == 90.0
    # preemptionPolicy Never: it waits for the high gang to finish instead of evicting.
    assert polite.first_started == high.finished
    assert s["pods_total"] == s["pods_bound"] == 28 + 8
    assert all(j.finished is not None for j in r.jobs)


def test_preemption_grace_period_defaults_to_zero(tmp_path: Path) -> None:
    body = PREEMPTION.read_text().replace("terminationGracePeriodSeconds: 30\n", "")
    path = tmp_path / "nograce.yaml"
    path.write_text(body)
    s, r = _run(path)
    high = next(j for j in r.jobs if j.key == "default/high")
    assert high.first_started == 60.0
    assert s["gpu_seconds_lost"] == 4 * 58 + 4 * 57


def test_preemption_off_in_settings(tmp_path: Path) -> None:
    path = tmp_path / "off.yaml"
    path.write_text(PREEMPTION.read_text() + "settings: {preemption: false}\n")
    s, r = _run(path)
    assert (s["preemptions"], s["victim_pods"], s["gpu_seconds_lost"]) == (0, 0, 0.0)
    assert all(j.evictions == 0 for j in r.jobs)


def test_starvation_figures_show_the_gang_that_waited() -> None:
    """The stream of 720 one-GPU jobs and the 32-GPU gang: whatever the scheduler does, the
    summary names the gang's wait (p50 and p99 over all jobs would hide it)."""
    s, r = _run(STARVATION)
    big = next(j for j in r.jobs if j.key == "default/big")
    assert s["plain_pods_total"] == 720 and s["gangs_total"] == 1
    small = [j for j in r.jobs if j.spec is None]
    assert [j.arrival for j in small[:3]] == [0.0, 5.0, 10.0] and small[-1].arrival == 3595.0
    assert big.first_started is not None and big.waited > 0
    assert s["longest_waiting_gang"] == "default/big"
    assert s["longest_gang_wait_seconds"] == big.waited
    assert s["wait_seconds_max"] == max(j.waited for j in r.jobs)
    assert s["wait_by_gpus"]["9-32"] == {
        "jobs": 1,
        "started": 1,
        "wait_p50": big.waited,
        "wait_p99": big.waited,
        "wait_max": big.waited,
        "still_waiting": 0,
    }
    assert s["wait_by_gpus"]["1"]["jobs"] == 720
    assert s["wait_by_gpus"]["1"]["wait_max"] == max(j.waited for j in small)
    assert set(s["wait_by_gpus"]) == {"1", "9-32"}
    # The allocation while it waited, from the timeline by hand.
    a, b = big.arrival, big.first_started
    area = 0.0
    for (t0, used, total, _), (t1, *_) in itertools.pairwise(r.timeline):
        lo, hi = max(a, t0), min(b, t1)
        if hi > lo:
            area += (hi - lo) * used / total
    assert s["gpu_allocation_while_longest_gang_waited"] == round(area / (b - a), 4)


def test_a_gang_still_waiting_at_the_end_is_counted(tmp_path: Path) -> None:
    """Cut at t=60, before the gang (arrived at t=30) could start: its open wait counts."""
    _, text, _ = simulate(str(STARVATION), as_json=True, plot_path=None, show_all=False, until=60)
    s = json.loads(text)
    assert s["gangs_bound"] == 0
    assert s["longest_waiting_gang"] == "default/big"
    assert s["wait_by_gpus"]["9-32"]["still_waiting"] == 1
    assert s["wait_by_gpus"]["9-32"]["started"] == 0
    assert s["longest_gang_wait_seconds"] == pytest.approx(s["sim_seconds"] - 30.0)
    assert 0 < s["gpu_allocation_while_longest_gang_waited"] < 1


def test_summary_text_lists_the_size_classes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", str(PREEMPTION)]) == 0
    out = capsys.readouterr().out
    assert "default/low-c" in out and "finished (evicted 1x)" in out
    line = next(x for x in out.splitlines() if x.startswith("wait_by_gpus.2-8"))
    assert "jobs=6 started=6" in line and "still_waiting=0" in line


def test_pod_stream_and_preemption_policy_are_read(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "nodes: [{name: n, gpus: 2}]\n"
        "pods: [{name: s, arrival: 1, every: 2.5, repeat: 3, gpus: 1, duration: 1,"
        " priority: 7, preemptionPolicy: Never}]\n"
        "gangs: [{name: g, preemptionPolicy: Never, expectedRuntimeSeconds: 60,"
        " pods: [{count: 2, gpus: 1}]}]\n"
    )
    w, base = load_workload(path)
    jobs = build_jobs(w, base)
    plain = [j for j in jobs if j.spec is None]
    assert [(j.pods[0].name, j.arrival) for j in plain] == [
        ("s-0", 1.0),
        ("s-1", 3.5),
        ("s-2", 6.0),
    ]
    assert {j.pods[0].priority for j in plain} == {7}
    assert {p.preemption_policy for j in jobs for p in j.pods} == {"Never"}
    gang = next(j for j in jobs if j.spec is not None)
    assert gang.spec is not None and gang.spec.expected_runtime_seconds == 60.0


def test_nonstrict_victim_keeps_running_and_its_replacements_join(tmp_path: Path) -> None:
    """A NonStrict gang gives up only members above its minMember: it is not stopped, and the
    members recreated after the eviction bind again once there is room."""
    path = tmp_path / "nonstrict.yaml"
    path.write_text(
        "nodes: [{name: n, gpus: 4}]\n"
        "gangs:\n"
        "  - {name: low, duration: 1000, mode: NonStrict, minMember: 2,"
        " pods: [{count: 4, gpus: 1}]}\n"
        "  - {name: high, arrival: 10, duration: 100, priority: 10, pods: [{count: 2, gpus: 1}]}\n"
    )
    s, r = _run(path)
    low = next(j for j in r.jobs if j.key == "default/low")
    assert (s["preemptions"], s["victim_pods"], s["victim_gangs"]) == (1, 2, 1)
    assert s["gpu_seconds_lost"] == 2 * 10.0
    assert low.evictions == 0 and low.started == 0.0 and low.finished == 1000.0
    replacements = [p for p in low.pods if "-r" in p.name]
    assert len(replacements) == 2
    assert all(r.placements.get(p.uid) == "n" for p in replacements)
    assert s["pods_total"] == s["pods_bound"] == 8
