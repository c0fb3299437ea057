"""An upper bound on the GPU share any placement could allocate of a set of GPU requests.

Used on the openb experiments (``replay: sample``), where every task stays once placed: when
the demand that has arrived equals the capacity, allocating all of it would need a perfect
packing of every device. Shares of one device larger than half a GPU make that impossible: no
two fit on one device, and the rest of the device (``1000 - b`` milli-GPUs beside a share of
``b``) is usable only by shares no larger than that rest. On the openb pod lists a third of
the shares are 810 milli-GPUs, so every device holding one loses 190 unless one of the few
tasks of 160 milli-GPUs or less joins it.

For one such size ``b``, with ``K`` requests of it, ``S`` milli-GPUs asked by shares of at most
``1000 - b`` (the only requests that can use the rest), ``D`` the demand and ``C`` the
capacity: placing ``k`` of the ``K`` loses at least ``(1000 - b) k - S`` of the capacity, and
leaving the other ``K - k`` out loses their ``b (K - k)`` of the demand, so no placement
allocates more than::

    max over k in 0..K of  min(C - max(0, (1000 - b) k - S),  D - b (K - k))

The bound is the least of these over the sizes ``b`` present, and of ``C`` and ``D``. It is a
relaxation (CPU, memory, GPU models, whole-GPU requests needing several free devices on one
node and every other pairing of shares are ignored), so the best placement may be lower still;
it is never higher.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from gangsched.core.gpu import MILLI

__all__ = ["ShareBound", "share_bound"]


@dataclass(frozen=True, slots=True)
class ShareBound:
    """At most ``milli`` milli-GPUs of the ``demand`` can be allocated (``share`` of it);
    ``size`` is the share size whose lost rests set the bound (0: only capacity or demand)."""

    milli: int
    demand: int
    size: int

    @property
    def share(self) -> float:
        return self.milli / self.demand if self.demand else 1.0


def share_bound(requests: Iterable[tuple[int, int]], capacity: int) -> ShareBound:
    """The bound for ``requests`` given as ``(devices, milli per device)`` on a cluster of
    ``capacity`` milli-GPUs (module docstring)."""
    reqs = [(n, m) for n, m in requests if n > 0 and m > 0]
    demand = sum(n * min(m, MILLI) for n, m in reqs)
    best = ShareBound(min(capacity, demand), demand, 0)
    singles = Counter(m for n, m in reqs if n == 1 and MILLI // 2 < m < MILLI)
    for size, count in singles.items():
        rest = MILLI - size
        fill = sum(n * m for n, m in reqs if m <= rest)
        bound = max(
            min(capacity - max(0, rest * k - fill), demand - size * (count - k))
            for k in range(count + 1)
        )
        if bound < best.milli:
            best = ShareBound(max(0, bound), demand, size)
    return best
