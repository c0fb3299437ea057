"""Full lists (the first sync, a relist) and the status report of every gang are handled in
slices: other tasks on the event loop (the lease renewal, the health server, bindings) get
turns while they run, and what the service ends with is what the list says."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from gangsched.api.membership import Source
from gangsched.api.podgroup import podgroup_from
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.scheduler import Scheduler
from gangsched.kube.io.slicing import in_slices
from gangsched.kube.service import SchedulerService
from gangsched.kube.write.binder import BindResult
from gangsched.kube.write.reporter import Reporter

GANG = 8


class Outbox:
    dropped = 0

    def __init__(self) -> None:
        self.keys: list[Hashable | None] = []

    def put(
        self, what: str, job: Callable[[], Awaitable[object]], key: Hashable | None = None, **_: Any
    ) -> None:
        self.keys.append(key)


class OkBinder:
    async def bind_gang(self, d: BindGang) -> list[BindResult]:
        return [BindResult(b, True) for b in d.bindings]


def _service(slice_seconds: float) -> tuple[SchedulerService, Outbox]:
    outbox = Outbox()
    reporter = Reporter(object(), outbox, "test")  # type: ignore[arg-type]
    core = Scheduler(CoreConfig(), FakeClock(1_000.0))
    service = SchedulerService(
        core,
        object(),  # type: ignore[arg-type]
        OkBinder(),  # type: ignore[arg-type]
        reporter,
        slice_seconds=slice_seconds,
    )
    return service, outbox


def _node(i: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"n{i}", "uid": f"n{i}"},
        "status": {
            "allocatable": {"cpu": "128", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def _pg(g: int) -> dict[str, Any]:
    return {
        "metadata": {"name": f"g{g}", "namespace": "ml", "uid": f"pg{g}", "generation": 1},
        "spec": {"minMember": GANG},
    }


def _pod(g: int, i: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"g{g}-{i}",
            "namespace": "ml",
            "uid": f"u{g}-{i}",
            "labels": {"gangsched.io/pod-group": f"g{g}"},
            "resourceVersion": "1",
        },
        "spec": {
            "schedulerName": "gangsched",
            "nodeName": f"n{g}",
            "containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "1"}}}],
        },
        "status": {"phase": "Running"},
    }


class Ticker:
    """Another task on the loop: counts its turns."""

    def __init__(self) -> None:
        self.turns = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.turns += 1
            await asyncio.sleep(0)

    def __enter__(self) -> Ticker:
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *_: object) -> None:
        assert self._task is not None
        self._task.cancel()


Handler = Callable[[str, dict[str, Any]], Awaitable[None] | None]


async def _sync(handler: Handler, items: Any) -> int:
    """Hand a full list to a watch handler; how many turns another task got meanwhile."""
    with Ticker() as ticker:
        await asyncio.sleep(0)
        before = ticker.turns
        result = handler("SYNC", {"items": items})
        assert result is not None, "a full list is handled by an awaitable"
        await result
        return ticker.turns - before


async def test_a_relist_lets_the_loop_turn_and_ends_as_the_list_says() -> None:
    gangs = 60
    # A budget of 0 yields after every item: the count of turns does not depend on how fast
    # the machine is.
    service, outbox = _service(slice_seconds=0.0)
    core = service.core
    assert await _sync(service._on_node, [_node(g) for g in range(gangs)]) > 0
    crd = service._crd_handler(Source.GANGSCHED, podgroup_from)
    assert await _sync(crd, [_pg(g) for g in range(gangs)]) > 0
    pods = [_pod(g, i) for g in range(gangs) for i in range(GANG)]
    assert await _sync(service._on_pod, pods) > 0  # the first list
    service.ready.set()
    assert outbox.keys == [], "nothing is reported before every list is in"

    # A relist after missed events: gang 0 went away, gang 60 came, the rest changed nothing.
    relisted = [p for p in pods if not p["metadata"]["name"].startswith("g0-")]
    relisted += [_pod(gangs, i) for i in range(GANG)]
    turns = await _sync(service._on_pod, relisted)
    assert turns > 5, f"the loop turned {turns} times while {len(relisted)} pods were relisted"
    assert core.pod("u0-0") is None and core.group_size("ml/g0") == 0
    assert core.pod("u60-0") is not None and core.group_size("ml/g60") == GANG
    assert all(core.group_size(f"ml/g{g}") == GANG for g in range(1, gangs))
    reported = {k for k in outbox.keys if isinstance(k, tuple) and k[0] == "podgroup"}
    assert reported >= {("podgroup", f"ml/g{g}") for g in range(1, gangs)}, sorted(reported)
    status = core.group_status("ml/g1")
    assert status is not None and (status.phase, status.counts.running) == ("Running", GANG)


async def test_a_generous_budget_handles_a_list_in_one_go() -> None:
    service, _ = _service(slice_seconds=60.0)
    assert await _sync(service._on_node, [_node(g) for g in range(50)]) == 0


async def test_in_slices_yields_once_its_budget_is_spent() -> None:
    done: list[int] = []

    def slow(i: int) -> None:
        time.sleep(0.002)
        done.append(i)

    with Ticker() as ticker:
        await asyncio.sleep(0)
        before = ticker.turns
        yields = await in_slices(range(20), slow, budget=0.005)
        turns = ticker.turns - before
    assert done == list(range(20))
    assert 3 <= yields <= 10 and turns >= yields
