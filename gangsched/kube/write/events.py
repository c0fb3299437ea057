"""Events as kube-scheduler's events.k8s.io recorder writes them: repeats are a series.

client-go's recorder (tools/events) keys an event by its type, action, reason, reporting
controller and instance and the object it regards; a repeat within six minutes does not make a
new Event object but counts into ``series`` (``count``, ``lastObservedTime``) of the first. So
does this recorder, per pod (kube-scheduler reports each pod of a failed attempt, so each member
of a gang gets one event per attempt, counted into its series), with two differences:

- the note is part of the key. An Event's note cannot change once written (the API server
  refuses the update), and a gang's message says what it waits for (its members, GPUs, its
  PodGroup): a new message makes a new Event, so ``kubectl describe`` shows the current one. To
  keep a message that changes at every attempt from making an Event at every attempt, a new
  note is written at most once per ``note_gap`` per pod and reason (the latest note then);
- the series is written at most every ``refresh`` seconds (client-go: the count of 2 at once,
  then every 30 minutes), so ``LAST SEEN`` and the count stay current.

A series with no repeat for ``finish`` seconds (client-go's six minutes) is over: the next
occurrence makes a new Event. Every write goes through the outbox, one at a time per series
(coalesced: a write reads the series when it runs, so it sends the newest count or note).
"""

from __future__ import annotations

import asyncio
import itertools
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from gangsched.core.decisions import PodRef
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.client import ApiError
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.io.times import rfc3339

__all__ = ["EventRecorder"]

FINISH = 360.0  # client-go's finishTime
RETRIES = 3  # writes that failed with a retriable error are tried again this many times


@dataclass(eq=False)
class _Series:
    pod: PodRef
    kind: str
    reason: str
    action: str
    urgent: bool
    note: str
    first: float  # wall clock: the first occurrence with this note
    last: float  # wall clock: the newest occurrence
    seen: float  # monotonic: the newest occurrence
    count: int = 1  # occurrences with this note
    name: str = ""  # the Event written for written_note
    written_note: str = ""
    written_count: int = 0
    created: float = -math.inf  # monotonic: when that Event was created
    written: float = -math.inf  # monotonic: the last write (created or series updated)
    due: float = math.inf  # monotonic: when the timer fires
    timer: asyncio.TimerHandle | None = None
    queued: bool = False
    tries: int = 0
    # The Event's name when it is fixed by what it says (``record``'s ``name``): written at
    # most once, whoever writes it; a create that finds it there is done.
    fixed: str = ""

    @property
    def needs_create(self) -> bool:
        return not self.name or self.note != self.written_note

    @property
    def needs_write(self) -> bool:
        return self.needs_create or self.count > self.written_count


