"""What one round of start forecasts costs (gangsched/core/forecast.py), in process.

    .venv/bin/python bench/forecast_bench.py --nodes 1000 --gangs 1100
    .venv/bin/python bench/forecast_bench.py --nodes 5000 --gangs 5500 --most 200

Builds a core with ``--nodes`` nodes of 8 GPUs and ``--gangs`` gangs of 8 pods, each gang's
PodGroup declaring its run time (an hour and a little more for each later gang): the first 90%
ask one GPU a pod, the last 10% a whole node a pod. What fits is bound, the rest waits. Then
times ``Forecast(core, most=...).run()`` ``--rounds`` times and prints the seconds, the
waiting gangs and how many got a time, and the command. The garbage collector is handled as in
the daemon (gangsched/kube/io/heap.py): the core built is frozen out of its reach, as the first
lists are, and each round runs with it paused, as the scheduler's rounds do (``--collector on``
leaves it running during the rounds). Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.forecast import Forecast
from gangsched.core.model import GangSpec, PodPhase
from gangsched.core.scheduler import Scheduler
from gangsched.kube.io.heap import collector_paused
from tests.core.test_scheduler import gpu_node, members


def build(nodes: int, gangs: int) -> Scheduler:
    clock = FakeClock(1000.0)
    core = Scheduler(CoreConfig(), clock)
    for i in range(nodes):
        core.node_upsert(gpu_node(f"n{i}", 8, cpu="128", memory="1024Gi"))
    for g in range(gangs):
        key, created = f"ml/g{g}", 1000.0 + g * 0.001
        core.gang_upsert(GangSpec(key, 8, created=created, expected_runtime_seconds=3600.0 + g))
        gpus = 1 if g < gangs * 0.9 else 8
        for pod in members(key, 8, gpus=gpus, created=created):
            core.pod_upsert(pod)
    for d in core.run_until_idle():
        if isinstance(d, BindGang):
            for b in d.bindings:
                pod = core.cache.pods[b.pod.uid]
                core.pod_upsert(replace(pod, node_name=b.node, phase=PodPhase.RUNNING))
    return core


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--gangs", type=int, default=1100)
    p.add_argument("--most", type=int, default=None, help="forecast the first N waiting gangs")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument(
        "--collector",
        choices=["paused", "on"],
        default="paused",
        help="the garbage collector during the rounds (the scheduler pauses it)",
    )
    a = p.parse_args()
    t = time.perf_counter()
    core = build(a.nodes, a.gangs)
    built = time.perf_counter() - t
    print(f"built in {built:.1f} s: {a.nodes} nodes, {len(core.cache.pods)} pods")
    gc.collect()
    gc.freeze()
    for i in range(a.rounds):
        paused = collector_paused() if a.collector == "paused" else contextlib.nullcontext()
        t = time.perf_counter()
        with paused:
            result = Forecast(core, most=a.most).run()
        took = time.perf_counter() - t
        known = sum(1 for e in result.values() if e.known)
        print(f"round {i + 1}: {took:.2f} s, {len(result)} waiting gangs, {known} with a time")
    most = f" --most {a.most}" if a.most is not None else ""
    print(
        f"command: .venv/bin/python bench/forecast_bench.py --nodes {a.nodes} "
        f"--gangs {a.gangs}{most} --rounds {a.rounds} --collector {a.collector}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
