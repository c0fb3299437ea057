"""Scheduler processes for the side-by-side benchmark (bench/versus.py): how each is started,
and what it cost (CPU seconds and peak RSS, read from /proc).

The schedulers under test:

- ``gangsched``: ``python -m gangsched.cli run`` (schedulerName ``gangsched``);
- ``kube-scheduler``: the binary built beside the dev control plane's kube-apiserver, with a
  KubeSchedulerConfiguration (default profile, schedulerName ``default-scheduler``);
- ``coscheduling``: scheduler-plugins' scheduler, built by bench/peers.sh, with the
  Coscheduling configuration of its own release (``manifests/coscheduling``);
- ``binder``: no scheduler at all, the physical limit: ``versus.py binder`` lists the pending
  pods and POSTs pods/binding for each, 8 per node, as fast as the API server takes them;
- ``volcano`` (asked for by name only): Volcano's scheduler, built by bench/peers.sh volcano,
  with its release's default configuration (schedulerName ``volcano``), its own PodGroups
  (``scheduling.volcano.sh``) in the queue ``default``.

Every one gets the same client QPS and burst.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final

import yaml

__all__ = [
    "KNOWN",
    "SCHEDULERS",
    "Launch",
    "SchedulerProcess",
    "TreeStats",
    "binder_launch",
    "coscheduling_launch",
    "gangsched_launch",
    "kube_scheduler_launch",
    "profiled",
    "tree_stats",
    "volcano_launch",
]

# the schedulers run by default, and those that may be asked for by name
SCHEDULERS: Final = ("gangsched", "kube-scheduler", "coscheduling", "binder")
KNOWN: Final = (*SCHEDULERS, "volcano", "gangsched-base")
BINDER_NAME: Final = "versus-binder"
REPO: Final = Path(__file__).resolve().parents[1]
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
_STOP_GRACE: Final = 15.0


@dataclass(frozen=True, slots=True)
class Launch:
    """How to start one scheduler: its command line and the schedulerName its pods carry."""

    scheduler: str
    argv: list[str]
    scheduler_name: str
    # what stops it: py-spy writes its profile on SIGINT only
    stop_signal: int = signal.SIGTERM
    # where it runs and what it is run with (another checkout's gangsched: its directory)
    cwd: Path = REPO
    env: dict[str, str] | None = None


def _write_yaml(path: Path, doc: Any) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def gangsched_launch(kubeconfig: Path, qps: int, source: Path | None = None) -> Launch:
    """gangsched from this checkout, or (``source``: ``gangsched-base``) from another one."""
    launch = Launch(
        "gangsched",
        [
            sys.executable,
            "-m",
            "gangsched.cli",
            "run",
            "--kubeconfig",
            str(kubeconfig),
            "--http-bind-address",
            "",
            "--api-qps",
            str(qps),
            "--api-burst",
            str(qps),
        ],
        "gangsched",
    )
    if source is None:
        return launch
    return replace(
        launch,
        scheduler="gangsched-base",
        cwd=source,
        env={**os.environ, "PYTHONPATH": str(source)},
    )


def profiled(launch: Launch, out: Path) -> Launch:
    """The same scheduler under ``py-spy record`` (raw folded stacks into ``out``)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    out.parent.mkdir(parents=True, exist_ok=True)
    argv = [py_spy, "record", "--format", "raw", "--rate", "250", "-o", str(out), "--"]
    return replace(launch, argv=[*argv, *launch.argv], stop_signal=signal.SIGINT)


def _scheduler_config(base: dict[str, Any], kubeconfig: Path, qps: int) -> dict[str, Any]:
    config = dict(base)
    config["clientConnection"] = {
        **(base.get("clientConnection") or {}),
        "kubeconfig": str(kubeconfig),
        "qps": qps,
        "burst": qps,
    }
    config["leaderElection"] = {**(base.get("leaderElection") or {}), "leaderElect": False}
    return config


def _kube_scheduler_argv(binary: Path, config: Path) -> list[str]:
    # --secure-port=0: no serving endpoint, hence no delegated authentication to set up.
    return [str(binary), f"--config={config}", "--secure-port=0"]


