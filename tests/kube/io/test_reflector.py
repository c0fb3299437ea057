"""The reflector against the fake API server: a paged list delivered as one SYNC (or page by
page, each while the next is fetched, for a paged reflector), then a
watch from the list's resourceVersion; bookmarks move the resourceVersion; a watch the server
ends resumes where it was (nothing lost, nothing twice); an expired one (an ERROR event or an
HTTP 410) relists; a resource not served is marked absent and looked at again; a handler's
failure is counted and survived; failed lists back off and start afresh after progress."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from gangsched.kube.io.client import JSON
from gangsched.kube.io.reflector import OUTAGE_RETRY_MAX, Reflector
from tests.support.fakekube import FakeKube

PODS = "/api/v1/namespaces/ml/pods"
ALL = "/api/v1/pods"


def _pod(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels}, "spec": {}}


def _name(obj: JSON) -> str:
    return str(obj["metadata"]["name"])


class Seen:
    """What the handler was given: ("SYNC", [names]) or (kind, name)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def __call__(self, kind: str, obj: JSON) -> None:
        if kind == "SYNC":
            self.events.append((kind, [_name(o) for o in obj["items"]]))
        else:
            self.events.append((kind, _name(obj)))


async def until(what: str, cond: Callable[[], bool], timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0)


class Rig:
    def __init__(self, kube: FakeKube, handler: Callable[[str, JSON], Any], **kw: Any) -> None:
        self.kube = kube
        self.reflector = Reflector(kube, ALL, handler, name="pods", **kw)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Reflector:
        self.task = asyncio.create_task(self.reflector.run())
        await asyncio.wait_for(self.reflector.synced.wait(), 5)
        await until("the watch", lambda: self.kube.watching == 1)
        return self.reflector


@pytest.fixture
async def rigs() -> AsyncIterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for rig in made:
        if rig.task is not None:
            rig.task.cancel()
            await asyncio.gather(rig.task, return_exceptions=True)


def _rig(rigs: list[Rig], kube: FakeKube, handler: Any, **kw: Any) -> Rig:
    rig = Rig(kube, handler, **kw)
    rigs.append(rig)
    return rig


async def test_a_paged_list_is_one_sync_then_the_watch_starts_from_it(rigs: list[Rig]) -> None:
    kube, seen = FakeKube(), Seen()
    kube.seed(PODS, *(_pod(f"p{i}") for i in range(5)))
    reflector = await _rig(rigs, kube, seen, page_size=2).start()
    assert seen.events == [("SYNC", ["p0", "p1", "p2", "p3", "p4"])]
    lists = kube.sent("list")
    assert [r.params.get("limit") for r in lists] == [2, 2, 2]
    assert "continue" not in lists[0].params and lists[2].params["continue"]
    [watch] = kube.sent("watch")
    assert watch.params["resourceVersion"] == "5" == reflector.resource_version
    assert watch.params["allowWatchBookmarks"] == "true"
    kube.seed(PODS, _pod("p5"))
    await kube.merge_patch(f"{PODS}/p0", {"metadata": {"labels": {"a": "b"}}})
    kube.remove(f"{PODS}/p1")
    await until("three events", lambda: len(seen.events) == 4)
    assert seen.events[1:] == [("ADDED", "p5"), ("MODIFIED", "p0"), ("DELETED", "p1")]
    assert reflector.resource_version == "8"


async def test_a_bookmark_moves_the_resource_version_and_is_not_delivered(
    rigs: list[Rig],
) -> None:
    kube, seen = FakeKube(), Seen()
    kube.seed(PODS, _pod("p0"))
    reflector = await _rig(rigs, kube, seen).start()
    kube.seed("/api/v1/namespaces/other/configmaps", {"metadata": {"name": "c"}})  # rv 2
    kube.bookmark(ALL)
    await until("the bookmark", lambda: reflector.resource_version == "2")
    assert seen.events == [("SYNC", ["p0"])]


