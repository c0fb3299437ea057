"""A throwaway Kubernetes control plane (etcd + kube-apiserver + kwok) for end-to-end tests.

Binaries come from ``control-plane.sh``, package data beside this file (built from Go modules
and cached by version; ``hack/control-plane.sh`` runs it in a checkout).

The names below load the control plane's module when first used: ``gangsched dev-cluster``'s
command line (gangsched_dev/devcluster/cli.py) is part of every ``gangsched`` command's parser
in a checkout, and the scheduler's start should not pay for what only the dev cluster runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gangsched_dev.devcluster.controlplane import (
        ControlPlane,
        ControlPlaneError,
        KubectlError,
        find_binaries,
    )

__all__ = ["ControlPlane", "ControlPlaneError", "KubectlError", "find_binaries"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("gangsched_dev.devcluster.controlplane"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
