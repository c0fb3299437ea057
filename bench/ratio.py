"""The in-process benchmark for this tree and an earlier commit, interleaved, best of N each:
the ratio of pods/s says whether the core got slower (machines here differ 3x from day to day,
so only a ratio measured in one run means anything).

    .venv/bin/python bench/ratio.py --base 574ff64 --runs 3 -- --nodes 5000 --gpus-per-node 8 \
        --gang-size 8 --pods 10000

The earlier commit is checked out (``git worktree``) into a temporary folder and run with the
same interpreter, so only the package differs. Prints one line per run and the ratio
(this tree / base) of the best pods/s, with the command that gave it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def bench(tree: Path, args: list[str]) -> dict[str, object]:
    """One ``gangsched bench --json`` run with the package of ``tree``."""
    cmd = [sys.executable, "-c", "from gangsched.cli import main; main()", "bench", *args]
    env_path = str(tree)
    out = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=True,
        cwd=tree,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    ).stdout
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", required=True, help="the earlier commit (any git revision)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each, interleaved")
    parser.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then bench options")
    opts = parser.parse_args(argv)
    args = [a for a in opts.bench_args if a != "--"] + ["--json"]
    with tempfile.TemporaryDirectory(prefix="gangsched-base-") as tmp:
        base = Path(tmp) / "base"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(base), opts.base],
            cwd=REPO,
            check=True,
            capture_output=True,
        )
        try:
            best = {"base": 0.0, "head": 0.0}
            for i in range(opts.runs):
                for name, tree in (("base", base), ("head", REPO)):
                    r = bench(tree, args)
                    pps = float(str(r["pods_per_second"]))
                    best[name] = max(best[name], pps)
                    print(f"run {i + 1} {name}: {pps:,.0f} pods/s, {r['gang_ms_mean']} ms/gang")
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(base)], cwd=REPO, check=False
            )
    ratio = best["head"] / best["base"] if best["base"] else float("nan")
    print(
        f"best of {opts.runs}: head {best['head']:,.0f} pods/s, {opts.base} "
        f"{best['base']:,.0f} pods/s: {ratio:.2f}x"
    )
    print("command: .venv/bin/python bench/ratio.py --base " + opts.base + " -- " + " ".join(args))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
