"""Extension points. Expected failures are Status values, never exceptions.

A filter says whether a pod may go on a node; a scorer rates a node for a pod from 0 to 100.
A filter marked ``static`` looks only at the pod's Placement and the node's labels, taints and
flags (never at resources), so its verdict is cached per (Placement, node) until a node changes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol

from gangsched.core.cache import NodeInfo
from gangsched.core.model import Pod

__all__ = ["SUCCESS", "Code", "FilterPlugin", "ScorePlugin", "Status"]


class Code(enum.IntEnum):
    SUCCESS = 0
    UNSCHEDULABLE = 1  # may fit later, when the cluster changes
    UNRESOLVABLE = 2  # will not fit on this node whatever happens to other pods
    WAIT = 3
    ERROR = 4


@dataclass(frozen=True, slots=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS


SUCCESS = Status()


class FilterPlugin(Protocol):
    name: str
    static: bool

    def filter(self, pod: Pod, node: NodeInfo) -> Status: ...


class ScorePlugin(Protocol):
    name: str

    def score(self, pod: Pod, node: NodeInfo) -> float:
        """0 (worst) to 100 (best)."""
        ...
