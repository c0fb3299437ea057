"""Nodes (JSON) into the core's ``Node``, and Namespaces into the labels namespaceSelector
terms match. A node that cannot be read is never a candidate (not ready, nothing allocatable);
its GPU devices take their model and memory from the labels the settings name."""

from __future__ import annotations

from collections.abc import Mapping

from gangsched.api.fields import Obj, SpecError, as_list, as_map, identity, str_map
from gangsched.api.gpushare import GpuLabels
from gangsched.core.model import Node, Taint
from gangsched.core.quantity import QuantityError
from gangsched.core.resources import parse_resource_list

__all__ = ["namespace_from", "node_from"]

_GFD = GpuLabels()


def _node_from(obj: Obj, gpu_labels: GpuLabels) -> Node:
    meta = as_map(obj.get("metadata"), "metadata")
    name = str(meta.get("name", ""))
    spec = as_map(obj.get("spec"), "spec")
    status = as_map(obj.get("status"), "status")
    ready = False
    for c in as_list(status.get("conditions"), "status.conditions"):
        if isinstance(c, Mapping) and c.get("type") == "Ready":
            ready = c.get("status") == "True"
    try:
        alloc = parse_resource_list(
            as_map(status.get("allocatable") or status.get("capacity"), "status.allocatable"),
            f"node {name}: status.allocatable",
        )
    except (QuantityError, SpecError):
        alloc, ready = {}, False  # a node we cannot read is never a candidate
    taints = tuple(
        Taint(str(t.get("key") or ""), str(t.get("value") or ""), str(t.get("effect") or ""))
        for t in as_list(spec.get("taints"), "spec.taints")
        if isinstance(t, Mapping)
    )
    labels = str_map(meta.get("labels"), "metadata.labels")
    return Node(
        name,
        alloc,
        labels=labels,
        taints=taints,
        unschedulable=spec.get("unschedulable") is True,
        ready=ready,
        gpus=gpu_labels.devices(alloc, labels),
    )


def _namespace_from(obj: Obj) -> tuple[str, dict[str, str]]:
    meta = as_map(obj.get("metadata"), "metadata")
    return str(meta.get("name", "")), str_map(meta.get("labels"), "metadata.labels")


def node_from(obj: Obj, gpu_labels: GpuLabels = _GFD) -> Node:
    """A Node; one that cannot be read is never a candidate (ready=False, nothing allocatable).
    Its GPU devices' model and memory come from the labels ``gpu_labels`` names."""
    try:
        return _node_from(obj, gpu_labels)
    except Exception:
        _, name, _, _ = identity(obj)
        return Node(name, {}, ready=False)


def namespace_from(obj: Obj) -> tuple[str, dict[str, str]]:
    """A Namespace's name and labels (what namespaceSelector terms match); labels that cannot
    be read are taken as none."""
    try:
        return _namespace_from(obj)
    except Exception:
        return identity(obj)[1], {}
