"""gangsched's preemption of a plain pod (a gang of one) against kube-scheduler v1.36's
DefaultPreemption, scenario by scenario.

Two fresh control planes, kube-scheduler against one and gangsched against the other. Each
scenario gets the same namespace, the same two kwok nodes (``a`` and ``b``, 8 GPUs each) and
the same pods already bound with ``spec.nodeName`` on both, created in the same order (a
second apart, so that "the youngest victims" is defined and points away from the expected
answer wherever it could); then one preemptor pod arrives. What each scheduler did is read
back: which of the running pods it evicted, whether every victim carried the
``DisruptionTarget`` condition (reason ``PreemptionByScheduler``), where the preemptor was
bound, or that it was refused (``PodScheduled=False``, reason ``Unschedulable``) with nothing
evicted. The two outcomes must be equal, and equal to the one kube-scheduler's documented
preemption gives. (``status.nominatedNodeName`` is reported where seen, not compared: binding
clears it, often before the test looks.)

The running pods carry a finalizer, so a victim stays, terminating and with its condition,
until the test has seen it (kwok deletes a terminating pod at once); the test then removes the
finalizer and the preemptor binds where its victims were. No kube-controller-manager runs on
the dev control plane, so no disruption controller computes a PodDisruptionBudget's status:
the test writes it through the status subresource, the same on both planes
(``disruptionsAllowed: 0``), and both schedulers read it as written.

Needs ``kube-scheduler`` beside kube-apiserver (hack/control-plane.sh builds it; the test is
skipped when the binary is absent):

    GANGSCHED_CP_BIN=$(bash hack/control-plane.sh) .venv/bin/python -m pytest -q \\
        -p no:cacheprovider tests/e2e/test_differential_preemption.py
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import pytest

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.controlplane import find_binaries

from .conftest import REPO, SchedulerProcess
from .kube import condition, pod, wait_for
from .kube_scheduler import BINARY, KubeScheduler
from .test_differential import Api

Obj = dict[str, Any]

HOLD = "gangsched.io/e2e-hold"  # keeps a victim terminating until the test has seen it
LABEL = "e2e-preemption"  # the scenario's nodes; its pods select them
OUTCOME_TIMEOUT = 90.0
# name -> (value, preemptionPolicy)
CLASSES: dict[str, tuple[int, str]] = {
    "diff-p1": (1, "PreemptLowerPriority"),
    "diff-p5": (5, "PreemptLowerPriority"),
    "diff-p10": (10, "PreemptLowerPriority"),
    "diff-p100": (100, "PreemptLowerPriority"),
    "diff-p100-never": (100, "Never"),
}


# ---- scenarios ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Running:
    """A pod bound with spec.nodeName before the preemptor arrives (in list order)."""

    name: str
    node: str  # "a" or "b"
    gpus: int
    priority_class: str


@dataclass(frozen=True)
class Scenario:
    id: str
    running: tuple[Running, ...]
    preemptor_class: str
    expected_victims: frozenset[str]
    expected_node: str  # "" when the preemptor must stay unschedulable
    protect: str = ""  # a running pod a PodDisruptionBudget (disruptionsAllowed 0) covers


SCENARIOS = (
    # the lowest priority goes, though the younger pod is on a
    Scenario(
        "lowest-priority",
        (Running("b0", "b", 8, "diff-p5"), Running("a0", "a", 8, "diff-p10")),
        "diff-p100",
        frozenset({"b0"}),
        "b",
    ),
    # fewest victims: one pod on a rather than two (younger) ones on b
    Scenario(
        "fewest-victims",
        (
            Running("a0", "a", 8, "diff-p1"),
            Running("b0", "b", 4, "diff-p1"),
            Running("b1", "b", 4, "diff-p1"),
        ),
        "diff-p100",
        frozenset({"a0"}),
        "a",
    ),
    Scenario(
        "policy-never",
        (Running("a0", "a", 8, "diff-p1"), Running("b0", "b", 8, "diff-p1")),
        "diff-p100-never",
        frozenset(),
        "",
    ),
    Scenario(
        "equal-priority",
        (Running("a0", "a", 8, "diff-p1"), Running("b0", "b", 8, "diff-p1")),
        "diff-p1",
        frozenset(),
        "",
    ),
    # the budget spares a's pod, though it is the younger one
    Scenario(
        "disruption-budget",
        (Running("b0", "b", 8, "diff-p1"), Running("a0", "a", 8, "diff-p1")),
        "diff-p100",
        frozenset({"b0"}),
        "b",
        protect="a0",
    ),
)


# ---- the two planes ----------------------------------------------------------------------------


@dataclass
class Side:
    name: str
    cp: ControlPlane
    api: Api
    scheduler: str  # the pods' schedulerName
    process: KubeScheduler | SchedulerProcess


def _start_plane(with_crds: bool) -> ControlPlane:
    cp = ControlPlane()
    cp.start()
    try:
        if with_crds:
            cp.apply(REPO / "crds")
        cp.start_kwok()
    except BaseException:
        cp.stop()
        raise
    return cp


def _priority_classes(api: Api) -> None:
    for name, (value, policy) in CLASSES.items():
        api.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name},
                "value": value,
                "preemptionPolicy": policy,
            },
        )


@pytest.fixture(scope="module")
def sides(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Side, Side]]:
    bin_dir = find_binaries()
    if not (bin_dir / BINARY).exists():
        pytest.skip(f"{BINARY} not found in {bin_dir}: hack/control-plane.sh builds it")
    logs = tmp_path_factory.mktemp("differential-preemption")
    started: list[Side] = []
    planes: list[ControlPlane] = []
    try:
        for with_crds in (False, True):
            planes.append(_start_plane(with_crds))
        ref_cp, ours_cp = planes
        ref = Side(
            "kube-scheduler",
            ref_cp,
            Api(ref_cp),
            "default-scheduler",
            KubeScheduler(ref_cp, logs / "kube-scheduler.log"),
        )
        ours = Side(
            "gangsched",
            ours_cp,
            Api(ours_cp),
            "gangsched",
            SchedulerProcess(ours_cp, logs / "gangsched.log"),
        )
        for side in (ref, ours):
            _priority_classes(side.api)
            side.process.start()
            started.append(side)
        yield ref, ours
    finally:
        for side in started:
            side.process.stop()
        for cp in planes:
            cp.stop()


# ---- building a scenario -----------------------------------------------------------------------


def _path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def _get(side: Side, ns: str, name: str) -> Obj | None:
    found: Obj | None = side.api.get(_path(ns, name))
    return found


def _ready(side: Side, node: str) -> bool:
    obj = side.api.get(f"/api/v1/nodes/{node}") or {}
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or []
    )


def _running_since(side: Side, ns: str, name: str) -> str:
    p = _get(side, ns, name) or {}
    status = p.get("status") or {}
    return str(status.get("startTime") or "") if status.get("phase") == "Running" else ""


def _budget(side: Side, ns: str, protect: str) -> None:
    base = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    side.api.create(
        base,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep", "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": protect}}},
        },
    )
    status = {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1}
    code, out = side.api.call(
        "PATCH",
        f"{base}/keep/status",
        {"status": status | {"expectedPods": 1}},
        "application/merge-patch+json",
    )
    assert code == 200, f"{side.name}: PDB status: {code} {out}"


def _build(sides: tuple[Side, Side], ns: str, s: Scenario) -> None:
    """The same namespace, nodes, budget and running pods on both planes."""
    for side in sides:
        side.api.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
        )
        for n in ("a", "b"):
            side.cp.add_fake_node(f"{ns}-{n}", "16", "64Gi", 8, labels={LABEL: ns})
        if s.protect:
            _budget(side, ns, s.protect)
    for side in sides:
        for n in ("a", "b"):
            wait_for(f"{side.name}: node {ns}-{n} Ready", partial(_ready, side, f"{ns}-{n}"))
    started: dict[str, list[str]] = {side.name: [] for side in sides}
    for i, r in enumerate(s.running):
        if i:
            time.sleep(1.1)  # start times have a resolution of one second
        for side in sides:
            body = pod(
                r.name,
                ns,
                gpus=r.gpus,
                selector={LABEL: ns},
                scheduler=side.scheduler,
                labels={"app": r.name},
            )
            body["metadata"]["finalizers"] = [HOLD]
            body["spec"]["nodeName"] = f"{ns}-{r.node}"
            body["spec"]["priorityClassName"] = r.priority_class
            side.api.create(_path(ns), body)
        for side in sides:
            since = wait_for(
                f"{side.name}: {ns}/{r.name} Running",
                partial(_running_since, side, ns, r.name),
                timeout=60,
            )
            started[side.name].append(since)
    for name, times in started.items():
        # RFC 3339 in UTC: text order is time order
        assert times == sorted(set(times)), f"{name}: start times not increasing: {times}"


# ---- reading an outcome ------------------------------------------------------------------------


@dataclass
class Outcome:
    evicted: set[str] = field(default_factory=set)
    marked: set[str] = field(default_factory=set)  # seen terminating with DisruptionTarget
    nominated: str = ""
    node: str = ""  # where the preemptor was bound
    refused: str = ""  # the PodScheduled=False message when it was refused
    done: bool = False

    def summary(self, ns: str) -> str:
        def short(node: str) -> str:
            return node.removeprefix(f"{ns}-")

        if self.node:
            verdict = f"bound to {short(self.node)}"
        elif self.refused:
            verdict = f"unschedulable ({self.refused})"
        else:
            verdict = "no verdict in time"
        unmarked = sorted(self.evicted - self.marked)
        return (
            f"evicted {sorted(self.evicted)}, nominated {short(self.nominated) or '-'}, "
            f"{verdict}" + (f"; evicted without DisruptionTarget: {unmarked}" if unmarked else "")
        )


def _disruption_target(p: Obj) -> bool:
    cond = condition(p, "DisruptionTarget")
    return (
        cond is not None
        and cond.get("status") == "True"
        and cond.get("reason") == "PreemptionByScheduler"
    )


def _observe(side: Side, ns: str, s: Scenario, out: Outcome) -> None:
    """One look at the side: the preemptor first (its nomination is seen before the victims
    this look releases let it bind), then note and release the victims."""
    p = _get(side, ns, "preemptor") or {}
    for r in s.running:
        victim = _get(side, ns, r.name)
        if victim is None:
            out.evicted.add(r.name)  # gone before it was seen terminating
            continue
        if victim["metadata"].get("deletionTimestamp"):
            out.evicted.add(r.name)
            if _disruption_target(victim):
                out.marked.add(r.name)
            code, body = side.api.call(
                "PATCH",
                _path(ns, r.name),
                {"metadata": {"finalizers": None}},
                "application/merge-patch+json",
            )
            assert code in (200, 404), f"{side.name}: release {r.name}: {code} {body}"
    nominated = str((p.get("status") or {}).get("nominatedNodeName") or "")
    out.nominated = out.nominated or nominated
    out.node = str((p.get("spec") or {}).get("nodeName") or "")
    cond = condition(p, "PodScheduled") or {}
    unschedulable = (cond.get("status"), cond.get("reason")) == ("False", "Unschedulable")
    out.refused = str(cond.get("message", "")) if unschedulable else ""
    # Done: bound (the victims are gone, or it would not be), or refused with nothing
    # nominated and nothing evicted.
    out.done = bool(out.node) or (unschedulable and not nominated and not out.evicted)


def _outcomes(sides: tuple[Side, Side], ns: str, s: Scenario) -> list[Outcome]:
    for side in sides:
        body = pod("preemptor", ns, gpus=8, selector={LABEL: ns}, scheduler=side.scheduler)
        body["spec"]["priorityClassName"] = s.preemptor_class
        side.api.create(_path(ns), body)
    found = [Outcome() for _ in sides]
    deadline = time.monotonic() + OUTCOME_TIMEOUT
    while time.monotonic() < deadline and not all(o.done for o in found):
        for side, out in zip(sides, found, strict=True):
            if not out.done:
                _observe(side, ns, s, out)
        time.sleep(0.2)
    # a last look: what was evicted by the time both decided
    for side, out in zip(sides, found, strict=True):
        _observe(side, ns, s, out)
    return found


def _clean(sides: tuple[Side, Side], ns: str, s: Scenario) -> None:
    for side in sides:
        for name in [r.name for r in s.running] + ["preemptor"]:
            side.api.call(
                "PATCH",
                _path(ns, name),
                {"metadata": {"finalizers": None}},
                "application/merge-patch+json",
            )
            side.api.delete_now(_path(ns, name))
        for n in ("a", "b"):
            side.api.delete_now(f"/api/v1/nodes/{ns}-{n}")


# ---- the test ----------------------------------------------------------------------------------


@pytest.mark.parametrize("s", SCENARIOS, ids=[s.id for s in SCENARIOS])
def test_preemption_agrees_with_kube_scheduler(sides: tuple[Side, Side], s: Scenario) -> None:
    ns = f"pre-{s.id}"
    _build(sides, ns, s)
    try:
        outcomes = _outcomes(sides, ns, s)
        for side in sides:
            assert side.process.alive(), f"{side.name} exited:\n{side.process.tail()}"
        ref, ours = outcomes
        expected = Outcome(
            evicted=set(s.expected_victims),
            marked=set(s.expected_victims),
            nominated=f"{ns}-{s.expected_node}" if s.expected_node else "",
            node=f"{ns}-{s.expected_node}" if s.expected_node else "",
        )

        def key(o: Outcome) -> tuple[object, ...]:
            # (nominatedNodeName is shown, not compared: it is cleared on binding, which may
            # come before this test's next look)
            return (sorted(o.evicted), sorted(o.marked), o.node, bool(o.refused))

        report = (
            f"scenario {s.id}:\n"
            f"  kube-scheduler: {ref.summary(ns)}\n"
            f"  gangsched:      {ours.summary(ns)}\n"
            f"  expected:       evicted {sorted(s.expected_victims)}, "
            f"{'bound to ' + s.expected_node if s.expected_node else 'unschedulable'}\n"
            f"kube-scheduler log:\n{sides[0].process.tail(15)}\n"
            f"gangsched log:\n{sides[1].process.tail(15)}"
        )
        print(report.split("\nkube-scheduler log:")[0])
        assert ref.done and ours.done, "no verdict in time\n" + report
        assert key(ref) == key(ours), "they disagree\n" + report
        for side, o in zip(sides, outcomes, strict=True):
            # where a nomination was seen, the preemptor bound there
            assert not o.nominated or o.nominated == o.node, f"{side.name}\n" + report
        expected.refused = ref.refused
        assert key(ref) == key(expected), "both differ from the expected outcome\n" + report
    finally:
        _clean(sides, ns, s)


def test_scenarios_are_distinct() -> None:
    """Every scenario's expected answer differs from what 'the youngest victims' would give
    (where there are victims), so that it tests the rule it names."""
    for s in SCENARIOS:
        if s.expected_victims:
            youngest = s.running[-1]
            assert youngest.name not in s.expected_victims, s.id
