"""The trace readers and the task rule (one pod on one node; gangs only on request), on a few
real rows of each trace."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from gangsched.core.model import Placement
from gangsched.sim.jobs import build_jobs
from gangsched.sim.traces import GPU_MODEL_LABEL, TraceError, read_trace_nodes, read_trace_tasks
from gangsched.sim.workload import Workload

DATA = Path(__file__).resolve().parents[1] / "data" / "traces"
MIB = 2**20
GPU = "nvidia.com/gpu"


def test_openb_nodes() -> None:
    nodes = {n.name: n for n in read_trace_nodes(DATA / "openb_nodes_sample.csv", None)}
    n = nodes["openb-node-0022"]
    assert n.allocatable == {
        "cpu": 128_000,
        "memory": 786_432 * MIB,
        GPU: 8,
        "koordinator.sh/gpu-core": 800,
        "koordinator.sh/gpu-memory-ratio": 800,
        "pods": 110,
    }
    assert n.labels == {GPU_MODEL_LABEL: "G3"} == {"nvidia.com/gpu.product": "G3"}
    assert n.gpus is not None and [(d.index, d.model) for d in n.gpus] == [
        (i, "G3") for i in range(8)
    ]
    assert sorted({x.allocatable[GPU] for x in nodes.values()}) == [1, 2, 4, 8]
    assert len(read_trace_nodes(DATA / "openb_nodes_sample.csv", 5)) == 5


def test_spotgpu_nodes_take_memory_per_cpu() -> None:
    (first, *_) = read_trace_nodes(DATA / "spotgpu_sample.csv", None, memory_per_cpu="2Gi")
    assert first.name == "spot-0"
    assert first.allocatable["cpu"] == 192_000
    assert first.allocatable["memory"] == 192 * 2 * 1024 * MIB
    assert first.allocatable[GPU] == 4
    assert first.labels == {GPU_MODEL_LABEL: "GPU-series-1"}


def test_tasks_keep_their_share_and_gpu_spec_becomes_affinity() -> None:
    tasks = {
        t.name: t for t in read_trace_tasks(DATA / "openb_pods_sample.csv", None, False, 1.0, None)
    }
    share = tasks["openb-pod-0001"]  # gpu_milli 460: a share of one GPU
    assert (share.num_gpu, share.gpu_milli, share.demand_milli) == (1, 460, 460)
    assert share.gpu_requests() == {"koordinator.sh/gpu-core": 46}
    assert tasks["openb-pod-0005"].num_gpu == 0 and tasks["openb-pod-0005"].gpu_requests() == {}
    eight = tasks["openb-pod-0017"]
    assert (eight.num_gpu, eight.demand_milli, eight.gpu_requests()) == (8, 8000, {GPU: 8})
    assert eight.duration == 10_769_854 - 9_437_497
    pending = tasks["openb-pod-2321"]  # never scheduled: duration from its creation
    assert pending.duration == 10_855_820 - 10_855_765
    spec_rows = [t for t in tasks.values() if t.placement != Placement()]
    assert spec_rows, "the gpuspec rows restrict the GPU model"
    term = spec_rows[0].placement.affinity.required
    assert term is not None and term[0].match_expressions[0].key == GPU_MODEL_LABEL
    gpu_only = read_trace_tasks(DATA / "openb_pods_sample.csv", None, True, 1.0, None)
    assert all(t.num_gpu > 0 for t in gpu_only)
    scaled = read_trace_tasks(DATA / "openb_pods_sample.csv", 1, True, 10.0, 5.0, 2.0)
    assert scaled[0].duration == 5.0


def test_a_task_is_one_pod_on_one_node() -> None:
    w = Workload.model_validate(
        {"tracePods": {"trace": str(DATA / "openb_pods_sample.csv"), "gpu_only": True}}
    )
    jobs = {j.key: j for j in build_jobs(w, DATA)}
    eight = jobs["trace/openb-pod-0017"]
    assert eight.spec is None and len(eight.pods) == 1
    pod = eight.pods[0]
    assert pod.requests[GPU] == 8 and pod.requests["cpu"] == 88_000
    assert pod.gpu is not None and (pod.gpu.count, pod.gpu.milli, pod.gpu.shared) == (
        8,
        1000,
        False,
    )
    share = jobs["trace/openb-pod-0001"].pods[0]
    assert GPU not in share.requests and share.requests["koordinator.sh/gpu-core"] == 46
    assert share.gpu is not None and (share.gpu.count, share.gpu.milli, share.gpu.shared) == (
        1,
        460,
        True,
    )
    assert jobs["trace/openb-pod-0001"].gpu_milli == 460


def test_gangs_from_traces_only_on_request() -> None:
    w = Workload.model_validate(
        {"tracePods": {"trace": str(DATA / "openb_pods_sample.csv"), "multiGpu": "gang"}}
    )
    jobs = {j.key: j for j in build_jobs(w, DATA)}
    gang = jobs["trace/openb-pod-0017"]
    assert gang.spec is not None and gang.spec.min_member == 8 and len(gang.pods) == 8
    assert all(p.requests[GPU] == 1 for p in gang.pods)
    assert gang.pods[0].requests["cpu"] == 88_000 // 8
    plain = jobs["trace/openb-pod-0000"]
    assert plain.spec is None and plain.pods[0].requests[GPU] == 1
    share = jobs["trace/openb-pod-0001"]  # a share stays one pod
    assert share.spec is None and share.pods[0].requests["koordinator.sh/gpu-core"] == 46


def test_saturate_replay_stops_at_the_load() -> None:
    w = Workload.model_validate(
        {
            "tracePods": {
                "trace": str(DATA / "openb_pods_sample.csv"),
                "replay": "saturate",
                "interval": 2,
                "load": 1.0,
            }
        }
    )
    jobs = build_jobs(w, DATA, capacity=10_000)
    milli = sum(j.gpu_milli for j in jobs)
    # checked before each task: the last one (up to 8 GPUs) may go past the load
    assert 10_000 <= milli < 10_000 + 8_000
    assert sum(j.gpu_milli for j in jobs[:-1]) < 10_000
    assert all(j.duration == math.inf for j in jobs)
    assert [j.arrival for j in jobs] == [2.0 * i for i in range(len(jobs))]


def test_unknown_trace_columns_are_refused(tmp_path: Path) -> None:
    bad = tmp_path / "x.csv"
    bad.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match="unknown node trace columns"):
        read_trace_nodes(bad, None)
