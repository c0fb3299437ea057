"""The core's single entry point: cluster events in, decisions out.

Synchronous and deterministic: the same events, in the same order, with the same clock give
the same decisions. Adapters (the Kubernetes watch loop, the simulator) call the event methods
as things happen, ``schedule_one`` while it returns work, and ``tick`` at ``next_wakeup``.

Lifecycle of a gang's members: pending -> reserved (assumed in the cache) -> either bound
(``BindGang`` sent; the adapter confirms through ``pod_upsert`` with a node name, or reports
``bind_failed``) or released (rolled back in the cycle, or released at the Permit deadline).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.clock import Clock
from gangsched.core.config import CoreConfig
from gangsched.core.cycle import (
    GangCycle,
    MemberOrder,
    gated_message,
)
from gangsched.core.decisions import (
    Decision,
    DeviceConflict,
    GangUnschedulable,
    pod_ref,
)
from gangsched.core.extended import ExtendedResources
from gangsched.core.framework import SUCCESS
from gangsched.core.gang import PLAIN_PREFIX, Gang, Holdings, holdings, is_pending
from gangsched.core.gpu import MILLI
from gangsched.core.leaderfirst import Holds
from gangsched.core.lifecycle import Lifecycle
from gangsched.core.model import DisruptionBudget, GangSpec, Node, Pod, SchedulerError
from gangsched.core.nodefinder import NodeFinder
from gangsched.core.permit import PermitMap
from gangsched.core.plugins.gpu_devices import GPUDevices
from gangsched.core.plugins.noderesources_fit import NodeResourcesFit
from gangsched.core.plugins.task_topology import bucket_order
from gangsched.core.preemption import Preemptor
from gangsched.core.profile import build_finder
from gangsched.core.queue import Wake
from gangsched.core.resourceclaims import Claim as ResourceClaim
from gangsched.core.resourceclaims import CounterTotal, Device, DeviceClass, DeviceId
from gangsched.core.resources import GPU
from gangsched.core.status import GroupStatus, MemberCounts, counted, group_status
from gangsched.core.steps.book import GangBook
from gangsched.core.steps.gates import GroupGate, Intake, VolumeGate
from gangsched.core.steps.permit import Permit
from gangsched.core.steps.place import Placement
from gangsched.core.steps.preempt import Preemption
from gangsched.core.steps.quarantine import HOLD_MOST, Quarantine, held_message, record_of
from gangsched.core.steps.quarantine import REASON as QUARANTINED
from gangsched.core.steps.replay import FailureReplay, FailureReport
from gangsched.core.steps.reserve import Reservations
from gangsched.core.steps.turn import Step, Turn
from gangsched.core.tally import GroupTally, MemberState, member_state
from gangsched.core.volumes import (
    Claim,
    CSINode,
    PersistentVolume,
    StorageClass,
    VolumeCatalog,
)

__all__ = ["GangView", "Gauges", "Scheduler"]


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


# The filters a gang taken from its backoff is checked with before a placement
# (Scheduler.freed_could_help): the same arithmetic as placement's.
_FIT = NodeResourcesFit()
_DEVICES = GPUDevices()


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
        # DRA extended resources: requests a DeviceClass serves become claims (core/extended.py)
        self.extended = ExtendedResources(self.cache)
        self._extended_state: tuple[tuple[str, str], ...] = ()
        # The gangs, their specs and the queue (core/steps/book.py), shared by the steps.
        self.book = book = GangBook(config, clock)
        self.gangs = book.gangs
        self.specs = book.specs
        self.queue = book.queue
        self.permit = PermitMap()
        self.finder = finder or build_finder(self.cache, config, book.spec_of)
        self.cycle = GangCycle(
            self.cache,
            self.finder,
            member_order or (lambda g, pods: bucket_order(g.spec, pods)),
            config.topology_levels,
        )
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
        # The gang cycle's steps (core/steps/), each owning its state.
        self.preemption = Preemption(
            book,
            config,
            clock,
            self.cache,
            self.permit,
            self.finder,
            self.preemptor,
            self.pod_upsert,
        )
        self.reservations = Reservations(
            book, config, clock, self.cache, self.finder, self.preemptor, self.preemption
        )
        self.replay = FailureReplay(
            book,
            config,
            clock,
            self.cache,
            self.finder,
            self.permit,
            self.preemption,
            self.reservations,
        )
        # Room held for the members to come of leader-first gangs (core/leaderfirst.py).
        self.holds = Holds(self.cache, lambda: self.queue.wake(Wake.CLUSTER))
        book.on_gone.append(self.holds.release_key)
        self.preemption.on_hold = self.holds.install
        # leader-first leaders seen bound (after a restart, by an earlier process): their
        # members' room is held again at the next tick if they are alone (Holds.rebuild)
        self._bound_leaders: set[str] = set()
        self.permit_step = Permit(
            book, clock, self.cache, self.permit, self.preemption, self.reservations, self.holds
        )
        self.steps: tuple[Step, ...] = (
            Intake(),
            Quarantine(book, clock),
            GroupGate(book, self.cache, self.permit),
            VolumeGate(book, config, self.cache, self.finder),
            self.replay,
            Placement(clock, self.cache, self.finder, self.cycle, self.reservations, self.holds),
            self.preemption,
            self.reservations,
            FailureReport(book, self.cache, self.finder, self.replay, self.reservations),
            self.permit_step,
        )
        # What the steps own, as the scheduler's views and tests read it.
        self.awaiting = self.preemption.awaiting
        self.awaited_by = self.preemption.awaited_by
        self.evictions = self.preemption.evictions
        self.evicting = self.evictions.evicting
        self.reserve = self.reservations.filter
        self.started = self.reservations.started
        self.failures = self.replay.memo
        self.cycles = 0
        # The gang the cycle under way decides (None outside a gang's turn): the one to hold
        # back if the cycle raises (core/steps/quarantine.py).
        self.deciding: str | None = None
        book.freed_seq = lambda: self.cache.freed_seq
        # How many times a gang's spec was set or removed (what start forecasts read changed)
        self.spec_changes = 0
        # Gangs that ran and lost members (core/lifecycle.py).
        self.lifecycle = Lifecycle(self.cache, clock, lambda uid: uid in self.awaited_by)

    def freed_could_help(self, gang: Gang, now: float) -> bool:
        """Whether a node freed since the gang last failed has room, by the NodeResourcesFit
        and GPUDevices filters, for one of its pending members, and the cluster's free
        totals for the members it needs (a strict gang's prefilter); or, for a gang that
        would look for victims, room for a member once the node's pods of lower priority
        are gone (a preemption that was not possible before places a member on a node that
        gained room); or its attempt would make its reservation; or it has not been placed
        for ``backoffMaxSeconds``. A gang the queue takes ahead of its backoff, with nothing
        else to do, is placed only then: otherwise it fails at once, as its placement (and
        its preemption) would on what was freed (what else a cluster event can change for
        it, through other nodes' pods, is covered by a placement at least every
        ``backoffMaxSeconds``, as often as its backoff allows)."""
        if gang.tried_at is None or now - gang.tried_at >= self.config.backoff_max_seconds:
            return True
        cache = self.cache
        freed = cache.freed_since(gang.freed_seen)
        if not freed:
            return False
        if self.reservations.turn_come(gang):
            return True  # its attempt makes or remakes the reservation
        nodes = cache.nodes
        infos = [i for n in freed if (i := nodes.get(n)) is not None and i.node is not None]
        asks = self._asks(gang)
        if not asks:
            return True  # (no member waits: nothing to rule out)
        h: Holdings | None = None
        for pod in asks:
            if any(
                _FIT.filter(pod, info) is SUCCESS and _DEVICES.filter(pod, info) is SUCCESS
                for info in infos
            ):
                # room for a member, but not yet for all it needs (a gang's pods end one by
                # one): its attempt would fail in the prefilter, its message changed only in
                # the free amount it names (rewritten on every member's pod at each end)
                h = holdings(gang, cache)
                if not self.cycle.short_of_capacity(gang, h):
                    return True
                break
        return self._victims_could_help(gang, infos, h)

    def _asks(self, gang: Gang) -> tuple[Pod, ...]:
        """One pending member of the gang for each distinct ask (requests, GPU demand): the
        members of a gang mostly ask alike. Kept on the gang until a member changes (an idle
        retry checks it at every freed node, and a waiting gang's members seldom change)."""
        memo = gang.asks
        version = gang.tally.version
        if memo is not None and memo[0] == version:
            return memo[1]
        pods, assumed = self.cache.pods, self.cache.assumed
        asked: list[Pod] = []
        for uid in gang.members:
            pod = pods.get(uid)
            if pod is None or member_state(pod, uid in assumed) is not MemberState.PENDING:
                continue
            if not any(a.requests == pod.requests and a.gpu == pod.gpu for a in asked):
                asked.append(pod)
        gang.asks = (version, tuple(asked))
        return gang.asks[1]

    def _victims_could_help(self, gang: Gang, freed: list[NodeInfo], h: Holdings | None) -> bool:
        """Whether the gang would look for victims, and a freed node has room for one of its
        pending members once the node's pods of lower priority are gone (``h``: its holdings,
        if already walked)."""
        cache = self.cache
        top = gang.tally.max_priority()  # no member preempts with more
        if not self.config.preemption or not any(p < top for p in cache.counted_priorities):
            return False
        pending = (h if h is not None else holdings(gang, cache)).pending
        priority = self.preemption.priority_for(gang, pending)
        if priority is None:
            return False
        pods = cache.pods
        for info in freed:
            lower = [
                uid
                for uid in info.pods
                if (p := pods.get(uid)) is not None and p.node_name and p.priority < priority
            ]
            for uid in lower:
                cache.lift(uid)
            try:
                if any(
                    _FIT.filter(pod, info) is SUCCESS and _DEVICES.filter(pod, info) is SUCCESS
                    for pod in pending
                ):
                    return True
            finally:
                for uid in lower:
                    cache.restore(uid)
        return False

    @property
    def preemptions(self) -> int:
        """Preemptions decided over the process's life."""
        return self.preemption.preemptions

    def node_upsert(self, node: Node) -> None:
        self.cache.upsert_node(node)
        self._extended_changed()
        self.queue.wake(Wake.CLUSTER)

    def node_delete(self, name: str) -> list[Decision]:
        """A node went away. Gangs waiting at Permit with reservations on it are released and
        retried; bindings already sent are left to their outcome (``bind_failed`` or the
        pod's update), so no pod is ever placed twice."""
        lost = set(self.cache.remove_node(name))
        self._extended_changed()
        out: list[Decision] = []
        for key in self.permit.waiting_gangs():
            wg = self.permit.get(key)
            if wg is not None and lost & wg.reserved.keys():
                out.extend(
                    self.permit_step.release(
                        key, "Released", f"node {name} was deleted while reserved"
                    )
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

    # ---- events: Dynamic Resource Allocation --------------------------------------------
    # Devices (ResourceSlices), DeviceClasses and ResourceClaims decide where pods with
    # resource claims fit (core/claimstate.py); any change may help a gang that failed.
    def resource_slice_upsert(
        self,
        key: str,
        devices: Iterable[Device],
        counters: tuple[CounterTotal, ...] = (),
    ) -> None:
        """A slice's devices, or a partitionable pool's counter sets (driver, pool, set,
        counter, total)."""
        self.cache.resource_claims.upsert_slice(key, devices, counters)
        self.queue.wake(Wake.CLUSTER)

    def resource_slice_delete(self, key: str) -> None:
        self.cache.resource_claims.remove_slice(key)

    def device_class_upsert(self, device_class: DeviceClass) -> None:
        self.cache.resource_claims.upsert_class(device_class)
        self._extended_changed()
        self.queue.wake(Wake.CLUSTER)

    def device_class(self, name: str) -> DeviceClass | None:
        """The DeviceClass as last watched (the claim writer copies its configuration)."""
        return self.cache.resource_claims.classes.get(name)

    def device_class_delete(self, name: str) -> None:
        self.cache.resource_claims.remove_class(name)
        self._extended_changed()

    def device_class_refused(self, name: str, reason: str) -> None:
        """A DeviceClass the reader refused (naming the field): claims of it wait, saying so."""
        self.cache.resource_claims.refuse_class(name, reason)
        self._extended_changed()
        self.queue.wake(Wake.CLUSTER)

    def resource_claim_upsert(self, claim: ResourceClaim) -> None:
        catalog = self.cache.resource_claims
        owner = claim.made_for
        was = catalog.owned(owner) if owner else ""
        catalog.upsert_claim(claim)
        if owner and was != claim.key:
            self._reapply(owner)  # the claim made for the pod's extended resources
        self.queue.wake(Wake.CLUSTER)

    def device_holder(self, node: str, device: DeviceId) -> str:
        """The resource claim whose written allocation (as watched) holds the device on the
        node, '' when none does."""
        return self.cache.resource_claims.holder(node, device)

    def resource_claim_refused(self, key: str, reason: str) -> None:
        """A ResourceClaim the reader refused (naming the field): its pods wait, saying so."""
        self.cache.resource_claims.refuse_claim(key, reason)
        self.queue.wake(Wake.CLUSTER)

    def resource_claim_delete(self, key: str) -> None:
        catalog = self.cache.resource_claims
        old = catalog.claims.get(key)
        catalog.remove_claim(key)
        if old is not None and old.made_for:
            self._reapply(old.made_for)
        self.queue.wake(Wake.CLUSTER)

    def _reapply(self, uid: str) -> None:
        """The pod's extended resources are asked through another claim now: it is taken in
        again as last read."""
        pod = self.cache.pods.get(uid)
        if pod is not None and pod.extended:
            self.pod_upsert(pod)

    def _extended_changed(self) -> None:
        """Which DeviceClass serves the extended resources pods ask for may have changed (a
        class, or whether a ready node offers them): the pods asking are taken in again."""
        if not self.extended.asking:
            return
        state = self.extended.state()
        if state == self._extended_state:
            return
        self._extended_state = state
        for uid in list(self.extended.asking):
            self._reapply(uid)

    def _storage_changed(self, changed: bool) -> None:
        if changed:
            self.queue.wake(Wake.CLUSTER)

    # ---- events: pods ------------------------------------------------------------------
    def pod_upsert(self, pod: Pod) -> None:
        if pod.extended or pod.uid in self.extended.asking:
            pod = self.extended.apply(pod, pod.scheduler_name == self.config.scheduler_name)
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
            phase, bound = counted(pod.phase.value, bool(pod.node_name), pod.deleting)
            tally.put(pod.uid, phase, bound, pod.scheduler_name == name)
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
        if pod.terminal or pod.deleting:
            self.holds.leader_gone(gang, pod.uid)
        elif (
            pod.leader_first is not None
            and pod.node_name
            and gang.hold is None
            and (old is None or not old.node_name)
        ):
            self._bound_leaders.add(pod.uid)  # hold its room again, if it is alone (tick)
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
            self.queue.activate(key, self.book.sort_key(gang))
            # A new member, or a member whose last scheduling gate was lifted, may be what
            # the gang (or its gang group) waits for.
            if new_member or (old is not None and old.gates):
                self.queue.wake(
                    None, self.book.group_of(gang), at_once=self.book.may_complete(gang)
                )
            elif old is not None and old.scheduler_error and not pod.scheduler_error:
                # the record of a failure was removed: the gang is tried again now
                self.queue.wake(None, (key,), at_once=True)
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
            self.preemption.victim_gone(pod.uid)

    def pod_delete(self, uid: str) -> None:
        self.started.pop(uid, None)
        self.evictions.gone(uid)
        self.extended.gone(uid)
        pod = self.cache.pods.get(uid)
        counted = bool(self.cache.node_of(uid))
        self.cache.remove_pod(uid)
        if pod is not None:
            self.holds.leader_gone(self.gangs.get(pod.group), uid)
            self._ungroup(pod)
            self._leave(pod)
            self._member_changed(pod, None)
        self.preemption.victim_gone(uid)  # after the lifecycle saw it go as a victim
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
        for lost in loss.restart if loss is not None else ():
            pod = self.cache.pods.get(lost.uid)
            if pod is not None and not pod.deleting:
                self.pod_upsert(replace(pod, deleting=True))
                self.lifecycle.restarting.add(lost.uid)

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
        self.holds.leader_gone(gang, uid)  # a leader that did not bind holds no room
        now = self.clock.now()
        gang.reason, gang.message = "BindFailed", message
        gang.attempts += 1
        gang.last_failure = now
        self.queue.backoff(key, self.book.sort_key(gang), now + self.book.backoff(gang))

    # ---- events: gangs -----------------------------------------------------------------
    def gang_upsert(self, spec: GangSpec) -> None:
        self.spec_changes += 1
        self.specs[spec.key] = spec
        gang = self.gangs.get(spec.key)
        if gang is None:
            gang = Gang(spec.key, spec, first_seen=self.clock.now())
            self.gangs[spec.key] = gang
        gang.spec = spec
        if self._has_pending(gang):
            self.queue.activate(spec.key, self.book.sort_key(gang))
        self.queue.wake(None, self.book.group_of(gang), at_once=self.book.may_complete(gang))

    def gang_delete(self, key: str) -> list[Decision]:
        self.spec_changes += 1
        self.specs.pop(key, None)
        self.reservations.unreserve(key)
        gang = self.gangs.get(key)
        out = self.permit_step.release(key, "Released", f"PodGroup {key} was deleted")
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
        out.extend(self.preemption.finish_evictions(now))
        out.extend(self._device_conflicts())
        for key in self.preemption.ready():
            gang = self.gangs.get(key)
            if gang is not None and key in self.permit and self.permit_step.gate(gang):
                self.deciding = key  # (binding a preemptor is deciding it)
                out.append(self.permit_step.bind(gang, {}))
                if key not in self.queue and holdings(gang, self.cache).pending:
                    # members the preemption did not place (beyond its quorum): tried now
                    self.queue.activate(key, self.book.sort_key(gang))
                self.deciding = None
        out.extend(self.permit_step.expire(now, self.config.preemption_hold_seconds))
        self._rebuild_holds(now)
        for gang in self.holds.expired(now):
            hold = gang.hold
            assert hold is not None
            self.holds.release(gang)
            gang.message = (
                f"the room held in {hold.domain} for {hold.slots} member(s) to come was given "
                f"back after {self.book.timeout(gang.spec):g}s without them"
            )
        self.queue.flush()
        return out

    def _rebuild_holds(self, now: float) -> None:
        """Leaders of leader-first gangs found bound alone, their members not come: their
        room is held again until their gang's timeout after their binding."""
        if not self._bound_leaders:
            return
        uids, self._bound_leaders = self._bound_leaders, set()
        for uid in sorted(uids):
            pod = self.cache.pods.get(uid)
            gang = self.gangs.get(pod.group) if pod is not None and pod.group else None
            if pod is None or gang is None or gang.hold is not None:
                continue
            bound = pod.bound_at or self.started.get(uid, now)
            deadline = bound + self.book.timeout(gang.spec)
            if deadline > now:
                self.holds.rebuild(
                    gang, holdings(gang, self.cache), pod, deadline, self.cycle.hold_beside
                )

    def schedule_one(self) -> list[Decision] | None:
        """Run one gang cycle: the gang at the head of the queue goes through the steps
        (core/steps/) in order until one ends the cycle. None when there is nothing to
        schedule right now."""
        self.deciding = None
        out = self.tick()
        key = self.queue.pop()
        if key is None:
            return out or None
        self.deciding = key
        gang = self.gangs.get(key)
        if gang is None:
            return out
        now = self.clock.now()
        if self.queue.popped_idle and not self.freed_could_help(gang, now):
            self.book.fail(gang, gang.reason, gang.message, Wake.CLUSTER)
            return out
        gang.tried_at = now
        self.cycles += 1
        turn = Turn(gang, holdings(gang, self.cache), out)
        for step in self.steps:
            if step.run(turn):
                break
        return turn.out

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
                self.holds.next_deadline(),
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
            **self.reservations.view(key),
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

    def hold_back(
        self, key: str, hold_seconds: float, error: str
    ) -> tuple[SchedulerError, GangUnschedulable] | None:
        """Deciding gang ``key`` raised ``error`` (a failure of gangsched's own, the cycle left
        part-way): the record of it for the gang's members not bound to a node (the count
        after theirs; not decided again for ``hold_seconds``, doubled for each failure before
        it, HOLD_MOST at most), and the decision that tells them why; None when no such
        member is left. It walks every pod, trusting none of the gang's own indexes, and
        changes nothing but the gang's reason: the caller writes the record to the API server
        and stops this core, and the next core reads it with the pods
        (core/steps/quarantine.py)."""
        name = self.config.scheduler_name
        members = [
            p
            for p in self.cache.pods.values()
            if (p.group == key or (not p.group and PLAIN_PREFIX + p.uid == key))
            and p.scheduler_name == name
            and not p.node_name
            and not p.terminal
            and not p.deleting
        ]
        if not members:
            return None
        last = record_of(members)
        count = (last.count if last is not None else 0) + 1
        hold = min(hold_seconds * 2 ** min(count - 1, 30), HOLD_MOST)
        record = SchedulerError(count, self.clock.now() + hold, error)
        message = held_message(record)
        gang = self.gangs.get(key)
        if gang is not None:
            gang.reason, gang.message = QUARANTINED, message
        refs = tuple(pod_ref(p) for p in members)
        return record, GangUnschedulable(key, refs, QUARANTINED, message)

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
            self.reservations.unreserve(key)
        elif gang.members:
            # A gang that waits says how many members it has: look at it again.
            self.queue.wake(None, (key,))
        if key not in self.permit:
            # The last attempt's message counted members that are no longer all there: drop
            # it, so the status says what the members are (see core/status.py) until the next
            # attempt speaks again.
            gang.reason = gang.message = ""

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

    def _has_pending(self, gang: Gang) -> bool:
        return gang.tally.queued > 0

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
                    pod_ref(pod),
                    node,
                    devices,
                    f"GPU devices of node {node} over-committed by the device records of "
                    f"the pods running there ({used}); this pod's GPUs are {what} "
                    f"device(s) {', '.join(map(str, devices))}; the records are kept as they "
                    "are",
                )
            )
        return out
