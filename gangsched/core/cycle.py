"""One gang scheduling cycle: PreFilter, place every pending member, then keep all or nothing.

1. PreFilter: the gang must exist as a spec, be valid, and have enough live members to reach
   quorum; the requests of the members still needed (and minResources) must fit in the
   cluster's free totals. A hopeless gang fails here in O(resources).
2. Place the pending members one after another against the snapshot; each placement is
   assumed before the next member is placed.
3. Strict (default): if what the gang holds plus what was placed reaches quorum, keep the
   placements as reservations; otherwise roll every one back. NonStrict keeps partial
   placements (the Permit deadline bounds how long they are held).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gangsched.core.cache import ClusterCache
from gangsched.core.domains import candidate_domains, fallback_levels, slices_of, want_of
from gangsched.core.gang import Gang, Hold, Holdings, shortfall
from gangsched.core.leaderfirst import applies, stand_ins, worker_shape
from gangsched.core.model import DomainConstraint, GangMode, LeaderFirst, Pod
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.plugins.dynamic_resources import dra_note
from gangsched.core.queue import Wake
from gangsched.core.resources import ResourceList, add_into, format_amount
from gangsched.core.snapshot import CycleSnapshot

__all__ = ["Attempt", "GangCycle", "gated_message", "least_requests", "shortage"]

# Orders a gang's pending members before placement (task topology plugs in here).
MemberOrder = Callable[[Gang, Sequence[Pod]], Sequence[Pod]]


@dataclass(slots=True)
class Attempt:
    placements: dict[str, str] = field(default_factory=dict)  # kept: pod uid -> node
    satisfied: bool = False  # the gang holds quorum with these placements
    reason: str = ""  # empty on success
    message: str = ""
    wake: Wake = Wake.CLUSTER
    unplaced: list[Pod] = field(default_factory=list)
    domain: str = ""  # "level=value" the gang was placed in, when it asked for one
    # A leader-first gang's leader placed alone: the room for its members to come, to hold
    # once it binds (core/leaderfirst.py)
    hold: Hold | None = None

    @property
    def failed(self) -> bool:
        return bool(self.reason)


@dataclass(slots=True)
class _Placed:
    """What one placement pass did: members placed per role, those left, the first why."""

    by_role: Counter[str] = field(default_factory=Counter)
    unplaced: list[Pod] = field(default_factory=list)
    first_failure: str = ""


def _asked_on_pods(pods: Sequence[Pod]) -> DomainConstraint:
    """The topology a gang's members ask for on themselves (Kueue's podset annotations),
    when its PodGroup says nothing: the first member's that asks."""
    for p in pods:
        if p.domain:
            return p.domain
    return DomainConstraint()


def _default_order(gang: Gang, pods: Sequence[Pod]) -> Sequence[Pod]:
    return pods