async def test_a_watch_the_server_ends_resumes_without_a_relist(rigs: list[Rig]) -> None:
    kube, seen = FakeKube(), Seen()
    kube.seed(PODS, _pod("p0"))
    reflector = await _rig(rigs, kube, seen).start()
    back = kube.hold("watch", "/pods$", times=1)
    kube.end_watches()
    await until("the watch down", lambda: kube.watching == 0)
    kube.seed(PODS, _pod("p1"))  # while no watch is open
    back.set()
    await until("p1", lambda: ("ADDED", "p1") in seen.events)
    kube.seed(PODS, _pod("p2"))
    await until("p2", lambda: ("ADDED", "p2") in seen.events)
    assert seen.events == [("SYNC", ["p0"]), ("ADDED", "p1"), ("ADDED", "p2")]
    assert reflector.relists == 0 and len(kube.sent("list")) == 1
    assert [r.params["resourceVersion"] for r in kube.sent("watch")] == ["1", "1"]


async def test_an_expired_watch_relists_and_the_sync_has_what_is_there_now(
    rigs: list[Rig],
) -> None:
    kube, seen = FakeKube(), Seen()
    kube.seed(PODS, _pod("p0"), _pod("p1"))
    reflector = await _rig(rigs, kube, seen).start()
    back = kube.hold("watch", "/pods$", times=1)
    kube.end_watches()
    await until("the watch down", lambda: kube.watching == 0)
    kube.remove(f"{PODS}/p0")
    kube.seed(PODS, _pod("p2"))
    kube.compact()  # the watch cannot resume: an ERROR event with code 410
    back.set()
    await until("the relist", lambda: reflector.relists == 1)
    await until("the watch again", lambda: kube.watching == 1)
    assert seen.events == [("SYNC", ["p0", "p1"]), ("SYNC", ["p1", "p2"])]
    kube.seed(PODS, _pod("p3"))
    await until("p3", lambda: ("ADDED", "p3") in seen.events)


async def test_a_watch_refused_with_410_relists(rigs: list[Rig]) -> None:
    kube, seen = FakeKube(), Seen()
    kube.seed(PODS, _pod("p0"))
    reflector = await _rig(rigs, kube, seen).start()
    kube.fail("watch", "/pods$", 410)
    kube.end_watches()
    await until("the relist", lambda: reflector.relists == 1)
    assert seen.events == [("SYNC", ["p0"]), ("SYNC", ["p0"])]


async def test_a_resource_not_served_is_absent_then_watched_once_it_is(
    rigs: list[Rig],
) -> None:
    kube, seen = FakeKube(), Seen()
    kube.fail("list", "/pods$", 404, times=2)  # a CRD not installed yet
    rig = _rig(rigs, kube, seen, absent_recheck=0.01)
    rig.task = asyncio.create_task(rig.reflector.run())
    await asyncio.wait_for(rig.reflector.synced.wait(), 5)
    assert rig.reflector.absent and seen.events == [], "synced: startup does not wait for it"
    kube.seed(PODS, _pod("p0"))
    await until("served", lambda: seen.events == [("SYNC", ["p0"])])
    assert not rig.reflector.absent and rig.reflector.relists == 0


async def test_a_handler_that_fails_on_one_object_does_not_stop_the_watch(
    rigs: list[Rig],
) -> None:
    kube, seen = FakeKube(), Seen()

    def handler(kind: str, obj: JSON) -> None:
        if kind != "SYNC" and _name(obj) == "bad":
            raise KeyError("a bug")
        seen(kind, obj)

    reflector = await _rig(rigs, kube, handler).start()
    kube.seed(PODS, _pod("bad"), _pod("good"))
    await until("good", lambda: ("ADDED", "good") in seen.events)
    assert reflector.handler_errors == 1


async def test_an_async_handler_is_awaited_before_the_next_event(rigs: list[Rig]) -> None:
    kube = FakeKube()
    kube.seed(PODS, _pod("p0"))
    trace: list[str] = []

    def handler(kind: str, obj: JSON) -> Awaitable[None]:
        async def handle() -> None:
            trace.append(f"start {kind}")
            for _ in range(3):
                await asyncio.sleep(0)  # as a relist handled in slices yields
            trace.append(f"end {kind}")

        return handle()

    await _rig(rigs, kube, handler).start()
    kube.seed(PODS, _pod("p1"))
    await until("the event", lambda: "end ADDED" in trace)
    assert trace == ["start SYNC", "end SYNC", "start ADDED", "end ADDED"]


