"""LeaderWorkerSet (sigs.k8s.io/lws) beside the dev control plane: its CRDs, its manager as a
local process with gang scheduling on, and its admission webhooks served on loopback
(gomanager.py does the work; ``hack/controllers.sh lws`` builds the manager from Go modules once
and caches it by version).

Gang scheduling is LWS's ``gangSchedulingManagement.schedulerProvider: volcano``, its only
provider: its pod webhook annotates every pod of a group ``scheduling.k8s.io/group-name``, and
its controller creates a Volcano PodGroup (``scheduling.volcano.sh/v1beta1``) per group with
``minMember`` = the group's size. The Volcano PodGroup CRD must be served (its
``podgroups.scheduling.volcano.sh``); the Volcano scheduler is not needed. LWS makes
StatefulSets; the StatefulSet controller of kube-controller-manager makes the pods.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

from gangsched_dev.devcluster.gomanager import GoManager, kubebuilder_configuration

API_VERSION: Final = "leaderworkerset.x-k8s.io/v1"
NAME_LABEL: Final = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL: Final = "leaderworkerset.sigs.k8s.io/worker-index"
REVISION_LABEL: Final = "leaderworkerset.sigs.k8s.io/template-revision-hash"
EXCLUSIVE_TOPOLOGY: Final = "leaderworkerset.sigs.k8s.io/exclusive-topology"
GROUP_NAME_ANNOTATION: Final = "scheduling.k8s.io/group-name"

_PROBE_NAMESPACE: Final = "default"


def probe_lws(name: str) -> dict[str, Any]:
    """The smallest valid LeaderWorkerSet: a server-side dry-run create passes both LWS
    webhooks."""
    template = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    return {
        "apiVersion": API_VERSION,
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": _PROBE_NAMESPACE},
        "spec": {"leaderWorkerTemplate": {"size": 1, "workerTemplate": template}},
    }


class LeaderWorkerSet(GoManager):
    """The LWS manager beside a started :class:`ControlPlane`."""

    NAME = "lws"
    TITLE = "the LeaderWorkerSet manager"

    def configuration(
        self, *, webhook_port: int, cert_dir: Path, probe_port: int
    ) -> dict[str, Any]:
        """LWS's ``Configuration``: webhooks on loopback from ``cert_dir``, internal certificate
        management off, no leader election, metrics off, gang scheduling through Volcano
        PodGroups."""
        config = kubebuilder_configuration(
            "config.lws.x-k8s.io/v1alpha1",
            webhook_port=webhook_port,
            cert_dir=cert_dir,
            probe_port=probe_port,
        )
        return {**config, "gangSchedulingManagement": {"schedulerProvider": "volcano"}}

    def webhooks_answer(self) -> bool:
        """The mutating webhook gives ``networkConfig.subdomainPolicy: Shared`` (the CRD has no
        such default); the validating one ran too, or the create would have failed."""
        created = self.dry_run_create(probe_lws("gangsched-webhook-probe"))
        if created is None:
            return False
        network = created.get("spec", {}).get("networkConfig") or {}
        return bool(network.get("subdomainPolicy") == "Shared")
