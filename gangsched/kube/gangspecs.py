"""Which declaration of a gang's spec stands. Pure bookkeeping: no I/O, no asyncio.

A gang's spec (minMember, timeout, mode...) can be declared in several places at once:

1. a PodGroup of one of the projects gangsched reads, in precedence order: gangsched's own
   (``gangsched.io``), scheduler-plugins' (``scheduling.x-k8s.io``), Volcano's
   (``scheduling.volcano.sh``);
2. the member pods themselves, by labels or annotations (the Coscheduling proposal's labels,
   kube-batch's annotations, Koordinator's annotations; see ``membership.py``).

The first PodGroup in that order that exists stands; without one, the pods' own declaration
does. Among pods that declare the gang themselves the first declaration stands, as long as the
pod that made it exists; a pod that declares the same gang differently is refused (the service
marks it invalid, so it gets an event naming the difference and is never scheduled).

:class:`GangSpecs` keeps every declaration and tells, gang by gang, what the core must be told
(:meth:`GangSpecs.settle`), so the service only translates watch events into these calls and
the answers into core calls. It lives with the adapters, not in the core: the sources are
Kubernetes conventions, and the core knows gangs only by their resolved ``GangSpec``.
"""

from __future__ import annotations

from collections.abc import Container, KeysView, Mapping, Sequence
from dataclasses import dataclass

from gangsched.core.model import GangSpec

__all__ = ["GangSpecs", "SpecChange", "declaration_conflict"]


@dataclass(frozen=True, slots=True)
class SpecChange:
    """What the core must be told about a gang: its spec now, or None when it has none left."""

    key: str
    spec: GangSpec | None


def _timeout_text(seconds: float | None) -> str:
    return "default" if seconds is None else f"{seconds:g}s"


def declaration_conflict(key: str, first: GangSpec, spec: GangSpec) -> str:
    """Why ``spec``, a pod's own declaration of gang ``key``, cannot stand beside ``first``,
    the declaration that stands; '' when they agree on everything a pod can declare."""
    ours = (spec.min_member, spec.mode, spec.timeout_seconds, spec.gang_group)
    theirs = (first.min_member, first.mode, first.timeout_seconds, first.gang_group)
    if ours == theirs:
        return ""
    return (
        f"declares gang {key} differently from its other members "
        f"(minMember {spec.min_member} vs {first.min_member}, mode {spec.mode} vs "
        f"{first.mode}, timeout {_timeout_text(spec.timeout_seconds)} vs "
        f"{_timeout_text(first.timeout_seconds)})"
    )


class GangSpecs:
    """Every declaration of every gang's spec, and the one that stands.

    ``sources`` names the PodGroup sources in precedence order (highest first)."""

    def __init__(self, sources: Sequence[str]) -> None:
        self._sources = tuple(sources)
        self._podgroups: dict[str, dict[str, GangSpec]] = {s: {} for s in self._sources}
        self._declared: dict[str, GangSpec] = {}  # gang -> the pods' declaration that stands
        self._declarers: dict[str, str] = {}  # gang -> uid of the pod that made it
        self._applied: dict[str, GangSpec] = {}  # gang -> what the core was last told

    # ---- PodGroups ---------------------------------------------------------------------
    def put_podgroup(self, source: str, key: str, spec: GangSpec) -> None:
        self._podgroups[source][key] = spec

    def delete_podgroup(self, source: str, key: str) -> None:
        self._podgroups[source].pop(key, None)

    def replace_podgroups(self, source: str, specs: Mapping[str, GangSpec]) -> list[str]:
        """A full list of ``source``'s PodGroups (a relist). Returns the gangs whose PodGroup
        is gone: those and the gangs of ``specs`` are the ones to :meth:`settle`."""
        stale = [k for k in self._podgroups[source] if k not in specs]
        self._podgroups[source] = dict(specs)
        return stale

    def podgroups(self, source: str) -> KeysView[str]:
        """The gangs that have a PodGroup of ``source``."""
        return self._podgroups[source].keys()

    # ---- the pods' own declarations ----------------------------------------------------
    def declare(self, key: str, uid: str, spec: GangSpec, exists: Container[str]) -> str:
        """Pod ``uid`` declares gang ``key`` as ``spec``. The first declaration stands while
        the pod that made it ``exists``; returns '' when this one stands or agrees with the
        one that does, else why the pod is refused."""
        first = self._declared.get(key)
        declarer = self._declarers.get(key)
        if first is None or declarer == uid or declarer not in exists:
            self._declared[key] = spec
            self._declarers[key] = uid
            return ""
        return declaration_conflict(key, first, spec)

    def forget_declaration(self, key: str) -> bool:
        """The gang's last pod is gone: drop its pods' declaration. True when there was one
        (then :meth:`settle` the gang)."""
        self._declarers.pop(key, None)
        return self._declared.pop(key, None) is not None

    # ---- what stands -------------------------------------------------------------------
    def resolve(self, key: str) -> GangSpec | None:
        """The spec that stands for ``key``, or None when nothing declares it."""
        for source in self._sources:
            spec = self._podgroups[source].get(key)
            if spec is not None:
                return spec
        return self._declared.get(key)

    def settle(self, key: str) -> SpecChange | None:
        """What the core must be told about ``key`` now, recorded as told: the spec that
        stands if it is not what was told last, ``SpecChange(key, None)`` if the gang no
        longer has one, or None when nothing changed."""
        spec = self.resolve(key)
        if spec == self._applied.get(key):
            return None
        if spec is None:
            del self._applied[key]
        else:
            self._applied[key] = spec
        return SpecChange(key, spec)

    def sizes(self) -> dict[str, int]:
        """How many entries each table holds (tests check nothing outlives its gang)."""
        return {
            "declared": len(self._declared),
            "declarers": len(self._declarers),
            "applied": len(self._applied),
            **{f"podgroups({s})": len(v) for s, v in self._podgroups.items()},
        }
