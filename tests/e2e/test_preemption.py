"""Whole-gang preemption on the real control plane: a gang of higher priority (PriorityClass)
evicts a lower-priority gang whole, with kube-scheduler's DisruptionTarget condition and a
Preempted event on every victim, and binds whole once the victims are gone; a
PodDisruptionBudget steers the choice to another gang; a scheduler killed after it marked its
victims neither over-commits nor evicts more after its restart; preemptionPolicy Never is
honoured on the PodGroup and on the pods.

Victims carry a finalizer where a test must see them while they terminate (kwok deletes a
terminating pod at once): they stay, marked and with a deletionTimestamp, until the test lets
them go. No kube-controller-manager runs here, so a PodDisruptionBudget's status (what
preemption reads) is written by the test, as the disruption controller would.
"""

from __future__ import annotations

import json
import re
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import GPU, bound, condition, events, pod, podgroup, pods, refused, wait_for

Nodes = Callable[..., dict[str, str]]
T = TypeVar("T")

LOW = "gangsched-e2e-low"
HIGH = "gangsched-e2e-high"
HIGH_NEVER = "gangsched-e2e-high-never"  # a PriorityClass with preemptionPolicy Never
HOLD = "gangsched.io/e2e-hold"  # the finalizer that keeps a victim terminating


@pytest.fixture(scope="module", autouse=True)
def priority_classes(control_plane: ControlPlane) -> None:
    for name, value, policy in (
        (LOW, 100, "PreemptLowerPriority"),
        (HIGH, 1000, "PreemptLowerPriority"),
        (HIGH_NEVER, 1000, "Never"),
    ):
        obj = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "preemptionPolicy": policy,
        }
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))


@pytest.fixture
def release(control_plane: ControlPlane, ns: str) -> Iterator[Callable[[], None]]:
    """``release()`` removes the finalizer from every pod of the namespace (also at the end of
    the test, so the namespace can go)."""

    def run() -> None:
        for name, p in pods(control_plane, ns).items():
            if HOLD in (p["metadata"].get("finalizers") or []):
                control_plane.kubectl(
                    "patch",
                    "pod",
                    name,
                    "-n",
                    ns,
                    "--type=merge",
                    "-p",
                    json.dumps({"metadata": {"finalizers": None}}),
                    check=False,
                )

    yield run
    run()


@pytest.fixture
def processes() -> Iterator[list[SchedulerProcess]]:
    started: list[SchedulerProcess] = []
    yield started
    for p in started:
        p.stop()


def gang(
    ns: str,
    name: str,
    size: int,
    sel: dict[str, str],
    priority_class: str,
    *,
    scheduler: str = "gangsched",
    hold: bool = False,
    **spec: Any,
) -> list[dict[str, Any]]:
    objs = [podgroup(name, ns, size, **spec)]
    for i in range(size):
        p = pod(f"{name}-{i}", ns, group=name, selector=sel, scheduler=scheduler)
        p["spec"]["priorityClassName"] = priority_class
        if hold:
            p["metadata"]["finalizers"] = [HOLD]
        objs.append(p)
    return objs


def create_all(cp: ControlPlane, objects: list[dict[str, Any]]) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": objects}
    cp.kubectl("create", "-f", "-", input=json.dumps(body))


def members(state: Mapping[str, T], name: str) -> dict[str, T]:
    """The members ``<name>-<i>`` of a gang in ``state`` (pods by name, or nodes by pod)."""
    return {n: p for n, p in state.items() if re.fullmatch(rf"{name}-\d+", n)}


def running(cp: ControlPlane, ns: str, name: str, size: int) -> bool:
    ps = members(pods(cp, ns), name)
    return len(ps) == size and all(p["status"].get("phase") == "Running" for p in ps.values())


def marked(p: dict[str, Any], preemptor: str) -> bool:
    """Terminating, with the DisruptionTarget condition naming the preemptor gang."""
    cond = condition(p, "DisruptionTarget")
    return (
        bool(p["metadata"].get("deletionTimestamp"))
        and cond is not None
        and cond.get("status") == "True"
        and cond.get("reason") == "PreemptionByScheduler"
        and f"gang {preemptor} " in cond.get("message", "")
    )


def untouched(p: dict[str, Any]) -> bool:
    return not p["metadata"].get("deletionTimestamp") and condition(p, "DisruptionTarget") is None


def preempted_notes(cp: ControlPlane, ns: str) -> dict[str, str]:
    return {
        (e.get("regarding") or {}).get("name", ""): e.get("note", "")
        for e in events(cp, ns)
        if e.get("reason") == "Preempted"
    }


