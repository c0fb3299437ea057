"""The real control plane for end-to-end tests: etcd + kube-apiserver + kwok built from Go
modules (hack/control-plane.sh), and gangsched itself running as a separate process.

Each test gets its own namespace and its own fake nodes, labelled with the test's name; its
pods select those nodes, so tests never compete for each other's capacity.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.jobset import JobSet
from gangsched_dev.devcluster.lws import LeaderWorkerSet
from gangsched_dev.devcluster.mpi import MPIOperator
from gangsched_dev.devcluster.trainer import Trainer

from .kube import wait_for
from .kube_scheduler import KubeScheduler

REPO = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


@contextlib.contextmanager
def own_control_plane(audit_policy: dict[str, Any] | None = None) -> Iterator[ControlPlane]:
    """A control plane of a test's own (with kwok and gangsched's CRDs), for a test that must
    see the API server's audit log (``audit_policy``) or that no other test writes to."""
    cp = ControlPlane(audit_policy=audit_policy)
    cp.start()
    try:
        cp.apply(REPO / "crds")
        wait_for(
            "the PodGroup CRD to be served",
            lambda: cp.kubectl("get", "podgroups.gangsched.io", "-A", check=False).returncode == 0,
            timeout=30,
        )
        cp.start_kwok()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    cp = ControlPlane(kill_with_parent=False)
    cp.start()
    try:
        cp.apply(REPO / "crds")
        cp.apply(Path(__file__).parent / "fixtures" / "foreign-podgroup-crds.yaml")
        wait_for(
            "the PodGroup CRD to be served",
            lambda: all(
                cp.kubectl("get", f"podgroups.{g}", "-A", check=False).returncode == 0
                for g in ("gangsched.io", "scheduling.x-k8s.io", "scheduling.volcano.sh")
            ),
            timeout=30,
        )
        cp.start_kwok()
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="module")
def controller_manager(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """kube-controller-manager (Job, StatefulSet, ReplicaSet controllers, garbage collector) on
    the session's control plane, for the tests of one module: their pods come from the
    controllers, as in a real cluster. Stopped when the module ends."""
    control_plane.start_controller_manager()
    try:
        yield control_plane
    finally:
        control_plane.stop_controller_manager()


@pytest.fixture(scope="module")
def jobset(controller_manager: ControlPlane) -> Iterator[JobSet]:
    """The JobSet manager (sigs.k8s.io/jobset, built by hack/controllers.sh, or from
    $GANGSCHED_JOBSET_BIN) beside the session's control plane, with its CRD and webhooks, for
    the tests of one module; its Jobs' pods come from the Job controller. Stopped when the module
    ends (its webhook configurations removed)."""
    with JobSet(controller_manager) as js:
        yield js


@pytest.fixture(scope="module")
def lws(controller_manager: ControlPlane) -> Iterator[LeaderWorkerSet]:
    """The LeaderWorkerSet manager (sigs.k8s.io/lws, built by hack/controllers.sh, or from
    $GANGSCHED_LWS_BIN) with gang scheduling on (Volcano PodGroups), beside the session's
    control plane, for the tests of one module; its pods come from the StatefulSet controller.
    Stopped when the module ends (its webhook configurations removed)."""
    with LeaderWorkerSet(controller_manager) as manager:
        yield manager


@pytest.fixture(scope="module")
def trainer(jobset: JobSet) -> Iterator[Trainer]:
    """Kubeflow Trainer (github.com/kubeflow/trainer/v2, built by hack/controllers.sh, or from
    $GANGSCHED_TRAINER_BIN) beside the session's control plane and the JobSet manager, for the
    tests of one module: TrainJobs become JobSets, their Jobs' pods come from the Job
    controller. Stopped when the module ends (its webhook configurations removed)."""
    with Trainer(jobset.cp) as manager:
        yield manager


@pytest.fixture(scope="module")
def mpi_operator(controller_manager: ControlPlane) -> Iterator[MPIOperator]:
    """The MPI operator (github.com/kubeflow/mpi-operator, built by hack/controllers.sh, or
    from $GANGSCHED_MPI_BIN) with ``--gang-scheduling=gangsched``, for the tests of one module:
    it makes the workers' pods and the launcher's Job. Stopped when the module ends."""
    with MPIOperator(controller_manager) as manager:
        yield manager


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class SchedulerProcess:
    """``gangsched run`` as a real process, with its own /metrics port."""

    def __init__(
        self, cp: ControlPlane, log: Path, *extra: str, env: dict[str, str] | None = None
    ) -> None:
        self.cp = cp
        self.log = log
        self.port = free_port()
        # Start forecasts off unless a test asks for them: they add to the Scheduled message
        # of every waiting gang, which the tests compare whole (tests/e2e/test_forecast.py).
        self.env = {
            **os.environ,
            "PYTHONUNBUFFERED": "1",
            "GANGSCHED_START_FORECAST_SECONDS": "0",
            **(env or {}),
        }
        self.args = [
            sys.executable,
            "-m",
            "gangsched.cli",
            "run",
            "--kubeconfig",
            str(cp.kubeconfig),
            "--log-format",
            "console",
            "--backoff-initial",
            "0.5",
            "--backoff-max",
            "2",
            "--http-bind-address",
            f"127.0.0.1:{self.port}",
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> SchedulerProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.args,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=str(REPO),
            )
        return self

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to clean up."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


@pytest.fixture(scope="session")
def scheduler(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerProcess]:
    log = tmp_path_factory.mktemp("scheduler") / "gangsched.log"
    proc = SchedulerProcess(control_plane, log).start()
    try:
        yield proc
    finally:
        proc.stop()
        if proc.proc is not None and proc.proc.returncode not in (0, -15, None):
            print(f"scheduler exited with {proc.proc.returncode}:\n{proc.tail()}")


@pytest.fixture
def ns(control_plane: ControlPlane, request: pytest.FixtureRequest) -> str:
    name = "t-" + uuid.uuid4().hex[:8]
    control_plane.create_namespace(name)
    return name


@pytest.fixture
def nodes(control_plane: ControlPlane, ns: str) -> Iterator[Callable[..., dict[str, str]]]:
    """``nodes(count, gpus=2)`` creates fake nodes only this test's pods select; returns the
    node selector. Nodes are deleted at the end of the test."""
    made: list[str] = []

    def make(count: int, gpus: int = 2, cpu: str = "16", memory: str = "64Gi") -> dict[str, str]:
        for _ in range(count):
            name = f"{ns}-n{len(made)}"
            control_plane.add_fake_node(name, cpu, memory, gpus, labels={"e2e-test": ns})
            made.append(name)
        return {"e2e-test": ns}

    yield make
    for name in made:
        control_plane.kubectl("delete", "node", name, "--wait=false", check=False)


@pytest.fixture
def running_scheduler(scheduler: SchedulerProcess) -> SchedulerProcess:
    assert scheduler.alive(), f"the scheduler is not running:\n{scheduler.tail()}"
    return scheduler


def pytest_runtest_makereport(item: pytest.Item, call: Any) -> None:
    if call.when == "call" and call.excinfo is not None:
        sched = item.funcargs.get("running_scheduler") if hasattr(item, "funcargs") else None
        if isinstance(sched, SchedulerProcess):
            item.add_report_section("call", "gangsched log (tail)", sched.tail(80))


@pytest.fixture(scope="module")
def kube_scheduler(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeScheduler]:
    """kube-scheduler v1.36.3 (built with the control plane) against the session's control
    plane, for the tests of one module: the reference that differential tests give the same
    pods to. Skipped when the binary is absent."""
    if not KubeScheduler.available(control_plane):
        pytest.skip("kube-scheduler is not built (hack/control-plane.sh builds it)")
    log = tmp_path_factory.mktemp("kube-scheduler") / "kube-scheduler.log"
    ks = KubeScheduler(control_plane, log).start()
    try:
        yield ks
    finally:
        ks.stop()