class EventRecorder:
    def __init__(
        self,
        client: KubeApi,
        outbox: Outbox,
        controller: str,
        instance: str,
        *,
        refresh: float = 60.0,
        note_gap: float = 5.0,
        finish: float = FINISH,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._client = client
        self._outbox = outbox
        self._controller = controller
        self._instance = instance
        self._refresh = refresh
        self._note_gap = note_gap
        self._finish = finish
        self._now = monotonic
        self._wall = wall
        self._series: dict[str, dict[tuple[str, str, str], _Series]] = {}  # pod uid -> ...
        self._seq = itertools.count()
        self._swept = monotonic()
        self.created = 0
        self.updated = 0
        self.existing = 0  # fixed-name Events found written already

    def __len__(self) -> int:
        return sum(len(s) for s in self._series.values())

    # ---- occurrences -------------------------------------------------------------------
    def record(
        self,
        pod: PodRef,
        kind: str,
        reason: str,
        action: str,
        note: str,
        *,
        urgent: bool = False,
        name: str = "",
    ) -> None:
        """One occurrence. ``name``: the Event's fixed name, for an event that happens once
        per pod (Scheduled): a process that writes it again (after a restart, not knowing
        whether its predecessor did) finds it there and writes nothing more."""
        note = note[:1024]
        now, wall = self._now(), self._wall()
        per_pod = self._series.setdefault(pod.uid, {})
        key = (kind, reason, action)
        s = per_pod.get(key)
        if s is not None and now - s.seen > self._finish and self._settled(s):
            s = None  # the series is over: a new Event
        if s is None:
            s = _Series(pod, kind, reason, action, urgent, note, first=wall, last=wall, seen=now)
            s.fixed = name
            per_pod[key] = s
        elif note == s.note:
            s.count += 1
            s.last, s.seen = wall, now
        else:
            s.note, s.first, s.last, s.seen = note, wall, wall, now
            # back to the note already written: its series goes on
            s.count = s.written_count + 1 if note == s.written_note and s.name else 1
        s.pod = pod
        self._schedule(s)
        if now - self._swept > 60.0:
            self._sweep(now)

    def forget(self, uid: str, reason: str | None = None) -> None:
        """Drop the series of a pod (of one reason, or all): what they had not written yet is
        not written."""
        per_pod = self._series.get(uid)
        if per_pod is None:
            return
        for key in [k for k in per_pod if reason is None or k[1] == reason]:
            self._cancel(per_pod.pop(key))
        if not per_pod:
            del self._series[uid]

    def flush(self) -> None:
        """Queue now every write that is waiting for its time (on shutdown)."""
        for per_pod in self._series.values():
            for s in per_pod.values():
                if s.needs_write and not s.queued:
                    self._enqueue(s)

    # ---- scheduling writes -------------------------------------------------------------
    def _alive(self, s: _Series) -> bool:
        return self._series.get(s.pod.uid, {}).get((s.kind, s.reason, s.action)) is s

    @staticmethod
    def _settled(s: _Series) -> bool:
        return not s.needs_write and not s.queued and s.timer is None

    def _cancel(self, s: _Series) -> None:
        if s.timer is not None:
            s.timer.cancel()
            s.timer = None
        s.due = math.inf

    def _schedule(self, s: _Series, delay: float = 0.0) -> None:
        if s.queued or not s.needs_write:
            return
        due = (s.created + self._note_gap) if s.needs_create else (s.written + self._refresh)
        due = max(due, self._now() + delay)
        if s.timer is not None and s.due <= due:
            return  # an earlier write is already planned
        self._cancel(s)
        wait = due - self._now()
        if wait <= 0:
            self._enqueue(s)
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop (jobs driven by hand): no timer to wait on
            self._enqueue(s)
            return
        s.due = due
        s.timer = loop.call_later(wait, self._enqueue, s)

    def _enqueue(self, s: _Series) -> None:
        self._cancel(s)
        if not self._alive(s):
            return
        s.queued = True
        what = f"event {s.reason}"
        key = ("event", s.pod.uid, s.kind, s.reason, s.action)

        def dropped() -> None:  # (unsent: the next occurrence queues it again)
            s.queued = False

        # (the first Event of a series that was never written is a first report: it goes
        # before the backlog of series updates and changed notes, as a pod's first condition)
        self._outbox.put(
            what,
            lambda: self._write(s),
            key=key,
            urgent=s.urgent,
            first=not s.name and s.written == -math.inf,
            on_drop=dropped,
        )

    def _sweep(self, now: float) -> None:
        self._swept = now
        for uid in list(self._series):
            per_pod = self._series[uid]
            for key in [k for k, s in per_pod.items() if now - s.seen > self._finish]:
                if self._settled(per_pod[key]):
                    del per_pod[key]
            if not per_pod:
                del self._series[uid]

    # ---- writing -----------------------------------------------------------------------
    async def _write(self, s: _Series) -> None:
        s.queued = False
        if not self._alive(s) or not s.needs_write:
            return
        note, count, first, last = s.note, s.count, s.first, s.last
        create = s.needs_create
        ns = s.pod.namespace
        try:
            if not create:
                try:
                    await self._client.merge_patch(
                        f"/apis/events.k8s.io/v1/namespaces/{ns}/events/{s.name}",
                        {"series": {"count": count, "lastObservedTime": rfc3339(last, True)}},
                    )
                    self.updated += 1
                except ApiError as e:
                    if e.status != 404:
                        raise
                    create = True  # the Event expired (the API server's event TTL): anew
            if create:
                name = s.fixed or f"{s.pod.name}.{time.time_ns():x}{next(self._seq):x}"
                body = self._body(s, name, note, first, count, last)
                try:
                    await self._client.post(f"/apis/events.k8s.io/v1/namespaces/{ns}/events", body)
                    self.created += 1
                except ApiError as e:
                    if not (s.fixed and e.status == 409):
                        raise
                    self.existing += 1  # written already (by a process before this one)
                s.name, s.written_note, s.created = name, note, self._now()
        except ApiError as e:
            if e.retriable and s.tries < RETRIES and self._alive(s):
                s.tries += 1
                self._schedule(s, delay=float(s.tries))
            raise
        s.tries = 0
        s.written_count = count
        s.written = self._now()
        if self._alive(s):
            self._schedule(s)  # what happened while this was sent

    def _body(
        self, s: _Series, name: str, note: str, first: float, count: int, last: float
    ) -> dict[str, object]:
        body: dict[str, object] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            # client-go's naming: the object name, a dot, and a unique hex suffix
            "metadata": {"name": name, "namespace": s.pod.namespace},
            "eventTime": rfc3339(first, micro=True),
            "reportingController": self._controller,
            "reportingInstance": self._instance,
            "action": s.action,
            "reason": s.reason,
            "note": note,
            "type": s.kind,
            "regarding": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": s.pod.namespace,
                "name": s.pod.name,
                "uid": s.pod.uid,
            },
        }
        if count > 1:
            body["series"] = {"count": count, "lastObservedTime": rfc3339(last, micro=True)}
        return body
