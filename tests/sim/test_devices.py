"""The simulator's own per-device truth: shares counted on the devices each binding names,
whole devices exclusive, and the over-commit check per device."""

from __future__ import annotations

import json
import math
from pathlib import Path

from gangsched.core.config import CoreConfig
from gangsched.core.model import Node, Pod
from gangsched.sim.engine import GpuTally, Simulation
from gangsched.sim.jobs import SimJob
from gangsched.sim.run import simulate

CORE = "koordinator.sh/gpu-core"


def _node(gpus: int) -> Node:
    return Node("n", {"cpu": 64_000, "nvidia.com/gpu": gpus, CORE: 100 * gpus, "pods": 110})


def _share(uid: str, percent: int) -> Pod:
    return Pod(uid, "ns", uid, {"cpu": 1000, CORE: percent, "pods": 1})


def _whole(uid: str, n: int) -> Pod:
    return Pod(uid, "ns", uid, {"cpu": 1000, "nvidia.com/gpu": n, "pods": 1})


def test_shares_add_up_per_device_and_free_on_give() -> None:
    t = GpuTally.of([_node(2)])
    assert t.capacity_milli == 2000
    a, b = _share("a", 60), _share("b", 40)
    assert t.take("n", a, (0,)) == (0,)
    assert t.take("n", b, (0,)) == (0,)
    assert t.devices["n"] == [1000, 0] and t.device_errors == set()
    assert (t.bound_milli, t.devices_used) == (1000, 1)
    t.give("n", a, (0,))
    assert t.devices["n"] == [400, 0] and (t.bound_milli, t.devices_used) == (400, 1)
    t.give("n", b, (0,))
    assert t.devices["n"] == [0, 0] and t.devices_used == 0


def test_over_one_device_a_shared_whole_device_or_a_wrong_device_list_is_caught() -> None:
    over = GpuTally.of([_node(2)])
    over.take("n", _share("a", 60), (1,))
    over.take("n", _share("b", 50), (1,))
    assert over.device_errors == {"n"} and over.devices["n"] == [0, 1100]

    shared_whole = GpuTally.of([_node(2)])
    shared_whole.take("n", _whole("w", 1), (0,))
    shared_whole.take("n", _share("s", 10), (0,))
    assert shared_whole.device_errors == {"n"}

    missing = GpuTally.of([_node(2)])
    missing.take("n", _whole("w", 2), (0,))  # asks for two devices, bound with one
    assert missing.device_errors == {"n"}

    outside = GpuTally.of([_node(2)])
    outside.take("n", _share("s", 10), (5,))
    assert outside.device_errors == {"n"}


def test_shares_pack_on_devices_and_the_summary_counts_them(tmp_path: Path) -> None:
    w = tmp_path / "w.yaml"
    w.write_text(
        "name: shares\n"
        "nodes: [{name: n, gpus: 2, extra: {koordinator.sh/gpu-core: 200}}]\n"
        "pods:\n"
        "  - {name: s, repeat: 3, every: 1, cpu: '1', extra: {koordinator.sh/gpu-core: 60}}\n"
        "  - {name: w, arrival: 5, cpu: '1', gpus: 1}\n"
    )
    code, text, r = simulate(str(w), as_json=True, plot_path=None, show_all=False, until=30)
    s = json.loads(text)
    assert code == 0 and s["overcommitted_nodes"] == 0
    # 60% + 60% do not share a device: two shares on two devices, the third and the whole
    # GPU wait
    assert r.gpu is not None and sorted(r.gpu.devices["n"]) == [600, 600]
    assert s["plain_pods_bound"] == 2
    assert s["gpus_total"] == 2 and s["gpus_handed_out"] == 2
    assert s["gpu_share_allocated"] == 0.6
    assert s["gpu_share_arrived"] == 1.4  # 3 x 0.6 + 1 whole GPU, of 2 GPUs
    assert s["gpus_unallocated_final"] == 0.8
    assert s["gpus_free_whole_final"] == 0
    assert s["nodes_with_free_gpus"] == 1 and s["gpu_nodes_empty"] == 0
    # the third share was the first GPU job that failed to place, with 1.2 GPUs bound
    assert s["gpu_share_allocated_first_failure"] == 0.6
    assert s["gpus_unallocated_first_failure"] == 0.8
    # 2 GPUs arrived at t=5, when the whole GPU came: 1.2 of them bound
    assert s["gpu_share_allocated_at_full_arrival"] == 0.6
    by_class = s["wait_by_gpus"]
    assert by_class["<1"]["jobs"] == 3 and by_class["<1"]["still_waiting"] == 1
    assert by_class["1"]["still_waiting"] == 1


def test_a_shares_devices_are_recorded_in_the_pod_and_whole_ones_are_not() -> None:
    jobs = [
        SimJob("ns/s", 0.0, math.inf, [_share("s", 30)]),
        SimJob("ns/w", 0.0, math.inf, [_whole("w", 1)]),
    ]
    sim = Simulation([_node(2)], jobs, CoreConfig())
    r = sim.run()
    assert r.overcommitted_nodes == set()
    share, whole = sim.pods["s"], sim.pods["w"]
    assert share.node_name == whole.node_name == "n"
    assert len(share.gpu_devices) == 1  # Koordinator's device-allocated annotation
    assert whole.gpu_devices == ()  # the NVIDIA device plugin picks whole devices
    assert sim.devices_of["s"] == share.gpu_devices
    assert sim.devices_of["w"] != share.gpu_devices  # a whole device is never shared
