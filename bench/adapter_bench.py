"""The daemon's adapter under load, without an API server: pod events per second through the
watch handlers, and how long a relist of many pods blocks the event loop.

    .venv/bin/python bench/adapter_bench.py events --gangs 1 --gang-size 10000
    .venv/bin/python bench/adapter_bench.py events --gangs 1000 --gang-size 8
    .venv/bin/python bench/adapter_bench.py relist --pods 50000

Everything the daemon runs on its event loop runs here: the reflectors (list with paging,
watch), ``SchedulerService`` (handlers, the scheduling loop, the status reports), the reporter
and the outbox, and a ``LeaderElector`` renewing its lease. The API server is a fake that
serves lists page by page, streams watch events from a queue (yielding to the loop every 16
events, as a socket read returns a chunk of a few events) and accepts every write at once.
Bindings succeed at once; the bench delivers each bound pod back as the watch would.

``events``: one PodGroup per gang, then every pod ADDED (pending), then (once the scheduler
has bound every gang) every pod MODIFIED with its node, MODIFIED Running, then DELETED. Each
phase is timed from the first event pushed to the last one handled; the scheduling loop runs
meanwhile, as in the daemon.

``relist``: the API server already holds ``--pods`` pods, bound and Running, in gangs of
``--gang-size`` with their PodGroups. Timed: the start (first list of everything, until the
service is ready), then a forced relist of the pods (the watch ends with 410 Gone).

Throughout, a probe task measures loop lag (how late a 5 ms sleep wakes up): the longest time
the loop was blocked; and the longest pause of CPython's cyclic garbage collector, which
blocks the loop too but is not the handlers' doing (a collection of the oldest generation
walks every live object: some hundreds of ms with 50,000 pods in memory). The lease is
renewed every ``--retry-period`` seconds; the longest gap between two renewals is reported
(the renew deadline is 10 s by default). Prints one JSON object. Not a test: figures depend
on the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import itertools
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import structlog  # noqa: E402

from gangsched.core.config import CoreConfig  # noqa: E402
from gangsched.core.decisions import BindGang  # noqa: E402
from gangsched.core.scheduler import Scheduler  # noqa: E402
from gangsched.kube.io.client import ApiError  # noqa: E402
from gangsched.kube.io.leader import LeaderElector  # noqa: E402
from gangsched.kube.io.outbox import Outbox  # noqa: E402
from gangsched.kube.service import SchedulerService  # noqa: E402
from gangsched.kube.write.binder import BindResult  # noqa: E402
from gangsched.kube.write.reporter import Reporter  # noqa: E402
from gangsched.wallclock import WallClock  # noqa: E402

JSON = dict[str, Any]
NS = "bench"
GONE = {"type": "GONE"}  # in a watch queue: end the watch with 410 Gone
CHUNK = 16  # watch events per socket read


class FakeApi:
    """Lists page by page, watch streams from queues, every write accepted."""

    def __init__(self) -> None:
        self.lists: dict[str, list[JSON]] = {}
        self.streams: dict[str, asyncio.Queue[JSON]] = {}
        self.watching: dict[str, int] = Counter()  # watch calls per path
        self.writes: Counter[str] = Counter()
        self._rv = itertools.count(10)

    def rv(self) -> str:
        return str(next(self._rv))

    def stream(self, path: str) -> asyncio.Queue[JSON]:
        return self.streams.setdefault(path, asyncio.Queue())

    async def get(self, path: str, **params: Any) -> JSON:
        items = self.lists.get(path)
        if items is None:  # one object, read before a write
            self.writes["GET"] += 1
            return {"metadata": {"resourceVersion": "1", "generation": 1}, "spec": {}}
        start = int(params.get("continue") or 0)
        limit = int(params.get("limit") or len(items) or 1)
        page = items[start : start + limit]
        more = start + limit < len(items)
        meta = {"resourceVersion": self.rv(), **({"continue": str(start + limit)} if more else {})}
        return {"items": page, "metadata": meta}

    async def watch(self, path: str, params: Any) -> AsyncIterator[JSON]:
        self.watching[path] += 1
        queue = self.stream(path)
        n = 0
        while True:
            event = await queue.get()
            if event is GONE:
                raise ApiError(410, "Gone")
            yield event
            n += 1
            if n % CHUNK == 0:
                await asyncio.sleep(0)

    async def _write(self, *args: Any, **kwargs: Any) -> JSON:
        self.writes["write"] += 1
        return {"metadata": {"resourceVersion": self.rv()}}

    def __getattr__(self, name: str) -> Callable[..., Awaitable[JSON]]:
        # post, merge_patch, strategic_patch, request, apply...: accepted
        return self._write

    async def close(self) -> None:
        pass


class FakeLease:
    """A Lease for the elector's own client; records when each renewal arrives."""

    def __init__(self) -> None:
        self.lease: JSON | None = None
        self.renewals: list[float] = []

    async def get(self, path: str, **_: Any) -> JSON:
        if self.lease is None:
            raise ApiError(404, "NotFound")
        return json.loads(json.dumps(self.lease))  # type: ignore[no-any-return]

    async def post(self, path: str, body: JSON, **_: Any) -> JSON:
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
        self.renewals.append(time.monotonic())
        return self.lease

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> JSON:
        assert self.lease is not None
        rv = int(self.lease["metadata"]["resourceVersion"]) + 1
        self.lease = {**body, "metadata": {**body["metadata"], "resourceVersion": str(rv)}}
        self.renewals.append(time.monotonic())
        return self.lease

    async def close(self) -> None:
        pass

    def max_gap(self, since: float) -> float:
        times = [t for t in self.renewals if t >= since] + [time.monotonic()]
        return max((b - a for a, b in itertools.pairwise(times)), default=0.0)