class GangCycle:
    def __init__(
        self,
        cache: ClusterCache,
        finder: NodeFinder,
        order: MemberOrder = _default_order,
        levels: Sequence[str] = (),
    ) -> None:
        self._cache = cache
        self._finder = finder
        self._order = order
        self._levels = list(levels)  # topology levels, largest domain first

    def run(self, gang: Gang, h: Holdings) -> Attempt:
        spec = gang.spec
        if spec is None:
            return Attempt(
                reason="PodGroupNotFound",
                message=f"PodGroup {gang.key} does not exist; the pods wait until it is created",
                wake=Wake.GANG,
            )
        if spec.invalid_reason:
            return Attempt(
                reason="InvalidSpec",
                message=f"PodGroup {gang.key} is invalid: {spec.invalid_reason}",
                wake=Wake.GANG,
            )
        need, need_roles = shortfall(spec, h.held, h.held_by_role, gang.satisfied_once)
        if (need or need_roles) and not spec.quorum(h.live, h.live_by_role):
            if h.gated:
                return Attempt(
                    reason="SchedulingGated",
                    message=gated_message(
                        spec.min_member,
                        len(h.gated),
                        (g for p in h.gated for g in p.gates),
                        h.live,
                    ),
                    wake=Wake.GANG,
                )
            lf = applies(gang, h)
            if lf is not None:
                return self._leader_first(gang, h, lf)
            message = _members_message(spec.min_member, h, bool(spec.roles))
            if gang.hold is not None:
                message += (
                    f"; room held in {gang.hold.domain} for the {gang.hold.slots} member(s) to come"
                )
            return Attempt(reason="WaitingForMembers", message=message, wake=Wake.GANG)
        if not h.pending:
            return Attempt(satisfied=need == 0 and not need_roles)
        strict = spec.mode is GangMode.STRICT
        if need > 0 and strict:
            short = self._prefilter(gang, h, need)
            if short:
                # A required level no node carries is why the gang waits whatever the
                # capacity: it comes first.
                missing = self._level_on_no_node(spec.domain or _asked_on_pods(h.pending))
                return Attempt(
                    reason="Unschedulable", message=f"{missing}; {short}" if missing else short
                )

        members = self._order(gang, h.pending)
        domain = spec.domain or _asked_on_pods(members)
        if domain:
            return self._in_domains(gang, h, members, need, domain)
        snapshot = CycleSnapshot(self._cache)
        placed = self._place(members, need, strict, None, snapshot)
        return self._settle(gang, h, placed, snapshot, len(members))

    # ---- placing members ---------------------------------------------------------------
    def _place(
        self,
        members: Sequence[Pod],
        need: int,
        strict: bool,
        within: Sequence[str] | None,
        snapshot: CycleSnapshot,
    ) -> _Placed:
        """Place ``members`` one after another (on the nodes ``within``, when given)."""
        out = _Placed()
        total = len(members)
        for i, pod in enumerate(members):
            info = self._finder.find(pod, within)
            if info is not None:
                snapshot.place(pod.uid, info.name)
                out.by_role[pod.role] += 1
                continue
            out.unplaced.append(pod)
            if not out.first_failure:
                out.first_failure = self._finder.diagnose(pod, within)
            if strict and len(snapshot) + (total - i - 1) < need:
                out.unplaced.extend(members[i + 1 :])
                break  # quorum is out of reach this cycle
        return out

    def _settle(
        self,
        gang: Gang,
        h: Holdings,
        placed: _Placed,
        snapshot: CycleSnapshot,
        total: int,
        where: str = "",
    ) -> Attempt:
        """Keep the placements when they reach quorum (or, NonStrict, when there are any);
        otherwise undo them."""
        spec = gang.spec
        assert spec is not None
        strict = spec.mode is GangMode.STRICT
        held_by_role = h.held_by_role + placed.by_role
        left, left_roles = shortfall(
            spec, h.held + len(snapshot), held_by_role, gang.satisfied_once
        )
        satisfied = left == 0 and not left_roles
        why = placed.first_failure
        if satisfied or (not strict and len(snapshot) > 0):
            placements = snapshot.commit()
            attempt = Attempt(
                placements=placements, satisfied=satisfied, unplaced=placed.unplaced, domain=where
            )
            if placed.unplaced:
                # what the gang holds now includes the placements it keeps
                attempt.message = _unplaced_message(
                    len(placed.unplaced), total, spec.min_member, h.held + len(placements), why
                )
            return attempt
        snapshot.rollback()
        return Attempt(
            reason="Unschedulable",
            message=_unplaced_message(len(placed.unplaced), total, spec.min_member, h.held, why),
            unplaced=placed.unplaced,
        )

    # ---- leader-first gangs (core/leaderfirst.py) --------------------------------------
    def _leader_first(self, gang: Gang, h: Holdings, lf: LeaderFirst) -> Attempt:
        """Place the leader alone where one domain of ``lf.level`` holds the whole group: the
        leader, then a stand-in for each member to come, each where the finder puts it in
        that domain; the tightest domain first. The stand-ins are taken out again (a cycle
        changes nothing but its placements): the attempt carries them, for Permit to hold."""
        spec = gang.spec
        assert spec is not None
        leader = h.pending[0]
        count = lf.size - 1
        shape = worker_shape(leader, lf.size, spec.min_resources)
        want = dict(leader.requests)
        for _ in range(count):
            add_into(want, shape)
        cache = self._cache
        found = candidate_domains(lf.level, cache.domain_free(lf.level), want)
        what = f"the leader and {count} member(s) to come"
        if not found.order:
            return Attempt(
                reason="Unschedulable",
                message=f"no {lf.level} domain holds the group ({what}): {found.why_none}",
                unplaced=[leader],
            )
        domains = cache.domain_nodes(lf.level)
        why = ""
        for value in found.order:
            nodes = domains.get(value, ())
            snapshot = CycleSnapshot(cache)
            spot = self._finder.find(leader, nodes)
            if spot is None:
                why = why or f"{lf.level}={value}: " + self._finder.diagnose(leader, nodes)
                continue
            snapshot.place(leader.uid, spot.name)
            hold, short = self.hold_in(leader, lf, spec.min_resources, value)
            if hold is not None:
                return Attempt(
                    placements=snapshot.commit(), satisfied=True, domain=hold.domain, hold=hold
                )
            why = why or f"{lf.level}={value}: {short}"
            snapshot.rollback()
        return Attempt(
            reason="Unschedulable",
            message=f"no {lf.level} domain holds the group ({what}): {why}",
            unplaced=[leader],
        )

    def hold_in(
        self, leader: Pod, lf: LeaderFirst, min_resources: Mapping[str, int], value: str
    ) -> tuple[Hold | None, str]:
        """The room of a leader-first gang's members to come in the domain ``lf.level=value``:
        a stand-in for each, placed by the finder one after another (each counted for the
        next), with the cache left as it was. (None, why) when one finds no room. The hold's
        deadline is for the caller to set."""
        cache = self._cache
        count = lf.size - 1
        pods = stand_ins(
            leader, worker_shape(leader, lf.size, min_resources), count, lf.level, value
        )
        nodes = cache.domain_nodes(lf.level).get(value, ())
        placed: dict[str, str] = {}
        why = ""
        try:
            for pod in pods:
                cache.upsert_pod(pod)
                info = self._finder.find(pod, nodes)
                if info is None:
                    why = f"room for {len(placed)} of {count} member(s) to come: " + (
                        self._finder.diagnose(pod, nodes)
                    )
                    break
                cache.assume(pod.uid, info.name)
                placed[pod.uid] = info.name
        finally:
            for pod in pods:
                cache.forget(pod.uid)
                cache.remove_pod(pod.uid)
        if len(placed) != count:
            return None, why
        return Hold(placed, f"{lf.level}={value}", leader.uid, 0.0, tuple(pods)), ""

    def hold_beside(
        self, leader: Pod, lf: LeaderFirst, min_resources: Mapping[str, int], node: str
    ) -> Hold | None:
        """:meth:`hold_in` the domain of ``node`` (where the leader is, or goes)."""
        info = self._cache.nodes.get(node)
        value = info.node.labels.get(lf.level) if info is not None and info.node else None
        return None if value is None else self.hold_in(leader, lf, min_resources, value)[0]

    # ---- topology-aware placement ------------------------------------------------------
    def _in_domains(
        self, gang: Gang, h: Holdings, members: Sequence[Pod], need: int, c: DomainConstraint
    ) -> Attempt:
        """Place the gang inside one domain of its level (and each slice inside one domain of
        the slice level): the tightest domain that holds it wins. Preferred levels fall back
        to larger levels, then to anywhere; a required level does not."""
        spec = gang.spec
        assert spec is not None
        strict = spec.mode is GangMode.STRICT
        total = len(members)
        held = self._held_nodes(gang)
        notes: list[str] = []
        best: tuple[int, str, str] | None = None  # (placed, where, why) of the best failure
        for key in fallback_levels(c, self._levels):
            if key is None:
                snapshot = CycleSnapshot(self._cache)
                placed = self._place_sliced(members, need, strict, None, snapshot, c)
                attempt = self._settle(gang, h, placed, snapshot, total)
                if attempt.failed and notes:
                    attempt.message += "; " + "; ".join(notes)
                return attempt
            domains = self._cache.domain_nodes(key)
            allowed = None
            if held:
                allowed = {v for n in held if (v := self._label(n, key)) is not None}
            want = least_requests(members, need) if need > 0 else least_requests(members, 1)
            found = candidate_domains(key, self._cache.domain_free(key), want, allowed)
            if not found.order:
                notes.append(found.why_none)
                continue
            for value in found.order:
                snapshot = CycleSnapshot(self._cache)
                nodes = domains.get(value, ())
                placed = self._place_sliced(members, need, strict, nodes, snapshot, c)
                where = f"{key}={value}"
                count = len(snapshot)
                # a gang already satisfied (need 0) takes a domain only where all its new
                # members fit, so a recreated member is not parked in a full domain
                if self._quorum(gang, h, placed, count) and (need > 0 or not placed.unplaced):
                    return self._settle(gang, h, placed, snapshot, total, where)
                snapshot.rollback()
                if best is None or count > best[0]:
                    best = (count, where, placed.first_failure)
            if best is not None:
                notes.append(
                    f"no {key} domain holds the gang: the best, {best[1]}, takes {best[0]} "
                    f"of {total} pending member(s): {best[2]}"
                )
                best = None
        level = c.required or c.preferred or c.slice_required
        message = f"topology ({c.describe()}): " + "; ".join(notes)
        if not strict and notes:
            # NonStrict keeps what the best domain can take.
            return self._nonstrict_best(gang, h, members, need, c, level, message)
        return Attempt(reason="Unschedulable", message=message, unplaced=list(members))

    def _nonstrict_best(
        self,
        gang: Gang,
        h: Holdings,
        members: Sequence[Pod],
        need: int,
        c: DomainConstraint,
        level: str,
        message: str,
    ) -> Attempt:
        """NonStrict gang that no domain holds whole: keep the placements of the domain that
        takes the most members."""
        domains = self._cache.domain_nodes(level)
        best: tuple[int, str] | None = None
        for value, nodes in sorted(domains.items()):
            snapshot = CycleSnapshot(self._cache)
            self._place_sliced(members, need, False, nodes, snapshot, c)
            count = len(snapshot)
            snapshot.rollback()
            if count and (best is None or count > best[0]):
                best = (count, value)
        if best is None:
            return Attempt(reason="Unschedulable", message=message, unplaced=list(members))
        snapshot = CycleSnapshot(self._cache)
        placed = self._place_sliced(members, need, False, domains[best[1]], snapshot, c)
        attempt = self._settle(gang, h, placed, snapshot, len(members), f"{level}={best[1]}")
        if attempt.message:
            attempt.message += "; " + message
        return attempt

    def _place_sliced(
        self,
        members: Sequence[Pod],
        need: int,
        strict: bool,
        within: Sequence[str] | None,
        snapshot: CycleSnapshot,
        c: DomainConstraint,
    ) -> _Placed:
        """Place the members, each slice inside one domain of the slice level when the
        constraint has slices."""
        if not c.slice_required:
            return self._place(members, need, strict, within, snapshot)
        key = c.slice_required
        inside = None if within is None else frozenset(within)
        out = _Placed()
        domains = self._cache.domain_nodes(key)
        for part in slices_of(c, members):
            want = want_of(part.pods)
            found = candidate_domains(key, self._cache.domain_free(key), want)
            done = False
            why = found.why_none
            for value in found.order:
                nodes = domains.get(value, ())
                if inside is not None:
                    nodes = tuple(n for n in nodes if n in inside)
                    if not nodes:
                        continue
                trial = CycleSnapshot(self._cache)
                placed = self._place(part.pods, len(part.pods), True, nodes, trial)
                if not placed.unplaced:
                    for uid, node in trial.commit().items():
                        snapshot.adopt(uid, node)
                    out.by_role.update(placed.by_role)
                    done = True
                    break
                trial.rollback()
                if not why:
                    why = f"slice {part.name or '(unlabelled)'} fits in no {key} domain: " + (
                        placed.first_failure
                    )
            if not done:
                out.unplaced.extend(part.pods)
                if not out.first_failure:
                    out.first_failure = why or f"slice {part.name} fits in no {key} domain"
        return out

    def _quorum(self, gang: Gang, h: Holdings, placed: _Placed, count: int) -> bool:
        spec = gang.spec
        assert spec is not None
        left, left_roles = shortfall(
            spec, h.held + count, h.held_by_role + placed.by_role, gang.satisfied_once
        )
        return left == 0 and not left_roles

    def _held_nodes(self, gang: Gang) -> set[str]:
        """The nodes of the gang's members counted somewhere (bound or reserved)."""
        node_of = self._cache.node_of
        return {n for uid in gang.members if (n := node_of(uid))}

    def _label(self, node: str, key: str) -> str | None:
        info = self._cache.nodes.get(node)
        if info is None or info.node is None:
            return None
        return info.node.labels.get(key)

    def _level_on_no_node(self, c: DomainConstraint) -> str:
        """A required level (the gang's or its slices') that no ready node has the label
        of, as the topology message says it; '' when each has one."""
        for key in (c.required, c.slice_required):
            if key and not self._cache.domain_nodes(key):
                return f"topology ({c.describe()}): no ready node has the label {key}"
        return ""

    def _device_shortage(self, gang: Gang, h: Holdings, need: int) -> str:
        """Could the ``need`` members still missing get the devices their resource claims ask,
        by device class, from the devices no allocation holds? Claims several pending members
        share are left out (they are allocated once). The shortage, or '' when they might."""
        with_claims = [p for p in h.pending if p.resource_claims]
        if not with_claims:
            return ""
        catalog = self._cache.resource_claims
        uses = Counter(k for p in with_claims for k in set(p.resource_claims))
        shared = {k for k, n in uses.items() if n > 1}
        demands = [catalog.demand(p, shared) for p in h.pending]
        for cls, amount in sorted(_least(demands, need).items()):
            if cls not in catalog.classes:
                continue  # the filter names a class that is missing or refused
            free = catalog.short_of_class(cls, amount)
            if free is not None:
                spec = gang.spec
                assert spec is not None
                return (
                    f"needs {amount} device(s) of class {cls} for {need} more member(s) "
                    f"(minMember {spec.min_member}); {max(free, 0)} free"
                )
        return ""

    def short_of_capacity(self, gang: Gang, h: Holdings) -> bool:
        """Whether the gang's attempt would fail in the prefilter now: a strict gang whose
        missing members cannot fit in the cluster's free totals, wherever the room is."""
        spec = gang.spec
        if spec is None or spec.invalid_reason or spec.mode is not GangMode.STRICT:
            return False
        need, _ = shortfall(spec, h.held, h.held_by_role, gang.satisfied_once)
        return need > 0 and bool(h.pending) and bool(self._prefilter(gang, h, need))

    def _prefilter(self, gang: Gang, h: Holdings, need: int) -> str:
        """Could the ``need`` members still missing (and minResources) fit in the cluster's
        free totals? Returns the shortage, or '' when they might."""
        spec = gang.spec
        assert spec is not None
        wanted = least_requests(h.pending, need)
        if h.held == 0:
            for k, v in spec.min_resources.items():
                if v > wanted.get(k, 0):
                    wanted[k] = v
        short = shortage(self._cache, wanted, {})
        if not short:
            return self._device_shortage(gang, h, need)
        res, amount, free = short
        dra = dra_note(self._cache, h.pending[0]) if self._cache.resource_claims.classes else ""
        return (
            f"needs {format_amount(res, amount)} {res} for {need} more member(s) "
            f"(minMember {spec.min_member}); {format_amount(res, max(free, 0))} free "
            f"in ready nodes" + (f"; {dra}" if dra else "")
        )


