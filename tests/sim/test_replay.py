"""The sample replay: tasks drawn with replacement from the pod list, from a seed, until the
GPU demand that has arrived reaches the load."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from gangsched.sim.jobs import SimJob, build_jobs
from gangsched.sim.traces import TraceError
from gangsched.sim.workload import Workload

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
PODS = str(DATA / "openb_pods_sample.csv")


def _jobs(capacity: int = 40_000, **trace: Any) -> list[SimJob]:
    w = Workload.model_validate({"tracePods": {"trace": PODS, "replay": "sample"} | trace})
    return build_jobs(w, DATA, capacity=capacity)


def _names(jobs: list[SimJob]) -> list[str]:
    return [j.pods[0].name for j in jobs]


def test_the_same_seed_draws_the_same_tasks_and_another_seed_others() -> None:
    a, b, c = _jobs(seed=7), _jobs(seed=7), _jobs(seed=8)
    assert _names(a) == _names(b)
    assert _names(a) != _names(c)


def test_draws_with_replacement_until_the_load_and_never_finish() -> None:
    jobs = _jobs(capacity=40_000, load=1.5, interval=3)
    demand = [j.gpu_milli for j in jobs]
    assert sum(demand[:-1]) < 60_000 <= sum(demand)
    assert [j.arrival for j in jobs] == [3.0 * i for i in range(len(jobs))]
    assert all(j.duration == math.inf for j in jobs)
    # the pod list has 12 rows: more draws than rows, so some rows come more than once
    rows = [n.rsplit("-s", 1)[0] for n in _names(jobs)]
    assert len(jobs) > 12 and len(set(rows)) < len(rows)
    assert len(set(_names(jobs))) == len(jobs)  # every drawn task has its own name


def test_load_defaults_to_the_capacity_and_cpu_only_tasks_are_drawn_too() -> None:
    jobs = _jobs(capacity=40_000, seed=3)
    demand = [j.gpu_milli for j in jobs]
    assert sum(demand[:-1]) < 40_000 <= sum(demand)
    assert any(d == 0 for d in demand), "as the openb paper's simulator, CPU-only tasks arrive"
    gpu_only = _jobs(capacity=40_000, seed=3, gpu_only=True)
    assert all(j.gpu_milli > 0 for j in gpu_only)


def test_a_pod_list_without_gpu_tasks_cannot_fill_the_cluster(tmp_path: Path) -> None:
    cpu = tmp_path / "cpu.csv"
    cpu.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nc,1000,1024,0,0\n")
    w = Workload.model_validate({"tracePods": {"trace": str(cpu), "replay": "sample"}})
    with pytest.raises(TraceError, match="no task asks for a GPU"):
        build_jobs(w, tmp_path, capacity=1000)
