"""The dev control plane itself: etcd + kube-apiserver + kwok, driven through kubectl."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gangsched_dev.devcluster import ControlPlane, KubectlError
from gangsched_dev.devcluster.controlplane import BINARIES, STAGES_FILE

pytestmark = pytest.mark.e2e

T = TypeVar("T")


@pytest.fixture(scope="module")
def devcluster() -> Iterator[ControlPlane]:
    with ControlPlane() as cp:
        cp.start_kwok()
        yield cp


@pytest.fixture
def namespace(devcluster: ControlPlane) -> str:
    # Namespaces never finish deleting without kube-controller-manager: one fresh per test.
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    devcluster.create_namespace(name)
    return name


def wait_for(probe: Callable[[], T | None], what: str, timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.25)


def condition(obj: dict[str, Any], kind: str) -> str | None:
    for cond in obj.get("status", {}).get("conditions", []):
        if cond.get("type") == kind:
            status: str = cond.get("status")
            return status
    return None


def test_kwok_runs_a_bound_pod_on_a_fake_gpu_node(devcluster: ControlPlane, namespace: str) -> None:
    cp = devcluster
    node_name = f"gpu-{uuid.uuid4().hex[:6]}"
    created = cp.add_fake_node(node_name, cpu=8, memory="64Gi", gpus=4, labels={"pool": "a"})
    assert created["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert created["metadata"]["labels"]["pool"] == "a"

    def node_ready() -> dict[str, Any] | None:
        node: dict[str, Any] = cp.kubectl_json("get", "node", node_name)
        return node if condition(node, "Ready") == "True" else None

    node = wait_for(node_ready, f"kwok to mark node {node_name} Ready")
    assert node["status"]["capacity"] == {
        "cpu": "8",
        "memory": "64Gi",
        "pods": "110",
        "nvidia.com/gpu": "4",
    }
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"

    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "worker-0", "namespace": namespace},
        "spec": {
            "nodeName": node_name,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
    }
    cp.kubectl("create", "-f", "-", input=json.dumps(pod))

    def pod_running() -> dict[str, Any] | None:
        got: dict[str, Any] = cp.kubectl_json("get", "pod", "worker-0", "-n", namespace)
        return got if got.get("status", {}).get("phase") == "Running" else None

    running = wait_for(pod_running, "kwok to move the pod to Running")
    assert running["spec"]["nodeName"] == node_name
    assert condition(running, "Ready") == "True"


def test_state_survives_an_apiserver_restart(devcluster: ControlPlane) -> None:
    cp = devcluster
    node_name = f"restart-{uuid.uuid4().hex[:6]}"
    cp.add_fake_node(node_name, cpu="4", memory="16Gi", gpus=0)
    server, token = cp.server, cp.token

    cp.stop_apiserver()
    with pytest.raises(KubectlError):
        cp.kubectl("get", "node", node_name, "--request-timeout=2s")
    cp.start_apiserver()

    assert (cp.server, cp.token) == (server, token)
    node = cp.kubectl_json("get", "node", node_name)
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "0"
    # kwok reconnects on its own: a node created after the restart still becomes Ready.
    later = f"{node_name}-b"
    cp.add_fake_node(later, cpu="4", memory="16Gi", gpus=1)
    wait_for(
        lambda: condition(cp.kubectl_json("get", "node", later), "Ready") == "True",
        f"kwok to mark node {later} Ready after the restart",
    )

    # A crash (SIGKILL) loses nothing either: etcd holds the state.
    cp.restart_apiserver(kill=True)
    assert cp.kubectl_json("get", "node", later)["metadata"]["name"] == later


def test_a_killed_kwok_is_started_again(devcluster: ControlPlane) -> None:
    cp = devcluster
    cp.crash("kwok")
    node_name = f"after-kill-{uuid.uuid4().hex[:6]}"
    cp.add_fake_node(node_name, cpu="4", memory="16Gi", gpus=1)
    wait_for(
        lambda: condition(cp.kubectl_json("get", "node", node_name), "Ready") == "True",
        f"a new kwok to mark node {node_name} Ready",
    )
    assert cp.is_running("kwok")


def test_kwok_dying_of_its_map_race_on_start_is_started_again(
    devcluster: ControlPlane, tmp_path: Path
) -> None:
    """kwok v0.8.0 now and then dies of "concurrent map writes" as it starts: the harness starts
    it again rather than failing the test (here a kwok whose first run dies that way)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in (*BINARIES, STAGES_FILE):
        if name != "kwok":
            (bin_dir / name).symlink_to(devcluster.bin_dir / name)
    died = tmp_path / "died"
    (bin_dir / "kwok").write_text(
        "#!/bin/sh\n"
        f'if [ ! -e "{died}" ]; then touch "{died}"; '
        'echo "fatal error: concurrent map writes"; exit 2; fi\n'
        f'exec "{devcluster.bin_dir / "kwok"}" "$@"\n'
    )
    (bin_dir / "kwok").chmod(0o755)
    with ControlPlane(bin_dir=bin_dir) as cp:
        cp.start_kwok()
        assert died.exists()
        cp.add_fake_node("after-race", cpu="4", memory="16Gi", gpus=0)
        wait_for(
            lambda: condition(cp.kubectl_json("get", "node", "after-race"), "Ready") == "True",
            "the second kwok to mark the node Ready",
        )


def test_stop_is_idempotent_and_cleans_up(devcluster: ControlPlane) -> None:
    cp = ControlPlane(devcluster.bin_dir)
    cp.stop()  # never started: a no-op
    cp.start()
    workdir = cp.workdir
    assert cp.kubectl("get", "--raw", "/readyz").stdout.strip() == "ok"
    cp.stop()
    cp.stop()
    assert not workdir.exists()
    assert not cp.is_running("kube-apiserver")
    assert not cp.is_running("etcd")
