"""kube-scheduler v1.36, built by hack/control-plane.sh next to kube-apiserver, as a process
against a dev control plane: the reference the differential test compares gangsched with.

Flags: ``--kubeconfig`` (the control plane's admin kubeconfig), ``--leader-elect=false`` (one
instance, no Lease to wait for) and ``--secure-port=0`` (no serving endpoint, hence no
delegated authentication or authorization to set up). Everything else is kube-scheduler's
default profile, ``default-scheduler``.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from gangsched_dev.devcluster import ControlPlane

__all__ = ["BINARY", "KubeScheduler"]

BINARY = "kube-scheduler"


class KubeScheduler:
    def __init__(self, cp: ControlPlane, log: Path, *extra: str) -> None:
        self.cp = cp
        self.log = log
        self.args = [
            str(cp.bin_dir / BINARY),
            f"--kubeconfig={cp.kubeconfig}",
            "--leader-elect=false",
            "--secure-port=0",
            "-v=2",
            *extra,
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available(cp: ControlPlane) -> bool:
        return os.access(cp.bin_dir / BINARY, os.X_OK)

    def start(self) -> KubeScheduler:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""
