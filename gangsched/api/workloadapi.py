"""The upstream gang API (``scheduling.k8s.io``, KEP-4671) as the API sees it: the only code that
knows its wire format.

Kubernetes 1.36 serves it as ``v1alpha2`` (feature gates GenericWorkload and GangScheduling,
``--runtime-config=scheduling.k8s.io/v1alpha2=true``), 1.37 as ``v1beta1`` (gate
GenericWorkload, ``scheduling.k8s.io/v1beta1=true``). A Workload holds
``spec.podGroupTemplates[]``; the runtime PodGroup made from one of them carries its own copy of
the policy in ``spec.schedulingPolicy`` (``gang: {minCount}`` or ``basic: {}``), so gangsched
reads PodGroups only. A pod joins one through the immutable ``spec.schedulingGroup.podGroupName``.

- the pod's side (``spec.schedulingGroup.podGroupName``) is read with the other conventions
  in ``membership.py``;
- :func:`upstream_podgroup_from` maps a PodGroup to a ``GangSpec``: ``gang.minCount`` is
  ``minMember``; ``basic`` is no gang at all, a spec of ``minMember`` 1 whose members schedule
  one by one (each binds when it fits, whatever the others do);
- :class:`UpstreamVersion` names the condition kube-scheduler writes on the PodGroup in each
  version (``PodGroupScheduled`` in v1alpha2, ``PodGroupInitiallyScheduled`` in v1beta1), which
  ``kube/write/upstreamstatus.py`` writes with gangsched's why-waiting message.

Which version the server serves is found by listing each one gangsched knows (a version that is
not served answers 404 and is looked for again every minute): :data:`VERSIONS`, newest first.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from gangsched.api.fields import timestamp
from gangsched.api.topology import upstream_domain
from gangsched.core.model import GangSpec

__all__ = [
    "GROUP",
    "VERSIONS",
    "UpstreamVersion",
    "upstream_podgroup_from",
]

GROUP: Final = "scheduling.k8s.io"
PLURAL: Final = "podgroups"


@dataclass(frozen=True, slots=True)
class UpstreamVersion:
    """One served version of the API: its name and what differs between versions."""

    version: str
    condition_type: str  # the condition kube-scheduler sets when it has placed the group

    @property
    def api_version(self) -> str:
        return f"{GROUP}/{self.version}"

    @property
    def list_path(self) -> str:
        return f"/apis/{GROUP}/{self.version}/{PLURAL}"

    def status_path(self, key: str) -> str:
        ns, _, name = key.partition("/")
        return f"/apis/{GROUP}/{self.version}/namespaces/{ns}/{PLURAL}/{name}/status"


V1BETA1: Final = UpstreamVersion("v1beta1", "PodGroupInitiallyScheduled")
V1ALPHA2: Final = UpstreamVersion("v1alpha2", "PodGroupScheduled")
VERSIONS: Final = (V1BETA1, V1ALPHA2)


def _policy(policy: object, key: str, created: float) -> GangSpec:
    if not isinstance(policy, Mapping):
        return GangSpec(key, created=created, invalid_reason="spec.schedulingPolicy: missing")
    gang, basic = policy.get("gang"), policy.get("basic")
    if (gang is None) == (basic is None):
        return GangSpec(
            key,
            created=created,
            invalid_reason="spec.schedulingPolicy: exactly one of basic and gang must be set",
        )
    if basic is not None:
        # no gang: each member schedules on its own
        return GangSpec(key, 1, created=created)
    count = gang.get("minCount") if isinstance(gang, Mapping) else None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        return GangSpec(
            key,
            created=created,
            invalid_reason=f"spec.schedulingPolicy.gang.minCount: must be >= 1, got {count!r}",
        )
    return GangSpec(key, count, created=created)


def upstream_podgroup_from(obj: Mapping[str, Any]) -> GangSpec:
    """A ``scheduling.k8s.io`` PodGroup (any served version) as a GangSpec; ``invalid_reason``
    names the field when it cannot be read. Never raises."""
    meta = obj.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    key = f"{meta.get('namespace') or 'default'}/{meta.get('name') or ''}"
    created = timestamp(meta.get("creationTimestamp"))
    spec = obj.get("spec")
    if not isinstance(spec, Mapping):
        return GangSpec(key, created=created, invalid_reason="spec: missing")
    gang = _policy(spec.get("schedulingPolicy"), key, created)
    if gang.invalid_reason:
        return gang
    try:
        return replace(gang, domain=upstream_domain(spec))
    except ValueError as e:
        return GangSpec(key, created=created, invalid_reason=str(e))
