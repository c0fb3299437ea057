"""What ``kubectl gang what-if`` costs on the client's side, in process.

    .venv/bin/python bench/whatif_bench.py --nodes 5000 --pods 50000

The cluster is served by a stand-in for the API server that keeps each list page as JSON text
and decodes it at every request with the client's own decoder (msgspec), as the client decodes
a response: ``--nodes`` nodes of 8 GPUs, ``--pods`` pods of one GPU in gangs of 8 (each with
its gangsched PodGroup), as many bound as fit, the rest waiting. Then ``what_if``
(gangsched/kube/whatif.py, the production code) is asked about one more gang of 8 whole-node
pods, ``--rounds`` times, and the seconds of each phase are printed (listing and decoding, the
core's first decisions, the gang's answer with its forecast), and the command. What it leaves
out: the API server's own time to serve the lists (on a real cluster it comes on top), and the
network. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gangsched.kube import whatif as whatif_module
from gangsched.kube.io.client import ApiError, _decode
from gangsched.settings import Settings

NS = "ml"
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
PODGROUPS = "/apis/gangsched.io/v1alpha1/podgroups"


class Served:
    """The lists a stand-in API server holds, each page kept as JSON text."""

    def __init__(self, lists: Mapping[str, list[dict[str, Any]]]) -> None:
        self._lists = lists
        self._pages: dict[tuple[str, int, int], str] = {}
        self.requests = 0

    def page(self, path: str, start: int, limit: int) -> dict[str, Any]:
        items = self._lists[path]
        key = (path, start, limit)
        text = self._pages.get(key)
        if text is None:
            end = start + limit if limit else len(items)
            meta: dict[str, Any] = {"resourceVersion": "100"}
            if end < len(items):
                meta["continue"] = str(end)
            text = json.dumps({"metadata": meta, "items": items[start:end]})
            self._pages[key] = text
        decoded: dict[str, Any] = _decode(text)
        return decoded


class StandIn:
    """Answers GETs of the served lists (paged by ``limit`` and ``continue``), 404 else."""

    def __init__(self, served: Served) -> None:
        self._served = served

    async def request(
        self, method: str, path: str, *, params: Mapping[str, Any] | None = None, **_: Any
    ) -> dict[str, Any]:
        assert method == "GET", (method, path)
        return await self.get(path, **dict(params or {}))

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self._served.requests += 1
        if path not in self._served._lists:
            raise ApiError(404, "Not Found", {"message": f"{path} is not served here"})
        if params.get("watch"):
            raise ApiError(404, "Not Found", {"message": "no watch here"})
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or 0)
        return self._served.page(path, start, limit)


def node(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": f"n{i}", "uid": f"node-{i}", "labels": {"zone": f"z{i % 4}"}},
        "status": {
            "allocatable": {"cpu": "128", "memory": "1024Gi", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, group: str, gpus: int, node_name: str, uid: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "gangsched",
        "containers": [
            {
                "name": "main",
                "image": "trainer:1",
                "resources": {
                    "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": str(gpus)},
                    "limits": {"nvidia.com/gpu": str(gpus)},
                },
            }
        ],
    }
    status: dict[str, Any] = {"phase": "Pending"}
    if node_name:
        spec["nodeName"] = node_name
        status = {"phase": "Running", "startTime": "2026-11-27T10:00:00Z"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "labels": {"gangsched.io/pod-group": group},
            "creationTimestamp": "2026-11-27T10:00:00Z",
        },
        "spec": spec,
        "status": status,
    }


def podgroup(name: str, min_member: int) -> dict[str, Any]:
    return {
        "apiVersion": "gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NS, "uid": f"pg-{name}", "generation": 1},
        "spec": {"minMember": min_member, "expectedRuntimeSeconds": 7200},
    }


def cluster(nodes: int, pods: int) -> Served:
    node_objs = [node(i) for i in range(nodes)]
    pod_objs: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    capacity = nodes * 8
    for g in range(pods // 8):
        name = f"g{g}"
        groups.append(podgroup(name, 8))
        for m in range(8):
            i = g * 8 + m
            bound = f"n{i // 8}" if i < capacity else ""
            pod_objs.append(pod(f"{name}-{m}", name, 1, bound, f"uid-{i}"))
    return Served({NODES: node_objs, PODS: pod_objs, PODGROUPS: groups})


def asked() -> list[dict[str, Any]]:
    objs: list[dict[str, Any]] = [podgroup("big", 8)]
    objs += [pod(f"big-{m}", "big", 8, "", f"big-{m}") for m in range(8)]
    for o in objs:
        o["metadata"].pop("uid", None)
    return objs


async def one(served: Served) -> dict[str, float]:
    phases: dict[str, float] = {}
    mark = time.perf_counter()
    real_show = whatif_module._show_placed

    def show_placed(core: Any) -> None:  # the lists are in: time them
        nonlocal mark
        now = time.perf_counter()
        phases["list and decode"] = now - mark
        mark = now
        real_show(core)

    whatif_module._show_placed = show_placed
    try:
        verdict = await whatif_module.what_if(
            StandIn(served),  # type: ignore[arg-type]
            Settings.model_validate({}),
            asked(),
            NS,
        )
    finally:
        whatif_module._show_placed = real_show
    phases["decide and forecast"] = time.perf_counter() - mark
    phases["total"] = sum(phases.values())
    assert verdict.gang == f"{NS}/big", verdict
    phases["fits"] = float(verdict.fits)
    return phases


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--nodes", type=int, default=5000)
    p.add_argument("--pods", type=int, default=50000)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    t = time.perf_counter()
    served = cluster(a.nodes, a.pods)
    print(f"built in {time.perf_counter() - t:.1f} s: {a.nodes} nodes, {a.pods} pods")
    best: dict[str, float] | None = None
    for r in range(1, a.rounds + 1):
        phases = asyncio.run(one(served))
        shown = ", ".join(f"{k} {v:.2f} s" for k, v in phases.items() if k != "fits")
        print(f"round {r}: {shown}; fits now: {bool(phases['fits'])}")
        if best is None or phases["total"] < best["total"]:
            best = phases
    assert best is not None
    print(f"best: {best['total']:.2f} s")
    print(
        f"command: .venv/bin/python bench/whatif_bench.py --nodes {a.nodes} --pods {a.pods} "
        f"--rounds {a.rounds}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
