"""First contact, as a new user follows the README: ``gangsched dev-cluster up``, the scheduler
run against it, the README's example Job (``examples/ddp-job.yaml``) applied with kubectl: the
dev cluster's own kube-controller-manager makes the Job's pods and gangsched binds all 4 as one
gang; ``kubectl get podgroups.gangsched.io`` lists the gang; ``dev-cluster down`` stops it all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from gangsched_dev.devcluster import ControlPlane

from .conftest import REPO, free_port
from .kube import wait_for


def test_the_readme_job_binds_whole_on_the_dev_cluster(
    control_plane: ControlPlane, tmp_path: Path
) -> None:
    state = tmp_path / "dev-cluster"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    gangsched = [sys.executable, "-m", "gangsched.cli"]
    up = subprocess.run(
        [*gangsched, "dev-cluster", "up", "--nodes", "2", "--state-dir", str(state)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert up.returncode == 0, up.stderr[-3000:]
    kubeconfig = up.stdout.strip().splitlines()[-1]
    kubectl = [str(control_plane.bin_dir / "kubectl"), f"--kubeconfig={kubeconfig}"]

    def kubectl_json(*args: str) -> dict[str, Any]:
        out = subprocess.run(
            [*kubectl, *args, "-o", "json"], check=True, capture_output=True, text=True, timeout=60
        )
        got: dict[str, Any] = json.loads(out.stdout)
        return got

    log = (tmp_path / "gangsched.log").open("wb")
    sched = subprocess.Popen(
        [
            *gangsched,
            "run",
            "--kubeconfig",
            kubeconfig,
            "--log-format",
            "console",
            "--http-bind-address",
            f"127.0.0.1:{free_port()}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=str(REPO),
    )
    try:
        subprocess.run(
            [*kubectl, "apply", "-f", str(REPO / "examples" / "ddp-job.yaml")],
            check=True,
            capture_output=True,
            timeout=60,
        )

        wait_for(
            "the Job's 4 pods bound",
            lambda: (
                sum(
                    1
                    for p in kubectl_json("get", "pods", "-n", "default")["items"]
                    if p["spec"].get("nodeName")
                )
                == 4
            ),
            timeout=120,
        )
        [group] = kubectl_json("get", "podgroups.gangsched.io", "-n", "default")["items"]
        assert group["metadata"]["name"] == "ddp"
    finally:
        sched.terminate()
        sched.wait(30)
        log.close()
        down = subprocess.run(
            [*gangsched, "dev-cluster", "down", "--state-dir", str(state)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        assert down.returncode == 0, down.stderr
