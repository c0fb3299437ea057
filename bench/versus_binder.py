"""The trivial binder of the side-by-side benchmark: the API server's own binding rate.

No scheduling at all: list the pending pods of the benchmark's namespace that name this
binder as their scheduler, list the nodes, and POST ``pods/binding`` for each pod, 8 pods per
node in list order, ``concurrency`` requests in flight, under the same client QPS/burst token
bucket as the schedulers (client-go's default limiter: ``qps`` per second, burst ``qps``).
Binding starts with the first page of the list, while the next pages are fetched.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from versus_api import Api, Credentials
from versus_workload import GPUS_PER_NODE, NAMESPACE, NODE_PATH, POD_PATH

__all__ = ["run_binder"]

_PAGE = 1000


class _TokenBucket:
    def __init__(self, qps: float) -> None:
        self.rate = qps
        self.capacity = qps
        self.tokens = qps
        self.stamp = time.monotonic()

    async def take(self) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= 1:
                self.tokens -= 1
                return
            await asyncio.sleep((1 - self.tokens) / self.rate)


async def _bind_all(api: Api, scheduler_name: str, concurrency: int, qps: float) -> int:
    nodes = sorted(n["metadata"]["name"] for n in await api.list_all(NODE_PATH))
    if not nodes:
        return 0
    queue: asyncio.Queue[str | None] = asyncio.Queue(maxsize=4 * _PAGE)
    bucket = _TokenBucket(qps)
    bound = 0

    async def produce() -> None:
        cont = ""
        while True:
            params = {"fieldSelector": "spec.nodeName=", "limit": str(_PAGE)}
            if cont:
                params["continue"] = cont
            await bucket.take()
            _, body = await api.call("GET", POD_PATH, params=params)
            for pod in body.get("items") or []:
                if pod["spec"].get("schedulerName") == scheduler_name:
                    await queue.put(pod["metadata"]["name"])
            cont = (body.get("metadata") or {}).get("continue") or ""
            if not cont:
                break
        for _ in range(concurrency):
            await queue.put(None)

    counter = 0

    async def bind() -> None:
        nonlocal bound, counter
        while (name := await queue.get()) is not None:
            node = nodes[(counter // GPUS_PER_NODE) % len(nodes)]
            counter += 1
            await bucket.take()
            status, _ = await api.call(
                "POST",
                f"{POD_PATH}/{name}/binding",
                {
                    "apiVersion": "v1",
                    "kind": "Binding",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": node},
                },
                ok=(201, 409),
            )
            bound += status == 201

    await asyncio.gather(produce(), *(bind() for _ in range(concurrency)))
    return bound


def run_binder(kubeconfig: Path, scheduler_name: str, concurrency: int, qps: float) -> int:
    """Bind every pending pod, then stay up until stopped, as a scheduler does (the benchmark
    reads the CPU and memory of a live process); a failure exits with status 1."""

    async def main() -> None:
        async with Api(Credentials.from_kubeconfig(kubeconfig), concurrency) as api:
            bound = await _bind_all(api, scheduler_name, concurrency, qps)
        print(f"bound {bound} pods", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    return 1
