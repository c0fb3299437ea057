"""kube-controller-manager for the dev control plane: its command line and its readiness probe.

The dev control plane runs no controllers by default (a bare API server is what most tests
want). :meth:`ControlPlane.start_controller_manager` adds kube-controller-manager, built by
``control-plane.sh`` in the same ``go build`` as kube-apiserver, so that Jobs, StatefulSets and
ReplicaSets create their pods as they do in a real cluster:

- only the controllers asked for (default :data:`DEFAULT_CONTROLLERS`), by their upstream names
  (``kube-controller-manager --help``, ``--controllers``);
- the admin kubeconfig for everything (``--use-service-account-credentials`` stays false: the
  dev control plane has no ServiceAccount admission, so no per-controller identities);
- no leader election (one instance, no Lease to wait for);
- HTTPS on a free loopback port with a self-signed certificate, used only for ``/healthz``
  (which it serves to anyone; ``--authentication-skip-lookup`` because the dev API server has
  no ``extension-apiserver-authentication`` ConfigMap to look up): every controller that starts
  registers a named check, so ``/healthz?verbose`` listing ``[+]<controller> ok`` for each one
  asked for means they were all built and started.
"""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Final

BINARY: Final = "kube-controller-manager"

JOB: Final = "job-controller"
STATEFULSET: Final = "statefulset-controller"
REPLICASET: Final = "replicaset-controller"
GARBAGE_COLLECTOR: Final = "garbage-collector-controller"
SERVICE_ACCOUNT_TOKEN: Final = "serviceaccount-token-controller"

# Jobs, StatefulSets and ReplicaSets create their pods; the garbage collector deletes a deleted
# owner's pods (ownerReferences), as in a real cluster.
DEFAULT_CONTROLLERS: Final = (JOB, STATEFULSET, REPLICASET, GARBAGE_COLLECTOR)


def argv(
    binary: Path,
    *,
    kubeconfig: Path,
    cert_dir: Path,
    port: int,
    controllers: Sequence[str],
    service_account_key: Path,
    root_ca: Path,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The kube-controller-manager command line for a dev control plane.

    The service-account key and root CA are passed only when the token controller is asked
    for: kube-controller-manager starts that controller whenever it has a key.
    """
    args = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--authentication-skip-lookup=true",
        "--leader-elect=false",
        f"--controllers={','.join(controllers)}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={cert_dir}",
    ]
    if SERVICE_ACCOUNT_TOKEN in controllers:
        args += [
            f"--service-account-private-key-file={service_account_key}",
            f"--root-ca-file={root_ca}",
        ]
    return [*args, *extra_args]


def controllers_healthy(port: int, controllers: Sequence[str]) -> bool:
    """True when ``/healthz?verbose`` answers 200 with ``[+]<name> ok`` for every controller.

    A check is registered only once its controller was built, so a missing line means "not
    yet". (Only ``/healthz`` itself is always allowed; ``/healthz/<name>`` would need a user.)
    """
    # The serving certificate is self-signed (--cert-dir) and this is loopback only.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    url = f"https://127.0.0.1:{port}/healthz?verbose"
    try:
        with urllib.request.urlopen(url, timeout=5, context=context) as resp:
            if int(resp.status) != 200:
                return False
            lines = set(resp.read().decode(errors="replace").splitlines())
    except (OSError, urllib.error.URLError):
        return False
    return all(f"[+]{name} ok" in lines for name in controllers)
