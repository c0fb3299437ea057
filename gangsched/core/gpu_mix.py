"""The recent mix of GPU requests: what kinds of GPU pods the scheduler has been asked to place.

Fragmentation is relative to what will be asked for next: a device with 300 milli free is
lost to a stream of 500-milli shares and perfectly usable by 200-milli ones. The
FragmentationGradient scorer measures fragmentation against this mix, as the FGD paper
(Weng et al., USENIX ATC'23) measures it against the target workload's task distribution.

A pod's **request class** is what decides where it can run on a GPU node: how many devices and
how much of each (milli-GPU), which GPU models it accepts (a required node affinity or node
selector on the GPU model label; pods that ask for a model are classes of their own), and its
CPU and memory, rounded up to a geometric bucket (8 per doubling, about 9% apart) so that
near-equal requests share a class.

``GpuMix`` keeps the classes of the last ``window`` GPU pods it was shown (each pod once) with
their counts. Its ``weights()`` is a snapshot of the class shares that moves only when the mix
has drifted by more than ``drift`` (total variation distance) from the last snapshot, so a
scorer may memoise against it.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from gangsched.core.gpu import MODEL_LABEL
from gangsched.core.model import Placement, Pod
from gangsched.core.resources import CPU, MEMORY

__all__ = [
    "GpuMix",
    "MixWeights",
    "RequestClass",
    "accepted_models",
    "bucket",
    "claims_class",
    "request_class",
]

# Buckets per doubling of a CPU or memory request.
_STEPS = 8


@dataclass(frozen=True, slots=True)
class RequestClass:
    """``count`` devices of ``milli`` each (1000: whole devices), on a GPU of one of ``models``
    (None: any model), with ``cpu`` millicores and ``memory`` bytes (bucketed)."""

    count: int
    milli: int
    models: frozenset[str] | None
    cpu: int
    memory: int


@dataclass(frozen=True, slots=True)
class MixWeights:
    """A snapshot of the mix: each class with its share (the shares add up to 1).
    ``generation`` changes whenever a new snapshot is taken."""

    generation: int
    shares: tuple[tuple[RequestClass, float], ...]


def bucket(value: int) -> int:
    """``value`` rounded up to the geometric grid (0 stays 0)."""
    if value <= 0:
        return 0
    k = math.floor(_STEPS * math.log2(value))
    while True:
        edge = math.ceil(2 ** (k / _STEPS) - 1e-6)
        if edge >= value:
            return edge
        k += 1


def accepted_models(placement: Placement, label: str = MODEL_LABEL) -> frozenset[str] | None:
    """The GPU models a pod's required node constraints allow, by the model label: a node
    selector on it, or ``In`` requirements on it in every required node affinity term (terms
    are ORed, so one term without such a requirement allows any model). None: any model."""
    allowed: frozenset[str] | None = None
    for key, value in placement.node_selector:
        if key == label:
            allowed = frozenset({value}) if allowed is None else allowed & {value}
    terms = placement.affinity.required
    if terms:
        union: set[str] = set()
        for term in terms:
            term_models: frozenset[str] | None = None
            for r in term.match_expressions:
                if r.key == label and r.operator == "In":
                    vals = frozenset(r.values)
                    term_models = vals if term_models is None else term_models & vals
            if term_models is None:
                union = set()
                break
            union |= term_models
        else:
            allowed = frozenset(union) if allowed is None else allowed & union
    return allowed


def request_class(pod: Pod, label: str = MODEL_LABEL) -> RequestClass | None:
    """The pod's request class, or None for a pod that asks for no GPU."""
    demand = pod.gpu
    if demand is None or demand.count <= 0:
        return None
    req = pod.requests
    return RequestClass(
        demand.count,
        min(demand.milli, 1000),
        accepted_models(pod.placement, label),
        bucket(req.get(CPU, 0)),
        bucket(req.get(MEMORY, 0)),
    )


def claims_class(pod: Pod, count: int, label: str = MODEL_LABEL) -> RequestClass:
    """The request class of a pod whose claims ask ``count`` whole devices of one class."""
    req = pod.requests
    return RequestClass(
        count,
        1000,
        accepted_models(pod.placement, label),
        bucket(req.get(CPU, 0)),
        bucket(req.get(MEMORY, 0)),
    )


class GpuMix:
    """The request classes of the last ``window`` GPU pods recorded, each pod counted once
    while it is in the window."""

    def __init__(self, window: int = 1000, drift: float = 0.05) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        self.window = window
        self.drift = drift
        self._recent: deque[tuple[str, RequestClass]] = deque()
        self._uids: set[str] = set()
        self._counts: dict[RequestClass, int] = {}
        self._snapshot = MixWeights(0, ())
        self._snap_counts: dict[RequestClass, float] = {}
        self._changes = 0  # records since the snapshot
        self._check_at = 0  # check the drift again once this many records happened

    def __len__(self) -> int:
        return len(self._recent)

    @property
    def counts(self) -> Mapping[RequestClass, int]:
        return self._counts

    def record(self, uid: str, cls: RequestClass) -> None:
        """Count a pod's class; a pod already in the window is not counted again."""
        if uid in self._uids:
            return
        self._recent.append((uid, cls))
        self._uids.add(uid)
        counts = self._counts
        counts[cls] = counts.get(cls, 0) + 1
        if len(self._recent) > self.window:
            old_uid, old = self._recent.popleft()
            self._uids.discard(old_uid)
            left = counts[old] - 1
            if left:
                counts[old] = left
            else:
                del counts[old]
        self._changes += 1

    def copy(self) -> GpuMix:
        """A mix of its own that says what this one says now (its snapshot included)."""
        other = GpuMix(self.window, self.drift)
        other._recent = deque(self._recent)
        other._uids = set(self._uids)
        other._counts = dict(self._counts)
        other._snapshot = self._snapshot
        other._snap_counts = dict(self._snap_counts)
        other._changes = self._changes
        other._check_at = self._check_at
        return other

    def weights(self) -> MixWeights:
        """The current snapshot, taken anew when the mix has drifted from it."""
        if self._changes and self._changes >= self._check_at:
            if not self._snapshot.shares or self._distance() > self.drift:
                self._take_snapshot()
            else:
                # Each record moves the mix by at most 2/len in total variation.
                self._check_at = self._changes + max(1, int(self.drift * len(self) / 4))
        return self._snapshot

    def _distance(self) -> float:
        total = len(self._recent)
        if not total:
            return 0.0
        snap = self._snap_counts
        d = 0.0
        for cls, n in self._counts.items():
            d += abs(n / total - snap.get(cls, 0.0))
        for cls, p in snap.items():
            if cls not in self._counts:
                d += p
        return d / 2

    def _take_snapshot(self) -> None:
        total = len(self._recent)
        shares = tuple(
            sorted(
                ((cls, n / total) for cls, n in self._counts.items()),
                key=lambda x: (-x[1], _order(x[0])),
            )
        )
        self._snap_counts = dict(shares)
        self._snapshot = MixWeights(self._snapshot.generation + 1, shares)
        self._changes = 0
        self._check_at = max(1, int(self.drift * total / 2))


def _order(cls: RequestClass) -> tuple[int, int, tuple[str, ...], int, int]:
    models = () if cls.models is None else tuple(sorted(cls.models))
    return (cls.count, cls.milli, models, cls.cpu, cls.memory)
