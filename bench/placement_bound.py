"""How much of the requested GPU share any placement could allocate on the openb experiments.

    GANGSCHED_TRACE_DIR=../shared/traces .venv/bin/python bench/placement_bound.py \
        examples/openb-saturate.yaml examples/openb-gpuspec10.yaml \
        examples/openb-multigpu20.yaml --seeds 10

For each workload (a ``replay: sample`` pod list) and seed, the tasks the simulator draws are
drawn the same way, up to and including the one that brings the arrived demand to the
cluster's GPU capacity, and ``gangsched.sim.bound.share_bound`` gives the most of the capacity
a placement of them could allocate (the figure ``gpu_share_bound_at_full_arrival`` of
``gangsched simulate``, computed here without simulating). Prints one line per seed, the mean
per workload, and the command.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangsched.sim.bound import share_bound
from gangsched.sim.jobs import build_jobs, build_nodes, capacity_milli
from gangsched.sim.workload import load_workload


def bound_of(path: str, seed: int) -> tuple[float, int]:
    """The bound (share of the capacity) for one seed of the workload, and the share size
    that sets it."""
    w, base = load_workload(path)
    tp = w.trace_pods
    if tp is None or tp.replay != "sample":
        raise SystemExit(f"{path}: needs tracePods with replay: sample")
    w = w.model_copy(update={"trace_pods": tp.model_copy(update={"seed": seed, "load": 1.0})})
    nodes = build_nodes(w, base)
    cap = capacity_milli(nodes)
    jobs = build_jobs(w, base, cap)
    requests = [(d.count, d.milli) for j in jobs for p in j.pods if (d := p.gpu) is not None]
    b = share_bound(requests, cap)
    return b.milli / cap, b.size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("workloads", nargs="+")
    ap.add_argument("--seeds", type=int, default=10, help="seeds 1..N")
    args = ap.parse_args()
    for path in args.workloads:
        shares = []
        for seed in range(1, args.seeds + 1):
            share, size = bound_of(path, seed)
            shares.append(share)
            print(f"{path} seed {seed}: at most {share:.4f} of the capacity (shares of {size})")
        sd = statistics.stdev(shares) if len(shares) > 1 else 0.0
        print(f"{path}: mean {statistics.fmean(shares):.4f} +- {sd:.4f} over {len(shares)} seeds")
    print("command: .venv/bin/python bench/placement_bound.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
