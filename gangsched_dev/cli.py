"""The dev tools' subcommands of ``gangsched``: ``bench`` and ``dev-cluster``. ``gangsched``
adds them when this package is installed; each imports what it runs only when it runs."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_bench", "add_dev_cluster"]


def _bench(args: argparse.Namespace) -> int:
    from gangsched_dev.bench import run_bench

    try:
        print(run_bench(args))
    except ValueError as e:
        print(f"gangsched bench: {e}", file=sys.stderr)
        return 2
    return 0


def add_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    b = sub.add_parser("bench", help="in-process scheduling benchmark")
    b.add_argument("--nodes", type=int, default=5000)
    b.add_argument("--gpus-per-node", type=int, default=8)
    b.add_argument("--gang-size", type=int, default=8)
    b.add_argument("--gpus-per-pod", type=int, default=1)
    b.add_argument("--pods", type=int, default=10000)
    b.add_argument("--trace", help="node inventory CSV instead of uniform nodes")
    b.add_argument("--repeat", type=int, default=1, help="runs; the best is reported")
    b.add_argument(
        "--constraint",
        choices=("none", "anti-affinity", "zone-spread", "host-port"),
        default="none",
        help="one constraint on every pod, on its gang's label (see docs/benchmarks.md)",
    )
    b.add_argument("--zones", type=int, default=10, help="zones the uniform nodes spread over")
    b.add_argument(
        "--profile",
        choices=("binpack", "fgd", "spread"),
        default="fgd",
        help="placement profile (settings placementProfile; see docs/placement.md)",
    )
    b.add_argument(
        "--topology",
        metavar="block=M,rack=N",
        help="synthesised levels block/rack/hostname: racks of N nodes, M racks a block",
    )
    b.add_argument(
        "--gang-topology",
        choices=("none", "required-rack", "preferred-rack"),
        default="none",
        help="every gang's topology placement (needs --topology)",
    )
    b.add_argument(
        "--dra",
        action="store_true",
        help="GPUs as Dynamic Resource Allocation devices, each pod asking through a claim",
    )
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_bench)


def add_dev_cluster(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from gangsched_dev.devcluster import cli

    cli.add_command(sub)
