"""Topology domains: the nodes of each domain of a level, what each domain has free, and
which domains a gang (or a slice of one) should try, tightest first.

A level is a node label key (``example.com/rack``); a domain is one value of it; a node
without the label is in no domain of that level. The cache keeps, for each level some gang has
asked about, the free capacity summed over each domain's ready nodes, updated with the node
totals on every placement (O(levels) per change); the nodes of each domain are rebuilt when a
node's labels or readiness change.

Choosing a domain is a cheap pass over the level's domains: those whose free totals cannot
hold a lower bound of what the gang still needs are skipped; the rest are tried tightest
first, the one with the least of the gang's main resource left over, so large domains stay
whole for large gangs (Kueue's topology-aware scheduling and the Coscheduling proposals
make the same choice).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gangsched.core.gpu import KOORD_CORE, KOORD_RATIO
from gangsched.core.model import DomainConstraint, Pod
from gangsched.core.resources import GPU, ResourceList, add_into, format_amount, sub_into

__all__ = [
    "DomainIndex",
    "Slice",
    "candidate_domains",
    "fallback_levels",
    "main_resource",
    "slices_of",
    "want_of",
]


class DomainIndex:
    """Per tracked level: free capacity per domain (kept by the cache), and the nodes of each
    domain (rebuilt lazily by the cache when node labels change)."""

    __slots__ = ("free", "members", "members_generation")

    def __init__(self) -> None:
        self.free: dict[str, dict[str, ResourceList]] = {}
        self.members: dict[str, dict[str, tuple[str, ...]]] = {}
        self.members_generation: dict[str, int] = {}

    def add(self, labels: Mapping[str, str], free: ResourceList) -> None:
        for key, per in self.free.items():
            value = labels.get(key)
            if value is not None:
                add_into(per.setdefault(value, {}), free)

    def sub(self, labels: Mapping[str, str], free: ResourceList) -> None:
        for key, per in self.free.items():
            value = labels.get(key)
            if value is not None:
                total = per.get(value)
                if total is not None:
                    sub_into(total, free)


@dataclass(frozen=True, slots=True)
class Slice:
    """Members of a gang that must share one domain of the slice level."""

    name: str  # the slice label's value, or "#k" for the k-th run of slice_size members
    pods: tuple[Pod, ...]


def slices_of(constraint: DomainConstraint, pods: Sequence[Pod]) -> list[Slice]:
    """Cut ``pods`` into the constraint's slices, largest first (ties by name). Members
    without the slice label form a slice of their own, named ''."""
    groups: dict[str, list[Pod]] = {}
    if constraint.slice_label:
        for p in pods:
            groups.setdefault(p.labels.get(constraint.slice_label, ""), []).append(p)
    else:
        size = max(1, constraint.slice_size)
        ordered = sorted(pods, key=lambda p: (p.index < 0, p.index, p.name))
        for i, p in enumerate(ordered):
            groups.setdefault(f"#{i // size}", []).append(p)
    out = [Slice(name, tuple(members)) for name, members in groups.items()]
    out.sort(key=lambda s: (-len(s.pods), s.name))
    return out


def fallback_levels(constraint: DomainConstraint, levels: Sequence[str]) -> list[str | None]:
    """The levels a gang tries in order; None stands for anywhere. Required: only that level.
    Preferred: that level, then each larger configured level, then anywhere. Neither (only
    slices): anywhere."""
    if constraint.required:
        return [constraint.required]
    if constraint.preferred:
        out: list[str | None] = [constraint.preferred]
        if constraint.preferred in levels:
            i = levels.index(constraint.preferred)
            out.extend(reversed(levels[:i]))
        out.append(None)
        return out
    return [None]


def want_of(pods: Iterable[Pod]) -> ResourceList:
    """What ``pods`` request together."""
    out: ResourceList = {}
    for p in pods:
        add_into(out, p.requests)
    return out


def main_resource(want: Mapping[str, int]) -> str:
    """The resource a domain's tightness is judged by: GPUs when asked for, else CPU."""
    for name in (GPU, KOORD_CORE, KOORD_RATIO):
        if want.get(name, 0) > 0:
            return name
    return "cpu"


@dataclass(frozen=True, slots=True)
class Candidates:
    """Domains of a level worth trying, tightest first, and when there are none, why."""

    order: list[str]
    why_none: str = ""


def candidate_domains(
    key: str,
    free: Mapping[str, ResourceList],
    want: ResourceList,
    allowed: Iterable[str] | None = None,
) -> Candidates:
    """The domains of level ``key`` whose free totals can hold ``want``, tightest first (the
    least of the main resource left over, then by name). ``allowed`` narrows the domains
    (those a gang already holds members in)."""
    values: Iterable[str] = free.keys() if allowed is None else [v for v in allowed if v in free]
    main = main_resource(want)
    scored: list[tuple[int, str]] = []
    best_short: tuple[int, str, str, int] | None = None  # (shortfall, domain, res, free)
    seen = 0
    for value in values:
        seen += 1
        have = free[value]
        short = None
        for res, amount in want.items():
            got = have.get(res, 0)
            if got < amount:
                short = (amount - got, value, res, got)
                break
        if short is None:
            scored.append((have.get(main, 0) - want.get(main, 0), value))
        elif best_short is None or short[:2] < best_short[:2]:
            best_short = short
    scored.sort()
    order = [v for _, v in scored]
    if order:
        return Candidates(order)
    if not seen:
        why = (
            f"no ready node has the label {key}"
            if allowed is None
            else f"the members already placed are in no {key} domain with ready nodes"
        )
        return Candidates([], why)
    assert best_short is not None
    _, value, res, got = best_short
    need = want[res]
    return Candidates(
        [],
        f"no {key} domain has the free capacity: the closest, {key}={value}, has "
        f"{format_amount(res, max(got, 0))} {res} free of {format_amount(res, need)} needed",
    )
