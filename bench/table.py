"""Runs the benchmark set and prints the Markdown table kept in docs/benchmarks.md.

.venv/bin/python bench/table.py            # in-process benches and simulator runs

Through a real API server, side by side with kube-scheduler and Coscheduling: bench/versus.py
(it prints its own tables).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GANGSCHED = str(Path(sys.executable).parent / "gangsched")

BENCHES = [
    "--nodes 5000 --gpus-per-node 8 --gang-size 8 --pods 10000",
    "--nodes 5000 --gpus-per-node 8 --gang-size 3 --pods 9999",
    "--nodes 5000 --gpus-per-node 8 --gang-size 4 --gpus-per-pod 2 --pods 10000",
    "--nodes 5000 --gpus-per-node 8 --gang-size 8 --pods 48000",
    "--trace openb_node_list_gpu_node.csv --gang-size 8 --pods 4000",
    "--trace spotgpu_node_info.csv --gang-size 8 --pods 10000",
    "--nodes 5000 --gpus-per-node 8 --gang-size 8 --pods 10000 --constraint anti-affinity",
    "--nodes 5000 --gpus-per-node 8 --gang-size 8 --pods 10000 --constraint zone-spread",
    "--nodes 5000 --gpus-per-node 8 --gang-size 8 --pods 4000 --constraint host-port",
]
SIMS = ["examples/deadlock.yaml", "examples/openb-gpu.yaml", "examples/openb-saturate.yaml"]


def run(cmd: list[str]) -> dict[str, object]:
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main() -> int:
    p = argparse.ArgumentParser()
    p.parse_args()  # (--help)
    print(
        f"Machine: {platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}, {subprocess.getoutput('nproc')} cores.\n"
    )
    print(
        "| command | nodes | pods | gangs bound / unschedulable | pods/s | ms per gang "
        "(mean / p99) | failed gang ms | peak RSS MB |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for b in BENCHES:
        d = run([GANGSCHED, "bench", *b.split(), "--repeat", "3", "--json"])
        failed = d["failed_gang_ms_mean"] if d["failed_gang_ms_mean"] is not None else "-"
        print(
            f"| `gangsched bench {b} --repeat 3` | {d['nodes']} | {d['pods']} | "
            f"{d['gangs_bound']} / {d['gangs_unschedulable']} | {d['pods_per_second']} | "
            f"{d['gang_ms_mean']} / {d['gang_ms_p99']} | {failed} | {d['peak_rss_mb']} |"
        )
    print()
    print(
        "| command | nodes | gangs bound / total | pods bound | partial gangs | "
        "over-committed nodes | GPU allocation (mean / final) | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for s in SIMS:
        d = run([GANGSCHED, "simulate", s, "--json"])
        print(
            f"| `gangsched simulate {s} --json` | {d['nodes']} | {d['gangs_bound']} / "
            f"{d['gangs_total']} | {d['pods_bound']} | {d['partial_gangs']} | "
            f"{d['overcommitted_nodes']} | {d['gpu_allocation_mean']} / "
            f"{d['gpu_allocation_final']} | {d['wall_seconds']} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
