"""The upstream gang API's end-to-end tests again, on the next Kubernetes minor.

The suite runs on Kubernetes 1.36 (``scheduling.k8s.io/v1alpha2``); 1.37 serves the API as
``v1beta1`` with merged feature gates. Building a second Kubernetes takes about 15 minutes on
2 cores, so the test command does not build it: when a 1.37 control plane is in the cache
(``bash hack/control-plane.sh 1.37``), this test runs the upstream API's end-to-end tests
(``test_workload_api.py``, ``test_topology.py``) against it, in a pytest of their own;
otherwise it is skipped, saying how to build it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

NEXT = "1.37"
MODULES = ("tests/e2e/test_workload_api.py", "tests/e2e/test_topology.py")
ROOT = Path(__file__).resolve().parents[2]


def _cached(series: str) -> Path | None:
    """The newest cached control plane of a Kubernetes series, or None."""
    root = Path(
        os.environ.get("GANGSCHED_CP_CACHE", str(Path.home() / ".cache/gangsched/control-plane"))
    )

    def patch(p: Path) -> int:
        m = re.match(rf"v{re.escape(series)}\.(\d+)-", p.name)
        return int(m.group(1)) if m else -1

    built = [p for p in root.glob(f"v{series}.*-*") if (p / "kube-apiserver").exists()]
    return max(built, key=patch) if built else None


def test_upstream_gang_api_on_the_next_kubernetes() -> None:
    bin_dir = _cached(NEXT)
    if bin_dir is None:
        pytest.skip(
            f"no Kubernetes {NEXT} control plane built; `bash hack/control-plane.sh {NEXT}` "
            f"builds it (about 15 minutes on 2 cores), then this runs {', '.join(MODULES)} on it"
        )
    env = {**os.environ, "GANGSCHED_CP_BIN": str(bin_dir)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *MODULES],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    out = run.stdout + run.stderr
    assert run.returncode == 0, f"on {bin_dir.name}:\n{out[-6000:]}"
    summary = re.search(r"(\d+) passed", out)
    assert summary and int(summary.group(1)) >= 5, out[-2000:]
    assert "skipped" not in out.splitlines()[-1], out[-2000:]