class OkBinder:
    def __init__(self) -> None:
        self.bound: dict[str, str] = {}
        self.order: list[str] = []  # the pods' uids in the order they were bound

    async def bind_gang(self, d: BindGang) -> list[BindResult]:
        for b in d.bindings:
            if b.pod.uid not in self.bound:
                self.order.append(b.pod.uid)
            self.bound[b.pod.uid] = b.node
        return [BindResult(b, True) for b in d.bindings]


class LagProbe:
    """How late a short sleep wakes up: the longest the loop was blocked, per window; and the
    longest pause of CPython's cyclic garbage collector (part of that lag, not the handlers')."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.max = 0.0
        self.gc_max = 0.0
        self.last_gc = 0.0  # the longest collector pause of the last window
        self._gc_start = 0.0
        self._task: asyncio.Task[None] | None = None
        gc.callbacks.append(self._gc)

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_start = time.perf_counter()
        else:
            self.gc_max = max(self.gc_max, time.perf_counter() - self._gc_start)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            t0 = loop.time()
            await asyncio.sleep(self.period)
            self.max = max(self.max, loop.time() - t0 - self.period)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def window(self) -> float:
        """The longest lag since the last call (once the probe has woken up after whatever
        ran last); starts a new window."""
        await asyncio.sleep(self.period * 2)
        out, self.max = self.max, 0.0
        self.last_gc, self.gc_max = self.gc_max, 0.0
        return out


# ---- objects -------------------------------------------------------------------------------
def node(i: int, gpus: int) -> JSON:
    return {
        "metadata": {"name": f"n{i:05d}", "uid": f"n{i}", "resourceVersion": "1"},
        "status": {
            "allocatable": {
                "cpu": "128",
                "memory": "1Ti",
                "nvidia.com/gpu": str(gpus),
                "pods": "110",
            },
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def podgroup(g: int, size: int, runtime: int = 0) -> JSON:
    spec: JSON = {"minMember": size}
    if runtime:
        spec["expectedRuntimeSeconds"] = runtime
    return {
        "apiVersion": "gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": f"g{g:05d}",
            "namespace": NS,
            "uid": f"pg{g}",
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": spec,
    }


def pod(g: int, i: int, rv: str, node_name: str = "", phase: str = "Pending") -> JSON:
    return {
        "metadata": {
            "name": f"g{g:05d}-{i:05d}",
            "namespace": NS,
            "uid": f"u{g}-{i}",
            "labels": {"gangsched.io/pod-group": f"g{g:05d}"},
            "resourceVersion": rv,
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {
            "schedulerName": "gangsched",
            "nodeName": node_name,
            "containers": [
                {
                    "name": "c",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
        "status": {"phase": phase},
    }


# ---- the harness ---------------------------------------------------------------------------
class Harness:
    def __init__(
        self, gpus_per_node: int, retry_period: float, forecast_seconds: float = 0.0
    ) -> None:
        self.api = FakeApi()
        self.lease = FakeLease()
        self.binder = OkBinder()
        self.outbox = Outbox()
        client = cast(Any, self.api)
        self.core = Scheduler(CoreConfig(), WallClock())
        self.reporter = Reporter(client, self.outbox, "bench")
        self.service = SchedulerService(
            self.core,
            client,
            cast(Any, self.binder),
            self.reporter,
            status_resync_seconds=0,
            forecast_seconds=forecast_seconds,
        )
        self.elector = LeaderElector(
            cast(Any, self.lease),
            "gangsched-system",
            "bench",
            "bench",
            retry_period=retry_period,
        )
        self.gpus = gpus_per_node
        self.probe = LagProbe()
        self.tasks: list[asyncio.Task[Any]] = []
        self.pods_path = "/api/v1/pods"
        for r in self.service.reflectors:
            self.api.lists.setdefault(r._path, [])

    async def start(self) -> float:
        """Start everything; seconds until the service is ready (every first list handled)."""
        self.probe.start()
        await self.elector.acquire()
        self.outbox.start()
        t0 = time.perf_counter()
        await self.probe.window()
        self.tasks.append(asyncio.create_task(self.elector.hold()))
        self.tasks.append(asyncio.create_task(self.service.run()))
        await self.service.ready.wait()
        return time.perf_counter() - t0

    async def push(self, events: list[JSON]) -> float:
        """Push pod watch events and wait until the handler has seen the last; seconds."""
        queue = self.api.stream(self.pods_path)
        reflector = next(r for r in self.service.reflectors if r.name == "pods")
        mark = self.api.rv()
        t0 = time.perf_counter()
        for e in events:
            queue.put_nowait(e)
        # A bookmark is handled only after every event before it.
        queue.put_nowait({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": mark}}})
        while reflector.resource_version != mark:
            await asyncio.sleep(0.001)
        return time.perf_counter() - t0

    async def relist(self) -> float:
        """End the pod watch with 410 Gone; seconds until the relist is handled (the next
        watch starts once the handler returns)."""
        watches = self.api.watching[self.pods_path]
        t0 = time.perf_counter()
        self.api.stream(self.pods_path).put_nowait(GONE)
        while self.api.watching[self.pods_path] == watches:
            await asyncio.sleep(0.001)
        return time.perf_counter() - t0

    async def settle(self, timeout: float = 600.0) -> None:
        """Wait until the scheduling loop and the outbox have nothing left to do."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if (
                self.outbox.idle
                and self.core.next_wakeup() is None
                and not self.service.effects.binds
            ):
                return

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        for t in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.outbox.stop()


