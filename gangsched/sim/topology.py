"""Node topology for the simulator and the bench: racks and blocks synthesised over a node
inventory, and how many gangs ended up split across the domains of each level.

The public traces carry no topology, so racks are made up: the nodes in inventory order, the
first ``rack_size`` in rack 0, the next in rack 1, and so on; ``racks_per_block`` consecutive
racks make a block. Every node also gets ``kubernetes.io/hostname`` (its name), the smallest
level, as the kubelet sets it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from gangsched.core.labels import valid_label_key
from gangsched.core.model import Node

__all__ = [
    "HOSTNAME",
    "Racks",
    "check_label_key",
    "domains_spanned",
    "synthesise",
]

HOSTNAME = "kubernetes.io/hostname"


def check_label_key(v: str) -> str:
    """``v`` if it is a valid label key (core/labels.py, as Kubernetes validates one); else
    ValueError."""
    if not valid_label_key(v):
        raise ValueError(f"{v!r} is not a valid label key")
    return v


@dataclass(frozen=True, slots=True)
class Racks:
    """Synthesised racks: ``rack_size`` nodes a rack under label ``rack_label``; with
    ``racks_per_block``, that many racks a block under ``block_label``."""

    rack_size: int
    rack_label: str
    racks_per_block: int = 0
    block_label: str = ""

    @property
    def levels(self) -> tuple[str, ...]:
        """The topology levels these racks make, largest first, hostname last."""
        head = (self.block_label,) if self.racks_per_block else ()
        return (*head, self.rack_label, HOSTNAME)


def synthesise(nodes: Sequence[Node], racks: Racks) -> list[Node]:
    """``nodes`` with rack (and block) labels in inventory order, and the hostname label.
    A label a node already has is kept."""
    out: list[Node] = []
    for i, n in enumerate(nodes):
        rack = i // racks.rack_size
        made = {racks.rack_label: f"rack-{rack:04d}", HOSTNAME: n.name}
        if racks.racks_per_block:
            made[racks.block_label] = f"block-{rack // racks.racks_per_block:03d}"
        labels = made | dict(n.labels)
        out.append(n if labels == dict(n.labels) else replace(n, labels=labels))
    return out


def domains_spanned(
    node_names: Iterable[str], labels: Mapping[str, Mapping[str, str]], level: str
) -> int:
    """How many domains of ``level`` the nodes are in (a node without the label counts as a
    domain of its own)."""
    seen: set[str] = set()
    for name in node_names:
        value = labels.get(name, {}).get(level)
        seen.add(f"={value}" if value is not None else f"node:{name}")
    return len(seen)