async def test_failed_lists_back_off_and_progress_starts_the_backoff_afresh(
    rigs: list[Rig], monkeypatch: pytest.MonkeyPatch
) -> None:
    delays: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        if seconds:
            delays.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(asyncio, "sleep", sleep)
    kube, seen = FakeKube(), Seen()
    kube.seed(PODS, _pod("p0"))
    kube.fail("list", "/pods$", 503, times=3)
    reflector = await _rig(rigs, kube, seen).start()
    assert len(delays) == 3 and reflector.failures == 0
    assert all(0.1 <= d <= OUTAGE_RETRY_MAX for d in delays)
    assert delays[2] > delays[0], "doubling, with jitter"
    kube.fail("watch", "/pods$", 503, times=1)
    kube.end_watches()
    await until("the watch again", lambda: len(kube.sent("watch")) == 3)
    assert 0.1 <= delays[3] <= 0.2, "after progress the backoff starts afresh"
    assert reflector.relists == 0, "an outage of the watch does not need a relist"


# ---- a paged reflector: each page handed over as it comes ---------------------------------


class Paged:
    """A handler of a paged list that records what it got, and can hold a page."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.gate: asyncio.Event | None = None

    def __call__(self, kind: str, obj: JSON) -> Awaitable[None] | None:
        if kind == "PAGE":
            self.events.append((kind, [_name(o) for o in obj["items"]]))
            if self.gate is not None:
                return self.gate.wait()
        elif kind in ("LISTING", "LISTED"):
            self.events.append((kind, None))
        else:
            self.events.append((kind, _name(obj)))
        return None


async def test_a_paged_list_hands_each_page_over_while_the_next_is_fetched(
    rigs: list[Rig],
) -> None:
    kube, seen = FakeKube(), Paged()
    kube.seed(PODS, *(_pod(f"p{i}") for i in range(5)))
    gate = seen.gate = asyncio.Event()
    rig = _rig(rigs, kube, seen, page_size=2, paged=True)
    rig.task = asyncio.create_task(rig.reflector.run())
    # the handler holds the first page; the second is asked for meanwhile
    await until("the first page", lambda: ("PAGE", ["p0", "p1"]) in seen.events)
    await until("the second page asked for", lambda: len(kube.sent("list")) == 2)
    assert not rig.reflector.synced.is_set() and len(seen.events) == 2
    seen.gate = None
    gate.set()
    await asyncio.wait_for(rig.reflector.synced.wait(), 5)
    assert seen.events == [
        ("LISTING", None),
        ("PAGE", ["p0", "p1"]),
        ("PAGE", ["p2", "p3"]),
        ("PAGE", ["p4"]),
        ("LISTED", None),
    ]
    await until("the watch", lambda: kube.watching == 1)
    [watch] = kube.sent("watch")
    assert watch.params["resourceVersion"] == "5" == rig.reflector.resource_version
    kube.seed(PODS, _pod("p5"))
    await until("p5", lambda: ("ADDED", "p5") in seen.events)


async def test_a_paged_list_that_fails_half_way_starts_again_from_the_beginning(
    rigs: list[Rig],
) -> None:
    kube, seen = FakeKube(), Paged()
    kube.seed(PODS, *(_pod(f"p{i}") for i in range(3)))
    kube.fail("list", "/pods$", 410, skip=1, message="The provided continue parameter is too old")
    reflector = await _rig(rigs, kube, seen, page_size=2, paged=True).start()
    assert seen.events == [
        ("LISTING", None),
        ("PAGE", ["p0", "p1"]),
        ("LISTING", None),
        ("PAGE", ["p0", "p1"]),
        ("PAGE", ["p2"]),
        ("LISTED", None),
    ]
    assert reflector.relists == 0  # the first list, done in two tries
