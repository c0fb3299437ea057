"""GPU sharing through Koordinator's convention on the real control plane: shares of one GPU
placed per device and recorded in the pod in the binding's write, whole GPUs kept exclusive, a
request that cannot be honoured refused, and after a restart the devices rebuilt from what the
pods record."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gangsched.api.gpushare import DEVICE_ALLOCATED, device_allocated
from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.controlplane import fake_node

from .conftest import SchedulerProcess
from .kube import bound, condition, create, event_reasons, pod, pods, refused, wait_for

CORE = "koordinator.sh/gpu-core"
RATIO = "koordinator.sh/gpu-memory-ratio"
MIB = 2**20
DEVICE_MIB = 23040  # an A10's memory, as NVIDIA GPU feature discovery labels it


def _share(name: str, ns: str, sel: dict[str, str], sched: str, percent: int) -> dict[str, Any]:
    obj = pod(name, ns, selector=sel, scheduler=sched, gpus=0)
    resources = obj["spec"]["containers"][0]["resources"]
    for key in ("requests", "limits"):
        resources[key].update({CORE: str(percent), RATIO: str(percent)})
    return obj


def _record(percent: int, minor: int) -> str:
    """What the pod should carry: Koordinator's device-allocated annotation."""
    return device_allocated((minor,), percent, {minor: DEVICE_MIB * MIB})


def _devices(cp: ControlPlane, ns: str, name: str) -> list[int]:
    value = (pods(cp, ns)[name]["metadata"].get("annotations") or {})[DEVICE_ALLOCATED]
    return [g["minor"] for g in json.loads(value)["gpu"]]


@pytest.fixture
def gpu_node(control_plane: ControlPlane, ns: str) -> Iterator[tuple[str, dict[str, str]]]:
    """A node with two A10s, advertised both ways: whole (nvidia.com/gpu) and in percent
    (Koordinator's device stack); returns its name and a selector for it."""
    name = f"{ns}-gpu"
    labels = {
        "e2e-test": ns,
        "nvidia.com/gpu.product": "NVIDIA-A10",
        "nvidia.com/gpu.memory": str(DEVICE_MIB),
    }
    node = fake_node(name, "16", "64Gi", 2, labels)
    for key in ("capacity", "allocatable"):
        node["status"][key].update({CORE: "200", RATIO: "200"})
    create(control_plane, node)
    yield name, {"e2e-test": ns}
    control_plane.kubectl("delete", "node", name, "--wait=false", check=False)


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    """The gangsched processes a test starts, stopped at its end; the last one's log is shown
    (pytest shows a test's teardown output when it fails)."""
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.stop()
    if started:
        print(f"gangsched log (tail):\n{started[-1].tail(80)}")


