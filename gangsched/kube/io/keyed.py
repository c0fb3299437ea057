"""A watch handler for objects known by a key (``namespace/name`` or ``name``): it keeps the
set of keys seen, so that a relist drops what disappeared meanwhile, and handles a full list in
slices that yield to the event loop (see slicing.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gangsched.kube.io.client import JSON
from gangsched.kube.io.reflector import Handler
from gangsched.kube.io.slicing import in_slices

__all__ = ["keyed_handler"]


def keyed_handler(
    key_of: Callable[[JSON], str],
    upsert: Callable[[JSON], None],
    delete: Callable[[str], None],
    poke: Callable[[], None],
    budget: float,
    on_yield: Callable[[], None] | None,
) -> Handler:
    """A watch handler that keeps a set of keys, so a relist drops what disappeared. A full
    list ("SYNC") is handled by the awaitable it returns, in slices of ``budget`` seconds that
    yield to the event loop (see slicing.py); the reflector awaits it before the next event."""
    known: set[str] = set()

    def keep(key: str, item: JSON) -> None:
        known.add(key)
        upsert(item)

    async def sync(items: list[JSON]) -> None:
        fresh = {key_of(item): item for item in items}
        await in_slices(known - fresh.keys(), delete, budget, on_yield=on_yield)
        known.clear()
        await in_slices(fresh.items(), lambda kv: keep(*kv), budget, on_yield=on_yield)
        poke()

    def handle(kind: str, obj: JSON) -> Awaitable[None] | None:
        if kind == "SYNC":
            return sync(obj.get("items") or [])
        if kind == "DELETED":
            key = key_of(obj)
            known.discard(key)
            delete(key)
        else:
            known.add(key_of(obj))
            upsert(obj)
        poke()
        return None

    return handle
