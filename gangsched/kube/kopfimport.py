"""kopf's first import, without the Kubernetes client libraries it can interoperate with.

When kopf is first imported it imports ``kubernetes_asyncio.client`` (and ``kubernetes``'),
if installed, only to recognise those clients' object classes among what a handler returns.
The PodGroup controller never gives kopf such objects, and ``kubernetes_asyncio.client``
defines about 700 model classes: about a CPU-second on the thread beside the scheduling loop,
at the moment the scheduler is busiest (it starts once the caches are in). While kopf is first
imported on the calling thread, imports of those two packages from that thread fail, so kopf
takes them as absent, the way it runs where they are not installed; other threads, and later
imports, are not affected.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Sequence
from types import ModuleType

__all__ = ["import_kopf"]

_LEFT_OUT = ("kubernetes", "kubernetes_asyncio")


class _LeaveOut(importlib.abc.MetaPathFinder):
    """Fails the imports of the client libraries asked for on one thread."""

    def __init__(self, thread: int) -> None:
        self._thread = thread

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if threading.get_ident() == self._thread and fullname.split(".")[0] in _LEFT_OUT:
            raise ModuleNotFoundError(f"left out while kopf is imported: {fullname}")
        return None


_lock = threading.Lock()


def import_kopf() -> ModuleType:
    """kopf, imported without ``kubernetes`` and ``kubernetes_asyncio`` the first time."""
    with _lock:
        if "kopf" not in sys.modules:
            finder = _LeaveOut(threading.get_ident())
            sys.meta_path.insert(0, finder)
            try:
                importlib.import_module("kopf")
            finally:
                sys.meta_path.remove(finder)
    return sys.modules["kopf"]
