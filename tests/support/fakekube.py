"""An in-memory API server behind :class:`gangsched.kube.io.api.KubeApi`, for the adapters' unit
tests: every request runs in microseconds and is recorded.

What it keeps as the API server does:

- objects by path, each with a ``uid``, a ``resourceVersion`` from one counter, a
  ``creationTimestamp`` and a ``generation`` that moves when ``spec`` changes;
- lists (``limit`` / ``continue``, equality ``labelSelector``s) carrying the list's
  ``resourceVersion``; watches from a resourceVersion, fed by every write (the adapters' and
  the test's own, :meth:`FakeKube.seed` / :meth:`FakeKube.remove`) and by events the test
  injects (:meth:`FakeKube.emit`, :meth:`FakeKube.bookmark`); :meth:`FakeKube.compact` makes
  older resourceVersions expire (a watch from one gets an ``ERROR`` event with code 410, a list
  continued from one gets 410); :meth:`FakeKube.end_watches` ends the open watches;
- 404 for what is not there, 409 for a name taken, a stale ``resourceVersion`` or a failed
  precondition, 422 for a patch that changes a ``uid``, 415 for a strategic merge patch on a
  custom resource; the ``pods/binding`` subresource with kube's checks (UID precondition,
  already assigned, being deleted, scheduling gates), copying the Binding's annotations onto
  the pod;
- JSON merge patches, strategic merge patches (lists merged by key: ``conditions`` by
  ``type``, containers and volumes by ``name``), and server-side apply with field ownership per
  manager (a field a manager applied before and leaves out is removed, unless another manager
  owns it too); writes to the ``status`` subresource change only ``status``, other writes
  never change it for kinds that have one.

What it does not: admission, defaulting, validation of the objects' schemas, field selectors,
set-based label selectors, list snapshots (a continued list shows current objects), and field
ownership for writes other than apply. It is a test double for fast unit tests, never a
substitute for the end-to-end tests.

Programmable trouble, per verb (the audit log's: get, list, watch, create, update, patch,
delete) and path regex: :meth:`FakeKube.fail` (a status for the n-th matching request, before
or after the write is applied), :meth:`FakeKube.slow`, :meth:`FakeKube.hold` (the requests wait
for an event) and :meth:`FakeKube.before` (a callback, for a concurrent writer).
"""

from __future__ import annotations

import asyncio
import copy
import http
import itertools
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gangsched.kube.io.client import JSON, ApiError, FenceCheck, FencedError

__all__ = ["FakeKube", "Request", "Rule", "merge_patch", "strategic_merge"]

# Lists merged by key in strategic merge patches and server-side apply.
MERGE_KEYS = {
    "conditions": "type",
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "ownerReferences": "uid",
}
# Kinds with a status subresource: a write to the object leaves their status alone.
HAS_STATUS = {
    "pods",
    "nodes",
    "namespaces",
    "persistentvolumes",
    "persistentvolumeclaims",
    "resourceclaims",
    "podgroups",
}
BUILTIN_GROUPS = {"apps", "batch", "policy", "autoscaling"}
IDENTITY = {("apiVersion",), ("kind",), ("metadata", "name"), ("metadata", "namespace")}

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
APPLY = "application/apply-patch+yaml"


@dataclass(frozen=True, slots=True)
class Request:
    """One request as it reached the server."""

    verb: str  # get, list, watch, create, update, patch, delete
    method: str
    path: str
    body: Any = None
    params: Mapping[str, Any] = field(default_factory=dict)
    content_type: str | None = None


@dataclass
class Rule:
    """Trouble for the requests matching ``verb`` (None: any) and ``path`` (a regex searched
    in the path): after ``skip`` matching requests, the next ``times`` (None: all) wait
    ``delay`` seconds, then for ``gate``, run ``action``, and are answered ``status`` (when
    set) before the write, or after it when ``applied`` (the answer was lost)."""

    verb: str | None
    path: re.Pattern[str]
    status: int | None = None
    message: str = ""
    skip: int = 0
    times: int | None = 1
    applied: bool = False
    delay: float = 0.0
    gate: asyncio.Event | None = None
    action: Callable[[Request], None] | None = None
    seen: int = 0

    def take(self, req: Request) -> bool:
        if self.verb not in (None, req.verb) or not self.path.search(req.path):
            return False
        self.seen += 1
        if self.seen <= self.skip:
            return False
        return self.times is None or self.seen <= self.skip + self.times


