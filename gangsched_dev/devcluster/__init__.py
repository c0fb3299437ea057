"""A throwaway Kubernetes control plane (etcd + kube-apiserver + kwok) for end-to-end tests.

Binaries come from ``control-plane.sh``, package data beside this file (built from Go modules
and cached by version; ``hack/control-plane.sh`` runs it in a checkout).
"""

from gangsched_dev.devcluster.controlplane import (
    ControlPlane,
    ControlPlaneError,
    KubectlError,
    find_binaries,
)

__all__ = ["ControlPlane", "ControlPlaneError", "KubectlError", "find_binaries"]
