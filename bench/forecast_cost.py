"""What publishing start forecasts costs under churn: ``bench/adapter_bench.py churn`` with
forecasts off and on, interleaved in pairs (the order alternating from pair to pair), each run
in a process of its own. Prints each run, each pair's ratio (on / off) of wall and of process
CPU seconds, and the median of the pairs' ratios, with the command that gave them.

    .venv/bin/python bench/forecast_cost.py --pairs 6 --ends 3000

Single runs on a shared machine move by 5-10% from one to the next; the median of interleaved
pairs is what says whether forecasts cost a few percent. Not a test: figures depend on the
machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def churn(gangs: int, ends: int, forecast: float) -> dict[str, float]:
    """One churn run, in a process of its own."""
    cmd = [
        sys.executable,
        str(REPO / "bench" / "adapter_bench.py"),
        "churn",
        "--gangs",
        str(gangs),
        "--ends",
        str(ends),
        "--forecast",
        str(forecast),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO).stdout
    result: dict[str, float] = json.loads(out[out.index("{") :])  # (printed indented)
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", type=int, default=6)
    p.add_argument("--gangs", type=int, default=600)
    p.add_argument("--ends", type=int, default=3000)
    p.add_argument("--forecast", type=float, default=5.0, help="startForecastSeconds when on")
    a = p.parse_args(argv)
    walls: list[float] = []
    cpus: list[float] = []
    for i in range(a.pairs):
        order = (0.0, a.forecast) if i % 2 == 0 else (a.forecast, 0.0)
        runs = {f: churn(a.gangs, a.ends, f) for f in order}
        off, on = runs[0.0], runs[a.forecast]
        wall = on["seconds"] / off["seconds"]
        cpu = on["cpu_seconds"] / off["cpu_seconds"]
        walls.append(wall)
        cpus.append(cpu)
        print(
            f"pair {i + 1}: off {off['seconds']:.2f} s ({off['cpu_seconds']:.2f} CPU), "
            f"on {on['seconds']:.2f} s ({on['cpu_seconds']:.2f} CPU, "
            f"{on['forecast_rounds']:.0f} rounds, {on['forecast_work_seconds']:.2f} s of "
            f"their work): on/off {wall:.3f} wall, {cpu:.3f} CPU",
            flush=True,
        )
    print(
        f"median on/off of {a.pairs} pairs: {statistics.median(walls):.3f} wall "
        f"(range {min(walls):.3f}-{max(walls):.3f}), {statistics.median(cpus):.3f} CPU "
        f"(range {min(cpus):.3f}-{max(cpus):.3f})"
    )
    print(
        f"command: .venv/bin/python bench/forecast_cost.py --pairs {a.pairs} --gangs {a.gangs} "
        f"--ends {a.ends} --forecast {a.forecast:g}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
