"""A throwaway Kubernetes control plane (etcd + kube-apiserver + kwok) for end-to-end tests.

Binaries come from ``hack/control-plane.sh`` (built from Go modules and cached by version).
"""

from gangsched.devcluster.controlplane import (
    ControlPlane,
    ControlPlaneError,
    KubectlError,
    find_binaries,
)

__all__ = ["ControlPlane", "ControlPlaneError", "KubectlError", "find_binaries"]
