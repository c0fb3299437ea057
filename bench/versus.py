"""Side by side through a real API server: gangsched, kube-scheduler, scheduler-plugins'
Coscheduling and a trivial binder (the API server's own binding rate), each on a fresh,
identical cluster; Volcano and NVIDIA's KAI when asked for by name (``--schedulers
gangsched,kai``).

    .venv/bin/python bench/versus.py --nodes 1000 --reps 3
    .venv/bin/python bench/versus.py --workload contention --schedulers gangsched,kube-scheduler

For each repetition and each scheduler (interleaved: repetition 1 in the given order,
repetition 2 rotated by one, ...), on a fresh etcd + kube-apiserver + kwok: the nodes, the
scheduler-plugins PodGroups and the pods are created first, then the scheduler is started, and
everything is timed from its start, as the API server counts it (successful pods/binding POSTs
in its /metrics, and the times of each in its audit log: bench/versus_timing.py). See
bench/versus_run.py for what one run measures, bench/versus_workload.py
for the workloads, bench/versus_procs.py for how each scheduler is started.

Prints one JSON object per run (and appends it to --json-out), then a Markdown table and the
command that reproduces it. kube-scheduler comes with the dev control plane's binaries;
scheduler-plugins' scheduler is built by bench/peers.sh on first use (about 11 minutes on 2
cores, then cached; --no-build-peers skips it instead). A scheduler that cannot run is
reported as skipped, with the reason. Not a test: figures depend on the machine.

``versus.py binder ...`` is the trivial binder itself (started by the benchmark).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

BENCH: Final = Path(__file__).resolve().parent
REPO: Final = BENCH.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(BENCH))

from versus_procs import KNOWN, SCHEDULERS  # noqa: E402
from versus_report import markdown  # noqa: E402
from versus_workload import WORKLOADS, Workload  # noqa: E402

from gangsched_dev.devcluster import ControlPlaneError, find_binaries  # noqa: E402

PEERS_SCRIPT: Final = BENCH / "peers.sh"
DEFAULT_VOLCANO_VERSION: Final = "v1.15.0"
DEFAULT_SP_VERSION: Final = "v0.34.7"
DEFAULT_KAI_VERSION: Final = "v0.20.1"
# scheduler-plugins' PodGroup CRD when its build is not there: the stand-in the end-to-end
# tests install (the fields every scheduler here reads are the same).
FALLBACK_CRD: Final = REPO / "tests" / "e2e" / "fixtures" / "foreign-podgroup-crds.yaml"


def _peer_cache_dir() -> Path:
    root = Path(os.environ.get("GANGSCHED_PEERS_CACHE") or Path.home() / ".cache/gangsched/peers")
    version = os.environ.get("GANGSCHED_SP_VERSION") or DEFAULT_SP_VERSION
    return root / f"scheduler-plugins-{version}"


def _peer_built(d: Path) -> bool:
    return (
        os.access(d / "scheduler", os.X_OK)
        and (d / "scheduler-config.yaml").is_file()
        and (d / "podgroups-crd.yaml").is_file()
    )


def _scheduler_plugins(build: bool) -> tuple[Path | None, str]:
    """scheduler-plugins' build directory, or None and why not."""
    cached = _peer_cache_dir()
    if _peer_built(cached):
        return cached, ""
    if not build:
        where = "$GANGSCHED_PEERS_CACHE" if os.environ.get("GANGSCHED_PEERS_CACHE") else "~/.cache"
        return None, f"{cached.name} is not built in {where} (run: bash bench/peers.sh)"
    print("building scheduler-plugins' scheduler (bench/peers.sh)...", file=sys.stderr, flush=True)
    result = subprocess.run(
        ["bash", str(PEERS_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not _peer_built(Path(lines[-1])):
        return None, f"bench/peers.sh failed with exit code {result.returncode}"
    return Path(lines[-1]), ""


def _volcano(build: bool) -> tuple[Path | None, str]:
    """Volcano's build directory (bench/peers.sh volcano), or None and why not."""
    root = Path(os.environ.get("GANGSCHED_PEERS_CACHE") or Path.home() / ".cache/gangsched/peers")
    version = os.environ.get("GANGSCHED_VOLCANO_VERSION") or DEFAULT_VOLCANO_VERSION
    cached = root / f"volcano-{version}"
    if os.access(cached / "vc-scheduler", os.X_OK) and (cached / "scheduler.conf").is_file():
        return cached, ""
    if not build:
        return None, f"{cached.name} is not built (run: bash bench/peers.sh volcano)"
    print("building Volcano's scheduler (bench/peers.sh volcano)...", file=sys.stderr, flush=True)
    result = subprocess.run(
        ["bash", str(PEERS_SCRIPT), "volcano"], stdout=subprocess.PIPE, text=True, check=False
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not (Path(lines[-1]) / "vc-scheduler").is_file():
        return None, f"bench/peers.sh volcano failed with exit code {result.returncode}"
    return Path(lines[-1]), ""


def _kai_built(d: Path) -> bool:
    return (
        os.access(d / "scheduler", os.X_OK)
        and os.access(d / "binder", os.X_OK)
        and (d / "crds" / "kueue.x-k8s.io_topologies.yaml").is_file()
    )


def _kai(build: bool) -> tuple[Path | None, str]:
    """KAI's build directory (bench/peers.sh kai), or None and why not."""
    root = Path(os.environ.get("GANGSCHED_PEERS_CACHE") or Path.home() / ".cache/gangsched/peers")
    version = os.environ.get("GANGSCHED_KAI_VERSION") or DEFAULT_KAI_VERSION
    cached = root / f"kai-{version}"
    if _kai_built(cached):
        return cached, ""
    if not build:
        return None, f"{cached.name} is not built (run: bash bench/peers.sh kai)"
    print(
        "building KAI's scheduler and binder (bench/peers.sh kai)...", file=sys.stderr, flush=True
    )
    result = subprocess.run(
        ["bash", str(PEERS_SCRIPT), "kai"], stdout=subprocess.PIPE, text=True, check=False
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines or not _kai_built(Path(lines[-1])):
        return None, f"bench/peers.sh kai failed with exit code {result.returncode}"
    return Path(lines[-1]), ""


def _podgroup_crd(peer_dir: Path | None, tmp: Path) -> tuple[Path, str]:
    """scheduler-plugins' own PodGroup CRD, else the tests' stand-in (its first document)."""
    if peer_dir is not None:
        return peer_dir / "podgroups-crd.yaml", "scheduler-plugins release"
    first = FALLBACK_CRD.read_text().split("\n---\n")[0]
    path = tmp / "podgroups.scheduling.x-k8s.io.yaml"
    path.write_text(first)
    return path, "stand-in (tests/e2e/fixtures)"


def _skipped(
    schedulers: Sequence[str], workload: Workload, build_peers: bool
) -> tuple[dict[str, str], Path | None, Path | None, Path | None]:
    skipped: dict[str, str] = {}
    peer_dir: Path | None = None
    built: dict[str, Path | None] = {"volcano": None, "kai": None}
    for name, find in (("volcano", _volcano), ("kai", _kai)):
        if name not in schedulers:
            continue
        if workload.dra:
            skipped[name] = "not run on DRA workloads here"
            continue
        built[name], why = find(build_peers)
        if built[name] is None:
            skipped[name] = why
    volcano_dir, kai_dir = built["volcano"], built["kai"]
    if "kube-scheduler" in schedulers:
        try:
            if not os.access(find_binaries() / "kube-scheduler", os.X_OK):
                skipped["kube-scheduler"] = "no kube-scheduler beside the control plane binaries"
        except ControlPlaneError as e:
            skipped["kube-scheduler"] = str(e)
    if "coscheduling" in schedulers:
        peer_dir, why = _scheduler_plugins(build_peers)
        if peer_dir is None:
            skipped["coscheduling"] = why
    elif _peer_built(_peer_cache_dir()):
        peer_dir = _peer_cache_dir()
    if "binder" in schedulers and workload.name not in ("fill", "kai-fill-jobs"):
        skipped["binder"] = "the binder ignores gangs, claims and topology: fill workloads only"
    return skipped, peer_dir, volcano_dir, kai_dir


def _command(args: argparse.Namespace, schedulers: Sequence[str], w: Workload) -> str:
    parts = [
        ".venv/bin/python bench/versus.py",
        f"--workload {w.name}",
        f"--nodes {w.nodes}",
        f"--pods {w.pods}",
        f"--schedulers {','.join(schedulers)}",
        f"--reps {args.reps}",
        f"--qps {args.qps}",
    ]
    if args.base_source is not None and "gangsched-base" in schedulers:
        parts.append(f"--base-source {args.base_source}")
    parts.append(f"--timeout {args.timeout:g}" if w.fills else f"--window {args.window:g}")
    if w.probes_unschedulable:
        parts.append(f"--samples {args.samples}")
    return " ".join(parts)


def _header(w: Workload, args: argparse.Namespace) -> str:
    pods = "one-GPU pods" if w.gpus_per_pod == 1 else f"{w.gpus_per_pod}-GPU pods"
    gangs = f"{w.gangs} gang{'s' if w.gangs != 1 else ''} of {w.gang_size} {pods}"
    if w.gangless:
        gangs = f"single-pod jobs of {pods} without gangs (KAI: a PodGroup of one each)"
    elif w.topology:
        gangs += f" preferring one {w.topology_levels()[-1]} domain"
    text = (
        f"{w.name}: {w.nodes} nodes x {w.gpus_per_node} GPUs, {gangs} ({w.pods} pods, "
        f"{w.pods * w.gpus_per_pod / w.gpus:.0%} of the GPUs), client QPS/burst {args.qps}"
    )
    return text + (f", window {args.window:g} s." if w.name == "contention" else ".")


def _emit(record: dict[str, Any], json_out: Path | None) -> None:
    line = json.dumps(record)
    print(line, flush=True)
    if json_out is not None:
        with json_out.open("a") as f:
            f.write(line + "\n")


def _bench(args: argparse.Namespace) -> int:
    from versus_run import RunConfig, run_one

    workload = Workload.make(args.workload, args.nodes, args.pods)
    schedulers = [s.strip() for s in args.schedulers.split(",") if s.strip()]
    unknown = [s for s in schedulers if s not in KNOWN]
    if unknown or not schedulers:
        print(f"unknown scheduler(s) {unknown}; choose from {', '.join(KNOWN)}", file=sys.stderr)
        return 2
    command = _command(args, schedulers, workload)
    skipped, peer_dir, volcano_dir, kai_dir = _skipped(
        schedulers, workload, not args.no_build_peers
    )
    if "gangsched-base" in schedulers and args.base_source is None:
        skipped["gangsched-base"] = "no --base-source checkout given"
    _compile_gangsched(
        [REPO, *([args.base_source] if args.base_source and "gangsched-base" in schedulers else [])]
    )
    records: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="versus-crd-") as tmp:
        crd, crd_source = _podgroup_crd(peer_dir, Path(tmp))
        cfg = RunConfig(
            workload=workload,
            qps=args.qps,
            timeout=args.timeout,
            window=args.window,
            settle_max=args.settle,
            create_concurrency=args.create_concurrency,
            binder_concurrency=args.binder_concurrency,
            podgroup_crd=crd,
            peer_dir=peer_dir,
            log_dir=args.log_dir,
            volcano_dir=volcano_dir,
            kai_dir=kai_dir,
            py_spy_dir=args.py_spy,
            base_source=args.base_source.resolve() if args.base_source else None,
            samples=args.samples,
        )
        for name, reason in skipped.items():
            _emit({"scheduler": name, "status": "skipped", "reason": reason}, args.json_out)
        runnable = [s for s in schedulers if s not in skipped]
        for rep in range(1, args.reps + 1):
            shift = (rep - 1) % len(runnable) if runnable else 0
            for scheduler in runnable[shift:] + runnable[:shift]:
                print(f"[versus] rep {rep}: {scheduler}", file=sys.stderr, flush=True)
                t = time.monotonic()
                try:
                    record = run_one(cfg, scheduler, rep)
                except Exception as e:  # one broken run must not lose the others
                    record = {
                        "scheduler": scheduler,
                        "rep": rep,
                        "status": "failed",
                        "reason": f"{type(e).__name__}: {e}",
                        "workload": workload.name,
                    }
                record["podgroup_crd"] = crd_source
                record["run_seconds"] = round(time.monotonic() - t, 1)
                record["command"] = command
                records.append(record)
                _emit(record, args.json_out)
    print()
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}."
    )
    print()
    print(markdown(records, skipped, workload.name, _header(workload, args), command))
    return 0 if all(r["status"] == "ok" for r in records) else 1


def _binder(argv: Sequence[str]) -> int:
    from versus_binder import run_binder

    p = argparse.ArgumentParser(prog="versus.py binder", description="the trivial binder")
    p.add_argument("--kubeconfig", type=Path, required=True)
    p.add_argument("--scheduler-name", required=True)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--qps", type=float, default=5000)
    a = p.parse_args(argv)
    return run_binder(a.kubeconfig, a.scheduler_name, a.concurrency, a.qps)


def _compile_gangsched(trees: Sequence[Path]) -> None:
    """gangsched's bytecode written ahead, as its image has it (pip compiles a package when it
    installs it): run from a checkout where nothing writes bytecode (PYTHONDONTWRITEBYTECODE,
    a read-only tree), gangsched would compile every one of its modules from source at every
    start, a cost the image never pays."""
    for tree in trees:
        compileall.compile_dir(str(tree / "gangsched"), quiet=1)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["binder"]:
        return _binder(argv[1:])
    p = argparse.ArgumentParser(
        description="gangsched, kube-scheduler, Coscheduling and a trivial binder, side by side "
        "on fresh identical clusters"
    )
    p.add_argument("--workload", choices=WORKLOADS, default="fill")
    p.add_argument(
        "--nodes",
        type=int,
        help="default: 100 (fill), 50 (contention), 500 (kai-fill-jobs, kai-unschedulable), 512 "
        "(kai-big-job)",
    )
    p.add_argument(
        "--pods",
        type=int,
        help="default: 8 x nodes (fill, kai-fill-jobs, kai-unschedulable), 140%% of GPUs "
        "(contention), one per node "
        "(kai-big-job)",
    )
    p.add_argument(
        "--schedulers",
        default=",".join(SCHEDULERS),
        help=f"any of {', '.join(KNOWN)} (default: {', '.join(SCHEDULERS)})",
    )
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--qps", type=int, default=5000, help="client QPS and burst of every scheduler")
    p.add_argument("--timeout", type=float, default=600, help="fill: seconds before giving up")
    p.add_argument("--window", type=float, default=60, help="contention: seconds per scheduler")
    p.add_argument("--settle", type=float, default=30, help="most seconds to wait for writes")
    p.add_argument(
        "--samples",
        type=int,
        default=3,
        help="kai-unschedulable: jobs that cannot fit, one after another (KAI's test: 10); each "
        "given up after --timeout seconds",
    )
    p.add_argument("--create-concurrency", type=int, default=48)
    p.add_argument("--binder-concurrency", type=int, default=64)
    p.add_argument("--json-out", type=Path)
    p.add_argument("--log-dir", type=Path, help="keep each scheduler's log here")
    p.add_argument(
        "--base-source",
        type=Path,
        metavar="DIR",
        help="another checkout (e.g. a git worktree of an earlier commit) whose gangsched runs "
        "as the scheduler gangsched-base",
    )
    p.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="profile gangsched's process with py-spy (raw, folded stacks) into DIR; its figures "
        "are then not comparable",
    )
    p.add_argument("--no-build-peers", action="store_true", help="skip unbuilt peers")
    return _bench(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
