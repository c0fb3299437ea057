"""The core's single entry point: cluster events in, decisions out.

Synchronous and deterministic: the same events, in the same order, with the same clock give
the same decisions. Adapters (the Kubernetes watch loop, the simulator) call the event methods
as things happen, ``schedule_one`` while it returns work, and ``tick`` at ``next_wakeup``.

Lifecycle of a gang's members: pending -> reserved (assumed in the cache) -> either bound
(``BindGang`` sent; the adapter confirms through ``pod_upsert`` with a node name, or reports
``bind_failed``) or released (rolled back in the cycle, or released at the Permit deadline).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gangsched.core.cache import ClusterCache
from gangsched.core.clock import Clock
from gangsched.core.config import CoreConfig
from gangsched.core.cycle import (
    Attempt,
    GangCycle,
    MemberOrder,
    gated_message,
    least_requests,
    shortage,
)
from gangsched.core.decisions import (
    BindGang,
    Binding,
    Decision,
    DeviceConflict,
    Evict,
    GangTimedOut,
    GangUnschedulable,
    GangWaiting,
    PodRef,
    Preempt,
    Victim,
)
from gangsched.core.equivalence import Failure, FailureMemo, PodClass, pod_class
from gangsched.core.eviction import Evictions
from gangsched.core.gang import PLAIN_PREFIX, Gang, Holdings, holdings, is_pending, shortfall
from gangsched.core.gpu import MILLI
from gangsched.core.lifecycle import Lifecycle
from gangsched.core.model import DisruptionBudget, GangMode, GangSpec, Node, Pod
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.permit import PermitMap
from gangsched.core.plugins.task_topology import bucket_order
from gangsched.core.preemption import Preemptor, Unit, gang_priority
from gangsched.core.profile import build_finder
from gangsched.core.queue import SchedulingQueue, SortKey, Wake
from gangsched.core.reservation import Reservation, ReservationFilter, need_by_node
from gangsched.core.resources import GPU, ResourceList, add_into, format_amount
from gangsched.core.status import GroupStatus, MemberCounts, group_status
from gangsched.core.tally import GroupTally, MemberState
from gangsched.core.volumes import (
    Claim,
    CSINode,
    PersistentVolume,
    StorageClass,
    VolumeCatalog,
)

__all__ = ["GangView", "Gauges", "Scheduler"]


# Reasons for which no placement was tried: the gang has not started scheduling yet.
_NOT_ATTEMPTED = frozenset(
    {"WaitingForMembers", "PodGroupNotFound", "InvalidSpec", "SchedulingGated"}
)


def _ref(pod: Pod) -> PodRef:
    return PodRef(pod.uid, pod.namespace, pod.name)


@dataclass(frozen=True, slots=True)
class GangView:
    """A gang as the status writer and the CLI show it."""

    key: str
    min_member: int
    members: int
    pending: int
    reserved: int
    bound: int
    running: int
    succeeded: int
    failed: int
    waiting_at_permit: bool
    waiting: int  # members reserved at Permit (not bindings in flight)
    queue_state: str
    reason: str
    message: str
    satisfied_once: bool
    schedule_start: float | None
    last_failure: float | None
    # The reservation the gang holds (core/reservation.py): nodes, since when, why.
    reserved_nodes: tuple[str, ...] = ()
    reserved_since: float | None = None
    reservation_reason: str = ""


@dataclass(frozen=True, slots=True)
class Gauges:
    """What the daemon exports as gauges, read in one call."""

    queue: Mapping[str, int]  # gangs per queue set: active, backoff, unschedulable
    waiting_at_permit: int  # gangs holding reservations at Permit
    allocatable: Mapping[str, int]  # summed over Ready nodes
    requested: Mapping[str, int]  # summed over Ready nodes (bound and assumed pods)


class Scheduler:
    """The facade. Adapters call the event methods, ``schedule_one``/``tick``, and read
    through the read methods (``view``, ``group_status``, ``holdings``, ``pod``, ``node``,
    ``group_size``, ``gauges``, ``volumes``, ``next_wakeup``) and ``config`` and ``clock``
    (what it was built with); everything else is internal."""

    def __init__(
        self,
        config: CoreConfig,
        clock: Clock,
        *,
        finder: NodeFinder | None = None,
        member_order: MemberOrder | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        self.cache = ClusterCache()
        self.cache.on_assumption = self._assumption_changed
        self.queue = SchedulingQueue(clock, flush_after=config.unschedulable_flush_seconds)
        self.permit = PermitMap()
        self.finder = finder or build_finder(self.cache, config, self._spec_of)
        self.cycle = GangCycle(
            self.cache,
            self.finder,
            member_order or (lambda g, pods: bucket_order(g.spec, pods)),
            config.topology_levels,
        )
        self.gangs: dict[str, Gang] = {}
        self.specs: dict[str, GangSpec] = {}
        # gang key -> every pod that names it, whatever its scheduler, and their status counts
        self.group_pods: dict[str, GroupTally] = {}
        self.budgets: dict[tuple[str, str], DisruptionBudget] = {}
        self.preemptor = Preemptor(
            self.cache,
            self.cycle,
            self.gangs,
            self.budgets,
            lambda p: p.scheduler_name == config.scheduler_name,
        )
        # Preemptions waiting for their victims: gang -> victim uids not yet gone, and back.
        self.awaiting: dict[str, set[str]] = {}
        self.awaited_by: dict[str, set[str]] = {}
        self.preemptions = 0
        # The reservation for a gang that waited too long (core/reservation.py).
        self.reserve = ReservationFilter(self._spec_of, clock.now, self._reservation_changed)
        self.started: dict[str, float] = {}  # pod uid -> when this process saw it bound
        # Evictions decided and not carried out yet (core/eviction.py); ``evicting``: victims
        # asked to be deleted whose deletion the watch has not shown yet.
        self.evictions = Evictions(config.scheduler_name)
        self.evicting = self.evictions.evicting
        self.cycles = 0
        # Gangs that ran and lost members (core/lifecycle.py).
        self.lifecycle = Lifecycle(self.cache, clock, lambda uid: uid in self.awaited_by)
        # Failures shared by pods of one equivalence class (core/equivalence.py).
        self.failures = FailureMemo()

    # ---- events: nodes -----------------------------------------------------------------
    def node_upsert(self, node: Node) -> None:
        self.cache.upsert_node(node)
        self.queue.wake(Wake.CLUSTER)

    def node_delete(self, name: str) -> list[Decision]:
        """A node went away. Gangs waiting at Permit with reservations on it are released and
        retried; bindings already sent are left to their outcome (``bind_failed`` or the
        pod's update), so no pod is ever placed twice."""
        lost = set(self.cache.remove_node(name))
        out: list[Decision] = []
        for key in self.permit.waiting_gangs():
            wg = self.permit.get(key)
            if wg is not None and lost & wg.reserved.keys():
                out.extend(
                    self._release(key, "Released", f"node {name} was deleted while reserved")
                )
        return out

    # ---- events: namespaces ------------------------------------------------------------
    def namespace_upsert(self, name: str, labels: Mapping[str, str]) -> None:
        """Namespace labels decide which pods an affinity term's namespaceSelector selects."""
        old = self.cache.namespace_labels(name)
        self.cache.upsert_namespace(name, labels)
        if old is not None and dict(old) != dict(labels):
            self.queue.wake(Wake.CLUSTER)

    def namespace_delete(self, name: str) -> None:
        self.cache.remove_namespace(name)

    # ---- events: disruption budgets ----------------------------------------------------
    def budget_upsert(self, budget: DisruptionBudget) -> None:
        """A PodDisruptionBudget: preemption spares the pods it protects where it can."""
        self.budgets[(budget.namespace, budget.name)] = budget
        self.failures.clear()  # what preemption may evict changed

    def budget_delete(self, namespace: str, name: str) -> None:
        self.budgets.pop((namespace, name), None)
        self.failures.clear()

    # ---- events: storage ---------------------------------------------------------------
    # PersistentVolumeClaims, PersistentVolumes, StorageClasses and CSINodes decide where
    # pods with volumes fit: any change may help a gang that failed on cluster state.
    def claim_upsert(self, claim: Claim) -> None:
        self._storage_changed(self.cache.volumes.upsert_claim(claim))

    def claim_delete(self, namespace: str, name: str) -> None:
        self._storage_changed(self.cache.volumes.remove_claim(namespace, name))

    def volume_upsert(self, pv: PersistentVolume) -> None:
        self._storage_changed(self.cache.volumes.upsert_volume(pv))

    def volume_delete(self, name: str) -> None:
        self._storage_changed(self.cache.volumes.remove_volume(name))

    def storage_class_upsert(self, sc: StorageClass) -> None:
        self._storage_changed(self.cache.volumes.upsert_class(sc))

    def storage_class_delete(self, name: str) -> None:
        self._storage_changed(self.cache.volumes.remove_class(name))

    def csinode_upsert(self, csi: CSINode) -> None:
        self._storage_changed(self.cache.volumes.upsert_csi_node(csi))

    def csinode_delete(self, name: str) -> None:
        self._storage_changed(self.cache.volumes.remove_csi_node(name))

    def _storage_changed(self, changed: bool) -> None:
        if changed:
            self.queue.wake(Wake.CLUSTER)

    # ---- events: pods ------------------------------------------------------------------
    def pod_upsert(self, pod: Pod) -> None:
        self.evictions.seen(pod, self.clock.now())
        if pod.uid in self.evicting:
            pod = replace(pod, deleting=True)  # until the watch says so
        if pod.node_name and pod.uid not in self.started:
            self.started[pod.uid] = self.clock.now()
        if (
            not pod.refused
            and not pod.node_name
            and pod.scheduler_name == self.config.scheduler_name
        ):
            pod.unsupported = self.finder.unhonoured(pod)
        name = self.config.scheduler_name
        old = self.cache.pods.get(pod.uid)
        self.cache.upsert_pod(pod)
        if old is not None and old.group != pod.group:
            self._ungroup(old)
        if pod.group:
            tally = self.group_pods.get(pod.group)
            if tally is None:
                tally = self.group_pods[pod.group] = GroupTally()
            tally.put(pod.uid, pod.phase.value, bool(pod.node_name), pod.scheduler_name == name)
        if (
            old is not None
            and not old.terminal
            and pod.terminal
            and (old.node_name or pod.node_name)
        ):
            self.queue.wake(Wake.CLUSTER)
        if pod.scheduler_name != name:
            if old is not None and old.scheduler_name == name:
                self._leave(old)  # no longer this scheduler's: not a member of its gang
                self._member_changed(old, pod)
            return
        key = pod.group or PLAIN_PREFIX + pod.uid
        if old is not None and old.group != pod.group:
            self._leave(old)
        gang = self._gang(key, pod)
        new_member = gang.tally.put(pod, pod.uid in self.cache.assumed)
        if pod.node_name and not pod.terminal and not pod.deleting:
            gang.has_bound = True
            if not gang.satisfied_once and (old is None or not old.node_name):
                self._note_bound(gang)
        if pod.node_name:
            wg = self.permit.get(key)
            if wg is not None and pod.uid in wg.reserved and wg.reserved[pod.uid] != pod.node_name:
                self.permit.drop_pod(key, pod.uid)
        if is_pending(pod, self.cache) or pod.refused:
            self.queue.activate(key, self._sort_key(gang))
            # A new member, or a member whose last scheduling gate was lifted, may be what
            # the gang (or its gang group) waits for.
            if new_member or (old is not None and old.gates):
                self.queue.wake(None, self._group_of(gang), at_once=self._may_complete(gang))
        elif pod.gates and not pod.node_name and not gang.satisfied_once:
            # PreEnqueue: a gated pod never enters the queue; the gang says what it waits for.
            t = gang.tally
            if gang.spec is not None and t.live < gang.spec.min_member:
                gang.reason = "SchedulingGated"
                gang.message = gated_message(
                    gang.spec.min_member, t.count(MemberState.GATED), t.gates, t.live
                )
        self._member_changed(old, pod)
        if pod.terminal and pod.uid in self.awaited_by:
            self._victim_gone(pod.uid)

    def pod_delete(self, uid: str) -> None:
        self.started.pop(uid, None)
        self.evictions.gone(uid)
        pod = self.cache.pods.get(uid)
        counted = bool(self.cache.node_of(uid))
        self.cache.remove_pod(uid)
        if pod is not None:
            self._ungroup(pod)
            self._leave(pod)
            self._member_changed(pod, None)
        self._victim_gone(uid)  # after the lifecycle saw it go as a victim
        if counted:
            self.queue.wake(Wake.CLUSTER)

    def _member_changed(self, old: Pod | None, new: Pod | None) -> None:
        """The gang lifecycle (core/lifecycle.py) takes in a member's event (``old``: the pod
        as it was, ``new``: as it is now, None once deleted), in its old gang and its new one.
        A loss under RestartGang counts the members it restarts as being deleted from now on
        (as a binding is assumed before the watch confirms it)."""
        name = self.config.scheduler_name
        old_key = new_key = ""
        if old is not None and old.scheduler_name == name:
            old_key = old.group or PLAIN_PREFIX + old.uid
        if new is not None and new.scheduler_name == name:
            new_key = new.group or PLAIN_PREFIX + new.uid
        pod = new if new is not None else old
        if pod is not None and (new is None or new.deleting):
            self.lifecycle.restarting.discard(pod.uid)  # the watch says so now
        if old_key and old_key != new_key:
            self._lifecycle_event(old_key, old, new)  # it left that gang
        if new_key:
            self._lifecycle_event(new_key, old if old_key == new_key else None, new)

    def _lifecycle_event(self, key: str, old: Pod | None, new: Pod | None) -> None:
        gang = self.gangs.get(key)
        if gang is None:
            self.lifecycle.forget(key)
            return
        loss = self.lifecycle.changed(gang, old, new)
        for ref in loss.restart if loss is not None else ():
            pod = self.cache.pods.get(ref.uid)
            if pod is not None and not pod.deleting:
                self.pod_upsert(replace(pod, deleting=True))
                self.lifecycle.restarting.add(ref.uid)

    def delete_failed(self, uid: str) -> None:
        """The adapter could not delete a member that a gang restart (RestartGang) counted as
        being deleted: it counts as the watch last showed it again."""
        pod = self.cache.pods.get(uid)
        if uid in self.lifecycle.restarting and pod is not None and pod.deleting:
            self.lifecycle.restarting.discard(uid)
            self.pod_upsert(replace(pod, deleting=False))
        elif uid in self.evicting and pod is not None and pod.deleting:
            # the eviction stands: it is tried again after a backoff (core/eviction.py)
            self.evictions.failed(uid, self.clock.now())
            self.pod_upsert(replace(pod, deleting=False))

    def bind_failed(self, uid: str, message: str) -> None:
        """The adapter could not bind a pod. Its reservation is dropped and its gang retried
        after backoff; pods of the gang already bound stay bound (they cannot be unbound)."""
        self.cache.forget(uid)
        pod = self.cache.pods.get(uid)
        if pod is None or pod.scheduler_name != self.config.scheduler_name:
            return
        key = pod.group or PLAIN_PREFIX + uid
        gang = self.gangs.get(key)
        if gang is None:
            return
        now = self.clock.now()
        gang.reason, gang.message = "BindFailed", message
        gang.attempts += 1
        gang.last_failure = now
        self.queue.backoff(key, self._sort_key(gang), now + self._backoff(gang))

    # ---- events: gangs -----------------------------------------------------------------
    def gang_upsert(self, spec: GangSpec) -> None:
        self.specs[spec.key] = spec
        gang = self.gangs.get(spec.key)
        if gang is None:
            gang = Gang(spec.key, spec, first_seen=self.clock.now())
            self.gangs[spec.key] = gang
        gang.spec = spec
        if self._has_pending(gang):
            self.queue.activate(spec.key, self._sort_key(gang))
        self.queue.wake(None, self._group_of(gang), at_once=self._may_complete(gang))

    def gang_delete(self, key: str) -> list[Decision]:
        self.specs.pop(key, None)
        self._unreserve(key)
        gang = self.gangs.get(key)
        out = self._release(key, "Released", f"PodGroup {key} was deleted")
        if gang is not None:
            gang.spec = None
            if not gang.members:
                del self.gangs[key]
                self.queue.remove(key)
                self.lifecycle.forget(key)
        return out

    def restore_schedule_start(self, key: str, when: float) -> None:
        """When the gang was first tried, as recorded before a restart (its PodGroup's
        status): it has been tried, whatever this process did since."""
        gang = self.gangs.get(key)
        if gang is not None and gang.schedule_start is None and when > 0:
            gang.schedule_start = when

    # ---- work --------------------------------------------------------------------------
    def tick(self) -> list[Decision]:
        """Expire Permit deadlines and move due backoffs to active; return the gang lifecycle's
        decisions made since (on pod events) too."""
        out: list[Decision] = list(self.lifecycle.drain())
        now = self.clock.now()
        out.extend(self._finish_evictions(now))
        out.extend(self._device_conflicts())
        for key in [k for k, left in self.awaiting.items() if not left]:
            del self.awaiting[key]
            gang = self.gangs.get(key)
            if gang is not None and key in self.permit and self._gate(gang):
                out.append(self._bind(gang, {}))
        for key in self.permit.expired(now):
            if key in self.awaiting:
                n = len(self.awaiting[key])
                hold = self.config.preemption_hold_seconds
                out.extend(
                    self._release(
                        key,
                        "Released",
                        f"{n} pod(s) evicted for it still running after {hold:g}s; "
                        "the capacity held for it is given back",
                    )
                )
                continue
            gang = self.gangs.get(key)
            timeout = self._timeout(gang.spec if gang else None)
            out.extend(
                self._release(key, "Timeout", f"timed out after {timeout:g}s waiting for quorum")
            )
        self.queue.flush()
        return out

    def schedule_one(self) -> list[Decision] | None:
        """Run one gang cycle. None when there is nothing to schedule right now."""
        out = self.tick()
        key = self.queue.pop()
        if key is None:
            return out or None
        gang = self.gangs.get(key)
        if gang is None:
            return out
        self.cycles += 1
        h = holdings(gang, self.cache)
        if h.invalid:
            # Unreadable pods are InvalidPod; readable ones asking for what gangsched does not
            # implement are Unsupported. Either way the field is named and nothing is bound.
            reason = "InvalidPod" if any(p.invalid_reason for p in h.invalid) else "Unsupported"
            message = "; ".join(f"{p.key}: {p.refused}" for p in h.invalid)
            out.append(GangUnschedulable(key, tuple(_ref(p) for p in h.invalid), reason, message))
            for p in h.invalid:
                gang.tally.remove(p.uid)
            gang.reason = reason
            gang.message = message
        # bound (or finished) members alone satisfy the gang, and each role's minimum (held
        # counts by role include reservations, bound or released within a cycle or two)
        if gang.spec is not None and gang.spec.quorum(h.bound + h.succeeded, h.held_by_role):
            gang.satisfied_once = True
        if not h.pending:
            return out
        reason, blocked = self._siblings_waiting(gang)
        if blocked:
            wake = Wake.GANG if reason == "WaitingForMembers" else Wake.CLUSTER
            self._fail(gang, reason, blocked, wake)
            out.append(GangUnschedulable(key, tuple(_ref(p) for p in h.pending), reason, blocked))
            return out
        waiting = self._volumes_waiting(gang, h.pending)
        if waiting:
            self._fail(gang, "Unschedulable", waiting, Wake.CLUSTER)
            refs = tuple(_ref(p) for p in h.pending)
            out.append(GangUnschedulable(key, refs, "Unschedulable", waiting))
            return out
        self.reserve.begin_cycle()
        cls = self._class_of(gang, h)
        if cls is not None:
            replayed = self._replay_failure(gang, h, cls)
            if replayed is not None:
                out.append(replayed)
                return out
        # What a failure of a pod of a class is remembered with (core/equivalence.py): the
        # cache generation it failed on, and what its searches moved in the finder.
        searches, generation = self.finder.searches, self.cache.generation
        finds = self.finder.finds
        attempt = self.cycle.run(gang, h)
        if attempt.reason not in _NOT_ATTEMPTED and gang.schedule_start is None:
            gang.schedule_start = self.clock.now()
        if attempt.failed:
            reservation = self.reserve.current
            reserve_due = False
            searched, found = self.finder.searches, self.finder.finds
            if attempt.reason == "Unschedulable":
                preempt = self._preempt(gang, h, attempt.message)
                if isinstance(preempt, Preempt):
                    out.append(preempt)
                    return out
                if preempt:  # why preemption did not help, as kube-scheduler says it
                    attempt.message += f"; preemption: {preempt}"
                searched, found = self.finder.searches, self.finder.finds
                reserve_due = self._reserve_due(gang, h)
                if reserve_due:
                    self._reserve(gang, h)
            message = attempt.message
            r = self.reserve.current
            if r is not None and r.gang == key:
                nodes = ", ".join(r.nodes[:5]) + (" ..." if len(r.nodes) > 5 else "")
                message += (
                    f"; holds a reservation on {len(r.nodes)} node(s) ({nodes}) for "
                    f"{self.clock.now() - r.since:.0f}s: {r.reason}"
                )
            self._fail(gang, attempt.reason, message, attempt.wake)
            out.append(
                GangUnschedulable(
                    key, tuple(_ref(p) for p in h.pending), attempt.reason, attempt.message
                )
            )
            if (
                cls is not None
                and attempt.reason == "Unschedulable"
                and attempt.wake is Wake.CLUSTER
                and self.reserve.current is reservation
            ):
                # A failed attempt leaves the cache as it found it (rolled back, what-ifs
                # restored): the next pod of the class fails the same way until it changes.
                reserved = self.finder.searches - searched if reserve_due else None
                failure = Failure(
                    attempt.reason,
                    attempt.message,
                    searched - searches,
                    reserved,
                    observed=found > finds,
                    reserve_observed=self.finder.finds > found,
                )
                self.failures.put(cls, generation, self.cache.generation, reservation, failure)
            return out
        out.extend(self._permit(gang, attempt))
        return out

    def _fits_nowhere(self, pending: list[Pod]) -> bool:
        """No pending member could be placed on any node even with nothing else on it
        (``NodeFinder.fits_nowhere``): a search for victims, or for a reservation, would find
        nothing, so neither runs (a pod that asks more than any node has costs one walk over
        the nodes, not a what-if placement per lifted batch)."""
        return all(self.finder.fits_nowhere(p) for p in pending)

    def _class_of(self, gang: Gang, h: Holdings) -> PodClass | None:
        """The equivalence class of a plain pod whose failure may be shared with the other
        pods of its class (core/equivalence.py), or None. Not for a gang of several pods, nor
        for a pod that holds anything (a reservation, capacity at Permit, victims awaited)."""
        if not gang.plain or len(h.pending) != 1 or h.held or gang.key in self.permit:
            return None
        if gang.key in self.awaiting:
            return None
        r = self.reserve.current
        if r is not None and r.gang == gang.key:
            return None
        labelled = len(self.cache.term_index) > 0 or bool(
            self.config.plugin_settings.default_spread_constraints
        )
        return pod_class(h.pending[0], labelled)

    def _replay_failure(self, gang: Gang, h: Holdings, cls: PodClass) -> Decision | None:
        """A pod of the same class failed on the cache as it stands (and under the same
        reservation): this one fails the same way, with the same status and message, without
        a search, a diagnosis, or a what-if for preemption. None when there is no such
        failure, or when this gang is due a search for a reservation that the remembered
        failure did not run."""
        failure = self.failures.get(cls, self.cache.generation, self.reserve.current)
        if failure is None:
            return None
        if gang.schedule_start is None:
            gang.schedule_start = self.clock.now()  # as the attempt it stands for would
        due = self._reserve_due(gang, h)
        if due and failure.reserve_searches is None:
            return None
        self.finder.rotate(failure.searches + ((failure.reserve_searches or 0) if due else 0))
        if failure.observed or (due and failure.reserve_observed):
            self.finder.observe(h.pending[0])
        self.failures.hits += 1
        self._fail(gang, failure.reason, failure.message, Wake.CLUSTER)
        refs = tuple(_ref(p) for p in h.pending)
        return GangUnschedulable(gang.key, refs, failure.reason, failure.message)

    def run_until_idle(self, max_cycles: int = 1_000_000) -> list[Decision]:
        out: list[Decision] = []
        for _ in range(max_cycles):
            step = self.schedule_one()
            if step is None:
                break
            out.extend(step)
        return out

    def next_wakeup(self) -> float | None:
        times = [
            t
            for t in (
                self.queue.next_wakeup(),
                self.permit.next_deadline(),
                self.evictions.next_due(),
            )
            if t is not None
        ]
        return min(times) if times else None

    # ---- views -------------------------------------------------------------------------
    def view(self, key: str) -> GangView | None:
        """O(1): the counts are kept up to date member by member."""
        gang = self.gangs.get(key)
        if gang is None:
            return None
        t = gang.tally
        spec = gang.spec
        return GangView(
            key=key,
            min_member=spec.min_member if spec else 0,
            members=len(t),
            pending=t.count(MemberState.PENDING),
            reserved=t.count(MemberState.RESERVED),
            bound=t.bound,
            running=t.count(MemberState.RUNNING),
            succeeded=t.count(MemberState.SUCCEEDED),
            failed=t.count(MemberState.FAILED),
            waiting_at_permit=key in self.permit,
            waiting=len(wg.reserved) if (wg := self.permit.get(key)) is not None else 0,
            queue_state=self.queue.state_of(key),
            reason=gang.reason,
            message=gang.message,
            satisfied_once=gang.satisfied_once,
            schedule_start=gang.schedule_start,
            last_failure=gang.last_failure,
            **self._reservation_view(key),
        )

    def group_status(self, key: str) -> GroupStatus | None:
        """The gang's PodGroup status (:func:`gangsched.core.status.group_status`), counted
        over every pod that names the gang, whatever its scheduler, as the status controller
        counts them. None when there is no spec for the gang, or when it has pods and none of
        them is this scheduler's (another scheduler speaks for it). O(1): the counts are kept
        up to date pod by pod."""
        gang = self.gangs.get(key)
        spec = self.specs.get(key) or (gang.spec if gang is not None else None)
        if spec is None:
            return None
        tally = self.group_pods.get(key)
        if tally is not None and not tally.ours:
            return None
        counts = tally.counts() if tally is not None else MemberCounts()
        return group_status(
            spec.min_member,
            counts,
            reason=gang.reason if gang is not None else "",
            message=gang.message if gang is not None else "",
            attempted=gang is not None and (gang.schedule_start is not None or key in self.permit),
            binding=gang is not None and gang.tally.assumed > 0,
            lost=self.lifecycle.lost(gang),
            placed_in=gang.placed_in if gang is not None else "",
        )

    def holdings(self, key: str) -> Holdings | None:
        """What the gang holds and which members wait (walks its members)."""
        gang = self.gangs.get(key)
        return holdings(gang, self.cache) if gang is not None else None

    def pod(self, uid: str) -> Pod | None:
        """The pod as last given to ``pod_upsert``; None once deleted (or never seen)."""
        return self.cache.pods.get(uid)

    def node(self, name: str) -> Node | None:
        """The node as last given to ``node_upsert``; None once deleted (or never seen)."""
        info = self.cache.nodes.get(name)
        return info.node if info is not None else None

    def gpu_usage(self) -> tuple[int, int]:
        """(GPUs on ready nodes, milli-GPUs counted on them): each device counts what its
        pods' shares and whole GPUs take, at most 1000 (a device over-committed by pods
        bound elsewhere counts full); a node without a device model counts its
        ``nvidia.com/gpu``. Walks every node: for a metrics scrape, not for a hot path."""
        devices = milli = 0
        for info in self.cache.nodes.values():
            if not info.usable:
                continue
            gpus = info.gpus
            if gpus is not None:
                devices += len(gpus.used)
                milli += sum(min(u, MILLI) for u in gpus.used)
            else:
                total = info.allocatable(GPU)
                devices += total
                milli += min(info.requested.get(GPU, 0), total) * MILLI
        return devices, milli

    def bound_since(self, when: float) -> list[Pod]:
        """This scheduler's pods bound at ``when`` or later (``Pod.bound_at``) and not
        finished, in uid order. O(pods)."""
        name = self.config.scheduler_name
        return sorted(
            (
                p
                for p in self.cache.pods.values()
                if p.scheduler_name == name
                and p.node_name
                and not p.terminal
                and p.bound_at >= when
            ),
            key=lambda p: p.uid,
        )

    def group_size(self, key: str) -> int:
        """How many pods name group ``key``, whatever their scheduler."""
        tally = self.group_pods.get(key)
        return len(tally) if tally is not None else 0

    def gauges(self) -> Gauges:
        cache = self.cache
        return Gauges(
            queue=self.queue.counts(),
            waiting_at_permit=len(self.permit),
            allocatable=dict(cache.total_allocatable),
            requested=dict(cache.total_requested),
        )

    @property
    def volumes(self) -> VolumeCatalog:
        """The claims, volumes, storage classes and CSINodes as watched, with what the
        scheduler has assumed about them (the binder's PreBind reads it)."""
        return self.cache.volumes

    # ---- internals ---------------------------------------------------------------------
    def _spec_of(self, key: str) -> GangSpec | None:
        gang = self.gangs.get(key)
        return gang.spec if gang is not None else None

    def _gang(self, key: str, pod: Pod) -> Gang:
        gang = self.gangs.get(key)
        if gang is None:
            if key.startswith(PLAIN_PREFIX):
                spec: GangSpec | None = GangSpec(key, 1, created=pod.created)
            else:
                spec = self.specs.get(key)
            gang = Gang(key, spec, first_seen=pod.created or self.clock.now())
            self.gangs[key] = gang
        return gang

    def _ungroup(self, pod: Pod) -> None:
        tally = self.group_pods.get(pod.group)
        if tally is not None:
            tally.remove(pod.uid)
            if not tally:
                del self.group_pods[pod.group]

    def _assumption_changed(self, uid: str) -> None:
        """The cache assumed a pod or forgot it: its gang counts it anew."""
        pod = self.cache.pods.get(uid)
        if pod is None:
            return
        gang = self.gangs.get(pod.group or PLAIN_PREFIX + uid)
        if gang is not None:
            gang.tally.refresh(pod, uid in self.cache.assumed)

    def _leave(self, pod: Pod) -> None:
        key = pod.group or PLAIN_PREFIX + pod.uid
        gang = self.gangs.get(key)
        if gang is None:
            return
        gang.tally.remove(pod.uid)
        self.permit.drop_pod(key, pod.uid)
        if not gang.members and (gang.plain or gang.spec is None):
            del self.gangs[key]
            self.queue.remove(key)
            self._unreserve(key)
        elif gang.members:
            # A gang that waits says how many members it has: look at it again.
            self.queue.wake(None, (key,))
        if key not in self.permit:
            # The last attempt's message counted members that are no longer all there: drop
            # it, so the status says what the members are (see core/status.py) until the next
            # attempt speaks again.
            gang.reason = gang.message = ""

    def _group_of(self, gang: Gang) -> tuple[str, ...]:
        """The gang and every gang of its gang group: what one of its events may unblock."""
        siblings = gang.spec.gang_group if gang.spec is not None else ()
        return (gang.key, *(s for s in siblings if s != gang.key))

    def _siblings_waiting(self, gang: Gang) -> tuple[str, str]:
        """Why a gang group cannot complete yet: (reason, message), or ('', '') when it
        might. Every sibling must exist with enough members, and what the whole group still
        needs must fit in the cluster's free totals (plus what the group already reserved),
        so members of a group that can never fit together do not take turns holding
        reservations."""
        spec = gang.spec
        if spec is None or not spec.gang_group:
            return "", ""
        wanted: ResourceList = {}
        reusable: ResourceList = {}
        for key in spec.gang_group:
            member = self.gangs.get(key)
            if member is None or member.spec is None:
                return "WaitingForMembers", f"gang group member {key} does not exist yet"
            h = holdings(member, self.cache)
            need, roles = shortfall(member.spec, h.held, h.held_by_role, member.satisfied_once)
            if (need or roles) and h.live < member.spec.min_member:
                return "WaitingForMembers", (
                    f"gang group member {key} has {h.live} of {member.spec.min_member} members"
                )
            add_into(wanted, least_requests(h.pending, need))
            wg = self.permit.get(key)
            if wg is not None:
                for uid in wg.reserved:
                    pod = self.cache.pods.get(uid)
                    if pod is not None:
                        add_into(reusable, pod.requests)
        short = shortage(self.cache, wanted, reusable)
        if short is None:
            return "", ""
        res, amount, free = short
        return "Unschedulable", (
            f"gang group {', '.join(spec.gang_group)} needs {format_amount(res, amount)} {res} "
            f"together; {format_amount(res, max(free, 0))} free in ready nodes"
        )

    def _volumes_waiting(self, gang: Gang, pending: list[Pod]) -> str:
        """A member whose claims keep it from being scheduled at all (missing, or unbound and
        not WaitForFirstConsumer) holds the whole gang back: no member is placed or bound
        until it can be. Returns the message (kube-scheduler's for that pod), or ''."""
        spec = gang.spec
        if spec is None or spec.invalid_reason or "VolumeBinding" not in self.config.filters:
            return ""
        volumes = self.cache.volumes
        waiting = [p for p in pending if p.volumes.claims and volumes.waiting(p)]
        if not waiting:
            return ""
        first = waiting[0]
        return (
            f"{len(waiting)}/{len(pending)} pending pods of the gang wait for their volumes, "
            f"so no member is bound: {first.key}: {self.finder.diagnose(first)}"
        )

    def _note_bound(self, gang: Gang) -> None:
        """A member was bound: has the gang now been satisfied (once)?"""
        spec = gang.spec
        if spec is None:
            return
        t = gang.tally
        bound = t.bound + t.count(MemberState.SUCCEEDED)
        if spec.quorum(bound, t.held_by_role):
            gang.satisfied_once = True
            gang.reason, gang.message = "Scheduled", f"{bound} member(s) bound"

    def _may_complete(self, gang: Gang) -> bool:
        """Enough members exist (overall and per role) for the gang to reach quorum: it no
        longer waits for members (O(roles))."""
        spec = gang.spec
        if spec is None:
            return False
        return spec.quorum(gang.tally.live, gang.tally.live_by_role)

    def _has_pending(self, gang: Gang) -> bool:
        return gang.tally.queued > 0

    def _sort_key(self, gang: Gang) -> SortKey:
        prio = gang.tally.max_priority()
        return (0 if gang.part_bound else 1, -prio, gang.timestamp(), gang.key)

    def _timeout(self, spec: GangSpec | None) -> float:
        cfg = self.config
        if cfg.schedule_timeout_override_seconds is not None:
            return cfg.schedule_timeout_override_seconds
        if spec is not None and spec.timeout_seconds is not None:
            return spec.timeout_seconds
        return cfg.default_schedule_timeout_seconds

    def _backoff(self, gang: Gang) -> float:
        cfg = self.config
        exp = min(gang.attempts - 1, 30)
        return float(min(cfg.backoff_initial_seconds * (2**exp), cfg.backoff_max_seconds))

    def _fail(self, gang: Gang, reason: str, message: str, wake: Wake) -> None:
        now = self.clock.now()
        gang.reason, gang.message = reason, message
        until = now
        if wake is Wake.CLUSTER:
            gang.attempts += 1
            gang.last_failure = now
            until = now + self._backoff(gang)
        elif reason == "WaitingForMembers":
            # Members arriving one by one retry it at most this often (a gang of thousands is
            # not tried, and its pending pods told why, at every pod); the member that may
            # complete it wakes it at once (``_may_complete``).
            until = now + self.config.backoff_initial_seconds
        self.queue.requeue(gang.key, self._sort_key(gang), until, wake)

    def _satisfied(self, key: str) -> bool:
        gang = self.gangs.get(key)
        if gang is None or gang.spec is None:
            return False
        t = gang.tally
        need, roles = shortfall(gang.spec, t.held, t.held_by_role, gang.satisfied_once)
        return need == 0 and not roles

    def _gate(self, gang: Gang) -> bool:
        """Permit: may this gang bind? Its own quorum, and every gang of its gang group; a
        preemptor only once its victims are gone."""
        if self.awaiting.get(gang.key) or not self._satisfied(gang.key):
            return False
        siblings = gang.spec.gang_group if gang.spec else ()
        return all(self._satisfied(s) for s in siblings if s != gang.key)

    def _permit(self, gang: Gang, attempt: Attempt) -> list[Decision]:
        out: list[Decision] = []
        now = self.clock.now()
        key = gang.key
        if attempt.placements or key in self.permit:
            if self._gate(gang):
                out.append(self._bind(gang, attempt.placements, attempt.domain))
                siblings = gang.spec.gang_group if gang.spec else ()
                for s in siblings:
                    sg = self.gangs.get(s)
                    if s != key and sg is not None and s in self.permit and self._gate(sg):
                        out.append(self._bind(sg, {}))
            else:
                deadline = now + self._timeout(gang.spec)
                wg = self.permit.wait(key, attempt.placements, deadline)
                why = (
                    "waiting for its gang group"
                    if attempt.satisfied
                    else "holding a partial gang (NonStrict) until quorum"
                )
                out.append(GangWaiting(key, len(wg.reserved), wg.deadline, why))
                gang.reason, gang.message = "Waiting", why
        if attempt.unplaced:
            gang.reason, gang.message = "Unschedulable", attempt.message
            out.append(
                GangUnschedulable(
                    key, tuple(_ref(p) for p in attempt.unplaced), "Unschedulable", attempt.message
                )
            )
            gang.attempts += 1
            until = now + self._backoff(gang)
            self.queue.requeue(key, self._sort_key(gang), until, Wake.CLUSTER)
        elif key not in self.permit:
            gang.attempts = 0  # bound: the backoff starts afresh
        return out

    def _preempt(self, gang: Gang, h: Holdings, why: str) -> Preempt | str:
        """The gang failed for want of capacity: evict lower-priority gangs for it, if that
        lets it fit (core/preemption.py). The placements are assumed at once (over the
        victims, so no one else takes what they free) and held at Permit until the victims
        are gone or ``preemption_hold_seconds`` pass. Otherwise, why not when pods of lower
        priority run (else '')."""
        spec = gang.spec
        if not self.config.preemption or spec is None or gang.key in self.permit or not h.pending:
            return ""
        priority = gang_priority(h.pending)
        if not any(p < priority for p in self.cache.counted_priorities):
            return ""
        if not spec.preempt:
            return "not eligible due to the PodGroup's preemptionPolicy=Never"
        if any(p.preemption_policy == "Never" for p in h.pending):
            return "not eligible due to preemptionPolicy=Never"
        plan = None
        if not self._fits_nowhere(h.pending):
            plan = self.preemptor.plan(gang, h, priority, self.awaited_by.keys())
        if plan is None:
            return (
                f"no running pods of lower priority (below {priority}) whose eviction would "
                "make room for the whole gang"
            )
        # Assumed with the victims lifted, so the placements take the devices the victims
        # free; the victims are counted again on their own devices until they are gone.
        going = [uid for u in plan.victims for uid in u.uids] + list(plan.awaited)
        for uid in going:
            self.cache.lift(uid)
        for uid, node in plan.placements.items():
            self.cache.assume(uid, node)
        for uid in going:
            self.cache.restore(uid)
        now = self.clock.now()
        deadline = now + self.config.preemption_hold_seconds
        self.permit.wait(gang.key, dict(plan.placements), deadline)
        waiting = {uid for u in plan.victims for uid in u.uids} | set(plan.awaited)
        self.awaiting[gang.key] = waiting
        for uid in waiting:
            self.awaited_by.setdefault(uid, set()).add(gang.key)
        self.preemptions += 1
        victims = self._evict([(u.gang, p) for u in plan.victims for p in u.pods])
        pods = self.cache.pods
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
            Binding(_ref(pods[uid]), node) for uid, node in sorted(plan.placements.items())
        )
        return Preempt(gang.key, priority, nominations, victims, deadline, message)

    def _evict(self, chosen: list[tuple[str, Pod]]) -> tuple[Victim, ...]:
        """The victims (each with its unit's gang key) are asked to be evicted: from now on
        they count as being deleted, and a Strict gang among them is scheduled whole again."""
        for _, victim in chosen:
            vg = self.gangs.get(victim.group) if victim.group else None
            if vg is not None and vg.spec is not None and vg.spec.mode is GangMode.STRICT:
                # evicted whole: its replacements are scheduled whole again, not one by one
                vg.satisfied_once = False
                vg.has_bound = False  # not part-way bound: it queues by its priority
        for _, victim in chosen:
            self.evictions.asked(victim.uid)
            self.pod_upsert(victim)  # counted as being deleted from now on
        marked = self.evictions.marked
        return tuple(Victim(_ref(p), p.node_name, p.priority, key, marked(p)) for key, p in chosen)

    def _finish_evictions(self, now: float) -> list[Decision]:
        """Carry out the evictions due (core/eviction.py): each victim with its unit, a
        Strict gang or gang group whole; one decision per unit."""
        ev = self.evictions
        units: dict[str, dict[str, Pod]] = {}  # unit key ('pod:<uid>' alone) -> victims
        for uid in ev.due(now):
            pod = self.cache.pods.get(uid)
            if pod is None or not ev.running(pod):
                continue
            key = self.preemptor.unit_key(pod)
            unit = units.setdefault(key or PLAIN_PREFIX + uid, {})
            gang = self.gangs.get(pod.group) if key else None
            spec = gang.spec if gang is not None else None
            if spec is None or not (spec.gang_group or spec.mode is GangMode.STRICT):
                unit[uid] = pod
                continue
            for k in spec.gang_group or (pod.group,):
                g = self.gangs.get(k)
                for m in g.members if g is not None else ():
                    p = self.cache.pods.get(m)
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
            out.append(Evict(owner, self._evict([(owner, p) for p in pods]), message))
        return out

    def _device_conflicts(self) -> list[Decision]:
        """GPU devices over-committed by what running pods recorded (core/cache.py)."""
        out: list[Decision] = []
        for uid, (node, devices) in sorted(self.cache.take_conflicts().items()):
            pod = self.cache.pods.get(uid)
            info = self.cache.nodes.get(node)
            if pod is None or info is None or info.gpus is None:
                continue
            used = ", ".join(
                f"device {i} at {info.gpus.used[i] / 10:g}%" for i in sorted(set(devices))
            )
            what = "recorded on" if pod.gpu_devices else "left only"
            out.append(
                DeviceConflict(
                    pod.group,
                    _ref(pod),
                    node,
                    devices,
                    f"GPU devices of node {node} over-committed by the device records of "
                    f"the pods running there ({used}); this pod's GPUs are {what} "
                    f"device(s) {', '.join(map(str, devices))}; the records are kept as they "
                    "are",
                )
            )
        return out

    def _reserve_due(self, gang: Gang, h: Holdings) -> bool:
        """The gang failed for want of capacity: has it waited long enough for a reservation,
        with no gang before it in queue order holding the reservation?"""
        after = self.config.reservation_after_seconds
        if after is None or gang.spec is None or gang.schedule_start is None or not h.pending:
            return False
        if self.clock.now() - gang.schedule_start < after:
            return False
        current = self.reserve.current
        if current is not None and current.gang != gang.key:
            holder = self.gangs.get(current.gang)
            if (
                holder is not None
                and holder.spec is not None
                and holder.tally.queued
                and self._sort_key(holder) <= self._sort_key(gang)
            ):
                return False  # the holder comes first
        return True

    def _reserve(self, gang: Gang, h: Holdings) -> None:
        """The gang failed for want of capacity and is due a reservation (``_reserve_due``):
        reserve the nodes where it will fit soonest (core/reservation.py), or refresh its
        reservation."""
        now = self.clock.now()
        start = gang.schedule_start
        if start is None or self._fits_nowhere(h.pending):
            return  # (no eviction could make room: the search would find nothing)
        current = self.reserve.current
        priority = gang_priority(h.pending)
        runtimes: dict[str, float | None] = {}

        def end_of(u: Unit) -> float | None:
            if u.gang not in runtimes:
                s = self.specs.get(u.gang) if u.gang else None
                runtimes[u.gang] = s.expected_runtime_seconds if s is not None else None
            runtime = runtimes[u.gang]
            if runtime is None:
                return None
            return max(self.started.get(p.uid, p.created) for p in u.pods) + runtime

        def keep_first(u: Unit) -> tuple[float, ...]:
            # keep (do not wait for) the pods expected to end last: those without a declared
            # run time, youngest first, then the latest declared ends
            end = end_of(u)
            start = max(self.started.get(p.uid, p.created) for p in u.pods)
            return (0.0, -start) if end is None else (1.0, -end)

        self.reserve.current = None  # the search sees the cluster without any reservation
        plan = self.preemptor.plan(gang, h, priority + 1, self.awaited_by.keys(), keep_first)
        if plan is None or not (plan.victims or plan.awaited):
            self.reserve.current = current
            return
        ends = [end_of(u) for u in plan.victims]
        ready_at = (
            None if any(e is None for e in ends) else max((e or now for e in ends), default=now)
        )
        since = current.since if current is not None and current.gang == gang.key else now
        awaited = sum(len(u.pods) for u in plan.victims)
        waited = now - start
        self.reserve.current = Reservation(
            gang.key,
            priority,
            since,
            need_by_node(plan.placements, self.cache.pods),
            ready_at,
            f"waited {waited:.0f}s for capacity; waiting for {awaited} running pod(s) to end",
        )

    def _reservation_view(self, key: str) -> dict[str, Any]:
        r = self.reserve.current
        if r is None or r.gang != key:
            return {}
        return {
            "reserved_nodes": r.nodes,
            "reserved_since": r.since,
            "reservation_reason": r.reason,
        }

    def _reservation_changed(self, exists: bool) -> None:
        if exists:
            self.finder.add_filter(self.reserve)
        else:
            self.finder.remove_filter(self.reserve)

    def _unreserve(self, key: str) -> None:
        r = self.reserve.current
        if r is not None and r.gang == key:
            self.reserve.current = None

    def _victim_gone(self, uid: str) -> None:
        for key in sorted(self.awaited_by.pop(uid, ())):
            left = self.awaiting.get(key)
            if left is not None:
                left.discard(uid)
                if not left:
                    gang = self.gangs.get(key)
                    if gang is not None:
                        self.queue.activate(key, self._sort_key(gang))  # tick binds it

    def _bind(self, gang: Gang, placements: dict[str, str], where: str = "") -> BindGang:
        r = self.reserve.current
        if r is not None and r.gang == gang.key:
            self.reserve.current = None  # it starts: the reservation has done its work
        reserved = dict(self.permit.release(gang.key))
        reserved.update(placements)
        if where:
            gang.placed_in = where  # the topology domain, for the PodGroup's status
        gang.reason = "Binding"
        gang.message = f"binding {len(reserved)} pod(s)" + (f" in {where}" if where else "")
        pods = self.cache.pods
        bindings = tuple(
            Binding(_ref(pods[uid]), node, self.cache.devices_of(uid))
            for uid, node in sorted(reserved.items())
            if uid in pods
        )
        volumes = self.cache.volumes.prebind(uid for uid in sorted(reserved) if uid in pods)
        return BindGang(gang.key, bindings, volumes)

    def _release(self, key: str, reason: str, message: str) -> list[Decision]:
        """Give back everything a waiting gang holds. Idempotent."""
        for uid in self.awaiting.pop(key, ()):
            keys = self.awaited_by.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self.awaited_by[uid]
        reserved = self.permit.release(key)
        if not reserved:
            return []
        pods = self.cache.pods
        refs = tuple(_ref(pods[u]) for u in sorted(reserved) if u in pods)
        for uid in reserved:
            self.cache.forget(uid)
        gang = self.gangs.get(key)
        if gang is not None:
            self._fail(gang, reason, message, Wake.CLUSTER)
        self.queue.wake(Wake.CLUSTER)
        return [GangTimedOut(key, refs, message, reason)]