@dataclass(frozen=True, slots=True)
class _Ref:
    prefix: str  # /api/v1 or /apis/<group>/<version>
    resource: str
    namespace: str | None  # None: cluster-scoped, or a list across namespaces
    name: str | None
    sub: str | None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return (self.prefix, self.resource, self.namespace or "", self.name or "")

    @property
    def custom(self) -> bool:
        group = self.prefix.split("/")[2] if self.prefix.startswith("/apis/") else ""
        return bool(group) and not group.endswith(".k8s.io") and group not in BUILTIN_GROUPS

    def holds(self, key: tuple[str, str, str, str]) -> bool:
        """Whether the object at ``key`` is in this collection."""
        return key[:2] == (self.prefix, self.resource) and self.namespace in (None, key[2])

    def sees(self, event: _Ref) -> bool:
        """Whether a watch of this collection gets an event about ``event`` (an object, or a
        collection for injected events)."""
        if event.name is not None:
            return self.holds(event.key)
        same = (event.prefix, event.resource) == (self.prefix, self.resource)
        return same and (self.namespace is None or event.namespace in (None, self.namespace))


def _parse(path: str) -> _Ref:
    parts = [p for p in path.split("?")[0].split("/") if p]
    if parts[:1] == ["api"] and len(parts) >= 3:
        prefix, rest = "/" + "/".join(parts[:2]), parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 4:
        prefix, rest = "/" + "/".join(parts[:3]), parts[3:]
    else:
        raise NotImplementedError(f"not an API path: {path}")
    ns: str | None = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        ns, rest = rest[1], rest[2:]
    if len(rest) > 3:
        raise NotImplementedError(f"not an API path: {path}")
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    return _Ref(prefix, rest[0], ns, name, sub)


def _status(code: int, reason: str, message: str) -> ApiError:
    phrase = "" if code == 0 else http.HTTPStatus(code).phrase
    body = {"kind": "Status", "status": "Failure", "code": code, "reason": reason}
    body["message"] = message
    return ApiError(code, phrase or "ClientConnectorError", body)


def _not_found(ref: _Ref) -> ApiError:
    return _status(404, "NotFound", f'{ref.resource} "{ref.name}" not found')


def _modified(ref: _Ref) -> ApiError:
    return _status(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {ref.resource} "{ref.name}": the object has been '
        "modified; please apply your changes to the latest version and try again",
    )