def _least(demands: Sequence[Mapping[str, int]], count: int) -> dict[str, int]:
    """Per key, the sum of the ``count`` smallest amounts among ``demands`` (0 where absent)."""
    out: dict[str, int] = {}
    for key in {k for d in demands for k in d}:
        total = sum(sorted(d.get(key, 0) for d in demands)[:count])
        if total:
            out[key] = total
    return out


def least_requests(pods: Sequence[Pod], count: int) -> ResourceList:
    """A lower bound on what any ``count`` of ``pods`` request together: per resource, the
    sum of the ``count`` smallest requests of that resource."""
    if count <= 0:
        return {}
    names = {k for p in pods for k in p.requests}
    out: ResourceList = {}
    for name in names:
        amounts = sorted(p.requests.get(name, 0) for p in pods)[:count]
        total = sum(amounts)
        if total:
            out[name] = total
    return out


def shortage(
    cache: ClusterCache, wanted: ResourceList, reusable: ResourceList
) -> tuple[str, int, int] | None:
    """The first resource for which ``wanted`` exceeds the cluster's free total (plus what the
    asker already holds and may reuse): (resource, wanted, free), or None."""
    for res, amount in wanted.items():
        free = cache.cluster_free(res) + reusable.get(res, 0)
        if amount > free:
            return res, amount, free
    return None


def gated_message(min_member: int, gated: int, gates: Iterable[str], live: int) -> str:
    """Why a gang waits for its gated members: ``gated`` members wait, behind ``gates``, and
    ``live`` members are ready."""
    return (
        f"{gated} member(s) wait for scheduling gates "
        f"(spec.schedulingGates: {', '.join(sorted(set(gates)))}); "
        f"{live} of {min_member} members are ready to schedule"
    )


def _members_message(min_member: int, h: Holdings, roles: bool) -> str:
    msg = f"{h.live} of {min_member} members exist; waiting for more pods"
    if roles:
        have = ", ".join(f"{r}={n}" for r, n in sorted(h.live_by_role.items()))
        msg += f" (by role: {have})"
    return msg


def _unplaced_message(unplaced: int, total: int, min_member: int, held: int, why: str) -> str:
    return (
        f"{unplaced}/{total} pending pods of the gang unschedulable "
        f"(minMember {min_member}, holding {held}): {why}"
    )
