"""FragmentationGradient: place a pod where it least increases the expected GPU fragmentation.

The idea is fragmentation gradient descent (FGD, Weng et al., "Beware of Fragmentation:
Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent", USENIX ATC'23). Against
the recent mix of GPU requests (``GpuMix``: request classes ``m`` with shares ``p(m)``), a GPU
node's fragmentation for one class is the free GPU capacity that class could not use there:

- all of the node's free milli-GPUs when the class cannot run on the node at all (too little
  CPU or memory left, a GPU model it does not accept, not enough devices with room for it);
- otherwise the free milli of the devices that cannot serve the class's per-device demand
  (for whole-GPU classes: every partly used device).

The node's expected fragmentation is the sum over classes of ``p(m)`` times that. A pod is
rated by how much placing it raises its node's expected fragmentation (on the best device(s)
for it there), and the scorer installs the same device choice as the cache's device policy, so
the device the score assumed is the device the pod gets. Pods that accept only some GPU models
are classes of their own, so spending a scarce model on a pod that accepts any model raises the
fragmentation of the classes that need that model.

Raw scores are minus the increase; ``normalize`` maps them to 0..100 over the feasible nodes
(higher is better). CPU-only pods are rated too: taking CPU or memory from a GPU node can leave
its free GPUs unusable for the classes that need that CPU or memory.

Pods whose GPUs come through Dynamic Resource Allocation (claims asking plain counts of one
device class) are rated the same way, as that many whole GPUs on the node's devices of the
class (a device held by a written or chosen allocation counts as used), and join the mix as
such a class; the search that picks their devices is the claims'.

Speed: a node's state for this computation is its GPU model, its devices' usage (sorted), and
which classes its free CPU and memory still fit; results are memoised by state, so nodes in
the same state cost one computation, and memos are dropped only when the mix moves.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import SKIP, SUCCESS, CycleState, Status
from gangsched.core.gpu import MILLI, MODEL_LABEL, GpuDemand, NodeGpus, best_fit
from gangsched.core.gpu_mix import GpuMix, MixWeights, claims_class, request_class
from gangsched.core.model import Pod
from gangsched.core.resources import CPU, MEMORY

__all__ = ["FragmentationGradient", "usable"]

# A raw score below this marks a node where the pod's GPU demand does not fit on the devices.
_UNFIT = -1e18
# Memo sizes past which a memo is dropped and rebuilt (bounded memory).
_MEMO_LIMIT = 200_000

# (count, milli, cpu, memory) of the pod being scored.
_PodKey = tuple[int, int, int, int]
# (milli, count, share): the classes a node state can host, grouped by per-device demand.
_FitVec = tuple[tuple[int, int, float], ...]
# (increase, usage levels of the devices chosen) for one node state; levels None: no fit.
_Result = tuple[float, tuple[int, ...] | None]
# (GPU model, devices' usage sorted, CPU left, memory left): a node's state for the score.
_State = tuple[str, tuple[int, ...], int, int]


def usable(usage: Sequence[int], milli: int, count: int) -> int:
    """Free milli-GPUs a class of ``count`` devices x ``milli`` could use on devices with
    ``usage`` (sorted ascending): the free milli of the devices with room for ``milli``, when
    there are at least ``count`` of them; else 0."""
    if milli >= MILLI:
        empty = 0
        for u in usage:
            if u:
                break
            empty += 1
        return MILLI * empty if empty >= count else 0
    limit = MILLI - milli
    total = 0
    n = 0
    for u in usage:
        if u > limit:
            break
        total += MILLI - u
        n += 1
    return total if n >= count else 0


class FragmentationGradient:
    """Normalizing scorer; see the module docstring."""

    name: str = "FragmentationGradient"

    def __init__(
        self, cache: ClusterCache, window: int = 1000, model_label: str = MODEL_LABEL
    ) -> None:
        self._cache = cache
        self.mix = GpuMix(window)
        self._label = model_label
        self._generation = -1
        self._share_sum = 0.0
        self._cpu_levels: list[int] = []
        self._mem_levels: list[int] = []
        # (count, milli, models, cpu rank, memory rank, share) per class of the snapshot.
        self._classes: list[tuple[int, int, frozenset[str] | None, int, int, float]] = []
        self._fit_index: dict[tuple[str, int, int], int] = {}
        self._fit_ids: dict[_FitVec, int] = {}
        self._fit_vecs: list[_FitVec] = []
        self._frag: dict[tuple[tuple[int, ...], int], float] = {}
        # Node states (GPU model, devices' usage sorted, CPU and memory left) by number, and
        # each node's state number as of its version: a node is looked at again only when it
        # changed, and results are remembered by state number.
        self._state_ids: dict[_State, int] = {}
        self._states: list[_State] = []
        self._node_state: dict[str, tuple[int, int]] = {}
        self._results: dict[_PodKey, dict[int, _Result]] = {}
        # The pod being scored, its results by state number, and the nodes scored for it
        # (whose states say which devices the score assumed, for ``device_policy``).
        self._pod: _PodKey = (0, 0, 0, 0)
        self._memo: dict[int, _Result] = {}
        self._scored: Sequence[NodeInfo] = ()
        # the device class of the pod being scored when its GPUs come through claims
        self._dra_class = ""

    def learned(self) -> GpuMix:
        """What this scorer learned from the pods it was shown (a copy): the mix."""
        return self.mix.copy()

    def learn(self, learned: object) -> None:
        """Score as the scorer whose :meth:`learned` this is did then."""
        if isinstance(learned, GpuMix):
            self.mix = learned.copy()

    # ---- the scorer ----------------------------------------------------------------------
    def pre_score(self, pod: Pod, state: CycleState) -> Status:
        cls = request_class(pod, self._label)
        devices = None
        if cls is None and pod.resource_claims:
            devices = self._cache.resource_claims.whole_devices(pod)
            if devices is not None and devices[1] > 0:
                cls = claims_class(pod, devices[1], self._label)
        self._dra_class = devices[0] if devices is not None and cls is not None else ""
        if cls is not None:
            self.mix.record(pod.uid, cls)
        weights = self.mix.weights()
        self._scored = ()
        if not weights.shares:
            return SKIP
        if weights.generation != self._generation:
            self._rebuild(weights)
        demand = pod.gpu
        req = pod.requests
        key: _PodKey = (
            demand.count if demand is not None else 0,
            min(demand.milli, MILLI) if demand is not None else 0,
            req.get(CPU, 0),
            req.get(MEMORY, 0),
        )
        if self._dra_class and devices is not None:
            key = (devices[1], MILLI, key[2], key[3])
        self._pod = key
        if len(self._states) > _MEMO_LIMIT:  # (state numbers start again: results go too)
            self._state_ids.clear()
            self._states.clear()
            self._node_state.clear()
            self._results.clear()
        memo = self._results.get(key)
        if memo is None:
            if len(self._results) > 4096:
                self._results.clear()
            memo = self._results[key] = {}
        elif len(memo) > _MEMO_LIMIT:
            memo.clear()
        self._memo = memo
        return SUCCESS

    def raw_score(self, pod: Pod, node: NodeInfo, state: CycleState) -> float:
        return self.raw_scores(pod, (node,), state)[0]

    def raw_scores(self, pod: Pod, nodes: Sequence[NodeInfo], state: CycleState) -> list[float]:
        """``raw_score`` of each node, in one loop (it runs for every feasible node of every
        pod): a node's state number is looked up by its version, its result by that number."""
        if self._dra_class:
            return [self._dra_score(node) for node in nodes]
        out: list[float] = []
        memo = self._memo
        seen = self._node_state
        whole = self._pod[0] > 0
        self._scored = nodes
        for node in nodes:
            gpus = node.gpus
            if gpus is None or node.node is None or not gpus.used:
                out.append(0.0)
                continue
            stamp = seen.get(node.name)
            if stamp is not None and stamp[0] == node.version:
                sid = stamp[1]
            else:
                left = node.left
                sid = self._state_id(
                    (
                        gpus.devices[0].model,
                        tuple(sorted(gpus.used)),
                        left.get(CPU, 0),
                        left.get(MEMORY, 0),
                    )
                )
                seen[node.name] = (node.version, sid)
            result = memo.get(sid)
            if result is None:
                result = memo[sid] = self._evaluate(self._pod, *self._states[sid])
            out.append(_UNFIT if result[1] is None and whole else -result[0])
        return out

    def _scored_levels(self, gpus: NodeGpus) -> tuple[int, ...] | None:
        """The usage levels the score chose on the node with these devices, when it was
        scored for the pod just scored and has not changed since."""
        for node in self._scored:
            if node.gpus is gpus:
                stamp = self._node_state.get(node.name)
                if stamp is None or stamp[0] != node.version:
                    return None
                result = self._memo.get(stamp[1])
                return None if result is None else result[1]
        return None

    def _state_id(self, key: _State) -> int:
        sid = self._state_ids.get(key)
        if sid is None:
            sid = self._state_ids[key] = len(self._states)
            self._states.append(key)
        return sid

    def _dra_score(self, node: NodeInfo) -> float:
        """``raw_score`` for a pod whose GPUs come through claims: the node's devices of the
        pod's class as whole GPUs, free or used."""
        n = node.node
        if n is None:
            return 0.0
        free, total = self._cache.resource_claims.device_usage(node.name, self._dra_class)
        if total <= 0:
            return _UNFIT
        usage = (0,) * free + (MILLI,) * (total - free)
        result = self._rated(node, n.labels.get(self._label, ""), usage)
        return _UNFIT if result[1] is None else -result[0]

    def _rated(self, node: NodeInfo, model: str, usage: tuple[int, ...]) -> _Result:
        """The pod being scored on a node of this GPU model and device usage (sorted), with
        the CPU and memory the node has left; remembered by that state."""
        left = node.left
        sid = self._state_id((model, usage, left.get(CPU, 0), left.get(MEMORY, 0)))
        result = self._memo.get(sid)
        if result is None:
            result = self._memo[sid] = self._evaluate(self._pod, *self._states[sid])
        return result

    def normalize(self, scores: list[float], state: CycleState) -> None:
        if not scores:
            return
        lo = min(scores)
        if lo > _UNFIT:  # (the common case: the pod fits on every node scored)
            span = max(scores) - lo
            if span <= 1e-9:
                scores[:] = [100.0] * len(scores)
            else:
                scale = 100.0 / span
                scores[:] = [(s - lo) * scale for s in scores]
            return
        fit = [s for s in scores if s > _UNFIT]
        if not fit:
            scores[:] = [0.0] * len(scores)
            return
        lo, hi = min(fit), max(fit)
        span = hi - lo
        for i, s in enumerate(scores):
            if s <= _UNFIT:
                scores[i] = 0.0
            elif span <= 1e-9:
                scores[i] = 100.0
            else:
                scores[i] = 100.0 * (s - lo) / span

    # ---- the device policy ---------------------------------------------------------------
    def device_policy(self, gpus: NodeGpus, demand: GpuDemand) -> tuple[int, ...] | None:
        """The devices the score assumed for the pod just scored on this node; for any other
        placement (a pod bound elsewhere, a what-if), the devices that raise the node's
        fragmentation least, its CPU and memory taken as no constraint."""
        milli = min(demand.milli, MILLI)
        levels = self._scored_levels(gpus)
        if levels is not None and self._pod[:2] == (demand.count, milli):
            devices = _devices_at(gpus.used, levels, milli)
            if devices is not None:
                return devices
        if demand.whole or self._generation < 0 or not gpus.used:
            return best_fit(gpus, demand)
        big = 1 << 62
        usage = tuple(sorted(gpus.used))
        _, chosen = self._evaluate(
            (demand.count, milli, 0, 0), gpus.devices[0].model, usage, big, big
        )
        if chosen is None:
            return best_fit(gpus, demand)
        return _devices_at(gpus.used, chosen, milli) or best_fit(gpus, demand)

    # ---- internals -----------------------------------------------------------------------
    def _rebuild(self, weights: MixWeights) -> None:
        self._generation = weights.generation
        shares = weights.shares
        self._share_sum = sum(p for _, p in shares)
        self._cpu_levels = sorted({c.cpu for c, _ in shares})
        self._mem_levels = sorted({c.memory for c, _ in shares})
        cpu_rank = {v: i for i, v in enumerate(self._cpu_levels)}
        mem_rank = {v: i for i, v in enumerate(self._mem_levels)}
        self._classes = [
            (c.count, c.milli, c.models, cpu_rank[c.cpu], mem_rank[c.memory], p) for c, p in shares
        ]
        self._fit_index = {}
        self._fit_ids = {}
        self._fit_vecs = []
        self._frag = {}
        self._results = {}
        self._memo = {}

    def _fit_vec(self, model: str, cpu_free: int, mem_free: int) -> int:
        """The id of the classes a node of ``model`` with this much CPU and memory free can
        host (device room aside), grouped by per-device demand."""
        ci = bisect_right(self._cpu_levels, cpu_free)
        mi = bisect_right(self._mem_levels, mem_free)
        key = (model, ci, mi)
        fid = self._fit_index.get(key)
        if fid is not None:
            return fid
        grouped: dict[tuple[int, int], float] = {}
        for count, milli, models, cr, mr, p in self._classes:
            if cr < ci and mr < mi and (models is None or model in models):
                grouped[(milli, count)] = grouped.get((milli, count), 0.0) + p
        vec = tuple(sorted((m, c, p) for (m, c), p in grouped.items()))
        fid = self._fit_ids.get(vec)
        if fid is None:
            fid = self._fit_ids[vec] = len(self._fit_vecs)
            self._fit_vecs.append(vec)
        self._fit_index[key] = fid
        return fid

    def _frag_of(self, usage: tuple[int, ...], fid: int) -> float:
        """Expected fragmentation of devices with ``usage`` (sorted) on a node that can host
        the classes of fit vector ``fid``: every class that cannot run there counts all free
        milli, every class that can counts the free milli it cannot use."""
        key = (usage, fid)
        f = self._frag.get(key)
        if f is None:
            free = 0
            for u in usage:
                if u < MILLI:
                    free += MILLI - u
            f = free * self._share_sum
            for milli, count, p in self._fit_vecs[fid]:
                f -= p * usable(usage, milli, count)
            # (rounded: equal states must compare equal, not by the order of the sums; real
            # differences are at least a milli-GPU times a share of 1 / the window)
            f = round(f, 6)
            if len(self._frag) > _MEMO_LIMIT:
                self._frag.clear()
            self._frag[key] = f
        return f

    def _evaluate(
        self, pod: _PodKey, model: str, usage: tuple[int, ...], cpu_free: int, mem_free: int
    ) -> _Result:
        """The least increase of expected fragmentation placing ``pod`` on a node in this
        state can cause, and the usage levels of the devices that achieve it."""
        count, milli, cpu, mem = pod
        before = self._frag_of(usage, self._fit_vec(model, cpu_free, mem_free))
        after_fid = self._fit_vec(model, cpu_free - cpu, mem_free - mem)
        if count <= 0:
            return self._frag_of(usage, after_fid) - before, ()
        if milli >= MILLI:
            if usage.count(0) < count:
                return 0.0, None
            after = usage[count:] + (MILLI,) * count
            return self._frag_of(after, after_fid) - before, (0,) * count
        limit = MILLI - milli
        rest = list(usage)
        placed: list[int] = []
        chosen: list[int] = []
        best_f = 0.0
        for _ in range(count):
            best: tuple[float, int] | None = None
            seen = -1
            for u in rest:
                if u > limit:
                    break
                if u == seen:
                    continue
                seen = u
                trial = list(rest)
                trial.remove(u)
                trial.extend(placed)
                trial.append(u + milli)
                f = self._frag_of(tuple(sorted(trial)), after_fid)
                # Ties go to the fuller device, as best fit would choose.
                if best is None or f < best[0] - 1e-9 or (f <= best[0] + 1e-9 and u > best[1]):
                    best = (f, u)
            if best is None:
                return 0.0, None
            best_f = best[0]
            rest.remove(best[1])
            placed.append(best[1] + milli)
            chosen.append(best[1])
        return best_f - before, tuple(chosen)


def _devices_at(used: list[int], levels: tuple[int, ...], milli: int) -> tuple[int, ...] | None:
    """Device indexes with the usage ``levels`` (the lowest index first for each level), or None
    when the devices no longer have them or have no room for ``milli``."""
    taken: list[int] = []
    for level in levels:
        if level + milli > MILLI:
            return None
        for i, u in enumerate(used):
            if u == level and i not in taken:
                taken.append(i)
                break
        else:
            return None
    return tuple(sorted(taken))
