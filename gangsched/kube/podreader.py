"""Pod watch events into the core's Pods, reading a pod's spec again only when it changed.

Most events about a pod do not touch what scheduling reads: the kubelet (or kwok) reporting it
Running, its conditions, its IPs. The API server bumps ``metadata.generation`` on every change of
a pod's spec (pod generation tracking, on by default since Kubernetes v1.34); a binding sets
``spec.nodeName`` without bumping it. So when a pod's generation, node name, labels,
annotations and the parts of its status that count for its requests (in-place resize) are what
they were at the last full read, the pod is the one read then, with what a full read takes
from the metadata and status (phase, deletion, resourceVersion, nominated node, preemption mark,
binding time): a few dict lookups instead of a full read of the spec. A binding is taken the
same way: when only the node name changed, from none to a node, the pod read while pending is
put on that node (with its GPU device record, if any). A pod without a generation (an older API
server) is read in full every time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import structlog

from gangsched.api.membership import Membership
from gangsched.api.pod import as_bound, read_pod, with_status
from gangsched.core.model import Pod

__all__ = ["PodReader"]

log = structlog.get_logger("gangsched.podreader")
JSON = Mapping[str, Any]


def _resize_state(status: JSON) -> tuple[object, ...]:
    """What of a pod's status the requests depend on (see api/requests.py): the resize
    conditions, the pod-level resources, and each container's resources and allocation."""
    out: list[object] = [status.get("resources"), status.get("allocatedResources")]
    for key in ("containerStatuses", "initContainerStatuses"):
        statuses = status.get(key)
        if type(statuses) is list:
            for cs in statuses:
                if type(cs) is dict:
                    resources, allocated = cs.get("resources"), cs.get("allocatedResources")
                    if resources is not None or allocated is not None:
                        out.append((cs.get("name"), resources, allocated))
                else:
                    out.append(cs)
        elif statuses is not None:
            out.append(statuses)
    conditions = status.get("conditions")
    if type(conditions) is list:
        for c in conditions:
            if type(c) is dict and str(c.get("type", "")).startswith("PodResize"):
                out.append((c.get("type"), c.get("status"), c.get("reason")))
    elif conditions is not None:
        out.append(conditions)
    return tuple(out)


def _bound_since(last: tuple[object, ...], key: tuple[object, ...]) -> bool:
    """The key differs from the last full read's only by the node name a binding set: the
    pod was pending then and nothing else scheduling reads has changed since."""
    return not last[1] and bool(key[1]) and last[0] == key[0] and last[2:] == key[2:]


class PodReader:
    def __init__(self) -> None:
        # uid -> what the last full read depended on, the pod and membership it gave, and the
        # pod's ``unsupported`` as read (the core may add to it on the object it is given)
        self._read: dict[str, tuple[tuple[object, ...], Pod, Membership, str]] = {}
        self.full_reads = 0
        self.reused = 0
        self.rebound = 0  # bindings taken in without a full read

    def __len__(self) -> int:
        return len(self._read)

    def read(self, obj: JSON) -> tuple[Pod, Membership]:
        meta = obj.get("metadata")
        spec = obj.get("spec")
        status = obj.get("status")
        if type(meta) is not dict or type(spec) is not dict:
            return self._full(obj, None)
        if status is None:
            status = {}
        elif type(status) is not dict:
            return self._full(obj, None)
        generation = meta.get("generation")
        uid = meta.get("uid")
        if type(generation) is not int or generation <= 0 or type(uid) is not str or not uid:
            return self._full(obj, None)
        key = (
            generation,
            spec.get("nodeName"),
            meta.get("labels"),
            meta.get("annotations"),
            _resize_state(status),
            # the claims made from templates are named here, without a new generation
            status.get("resourceClaimStatuses"),
            status.get("extendedResourceClaimStatus"),
        )
        last = self._read.get(uid)
        if last is None or last[0] != key:
            node = spec.get("nodeName")
            if last is not None and type(node) is str and _bound_since(last[0], key):
                bound = as_bound(last[1], node, meta, status)
                if bound is not None:
                    self.rebound += 1
                    bound.unsupported = last[3]
                    self._read[uid] = (key, bound, last[2], last[3])
                    return dataclasses.replace(bound), last[2]
            return self._full(obj, (uid, key))
        _, pod, membership, unsupported = last
        self.reused += 1
        # a new object every time: the core keeps the one it is given
        return with_status(pod, meta, status, unsupported=unsupported), membership

    def _full(
        self, obj: JSON, remember: tuple[str, tuple[object, ...]] | None
    ) -> tuple[Pod, Membership]:
        self.full_reads += 1
        read = read_pod(obj)
        pod, membership = read.pod, read.membership
        if read.device_record_error:
            log.warning(
                "ignoring an unreadable GPU device record",
                pod=f"{pod.namespace}/{pod.name}",
                error=read.device_record_error,
            )
        if remember is not None:
            uid, key = remember
            self._read[uid] = (key, pod, membership, pod.unsupported)
        else:
            self._read.pop(pod.uid, None)
        return pod, membership

    def forget(self, uid: str) -> None:
        self._read.pop(uid, None)

    def keep_only(self, uids: set[str]) -> None:
        """After a relist: forget the pods that are gone."""
        for uid in [u for u in self._read if u not in uids]:
            del self._read[uid]
