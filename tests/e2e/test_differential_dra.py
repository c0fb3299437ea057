"""gangsched against kube-scheduler v1.36's DynamicResources plugin on generated single-pod
resource-claim cases (tests/support/dracases.py): device classes with selectors, CEL selectors
on string, integer and quantity attributes, ``ExactCount`` and ``All``, ``firstAvailable``,
``matchAttribute``, devices already allocated to other claims, a claim already allocated and
shared with another consumer.

Each case is made twice on the session's control plane, once per scheduler, each copy with its
own driver, DeviceClass, nodes and claims, so the two never compete. Both pods are submitted at
once and each verdict awaited: bound, or ``PodScheduled=False`` with reason ``Unschedulable``.
The two must agree in every case, and every allocation either wrote must pass the independent
checker. ``GANGSCHED_DRA_DIFF_CASES`` (default 40) and ``GANGSCHED_DRA_DIFF_SEED`` pick the
cases.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path
from typing import Any

from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.controlplane import fake_node
from tests.support.dracases import Copy, check, make_case

from .conftest import SchedulerProcess
from .kube import condition, pod
from .kube_scheduler import KubeScheduler

CASES = int(os.environ.get("GANGSCHED_DRA_DIFF_CASES", "40"))
SEED = int(os.environ.get("GANGSCHED_DRA_DIFF_SEED", "20261127"))
SETTLE = 120.0


def _create_all(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    for i in range(0, len(objs), 200):
        body = {"apiVersion": "v1", "kind": "List", "items": objs[i : i + 200]}
        cp.kubectl("create", "-f", "-", input=json.dumps(body), timeout=120)


def _verdict(p: dict[str, Any]) -> tuple[str, str] | None:
    if p["spec"].get("nodeName"):
        return "bound", p["spec"]["nodeName"]
    c = condition(p, "PodScheduled") or {}
    if c.get("status") == "False" and c.get("reason") == "Unschedulable":
        return "unschedulable", str(c.get("message", ""))
    if c.get("status") == "False" and c.get("reason") == "SchedulerError":
        # kube-scheduler v1.36 reports some claims it cannot allocate (a matchAttribute
        # constraint that All's devices cannot meet) as an error, and retries forever: the
        # pod is not placed
        return "error", str(c.get("message", ""))
    return None


def test_the_same_verdicts_as_kube_scheduler_and_valid_allocations(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    kube_scheduler: KubeScheduler,
    ns: str,
    tmp_path: Path,
) -> None:
    cp = control_plane
    rng = random.Random(SEED)
    cases = [make_case(rng, i) for i in range(CASES)]
    label = ns
    copies = [Copy(c, tag, ns, label) for c in cases for tag in ("k", "g")]
    nodes = [
        fake_node(cp_.node(i), "16", "64Gi", 0, {"e2e-test": ns, "dra-copy": cp_.tag})
        for cp_ in copies
        for i in range(len(cp_.case.nodes))
    ]
    made: list[tuple[str, str]] = []
    try:
        _create_all(cp, nodes)
        made += [("node", n["metadata"]["name"]) for n in nodes]
        classes = [c.device_class() for c in copies]
        slices = [s for c in copies for s in c.slices()]
        _create_all(cp, [*classes, *slices, *(x for c in copies for x in c.claims())])
        made += [("deviceclass", c["metadata"]["name"]) for c in classes]
        made += [("resourceslice", s["metadata"]["name"]) for s in slices]
        for c in copies:
            for claim, status in c.allocations():
                cp.kubectl(
                    "patch", "resourceclaim", claim, "-n", ns, "--subresource=status",
                    "--type=merge", "-p", json.dumps({"status": status}),
                )  # fmt: skip
        pods = []
        for c in copies:
            body = pod(
                c.pod,
                ns,
                gpus=0,
                cpu="100m",
                memory="64Mi",
                selector={"e2e-test": ns, "dra-copy": c.tag},
                scheduler="default-scheduler" if c.tag == "k" else "gangsched",
            )
            body["spec"]["resourceClaims"] = c.pod_claims()
            body["spec"]["containers"][0]["resources"]["claims"] = [
                {"name": x["name"]} for x in c.pod_claims()
            ]
            pods.append(body)
        time.sleep(2)  # both schedulers' watches have the devices and claims
        _create_all(cp, pods)

        verdicts: dict[str, tuple[str, str]] = {}
        deadline = time.monotonic() + SETTLE
        while time.monotonic() < deadline and len(verdicts) < len(copies):
            for p in cp.kubectl_json("get", "pods", "-n", ns)["items"]:
                v = _verdict(p)
                if v is not None:
                    verdicts[p["metadata"]["name"]] = v
            time.sleep(1)
        missing = [c.pod for c in copies if c.pod not in verdicts]
        if missing:
            state = {
                p["metadata"]["name"]: p for p in cp.kubectl_json("get", "pods", "-n", ns)["items"]
            }
            about = {m: state[m].get("status") for m in missing}
            cases_of = {m: cases[int(m[1:].split("-")[0])] for m in missing}
            raise AssertionError(
                f"no verdict for {missing}: {about}\n{cases_of}\n{kube_scheduler.tail(80)}"
            )

        claims = {
            c["metadata"]["name"]: c
            for c in cp.kubectl_json("get", "resourceclaims", "-n", ns)["items"]
        }
        disagreements, invalid = [], []
        feasible = errors = 0
        for case in cases:
            k, g = (Copy(case, tag, ns, label) for tag in ("k", "g"))
            vk, vg = verdicts[k.pod], verdicts[g.pod]
            errors += vk[0] == "error"
            if (vk[0] == "bound") != (vg[0] == "bound"):
                disagreements.append(
                    f"case {case.id}: kube-scheduler {vk}, gangsched {vg}\n  {case}"
                )
            feasible += vk[0] == "bound"
            for copy_, v in ((k, vk), (g, vg)):
                if v[0] == "bound":
                    mine = {
                        n: c for n, c in claims.items() if n.startswith(f"{copy_.tag}{case.id}-")
                    }
                    problems = check(copy_, v[1], mine)
                    if problems:
                        invalid.append(f"case {case.id} ({copy_.tag}): {problems}\n  {case}")
        partitioned = [c for c in cases if any(c.counters)]
        print(
            f"\nDRA differential: {len(cases)} cases, {feasible} feasible for kube-scheduler, "
            f"({errors} of the others a scheduler error there), {len(disagreements)} "
            f"disagreements, {len(invalid)} invalid allocations; {len(partitioned)} cases "
            "with a partitionable pool (counter sets)"
        )
        assert not disagreements, "\n".join(disagreements)
        assert not invalid, "\n".join(invalid)
        # the cases are not all one way
        assert 0 < feasible < len(cases)
    finally:
        cp.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false", check=False)
        for kind in ("node", "deviceclass", "resourceslice"):
            names = [n for k, n in made if k == kind]
            for i in range(0, len(names), 50):  # in batches: hundreds of slices with 150 cases
                cp.kubectl(
                    "delete", kind, *names[i : i + 50], "--wait=false", check=False, timeout=300
                )
