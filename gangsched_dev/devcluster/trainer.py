"""Kubeflow Trainer (github.com/kubeflow/trainer/v2) beside the dev control plane: its CRDs,
its controller manager as a local process, and its admission webhooks served on loopback
(gomanager.py does the work; ``hack/controllers.sh trainer`` builds the manager from Go modules
once and caches it by version).

A TrainJob names a (Cluster)TrainingRuntime; Trainer makes a JobSet of it (the JobSet manager
must run too: :class:`~gangsched_dev.devcluster.jobset.JobSet`) and, when the runtime's
``podGroupPolicy`` asks for ``coscheduling``, a scheduler-plugins PodGroup
(``scheduling.x-k8s.io/v1alpha1``, whose CRD must be served) with the pods labelled
``scheduling.x-k8s.io/pod-group``.

Trainer's configuration has no certificate directory: its webhook server reads controller-
runtime's default, ``$TMPDIR/k8s-webhook-server/serving-certs``, so the manager runs with
``TMPDIR`` in its work directory. Its runtime status server (the ``TrainJobStatus`` feature) is
off: it would need a certificate of its own.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from gangsched_dev.devcluster.gomanager import LOOPBACK, GoManager

API_VERSION: Final = "trainer.kubeflow.org/v1alpha1"
TRAINJOB_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"


def probe_runtime(name: str) -> dict[str, Any]:
    """A ClusterTrainingRuntime: Trainer's validating webhook (failurePolicy Fail) must answer
    for a server-side dry-run create of it to pass."""
    container = {"name": "node", "image": "busybox"}
    job = {"template": {"spec": {"template": {"spec": {"containers": [container]}}}}}
    return {
        "apiVersion": API_VERSION,
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{"name": "node", **job}]}},
        },
    }


class Trainer(GoManager):
    """The Kubeflow Trainer manager beside a started :class:`ControlPlane`."""

    NAME = "trainer"
    TITLE = "the Kubeflow Trainer manager"

    @property
    def cert_dir(self) -> Path:
        return self.workdir / "tmp" / "k8s-webhook-server" / "serving-certs"

    def env(self) -> dict[str, str]:
        return {**os.environ, "TMPDIR": str(self.workdir / "tmp")}

    def configuration(
        self, *, webhook_port: int, cert_dir: Path, probe_port: int
    ) -> dict[str, Any]:
        """Trainer's ``Configuration``: webhooks on loopback, its certificate management off,
        no leader election, metrics off, the runtime status server off."""
        del cert_dir  # read from $TMPDIR (see the module docstring)
        return {
            "apiVersion": "config.trainer.kubeflow.org/v1alpha1",
            "kind": "Configuration",
            "webhook": {"host": LOOPBACK, "port": webhook_port},
            "leaderElection": {"leaderElect": False},
            "metrics": {"bindAddress": "0"},
            "health": {
                "healthProbeBindAddress": f"{LOOPBACK}:{probe_port}",
                "readinessEndpointName": "readyz",
                "livenessEndpointName": "healthz",
            },
            "certManagement": {"enable": False},
            "featureGates": {"TrainJobStatus": False},
        }

    def webhooks_answer(self) -> bool:
        return self.dry_run_create(probe_runtime("gangsched-webhook-probe")) is not None
