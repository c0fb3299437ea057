"""PodDisruptionBudgets for preemption: what is read from each (its selector and
disruptionsAllowed), and the reflector that keeps them current in the core."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.model import DisruptionBudget, LabelSelector, Requirement
from gangsched.core.scheduler import Scheduler
from gangsched.kube.budgets import PDB_PATH, budget_from, budget_reflector
from tests.support.fakekube import FakeKube


def _pdb(
    name: str, selector: Any = None, allowed: Any = 1, ns: str = "ml", **extra: Any
) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": ns},
        "spec": {} if selector is None else {"selector": selector},
        "status": {"disruptionsAllowed": allowed},
    }
    obj.update(extra)
    return obj


def test_a_budget_is_its_selector_and_disruptions_allowed() -> None:
    budget = budget_from(
        _pdb(
            "db",
            {
                "matchLabels": {"app": "db"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
            },
            allowed=2,
        )
    )
    assert budget == DisruptionBudget(
        "ml",
        "db",
        LabelSelector((("app", "db"),), (Requirement("tier", "In", ("a", "b")),)),
        2,
    )


def test_an_empty_selector_and_a_missing_one_are_kept_apart() -> None:
    assert budget_from(_pdb("all", {})).selector == LabelSelector((), ())
    assert budget_from(_pdb("none")).selector is None


@pytest.mark.parametrize(
    "obj",
    [
        _pdb("bad", {"matchExpressions": [{"key": "a", "operator": "Near"}]}),
        _pdb("bad", {"matchLabels": {"a": 1}}),
        _pdb("bad", "app=db"),
        {"metadata": {"name": "bad", "namespace": "ml"}, "spec": "x", "status": None},
    ],
)
def test_an_unreadable_selector_selects_nothing(obj: Any) -> None:
    budget = budget_from(obj)
    assert (budget.namespace, budget.name, budget.selector) == ("ml", "bad", None)


@pytest.mark.parametrize(("allowed", "expected"), [(3, 3), (0, 0), (-1, 0), ("2", 0), (None, 0)])
def test_disruptions_allowed_that_cannot_be_read_allow_nothing(
    allowed: object, expected: int
) -> None:
    assert budget_from(_pdb("b", {}, allowed)).allowed == expected


async def _until(what: str, cond: Callable[[], bool]) -> None:
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never: {what}")


async def test_the_reflector_keeps_the_cores_budgets_current() -> None:
    kube = FakeKube()
    core = Scheduler(CoreConfig(), FakeClock(0.0))
    kube.seed("/apis/policy/v1/namespaces/ml/poddisruptionbudgets", _pdb("a", {}), _pdb("b", {}))
    pokes: list[int] = []
    reflector = budget_reflector(kube, core, lambda: pokes.append(1))
    task = asyncio.create_task(reflector.run())
    try:
        await asyncio.wait_for(reflector.synced.wait(), 2.0)
        assert set(core.budgets) == {("ml", "a"), ("ml", "b")}
        assert kube.sent("list")[0].path == PDB_PATH
        kube.seed("/apis/policy/v1/namespaces/ml/poddisruptionbudgets", _pdb("a", {}, 0))
        await _until("the change", lambda: core.budgets[("ml", "a")].allowed == 0)
        kube.remove("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/b")
        await _until("the delete", lambda: ("ml", "b") not in core.budgets)
        # a relist drops what disappeared meanwhile
        kube.seed("/apis/policy/v1/namespaces/ml/poddisruptionbudgets", _pdb("c", {}))
        await _until("c", lambda: ("ml", "c") in core.budgets)
        kube.compact()
        kube.remove("/apis/policy/v1/namespaces/ml/poddisruptionbudgets/a")
        kube.end_watches()
        await _until("the relist", lambda: set(core.budgets) == {("ml", "c")})
        assert pokes, "a budget change wakes the scheduling loop"
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
