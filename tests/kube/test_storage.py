"""The storage reflectors against the fake API server: PersistentVolumeClaims,
PersistentVolumes, StorageClasses and CSINodes listed and watched into the core's volume
catalog; what is deleted while a watch is down is dropped by the relist."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass

import pytest

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.scheduler import Scheduler
from gangsched.core.volumes import VolumeCatalog
from gangsched.kube.reflector import Reflector
from gangsched.kube.storage import storage_reflectors
from tests.support.fakekube import FakeKube

CLAIMS = "/api/v1/namespaces/ml/persistentvolumeclaims"
VOLUMES = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
CSINODES = "/apis/storage.k8s.io/v1/csinodes"


async def until(what: str, cond: Callable[[], bool], timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0)


@dataclass
class Rig:
    kube: FakeKube
    core: Scheduler
    reflectors: dict[str, Reflector]
    pokes: list[int]

    @property
    def catalog(self) -> VolumeCatalog:
        return self.core.cache.volumes


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    kube = FakeKube()
    kube.seed(
        CLAIMS,
        {"metadata": {"name": "data"}, "spec": {"storageClassName": "fast", "volumeName": "pv"}},
    )
    kube.seed(VOLUMES, {"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}}})
    kube.seed(CLASSES, {"metadata": {"name": "fast"}, "provisioner": "csi.example.com"})
    kube.seed(CSINODES, {"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "d"}]}})
    core = Scheduler(CoreConfig(), FakeClock())
    pokes: list[int] = []
    reflectors = storage_reflectors(kube, core, lambda: pokes.append(1))
    tasks = [asyncio.create_task(r.run()) for r in reflectors]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.synced.wait() for r in reflectors)), 5)
        yield Rig(kube, core, {r.name: r for r in reflectors}, pokes)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_first_lists_fill_the_catalog(rig: Rig) -> None:
    cat = rig.catalog
    assert set(cat.claims) == {"ml/data"} and cat.claims["ml/data"].volume_name == "pv"
    assert cat.volumes["pv"].capacity == 2**30
    assert cat.classes["fast"].provisioner == "csi.example.com"
    assert cat.csi_nodes["n1"].drivers == frozenset({"d"})
    assert len(rig.pokes) == 4, "each list wakes the scheduler once"


async def test_watch_events_keep_the_catalog_current(rig: Rig) -> None:
    rig.kube.seed(CLAIMS, {"metadata": {"name": "more"}, "spec": {"storageClassName": "fast"}})
    rig.kube.remove(f"{VOLUMES}/pv")
    rig.kube.seed(CLASSES, {"metadata": {"name": "fast"}, "provisioner": "other.example.com"})
    await until("the new claim", lambda: "ml/more" in rig.catalog.claims)
    await until("the volume gone", lambda: "pv" not in rig.catalog.volumes)
    await until(
        "the class changed", lambda: rig.catalog.classes["fast"].provisioner == "other.example.com"
    )


async def test_what_went_away_while_the_watch_was_down_is_dropped_by_the_relist(
    rig: Rig,
) -> None:
    claims = rig.reflectors["persistentvolumeclaims"]
    assert claims.relists == 0
    back = rig.kube.hold("watch", "/persistentvolumeclaims$", times=1)
    rig.kube.end_watches()
    await until("the claims' watch to be down", lambda: rig.kube.watching == 3)
    rig.kube.remove(f"{CLAIMS}/data")  # seen by no watch
    rig.kube.compact()  # and the watch cannot resume from where it was
    back.set()
    await until("the relist", lambda: claims.relists == 1)
    await until("the claim dropped", lambda: rig.catalog.claims == {})
    assert "pv" in rig.catalog.volumes, "the other kinds relist too, and keep what is there"


async def test_a_long_list_goes_in_by_slices_while_the_loop_turns() -> None:
    """A full list is handled in slices that yield to the event loop (here after every
    object): other tasks run meanwhile, and the catalog ends as the list says."""
    kube = FakeKube()
    kube.seed(CLAIMS, *({"metadata": {"name": f"c{i}"}} for i in range(100)))
    core = Scheduler(CoreConfig(), FakeClock())
    pokes: list[int] = []
    seen_at_yield: list[int] = []
    reflectors = {
        r.name: r
        for r in storage_reflectors(
            kube,
            core,
            lambda: pokes.append(1),
            slice_seconds=0.0,
            on_yield=lambda: seen_at_yield.append(len(core.cache.volumes.claims)),
        )
    }
    claims = reflectors["persistentvolumeclaims"]
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other())
    tasks = [asyncio.create_task(r.run()) for r in reflectors.values()]
    try:
        await until("the first lists", lambda: all(r.synced.is_set() for r in reflectors.values()))
        assert set(core.cache.volumes.claims) == {f"ml/c{i}" for i in range(100)}
        assert seen_at_yield[:3] == [1, 2, 3], "one claim per slice"
        assert turns >= 100, "another task ran between the slices"
        assert len(pokes) == 4, "each list wakes the scheduler once, at its end"

        # A relist after missed events: 50 claims gone, 10 new.
        await until("the watches", lambda: kube.watching == 4)
        back = kube.hold("watch", "/persistentvolumeclaims$", times=1)
        kube.end_watches()
        await until(
            "the claims' watch back, held",
            lambda: len(kube.sent("watch", "/persistentvolumeclaims$")) == 2,
        )
        for i in range(50):
            kube.remove(f"{CLAIMS}/c{i}")
        kube.seed(CLAIMS, *({"metadata": {"name": f"d{i}"}} for i in range(10)))
        kube.compact()
        seen_at_yield.clear()
        back.set()
        await until("the relist", lambda: claims.relists == 1 and len(pokes) == 5)
        want = {f"ml/c{i}" for i in range(50, 100)} | {f"ml/d{i}" for i in range(10)}
        assert set(core.cache.volumes.claims) == want
        assert seen_at_yield[:50] == list(range(99, 49, -1)), "what went away first, by slices"
    finally:
        for t in [*tasks, ticker]:
            t.cancel()
        await asyncio.gather(*tasks, ticker, return_exceptions=True)
