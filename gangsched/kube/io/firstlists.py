"""The scheduler's first lists, named once: for the reflectors that make them (service.py) and
for the start, which asks for their first pages before the rest of the scheduler is loaded
(gangsched/boot.py). Nodes and pods: the two lists that take the API server long."""

from __future__ import annotations

from typing import Final

__all__ = ["NODES_PATH", "NODE_PAGE", "PODS_PATH", "POD_PAGE", "first_pages"]

NODES_PATH: Final = "/api/v1/nodes"
NODE_PAGE: Final = 500
PODS_PATH: Final = "/api/v1/pods"
POD_PAGE: Final = 1000


def first_pages() -> list[tuple[str, dict[str, int]]]:
    """Each list's first request: its path and parameters, as the reflector sends them."""
    return [(NODES_PATH, {"limit": NODE_PAGE}), (PODS_PATH, {"limit": POD_PAGE})]