async def events_bench(gangs: int, size: int, gpus: int, retry_period: float) -> JSON:
    h = Harness(gpus, retry_period)
    n = gangs * size
    h.api.lists["/api/v1/nodes"] = [node(i, gpus) for i in range(-(-n // gpus))]
    h.api.lists["/apis/gangsched.io/v1alpha1/podgroups"] = [podgroup(g, size) for g in range(gangs)]
    ready = await h.start()
    since = time.monotonic()
    out: JSON = {
        "scenario": "events",
        "gangs": gangs,
        "gang_size": size,
        "pods": n,
        "nodes": len(h.api.lists["/api/v1/nodes"]),
        "ready_s": round(ready, 3),
        "phases": {},
    }
    pods = [(g, i) for g in range(gangs) for i in range(size)]

    async def phase(name: str, events: list[JSON]) -> None:
        await h.probe.window()
        cycles = h.service.stats.cycles
        seconds = await h.push(events)
        out["phases"][name] = {
            "events": len(events),
            "seconds": round(seconds, 3),
            "events_per_s": round(len(events) / seconds, 1),
            "max_loop_lag_ms": round(await h.probe.window() * 1000, 1),
            "max_gc_pause_ms": round(h.probe.last_gc * 1000, 1),
            "cycles": h.service.stats.cycles - cycles,
        }

    await phase("added", [{"type": "ADDED", "object": pod(g, i, h.api.rv())} for g, i in pods])
    t0 = time.perf_counter()
    deadline = time.monotonic() + 600
    while len(h.binder.bound) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    out["all_bound_after_s"] = round(time.perf_counter() - t0, 3)
    out["bound"] = len(h.binder.bound)
    bound = h.binder.bound
    await phase(
        "bound",
        [
            {"type": "MODIFIED", "object": pod(g, i, h.api.rv(), bound.get(f"u{g}-{i}", ""))}
            for g, i in pods
        ],
    )
    await phase(
        "running",
        [
            {
                "type": "MODIFIED",
                "object": pod(g, i, h.api.rv(), bound.get(f"u{g}-{i}", ""), "Running"),
            }
            for g, i in pods
        ],
    )
    await phase(
        "deleted",
        [
            {
                "type": "DELETED",
                "object": pod(g, i, h.api.rv(), bound.get(f"u{g}-{i}", ""), "Running"),
            }
            for g, i in pods
        ],
    )
    total_events = sum(p["events"] for p in out["phases"].values())
    total_s = sum(p["seconds"] for p in out["phases"].values())
    out["events_per_s"] = round(total_events / total_s, 1)
    out["lease_max_renew_gap_s"] = round(h.lease.max_gap(since), 2)
    out["lease_lost"] = not h.elector.is_leader
    out["writes"] = dict(h.api.writes)
    await h.stop()
    return out


async def relist_bench(n: int, size: int, gpus: int, retry_period: float) -> JSON:
    h = Harness(gpus, retry_period)
    gangs = -(-n // size)
    nodes = -(-n // gpus)
    h.api.lists["/api/v1/nodes"] = [node(i, gpus) for i in range(nodes)]
    h.api.lists["/apis/gangsched.io/v1alpha1/podgroups"] = [podgroup(g, size) for g in range(gangs)]
    items = []
    for k in range(n):
        g, i = divmod(k, size)
        items.append(pod(g, i, "5", f"n{k // gpus:05d}", "Running"))
    h.api.lists["/api/v1/pods"] = items
    since = time.monotonic()
    ready = await h.start()
    start_lag = await h.probe.window()
    start_gc = h.probe.last_gc
    await h.settle()
    await h.probe.window()
    relist = await h.relist()
    relist_lag = await h.probe.window()
    relist_gc = h.probe.last_gc
    await h.settle()
    out = {
        "scenario": "relist",
        "pods": n,
        "gang_size": size,
        "gangs": gangs,
        "nodes": nodes,
        "first_sync_s": round(ready, 3),
        "first_sync_max_loop_lag_ms": round(start_lag * 1000, 1),
        "first_sync_max_gc_pause_ms": round(start_gc * 1000, 1),
        "relist_s": round(relist, 3),
        "relist_max_loop_lag_ms": round(relist_lag * 1000, 1),
        "relist_max_gc_pause_ms": round(relist_gc * 1000, 1),
        "lease_max_renew_gap_s": round(h.lease.max_gap(since), 2),
        "lease_lost": not h.elector.is_leader,
        "writes": dict(h.api.writes),
    }
    await h.stop()
    return out


async def churn_bench(
    gangs: int, size: int, gpus: int, retry_period: float, forecast: float, ends: int
) -> JSON:
    """Room for half the gangs, each declaring an hour's run: half bind, half wait (their
    start forecast, with ``forecast`` > 0, every ``forecast`` seconds at most). Then ``ends``
    times: the oldest running gang ends (its pods Succeeded), the bench waits until a
    waiting gang is bound in its place, delivering its binding as the watch would, and
    submits a new gang (so that as many wait throughout). Timed: those ``ends``
    replacements, in wall and process CPU seconds."""
    h = Harness(gpus, retry_period, forecast)
    # the forecast rounds' work (a round is counted when it ends)
    work = {"rounds": 0.0, "seconds": 0.0}
    round_of = h.service.forecast_round

    async def counted() -> float:
        took = await round_of()
        work["rounds"] += took > 0
        work["seconds"] += took
        return took

    h.service.forecast_round = counted  # type: ignore[method-assign]
    running_gangs = gangs // 2
    h.api.lists["/api/v1/nodes"] = [node(i, gpus) for i in range(running_gangs * size // gpus)]
    h.api.lists["/apis/gangsched.io/v1alpha1/podgroups"] = [
        podgroup(g, size, 3600) for g in range(gangs)
    ]
    await h.start()
    await h.push(
        [
            {"type": "ADDED", "object": pod(g, i, h.api.rv())}
            for g in range(gangs)
            for i in range(size)
        ]
    )
    bound = h.binder.bound
    deadline = time.monotonic() + 600
    while len(bound) < running_gangs * size and time.monotonic() < deadline:
        await asyncio.sleep(0.01)

    def gang_of(uid: str) -> int:
        return int(uid[1:].partition("-")[0])

    def deliver(g: int, phase: str, kind: str = "MODIFIED") -> list[JSON]:
        return [
            {"type": kind, "object": pod(g, i, h.api.rv(), bound.get(f"u{g}-{i}", ""), phase)}
            for i in range(size)
        ]

    running = sorted({gang_of(u) for u in bound})
    await h.push([e for g in running for e in deliver(g, "Running")])
    while not h.outbox.idle:
        await asyncio.sleep(0.05)
    await asyncio.sleep(1.0)
    at_start = dict(work)
    groups = h.api.stream("/apis/gangsched.io/v1alpha1/podgroups")
    next_id = gangs
    t0, c0 = time.perf_counter(), time.process_time()
    seen = set(running)
    looked = len(h.binder.order)
    for _ in range(ends):
        g = running.pop(0)
        want = len(bound) + size
        await h.push(deliver(g, "Succeeded"))
        while len(bound) < want and time.monotonic() < deadline:
            await asyncio.sleep(0.0005)
        # the gangs bound since (only those: the bench's own work stays the same per end)
        fresh = {gang_of(u) for u in h.binder.order[looked:]}
        looked = len(h.binder.order)
        new = sorted(fresh - seen)
        seen.update(new)
        running.extend(new)
        await h.push([e for n in new for e in deliver(n, "Running")])
        # a new gang is submitted in its place: as many wait throughout
        groups.put_nowait({"type": "ADDED", "object": podgroup(next_id, size, 3600)})
        await h.push(
            [{"type": "ADDED", "object": pod(next_id, i, h.api.rv())} for i in range(size)]
        )
        next_id += 1
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    out: JSON = {
        "scenario": "churn",
        "forecast_seconds": forecast,
        "gangs": gangs,
        "waiting": next_id - len(seen),
        "ends": ends,
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "ms_per_replacement": round(1000 * wall / ends, 2),
        "forecast_rounds": int(work["rounds"] - at_start["rounds"]),
        "forecast_work_seconds": round(work["seconds"] - at_start["seconds"], 3),
        "writes": dict(h.api.writes),
    }
    await h.stop()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("scenario", choices=["events", "relist", "churn"])
    ap.add_argument("--gangs", type=int, default=1000)
    ap.add_argument("--gang-size", type=int, default=8)
    ap.add_argument("--pods", type=int, default=50_000, help="relist: pods the API holds")
    ap.add_argument("--gpus-per-node", type=int, default=8)
    ap.add_argument("--retry-period", type=float, default=2.0)
    ap.add_argument("--ends", type=int, default=200, help="churn: gangs ended, one at a time")
    ap.add_argument(
        "--forecast", type=float, default=5.0, help="churn: startForecastSeconds (0: off)"
    )
    args = ap.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    if args.scenario == "churn":
        result = asyncio.run(
            churn_bench(
                args.gangs,
                args.gang_size,
                args.gpus_per_node,
                args.retry_period,
                args.forecast,
                args.ends,
            )
        )
    elif args.scenario == "events":
        result = asyncio.run(
            events_bench(args.gangs, args.gang_size, args.gpus_per_node, args.retry_period)
        )
    else:
        result = asyncio.run(
            relist_bench(args.pods, args.gang_size, args.gpus_per_node, args.retry_period)
        )
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
