"""The condition gangsched writes on upstream PodGroups (``scheduling.k8s.io``), as
kube-scheduler does: ``PodGroupScheduled`` (v1alpha2) or ``PodGroupInitiallyScheduled``
(v1beta1), True with reason ``Scheduled`` once the gang holds its quorum, else False with reason
``Unschedulable`` and gangsched's why-waiting message (``<reason>: <message>``, the reason and
message its own PodGroups carry). A True condition is never turned back to False.

Written by server-side apply of that one condition on the ``status`` subresource (field manager
``gangsched-scheduler``), through the outbox: the conditions of other writers stay. A write is
sent only when what the PodGroup says (as the watch last saw it) differs from what is wanted,
and a gang whose pods are all another scheduler's is left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from gangsched.api.workloadapi import VERSIONS, UpstreamVersion
from gangsched.core.status import GroupStatus
from gangsched.kube.io.api import KubeApi
from gangsched.kube.io.outbox import Outbox
from gangsched.kube.io.times import rfc3339
from gangsched.kube.write.podstatus import SCHEDULER_MANAGER, find_condition

__all__ = ["UpstreamStatus", "podgroup_condition"]

# The reasons kube-scheduler gives (scheduling.k8s.io PodGroupReason*).
REASON_SCHEDULED: Final = "Scheduled"
REASON_UNSCHEDULABLE: Final = "Unschedulable"


def podgroup_condition(
    version: UpstreamVersion,
    status: GroupStatus,
    *,
    generation: int,
    previous: Mapping[str, Any] | None,
) -> dict[str, Any] | None:
    """The condition to set on an upstream PodGroup for the gang's ``status``, or None when
    none is to be written: as kube-scheduler, a condition that says True (the group was
    placed) is never turned back to False. The message is gangsched's: why the gang waits
    (``<reason>: <message>``), or how many members are bound."""
    if status.scheduled:
        cond_status, reason, message = "True", REASON_SCHEDULED, status.message
    else:
        if previous is not None and previous.get("status") == "True":
            return None
        cond_status, reason = "False", REASON_UNSCHEDULABLE
        message = f"{status.reason}: {status.message}" if status.reason else status.message
    since = rfc3339()
    if previous is not None and previous.get("status") == cond_status:
        kept = previous.get("lastTransitionTime")
        if isinstance(kept, str) and kept:
            since = kept
    return {
        "type": version.condition_type,
        "status": cond_status,
        "reason": reason,
        "message": message[:4096],
        "observedGeneration": generation,
        "lastTransitionTime": since,
    }


_COMPARED = ("status", "reason", "message", "observedGeneration")


class UpstreamStatus:
    """Upstream PodGroups as last seen, and the writes that keep their condition current."""

    def __init__(self, client: KubeApi, outbox: Outbox) -> None:
        self._client = client
        self._outbox = outbox
        # gang -> (the served version it was seen in, generation, its status as seen)
        self._seen: dict[str, tuple[UpstreamVersion, int, Mapping[str, Any]]] = {}
        # gang -> the condition last sent (what it says, without the transition time)
        self._sent: dict[str, tuple[object, ...]] = {}

    def __contains__(self, key: object) -> bool:
        return key in self._seen

    def __len__(self) -> int:
        return len(self._seen)

    def keys(self) -> list[str]:
        return list(self._seen)

    def seen(self, version: UpstreamVersion, obj: Mapping[str, Any]) -> str:
        """The watch saw PodGroup ``obj`` in ``version``; returns its gang key. With two
        versions served, the newer one (seen first in :data:`workloadapi.VERSIONS`) keeps it."""
        meta = obj.get("metadata")
        meta = meta if isinstance(meta, Mapping) else {}
        key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
        generation = meta.get("generation")
        status = obj.get("status")
        held = self._seen.get(key)
        if held is not None and VERSIONS.index(held[0]) < VERSIONS.index(version):
            return key
        self._seen[key] = (
            version,
            generation if isinstance(generation, int) else 0,
            status if isinstance(status, Mapping) else {},
        )
        return key

    def forget(self, key: str) -> None:
        self._seen.pop(key, None)
        self._sent.pop(key, None)

    def keep_only(self, version: UpstreamVersion, keys: set[str]) -> None:
        """After a relist of ``version``: forget its PodGroups that are gone."""
        for key in [k for k, (v, _, _) in self._seen.items() if v == version and k not in keys]:
            self.forget(key)

    def report(self, key: str, status: GroupStatus | None) -> None:
        """Bring the PodGroup's condition in line with the gang's ``status`` (None: nothing
        to say, the gang is not gangsched's)."""
        entry = self._seen.get(key)
        if entry is None or status is None:
            return
        version, generation, current = entry
        previous = find_condition(current, version.condition_type)
        cond = podgroup_condition(version, status, generation=generation, previous=previous)
        if cond is None:
            return
        said = tuple(cond[k] for k in _COMPARED)
        if previous is not None and tuple(previous.get(k) for k in _COMPARED) == said:
            self._sent[key] = said
            return
        if self._sent.get(key) == said:
            return
        first = previous is None and key not in self._sent  # the PodGroup's first word
        self._sent[key] = said
        ns, _, name = key.partition("/")
        path = version.status_path(key)
        body = {
            "apiVersion": version.api_version,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "status": {"conditions": [cond]},
        }

        async def write() -> object:
            try:
                return await self._client.apply(path, body, field_manager=SCHEDULER_MANAGER)
            except Exception:
                # not written: the next report for this gang writes again
                if self._sent.get(key) == said:
                    self._sent.pop(key, None)
                raise

        self._outbox.put(
            "upstream-podgroup-status", write, key=("upstream-podgroup", key), first=first
        )
