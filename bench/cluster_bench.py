"""Throughput through a real kube-apiserver: gangsched as a process, kwok fake GPU nodes.

    .venv/bin/python bench/cluster_bench.py --nodes 100 --gpus-per-node 8 --gang-size 8 --pods 800

Creates the nodes, starts ``gangsched run``, submits every PodGroup and pod at once (kubectl
create of Lists), and measures from submission until every pod is bound (spec.nodeName set),
as the API reports it. Prints one JSON object. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gangsched.devcluster import ControlPlane  # noqa: E402
from gangsched.devcluster.controlplane import fake_node  # noqa: E402


def _list(items: list[dict[str, Any]]) -> str:
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": items})


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--nodes", type=int, default=100)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--gang-size", type=int, default=8)
    p.add_argument("--pods", type=int, default=800)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument(
        "--live",
        action="store_true",
        help="start the scheduler first and time from the first submission (default: submit "
        "everything, then start the scheduler and time from its start)",
    )
    args = p.parse_args()
    gangs = args.pods // args.gang_size
    nodes = [
        fake_node(f"bench-{i:04d}", "128", "1024Gi", args.gpus_per_node, {"bench": "yes"})
        for i in range(args.nodes)
    ]
    objs: list[dict[str, Any]] = []
    for g in range(gangs):
        objs.append(
            {
                "apiVersion": "gangsched.io/v1alpha1",
                "kind": "PodGroup",
                "metadata": {"name": f"g{g:05d}", "namespace": "bench"},
                "spec": {"minMember": args.gang_size},
            }
        )
        for i in range(args.gang_size):
            objs.append(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": f"g{g:05d}-{i}",
                        "namespace": "bench",
                        "labels": {"gangsched.io/pod-group": f"g{g:05d}"},
                    },
                    "spec": {
                        "schedulerName": "gangsched",
                        "nodeSelector": {"bench": "yes"},
                        "containers": [
                            {
                                "name": "c",
                                "image": "x",
                                "resources": {
                                    "requests": {
                                        "cpu": "1",
                                        "memory": "1Gi",
                                        "nvidia.com/gpu": "1",
                                    },
                                    "limits": {"nvidia.com/gpu": "1"},
                                },
                            }
                        ],
                    },
                }
            )
    with ControlPlane() as cp, tempfile.TemporaryDirectory() as tmp:
        cp.apply(REPO / "crds")
        cp.start_kwok()
        cp.create_namespace("bench")
        for i in range(0, len(nodes), 200):
            cp.kubectl("create", "-f", "-", input=_list(nodes[i : i + 200]), timeout=300)
        log = Path(tmp) / "gangsched.log"

        def submit() -> None:
            for i in range(0, len(objs), 500):
                cp.kubectl("create", "-f", "-", input=_list(objs[i : i + 500]), timeout=300)

        def start() -> subprocess.Popen[bytes]:
            with log.open("wb") as out:
                return subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "gangsched.cli",
                        "run",
                        "--kubeconfig",
                        str(cp.kubeconfig),
                        "--http-bind-address",
                        "",
                        "--api-qps",
                        "500",
                        "--api-burst",
                        "1000",
                    ],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    cwd=str(REPO),
                )

        if args.live:
            sched = start()
            time.sleep(3)
            t0 = time.monotonic()
            submit()
            t_submitted = time.monotonic()
        else:
            s0 = time.monotonic()
            submit()
            t_submitted = time.monotonic() - s0
            t0 = time.monotonic()
            sched = start()
        try:
            bound = 0
            while time.monotonic() - t0 < args.timeout:
                out_pods = cp.kubectl(
                    "get",
                    "pods",
                    "-n",
                    "bench",
                    "-o",
                    'jsonpath={range .items[*]}{.spec.nodeName}{"\\n"}{end}',
                    timeout=120,
                ).stdout.split()
                bound = len(out_pods)
                print(f"{time.monotonic() - t0:7.1f}s bound {bound}", file=sys.stderr, flush=True)
                if bound >= gangs * args.gang_size:
                    break
                time.sleep(0.5)
            t_end = time.monotonic()
            rss = subprocess.run(
                ["ps", "-o", "rss=", "-p", str(sched.pid)], capture_output=True, text=True
            ).stdout.strip()
        finally:
            sched.terminate()
            sched.wait(30)
            if bound < gangs * args.gang_size:
                print(log.read_text(errors="replace")[-3000:], file=sys.stderr)
    total = gangs * args.gang_size
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "pods": total,
                "gangs": gangs,
                "pods_bound": bound,
                "mode": "live" if args.live else "submitted-first",
                "submit_seconds": round(t_submitted - t0 if args.live else t_submitted, 2),
                "seconds_to_all_bound": round(t_end - t0, 2),
                "pods_per_second": round(bound / (t_end - t0), 1),
                "scheduler_rss_mb": round(int(rss or 0) / 1024, 1),
                "command": f"python bench/cluster_bench.py --nodes {args.nodes} --gpus-per-node "
                f"{args.gpus_per_node} --gang-size {args.gang_size} --pods {args.pods}"
                + (" --live" if args.live else ""),
            },
            sort_keys=True,
        )
    )
    return 0 if bound == total else 1


if __name__ == "__main__":
    sys.exit(main())
