"""``kubectl gang what-if`` against a real API server, then the same gang submitted to the
running scheduler: the verdict (fits, on which nodes; or not, and why) is what the scheduler
then does. What-if writes nothing: the gang's objects do not exist until created."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from gangsched.kubectl_gang import main as kubectl_gang
from gangsched_dev.devcluster import ControlPlane

from .conftest import SchedulerProcess
from .kube import bound, create, get_pg, pod, podgroup, pods, wait_for

pytestmark = pytest.mark.e2e

Nodes = Callable[..., dict[str, str]]


def _what_if(
    cp: ControlPlane,
    ns: str,
    objs: list[dict[str, object]],
    tmp: Path,
    capsys: pytest.CaptureFixture[str],
) -> str:
    path = tmp / "gang.yaml"
    path.write_text(yaml.safe_dump_all(objs))
    code = kubectl_gang(["what-if", "-f", str(path), "-n", ns, "--kubeconfig", str(cp.kubeconfig)])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def test_what_if_says_what_the_scheduler_then_does(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    ns: str,
    nodes: Nodes,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cp = control_plane
    sel = nodes(2, gpus=4)
    create(cp, pod("filler", ns, gpus=4, selector=sel))
    wait_for("filler bound", lambda: "filler" in bound(cp, ns), timeout=60)
    full = bound(cp, ns)["filler"]

    fits = [
        podgroup("train", ns, 2),
        *(pod(f"train-{i}", ns, group="train", gpus=2, selector=sel) for i in range(2)),
    ]
    out = _what_if(cp, ns, fits, tmp_path, capsys)
    free = next(n for n in (f"{ns}-n0", f"{ns}-n1") if n != full)
    assert f"gang {ns}/train" in out and "fits now: yes, on 1 node(s)" in out, out
    assert f"  {free}: train-0, train-1" in out, out
    assert not [n for n in pods(cp, ns) if n.startswith("train")], "what-if created nothing"
    for obj in fits:
        create(cp, obj)
    wait_for("train bound", lambda: {"train-0", "train-1"} <= bound(cp, ns).keys(), timeout=60)
    assert {bound(cp, ns)[f"train-{i}"] for i in range(2)} == {free}

    too_big = [
        podgroup("big", ns, 2),
        *(pod(f"big-{i}", ns, group="big", gpus=4, selector=sel) for i in range(2)),
    ]
    out = _what_if(cp, ns, too_big, tmp_path, capsys)
    assert "fits now: no" in out and "needs 8 nvidia.com/gpu for 2 more member(s)" in out, out
    assert "expected start: unknown, waits for" in out, out
    for obj in too_big:
        create(cp, obj)
    st = wait_for(
        "big refused",
        lambda: (
            (s := (get_pg(cp, ns, "big").get("status") or {})).get("phase") == "Scheduling" and s
        ),
        timeout=60,
    )
    assert "needs 8 nvidia.com/gpu for 2 more member(s)" in str(st.get("message")), st
    assert not any(n.startswith("big") for n in bound(cp, ns))
