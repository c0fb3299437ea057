"""What parked pods that can never fit cost the scheduler, flush after flush.

    .venv/bin/python bench/parked_bench.py --nodes 1213 --parked 2000 --flushes 3

A cluster of ``--nodes`` nodes (8 GPUs, 96 cores each; one node in eight carries another GPU
model) is half full of running one-GPU pods. Then ``--parked`` pods arrive that can never fit,
in four shapes (a quarter each): more CPU than any node has; more GPUs than any node has; one
GPU of a model no node carries (node affinity); more CPU and memory than any node has. They
fail once and park. Then, ``--flushes`` times: the clock moves past the periodic flush of
parked pods (``unschedulableFlushSeconds``), ``--arrivals`` pods that fit arrive, and the
scheduler runs until idle. Timed: that run, per flush. ``--reservation-after`` sets
``reservationAfterSeconds`` (the default 60: the parked pods are due a reservation search from
the first flush on; ``none``: no reservations).

The same is timed with no parked pods ("none"), so the figures say what the parked pods add.
Printed (JSON): milliseconds per flush for both, the ratio, node filter calls per flush, the
cycles run, and the command. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Decision
from gangsched.core.gpu import MODEL_LABEL
from gangsched.core.model import (
    AffinityTerm,
    Node,
    NodeAffinity,
    Placement,
    Pod,
    PodPhase,
    Requirement,
)
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler

GIB = 1 << 30


def _node(i: int) -> Node:
    model = "NVIDIA-A100-SXM4-80GB" if i % 8 else "NVIDIA-V100-SXM2-32GB"
    return Node(
        f"n{i}",
        {CPU: 96_000, MEMORY: 768 * GIB, PODS: 110, GPU: 8},
        labels={MODEL_LABEL: model, "kubernetes.io/hostname": f"n{i}"},
    )


def _pod(name: str, requests: dict[str, int], created: float, placement: Placement) -> Pod:
    return Pod(
        uid=name,
        namespace="ml",
        name=name,
        requests={PODS: 1, **requests},
        created=created,
        placement=placement,
    )


_ANY = Placement()
_ABSENT_MODEL = Placement(
    affinity=NodeAffinity(
        required=(
            AffinityTerm(match_expressions=(Requirement(MODEL_LABEL, "In", ("NVIDIA-H100",)),)),
        )
    )
)

# Shapes of pods that can never fit: (requests, placement).
_NEVER: tuple[tuple[dict[str, int], Placement], ...] = (
    ({CPU: 128_000, MEMORY: 64 * GIB}, _ANY),  # more CPU than any node
    ({CPU: 4000, MEMORY: 32 * GIB, GPU: 16}, _ANY),  # more GPUs than any node
    ({CPU: 4000, MEMORY: 32 * GIB, GPU: 1}, _ABSENT_MODEL),  # a model no node has
    ({CPU: 200_000, MEMORY: 2048 * GIB}, _ANY),  # CPU and memory
)


def _bind_all(s: Scheduler, out: list[Decision]) -> int:
    bound = 0
    for d in out:
        if isinstance(d, BindGang):
            for b in d.bindings:
                p = s.cache.pods[b.pod.uid]
                s.pod_upsert(replace(p, node_name=b.node, phase=PodPhase.RUNNING))
                bound += 1
    return bound


def _count_filter_calls(s: Scheduler) -> list[int]:
    """Wrap every filter of the finder so each call on a node is counted."""
    calls = [0]
    finder: Any = s.finder
    for attr in ("_static", "_dynamic"):
        for f in getattr(finder, attr):
            orig = f.filter

            def counted(pod: Pod, info: Any, _orig: Any = orig) -> Any:
                calls[0] += 1
                return _orig(pod, info)

            f.filter = counted
    return calls


def run(
    nodes: int, parked: int, flushes: int, arrivals: int, reserve_after: float | None = 60.0
) -> dict[str, Any]:
    cfg = CoreConfig(reservation_after_seconds=reserve_after)
    clock = FakeClock(1000.0)
    s = Scheduler(cfg, clock)
    for i in range(nodes):
        s.node_upsert(_node(i))
    for i in range(nodes * 4):  # half of every node's GPUs
        s.pod_upsert(_pod(f"run{i}", {CPU: 4000, MEMORY: 32 * GIB, GPU: 1}, 0.0, _ANY))
    _bind_all(s, s.run_until_idle())
    for i in range(parked):
        requests, placement = _NEVER[i % len(_NEVER)]
        s.pod_upsert(_pod(f"never{i}", requests, 1.0, placement))
    t0 = time.perf_counter()
    _bind_all(s, s.run_until_idle())
    first = time.perf_counter() - t0
    calls = _count_filter_calls(s)
    per_flush: list[float] = []
    filter_calls: list[int] = []
    cycles: list[int] = []
    placed = 0
    for f in range(flushes):
        clock.advance(cfg.unschedulable_flush_seconds + 1)
        for j in range(arrivals):
            s.pod_upsert(_pod(f"fit{f}-{j}", {CPU: 1000, MEMORY: 4 * GIB}, clock.now(), _ANY))
        c0, n0 = calls[0], s.cycles
        t0 = time.perf_counter()
        out = s.run_until_idle()
        per_flush.append(time.perf_counter() - t0)
        filter_calls.append(calls[0] - c0)
        cycles.append(s.cycles - n0)
        placed += _bind_all(s, out)
    return {
        "first_attempt_ms": round(first * 1000, 1),
        "ms_per_flush": [round(t * 1000, 1) for t in per_flush],
        "filter_calls_per_flush": filter_calls,
        "cycles_per_flush": cycles,
        "placed": placed,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=1213)
    ap.add_argument("--parked", type=int, default=2000)
    ap.add_argument("--flushes", type=int, default=3)
    ap.add_argument("--arrivals", type=int, default=50, help="pods that fit, per flush")
    ap.add_argument(
        "--reservation-after",
        default="60",
        help="reservationAfterSeconds (the default 60), or 'none' for no reservations",
    )
    args = ap.parse_args()
    after = None if args.reservation_after == "none" else float(args.reservation_after)
    with_parked = run(args.nodes, args.parked, args.flushes, args.arrivals, after)
    none = run(args.nodes, 0, args.flushes, args.arrivals, after)
    mean = sum(with_parked["ms_per_flush"]) / args.flushes
    base = sum(none["ms_per_flush"]) / args.flushes
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "parked": args.parked,
                "arrivals_per_flush": args.arrivals,
                "parked_run": with_parked,
                "none_run": none,
                "ms_per_flush_parked": round(mean, 1),
                "ms_per_flush_none": round(base, 1),
                "ratio": round(mean / base, 2) if base else None,
                "command": (
                    f"python bench/parked_bench.py --nodes {args.nodes} --parked {args.parked} "
                    f"--flushes {args.flushes} --arrivals {args.arrivals} "
                    f"--reservation-after {args.reservation_after}"
                ),
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
