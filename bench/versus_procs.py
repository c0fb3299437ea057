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
  (``scheduling.volcano.sh``) in the queue ``default``;
- ``kai`` (asked for by name only): NVIDIA's KAI scheduler, built by bench/peers.sh kai: its
  scheduler and its binder (KAI's scheduler writes BindRequests, the binder POSTs the
  pods/binding), two processes whose CPU and memory are added up, with the configuration KAI's
  operator gives a default SchedulingShard (schedulerName ``kai-scheduler``), its own PodGroups
  (``scheduling.run.ai/v2alpha2``) in the leaf queue ``bench`` of the department
  ``bench-department`` (no quota or limit).

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
    "Companion",
    "Launch",
    "SchedulerProcess",
    "TreeStats",
    "binder_launch",
    "coscheduling_launch",
    "gangsched_launch",
    "kai_launch",
    "kube_scheduler_launch",
    "profiled",
    "tree_stats",
    "volcano_launch",
]

# the schedulers run by default, and those that may be asked for by name
SCHEDULERS: Final = ("gangsched", "kube-scheduler", "coscheduling", "binder")
KNOWN: Final = (*SCHEDULERS, "volcano", "kai", "gangsched-base")
BINDER_NAME: Final = "versus-binder"
KAI_NAME: Final = "kai-scheduler"
REPO: Final = Path(__file__).resolve().parents[1]
_CLK_TCK: Final = os.sysconf("SC_CLK_TCK")
_STOP_GRACE: Final = 15.0


@dataclass(frozen=True, slots=True)
class Companion:
    """A process that a scheduler needs beside it (KAI's binder): started and stopped with it,
    its output in the same log, its CPU and memory counted with the scheduler's."""

    argv: list[str]
    env: dict[str, str] | None = None


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
    companions: tuple[Companion, ...] = ()


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


def _kai_config() -> dict[str, Any]:
    """The scheduler configuration KAI v0.20.1's operator writes for a default SchedulingShard
    (placement strategy binpack, no kValue, no minRuntime, no usage database)."""
    names = [
        "predicates",
        "proportion",
        "priority",
        "nodeavailability",
        "resourcetype",
        "podaffinity",
        "elastic",
        "kubeflow",
        "ray",
        "subgrouporder",
        "taskorder",
        "nominatednode",
        "dynamicresources",
        "minruntime",
        "topology",
        "snapshot",
        "gpupack",
    ]
    plugins: list[dict[str, Any]] = [{"name": n} for n in names]
    plugins.append({"name": "nodeplacement", "arguments": {"gpu": "binpack", "cpu": "binpack"}})
    plugins.append({"name": "gpusharingorder"})
    return {
        "actions": "allocate, consolidation, reclaim, preempt, stalegangeviction",
        "tiers": [{"plugins": plugins}],
    }


def kai_launch(peer_dir: Path, kubeconfig: Path, qps: int, workdir: Path) -> Launch:
    """KAI's scheduler and binder as its operator runs them (the scheduler with GOGC=400 and its
    default SchedulingShard's configuration), leader election off, the common QPS and burst,
    their HTTP endpoints on loopback ports of their own (the scheduler's plugin server listens
    on every interface: it has no address flag)."""
    config = _write_yaml(workdir / "kai-scheduler.yaml", _kai_config())
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    binder = Companion(
        [
            str(peer_dir / "binder"),
            f"--kubeconfig={kubeconfig}",
            f"--scheduler-name={KAI_NAME}",
            f"--qps={qps}",
            f"--burst={qps}",
            "--leader-elect=false",
            "--health-probe-bind-address=127.0.0.1:18092",
            "--metrics-bind-address=127.0.0.1:18093",
        ],
        env,
    )
    return Launch(
        "kai",
        [
            str(peer_dir / "scheduler"),
            f"--scheduler-conf={config}",
            f"--scheduler-name={KAI_NAME}",
            f"--qps={qps}",
            f"--burst={qps}",
            "--leader-elect=false",
            "--listen-address=127.0.0.1:18090",
            "--plugin-server-port=18091",
        ],
        KAI_NAME,
        env={**env, "GOGC": "400"},
        companions=(binder,),
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
    """One scheduler as a child process (with its companions, if any), its output in a log
    file."""

    def __init__(self, launch: Launch, log: Path) -> None:
        self.launch = launch
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.companions: list[subprocess.Popen[bytes]] = []

    def _spawn(self, argv: list[str], env: dict[str, str] | None) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as out:
            return subprocess.Popen(
                [*_parent_death_prefix(), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=str(self.launch.cwd),
                env=env,
            )

    def start(self) -> None:
        self.companions = [self._spawn(c.argv, c.env) for c in self.launch.companions]
        self.proc = self._spawn(self.launch.argv, self.launch.env)

    @property
    def exit_code(self) -> int | None:
        """The exit code of the scheduler, or of the first companion that exited."""
        if self.proc is None:
            return None
        for proc in (self.proc, *self.companions):
            if (code := proc.poll()) is not None:
                return code
        return None

    def stats(self) -> TreeStats | None:
        """CPU and peak memory of the scheduler and its companions together."""
        if self.proc is None or self.exit_code is not None:
            return None
        parts = [tree_stats(p.pid) for p in (self.proc, *self.companions)]
        return TreeStats(
            sum(p.cpu_seconds for p in parts),
            sum(p.peak_rss_mb for p in parts),
            sum(p.processes for p in parts),
        )

    def stop(self) -> None:
        for proc in (self.proc, *self.companions):
            if proc is None or proc.poll() is not None:
                continue
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
