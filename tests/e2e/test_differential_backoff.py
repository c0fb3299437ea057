"""A pod backing off is tried as soon as capacity comes, when nothing else is queued: gangsched
against the real kube-scheduler v1.36.

kube-scheduler pops its backoff queue when its active queue is empty (feature
``SchedulerPopFromBackoffQ``, on by default since v1.33): a pod that failed, and that an event
then moved to the backoff queue, does not wait out its backoff while the scheduler has nothing
else to do. gangsched's queue does the same (docs/architecture.md, "The queue"); without it,
capacity freed during a backoff waits for it, and goes to whatever arrives first.

One control plane runs both schedulers, each with a 10 s initial backoff: a pod for each (and
a gang of two for gangsched) asks for more GPUs than any node has, so each fails; a second
later a node that fits it is added for each side. Both must bind well before the backoff ends
(within 5 s of the node, which is at least 8 s before it would).

Needs ``kube-scheduler`` beside kube-apiserver (hack/control-plane.sh builds it; the test is
skipped when the binary is absent).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess, own_control_plane
from .kube import condition, create, pod, podgroup, pods, wait_for
from .kube_scheduler import KubeScheduler

BACKOFF = 10  # seconds, both schedulers' initial backoff
WITHIN = 5.0  # seconds from the node to the binding
NS = "backoff"


def _kube_scheduler_config(cp: ControlPlane, path: Path) -> Path:
    path.write_text(
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        f"clientConnection: {{kubeconfig: {cp.kubeconfig}}}\n"
        "leaderElection: {leaderElect: false}\n"
        f"podInitialBackoffSeconds: {BACKOFF}\n"
        f"podMaxBackoffSeconds: {2 * BACKOFF}\n"
    )
    return path


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    logs = tmp_path_factory.mktemp("differential-backoff")
    with own_control_plane() as cp:
        if not KubeScheduler.available(cp):
            pytest.skip("kube-scheduler is not built (hack/control-plane.sh builds it)")
        config = _kube_scheduler_config(cp, logs / "kube-scheduler.yaml")
        ks = KubeScheduler(cp, logs / "kube-scheduler.log", f"--config={config}").start()
        ours = SchedulerProcess(
            cp,
            logs / "gangsched.log",
            "--backoff-initial",
            str(BACKOFF),
            "--backoff-max",
            str(2 * BACKOFF),
        ).start()
        try:
            cp.kubectl("create", "namespace", NS)
            for side in ("ks", "gs"):
                cp.add_fake_node(f"small-{side}", "16", "64Gi", 1, labels={"side": side})
            yield cp
        finally:
            ours.stop()
            ks.stop()


def _unschedulable(cp: ControlPlane, names: list[str]) -> bool:
    seen = pods(cp, NS)
    for name in names:
        cond = condition(seen.get(name, {}), "PodScheduled")
        if cond is None or cond.get("status") != "False":
            return False
    return True


def test_a_pod_backing_off_binds_when_capacity_comes_not_when_its_backoff_ends(
    plane: ControlPlane,
) -> None:
    cp = plane
    create(cp, pod("ks-pod", NS, gpus=4, selector={"side": "ks"}, scheduler="default-scheduler"))
    create(cp, pod("gs-pod", NS, gpus=4, selector={"side": "gs"}))
    create(cp, podgroup("pair", NS, 2))
    for i in range(2):
        create(cp, pod(f"gs-gang-{i}", NS, group="pair", gpus=2, selector={"side": "gs"}))
    names = ["ks-pod", "gs-pod", "gs-gang-0", "gs-gang-1"]
    wait_for("every pod to fail once", lambda: _unschedulable(cp, names), timeout=60)
    failed = time.monotonic()
    time.sleep(1.0)
    added = time.monotonic()
    cp.add_fake_node("big-ks", "16", "64Gi", 4, labels={"side": "ks"})
    cp.add_fake_node("big-gs", "16", "64Gi", 8, labels={"side": "gs"})
    bound_at: dict[str, float] = {}

    def all_bound() -> bool:
        now = time.monotonic()
        for name, p in pods(cp, NS).items():
            if p["spec"].get("nodeName") and name not in bound_at:
                bound_at[name] = now
        return set(names) <= bound_at.keys()

    wait_for("every pod to bind", all_bound, timeout=3 * BACKOFF, interval=0.1)
    backoff_ends = failed + BACKOFF
    late = {n: round(t - added, 1) for n, t in bound_at.items() if t - added > WITHIN}
    assert not late, (
        f"bound more than {WITHIN}s after the node came (seconds after it: {late}); their "
        f"backoff ended {backoff_ends - added:.1f}s after it"
    )
    assert {n: p["spec"]["nodeName"] for n, p in pods(cp, NS).items()} == {
        "ks-pod": "big-ks",
        "gs-pod": "big-gs",
        "gs-gang-0": "big-gs",
        "gs-gang-1": "big-gs",
    }
