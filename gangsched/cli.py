"""The ``gangsched`` command."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from types import ModuleType

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
                forecast=args.forecast,
                declare_runtimes=args.declare_runtimes,
            )
        else:
            code, text, _ = simulate(
                args.workload,
                as_json=args.json,
                plot_path=args.plot,
                show_all=args.all,
                until=args.until,
                forecast=args.forecast,
                declare_runtimes=args.declare_runtimes,
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


def _dev_tools() -> ModuleType | None:
    """The dev tools' commands (``bench``, ``dev-cluster``: gangsched_dev.cli) when that package
    is installed, as from a checkout; the runtime image has none."""
    try:
        import gangsched_dev.cli
    except ModuleNotFoundError as e:
        if e.name != "gangsched_dev":
            raise
        return None
    return gangsched_dev.cli


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
    s.add_argument(
        "--forecast",
        action="store_true",
        help="ask the core's start forecast at each job's first failure and report its error "
        "against the actual start (docs/simulator.md, Start forecasts)",
    )
    s.add_argument(
        "--declare-runtimes",
        action="store_true",
        help="every job declares its run time exactly (gangs: expectedRuntimeSeconds; plain "
        "and trace pods: activeDeadlineSeconds)",
    )
    s.set_defaults(func=_simulate)

    dev = _dev_tools()
    if dev is not None:
        dev.add_bench(sub)

    from gangsched import cli_kube

    cli_kube.add_commands(sub)
    if dev is not None:
        dev.add_dev_cluster(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    code: int = args.func(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
