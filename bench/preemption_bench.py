"""What one whole-gang preemption decision costs in the core, on a full cluster.

    .venv/bin/python bench/preemption_bench.py --nodes 5000 --gang-size 8
    .venv/bin/python bench/preemption_bench.py --nodes 5000 --gang-size 64 --priorities 3

Every node (8 GPUs) runs one 8-GPU pod of a low-priority gang of 8 (priorities 0 ..
``--priorities``-1, round robin). Then a gang of ``--gang-size`` 8-GPU pods of priority 100
arrives: nothing fits, so its one cycle is a failed placement and the what-if search for
victims (core/preemption.py). Timed: that cycle, from ``schedule_one`` to the ``Preempt``
decision. Printed: milliseconds, the what-if placements tried, the victims, the process's peak
RSS (the whole cluster in memory), and the command. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Preempt
from gangsched.core.model import GangSpec, Node, Pod, PodPhase
from gangsched.core.resources import CPU, GPU, MEMORY, PODS
from gangsched.core.scheduler import Scheduler

GIB = 1 << 30


def _node(name: str) -> Node:
    return Node(name, {CPU: 64_000, MEMORY: 512 * GIB, PODS: 110, GPU: 8})


def _pod(name: str, group: str, priority: int, created: float) -> Pod:
    return Pod(
        uid=name,
        namespace="ml",
        name=name,
        requests={CPU: 8000, MEMORY: 64 * GIB, PODS: 1, GPU: 8},
        created=created,
        priority=priority,
        group=group,
    )


def run(nodes: int, gang_size: int, priorities: int) -> dict[str, object]:
    s = Scheduler(CoreConfig(), FakeClock(1000.0))
    for i in range(nodes):
        s.node_upsert(_node(f"n{i}"))
    for g in range(nodes // 8):
        key = f"ml/low{g}"
        s.gang_upsert(GangSpec(key, 8, created=float(g)))
        for j in range(8):
            s.pod_upsert(_pod(f"low{g}-{j}", key, g % priorities, float(g)))
    for d in s.run_until_idle():
        if isinstance(d, BindGang):
            for b in d.bindings:
                p = s.cache.pods[b.pod.uid]
                s.pod_upsert(replace(p, node_name=b.node, phase=PodPhase.RUNNING))
    s.gang_upsert(GangSpec("ml/high", gang_size, created=5000.0))
    for j in range(gang_size):
        s.pod_upsert(_pod(f"high-{j}", "ml/high", 100, 5000.0))
    trials = s.preemptor.trials
    t0 = time.perf_counter()
    out = s.schedule_one() or []
    took = time.perf_counter() - t0
    [d] = [d for d in out if isinstance(d, Preempt)]
    return {
        "nodes": nodes,
        "running_pods": len(s.cache.pods) - gang_size,
        "gang_size": gang_size,
        "priorities": priorities,
        "ms_per_decision": round(took * 1000, 1),
        "what_if_placements": s.preemptor.trials - trials,
        "victims": len(d.victims),
        "victim_gangs": len({v.gang for v in d.victims}),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "command": (
            f"python bench/preemption_bench.py --nodes {nodes} --gang-size {gang_size} "
            f"--priorities {priorities}"
        ),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--gang-size", type=int, default=8)
    ap.add_argument("--priorities", type=int, default=1, help="low gangs' priority levels")
    args = ap.parse_args()
    print(json.dumps(run(args.nodes, args.gang_size, max(1, args.priorities))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
