"""Small helpers for end-to-end tests: objects as dicts, applied and read with kubectl."""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from gangsched_dev.devcluster import ControlPlane

T = TypeVar("T")

GPU = "nvidia.com/gpu"


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 30.0, interval: float = 0.25
) -> T:
    """Poll until ``probe`` returns something truthy; fail with ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last value: {last!r}")


def create(cp: ControlPlane, obj: Mapping[str, Any]) -> dict[str, Any]:
    out = cp.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(obj))
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def podgroup(
    name: str, ns: str, min_member: int, timeout: int | None = None, **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"minMember": min_member, **spec}
    if timeout is not None:
        body["scheduleTimeoutSeconds"] = timeout
    return {
        "apiVersion": "gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": body,
    }


def pod(
    name: str,
    ns: str,
    *,
    group: str | None = None,
    gpus: int = 1,
    cpu: str = "1",
    memory: str = "1Gi",
    selector: Mapping[str, str] | None = None,
    scheduler: str = "gangsched",
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    limits: dict[str, str] = {}
    if gpus:
        requests[GPU] = str(gpus)
        limits[GPU] = str(gpus)
    all_labels = dict(labels or {})
    if group:
        all_labels["gangsched.io/pod-group"] = group
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": all_labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeSelector": dict(selector or {}),
            "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/train:1",
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
        },
    }


def pods(cp: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    items = cp.kubectl_json("get", "pods", "-n", ns)["items"]
    return {p["metadata"]["name"]: p for p in items}


def bound(cp: ControlPlane, ns: str) -> dict[str, str]:
    return {
        n: p["spec"].get("nodeName", "")
        for n, p in pods(cp, ns).items()
        if p["spec"].get("nodeName")
    }


def get_pg(cp: ControlPlane, ns: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = cp.kubectl_json("get", "podgroups.gangsched.io", name, "-n", ns)
    return result


def events(cp: ControlPlane, ns: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = cp.kubectl_json("get", "events.events.k8s.io", "-n", ns)["items"]
    return items


def event_reasons(cp: ControlPlane, ns: str, pod_name: str) -> list[str]:
    return [
        e.get("reason", "")
        for e in events(cp, ns)
        if (e.get("regarding") or {}).get("name") == pod_name
    ]


def condition(obj: Mapping[str, Any], kind: str) -> dict[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c.get("type") == kind:
            found: dict[str, Any] = c
            return found
    return None


def names(prefix: str, n: int) -> Sequence[str]:
    return [f"{prefix}-{i}" for i in range(n)]


def http_status(port: int, path: str) -> int:
    """The HTTP status a local daemon's health endpoint answers (/healthz, /readyz)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            code: int = resp.status
            return code
    except urllib.error.HTTPError as e:
        return e.code


def refused(cp: ControlPlane, ns: str, names: Iterable[str], says: str = "") -> dict[str, str]:
    """The PodScheduled=False message of each of these pods once every one has one (that
    contains ``says``), else {}: the scheduler saw them and decided not to place them."""
    state = pods(cp, ns)
    found: dict[str, str] = {}
    for name in names:
        cond = condition(state.get(name) or {}, "PodScheduled")
        if cond is None or cond.get("status") != "False" or says not in cond.get("message", ""):
            return {}
        found[name] = cond.get("message", "")
    return found


def upstream_podgroup(ns: str, version: str, name: str, policy: dict[str, Any]) -> dict[str, Any]:
    """An upstream PodGroup (``scheduling.k8s.io`` ``version``) made from its Workload's
    template ``workers``, with the scheduling ``policy``."""
    if version == "v1alpha2":
        ref: dict[str, Any] = {
            "podGroupTemplateRef": {
                "workload": {"workloadName": name, "podGroupTemplateName": "workers"}
            }
        }
    else:
        ref = {"workloadRef": {"workloadName": name, "templateName": "workers"}}
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {**ref, "schedulingPolicy": policy},
    }


class PodEvents:
    """The namespace's pod watch events, in the API server's order, from a resourceVersion
    taken before anything was created: no event is missed, however late the watch connects.
    Each pod's latest object is kept too (:meth:`latest`)."""

    def __init__(self, cp: ControlPlane, ns: str, seconds: int) -> None:
        rv = cp.kubectl_json("get", "pods", "-n", ns)["metadata"]["resourceVersion"]
        query = urllib.parse.urlencode(
            {"watch": "1", "resourceVersion": rv, "timeoutSeconds": str(seconds)}
        )
        self._request = urllib.request.Request(
            f"{cp.server}/api/v1/namespaces/{ns}/pods?{query}",
            headers={"Authorization": f"Bearer {cp.token}"},
        )
        self._context = ssl.create_default_context(cafile=str(cp.ca_file))
        self._seconds = seconds
        self._lock = threading.Lock()
        self._events: list[tuple[str, str, str]] = []
        self._objects: list[dict[str, Any]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        with urllib.request.urlopen(
            self._request, context=self._context, timeout=self._seconds + 10
        ) as resp:
            for line in resp:
                event = json.loads(line)
                obj = event.get("object") or {}
                name = (obj.get("metadata") or {}).get("name", "")
                node = (obj.get("spec") or {}).get("nodeName", "")
                with self._lock:
                    self._events.append((str(event.get("type")), name, node))
                    self._objects.append(obj)

    def events(self) -> list[tuple[str, str, str]]:
        """(type, pod, spec.nodeName) of every event seen so far, in order."""
        with self._lock:
            return list(self._events)

    def objects(self) -> list[tuple[str, dict[str, Any]]]:
        """(type, pod object) of every event seen so far, in order."""
        with self._lock:
            return [(t, o) for (t, _, _), o in zip(self._events, self._objects, strict=True)]


def gang_bindings(
    watch: PodEvents, gang_of: Callable[[Mapping[str, Any]], str | None]
) -> dict[str, tuple[set[str], set[str]]]:
    """gang -> (the pods of the gang that existed when its first member was bound, the pods
    of the gang ever bound), from the watch in the API server's order. ``gang_of`` names a
    pod's gang (None: not in one). A pod is counted as existing from its ADDED event until
    its DELETED one; a gang bound whole has every member in the first set."""
    alive: dict[str, set[str]] = {}
    first: dict[str, set[str]] = {}
    placed: dict[str, set[str]] = {}
    for kind, obj in watch.objects():
        gang = gang_of(obj)
        if gang is None:
            continue
        name = obj["metadata"]["name"]
        members = alive.setdefault(gang, set())
        if kind == "DELETED":
            members.discard(name)
            continue
        members.add(name)
        if (obj.get("spec") or {}).get("nodeName"):
            if gang not in first:
                first[gang] = set(members)
            placed.setdefault(gang, set()).add(name)
    return {g: (first[g], placed[g]) for g in first}


def by_label(key: str) -> Callable[[Mapping[str, Any]], str | None]:
    """A ``gang_of`` for :func:`gang_bindings`: the pod's value of the label ``key``."""

    def gang_of(obj: Mapping[str, Any]) -> str | None:
        value = (obj.get("metadata", {}).get("labels") or {}).get(key)
        return str(value) if value else None

    return gang_of


def scheduler_plugins_podgroup(cp: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    """scheduler-plugins' PodGroup ``name`` (``scheduling.x-k8s.io``), or None."""
    got = cp.kubectl(
        "get", "podgroups.scheduling.x-k8s.io", name, "-n", ns, "-o", "json", check=False
    )
    found: dict[str, Any] | None = json.loads(got.stdout) if got.returncode == 0 else None
    return found
