"""JobSet (sigs.k8s.io/jobset) beside the dev control plane: its CRD, its manager as a local
process, and its admission webhooks served on loopback (gomanager.py does the work;
``hack/controllers.sh jobset`` builds the manager from Go modules once and caches it by
version).

The webhooks are the module's ``config/components/webhook``, with the patches that limit the
pod webhooks to JobSet's pods; they answer once a server-side dry-run create of a JobSet passes
through both JobSet webhooks.

JobSet creates Jobs; the Job controller of kube-controller-manager
(:meth:`ControlPlane.start_controller_manager`) creates their pods.

    with ControlPlane() as cp:
        cp.start_kwok()
        cp.start_controller_manager()
        with JobSet(cp):
            cp.kubectl("apply", "-f", "jobset.yaml")
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from gangsched_dev.devcluster.gomanager import GoManager, kubebuilder_configuration

API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_KEY_LABEL: Final = "jobset.sigs.k8s.io/job-key"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"

_PROBE_NAMESPACE: Final = "default"


def probe_jobset(name: str) -> dict[str, Any]:
    """The smallest valid JobSet: a server-side dry-run create of it passes both webhooks."""
    container = {"name": "c", "image": "busybox"}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": _PROBE_NAMESPACE},
        "spec": {
            "replicatedJobs": [
                {"name": "probe", "replicas": 1, "template": {"spec": {"template": template}}}
            ]
        },
    }


class JobSet(GoManager):
    """The JobSet manager beside a started :class:`ControlPlane`."""

    NAME = "jobset"
    TITLE = "the JobSet manager"

    def configuration(
        self, *, webhook_port: int, cert_dir: Path, probe_port: int
    ) -> dict[str, Any]:
        """JobSet's ``Configuration``: webhooks on loopback from ``cert_dir``, internal
        certificate management off, no leader election, metrics off (``"0"``)."""
        return kubebuilder_configuration(
            "config.jobset.x-k8s.io/v1alpha1",
            webhook_port=webhook_port,
            cert_dir=cert_dir,
            probe_port=probe_port,
        )

    def webhooks_answer(self) -> bool:
        """A server-side dry-run create calls the mutating then the validating webhook: the
        mutating one makes the child Jobs Indexed (the CRD has no such default), and the
        validating one ran too, or the create would have failed."""
        created = self.dry_run_create(probe_jobset("gangsched-webhook-probe"))
        if created is None:
            return False
        jobs = created.get("spec", {}).get("replicatedJobs") or [{}]
        return bool(jobs[0].get("template", {}).get("spec", {}).get("completionMode") == "Indexed")
