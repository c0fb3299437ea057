"""``kubectl gang what-if``: what the scheduler would do with a gang, asked before submitting it.

The answer comes from the production core, with the scheduler's own settings, on the live
cluster's state as the user's own credentials can read it: the scheduler service's readers
list what the scheduler watches (nodes, pods, PodGroups of every convention, namespaces,
disruption budgets, storage and device objects) into a core of this process, the gang's
PodGroup and pods (from the user's file; a Job or a JobSet stands for the pods its controller
would create, whatif_pods.py) are added as the watches would deliver them, and the core runs
until it has nothing left to decide. Nothing is ever written: the client refuses
every verb but reads (:class:`ReadOnly`), and no endpoint of the scheduler is involved.

The verdict: whether the gang fits now, and where (the nodes and which members on each); the
pods a preemption would evict, and their gangs; what it waits for when it does not fit (the
scheduler's reason, the reservation or the gangs ahead of it in the way); and its expected
start (core/forecast.py). Gangs already waiting in the cluster are scheduled by the same core
first, in queue order, as the scheduler would (every one of them tried on the cluster as it
is: the scheduler tries a waiting gang again at each change that could help it); those placed
first are named, and the pods they would evict.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gangsched.api.gpushare import GpuLabels
from gangsched.core.clock import FakeClock
from gangsched.core.decisions import BindGang, Decision, GangUnschedulable, Preempt
from gangsched.core.forecast import Estimate, Forecast, span
from gangsched.core.scheduler import Scheduler
from gangsched.kube.io.client import JSON, ApiError, FenceCheck, KubeClient
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.io.times import rfc3339
from gangsched.kube.service import CRD_SOURCES, SchedulerService
from gangsched.kube.whatif_pods import expand
from gangsched.kube.write.binder import Binder
from gangsched.kube.write.reporter import Reporter
from gangsched.settings import Settings, load_settings

__all__ = [
    "ReadOnly",
    "Verdict",
    "WriteRefusedError",
    "render_verdict",
    "scheduler_settings",
    "what_if",
]


class WriteRefusedError(RuntimeError):
    """What-if only reads: a write was asked for."""


class ReadOnly:
    """A client that reads (gets, lists, watches) and refuses every other verb."""

    def __init__(self, client: KubeClient) -> None:
        self._client = client

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: object = None,
        content_type: str | None = None,
        timeout: float = 30.0,
        fence: FenceCheck | None = None,
    ) -> JSON:
        if method != "GET":
            raise WriteRefusedError(f"what-if does not write ({method} {path})")
        return await self._client.request("GET", path, params=params, timeout=timeout)

    async def get(self, path: str, **params: Any) -> JSON:
        return await self._client.get(path, **params)

    async def post(self, path: str, body: object, *, fence: FenceCheck | None = None) -> JSON:
        raise WriteRefusedError(f"what-if does not write (POST {path})")

    async def merge_patch(
        self, path: str, body: object, *, fence: FenceCheck | None = None
    ) -> JSON:
        raise WriteRefusedError(f"what-if does not write (PATCH {path})")

    async def strategic_patch(self, path: str, body: object) -> JSON:
        raise WriteRefusedError(f"what-if does not write (PATCH {path})")

    async def apply(self, path: str, body: object, *, field_manager: str) -> JSON:
        raise WriteRefusedError(f"what-if does not write (apply {path})")

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[JSON]:
        async for event in self._client.watch(path, params):
            yield event

    async def close(self) -> None:
        await self._client.close()


@dataclass(slots=True)
class Verdict:
    """What the scheduler would do with the gang ``gang``."""

    gang: str
    fits: bool = False
    # node -> the gang's pods the scheduler would bind there
    nodes: dict[str, list[str]] = field(default_factory=dict)
    # (namespace/name of a pod it would evict, its gang or '')
    victims: list[tuple[str, str]] = field(default_factory=list)
    reason: str = ""  # why it does not fit now (the scheduler's reason and message)
    reservation: str = ""  # a reservation of another gang in the way
    ahead: list[str] = field(default_factory=list)  # gangs placed first, in queue order
    # (pod, its gang or '', the gang placed first that evicts it): a gang ahead in the queue
    # that preempts does so before this gang is tried
    ahead_victims: list[tuple[str, str, str]] = field(default_factory=list)
    expected: Estimate | None = None
    notes: list[str] = field(default_factory=list)


def _gang_key(objs: Sequence[JSON], default_ns: str) -> str:
    for obj in objs:
        if obj.get("kind") == "PodGroup":
            meta = obj.get("metadata") or {}
            return f"{meta.get('namespace') or default_ns}/{meta.get('name', '')}"
    return ""


def _prepare(objs: Sequence[JSON], default_ns: str) -> list[JSON]:
    """The user's objects as the API server would store them: a namespace, a uid, a creation
    time, generation 1."""
    now = rfc3339(time.time())
    out = []
    for i, obj in enumerate(objs):
        obj = dict(obj)
        if isinstance(obj.get("spec"), dict):
            obj["spec"] = dict(obj["spec"])  # the user's own objects are left as they were
        meta = dict(obj.get("metadata") or {})
        meta.setdefault("namespace", default_ns)
        meta.setdefault("uid", f"what-if-{i}")
        meta.setdefault("creationTimestamp", now)
        meta.setdefault("generation", 1)
        meta.setdefault("resourceVersion", "0")
        obj["metadata"] = meta
        if obj.get("kind") == "Pod":
            obj.setdefault("status", {"phase": "Pending"})
        out.append(obj)
    return out


PRIORITY_CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


async def _admit_priorities(client: KubeClient, objs: list[JSON], notes: list[str]) -> None:
    """Give the pods the priority (and preemption policy) the API server's Priority admission
    would: their ``priorityClassName``'s, else the class marked ``globalDefault``, else 0. A
    pod that says its ``priority`` keeps it."""
    pods = [o for o in objs if o.get("kind") == "Pod"]
    if not pods or all("priority" in (o.get("spec") or {}) for o in pods):
        return
    try:
        listed = (await client.get(PRIORITY_CLASSES)).get("items") or []
    except ApiError as e:
        if e.status not in (403, 404):
            raise
        notes.append("not allowed to list priorityclasses: the pods' priority classes left out")
        return
    classes = {str((c.get("metadata") or {}).get("name", "")): c for c in listed}
    default = next((c for c in listed if c.get("globalDefault")), None)
    for pod in pods:
        spec = pod.setdefault("spec", {})
        if "priority" in spec:
            continue
        name = spec.get("priorityClassName")
        cls = classes.get(str(name)) if name else default
        if name and cls is None:
            raise ValueError(f"pod {pod['metadata'].get('name')}: no PriorityClass {name!r}")
        if cls is None:
            continue
        spec["priority"] = int(cls.get("value", 0))
        if "preemptionPolicy" not in spec and cls.get("preemptionPolicy"):
            spec["preemptionPolicy"] = cls["preemptionPolicy"]


async def what_if(client: KubeClient, settings: Settings, objs: Sequence[JSON], ns: str) -> Verdict:
    """The verdict for the gang of ``objs`` (a PodGroup and its pods), see the module's
    docstring. Raises ``ValueError`` when the objects hold no PodGroup or no pod."""
    objs, expanded = expand(objs, ns)
    kinds = [str(o.get("kind", "")) for o in objs]
    if "PodGroup" not in kinds or "Pod" not in kinds:
        raise ValueError(
            "what-if needs a PodGroup and its pods (kind PodGroup, and kind Pod, Job or JobSet)"
        )
    objs = _prepare(objs, ns)
    await _admit_priorities(client, objs, expanded)
    key = _gang_key(objs, ns)
    read = ReadOnly(client)
    # the cluster as it is now: a clock that stands still while the core decides (no backoff
    # runs out halfway through), which the forecast then moves on itself
    core = Scheduler(settings.core(), FakeClock(time.time()))
    service = SchedulerService(
        core,
        read,
        Binder(read, core.bind_failed, volumes=core.volumes),
        Reporter(read, Outbox(), "what-if"),
        gpu_labels=GpuLabels(settings.gpu_model_label, settings.gpu_memory_label),
        job_deadlines=True,
    )
    verdict = Verdict(key, notes=expanded)
    for r in (*service.reflectors, *service.optional_reflectors):
        try:
            await r.list_all()
        except ApiError as e:
            if e.status not in (403, 404):
                raise
            if e.status == 403:
                verdict.notes.append(f"not allowed to list {r.name}: left out")
    _show_placed(core)
    ahead = core.run_until_idle()  # what the scheduler would decide before the gang came
    verdict.ahead = sorted({d.gang for d in ahead if isinstance(d, BindGang | Preempt)})
    verdict.ahead_victims = sorted(
        (f"{x.pod.namespace}/{x.pod.name}", x.gang, d.gang)
        for d in ahead
        if isinstance(d, Preempt)
        for x in d.victims
    )
    for obj in objs:
        if obj.get("kind") == "PodGroup":
            api = str(obj.get("apiVersion", ""))
            for src, path, parse in CRD_SOURCES:
                if path.startswith(f"/apis/{api}/"):
                    await _maybe(service._crd_handler(src, parse)("ADDED", obj))
                    break
            else:
                raise ValueError(f"what-if does not read PodGroups of {api}")
    for obj in objs:
        if obj.get("kind") == "Pod":
            await _maybe(service._on_pod("ADDED", obj))
    decisions = core.run_until_idle()
    _read_decisions(verdict, core, decisions)
    if not verdict.fits and not verdict.victims:
        verdict.expected = Forecast(core, [key], adopt=True).run().get(key)
    return verdict


def _show_placed(core: Scheduler) -> None:
    """Show the scorers every pod the scheduler placed, oldest first, as the running scheduler
    was shown each when it placed it: scorers that learn from the pods they see (the
    fragmentation score's mix of GPU requests, ``gpuRequestWindow``) then score as it does."""
    name = core.config.scheduler_name
    placed = [p for p in core.cache.pods.values() if p.scheduler_name == name and p.node_name]
    for pod in sorted(placed, key=lambda p: (p.created, p.uid)):
        core.finder.observe(pod)


async def _maybe(result: Any) -> None:
    if result is not None:
        await result


def _read_decisions(v: Verdict, core: Scheduler, decisions: list[Decision]) -> None:
    for d in decisions:
        if isinstance(d, BindGang) and d.gang == v.gang:
            v.fits = True
            for b in d.bindings:
                v.nodes.setdefault(b.node, []).append(b.pod.name)
        elif isinstance(d, Preempt) and d.gang == v.gang:
            v.victims = [(f"{x.pod.namespace}/{x.pod.name}", x.gang) for x in d.victims]
            for b in d.nominations:
                v.nodes.setdefault(b.node, []).append(b.pod.name)
        elif isinstance(d, GangUnschedulable) and d.gang == v.gang:
            v.reason = f"{d.reason}: {d.message}" if d.reason else d.message
    held = core.reserve.current
    if held is not None and held.gang != v.gang and not v.fits:
        nodes = ", ".join(held.nodes[:5]) + (" ..." if len(held.nodes) > 5 else "")
        v.reservation = f"{held.gang} holds {len(held.nodes)} node(s) ({nodes}): {held.reason}"


async def scheduler_settings(
    client: KubeClient, path: str | None, namespace: str
) -> tuple[Settings, str]:
    """The scheduler's settings, and where they were read: ``path`` (a copy of its
    configuration file), else the ConfigMap labelled ``app.kubernetes.io/name=gangsched`` in
    ``namespace`` that holds a ``config.yaml`` (how the manifests and the chart install it),
    else the defaults."""
    if path:
        return load_settings(path, {}, env={}), path
    try:
        maps = await client.get(
            f"/api/v1/namespaces/{namespace}/configmaps",
            labelSelector="app.kubernetes.io/name=gangsched",
        )
    except ApiError as e:
        if e.status not in (403, 404):
            raise
        return Settings.model_validate(
            {}
        ), f"the defaults (cannot read ConfigMaps in {namespace}: {e})"
    for cm in maps.get("items") or []:
        text = (cm.get("data") or {}).get("config.yaml")
        if isinstance(text, str):
            with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
                f.write(text)
                f.flush()
                name = (cm.get("metadata") or {}).get("name", "")
                return load_settings(f.name, {}, env={}), f"ConfigMap {namespace}/{name}"
    return Settings.model_validate({}), f"the defaults (no gangsched ConfigMap in {namespace})"


def render_verdict(v: Verdict) -> str:
    lines = [f"gang {v.gang}"]
    if v.fits:
        lines.append(f"fits now: yes, on {len(v.nodes)} node(s)")
        lines += [f"  {n}: {', '.join(sorted(p))}" for n, p in sorted(v.nodes.items())]
    elif v.victims:
        lines.append(f"fits now: after a preemption, on {len(v.nodes)} node(s)")
        lines += [f"  {n}: {', '.join(sorted(p))}" for n, p in sorted(v.nodes.items())]
        lines.append(f"would evict {len(v.victims)} pod(s):")
        lines += [f"  {p}" + (f" (gang {g})" if g else "") for p, g in v.victims]
    else:
        lines.append("fits now: no")
        if v.reason:
            lines.append(f"  why: {v.reason}")
    if v.reservation:
        lines.append(f"reservation in the way: {v.reservation}")
    if v.ahead:
        lines.append(f"placed first (ahead in the queue): {', '.join(v.ahead)}")
    if v.ahead_victims:
        lines.append(f"evicted first, for gangs ahead in the queue: {len(v.ahead_victims)} pod(s)")
        lines += [
            f"  {p}" + (f" (gang {g})" if g else "") + f", for {by}" for p, g, by in v.ahead_victims
        ]
    if v.expected is not None:
        e = v.expected
        if e.at is not None:
            wait = max(0.0, e.at - time.time())
            lines.append(f"expected start: {rfc3339(e.at)} (in {span(wait)}), {e.basis}")
        else:
            lines.append(f"expected start: unknown, {e.basis}")
    lines += [f"note: {n}" for n in v.notes]
    return "\n".join(lines)
