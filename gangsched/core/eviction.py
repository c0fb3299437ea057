"""Evictions decided and not yet carried out. An eviction decided is an eviction carried out,
across crashes, restarts and changes of leader.

A preemption (core/preemption.py) evicts its victims in two phases (the adapter,
kube/write/preemptor.py): it first marks every victim (a ``DisruptionTarget`` condition, status
``True``, reason ``PreemptionByScheduler``, whose message begins with the scheduler's name and a
colon, as kube-scheduler's does), and deletes none before every mark is written. The mark is the
durable record of the decision: it lives on the pod, so whichever process leads next reads it.

The rule, from pod events, carried out at the next ``tick``:

- a pod that is bound, neither finished nor being deleted, and carries this scheduler's mark is
  the victim of an eviction decided and not carried out (the process that decided it crashed or
  lost its lease between the marks and the deletes): it is evicted now. So is a victim whose
  delete failed in this process, marked or not, after a backoff (5 s, doubling up to 5 min),
  for as long as it runs;
- its unit goes with it, as preemption chose it: a Strict gang (or a gang group) is evicted
  whole, every running member marked and deleted, so that it never keeps running below its
  minMember; a NonStrict gang gives up only the members named (preemption took only those above
  its minMember); a pod outside this scheduler's gangs goes alone;
- the decision stands even if the gang that asked for it is gone meanwhile: its victims were
  told they are being preempted, and part of a Strict gang evicted is the one outcome gangsched
  never leaves. A preemptor still pending is scheduled again like any gang;
- marks written by other schedulers (another name before the colon) are never acted on.
"""

from __future__ import annotations

from gangsched.core.model import Pod

__all__ = ["Evictions"]

RETRY_FIRST = 5.0
RETRY_MAX = 300.0


class Evictions:
    """Victims this process asked to evict, and evictions due to be carried out."""

    def __init__(self, scheduler_name: str) -> None:
        self._prefix = f"{scheduler_name}: "
        # Victims asked to be deleted whose deletion the watch has not shown yet: they count
        # as being deleted already (not toward their gang's quorum, never victims twice).
        self.evicting: set[str] = set()
        self._due: dict[str, float] = {}  # victim uid -> when to evict it (again)
        self._failures: dict[str, int] = {}

    def marked(self, pod: Pod) -> bool:
        """The pod carries this scheduler's preemption mark."""
        return pod.disruption.startswith(self._prefix)

    def running(self, pod: Pod) -> bool:
        """Bound, neither finished nor being deleted, and not asked to be evicted already."""
        return (
            bool(pod.node_name)
            and not pod.terminal
            and not pod.deleting
            and pod.uid not in self.evicting
        )

    def seen(self, pod: Pod, now: float) -> None:
        """A pod event, as the watch shows it: an unfinished eviction (this scheduler's mark on
        a running pod) is due now, unless a retry is already planned."""
        if pod.deleting or pod.terminal or not pod.node_name:
            self.gone(pod.uid)  # the watch says it is on its way out (or never ran)
        elif self.marked(pod) and pod.uid not in self.evicting:
            self._due.setdefault(pod.uid, now)

    def asked(self, uid: str) -> None:
        """The adapter is asked to evict the pod."""
        self.evicting.add(uid)
        self._due.pop(uid, None)

    def failed(self, uid: str, now: float) -> None:
        """The pod could not be deleted: evict it again after a backoff."""
        self.evicting.discard(uid)
        n = self._failures.get(uid, 0) + 1
        self._failures[uid] = n
        self._due[uid] = now + min(RETRY_MAX, RETRY_FIRST * 2 ** (n - 1))

    def gone(self, uid: str) -> None:
        """The pod is being deleted, finished or gone: nothing more to do."""
        self.evicting.discard(uid)
        self._due.pop(uid, None)
        self._failures.pop(uid, None)

    def due(self, now: float) -> list[str]:
        """The victims due to be evicted now (taken off the list), in uid order."""
        if not self._due:
            return []
        out = sorted(uid for uid, at in self._due.items() if at <= now)
        for uid in out:
            del self._due[uid]
        return out

    def next_due(self) -> float | None:
        return min(self._due.values(), default=None)
