"""Finding the best node for one pod: filter, then score.

Candidates come from the cache's indexes: a pod asking for GPUs walks only nodes where its
demand fits on devices, tightest first (emptiest first when the placement profile spreads);
any other pod walks all nodes from a rotating start. Static filter
verdicts (labels, taints, flags) are cached per (Placement, node) until a node changes, so the
members of a gang, which share one Placement, pay for them once. As in kube-scheduler, the
search stops after ``nodes_to_score`` feasible nodes and the best of those wins; ties go to the
node found first, so placements are deterministic.

Plugins that look at other pods (inter-pod affinity, topology spread, host ports, volumes) run
their PreFilter once per pod and their Filter on every candidate that passed the cheaper
filters. Normalizing scorers collect a raw score for every feasible node found and map them to
0..100 before the weighted sum picks the winner.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.framework import (
    Code,
    CycleState,
    FilterPlugin,
    NormalizingScorePlugin,
    PreFilterPlugin,
    ScorePlugin,
    Status,
)
from gangsched.core.model import Placement, Pod

__all__ = ["NodeFinder"]

# Filters whose verdict the cache's GPU candidates already guarantee (cache.gpu_candidates).
_ANSWERED_BY_GPU_INDEX = frozenset({"GPUDevices"})


class NodeFinder:
    def __init__(
        self,
        cache: ClusterCache,
        filters: Sequence[FilterPlugin | PreFilterPlugin],
        scorers: Sequence[tuple[ScorePlugin | NormalizingScorePlugin, int]],
        nodes_to_score: int = 100,
        emptiest_first: bool = False,
    ) -> None:
        self._cache = cache
        self._emptiest_first = emptiest_first
        self._filter_names = frozenset(f.name for f in filters)
        self._prefilters: list[PreFilterPlugin] = []
        self._static: list[FilterPlugin] = []
        self._dynamic: list[FilterPlugin] = []
        for f in filters:
            if isinstance(f, PreFilterPlugin):
                self._prefilters.append(f)
            elif f.static:
                self._static.append(f)
            else:
                self._dynamic.append(f)
        self._indexed: list[FilterPlugin] = []
        self._sync_indexed()
        self._scorers: list[tuple[ScorePlugin, int]] = []
        self._normalizing: list[tuple[NormalizingScorePlugin, int]] = []
        # the scorers that may score every node alike for a pod (``constant``)
        self._constant: list[tuple[ScorePlugin, int, Callable[[Pod], bool]]] = []
        # the scorers that name the few nodes scoring above 0 for a pod (``sparse``)
        self._sparse: list[tuple[Callable[[Pod], Mapping[str, float] | None], int]] = []
        for sc, w in scorers:
            if w <= 0:
                continue
            if isinstance(sc, NormalizingScorePlugin):
                self._normalizing.append((sc, w))
            elif (sparse := getattr(sc, "sparse", None)) is not None:
                self._sparse.append((sparse, w))
            else:
                self._scorers.append((sc, w))
                constant = getattr(sc, "constant", None)
                if constant is not None:
                    self._constant.append((sc, w, constant))
        self._nodes_to_score = max(1, nodes_to_score)
        self._verdicts: dict[Placement, dict[str, Status]] = {}
        # fits_nowhere's answers by (placement, requests), while no node's static attributes
        # or allocatable change
        self._nowhere: dict[tuple[Placement, tuple[tuple[str, int], ...]], bool] = {}
        self._nowhere_generation = (-1, -1)
        # diagnose's messages for pods no PreFilter looks at, by what their verdicts depend on,
        # while the cache's generation stands (a backlog of identical failing gangs costs one
        # walk of the nodes per cluster change)
        self._diagnoses: dict[Hashable, str] = {}
        self._diagnoses_generation = -1
        self._generation = -1
        self._order: list[str] = []
        self._next_start = 0
        self._searches = 0
        self._finds = 0

    def add_filter(self, f: FilterPlugin) -> None:
        """A filter the scheduler itself owns (not a configurable plugin), run last."""
        if f not in self._dynamic:
            self._dynamic.append(f)
            self._sync_indexed()

    def remove_filter(self, f: FilterPlugin) -> None:
        if f in self._dynamic:
            self._dynamic.remove(f)
            self._sync_indexed()

    def _sync_indexed(self) -> None:
        """The dynamic filters a GPU pod's candidates still need: the cache's GPU index
        yields only nodes where the pod's GPUs fit on devices, so GPUDevices would pass."""
        self._indexed = [f for f in self._dynamic if f.name not in _ANSWERED_BY_GPU_INDEX]

    @property
    def searches(self) -> int:
        """How many searches have walked the nodes from the rotating start (those for pods
        without GPUs or a node name); each moves the start by one."""
        return self._searches

    def rotate(self, searches: int) -> None:
        """Move the rotating start as ``searches`` more such searches would have: a failure
        shared by an equivalent pod (core/equivalence.py) stands for its searches, so the
        placements that follow are the ones they would have been."""
        self._refresh()
        n = len(self._order)
        if searches <= 0 or n == 0:
            return
        self._next_start = (self._next_start + searches - 1) % n + 1
        self._searches += searches

    def fits_nowhere(self, pod: Pod) -> bool:
        """No node could take ``pod`` even with nothing else on it: each node refuses it on a
        static filter (node name, labels, taints, the cordon) or has less allocatable of some
        resource than the pod requests. Evicting pods cannot help such a pod (kube-scheduler
        calls this UnschedulableAndUnresolvable on every node). Walks the nodes once, with the
        static verdicts cached per placement; the answer is kept for pods of the same
        placement and requests until a node's static attributes or allocatable change (a
        backlog of identical pods that fit nowhere costs one walk)."""
        self._refresh()
        cache = self._cache
        generation = (cache.static_generation, cache.capacity_generation)
        if generation != self._nowhere_generation:
            self._nowhere.clear()
            self._nowhere_generation = generation
        asked = tuple(sorted((r, a) for r, a in pod.requests.items() if a > 0))
        key = (pod.placement, asked)
        known = self._nowhere.get(key)
        if known is not None:
            return known
        verdicts = self._verdicts.setdefault(pod.placement, {})
        nodes = cache.nodes
        answer = True
        for name in self._order:
            info = nodes.get(name)
            if info is None or info.node is None:
                continue
            if not self._static_verdict(pod, info, verdicts).ok:
                continue
            allocatable = info.node.allocatable
            if all(allocatable.get(r, 0) >= amount for r, amount in asked):
                answer = False
                break
        if len(self._nowhere) > 10_000:
            self._nowhere.clear()
        self._nowhere[key] = answer
        return answer

    @property
    def finds(self) -> int:
        """How many times ``find`` ran."""
        return self._finds

    def observe(self, pod: Pod) -> None:
        """Show ``pod`` to the scorers as ``find`` would before walking the nodes (PreFilter,
        then PreScore), without the search: scorers that learn from the pods they are shown
        (the fragmentation score's mix of requests) see a pod whose failure an equivalent pod
        shared (core/equivalence.py) as they would have."""
        state = CycleState()
        _, failed = self._pre_filter(pod, state)
        if failed is None:
            for plugin, _ in self._normalizing:
                plugin.pre_score(pod, state)

    def learned(self) -> list[object | None]:
        """What each scorer learned from the pods it was shown (a copy; None for those that
        learn nothing): the fragmentation score's mix of requests."""
        out: list[object | None] = []
        for p, _ in (*self._normalizing, *self._scorers):
            learned = getattr(p, "learned", None)
            out.append(learned() if learned is not None else None)
        return out

    def learn(self, learned: list[object | None]) -> None:
        """Take what another finder's scorers had learned (:meth:`learned`, same
        configuration): a finder built afresh from the same cluster (a start forecast's twin)
        then scores as the one that has run all along."""
        scorers = [p for p, _ in (*self._normalizing, *self._scorers)]
        for p, state in zip(scorers, learned, strict=False):
            learn = getattr(p, "learn", None)
            if learn is not None and state is not None:
                learn(state)

    def unhonoured(self, pod: Pod) -> str:
        """The first field of ``pod`` whose filter the configuration left out, named with the
        plugin, or ''. Such a pod is refused: placing it while ignoring a required constraint
        would break a guarantee the pod spec asks for."""
        enabled = self._filter_names
        p = pod.placement
        checks = (
            ("NodeAffinity", "spec.nodeSelector", bool(p.node_selector)),
            ("NodeAffinity", "spec.affinity.nodeAffinity", p.affinity.required is not None),
            (
                "InterPodAffinity",
                "spec.affinity.podAffinity",
                bool(pod.pod_affinity.required or pod.pod_affinity.required_anti),
            ),
            (
                "PodTopologySpread",
                "spec.topologySpreadConstraints",
                any(c.when_unsatisfiable == "DoNotSchedule" for c in pod.spread),
            ),
            ("NodePorts", "hostPort", bool(pod.host_ports)),
            ("VolumeBinding", "spec.volumes", bool(pod.volumes.claims)),
            ("DynamicResources", "spec.resourceClaims", bool(pod.resource_claims)),
        )
        for plugin, field, needed in checks:
            if needed and plugin not in enabled:
                return f"{field}: the {plugin} filter is disabled in gangsched's configuration"
        return ""

    # ---- the hot path ------------------------------------------------------------------
    def find(self, pod: Pod, within: Sequence[str] | None = None) -> NodeInfo | None:
        """The best feasible node for ``pod`` in the cache as it stands, or None. ``within``
        narrows the search to those nodes (a topology domain)."""
        self._finds += 1
        self._refresh()
        verdicts = self._verdicts.setdefault(pod.placement, {})
        state = CycleState()
        stateful, failed = self._pre_filter(pod, state)
        if failed is not None:
            return None
        normalizing = [
            (p, w) for p, w in self._normalizing if p.pre_score(pod, state).code is not Code.SKIP
        ]
        dynamic = (
            self._indexed
            if pod.gpu is None  # (GPUDevices passes a pod without GPU demand)
            or (not pod.placement.node_name and within is None)
            else self._dynamic
        )
        scorers = self._scorers
        if self._constant:  # (a scorer that ranks every node alike for this pod is not asked)
            alike = {id(sc) for sc, _, constant in self._constant if constant(pod)}
            if alike:
                scorers = [(sc, w) for sc, w in scorers if id(sc) not in alike]
        bonus: dict[str, float] = {}
        for sparse, weight in self._sparse:
            table = sparse(pod)
            if table:
                for name, value in table.items():
                    bonus[name] = bonus.get(name, 0.0) + weight * value

        def search(
            candidates: Iterable[NodeInfo], filters: Sequence[FilterPlugin]
        ) -> NodeInfo | None:
            return self._search(
                pod, candidates, filters, stateful, scorers, normalizing, bonus, verdicts, state
            )

        if bonus and not pod.placement.node_name:
            # Where every node a sparse scorer names outscores every node it does not (its
            # least exceeds what all the other scorers together can give), the best feasible
            # node among those is the best of all: search them first (those in the domain,
            # for a search inside one), the rest only when none is feasible (a gang's members
            # join the nodes its members hold, while they fit).
            ceiling = 100.0 * (sum(w for _, w in scorers) + sum(w for _, w in normalizing))
            if min(bonus.values()) > ceiling:
                named = list(bonus) if within is None else [n for n in bonus if n in within]
                best = search(self._within(pod, named), self._dynamic)
                if best is not None:
                    return best
        return search(
            self._candidates(pod) if within is None else self._within(pod, within), dynamic
        )

    def _search(
        self,
        pod: Pod,
        candidates: Iterable[NodeInfo],
        dynamic: Sequence[FilterPlugin],
        stateful: Sequence[PreFilterPlugin],
        scorers: Sequence[tuple[ScorePlugin, int]],
        normalizing: Sequence[tuple[NormalizingScorePlugin, int]],
        bonus: Mapping[str, float],
        verdicts: dict[str, Status],
        state: CycleState,
    ) -> NodeInfo | None:
        """The best of the first ``nodes_to_score`` feasible ``candidates``, or None."""
        best: NodeInfo | None = None
        best_score = -1.0
        found = 0
        feasible: list[tuple[NodeInfo, float]] = []
        for info in candidates:
            # (``_feasible``, inlined: this loop runs for every candidate of every pod)
            verdict = verdicts.get(info.name)
            if verdict is None:
                verdict = self._static_verdict(pod, info, verdicts)
            if not verdict.ok:
                continue
            refused = False
            for f in dynamic:  # (a plain loop: cheaper than all() on the hot path)
                if not f.filter(pod, info).ok:
                    refused = True
                    break
            if refused:
                continue
            for sf in stateful:
                if not sf.filter_with(pod, info, state).ok:
                    refused = True
                    break
            if refused:
                continue
            found += 1
            score = bonus.get(info.name, 0.0) if bonus else 0.0
            for plugin, weight in scorers:
                score += weight * plugin.score(pod, info)
            if normalizing:
                feasible.append((info, score))
            elif score > best_score:
                best, best_score = info, score
            if found >= self._nodes_to_score:
                break
        if normalizing and feasible:
            totals = [score for _, score in feasible]
            infos = [info for info, _ in feasible]
            for norm, weight in normalizing:
                batch = getattr(norm, "raw_scores", None)  # (one call for all, where offered)
                if batch is not None:
                    raw = batch(pod, infos, state)
                else:
                    raw = [norm.raw_score(pod, info, state) for info in infos]
                norm.normalize(raw, state)
                for i, value in enumerate(raw):
                    totals[i] += weight * value
            for (info, _), score in zip(feasible, totals, strict=True):
                if score > best_score:
                    best, best_score = info, score
        return best

    def _pre_filter(
        self, pod: Pod, state: CycleState
    ) -> tuple[list[PreFilterPlugin], Status | None]:
        """Run every PreFilter: (the plugins whose Filter must run, the first failure)."""
        active: list[PreFilterPlugin] = []
        for plugin in self._prefilters:
            status = plugin.pre_filter(pod, state)
            if status.code is Code.SKIP:
                continue
            if not status.ok:
                return active, status
            active.append(plugin)
        return active, None

    def diagnose(self, pod: Pod, within: Sequence[str] | None = None) -> str:
        """Why no node fits, kube-scheduler style: '0/3 nodes are available: 2 Insufficient
        nvidia.com/gpu, 1 node(s) had untolerated taint {k: v}.' Walks every node (or those
        ``within``); call it only on failure."""
        self._refresh()
        verdicts = self._verdicts.setdefault(pod.placement, {})
        state = CycleState()
        stateful, failed = self._pre_filter(pod, state)
        key: Hashable = None
        if failed is None and not stateful:
            # (the static filters read the placement, NodeResourcesFit the requests,
            # GPUDevices the GPU demand; a filter the scheduler adds says what it reads)
            generation = self._cache.generation
            if generation != self._diagnoses_generation:
                self._diagnoses.clear()
                self._diagnoses_generation = generation
            key = (
                pod.placement,
                tuple(sorted(pod.requests.items())),
                pod.gpu,
                None if within is None else tuple(within),
                tuple(
                    memo(pod)
                    for f in self._dynamic
                    if (memo := getattr(f, "memo_key", None)) is not None
                ),
            )
            known = self._diagnoses.get(key)
            if known is not None:
                return known
        message = self._diagnose(pod, within, verdicts, state, stateful, failed)
        if key is not None:
            if len(self._diagnoses) > 1000:
                self._diagnoses.clear()
            self._diagnoses[key] = message
        return message

    def _diagnose(
        self,
        pod: Pod,
        within: Sequence[str] | None,
        verdicts: dict[str, Status],
        state: CycleState,
        stateful: list[PreFilterPlugin],
        failed: Status | None,
    ) -> str:
        reasons: Counter[str] = Counter()
        total = 0
        for name in self._order if within is None else within:
            info = self._cache.nodes.get(name)
            if info is None or info.node is None:
                continue
            total += 1
            if failed is not None:
                continue
            status = self._static_verdict(pod, info, verdicts)
            if status.ok:
                for f in self._dynamic:
                    status = f.filter(pod, info)
                    if not status.ok:
                        break
            if status.ok:
                for sf in stateful:
                    status = sf.filter_with(pod, info, state)
                    if not status.ok:
                        break
            if not status.ok:
                reasons[status.reason] += 1
        if failed is not None:
            return f"0/{total} nodes are available: {failed.reason}."
        if not reasons:
            return f"0/{total} nodes are available."
        parts = ", ".join(
            f"{n} {r}" for r, n in sorted(reasons.items(), key=lambda x: (-x[1], x[0]))
        )
        return f"0/{total} nodes are available: {parts}."

    # ---- internals ---------------------------------------------------------------------
    def _static_verdict(self, pod: Pod, info: NodeInfo, verdicts: dict[str, Status]) -> Status:
        status = verdicts.get(info.name)
        if status is not None:
            return status
        status = Status()
        for f in self._static:
            status = f.filter(pod, info)
            if not status.ok:
                break
        verdicts[info.name] = status
        return status

    def _candidates(self, pod: Pod) -> Iterable[NodeInfo]:
        wanted = pod.placement.node_name
        if wanted:
            info = self._cache.nodes.get(wanted)
            return (info,) if info is not None and info.node is not None else ()
        demand = pod.gpu
        if demand is not None:
            return self._cache.gpu_candidates(demand, self._emptiest_first)
        if pod.resource_claims:
            names = self._cache.resource_claims.candidates(pod, self._emptiest_first)
            if names is not None:
                nodes = self._cache.nodes
                return (info for n in names if (info := nodes.get(n)) is not None and info.node)
        return self._rotating()

    def _within(self, pod: Pod, names: Sequence[str]) -> Iterable[NodeInfo]:
        """The nodes of a domain: for a GPU pod those with room on devices, tightest first
        (emptiest first when spreading), as the GPU index would order them."""
        nodes = self._cache.nodes
        wanted = pod.placement.node_name
        infos = [
            info
            for n in names
            if (not wanted or n == wanted)
            and (info := nodes.get(n)) is not None
            and info.node is not None
        ]
        demand = pod.gpu
        if demand is None or wanted:
            return infos
        whole = demand.milli >= 1000
        least = demand.count if whole else demand.milli
        rank = self._cache.gpu_rank
        ranked = [
            (r, i, info) for i, info in enumerate(infos) if (r := rank(info.name, whole)) >= least
        ]
        ranked.sort(key=lambda x: (-x[0] if self._emptiest_first else x[0], x[1]))
        return [info for _, _, info in ranked]

    def _rotating(self) -> Iterable[NodeInfo]:
        order = self._order
        n = len(order)
        if n == 0:
            return
        start = self._next_start % n
        self._next_start = start + 1
        self._searches += 1
        nodes = self._cache.nodes
        for i in range(n):
            info = nodes.get(order[(start + i) % n])
            if info is not None and info.node is not None:
                yield info

    def _refresh(self) -> None:
        gen = self._cache.static_generation
        if gen != self._generation:
            self._generation = gen
            self._verdicts.clear()
            self._order = [n for n, i in self._cache.nodes.items() if i.node is not None]