def gathered(read: Callable[[], dict[str, str]], n: int) -> dict[str, str]:
    """What ``read`` returns once it has ``n`` entries, else {}."""
    found = read()
    return found if len(found) == n else {}


def gpus_per_node(cp: ControlPlane, ns: str) -> Counter[str]:
    """GPUs of the pods counted on each node: bound and not finished (terminating included)."""
    out: Counter[str] = Counter()
    for p in pods(cp, ns).values():
        node = p["spec"].get("nodeName")
        if node and p["status"].get("phase") not in ("Succeeded", "Failed"):
            out[node] += int(p["spec"]["containers"][0]["resources"]["requests"][GPU])
    return out


def test_a_high_priority_gang_evicts_a_low_one_whole_and_binds_whole(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    release: Callable[[], None],
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=4)
    create_all(cp, gang(ns, "low", 8, sel, LOW, hold=True))
    wait_for("the low gang running", lambda: running(cp, ns, "low", 8))
    create_all(cp, gang(ns, "high", 4, sel, HIGH))

    def victims_marked() -> bool:
        low = members(pods(cp, ns), "low")
        return len(low) == 8 and all(marked(p, f"{ns}/high") for p in low.values())

    wait_for("every pod of the low gang marked and terminating", victims_marked)

    def nominated() -> dict[str, str]:
        high = members(pods(cp, ns), "high")
        found = {n: str(p["status"].get("nominatedNodeName") or "") for n, p in high.items()}
        return found if len(found) == 4 and all(found.values()) else {}

    nominations = wait_for("the high gang nominated", nominated)

    def high_bound() -> dict[str, str]:
        return members(bound(cp, ns), "high")

    assert set(nominations.values()) <= {f"{ns}-n0", f"{ns}-n1"}
    notes = wait_for(
        "a Preempted event on every victim", lambda: gathered(lambda: preempted_notes(cp, ns), 8)
    )
    assert set(notes) == {f"low-{i}" for i in range(8)}
    for note in notes.values():
        assert re.fullmatch(
            rf"Preempted by gang {ns}/high \(priority 1000\) on node {ns}-n[01]", note
        ), note
    assert not members(bound(cp, ns), "high"), "nothing binds while its victims still run"
    assert max(gpus_per_node(cp, ns).values()) <= 4
    release()
    placed = wait_for("the high gang bound whole", lambda: gathered(high_bound, 4))
    assert placed == nominations, "bound where it was nominated"
    wait_for("the low gang gone", lambda: not members(pods(cp, ns), "low"))
    assert max(gpus_per_node(cp, ns).values()) <= 4
    wait_for(
        "a Preempting event on the preemptor",
        lambda: any(
            e.get("reason") == "Preempting" and (e.get("regarding") or {}).get("name") == "high-0"
            for e in events(cp, ns)
        ),
    )


