"""``gangsched dev-cluster up|down|status``: a local cluster for trying gangsched by hand.

``up`` starts a detached supervisor process that owns the control plane (etcd, kube-apiserver,
kwok, and kube-controller-manager unless ``--no-controller-manager``: Jobs, StatefulSets,
ReplicaSets and Deployments make their pods, claims are made from ResourceClaimTemplates),
applies the PodGroup CRD
(shipped in this package: ``crds/``, a copy of the repository's) and creates fake GPU nodes,
then prints the kubeconfig path on its last line.
``down`` stops the supervisor, which stops everything it started. Nothing here depends on a
repository checkout: the build script and the CRD are package data.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["add_command", "default_state_dir"]

# Package data (pyproject.toml), the same file as the repository's crds/ (a test checks it).
CRDS = Path(__file__).resolve().with_name("crds")


def default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "gangsched" / "dev-cluster"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read_state(state: Path) -> dict[str, object] | None:
    try:
        data = json.loads((state / "state.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _up(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    current = _read_state(state)
    if current and _pid_alive(int(str(current.get("pid", 0)))):
        print(f"dev-cluster already running (pid {current['pid']})", file=sys.stderr)
        print(current["kubeconfig"])
        return 0
    state.mkdir(parents=True, exist_ok=True)
    (state / "state.json").unlink(missing_ok=True)
    log = (state / "supervisor.log").open("wb")
    cmd = [
        sys.executable,
        "-m",
        "gangsched_dev.devcluster.cli",
        "supervise",
        "--state-dir",
        str(state),
        "--nodes",
        str(args.nodes),
        "--gpus-per-node",
        str(args.gpus_per_node),
        "--cpu",
        str(args.cpu),
        "--memory",
        args.memory,
        "--controller-manager" if args.controller_manager else "--no-controller-manager",
    ]
    proc = subprocess.Popen(
        cmd,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        cwd=str(state),
    )
    print(f"building/starting the control plane (log: {state / 'supervisor.log'})", file=sys.stderr)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        current = _read_state(state)
        if current:
            print(f"dev-cluster up: {args.nodes} node(s), pid {proc.pid}", file=sys.stderr)
            print(f"export KUBECONFIG={current['kubeconfig']}", file=sys.stderr)
            print(current["kubeconfig"])
            return 0
        if proc.poll() is not None:
            tail = (state / "supervisor.log").read_text(errors="replace")[-3000:]
            print(f"dev-cluster failed to start:\n{tail}", file=sys.stderr)
            return 1
        time.sleep(0.5)
    proc.terminate()
    print("dev-cluster did not become ready in time", file=sys.stderr)
    return 1


def _down(args: argparse.Namespace) -> int:
    state = Path(args.state_dir)
    current = _read_state(state)
    if not current:
        print("no dev-cluster is running", file=sys.stderr)
        return 0
    pid = int(str(current.get("pid", 0)))
    if pid and _pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    (state / "state.json").unlink(missing_ok=True)
    print("dev-cluster stopped", file=sys.stderr)
    return 0


def _status(args: argparse.Namespace) -> int:
    current = _read_state(Path(args.state_dir))
    if current and _pid_alive(int(str(current.get("pid", 0)))):
        print(current["kubeconfig"])
        return 0
    print("no dev-cluster is running", file=sys.stderr)
    return 1


def _supervise(args: argparse.Namespace) -> int:
    from gangsched_dev.devcluster.controlplane import ControlPlane

    state = Path(args.state_dir)
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    with ControlPlane() as cp:
        cp.apply(CRDS)
        cp.start_kwok()
        if args.controller_manager:
            from gangsched_dev.devcluster import controllermanager as kcm

            cp.start_controller_manager(
                (*kcm.DEFAULT_CONTROLLERS, "deployment-controller", "resourceclaim-controller")
            )
        for i in range(args.nodes):
            cp.add_fake_node(f"gpu-node-{i}", args.cpu, args.memory, args.gpus_per_node)
        (state / "state.json").write_text(
            json.dumps({"pid": os.getpid(), "kubeconfig": str(cp.kubeconfig), "server": cp.server})
        )
        print(f"ready: {cp.kubeconfig}", flush=True)
        while not stopping:
            time.sleep(0.5)
    return 0


def add_command(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = sub.add_parser("dev-cluster", help="a local control plane with fake GPU nodes")
    dsub = d.add_subparsers(dest="action", required=True)
    for name, fn, hlp in (
        ("up", _up, "start it in the background; prints the kubeconfig path last"),
        ("down", _down, "stop it"),
        ("status", _status, "print the kubeconfig path if it runs"),
        ("supervise", _supervise, argparse.SUPPRESS),
    ):
        p = dsub.add_parser(name, help=hlp)
        p.add_argument("--state-dir", default=str(default_state_dir()))
        if name in ("up", "supervise"):
            p.add_argument("--nodes", type=int, default=4)
            p.add_argument("--gpus-per-node", type=int, default=8)
            p.add_argument("--cpu", default="64")
            p.add_argument("--memory", default="512Gi")
            p.add_argument("--timeout", type=float, default=3600.0)
            p.add_argument(
                "--controller-manager",
                action=argparse.BooleanOptionalAction,
                default=True,
                help="run kube-controller-manager (Job, StatefulSet, ReplicaSet controllers, "
                "the garbage collector, the resourceclaim controller), so those workloads "
                "create their pods (the default); --no-controller-manager: bare pods only",
            )
        p.set_defaults(func=fn)


def main() -> int:
    parser = argparse.ArgumentParser(prog="gangsched-devcluster")
    sub = parser.add_subparsers(dest="command", required=True)
    add_command(sub)
    args = parser.parse_args(["dev-cluster", *sys.argv[1:]])
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
