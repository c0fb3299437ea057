"""Kueue (sigs.k8s.io/kueue) beside the dev control plane: its CRDs, its manager as a local
process, and the admission webhooks of the integrations it runs served on loopback
(gomanager.py does the work; ``hack/controllers.sh kueue`` builds the manager from Go modules
once and caches it by version).

Kueue admits: a Job (or JobSet) labelled ``kueue.x-k8s.io/queue-name`` is suspended by Kueue's
webhook, waits in its LocalQueue until its ClusterQueue has quota, and is resumed when admitted;
the Job controller of kube-controller-manager then makes the pods and gangsched places them.

Only the webhooks of Kueue's own objects and of the integrations named in ``frameworks`` are
registered: Kueue serves no other integration's webhook path, and a registered webhook nobody
serves would refuse what it matches (failurePolicy Fail). The visibility API server is off
(``VisibilityOnDemand=false``): it is an aggregated API the dev cluster does not register.

With its internal certificate management off, Kueue v0.19 reads its metrics server's
certificate from the fixed path ``/etc/kueue/metrics/certs`` and exits without it (even with
metrics off). The manager therefore runs in a mount namespace of its own (``unshare --user
--map-root-user --mount``, no privilege needed where unprivileged user namespaces are allowed)
in which a tmpfs over ``/etc`` holds the webhook's certificate at that path; the host's
``/etc`` is untouched.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Self

from gangsched_dev.devcluster.controlplane import ControlPlane
from gangsched_dev.devcluster.gomanager import GoManager, ManagerError, kubebuilder_configuration

API_VERSION: Final = "kueue.x-k8s.io/v1beta2"
QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
PODSET_LABEL: Final = "kueue.x-k8s.io/podset"
WORKLOAD_ANNOTATION: Final = "kueue.x-k8s.io/workload"
NAMESPACE: Final = "kueue-system"

# integration -> the API group of its webhooks
FRAMEWORK_GROUPS: Final = {
    "pod": "",
    "batch/job": "batch",
    "jobset.x-k8s.io/jobset": "jobset.x-k8s.io",
    "leaderworkerset.x-k8s.io/leaderworkerset": "leaderworkerset.x-k8s.io",
}
_PROBE_NAMESPACE: Final = "default"


def probe_job(name: str) -> dict[str, Any]:
    """A Job that names a LocalQueue: Kueue's mutating webhook suspends it."""
    container = {"name": "c", "image": "busybox"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": _PROBE_NAMESPACE,
            "labels": {QUEUE_LABEL: "gangsched-webhook-probe"},
        },
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [container]}}},
    }


class Kueue(GoManager):
    """The Kueue manager beside a started :class:`ControlPlane`. ``settings`` are merged
    into its Configuration (``waitForPodsReady``, ``fairSharing``...)."""

    NAME = "kueue"
    TITLE = "the Kueue manager"

    def __init__(
        self,
        cp: ControlPlane,
        bin_dir: str | Path | None = None,
        *,
        frameworks: Sequence[str] = ("batch/job",),
        settings: Mapping[str, Any] | None = None,
        ready_timeout: float = 120.0,
    ) -> None:
        super().__init__(cp, bin_dir, ready_timeout=ready_timeout)
        unknown = [f for f in frameworks if f not in FRAMEWORK_GROUPS]
        if unknown:
            raise ValueError(f"integrations not known here: {unknown}")
        self.frameworks = tuple(frameworks)
        self.settings = dict(settings or {})

    def configuration(
        self, *, webhook_port: int, cert_dir: Path, probe_port: int
    ) -> dict[str, Any]:
        """Kueue's ``Configuration``: webhooks on loopback from ``cert_dir``, internal
        certificate management off, no leader election, metrics and visibility off, the
        integrations of ``frameworks``; then ``settings``."""
        config = kubebuilder_configuration(
            "config.kueue.x-k8s.io/v1beta2",
            webhook_port=webhook_port,
            cert_dir=cert_dir,
            probe_port=probe_port,
        )
        return {
            **config,
            "namespace": NAMESPACE,
            "integrations": {"frameworks": list(self.frameworks)},
            "featureGates": {"VisibilityOnDemand": False},
            **self.settings,
        }

    def argv(self, binary: Path, *, config_file: Path | None) -> list[str]:
        """The manager's command line, run inside a mount namespace whose ``/etc`` has the
        serving certificate at ``/etc/kueue/metrics/certs`` (see the module docstring)."""
        if shutil.which("unshare") is None:
            raise ManagerError("unshare (util-linux) not found: the Kueue manager needs it here")
        setup = (
            "mount -t tmpfs tmpfs /etc && mkdir -p /etc/kueue/metrics/certs && "
            'cp "$0/tls.crt" "$0/tls.key" /etc/kueue/metrics/certs/ && exec "$@"'
        )
        cert_dir = self.cert_dir
        return [
            *["unshare", "--user", "--map-root-user", "--mount", "--", "sh", "-c", setup],
            str(cert_dir),
            *super().argv(binary, config_file=config_file),
        ]

    def start(self) -> Self:
        """Its namespace (Kueue's events and defaults name it), then as every manager."""
        self.cp.kubectl("create", "namespace", NAMESPACE, check=False)
        return super().start()

    def keep_webhook(self, hook: Mapping[str, Any]) -> bool:
        groups = {FRAMEWORK_GROUPS[f] for f in self.frameworks} | {"kueue.x-k8s.io"}
        rules = hook.get("rules") or []
        return bool(rules) and all(set(r.get("apiGroups") or [""]) <= groups for r in rules)

    def webhooks_answer(self) -> bool:
        """A Job naming a LocalQueue comes back suspended from a server-side dry-run create:
        Kueue's Job webhook ran."""
        created = self.dry_run_create(probe_job("gangsched-webhook-probe"))
        return created is not None and created.get("spec", {}).get("suspend") is True
