"""Whole-gang preemption: which running pods to evict so that a gang of higher priority fits.

The unit of eviction is a gang, as the kube-batch PodGroup design asks ("consider the PodGroup
when preempting"): evicting one member of a running Strict gang evicts all of its running
members (and those of its gang group), since the rest would hold their resources uselessly.
A NonStrict gang gives up only members above its minMember, youngest first. A pod outside any
gang known to this scheduler is a unit of its own. Only pods of strictly lower priority than
every member the preemptor places are ever victims; a unit with any member of equal or higher
priority is not a candidate at all. Pods that Kueue admitted (its label ``kueue.x-k8s.io/podset``)
are never victims: Kueue counts their workload's quota as in use until Kueue itself evicts it,
so evicting them behind its back would leave the quota held by pods that no longer run (and
plain pods that nothing recreates). Kueue preempts among its workloads; gangsched preempts
around them. A reservation may still wait for such pods to end.

The search is what-if placement through the ordinary gang cycle, so the preemptor's own
constraints (affinity, spread, ports, volumes...) decide where it fits:

1. Pods already terminating, and victims promised to an earlier preemption, count as gone.
2. Candidate units are lifted (no longer counted on their nodes) cheapest first: lowest
   priority, fewest GPUs, youngest, those a PodDisruptionBudget protects last; in batches that
   double, until the gang fits. A few what-if placements, however many units run.
3. Reprieve, as kube-scheduler does for one pod: every lifted unit is put back in turn, units
   whose eviction would break a budget first, then higher priority first; a unit stays back if
   the gang still fits. Done twice, keeping larger units first (fewest GPUs taken) and smaller
   ones first (fewest victim gangs); the better victim set wins: fewest breaking a budget, the
   lowest highest priority, fewest units of that priority, fewest GPUs, youngest. No unit in
   it can be spared.

Everything lifted is restored before ``plan`` returns; the caller assumes the preemptor's
placements over the victims (the nodes are over-committed in the accounting until the victims
are gone, which is what holds the capacity for the preemptor).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field

from gangsched.core.cache import ClusterCache
from gangsched.core.cycle import GangCycle
from gangsched.core.gang import Gang, Holdings
from gangsched.core.labels import selector_matches
from gangsched.core.model import DisruptionBudget, GangMode, LabelSelector, Pod, PodAffinity

__all__ = ["KUEUE_PODSET_LABEL", "Plan", "Preemptor", "Unit", "gang_priority", "kueue_admitted"]

# The label Kueue gives the pods of every workload it admitted (the name of their podset).
KUEUE_PODSET_LABEL = "kueue.x-k8s.io/podset"

_NO_AFFINITY = PodAffinity()


@dataclass(frozen=True, slots=True)
class Unit:
    """Pods evicted together. ``gang`` is their gang key, '' for a pod alone."""

    gang: str
    pods: tuple[Pod, ...]  # by uid
    priority: int  # the highest among its pods
    gpus: int  # milli-GPUs its pods ask for (1000 per whole GPU)
    created: float  # the youngest member's creation time
    uids: tuple[str, ...]  # its pods' (the orders' last key, and a budget's mark)


@dataclass(slots=True)
class Plan:
    placements: dict[str, str]  # preemptor pod uid -> node
    victims: list[Unit] = field(default_factory=list)
    # pods already on their way out (terminating, or promised to an earlier preemption) on
    # the nodes of the placements: the gang waits for them too
    awaited: list[str] = field(default_factory=list)


def gang_priority(pending: Iterable[Pod]) -> int:
    """The priority a gang preempts with: the lowest of its members waiting to be placed, so
    that no member ever evicts a pod of its own priority or higher."""
    return min((p.priority for p in pending), default=0)


def kueue_admitted(pod: Pod) -> bool:
    """Whether Kueue admitted the pod's workload: then Kueue alone evicts it."""
    return KUEUE_PODSET_LABEL in pod.labels


# whole gangs' units by unit key, each with the pods it was made of
_Made = dict[str, tuple[tuple[Pod, ...], Unit]]