def _meta(obj: Mapping[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


# ---- patches -----------------------------------------------------------------------------
def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge, null removes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def strategic_merge(target: Any, patch: Any) -> Any:
    """A strategic merge patch: a merge patch whose lists in MERGE_KEYS merge item by key
    (``$patch: delete`` on an item removes it)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            raise NotImplementedError(f"patch directive {k}")
        if v is None:
            out.pop(k, None)
        elif k in MERGE_KEYS and isinstance(v, list):
            out[k] = _merge_list(out.get(k), v, MERGE_KEYS[k])
        else:
            out[k] = strategic_merge(out.get(k), v)
    return out


def _merge_list(target: Any, patch: list[Any], key: str) -> list[Any]:
    out = copy.deepcopy(target) if isinstance(target, list) else []
    for item in patch:
        found = next((i for i, x in enumerate(out) if x.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if found is not None:
                del out[found]
        elif found is None:
            out.append(copy.deepcopy(item))
        else:
            out[found] = strategic_merge(out[found], item)
    return out


Path = tuple[Any, ...]  # keys, and ("item", key, value) for an item of a list merged by key


def _fields(value: Any, path: Path = ()) -> set[Path]:
    """The leaf fields of an applied object, as server-side apply owns them."""
    if isinstance(value, dict) and value:
        return {f for k, v in value.items() for f in _fields(v, (*path, k))}
    key = MERGE_KEYS.get(path[-1]) if path and isinstance(path[-1], str) else None
    if key and isinstance(value, list) and all(isinstance(i, dict) and key in i for i in value):
        return {f for i in value for f in _fields(i, (*path, ("item", key, i[key])))}
    return {path}


def _step(node: Any, step: Any) -> Any:
    if isinstance(step, tuple):
        if not isinstance(node, list):
            return None
        return next((i for i in node if isinstance(i, dict) and i.get(step[1]) == step[2]), None)
    return node.get(step) if isinstance(node, dict) else None


def _remove(obj: Any, path: Path) -> None:
    """Remove one field that apply no longer sets, and the lists and objects it leaves empty;
    the key of a keyed list's item takes the whole item with it."""
    *walk, last = path
    if walk and isinstance(walk[-1], tuple) and last == walk[-1][1]:
        *walk, last = walk
    chain = [obj]
    for step in walk:
        chain.append(_step(chain[-1], step))
        if chain[-1] is None:
            return
    steps = [*walk, last]
    for node, step in zip(reversed(chain), reversed(steps), strict=True):
        if isinstance(step, tuple) and isinstance(node, list):
            node[:] = [i for i in node if not (isinstance(i, dict) and i.get(step[1]) == step[2])]
        elif isinstance(node, dict):
            node.pop(step, None)
        if node or node is obj:
            return


# ---- label selectors -----------------------------------------------------------------------
def _selector(text: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """An equality-based label selector: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``."""
    terms: list[tuple[str, str, str]] = []
    for term in (t.strip() for t in (text or "").split(",") if t.strip()):
        if m := re.fullmatch(r"([\w./-]+)\s*(==|=|!=)\s*([\w.-]*)", term):
            terms.append((m[1], "!=" if m[2] == "!=" else "=", m[3]))
        elif m := re.fullmatch(r"(!?)([\w./-]+)", term):
            terms.append((m[2], m[1] or "exists", ""))
        else:
            raise NotImplementedError(f"label selector {term!r}")

    def holds(labels: Mapping[str, str], key: str, op: str, value: str) -> bool:
        if op in ("exists", "!"):
            return (key in labels) == (op == "exists")
        return (labels.get(key) == value) == (op == "=")

    def match(obj: Mapping[str, Any]) -> bool:
        labels = _meta(obj).get("labels") or {}
        return all(holds(labels, *t) for t in terms)

    return match


# ---- the server ------------------------------------------------------------------------------
@dataclass(slots=True)
class _Event:
    seq: int  # the order of events
    rv: int  # the resourceVersion when it happened
    kind: str
    ref: _Ref  # the object's, or (for injected events) the collection's
    obj: JSON


class FakeKube:
    """See the module docstring. ``requests`` holds every request that reached the server,
    ``fenced`` the writes whose fence said no (never sent)."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str, str], JSON] = {}
        self.requests: list[Request] = []
        self.fenced: list[Request] = []
        self.rules: list[Rule] = []
        self.rv = 0
        self.closed = False
        self.watching = 0  # watches open now
        self._uids = itertools.count(1)
        self._seq = itertools.count()
        self._log: list[_Event] = []
        self._compacted = 0
        self._generation = 0  # bumped by end_watches
        self._changed = asyncio.Event()
        self._managed: dict[tuple[tuple[str, str, str, str], str], set[Path]] = {}

    # ---- what a test does ------------------------------------------------------------------
    def seed(self, collection: str, *objs: Mapping[str, Any]) -> list[JSON]:
        """Create or replace objects as another client would (not recorded as requests); a
        ``uid`` given is kept. ``collection`` is a list path; without a namespace in it, each
        object's own ``metadata.namespace`` is used."""
        out = []
        for obj in objs:
            body = copy.deepcopy(dict(obj))
            meta = body.setdefault("metadata", {})
            ref = _parse(collection)
            ns = ref.namespace if ref.namespace is not None else meta.get("namespace")
            ref = _Ref(ref.prefix, ref.resource, ns or None, meta["name"], None)
            old = self.objects.get(ref.key)
            if old is not None:
                meta.setdefault("uid", _meta(old)["uid"])
            out.append(self._store(ref, body, old))
        return out

    def remove(self, path: str) -> JSON | None:
        """Delete the object at ``path`` as another client would; None if it is not there."""
        ref = _parse(path)
        if ref.key not in self.objects:
            return None
        return self._delete(ref)

    def get_object(self, path: str) -> JSON | None:
        obj = self.objects.get(_parse(path).key)
        return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, collection: str) -> list[JSON]:
        ref = _parse(collection)
        return [copy.deepcopy(o) for k, o in sorted(self.objects.items()) if ref.holds(k)]

    def emit(self, collection: str, kind: str, obj: Mapping[str, Any]) -> None:
        """Send an event (a BOOKMARK, an ERROR, ...) to the watches of ``collection``."""
        self._append(kind, _parse(collection), copy.deepcopy(dict(obj)))

    def bookmark(self, collection: str) -> None:
        ref = _parse(collection)
        self._append("BOOKMARK", ref, {"metadata": {"resourceVersion": str(self.rv)}})

    def compact(self) -> None:
        """Every resourceVersion up to now expires: watches and continued lists from one get
        410."""
        self._compacted = self.rv
        self._log.clear()

    def end_watches(self) -> None:
        """The server ends every open watch (as at its watch timeout)."""
        self._generation += 1
        self._wake()

    def fail(
        self,
        verb: str | None,
        path: str,
        status: int,
        *,
        skip: int = 0,
        times: int | None = 1,
        applied: bool = False,
        message: str = "",
    ) -> Rule:
        """Answer ``status`` to the matching requests (after ``skip`` of them, ``times`` of
        them); with ``applied`` the write is done first (the answer was lost)."""
        text = message or ("injected failure" if status else "connection reset")
        return self._rule(Rule(verb, re.compile(path), status, text, skip, times, applied))

    def slow(self, verb: str | None, path: str, seconds: float, times: int | None = None) -> Rule:
        return self._rule(Rule(verb, re.compile(path), times=times, delay=seconds))

    def hold(self, verb: str | None, path: str, times: int | None = None) -> asyncio.Event:
        """The matching requests wait (already received) until the returned event is set."""
        gate = asyncio.Event()
        self._rule(Rule(verb, re.compile(path), times=times, gate=gate))
        return gate

    def before(
        self,
        verb: str | None,
        path: str,
        action: Callable[[Request], None],
        times: int | None = 1,
    ) -> Rule:
        """Run ``action`` when a matching request arrives, before it is served."""
        return self._rule(Rule(verb, re.compile(path), times=times, action=action))

    def _rule(self, rule: Rule) -> Rule:
        self.rules.append(rule)
        return rule

    def sent(self, verb: str | None = None, path: str = "") -> list[Request]:
        """The requests of ``verb`` (None: any) whose path matches the regex ``path``."""
        return [
            r
            for r in self.requests
            if verb in (None, r.verb) and (not path or re.search(path, r.path))
        ]

    # ---- KubeApi -----------------------------------------------------------------------------
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
        ref = _parse(path)
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(
            method, "get" if ref.name else "list"
        )
        req = Request(verb, method, path, copy.deepcopy(body), dict(params or {}), content_type)
        await asyncio.sleep(0)  # a real request always yields to the loop
        if fence is not None and not fence():
            self.fenced.append(req)
            raise FencedError(method, path)
        failure, applied = await self._arrive(req)
        if failure is not None and not applied:
            raise failure
        result = self._serve(ref, req)
        if failure is not None:
            raise failure
        return result

    async def get(self, path: str, **params: Any) -> JSON:
        return await self.request("GET", path, params=params)

    async def post(self, path: str, body: object, *, fence: FenceCheck | None = None) -> JSON:
        return await self.request(
            "POST", path, body=body, content_type="application/json", fence=fence
        )

    async def merge_patch(
        self, path: str, body: object, *, fence: FenceCheck | None = None
    ) -> JSON:
        return await self.request("PATCH", path, body=body, content_type=MERGE, fence=fence)

    async def strategic_patch(self, path: str, body: object) -> JSON:
        return await self.request("PATCH", path, body=body, content_type=STRATEGIC)

    async def apply(self, path: str, body: object, *, field_manager: str) -> JSON:
        params = {"fieldManager": field_manager, "force": "true"}
        return await self.request("PATCH", path, params=params, body=body, content_type=APPLY)

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[JSON]:
        ref = _parse(path)
        req = Request("watch", "GET", path, None, {**params, "watch": "true"})
        await asyncio.sleep(0)
        failure, _ = await self._arrive(req)
        if failure is not None:
            raise failure
        match = _selector(params.get("labelSelector"))
        generation = self._generation
        self.watching += 1
        try:
            rv = str(params.get("resourceVersion") or "")
            if rv in ("", "0"):
                for key, obj in sorted(self.objects.items()):
                    if ref.holds(key) and match(obj):
                        yield {"type": "ADDED", "object": copy.deepcopy(obj)}
                start = self.rv
            else:
                start = int(rv)
                if start < self._compacted:
                    message = f"too old resource version: {start} ({self._compacted})"
                    error = _status(410, "Expired", message).body
                    yield {"type": "ERROR", "object": error}
                    return
            seen = max((e.seq for e in self._log if e.rv <= start), default=-1)
            while True:
                for event in [e for e in self._log if e.seq > seen]:
                    seen = event.seq
                    if not ref.sees(event.ref):
                        continue
                    if event.kind in ("ADDED", "MODIFIED", "DELETED") and not match(event.obj):
                        continue
                    yield {"type": event.kind, "object": copy.deepcopy(event.obj)}
                if self._generation != generation or self.closed:
                    return
                await self._changed.wait()
        finally:
            self.watching -= 1

    async def close(self) -> None:
        self.closed = True
        self.end_watches()

    # ---- serving -------------------------------------------------------------------------
    async def _arrive(self, req: Request) -> tuple[ApiError | None, bool]:
        """Record the request and play the rules: the failure to answer, if any, and whether
        the request is served before it is answered so."""
        if self.closed:
            raise RuntimeError("request on a closed client")
        self.requests.append(req)
        failure: ApiError | None = None
        applied = False
        for rule in [r for r in self.rules if r.take(req)]:
            if rule.delay:
                await asyncio.sleep(rule.delay)
            if rule.gate is not None:
                await rule.gate.wait()
            if rule.action is not None:
                rule.action(req)
            if rule.status is not None and failure is None:
                reason = "InternalError" if rule.status >= 500 else "Injected"
                failure, applied = _status(rule.status, reason, rule.message), rule.applied
        return failure, applied

    def _serve(self, ref: _Ref, req: Request) -> JSON:
        if req.verb == "list":
            return self._list(ref, req.params)
        if req.verb == "create" and ref.sub == "binding":
            return self._bind(ref, req.body)
        if req.verb == "create" and ref.name is None:
            return self._create(ref, req.body)
        if req.verb == "patch" and req.content_type == APPLY:
            return self._apply(ref, req.body, req.params)
        if ref.sub not in (None, "status"):
            raise NotImplementedError(f"{req.method} {req.path}")
        current = self.objects.get(ref.key)
        if current is None:
            raise _not_found(ref)
        if req.verb == "get":
            return copy.deepcopy(current)
        if req.verb == "delete":
            self._preconditions(ref, current, req.body)
            return self._delete(ref)
        if req.verb == "update":
            return self._update(ref, current, req.body)
        if req.verb == "patch":
            if req.content_type == MERGE:
                return self._patch(ref, current, req.body, merge_patch)
            if req.content_type == STRATEGIC:
                if ref.custom:
                    raise _status(
                        415,
                        "UnsupportedMediaType",
                        f"the body of the request was in an "
                        f"unknown format - accepted media types include: {MERGE}, {APPLY}",
                    )
                return self._patch(ref, current, req.body, strategic_merge)
        raise NotImplementedError(f"{req.method} {req.path} ({req.content_type})")

    def _list(self, ref: _Ref, params: Mapping[str, Any]) -> JSON:
        if params.get("fieldSelector"):
            raise NotImplementedError("field selectors")
        match = _selector(params.get("labelSelector"))
        items = [o for k, o in sorted(self.objects.items()) if ref.holds(k) and match(o)]
        offset, list_rv = 0, self.rv
        if params.get("continue"):
            at, _, rv = str(params["continue"]).partition(":")
            offset, list_rv = int(at), int(rv)
            if list_rv < self._compacted:
                raise _status(410, "Expired", "The provided continue parameter is too old")
        limit = int(params.get("limit") or 0)
        page = items[offset : offset + limit] if limit else items[offset:]
        meta: dict[str, Any] = {"resourceVersion": str(list_rv)}
        if limit and offset + limit < len(items):
            meta["continue"] = f"{offset + limit}:{list_rv}"
        return {"kind": "List", "apiVersion": "v1", "metadata": meta, "items": copy.deepcopy(page)}

    def _create(self, ref: _Ref, body: Any) -> JSON:
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        name = meta.get("name") or (
            f"{meta['generateName']}{next(self._uids):05x}" if meta.get("generateName") else ""
        )
        if not name:
            raise _status(422, "Invalid", "metadata.name: Required value: name or generateName")
        if ref.namespace and meta.get("namespace", ref.namespace) != ref.namespace:
            raise _status(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent on the "
                "request",
            )
        target = _Ref(ref.prefix, ref.resource, ref.namespace, name, None)
        if target.key in self.objects:
            raise _status(409, "AlreadyExists", f'{ref.resource} "{name}" already exists')
        meta.pop("uid", None)  # the server makes one
        return self._store(target, obj, None)

    def _preconditions(self, ref: _Ref, current: JSON, body: Any) -> None:
        """A delete's ``DeleteOptions.preconditions`` (uid, resourceVersion): 409 when the
        object is not the one meant, worded as the API server's BeforeDelete words it."""
        pre = body.get("preconditions") if isinstance(body, dict) else None
        if not isinstance(pre, dict):
            return
        meta = _meta(current)
        for key, name in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            want = pre.get(key)
            if want and want != meta.get(key):
                raise _status(
                    409,
                    "Conflict",
                    f'Operation cannot be fulfilled on {ref.resource} "{ref.name}": the {name} '
                    f"in the precondition ({want}) does not match the {name} in record "
                    f"({meta.get(key)}). The object might have been deleted and then recreated",
                )

    def _update(self, ref: _Ref, current: JSON, body: Any) -> JSON:
        meta = _meta(body)
        if meta.get("resourceVersion") not in (None, "", _meta(current)["resourceVersion"]):
            raise _modified(ref)
        if meta.get("uid") not in (None, "", _meta(current)["uid"]):
            raise _status(409, "Conflict", "Precondition failed: UID in precondition")
        return self._write(ref, current, copy.deepcopy(body))

    def _patch(self, ref: _Ref, current: JSON, body: Any, how: Callable[[Any, Any], Any]) -> JSON:
        meta = _meta(body)
        if meta.get("resourceVersion") not in (None, "", _meta(current)["resourceVersion"]):
            raise _modified(ref)
        if meta.get("uid") not in (None, _meta(current)["uid"]):
            raise _status(
                422,
                "Invalid",
                f'{ref.resource} "{ref.name}" is invalid: metadata.uid: Invalid value: '
                f'"{meta["uid"]}": field is immutable',
            )
        return self._write(ref, current, how(current, body))

    def _apply(self, ref: _Ref, body: Any, params: Mapping[str, Any]) -> JSON:
        manager = str(params.get("fieldManager") or "")
        if not manager:
            raise _status(422, "Invalid", "fieldManager: Required value")
        if not isinstance(body, dict) or not body.get("apiVersion") or not body.get("kind"):
            raise _status(400, "BadRequest", "apiVersion and kind are required")
        if _meta(body).get("name") != ref.name:
            raise _status(400, "BadRequest", "the name of the object does not match the URL")
        current = self.objects.get(ref.key)
        if current is None and ref.sub is not None:
            raise _not_found(ref)
        fields = _fields(body) - IDENTITY
        others = {
            m: owned for (k, m), owned in self._managed.items() if k == ref.key and m != manager
        }
        if params.get("force") != "true" and any(fields & owned for owned in others.values()):
            raise _status(409, "Conflict", f"Apply failed with conflicts (manager {manager})")
        gone = self._managed.get((ref.key, manager), set()) - fields
        gone -= set().union(*others.values()) if others else set()
        merged = strategic_merge(current or {}, body)
        for path in sorted(gone, key=len, reverse=True):
            _remove(merged, path)
        for owned in others.values():
            owned -= fields
        self._managed[(ref.key, manager)] = fields
        if current is None:
            _meta(merged).pop("uid", None)
            return self._store(
                _Ref(ref.prefix, ref.resource, ref.namespace, ref.name, None), merged, None
            )
        return self._write(ref, current, merged)

    def _bind(self, ref: _Ref, body: Any) -> JSON:
        pod_ref = _Ref(ref.prefix, "pods", ref.namespace, ref.name, None)
        pod = self.objects.get(pod_ref.key)
        if pod is None:
            raise _not_found(pod_ref)
        meta, spec = _meta(pod), pod.setdefault("spec", {})
        if _meta(body).get("name") != ref.name:
            raise _status(400, "BadRequest", "name in URL does not match name in Binding object")
        uid = _meta(body).get("uid")
        why = ""
        if uid and uid != meta["uid"]:
            why = f"Precondition failed: UID in precondition: {uid}, UID in object meta: "
            why += meta["uid"]
        elif meta.get("deletionTimestamp"):
            why = f"pod {ref.name} is being deleted, cannot be assigned to a host"
        elif spec.get("nodeName"):
            why = f'pod {ref.name} is already assigned to node "{spec["nodeName"]}"'
        elif spec.get("schedulingGates"):
            why = f"pod {ref.name} has non-empty .spec.schedulingGates"
        if why:
            raise _status(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{ref.name}": {why}',
            )
        new = copy.deepcopy(pod)
        new["spec"]["nodeName"] = (body.get("target") or {}).get("name")
        # kube-apiserver's setPodNodeAndMetadata: the Binding's annotations go onto the pod
        annotations = _meta(body).get("annotations") or {}
        if annotations:
            new.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        status["conditions"] = [*conditions, {"type": "PodScheduled", "status": "True"}]
        self._store(pod_ref, new, pod)
        return {"kind": "Status", "apiVersion": "v1", "status": "Success", "code": 201}

    def _write(self, ref: _Ref, current: JSON, new: JSON) -> JSON:
        """Store ``new`` in place of ``current``: a status write changes only the status, and
        any other write of a kind with a status subresource keeps the status."""
        if ref.sub == "status":
            new = {**copy.deepcopy(current), "status": new.get("status")}
        elif ref.resource in HAS_STATUS:
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
        meta = new.setdefault("metadata", {})
        old = _meta(current)
        for k in ("name", "namespace", "uid", "creationTimestamp"):
            if k in old:
                meta[k] = old[k]
        return self._store(
            _Ref(ref.prefix, ref.resource, ref.namespace, ref.name, None), new, current
        )

    def _store(self, ref: _Ref, obj: JSON, old: JSON | None) -> JSON:
        self.rv += 1
        meta = obj.setdefault("metadata", {})
        meta["name"] = ref.name
        if ref.namespace:
            meta["namespace"] = ref.namespace
        meta.setdefault("uid", f"uid-{next(self._uids)}")
        meta["resourceVersion"] = str(self.rv)
        meta.setdefault("creationTimestamp", "2024-01-01T00:00:00Z")
        generation = int(_meta(old or {}).get("generation") or 0)
        if old is None or old.get("spec") != obj.get("spec"):
            generation += 1
        meta["generation"] = generation
        self.objects[ref.key] = obj
        self._append("MODIFIED" if old is not None else "ADDED", ref, obj)
        return copy.deepcopy(obj)

    def _delete(self, ref: _Ref) -> JSON:
        obj = self.objects.pop(ref.key)
        self.rv += 1
        _meta(obj)["resourceVersion"] = str(self.rv)
        for k in [k for k in self._managed if k[0] == ref.key]:
            del self._managed[k]
        self._append("DELETED", ref, obj)
        return copy.deepcopy(obj)

    def _append(self, kind: str, ref: _Ref, obj: JSON) -> None:
        self._log.append(_Event(next(self._seq), self.rv, kind, ref, copy.deepcopy(obj)))
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()
