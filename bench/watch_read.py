"""What reading watch events costs the scheduler's API client: ``KubeClient.watch`` against a
local server that streams N pod events (chunked, five events to a chunk, like the API server
under load), for this tree and, with ``--base-source``, another checkout (a git worktree of an
earlier commit), interleaved, each run in a process of its own. Prints each run's CPU
microseconds per event (client and the local server together: one process), whether aiohttp
was imported, and the median ratio of the two trees.

    .venv/bin/python bench/watch_read.py --events 20000 --runs 5 --base-source ../base

Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_ONE_RUN = """
import asyncio, json, sys, time
from gangsched.kube.io.client import KubeClient
from gangsched.kube.io.kubeconfig import ClusterConfig

N = int(sys.argv[1])
POD = {
    "metadata": {"name": "train-0", "namespace": "ml", "uid": "0" * 36,
                 "resourceVersion": "12345", "labels": {"gangsched.io/pod-group": "train"}},
    "spec": {"schedulerName": "gangsched", "nodeName": "node-0001",
             "containers": [{"name": "main", "image": "registry.example/train:1.0",
                             "resources": {"requests": {"cpu": "1", "memory": "1Gi",
                                                        "nvidia.com/gpu": "1"}}}]},
    "status": {"phase": "Running", "conditions": [
        {"type": t, "status": "True", "lastTransitionTime": "2026-11-28T12:00:00Z"}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]},
}
EVENT = (json.dumps({"type": "MODIFIED", "object": POD}) + "\\n").encode()

async def serve(reader, writer):
    await reader.readuntil(b"\\r\\n\\r\\n")
    writer.write(b"HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n")
    chunk = EVENT * 5
    for i in range(N // 5):
        writer.write(b"%x\\r\\n%s\\r\\n" % (len(chunk), chunk))
        if i % 20 == 0:
            await writer.drain()
    writer.write(b"0\\r\\n\\r\\n")
    await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = KubeClient(ClusterConfig(host=f"http://127.0.0.1:{port}"), qps=0)
    t = time.process_time()
    n = 0
    async for _ in client.watch("/api/v1/pods", {}):
        n += 1
    cpu = time.process_time() - t
    await client.close()
    server.close()
    print(json.dumps({"events": n, "us_per_event": cpu / n * 1e6,
                      "aiohttp": "aiohttp" in sys.modules}))

asyncio.run(main())
"""


def one(source: Path, events: int) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(source)}
    out = subprocess.run(
        [sys.executable, "-c", _ONE_RUN, str(events)],
        capture_output=True,
        text=True,
        check=True,
        cwd=source,
        env=env,
    ).stdout
    result: dict[str, object] = json.loads(out)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--events", type=int, default=20000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--base-source", type=Path, help="another checkout to compare with")
    args = p.parse_args()
    trees = {"this tree": REPO}
    if args.base_source is not None:
        trees["base"] = args.base_source.resolve()
    costs: dict[str, list[float]] = {name: [] for name in trees}
    for i in range(args.runs):
        order = list(trees.items()) if i % 2 == 0 else list(reversed(trees.items()))
        for name, source in order:
            r = one(source, args.events)
            us = float(r["us_per_event"])  # type: ignore[arg-type]
            costs[name].append(us)
            print(f"run {i + 1} {name}: {us:.2f} us/event, aiohttp imported: {r['aiohttp']}")
    for name, values in costs.items():
        print(f"{name}: median {statistics.median(values):.2f} us/event over {len(values)} runs")
    if "base" in costs:
        ratio = statistics.median(costs["this tree"]) / statistics.median(costs["base"])
        print(f"this tree / base: {ratio:.2f}x the CPU per watch event")
    argv = " ".join(sys.argv[1:])
    print(f"Command: `.venv/bin/python bench/watch_read.py {argv}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