def _unit(gang: str, pods: list[Pod]) -> Unit:
    by_uid = sorted(pods, key=_uid)
    return Unit(
        gang,
        tuple(by_uid),
        max(p.priority for p in pods),
        sum(p.gpu.total for p in pods if p.gpu is not None),
        max(p.created for p in pods),
        tuple(p.uid for p in by_uid),
    )


def _uid(pod: Pod) -> str:
    return pod.uid


class Preemptor:
    def __init__(
        self,
        cache: ClusterCache,
        cycle: GangCycle,
        gangs: Mapping[str, Gang],
        budgets: Mapping[tuple[str, str], DisruptionBudget],
        ours: Callable[[Pod], bool],
    ) -> None:
        self._cache = cache
        self._cycle = cycle
        self._gangs = gangs
        self._budgets = budgets
        self._ours = ours
        self.trials = 0  # what-if placements tried, over the process's life
        # running pods of lower priority left out of the last plan because Kueue admitted them
        self.kueue_spared = 0
        # the last search's whole-gang units (see _whole_unit)
        self._made: _Made = {}

    @property
    def cycle(self) -> GangCycle:
        return self._cycle

    # ---- the search ---------------------------------------------------------------------
    def plan(
        self,
        gang: Gang,
        h: Holdings,
        priority: int,
        promised: Collection[str],
        keep_first: Callable[[Unit], tuple[float, ...]] | None = None,
        *,
        evicting: bool = True,
    ) -> Plan | None:
        """The victims whose eviction lets ``gang`` (its pending members ``h.pending``,
        preempting with ``priority``) reach quorum, and where it then goes; None when no set
        of lower-priority units would do. ``promised``: victims of earlier preemptions not
        yet gone (counted as gone, never chosen again). ``keep_first``: the reprieve order
        (default: preemption's, with disruption budgets); reservations ask which pods to wait
        for with their own. ``evicting``: the units will be evicted (False: only waited for,
        so pods that Kueue admitted are candidates too)."""
        cache = self._cache
        self.kueue_spared = 0
        if not any(p < priority for p in cache.counted_priorities):
            return None  # nothing runs below it (O(distinct priorities))
        group = gang.spec.gang_group if gang.spec is not None else ()
        own = min(group) if group else gang.key
        going, units = self._candidates(priority, promised, own, evicting)
        if not units:
            return None
        lifted: list[str] = []
        try:
            for uid in going:
                cache.lift(uid)
                lifted.append(uid)
            # Lift the cheapest units first (lowest priority, fewest GPUs, youngest; those a
            # disruption budget protects last), in batches that double, until the gang fits:
            # a few what-if placements, however many units there are.
            order = self._lift_order(units, keep_first)
            placements: dict[str, str] | None = None
            chosen: list[Unit] = []
            batch = 1
            while placements is None and len(chosen) < len(order):
                for u in order[len(chosen) : len(chosen) + batch]:
                    for uid in u.uids:
                        cache.lift(uid)
                        lifted.append(uid)
                    chosen.append(u)
                batch *= 2
                placements = self._try(gang, h)
            if placements is None:
                return None
            victims, placements = self._reprieve(gang, h, chosen, placements, keep_first)
        finally:
            for uid in lifted:
                cache.restore(uid)
        used = set(placements.values())
        awaited = sorted(uid for uid in going if cache.node_of(uid) in used)
        return Plan(placements, victims, awaited)

    def _lift_order(
        self, units: list[Unit], keep_first: Callable[[Unit], tuple[float, ...]] | None
    ) -> list[Unit]:
        if keep_first is not None:
            return sorted(units, key=lambda u: (*keep_first(u), u.gang, u.uids), reverse=True)
        order = sorted(units, key=lambda u: (u.priority, u.gpus, -u.created, u.gang, u.uids))
        breaking = self._breaking_budgets(order)
        order.sort(key=lambda u: u.uids in breaking)  # stable: protected ones last
        return order

    def _reprieve(
        self,
        gang: Gang,
        h: Holdings,
        chosen: list[Unit],
        placements: dict[str, str],
        keep_first: Callable[[Unit], tuple[float, ...]] | None,
    ) -> tuple[list[Unit], dict[str, str]]:
        """Put back every unit the gang can do without, most valuable first. For preemption,
        two orders are tried, keeping larger units first (fewest GPUs taken) and smaller ones
        first (fewest victim gangs), and the better victim set wins: fewest units breaking a
        disruption budget, then the lowest highest priority, fewest units of that priority,
        fewest GPUs, youngest."""
        if keep_first is not None:
            order = sorted(chosen, key=lambda u: (*keep_first(u), u.gang, u.uids))
            return self._put_back(gang, h, order, placements)
        big = sorted(chosen, key=lambda u: (-u.priority, -u.gpus, u.created, u.gang, u.uids))
        breaking = self._breaking_budgets(big)
        big.sort(key=lambda u: u.uids not in breaking)  # stable: budgets first
        small = sorted(chosen, key=lambda u: (-u.priority, u.gpus, u.created, u.gang, u.uids))
        small.sort(key=lambda u: u.uids not in breaking)
        first = self._put_back(gang, h, big, placements)
        if len(chosen) < 2:
            return first
        for u in chosen:  # lifted again, as before the first try
            for uid in u.uids:
                self._cache.lift(uid)
        second = self._put_back(gang, h, small, placements)

        def cost(victims: list[Unit]) -> tuple[float, ...]:
            top = max((u.priority for u in victims), default=0)
            return (
                sum(1 for u in victims if u.uids in breaking),
                top,
                sum(1 for u in victims if u.priority == top),
                sum(u.gpus for u in victims),
                -min((u.created for u in victims), default=0.0),
            )

        # (``plan`` restores every pod it lifted whichever wins: only the answers matter.)
        return first if cost(first[0]) <= cost(second[0]) else second

    def _put_back(
        self, gang: Gang, h: Holdings, order: list[Unit], placements: dict[str, str]
    ) -> tuple[list[Unit], dict[str, str]]:
        cache = self._cache
        # A unit with no pod on the nodes the gang now uses leaves that placement as it is,
        # unless pods constrain each other across nodes (affinity, spread), or a leader-first
        # leader needs room for its members to come beside it: no trial needed.
        loose = not any(
            p.spread or p.pod_affinity != _NO_AFFINITY or p.leader_first is not None
            for p in h.pending
        )
        victims: list[Unit] = []
        used = set(placements.values())
        for u in order:
            for uid in u.uids:
                cache.restore(uid)
            if (
                loose
                and not any(p.node_name in used for p in u.pods)
                and not any(p.pod_affinity.required_anti for p in u.pods)
            ):
                continue
            again = self._try(gang, h)
            if again is not None:
                placements = again
                used = set(placements.values())
                continue
            for uid in u.uids:
                cache.lift(uid)
            victims.append(u)
        return victims, placements

    def _try(self, gang: Gang, h: Holdings) -> dict[str, str] | None:
        """Where the gang's pending members would go now, reaching quorum; nothing stays
        assumed."""
        self.trials += 1
        attempt = self._cycle.run(gang, h)
        placed = attempt.placements
        for uid in reversed(list(placed)):
            self._cache.forget(uid)
        if attempt.failed or not attempt.satisfied:
            return None
        return dict(placed)

    # ---- candidates ---------------------------------------------------------------------
    def _candidates(
        self, priority: int, promised: Collection[str], own: str, evicting: bool
    ) -> tuple[list[str], list[Unit]]:
        """(pods counted as gone already, units that may be evicted). A unit with a member
        that Kueue admitted is not one when ``evicting``."""
        cache = self._cache
        pods_by_uid = cache.pods
        ours = self._ours
        keys: dict[str, str] = {}  # a gang's unit key, looked up once for all its members
        spared: set[str] = set()  # gang keys with a member Kueue admitted
        going: list[str] = []
        alone: list[Pod] = []
        grouped: dict[str, list[Pod]] = {}
        for info in cache.nodes.values():
            for uid in info.pods:
                pod = pods_by_uid.get(uid)
                if pod is None or pod.terminal or (evicting and not pod.node_name):
                    # assumed, not bound: never a victim, but waited for like the rest (its
                    # binding is in flight, or its gang waits at Permit)
                    continue
                if pod.deleting or uid in promised:
                    going.append(uid)
                    continue
                group = pod.group
                if group and ours(pod):
                    key = keys.get(group)  # (unit_key, the gang's part)
                    if key is None:
                        key = keys[group] = self._group_key(group)
                else:
                    key = ""
                if key == own:
                    continue
                if evicting and kueue_admitted(pod):
                    if pod.priority < priority:
                        self.kueue_spared += 1
                    if key:
                        spared.add(key)
                    continue
                if key:
                    grouped.setdefault(key, []).append(pod)
                elif pod.priority < priority:
                    alone.append(pod)
        units = [_unit("", [p]) for p in alone]
        promised_set = set(promised)
        made: _Made = {}
        for key, pods in grouped.items():
            if key in spared:
                continue  # evicting the rest would break a gang that Kueue admitted
            units.extend(self._gang_units(key, pods, priority, promised_set, made))
        self._made = made
        going.sort()
        return going, units

    def unit_key(self, pod: Pod) -> str:
        """The key of the gang (or gang group) a running pod is evicted with, or ''."""
        if not pod.group or not self._ours(pod):
            return ""
        return self._group_key(pod.group)

    def _group_key(self, group: str) -> str:
        gang = self._gangs.get(group)
        if gang is None or gang.spec is None:
            return ""
        siblings = gang.spec.gang_group
        return min(siblings) if siblings else gang.key

    def _whole_unit(self, key: str, pods: list[Pod], made: _Made) -> Unit:
        """The unit of a gang evicted whole: the one the last search made when its running
        pods are the same objects (a running gang seldom changes between two searches); kept
        in ``made`` for the next."""
        members = tuple(pods)
        known = self._made.get(key)
        if known is not None and known[0] == members:  # (identity first: no field compared)
            unit = known[1]
        else:
            unit = _unit(key, pods)
        made[key] = (members, unit)
        return unit

    def _gang_units(
        self,
        key: str,
        pods: list[Pod],
        priority: int,
        promised: set[str],
        made: _Made,
    ) -> list[Unit]:
        if any(p.priority >= priority for p in pods):
            return []
        gang = self._gangs.get(pods[0].group)
        assert gang is not None and gang.spec is not None
        spec = gang.spec
        siblings = [self._gangs.get(k) for k in spec.gang_group] if spec.gang_group else [gang]
        if any(g is None or g.tally.assumed for g in siblings):
            # Some member is reserved or its binding is on its way: evicting the bound ones
            # would leave the gang below its quorum once those land. Not a candidate now.
            return []
        if spec.gang_group or spec.mode is GangMode.STRICT:
            return [self._whole_unit(key, pods, made)]
        # NonStrict: only the members above minMember, youngest first, one at a time. Members
        # already on their way out count against what it may still give.
        gone = sum(1 for uid in gang.members if uid in promised)
        spare = len(pods) - max(0, spec.min_member - gone)
        if spare <= 0:
            return []
        youngest = sorted(pods, key=lambda p: (-p.created, p.uid))[:spare]
        return [_unit(key, [p]) for p in youngest]

    # ---- disruption budgets -------------------------------------------------------------
    def _breaking_budgets(self, order: list[Unit]) -> set[tuple[str, ...]]:
        """Units whose eviction would take a PodDisruptionBudget below what it allows, given
        the units before them in ``order`` are evicted too. kube-scheduler's count: a pod
        without labels breaks nothing; a budget with an empty selector matches nothing; a pod
        counts against each budget it matches until one is exceeded."""
        budgets = [b for b in self._budgets.values() if not _empty(b.selector)]
        if not budgets:
            return set()
        allowed = [b.allowed for b in budgets]
        out: set[tuple[str, ...]] = set()
        for u in order:
            for pod in u.pods:
                if not pod.labels:
                    continue
                for i, b in enumerate(budgets):
                    if b.namespace != pod.namespace:
                        continue
                    if not selector_matches(b.selector, pod.labels):
                        continue
                    allowed[i] -= 1
                    if allowed[i] < 0:
                        out.add(u.uids)
                        break
        return out


def _empty(selector: LabelSelector | None) -> bool:
    return selector is None or not (selector.match_labels or selector.match_expressions)
