"""Whole-gang preemption as a step of the gang cycle, and the evictions it decides.

A gang that failed for want of capacity evicts gangs of lower priority when that lets it fit
(the victim search: core/preemption.py). Its placements are assumed at once, over the victims,
so no one else takes what they free, and held at Permit until the victims are gone (then the
permit step binds it) or ``preemption_hold_seconds`` pass. The step owns what a preemption
waits for (victims not yet gone, per gang, and back) and the evictions decided and not yet seen
done (core/eviction.py: an eviction decided is carried out, across crashes)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import Clock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import Binding, Decision, Evict, Preempt, Victim, pod_ref
from gangsched.core.eviction import Evictions
from gangsched.core.gang import PLAIN_PREFIX, Gang, Hold, Holdings
from gangsched.core.leaderfirst import applies
from gangsched.core.model import GangMode, Pod
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.permit import PermitMap
from gangsched.core.preemption import Preemptor, gang_priority
from gangsched.core.steps.book import GangBook
from gangsched.core.steps.turn import Turn

__all__ = ["Preemption", "fits_nowhere"]


def fits_nowhere(finder: NodeFinder, pending: list[Pod]) -> bool:
    """No pending member could be placed on any node even with nothing else on it
    (``NodeFinder.fits_nowhere``): a search for victims, or for a reservation, would find
    nothing, so neither runs (a pod that asks more than any node has costs one walk over
    the nodes, not a what-if placement per lifted batch)."""
    return all(finder.fits_nowhere(p) for p in pending)


class Preemption:
    def __init__(
        self,
        book: GangBook,
        config: CoreConfig,
        clock: Clock,
        cache: ClusterCache,
        permit: PermitMap,
        finder: NodeFinder,
        preemptor: Preemptor,
        recount: Callable[[Pod], None],
    ) -> None:
        self._book = book
        self._config = config
        self._clock = clock
        self._cache = cache
        self._permit = permit
        self._finder = finder
        self.preemptor = preemptor
        # Counts a victim again (the scheduler's pod event): from now on it is being deleted.
        self._recount = recount
        # Preemptions waiting for their victims: gang -> victim uids not yet gone, and back.
        self.awaiting: dict[str, set[str]] = {}
        self.awaited_by: dict[str, set[str]] = {}
        self.preemptions = 0
        # Evictions decided and not carried out yet (core/eviction.py).
        self.evictions = Evictions(config.scheduler_name)
        # Holds the room of a leader-first gang's members to come (set by the scheduler:
        # core/leaderfirst.py's Holds.install).
        self.on_hold: Callable[[Gang, Hold], None] | None = None

    # ---- the step ----------------------------------------------------------------------
    def run(self, t: Turn) -> bool:
        attempt = t.attempt
        if attempt is None or not t.unschedulable:
            return False
        preempt = self.preempt(t.gang, t.h, attempt.message)
        if isinstance(preempt, Preempt):
            t.out.append(preempt)
            return True
        if preempt:  # why preemption did not help, as kube-scheduler says it
            attempt.message += f"; preemption: {preempt}"
        t.searched, t.found = self._finder.searches, self._finder.finds
        return False

    def _hold_for(self, gang: Gang, h: Holdings, placements: dict[str, str]) -> Hold | None:
        """The room of a leader-first gang's members to come, in its leader's domain, on the
        cache as it stands (the victims lifted), or None."""
        lf = applies(gang, h)
        if lf is None or gang.spec is None:
            return None
        leader = h.pending[0]
        return self.preemptor.cycle.hold_beside(
            leader, lf, gang.spec.min_resources, placements.get(leader.uid, "")
        )

    def priority_for(self, gang: Gang, pending: Sequence[Pod]) -> int | None:
        """The priority the gang's attempt would look for victims with, should its placement
        fail; None when it would not look (preemption off or declined, the gang at Permit,
        no member pending, nothing running below it)."""
        spec = gang.spec
        if not self._config.preemption or spec is None or not spec.preempt or not pending:
            return None
        if gang.key in self._permit or any(p.preemption_policy == "Never" for p in pending):
            return None
        priority = gang_priority(pending)
        return priority if any(p < priority for p in self._cache.counted_priorities) else None

    def preempt(self, gang: Gang, h: Holdings, why: str) -> Preempt | str:
        """Evict lower-priority gangs for the gang, if that lets it fit; otherwise why not
        when pods of lower priority run (else '')."""
        spec = gang.spec
        cache = self._cache
        if not self._config.preemption or spec is None or gang.key in self._permit:
            return ""
        if not h.pending:
            return ""
        priority = gang_priority(h.pending)
        if not any(p < priority for p in cache.counted_priorities):
            return ""
        if not spec.preempt:
            return "not eligible due to the PodGroup's preemptionPolicy=Never"
        if any(p.preemption_policy == "Never" for p in h.pending):
            return "not eligible due to preemptionPolicy=Never"
        plan = None
        spared = 0
        if not fits_nowhere(self._finder, h.pending):
            plan = self.preemptor.plan(gang, h, priority, self.awaited_by.keys())
            spared = self.preemptor.kueue_spared
        if plan is None:
            why_not = (
                f"no running pods of lower priority (below {priority}) whose eviction would "
                "make room for the whole gang"
            )
            if spared:
                why_not += (
                    f" ({spared} running pod(s) of lower priority were admitted by Kueue, "
                    "which alone preempts them)"
                )
            return why_not
        # Assumed with the victims lifted, so the placements take the devices the victims
        # free; the victims are counted again on their own devices until they are gone.
        going = [uid for u in plan.victims for uid in u.uids] + list(plan.awaited)
        for uid in going:
            cache.lift(uid)
        for uid, node in plan.placements.items():
            cache.assume(uid, node)
        # A leader-first gang's leader (core/leaderfirst.py): the room of its members to come,
        # in its domain, with the victims gone, held as the leader's own placement is.
        hold = self._hold_for(gang, h, plan.placements)
        for uid in going:
            cache.restore(uid)
        if hold is not None and self.on_hold is not None:
            hold.deadline = self._clock.now() + self._book.timeout(spec)
            self.on_hold(gang, hold)
        now = self._clock.now()
        deadline = now + self._config.preemption_hold_seconds
        self._permit.wait(gang.key, dict(plan.placements), deadline)
        waiting = {uid for u in plan.victims for uid in u.uids} | set(plan.awaited)
        self.awaiting[gang.key] = waiting
        for uid in waiting:
            self.awaited_by.setdefault(uid, set()).add(gang.key)
        self.preemptions += 1
        victims = self.evict([(u.gang, p) for u in plan.victims for p in u.pods])
        pods = cache.pods
        gangs = sorted({u.gang for u in plan.victims if u.gang})
        loose = sum(1 for u in plan.victims if not u.gang)
        whom = ", ".join(gangs) + (f"{', ' if gangs else ''}{loose} pod(s)" if loose else "")
        nodes = sorted(set(plan.placements.values()))
        message = (
            f"preempting {len(victims)} pod(s) of lower priority ({whom or 'none'}) for gang "
            f"{gang.key} (priority {priority}) on {len(nodes)} node(s): "
            f"{', '.join(nodes[:5])}{' ...' if len(nodes) > 5 else ''}"
        )
        if not victims:
            message = (
                f"waiting for {len(plan.awaited)} terminating pod(s) on {', '.join(nodes[:5])}"
                f"{' ...' if len(nodes) > 5 else ''}; capacity held for gang {gang.key}"
            )
        gang.reason, gang.message = "Preempting", f"{message} (was: {why})"
        gang.attempts = 0  # placed (over its victims): the backoff starts afresh
        if gang.schedule_start is None:
            gang.schedule_start = now
        nominations = tuple(
            Binding(pod_ref(pods[uid]), node) for uid, node in sorted(plan.placements.items())
        )
        return Preempt(gang.key, priority, nominations, victims, deadline, message)

    # ---- evictions ---------------------------------------------------------------------
    def evict(self, chosen: list[tuple[str, Pod]]) -> tuple[Victim, ...]:
        """The victims (each with its unit's gang key) are asked to be evicted: from now on
        they count as being deleted, and a Strict gang among them is scheduled whole again."""
        gangs = self._book.gangs
        for _, victim in chosen:
            vg = gangs.get(victim.group) if victim.group else None
            if vg is not None and vg.spec is not None and vg.spec.mode is GangMode.STRICT:
                # evicted whole: its replacements are scheduled whole again, not one by one
                vg.satisfied_once = False
                vg.has_bound = False  # not part-way bound: it queues by its priority
        for _, victim in chosen:
            self.evictions.asked(victim.uid)
            self._recount(victim)  # counted as being deleted from now on
        marked = self.evictions.marked
        return tuple(
            Victim(pod_ref(p), p.node_name, p.priority, key, marked(p)) for key, p in chosen
        )

    def finish_evictions(self, now: float) -> list[Decision]:
        """Carry out the evictions due (core/eviction.py): each victim with its unit, a
        Strict gang or gang group whole; one decision per unit."""
        ev = self.evictions
        pods_of = self._cache.pods
        units: dict[str, dict[str, Pod]] = {}  # unit key ('pod:<uid>' alone) -> victims
        for uid in ev.due(now):
            pod = pods_of.get(uid)
            if pod is None or not ev.running(pod):
                continue
            key = self.preemptor.unit_key(pod)
            unit = units.setdefault(key or PLAIN_PREFIX + uid, {})
            gang = self._book.gangs.get(pod.group) if key else None
            spec = gang.spec if gang is not None else None
            if spec is None or not (spec.gang_group or spec.mode is GangMode.STRICT):
                unit[uid] = pod
                continue
            for k in spec.gang_group or (pod.group,):
                g = self._book.gangs.get(k)
                for m in g.members if g is not None else ():
                    p = pods_of.get(m)
                    if p is not None and ev.running(p):
                        unit[m] = p
        out: list[Decision] = []
        for key, victims in sorted(units.items()):
            pods = [victims[uid] for uid in sorted(victims)]
            owner = "" if key.startswith(PLAIN_PREFIX) else key
            cause = next((p.disruption for p in pods if ev.marked(p)), "")
            why = (
                f"carrying out an eviction decided earlier ({cause})"
                if cause
                else "carrying out an eviction whose deletion failed"
            )
            whom = f"gang {owner}" if owner else f"pod {pods[0].namespace}/{pods[0].name}"
            message = f"{why}: evicting {len(pods)} pod(s) of {whom}"
            out.append(Evict(owner, self.evict([(owner, p) for p in pods]), message))
        return out

    # ---- what a preemption waits for ---------------------------------------------------
    def victim_gone(self, uid: str) -> None:
        """A victim finished or was deleted: a gang that waited for it alone is ready to
        bind (the permit step binds it at the next tick)."""
        for key in sorted(self.awaited_by.pop(uid, ())):
            left = self.awaiting.get(key)
            if left is not None:
                left.discard(uid)
                if not left:
                    gang = self._book.gangs.get(key)
                    if gang is not None:
                        self._book.queue.activate(key, self._book.sort_key(gang))

    def waits(self, key: str) -> bool:
        """The gang still waits for victims of its preemption."""
        return bool(self.awaiting.get(key))

    def ready(self) -> list[str]:
        """Gangs whose victims are all gone (no longer awaited), in order."""
        done = [k for k, left in self.awaiting.items() if not left]
        for key in done:
            del self.awaiting[key]
        return done

    def release(self, key: str) -> int:
        """The gang's hold ends: it no longer waits for its victims. Returns how many it
        still awaited (0 when it had no preemption under way)."""
        left = self.awaiting.pop(key, ())
        for uid in left:
            keys = self.awaited_by.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.awaited_by[uid]
        return len(left)