def kube_scheduler_launch(bin_dir: Path, kubeconfig: Path, qps: int, workdir: Path) -> Launch:
    config = _scheduler_config(
        {"apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration"},
        kubeconfig,
        qps,
    )
    path = _write_yaml(workdir / "kube-scheduler-config.yaml", config)
    return Launch(
        "kube-scheduler",
        _kube_scheduler_argv(bin_dir / "kube-scheduler", path),
        "default-scheduler",
    )


def coscheduling_launch(peer_dir: Path, kubeconfig: Path, qps: int, workdir: Path) -> Launch:
    """scheduler-plugins' scheduler with its release's Coscheduling configuration (kubeconfig
    filled in, leader election off, the common QPS and burst)."""
    base: dict[str, Any] = yaml.safe_load((peer_dir / "scheduler-config.yaml").read_text())
    config = _scheduler_config(base, kubeconfig, qps)
    profiles = config.get("profiles") or [{}]
    name = str(profiles[0].get("schedulerName") or "default-scheduler")
    path = _write_yaml(workdir / "coscheduling-config.yaml", config)
    return Launch("coscheduling", _kube_scheduler_argv(peer_dir / "scheduler", path), name)


def volcano_launch(peer_dir: Path, kubeconfig: Path, qps: int) -> Launch:
    """Volcano's scheduler with its release's default configuration, leader election off, the
    common QPS and burst, its metrics and health endpoints on loopback ports of their own."""
    return Launch(
        "volcano",
        [
            str(peer_dir / "vc-scheduler"),
            f"--kubeconfig={kubeconfig}",
            f"--scheduler-conf={peer_dir / 'scheduler.conf'}",
            "--scheduler-name=volcano",
            f"--kube-api-qps={qps}",
            f"--kube-api-burst={qps}",
            "--leader-elect=false",
            "--listen-address=127.0.0.1:18080",
            "--healthz-address=127.0.0.1:18081",
        ],
        "volcano",
    )


def binder_launch(kubeconfig: Path, qps: int, concurrency: int) -> Launch:
    return Launch(
        "binder",
        [
            sys.executable,
            str(Path(__file__).resolve().with_name("versus.py")),
            "binder",
            "--kubeconfig",
            str(kubeconfig),
            "--scheduler-name",
            BINDER_NAME,
            "--concurrency",
            str(concurrency),
            "--qps",
            str(qps),
        ],
        BINDER_NAME,
    )


@dataclass(frozen=True, slots=True)
class TreeStats:
    cpu_seconds: float  # user + system of the process and its descendants (reaped ones too)
    peak_rss_mb: float  # VmHWM of the process, plus that of each live descendant
    processes: int


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces
    return text[text.rfind(")") + 2 :].split()


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(int(entry))
            if fields is not None and int(fields[1]) == pid:
                found.append(int(entry))
    return found


def _hwm_kb(pid: int) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0


def tree_stats(pid: int) -> TreeStats:
    """CPU and peak memory of a live process and its descendants, from /proc."""
    ticks = 0
    hwm = 0
    pids = [pid]
    seen = 0
    while pids:
        p = pids.pop()
        fields = _stat_fields(p)
        if fields is None:
            continue
        seen += 1
        # fields from state (3): utime 14, stime 15, cutime 16, cstime 17 -> indexes 11-14
        ticks += sum(int(fields[i]) for i in (11, 12, 13, 14))
        hwm += _hwm_kb(p)
        pids.extend(_children(p))
    return TreeStats(ticks / _CLK_TCK, hwm / 1024, seen)


def _parent_death_prefix() -> list[str]:
    """``setpriv --pdeathsig KILL``: the kernel kills the scheduler if the benchmark dies."""
    setpriv = shutil.which("setpriv")
    if not sys.platform.startswith("linux") or setpriv is None:
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


class SchedulerProcess:
    """One scheduler as a child process, its output in a log file."""

    def __init__(self, launch: Launch, log: Path) -> None:
        self.launch = launch
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [*_parent_death_prefix(), *self.launch.argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(self.launch.cwd),
                env=self.launch.env,
            )

    @property
    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stats(self) -> TreeStats | None:
        if self.proc is None or self.proc.poll() is not None:
            return None
        return tree_stats(self.proc.pid)

    def stop(self) -> None:
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(self.launch.stop_signal)
        try:
            proc.wait(_STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