def test_shares_of_a_gpu_are_placed_per_device_recorded_and_rebuilt_after_a_restart(
    control_plane: ControlPlane,
    ns: str,
    gpu_node: tuple[str, dict[str, str]],
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    cp = control_plane
    node, sel = gpu_node
    sched = f"gpu-{ns}"
    first = SchedulerProcess(cp, tmp_path / "first.log", "--scheduler-name", sched).start()
    processes.append(first)

    # Two halves share one device; each carries the record, written with the binding.
    for name in ("half-a", "half-b"):
        create(cp, _share(name, ns, sel, sched, 50))
    wait_for("both halves bound", lambda: {"half-a", "half-b"} <= set(bound(cp, ns)), 60)
    [minor] = _devices(cp, ns, "half-a")
    assert _devices(cp, ns, "half-b") == [minor]
    for name in ("half-a", "half-b"):
        assert pods(cp, ns)[name]["metadata"]["annotations"][DEVICE_ALLOCATED] == _record(50, minor)
    # A 60% share does not fit beside them: it gets the other device.
    create(cp, _share("sixty", ns, sel, sched, 60))
    wait_for("the 60% share bound", lambda: "sixty" in bound(cp, ns))
    assert _devices(cp, ns, "sixty") == [1 - minor]
    assert bound(cp, ns) == {"half-a": node, "half-b": node, "sixty": node}

    # A whole GPU: the node has two, none of them free.
    create(cp, pod("whole", ns, selector=sel, scheduler=sched, gpus=1))
    [message] = wait_for(
        "the whole-GPU pod refused", lambda: list(refused(cp, ns, ["whole"]).values())
    )
    state = pods(cp, ns)
    assert (condition(state["whole"], "PodScheduled") or {}).get("reason") == "Unschedulable"
    assert "nvidia.com/gpu" in message, message
    assert DEVICE_ALLOCATED not in (state["whole"]["metadata"].get("annotations") or {})

    # A request that cannot be honoured: refused with an event and a condition naming it.
    create(cp, _share("too-much", ns, sel, sched, 150))
    wait_for(
        "an event on too-much", lambda: "FailedScheduling" in event_reasons(cp, ns, "too-much")
    )
    [bad] = wait_for("too-much refused", lambda: list(refused(cp, ns, ["too-much"], CORE).values()))
    assert "150 percent" in bad, bad

    # gangsched goes away. Meanwhile the halves finish and another scheduler (Koordinator's,
    # say) runs a 20% share on the device the halves left: a device the 60% share does not use.
    first.stop()
    for name in ("half-a", "half-b", "whole", "too-much"):
        cp.kubectl("delete", "pod", name, "-n", ns, "--grace-period=0", "--force")
    other = _share("elsewhere", ns, sel, "koord-scheduler", 20)
    other["spec"]["nodeName"] = node
    other["metadata"]["annotations"] = {DEVICE_ALLOCATED: _record(20, minor)}
    create(cp, other)
    wait_for("the halves gone", lambda: set(pods(cp, ns)) == {"sixty", "elsewhere"})

    # Restarted, gangsched counts each pod on the device it records (20% on one, 60% on the
    # other), not where it would have put them itself (both on one device, the other empty).
    second = SchedulerProcess(cp, tmp_path / "second.log", "--scheduler-name", sched).start()
    processes.append(second)
    create(cp, _share("after", ns, sel, sched, 50))
    wait_for("the new half bound", lambda: "after" in bound(cp, ns), 60)
    assert _devices(cp, ns, "after") == [minor], "a half must not go where 60% is taken"
    # 70% is free on the node in all, but no device has half of itself free.
    create(cp, _share("no-room", ns, sel, sched, 50))
    [why] = wait_for("no-room refused", lambda: list(refused(cp, ns, ["no-room"]).values()))
    assert CORE in why, why
    assert "no-room" not in bound(cp, ns)
    assert second.alive(), second.tail()


@pytest.mark.parametrize("whole_name", ["a-whole", "z-whole"])
def test_after_a_restart_records_win_whatever_the_list_order(
    control_plane: ControlPlane,
    ns: str,
    gpu_node: tuple[str, dict[str, str]],
    processes: list[SchedulerProcess],
    tmp_path: Path,
    whole_name: str,
) -> None:
    """A 60% share recorded on one device, a whole GPU (no record) on the other; gangsched
    restarted lists them by name, the whole GPU first ("a-whole") or last ("z-whole"). A 40%
    share that arrives then goes beside the 60% share, never onto the whole GPU's device."""
    cp = control_plane
    _, sel = gpu_node
    sched = f"gpu-{ns}"
    first = SchedulerProcess(cp, tmp_path / "first.log", "--scheduler-name", sched).start()
    processes.append(first)
    create(cp, _share("m-sixty", ns, sel, sched, 60))
    wait_for("the 60% share bound", lambda: "m-sixty" in bound(cp, ns), 60)
    [minor] = _devices(cp, ns, "m-sixty")
    create(cp, pod(whole_name, ns, selector=sel, scheduler=sched, gpus=1))
    wait_for("the whole GPU bound", lambda: whole_name in bound(cp, ns))
    first.stop()
    second = SchedulerProcess(cp, tmp_path / "second.log", "--scheduler-name", sched).start()
    processes.append(second)
    create(cp, _share("n-forty", ns, sel, sched, 40))
    wait_for("the 40% share bound", lambda: "n-forty" in bound(cp, ns), 60)
    assert _devices(cp, ns, "n-forty") == [minor]
    assert "GPUDeviceConflict" not in event_reasons(cp, ns, whole_name)
    assert second.alive(), second.tail()
