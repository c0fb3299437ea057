"""Gangs whose members' claims compete for one node's devices (kubernetes/kubernetes#138765):
cases where an assignment of devices to every member exists (a brute-force solver says so) but
allocating one member after another, never revisiting an earlier member's devices, fails.

Each case is given to gangsched (a PodGroup of the members) and to kube-scheduler v1.36.3 (the
same pods, created in member order), each with its own copy of the node, devices and claims.
gangsched must bind every case whole, with valid allocations; kube-scheduler's rate on the
same cases is printed beside it (pytest -s), not asserted: it is the gap this closes.

``GANGSCHED_DRA_GANG_CASES`` (default 12) and ``GANGSCHED_DRA_GANG_SEED`` pick the cases.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from gangsched.core.claimalloc import Allocated, allocate_one_by_one
from gangsched.core.resourceclaims import MatchAttribute
from gangsched_dev.devcluster import ControlPlane
from gangsched_dev.devcluster.controlplane import fake_node
from tests.core.test_claimalloc import CLASSES, attr_is, brute_force, claim, exact, gpu

from .conftest import SchedulerProcess
from .kube import pod, podgroup
from .kube_scheduler import KubeScheduler
from .test_differential_dra import _verdict

CASES = int(os.environ.get("GANGSCHED_DRA_GANG_CASES", "12"))
SEED = int(os.environ.get("GANGSCHED_DRA_GANG_SEED", "138765"))
RESOURCE = "resource.k8s.io/v1"
MODELS = ("a", "b")
CLIQUES = ("x", "y")
NODE = "n1"  # the core's test node name, for selecting cases


@dataclass(frozen=True)
class Member:
    count: int
    model: str  # '' for any
    same_clique: bool


@dataclass(frozen=True)
class GangCase:
    id: int
    devices: tuple[tuple[str, str], ...]  # (model, clique) per device
    members: tuple[Member, ...]


def _core_claims(case: GangCase) -> tuple[list[Any], list[Any]]:
    devices = [gpu(i, model=m, clique=c) for i, (m, c) in enumerate(case.devices)]
    claims = [
        claim(
            f"m{i}",
            exact("gpu", m.count, *((attr_is("model", m.model),) if m.model else ())),
            constraints=[MatchAttribute("clique")] if m.same_clique else [],
        )
        for i, m in enumerate(case.members)
    ]
    return claims, devices


def greedy_fails_joint_exists(rng: random.Random, want: int) -> list[GangCase]:
    """Seeded cases where an assignment exists and one member after another fails."""
    out: list[GangCase] = []
    tries = 0
    while len(out) < want and tries < 20000:
        tries += 1
        n = rng.randint(2, 6)
        case = GangCase(
            len(out),
            tuple((rng.choice(MODELS), rng.choice(CLIQUES)) for _ in range(n)),
            tuple(
                Member(rng.randint(1, 2), rng.choice(("", "a", "b")), rng.random() < 0.3)
                for _ in range(rng.randint(2, 4))
            ),
        )
        claims, devices = _core_claims(case)
        if not brute_force(claims, devices, set()):
            continue
        if isinstance(allocate_one_by_one(claims, devices, CLASSES, set(), NODE), Allocated):
            continue
        out.append(case)
    return out


class Copy:
    def __init__(self, case: GangCase, tag: str, ns: str) -> None:
        self.case, self.tag, self.ns = case, tag, ns

    @property
    def driver(self) -> str:
        return f"{self.tag}{self.case.id}-{self.ns}.example.com"

    @property
    def node(self) -> str:
        return f"{self.ns}-{self.tag}{self.case.id}"

    def pod(self, i: int) -> str:
        return f"{self.tag}{self.case.id}-m{i}"

    def objects(self) -> list[dict[str, Any]]:
        d = self.driver
        out: list[dict[str, Any]] = [
            fake_node(self.node, "16", "64Gi", 0, {"e2e-test": self.ns, "dra-copy": self.tag}),
            {
                "apiVersion": RESOURCE,
                "kind": "DeviceClass",
                "metadata": {"name": d},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{d}"'}}]},
            },
            {
                "apiVersion": RESOURCE,
                "kind": "ResourceSlice",
                "metadata": {"name": f"{self.node}-{d}"},
                "spec": {
                    "driver": d,
                    "nodeName": self.node,
                    "pool": {"name": self.node, "generation": 1, "resourceSliceCount": 1},
                    "devices": [
                        {
                            "name": f"gpu-{i}",
                            "attributes": {"model": {"string": m}, "clique": {"string": c}},
                        }
                        for i, (m, c) in enumerate(self.case.devices)
                    ],
                },
            },
        ]
        for i, m in enumerate(self.case.members):
            exactly: dict[str, Any] = {"deviceClassName": d, "count": m.count}
            if m.model:
                expr = f'device.attributes["{d}"].model == "{m.model}"'
                exactly["selectors"] = [{"cel": {"expression": expr}}]
            devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
            if m.same_clique:
                devices["constraints"] = [{"matchAttribute": f"{d}/clique"}]
            out.append(
                {
                    "apiVersion": RESOURCE,
                    "kind": "ResourceClaim",
                    "metadata": {"name": self.pod(i), "namespace": self.ns},
                    "spec": {"devices": devices},
                }
            )
        return out

    def pods(self) -> list[dict[str, Any]]:
        out = []
        for i in range(len(self.case.members)):
            body = pod(
                self.pod(i),
                self.ns,
                gpus=0,
                cpu="100m",
                memory="64Mi",
                selector={"e2e-test": self.ns, "dra-copy": self.tag},
                group=f"g{self.case.id}" if self.tag == "g" else None,
                scheduler="gangsched" if self.tag == "g" else "default-scheduler",
            )
            body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": self.pod(i)}]
            body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
            out.append(body)
        return out


def _create(cp: ControlPlane, objs: list[dict[str, Any]]) -> None:
    body = {"apiVersion": "v1", "kind": "List", "items": objs}
    cp.kubectl("create", "-f", "-", input=json.dumps(body), timeout=120)


def test_gangs_one_by_one_cannot_place_are_placed_whole(
    control_plane: ControlPlane,
    running_scheduler: SchedulerProcess,
    kube_scheduler: KubeScheduler,
    ns: str,
) -> None:
    cp = control_plane
    cases = greedy_fails_joint_exists(random.Random(SEED), CASES)
    assert len(cases) == CASES
    copies = [Copy(c, tag, ns) for c in cases for tag in ("k", "g")]
    objs = [o for c in copies for o in c.objects()]
    try:
        _create(cp, objs)
        _create(cp, [podgroup(f"g{c.id}", ns, len(c.members)) for c in cases])
        time.sleep(2)  # both schedulers' watches have the devices and claims
        for c in copies:  # member order: kube-scheduler takes them in creation order
            for body in c.pods():
                _create(cp, [body])
        names = [c.pod(i) for c in copies for i in range(len(c.case.members))]
        verdicts: dict[str, tuple[str, str]] = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(verdicts) < len(names):
            for p in cp.kubectl_json("get", "pods", "-n", ns)["items"]:
                v = _verdict(p)
                if v is not None:
                    verdicts[p["metadata"]["name"]] = v
            time.sleep(1)
        whole = {"k": 0, "g": 0}
        partial = {"k": 0, "g": 0}  # cases with some members bound, not all
        for c in copies:
            members = [verdicts.get(c.pod(i), ("none", "")) for i in range(len(c.case.members))]
            n = sum(v[0] == "bound" for v in members)
            whole[c.tag] += n == len(members)
            partial[c.tag] += 0 < n < len(members)
        claims = cp.kubectl_json("get", "resourceclaims", "-n", ns)["items"]
        taken = Counter(
            (r["pool"], r["device"])
            for c in claims
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get(
                "results", []
            )
        )
        assert not [d for d, n in taken.items() if n > 1], "a device allocated twice"
        print(
            f"\nDRA gangs that one member after another cannot place ({len(cases)} cases, "
            f"an assignment exists in each): gangsched {whole['g']}/{len(cases)} whole, "
            f"kube-scheduler {whole['k']}/{len(cases)} (and {partial['k']} with some members "
            "bound, holding devices while the others wait)"
        )
        assert whole["g"] == len(cases), verdicts
        assert partial["g"] == 0
    finally:
        cp.kubectl("delete", "pods", "--all", "-n", ns, "--wait=false", check=False)
        for kind in ("Node", "DeviceClass", "ResourceSlice"):
            names_ = [o["metadata"]["name"] for o in objs if o["kind"] == kind]
            cp.kubectl("delete", kind.lower(), *names_, "--wait=false", check=False, timeout=120)
