"""What preemption reads from the API objects: a pod's preemptionPolicy and nominatedNodeName
(also through the pod reader's fast path), a PodGroup's preemptionPolicy and
expectedRuntimeSeconds (spec fields on gangsched's own, annotations on the other conventions'),
and PodDisruptionBudgets, translated and kept current in the core by their reflector."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from gangsched.api.pod import pod_from
from gangsched.api.podgroup import podgroup_from, volcano_podgroup_from, xk8s_podgroup_from
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.model import DisruptionBudget, LabelSelector, Requirement
from gangsched.core.scheduler import Scheduler
from gangsched.kube.budgets import PDB_PATH, budget_from, budget_reflector
from gangsched.kube.podreader import PodReader
from tests.support.fakekube import FakeKube


def _pod(spec: dict[str, Any] | None = None, status: dict[str, Any] | None = None) -> Any:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u", "generation": 1},
        "spec": {"schedulerName": "gangsched", "containers": [{"name": "c"}], **(spec or {})},
        "status": status or {"phase": "Pending"},
    }


# ---- pods ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        (None, "PreemptLowerPriority"),
        ("PreemptLowerPriority", "PreemptLowerPriority"),
        ("Never", "Never"),
        ("never", "Never"),  # refused by the API server; read safely as Never
        (3, "Never"),
    ],
)
def test_a_pods_preemption_policy(policy: object, expected: str) -> None:
    spec = {} if policy is None else {"preemptionPolicy": policy}
    pod, _ = pod_from(_pod(spec))
    assert pod.preemption_policy == expected
    assert not pod.invalid_reason


def test_a_pods_nominated_node_is_read_and_kept_current_without_a_full_read() -> None:
    reader = PodReader()
    pod, _ = reader.read(_pod())
    assert pod.nominated_node == ""
    nominated = _pod(status={"phase": "Pending", "nominatedNodeName": "n3"})
    pod, _ = reader.read(nominated)
    assert pod.nominated_node == "n3"
    assert (reader.full_reads, reader.reused) == (1, 1), "a status change is no new spec"
    pod, _ = reader.read(_pod(status={"phase": "Pending"}))
    assert pod.nominated_node == ""


# ---- PodGroups -------------------------------------------------------------------------------
def _pg(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "g", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"minMember": 2, **spec}}


def test_a_podgroup_preempts_and_has_no_expected_runtime_by_default() -> None:
    gang = podgroup_from(_pg({}))
    assert (gang.preempt, gang.expected_runtime_seconds, gang.invalid_reason) == (True, None, "")


@pytest.mark.parametrize(
    ("spec", "preempt", "runtime"),
    [
        ({"preemptionPolicy": "Never"}, False, None),
        ({"preemptionPolicy": "PreemptLowerPriority"}, True, None),
        ({"expectedRuntimeSeconds": 600}, True, 600.0),
        ({"expectedRuntimeSeconds": 0.5, "preemptionPolicy": "Never"}, False, 0.5),
    ],
)
def test_podgroup_spec_fields(spec: dict[str, Any], preempt: bool, runtime: float | None) -> None:
    gang = podgroup_from(_pg(spec))
    assert not gang.invalid_reason
    assert (gang.preempt, gang.expected_runtime_seconds) == (preempt, runtime)
    assert gang.min_member == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"preemptionPolicy": "never"},
            "spec.preemptionPolicy: must be PreemptLowerPriority or Never, got 'never'",
        ),
        ({"preemptionPolicy": 1}, "spec.preemptionPolicy: must be PreemptLowerPriority or Never"),
        ({"expectedRuntimeSeconds": 0}, "spec.expectedRuntimeSeconds: must be a number of"),
        ({"expectedRuntimeSeconds": -5}, "spec.expectedRuntimeSeconds: must be a number of"),
        ({"expectedRuntimeSeconds": "600"}, "spec.expectedRuntimeSeconds: expected a number"),
        ({"expectedRuntimeSeconds": True}, "spec.expectedRuntimeSeconds: expected a number"),
        ({"expectedRuntimeSeconds": float("inf")}, "spec.expectedRuntimeSeconds: must be"),
    ],
)
def test_bad_podgroup_spec_fields_are_an_invalid_spec(spec: dict[str, Any], message: str) -> None:
    gang = podgroup_from(_pg(spec))
    assert gang.invalid_reason.startswith(message), gang.invalid_reason


@pytest.mark.parametrize("parse", [xk8s_podgroup_from, volcano_podgroup_from])
def test_other_conventions_say_it_with_annotations(parse: Callable[[Any], Any]) -> None:
    plain = parse(_pg({}))
    assert (plain.preempt, plain.expected_runtime_seconds, plain.invalid_reason) == (True, None, "")
    annotated = parse(
        _pg(
            {},
            {
                "gangsched.io/preemption-policy": "Never",
                "gangsched.io/expected-runtime-seconds": "90.5",
            },
        )
    )
    assert not annotated.invalid_reason
    assert (annotated.preempt, annotated.expected_runtime_seconds) == (False, 90.5)
    assert annotated.min_member == 2
    # the spec fields of gangsched's own PodGroup mean nothing there
    assert parse(_pg({"preemptionPolicy": "Never"})).preempt is True


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"gangsched.io/preemption-policy": "no"},
            "metadata.annotations[gangsched.io/preemption-policy]: must be "
            "PreemptLowerPriority or Never, got 'no'",
        ),
        (
            {"gangsched.io/expected-runtime-seconds": "10m"},
            "metadata.annotations[gangsched.io/expected-runtime-seconds]: expected a number "
            "of seconds, got '10m'",
        ),
        (
            {"gangsched.io/expected-runtime-seconds": "0"},
            "metadata.annotations[gangsched.io/expected-runtime-seconds]: must be a number of "
            "seconds > 0, got '0'",
        ),
        (
            {"gangsched.io/expected-runtime-seconds": "nan"},
            "metadata.annotations[gangsched.io/expected-runtime-seconds]: must be a number of "
            "seconds > 0",
        ),
    ],
)
@pytest.mark.parametrize("parse", [xk8s_podgroup_from, volcano_podgroup_from])
def test_bad_annotations_are_an_invalid_spec_naming_the_annotation(
    parse: Callable[[Any], Any], annotations: dict[str, str], message: str
) -> None:
    gang = parse(_pg({}, annotations))
    assert gang.invalid_reason.startswith(message), gang.invalid_reason
    assert gang.key == "ml/g"


def test_a_bad_minmember_is_reported_before_the_annotations() -> None:
    gang = xk8s_podgroup_from(
        _pg({"minMember": 0}, {"gangsched.io/preemption-policy": "no"}),
    )
    assert gang.invalid_reason.startswith("spec.minMember")


# ---- PodDisruptionBudgets --------------------------------------------------------------------
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
