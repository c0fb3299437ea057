"""Small fluent builders for nodes and pods in core tests.

``make_node("n1").gpus(8).cpu("32").label("a", "b").taint("k", "v").info(requested=...)``
returns a NodeInfo; ``make_pod("p").gpus(1).tolerate("k").obj()`` returns a Pod. Quantities
go through the real parser, so ``cpu("500m")`` means 500 milli-cores.

Builders are immutable: every step returns a new builder, so a shared base such as
``GPU8 = make_node("g").gpus(8)`` can be extended in one test without leaking into another.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Self

from gangsched.core.cache import NodeInfo
from gangsched.core.model import (
    AffinityTerm,
    Node,
    NodeAffinity,
    Placement,
    Pod,
    PreferredTerm,
    Requirement,
    Taint,
    Toleration,
)
from gangsched.core.resources import CPU, GPU, MEMORY, PODS, ResourceList, parse_amount

__all__ = [
    "NodeBuilder",
    "PodBuilder",
    "field",
    "make_node",
    "make_pod",
    "missing_node",
    "req",
    "term",
]


def req(key: str, operator: str, *values: str) -> Requirement:
    """A node selector requirement: ``req("zone", "In", "a", "b")``."""
    return Requirement(key, operator, tuple(values))


def field(operator: str, *values: str, key: str = "metadata.name") -> Requirement:
    """A ``matchFields`` requirement, on ``metadata.name`` unless told otherwise."""
    return Requirement(key, operator, tuple(values))


def term(*expressions: Requirement, fields: tuple[Requirement, ...] = ()) -> AffinityTerm:
    """A node selector term from match expressions (and optional match fields)."""
    return AffinityTerm(match_expressions=tuple(expressions), match_fields=fields)


class NodeBuilder:
    """Builds a Node (``node()``) or a NodeInfo with requests counted on it (``info()``)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._allocatable: ResourceList = {PODS: 110}
        self._labels: dict[str, str] = {}
        self._taints: list[Taint] = []
        self._unschedulable = False
        self._ready = True

    def _clone(self) -> Self:
        new = copy.copy(self)
        new._allocatable = dict(self._allocatable)
        new._labels = dict(self._labels)
        new._taints = list(self._taints)
        return new

    def resource(self, name: str, quantity: str | int) -> Self:
        new = self._clone()
        new._allocatable[name] = parse_amount(name, quantity, f"allocatable.{name}")
        return new

    def cpu(self, quantity: str | int) -> Self:
        return self.resource(CPU, quantity)

    def memory(self, quantity: str | int) -> Self:
        return self.resource(MEMORY, quantity)

    def gpus(self, count: int) -> Self:
        return self.resource(GPU, count)

    def pods(self, count: int) -> Self:
        return self.resource(PODS, count)

    def without(self, name: str) -> Self:
        """Drop a resource from allocatable entirely."""
        new = self._clone()
        new._allocatable.pop(name, None)
        return new

    def label(self, key: str, value: str) -> Self:
        new = self._clone()
        new._labels[key] = value
        return new

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> Self:
        new = self._clone()
        new._taints.append(Taint(key, value, effect))
        return new

    def cordon(self) -> Self:
        new = self._clone()
        new._unschedulable = True
        return new

    def not_ready(self) -> Self:
        new = self._clone()
        new._ready = False
        return new

    def node(self) -> Node:
        return Node(
            name=self._name,
            allocatable=dict(self._allocatable),
            labels=dict(self._labels),
            taints=tuple(self._taints),
            unschedulable=self._unschedulable,
            ready=self._ready,
        )

    def info(self, requested: Mapping[str, int] | None = None) -> NodeInfo:
        """A NodeInfo with ``requested`` (scheduler units) already counted on the node."""
        info = NodeInfo(self._name, self.node())
        if requested:
            info.requested.update(requested)
            info.relist()
            whole = requested.get(GPU, 0)
            if info.gpus is not None and whole > 0:  # the GPUs counted take the first devices
                info.gpus.take(tuple(range(min(whole, len(info.gpus.used)))), 1000)
        return info


class PodBuilder:
    """Builds a Pod (``obj()``); requests start at one ``pods`` slot."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._requests: ResourceList = {PODS: 1}
        self._selector: list[tuple[str, str]] = []
        self._tolerations: list[Toleration] = []
        self._required: list[AffinityTerm] | None = None
        self._preferred: list[PreferredTerm] = []
        self._node_name = ""

    def _clone(self) -> Self:
        new = copy.copy(self)
        new._requests = dict(self._requests)
        new._selector = list(self._selector)
        new._tolerations = list(self._tolerations)
        new._required = None if self._required is None else list(self._required)
        new._preferred = list(self._preferred)
        return new

    def resource(self, name: str, quantity: str | int) -> Self:
        new = self._clone()
        new._requests[name] = parse_amount(name, quantity, f"requests.{name}")
        return new

    def cpu(self, quantity: str | int) -> Self:
        return self.resource(CPU, quantity)

    def memory(self, quantity: str | int) -> Self:
        return self.resource(MEMORY, quantity)

    def gpus(self, count: int) -> Self:
        return self.resource(GPU, count)

    def tolerate(
        self, key: str = "", operator: str = "Equal", value: str = "", effect: str = ""
    ) -> Self:
        new = self._clone()
        new._tolerations.append(Toleration(key, operator, value, effect))
        return new

    def selector(self, key: str, value: str) -> Self:
        new = self._clone()
        new._selector.append((key, value))
        return new

    def require(self, *terms: AffinityTerm) -> Self:
        """Add required node affinity terms (ORed). ``require()`` alone sets an empty,
        match-nothing list of terms."""
        new = self._clone()
        new._required = [*(new._required or ()), *terms]
        return new

    def prefer(self, weight: int, preference: AffinityTerm) -> Self:
        new = self._clone()
        new._preferred.append(PreferredTerm(weight, preference))
        return new

    def on(self, node_name: str) -> Self:
        """Request a node by name (``spec.nodeName`` before binding)."""
        new = self._clone()
        new._node_name = node_name
        return new

    def obj(self) -> Pod:
        required = None if self._required is None else tuple(self._required)
        placement = Placement(
            node_selector=tuple(self._selector),
            affinity=NodeAffinity(required=required, preferred=tuple(self._preferred)),
            tolerations=tuple(self._tolerations),
            node_name=self._node_name,
        )
        return Pod(
            uid=f"uid-{self._name}",
            namespace="default",
            name=self._name,
            requests=dict(self._requests),
            placement=placement,
        )


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_pod(name: str) -> PodBuilder:
    return PodBuilder(name)


def missing_node(name: str) -> NodeInfo:
    """A NodeInfo the cache knows only through pods bound to it: no Node object."""
    return NodeInfo(name, None)
