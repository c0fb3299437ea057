"""The MPI operator (github.com/kubeflow/mpi-operator) beside the dev control plane: its
MPIJob CRD and the operator as a local process (``hack/controllers.sh mpi`` builds it from Go
modules once and caches it by version; it has no webhooks).

Run with ``--gang-scheduling=<scheduler name>``, the operator sets that ``schedulerName`` on
an MPIJob's launcher and workers, labels them ``scheduling.x-k8s.io/pod-group: <MPIJob>`` and
creates a scheduler-plugins PodGroup (``scheduling.x-k8s.io/v1alpha1``, whose CRD must be
served) of that name. It makes the workers' pods itself and the launcher as a Job (the Job
controller of kube-controller-manager makes its pod).

The operator always elects a leader (a Lease in ``mpi-operator``, created here) and serves its
health check on the fixed port 8080 of every interface: that port must be free.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Final, Self

from gangsched_dev.devcluster.controlplane import ControlPlane
from gangsched_dev.devcluster.gomanager import GoManager

API_VERSION: Final = "kubeflow.org/v2beta1"
LOCK_NAMESPACE: Final = "mpi-operator"
HEALTH_PORT: Final = 8080


class MPIOperator(GoManager):
    """The MPI operator beside a started :class:`ControlPlane`, gang scheduling its MPIJobs
    for the scheduler ``scheduler_name``."""

    NAME = "mpi"
    TITLE = "the MPI operator"
    READY: ClassVar[str] = f"its /healthz on port {HEALTH_PORT} and its leader lease"

    def __init__(
        self,
        cp: ControlPlane,
        bin_dir: str | Path | None = None,
        *,
        scheduler_name: str = "gangsched",
        extra_args: Sequence[str] = (),
        ready_timeout: float = 120.0,
    ) -> None:
        super().__init__(cp, bin_dir, ready_timeout=ready_timeout)
        self.scheduler_name = scheduler_name
        self.extra_args = tuple(extra_args)

    def configuration(
        self, *, webhook_port: int, cert_dir: Path, probe_port: int
    ) -> dict[str, Any] | None:
        return None  # flags only

    def argv(self, binary: Path, *, config_file: Path | None) -> list[str]:
        return [
            str(binary),
            f"--kubeConfig={self.cp.kubeconfig}",
            f"--gang-scheduling={self.scheduler_name}",
            f"--lock-namespace={LOCK_NAMESPACE}",
            "--kube-api-qps=50",
            "--kube-api-burst=100",
            *self.extra_args,
        ]

    def start(self) -> Self:
        """Its lock namespace, then as every manager."""
        self.cp.kubectl("create", "namespace", LOCK_NAMESPACE, check=False)
        return super().start()

    def ready(self) -> bool:
        """Health check answered and the leader lease held by this process."""
        try:
            url = f"http://127.0.0.1:{HEALTH_PORT}/healthz"
            with urllib.request.urlopen(url, timeout=5) as resp:
                if int(resp.status) != 200:
                    return False
        except (OSError, urllib.error.URLError):
            return False
        lease = self.cp.kubectl(
            "get", "lease", "-n", LOCK_NAMESPACE, "-o", "name", check=False
        ).stdout
        return bool(lease.strip())

    def webhooks_answer(self) -> bool:
        return True  # none
