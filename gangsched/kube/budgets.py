"""PodDisruptionBudgets (``policy/v1``) for preemption: which pods each one covers and how
many of them may still be disrupted, kept current in the core by a list+watch reflector.

A budget becomes a :class:`~gangsched.core.model.DisruptionBudget`: its namespace, name,
``spec.selector`` (read by the same translation as pod affinity terms' label selectors) and
``status.disruptionsAllowed``, which the disruption controller of kube-controller-manager
computes. The translation never raises: a selector that cannot be read selects nothing (as
kube-scheduler's preemption skips a budget whose selector it cannot parse), an unreadable or
negative ``disruptionsAllowed`` is 0 (the budget allows nothing).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gangsched.api.fields import SpecError
from gangsched.api.selector import label_selector
from gangsched.core.model import DisruptionBudget, LabelSelector
from gangsched.core.scheduler import Scheduler
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import JSON
from gangsched.kube.io.reflector import Reflector
from gangsched.kube.io.slicing import SLICE_SECONDS, in_slices

__all__ = ["PDB_PATH", "budget_from", "budget_reflector"]

PDB_PATH = "/apis/policy/v1/poddisruptionbudgets"


def _identity(obj: JSON) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return "default", ""
    ns, name = meta.get("namespace"), meta.get("name")
    return (ns if isinstance(ns, str) and ns else "default"), (
        name if isinstance(name, str) else ""
    )


def _selector(obj: JSON) -> LabelSelector | None:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return None
    try:
        return label_selector(spec.get("selector"), "spec.selector")
    except (SpecError, TypeError, ValueError):
        return None


def _allowed(obj: JSON) -> int:
    status = obj.get("status")
    value = status.get("disruptionsAllowed") if isinstance(status, dict) else None
    if isinstance(value, bool) or not isinstance(value, int):
        return 0
    return max(0, value)


def budget_from(obj: JSON) -> DisruptionBudget:
    """A PodDisruptionBudget as preemption reads it (see the module docstring)."""
    ns, name = _identity(obj)
    return DisruptionBudget(ns, name, _selector(obj), _allowed(obj))


def budget_reflector(
    client: KubeApi,
    core: Scheduler,
    poke: Callable[[], None],
    *,
    slice_seconds: float = SLICE_SECONDS,
    on_yield: Callable[[], None] | None = None,
) -> Reflector:
    """List+watch every PodDisruptionBudget into ``core.budget_upsert`` / ``budget_delete``.
    A full list (the start, a relist) drops the budgets it no longer has and is handled in
    slices of ``slice_seconds`` (``on_yield`` is called at each yield)."""
    known: set[tuple[str, str]] = set()

    def upsert(obj: JSON) -> None:
        budget = budget_from(obj)
        known.add((budget.namespace, budget.name))
        core.budget_upsert(budget)

    def delete(key: tuple[str, str]) -> None:
        known.discard(key)
        core.budget_delete(*key)

    async def sync(items: list[JSON]) -> None:
        listed = {_identity(i) for i in items}
        await in_slices(known - listed, delete, slice_seconds, on_yield=on_yield)
        await in_slices(items, upsert, slice_seconds, on_yield=on_yield)
        poke()

    def handle(kind: str, obj: JSON) -> Awaitable[None] | None:
        if kind == "SYNC":
            return sync(obj.get("items") or [])
        if kind == "DELETED":
            delete(_identity(obj))
        else:
            upsert(obj)
        poke()  # a budget that allows more may let a waiting gang preempt
        return None

    return Reflector(client, PDB_PATH, handle, name="poddisruptionbudgets")
