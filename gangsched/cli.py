"""The ``gangsched`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

__all__ = ["main"]


def _simulate(args: argparse.Namespace) -> int:
    from gangsched.sim.run import simulate, simulate_many
    from gangsched.sim.traces import TraceError
    from gangsched.sim.workload import WorkloadError

    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()] if args.profiles else None
    variants = args.gang_topology.split(",") if args.gang_topology else None
    many = args.seeds is not None or bool(profiles) or bool(variants)
    if many and (args.plot or args.all):
        print(
            "gangsched simulate: --plot and --all show one run: leave out --seeds, --profiles "
            "and --gang-topology",
            file=sys.stderr,
        )
        return 2
    try:
        if many:
            code, text = simulate_many(
                args.workload,
                seeds=args.seeds,
                profiles=profiles,
                as_json=args.json,
                until=args.until,
                gang_topology=variants,
            )
        else:
            code, text, _ = simulate(
                args.workload,
                as_json=args.json,
                plot_path=args.plot,
                show_all=args.all,
                until=args.until,
            )
    except (WorkloadError, TraceError, ValueError) as e:
        print(f"gangsched simulate: {e}", file=sys.stderr)
        return 2
    print(text)
    if code:
        print("invariant violated: see partial_gangs / overcommitted_nodes", file=sys.stderr)
    return code


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return n


def _bench(args: argparse.Namespace) -> int:
    from gangsched.bench import run_bench

    try:
        print(run_bench(args))
    except ValueError as e:
        print(f"gangsched bench: {e}", file=sys.stderr)
        return 2
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gangsched", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("simulate", help="replay a workload through the scheduler, no cluster")
    s.add_argument("workload", help="workload YAML (see docs/simulator.md)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--plot", metavar="FILE.png", help="write GPU allocation over time")
    s.add_argument("--all", action="store_true", help="show every gang in the table")
    s.add_argument("--until", type=float, help="stop at this simulated time (s)")
    s.add_argument(
        "--seeds",
        type=_positive,
        metavar="N",
        help="run tracePods seeds 1..N (replay: sample) and print each figure's mean and spread",
    )
    s.add_argument(
        "--profiles",
        metavar="P1,P2",
        help="run once per placement profile (settings placementProfile), side by side",
    )
    s.add_argument(
        "--gang-topology",
        metavar="V1,V2",
        help="run once per variant (none, required=LEVEL, preferred=LEVEL) with every gang's "
        "topologyPlacement replaced, side by side",
    )
    s.set_defaults(func=_simulate)

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
        default="binpack",
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
    b.add_argument("--json", action="store_true")
    b.set_defaults(func=_bench)

    from gangsched import cli_kube

    cli_kube.add_commands(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