def test_a_disruption_budget_steers_preemption_to_the_other_gang(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """Two equal low-priority gangs; the younger would be the victim, but a budget that
    allows no disruption protects it: the older one goes."""
    cp = control_plane
    sel = nodes(2, gpus=4)
    for name, allowed in (("protected", 0), ("open", 4)):
        cp.kubectl(
            "create",
            "-f",
            "-",
            input=json.dumps(
                {
                    "apiVersion": "policy/v1",
                    "kind": "PodDisruptionBudget",
                    "metadata": {"name": name, "namespace": ns},
                    "spec": {
                        "minAvailable": 4 - allowed,
                        "selector": {"matchLabels": {"gangsched.io/pod-group": name}},
                    },
                }
            ),
        )
        status = {"disruptionsAllowed": allowed, "currentHealthy": 4}
        status |= {"desiredHealthy": 4 - allowed, "expectedPods": 4}
        cp.kubectl(
            "patch",
            "pdb",
            name,
            "-n",
            ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": status}),
        )
    create_all(cp, gang(ns, "open", 4, sel, LOW))
    wait_for("the older gang running", lambda: running(cp, ns, "open", 4))
    create_all(cp, gang(ns, "protected", 4, sel, LOW))
    wait_for("the younger gang running", lambda: running(cp, ns, "protected", 4))
    create_all(cp, gang(ns, "high", 4, sel, HIGH))
    wait_for(
        "the high gang bound whole", lambda: len(members(bound(cp, ns), "high")) == 4, timeout=60
    )
    state = pods(cp, ns)
    assert not members(state, "open"), "the gang the budgets allow to disrupt was evicted"
    protected = members(state, "protected")
    assert len(protected) == 4 and all(untouched(p) for p in protected.values())
    # Events are informational writes, sent after the bindings: waited for, as above
    notes = wait_for(
        "a Preempted event on every victim", lambda: gathered(lambda: preempted_notes(cp, ns), 4)
    )
    assert set(notes) == {f"open-{i}" for i in range(4)}
    assert max(gpus_per_node(cp, ns).values()) <= 4


def test_a_scheduler_killed_after_marking_its_victims_waits_for_them_after_restart(
    control_plane: ControlPlane,
    ns: str,
    nodes: Nodes,
    release: Callable[[], None],
    processes: list[SchedulerProcess],
    tmp_path: Path,
) -> None:
    cp = control_plane
    sched = "gs-" + uuid.uuid4().hex[:6]
    sel = nodes(2, gpus=4)
    log = tmp_path / "sched.log"
    first = SchedulerProcess(cp, log, "--scheduler-name", sched).start()
    processes.append(first)
    create_all(cp, gang(ns, "older", 4, sel, LOW, scheduler=sched, hold=True))
    wait_for("the older gang running", lambda: running(cp, ns, "older", 4), timeout=60)
    create_all(cp, gang(ns, "younger", 4, sel, LOW, scheduler=sched, hold=True))
    wait_for("the younger gang running", lambda: running(cp, ns, "younger", 4))
    create_all(cp, gang(ns, "high", 4, sel, HIGH, scheduler=sched))

    def victims() -> dict[str, dict[str, Any]]:
        state = pods(cp, ns)
        for name in ("older", "younger"):
            group = members(state, name)
            if len(group) == 4 and all(marked(p, f"{ns}/high") for p in group.values()):
                return group
        return {}

    chosen = wait_for("one low gang marked and terminating", victims)
    first.kill()
    victim = next(iter(chosen)).rsplit("-", 1)[0]
    spared = "older" if victim == "younger" else "younger"
    assert victim == "younger", "the youngest gang is the victim"
    second = SchedulerProcess(cp, log, "--scheduler-name", sched).start()
    processes.append(second)

    def decided() -> bool:
        try:
            return "gangsched_preemptions_total 1.0" in second.metrics()
        except OSError:
            return False

    # The restarted scheduler found the capacity the terminating victims will free, and holds
    # it for the high gang instead of evicting the other gang.
    wait_for("the restarted scheduler's preemption decision", decided, timeout=60)
    state = pods(cp, ns)
    assert all(untouched(p) for p in members(state, spared).values())
    assert len(members(state, spared)) == 4
    assert not members(bound(cp, ns), "high"), "nothing binds while its victims still run"
    assert 'gangsched_preemption_victims_total{result="evicted"}' not in second.metrics()
    release()
    placed = wait_for(
        "the high gang bound whole", lambda: gathered(lambda: members(bound(cp, ns), "high"), 4)
    )
    assert len(placed) == 4
    state = pods(cp, ns)
    assert not members(state, victim)
    assert len(members(state, spared)) == 4
    assert all(untouched(p) for p in members(state, spared).values()), "no double eviction"
    per_node = gpus_per_node(cp, ns)
    assert max(per_node.values()) <= 4, f"over-committed: {per_node}"
    assert sum(per_node.values()) == 8


def test_preemption_policy_never_is_honoured(
    control_plane: ControlPlane, running_scheduler: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=2)
    create_all(cp, gang(ns, "low", 4, sel, LOW))
    wait_for("the low gang running", lambda: running(cp, ns, "low", 4))
    # Never on the PodGroup, and Never from the pods' PriorityClass
    create_all(cp, gang(ns, "opted", 2, sel, HIGH, preemptionPolicy="Never"))
    create_all(cp, gang(ns, "classed", 2, sel, HIGH_NEVER))
    wait_for(
        "both high gangs refused",
        lambda: refused(cp, ns, [f"{g}-{i}" for g in ("opted", "classed") for i in range(2)]),
    )
    state = pods(cp, ns)
    assert state["classed-0"]["spec"].get("preemptionPolicy") == "Never"
    assert all(untouched(p) for p in members(state, "low").values())
    assert not preempted_notes(cp, ns)
    # the same gang without the opt-out preempts: the low gang was evictable all along
    create_all(cp, gang(ns, "control", 2, sel, HIGH))
    wait_for(
        "the control gang bound", lambda: len(members(bound(cp, ns), "control")) == 2, timeout=60
    )
    # (events are written after the bindings: awaited, as in the tests above)
    notes = wait_for(
        "a Preempted event on every victim", lambda: gathered(lambda: preempted_notes(cp, ns), 4)
    )
    assert set(notes) == {f"low-{i}" for i in range(4)}
