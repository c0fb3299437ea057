"""Equivalence classes of pending pods, and the failures they share.

Pods of one class ask for the same things (requests, GPU demand, placement: node selector,
node affinity, tolerations, node name; priority and preemption policy; a topology level) and
carry nothing that makes their fit depend on themselves alone (required inter-pod affinity,
topology spread constraints, host ports, volumes). Where other pods' required anti-affinity
terms, or default spread constraints, may select them, their namespace and labels are part of
the class too.
Two pods of one class fit on the same nodes of the same cluster: when one failed on the cache
as it stands (``ClusterCache.generation``, which moves at any change a filter reads, and the
same reservation), the next one fails the same way, with the same diagnosis. kube-scheduler
once had an equivalence cache of predicate results per node (an alpha feature, later removed);
this one keeps whole failures, so a thousand identical parked pods cost one search and one
diagnosis per cluster change, not a thousand.

A failure holds for one generation. A failed attempt leaves the cache as it found it (its
placements rolled back, its what-ifs for preemption and reservations restored) though at a
later generation, so what failed before it still holds after it; any other change of the
generation, or of the reservation, forgets everything: the memo never holds more than the
classes seen since the cluster last changed.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from gangsched.core.model import Pod

__all__ = ["Failure", "FailureMemo", "PodClass", "pod_class"]

PodClass = tuple[Hashable, ...]


def pod_class(pod: Pod, labelled: bool) -> PodClass | None:
    """The pod's equivalence class, or None when its fit depends on the pod itself.
    ``labelled``: other pods' terms (required anti-affinity, default spread constraints) may
    select pods by namespace and labels, so those belong to the class."""
    aff = pod.pod_affinity
    if (
        aff.required
        or aff.required_anti
        or pod.spread
        or pod.host_ports
        or pod.volumes.claims
        or pod.volumes.inline_csi
        or pod.volumes.ephemeral
        or pod.gpu_devices
    ):
        return None
    key: PodClass = (
        tuple(sorted(pod.requests.items())),
        pod.placement,
        pod.priority,
        pod.preemption_policy,
        pod.domain,  # a topology level keeps the pod off nodes without its label
    )
    if labelled:
        key += (pod.namespace, tuple(sorted(pod.labels.items())))
    return key


@dataclass(frozen=True, slots=True)
class Failure:
    """How a pod of the class failed: the reason and message its status got, and how many
    searches from the rotating start over the nodes it ran (``NodeFinder.searches``); then
    how many the search for a reservation that followed (and found none) ran, or None when
    it did not run (the pod had not waited long enough for one); whether the scorers were
    shown the pod (``NodeFinder.observe``) by the attempt, and by the reservation search."""

    reason: str
    message: str
    searches: int
    reserve_searches: int | None
    observed: bool = True
    reserve_observed: bool = False


class FailureMemo:
    """Failures by class, valid for one cache generation and one reservation."""

    def __init__(self) -> None:
        self._generation = -1
        self._reservation: object | None = None
        self._failures: dict[PodClass, Failure] = {}
        self.hits = 0  # attempts answered from the memo (counted by the caller)
        self.stored = 0  # failures remembered (each one a full search and diagnosis)

    def get(self, cls: PodClass, generation: int, reservation: object | None) -> Failure | None:
        if generation != self._generation or reservation is not self._reservation:
            return None
        return self._failures.get(cls)

    def put(
        self,
        cls: PodClass,
        before: int,
        after: int,
        reservation: object | None,
        failure: Failure,
    ) -> None:
        """Remember a failure found on the cache at generation ``before``. The attempt left
        the cache as it found it (a failed placement is rolled back, what-ifs are restored),
        though at generation ``after``: the failures remembered at ``before`` hold there too."""
        if reservation is not self._reservation or before != self._generation:
            self._failures.clear()
            self._reservation = reservation
        self._generation = after
        self._failures[cls] = failure
        self.stored += 1

    def clear(self) -> None:
        """Forget everything (something outside the cache that failures depend on changed)."""
        self._failures.clear()
        self._generation = -1

    def __len__(self) -> int:
        return len(self._failures)
