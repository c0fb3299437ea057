"""Volume-aware placement: the VolumeBinding, VolumeRestrictions, VolumeZone and
NodeVolumeLimits plugins (table cases written from kube-scheduler v1.36's behaviour), the
volume catalog's assumptions, and gangs with volumes through the Scheduler."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

import pytest

from gangsched.core.cache import ClusterCache, NodeInfo
from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, ClaimBinding, Decision, GangUnschedulable
from gangsched.core.framework import Code, CycleState, PreFilterPlugin, Status
from gangsched.core.model import (
    AffinityTerm,
    GangSpec,
    LabelSelector,
    Node,
    Pod,
    PodPhase,
    PodVolumes,
)
from gangsched.core.plugins import DEFAULT_FILTERS, FILTERS
from gangsched.core.plugins.node_volume_limits import NodeVolumeLimits
from gangsched.core.plugins.volume_binding import VolumeBinding
from gangsched.core.plugins.volume_restrictions import VolumeRestrictions
from gangsched.core.plugins.volume_zone import VolumeZone
from gangsched.core.scheduler import Scheduler
from gangsched.core.volumes import (
    BIND_CONFLICT,
    NO_PROVISIONER,
    NODE_CONFLICT,
    PV_NOT_EXIST,
    Claim,
    ClaimRef,
    CSINode,
    PersistentVolume,
    StorageClass,
    TopologyTerm,
)
from tests.core.builders import field as match_field
from tests.core.builders import make_node, make_pod, req, term

NS = "ml"
HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
RWO = frozenset({"ReadWriteOnce"})
RWX = frozenset({"ReadWriteMany"})
RWOP = frozenset({"ReadWriteOncePod"})
GI = 2**30
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
RWOP_REASON = (
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"
)
ZONE_CONFLICT = "node(s) had no available volume zone"
EXCEEDED = "node(s) exceed max volume count"

LOCAL = StorageClass("local", NO_PROVISIONER, "WaitForFirstConsumer")
DYNAMIC = StorageClass("fast", "csi.example.com", "WaitForFirstConsumer")
IMMEDIATE = StorageClass("standard", "csi.example.com", "Immediate")
ZONED = StorageClass(
    "zoned",
    "csi.example.com",
    "WaitForFirstConsumer",
    (TopologyTerm(((ZONE, ("a",)),)),),
)


def on_host(host: str) -> tuple[AffinityTerm, ...]:
    return (term(req(HOST, "In", host)),)


def claim(name: str, **kw: object) -> Claim:
    base: dict[str, object] = {"uid": f"uid-{name}", "access_modes": RWO, "request": GI}
    base.update(kw)
    return Claim(NS, name, **base)  # type: ignore[arg-type]


def bound(name: str, volume: str, **kw: object) -> Claim:
    return claim(name, volume_name=volume, bind_completed=True, phase="Bound", **kw)


def pv(name: str, **kw: object) -> PersistentVolume:
    base: dict[str, object] = {"capacity": GI, "access_modes": RWO, "storage_class": "local"}
    base.update(kw)
    return PersistentVolume(name, **base)  # type: ignore[arg-type]


def vpod(
    name: str, *claims: str, ephemeral: Iterable[str] = (), group: str = "", gpus: int = 0
) -> Pod:
    built = make_pod(name).cpu("1")
    if gpus:
        built = built.gpus(gpus)
    eph = tuple(ephemeral)
    return replace(
        built.obj(),
        namespace=NS,
        group=group,
        volumes=PodVolumes(claims=(*claims, *eph), ephemeral=eph),
    )


def node(name: str, **labels: str) -> Node:
    built = make_node(name).gpus(4).cpu("32").memory("128Gi").label(HOST, name)
    for k, v in labels.items():
        built = built.label(k, v)
    return built.node()


@dataclass
class World:
    """A cluster cache with storage objects, and the four plugins built on it."""

    claims: tuple[Claim, ...] = ()
    volumes: tuple[PersistentVolume, ...] = ()
    classes: tuple[StorageClass, ...] = (LOCAL, DYNAMIC, IMMEDIATE, ZONED)
    csi_nodes: tuple[CSINode, ...] = ()
    nodes: tuple[Node, ...] = ()
    placed: tuple[tuple[Pod, str], ...] = ()  # pods counted on nodes (bound)
    cache: ClusterCache = field(default_factory=ClusterCache)

    def __post_init__(self) -> None:
        cat = self.cache.volumes
        for sc in self.classes:
            cat.upsert_class(sc)
        for c in self.claims:
            cat.upsert_claim(c)
        for v in self.volumes:
            cat.upsert_volume(v)
        for cn in self.csi_nodes:
            cat.upsert_csi_node(cn)
        for n in self.nodes:
            self.cache.upsert_node(n)
        for p, where in self.placed:
            self.cache.upsert_pod(replace(p, node_name=where, phase=PodPhase.RUNNING))

    def info(self, name: str) -> NodeInfo:
        return self.cache.nodes[name]


def run(plugin: PreFilterPlugin, pod: Pod, info: NodeInfo) -> tuple[Status, Status | None]:
    """PreFilter, then (when it asked for it) Filter on one node."""
    state = CycleState()
    pre = plugin.pre_filter(pod, state)
    if not pre.ok:
        return pre, None
    return pre, plugin.filter_with(pod, info, state)


def test_volume_plugins_are_registered_in_kube_scheduler_order() -> None:
    names = ["VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"]
    for name in names:
        assert name in FILTERS
    positions = [DEFAULT_FILTERS.index(n) for n in names]
    assert positions == sorted(positions)
    assert DEFAULT_FILTERS.index("NodePorts") < positions[0]


@pytest.mark.parametrize(
    "make",
    [VolumeBinding, VolumeRestrictions, VolumeZone, NodeVolumeLimits],
    ids=lambda c: c.__name__,
)
def test_a_pod_without_volumes_is_skipped(make: Callable[[ClusterCache], PreFilterPlugin]) -> None:
    world = World()
    plugin = make(world.cache)
    pod = replace(make_pod("gpu").gpus(8).obj(), namespace=NS)
    assert plugin.pre_filter(pod, CycleState()).code is Code.SKIP


# ---- VolumeBinding: PreFilter --------------------------------------------------------------


@dataclass(frozen=True)
class PreCase:
    claims: tuple[Claim, ...]
    pod: Pod
    code: Code
    reason: str = ""


PRE_CASES = {
    "missing claim": PreCase(
        (), vpod("p", "data"), Code.UNRESOLVABLE, 'persistentvolumeclaim "data" not found'
    ),
    "missing ephemeral claim": PreCase(
        (),
        vpod("p", ephemeral=["p-scratch"]),
        Code.UNRESOLVABLE,
        'waiting for ephemeral volume controller to create the persistentvolumeclaim "p-scratch"',
    ),
    "lost claim": PreCase(
        (claim("data", volume_name="gone", phase="Lost"),),
        vpod("p", "data"),
        Code.UNRESOLVABLE,
        'persistentvolumeclaim "data" bound to non-existent persistentvolume "gone"',
    ),
    "claim being deleted": PreCase(
        (claim("data", deleting=True, storage_class="fast"),),
        vpod("p", "data"),
        Code.UNRESOLVABLE,
        'persistentvolumeclaim "data" is being deleted',
    ),
    "ephemeral claim of another pod": PreCase(
        (claim("p-scratch", storage_class="fast", owner_uid="someone-else"),),
        vpod("p", ephemeral=["p-scratch"]),
        Code.UNRESOLVABLE,
        f"PVC {NS}/p-scratch was not created for pod {NS}/p (pod is not owner)",
    ),
    "ephemeral claim of the pod": PreCase(
        (claim("p-scratch", storage_class="fast", owner_uid="uid-p"),),
        vpod("p", ephemeral=["p-scratch"]),
        Code.SUCCESS,
    ),
    "unbound claim without class": PreCase(
        (claim("data"),), vpod("p", "data"), Code.UNRESOLVABLE, UNBOUND_IMMEDIATE
    ),
    "unbound claim of an Immediate class": PreCase(
        (claim("data", storage_class="standard"),),
        vpod("p", "data"),
        Code.UNRESOLVABLE,
        UNBOUND_IMMEDIATE,
    ),
    "unbound claim of a missing class": PreCase(
        (claim("data", storage_class="nowhere"),),
        vpod("p", "data"),
        Code.UNRESOLVABLE,
        UNBOUND_IMMEDIATE,
    ),
    "claim naming a volume, binding not completed": PreCase(
        (claim("data", storage_class="local", volume_name="pv-1"),),
        vpod("p", "data"),
        Code.UNRESOLVABLE,
        UNBOUND_IMMEDIATE,
    ),
    "bound claim": PreCase((bound("data", "pv-1"),), vpod("p", "data"), Code.SUCCESS),
    "unbound WaitForFirstConsumer claim": PreCase(
        (claim("data", storage_class="local"),), vpod("p", "data"), Code.SUCCESS
    ),
    "one immediate claim among good ones": PreCase(
        (bound("a", "pv-1"), claim("b", storage_class="local"), claim("c")),
        vpod("p", "a", "b", "c"),
        Code.UNRESOLVABLE,
        UNBOUND_IMMEDIATE,
    ),
}


@pytest.mark.parametrize("case", PRE_CASES.values(), ids=PRE_CASES.keys())
def test_volume_binding_prefilter(case: PreCase) -> None:
    world = World(claims=case.claims)
    status = VolumeBinding(world.cache).pre_filter(case.pod, CycleState())
    assert (status.code, status.reason) == (case.code, case.reason)


# ---- VolumeBinding: Filter -----------------------------------------------------------------


@dataclass(frozen=True)
class FilterCase:
    claims: tuple[Claim, ...]
    volumes: tuple[PersistentVolume, ...]
    pod: Pod
    node: Node
    reason: str = ""  # empty: feasible


N1 = node("n1", **{ZONE: "a"})
N2 = node("n2", **{ZONE: "b"})
WFFC = claim("data", storage_class="local")

FILTER_CASES = {
    "bound volume on the node": FilterCase(
        (bound("data", "pv-1"),), (pv("pv-1", node_affinity=on_host("n1")),), vpod("p", "data"), N1
    ),
    "bound volume elsewhere": FilterCase(
        (bound("data", "pv-1"),),
        (pv("pv-1", node_affinity=on_host("n2")),),
        vpod("p", "data"),
        N1,
        NODE_CONFLICT,
    ),
    "bound volume without node affinity": FilterCase(
        (bound("data", "pv-1"),), (pv("pv-1"),), vpod("p", "data"), N1
    ),
    "bound volume whose affinity names the node by field": FilterCase(
        (bound("data", "pv-1"),),
        (pv("pv-1", node_affinity=(term(fields=(match_field("In", "n1"),)),)),),
        vpod("p", "data"),
        N1,
        NODE_CONFLICT,  # kube-scheduler matches a volume's affinity against labels only
    ),
    "bound volume with an empty term list": FilterCase(
        (bound("data", "pv-1"),),
        (pv("pv-1", node_affinity=()),),
        vpod("p", "data"),
        N1,
        NODE_CONFLICT,
    ),
    "bound to a volume that does not exist": FilterCase(
        (bound("data", "pv-gone"),), (), vpod("p", "data"), N1, PV_NOT_EXIST
    ),
    "static volume on the node": FilterCase(
        (WFFC,), (pv("pv-1", node_affinity=on_host("n1")),), vpod("p", "data"), N1
    ),
    "static volume elsewhere, class cannot provision": FilterCase(
        (WFFC,), (pv("pv-1", node_affinity=on_host("n2")),), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "no volume at all, class cannot provision": FilterCase(
        (WFFC,), (), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "volume too small": FilterCase(
        (WFFC,), (pv("pv-1", capacity=GI // 2),), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "volume lacks an access mode": FilterCase(
        (replace(WFFC, access_modes=frozenset({"ReadWriteOnce", "ReadOnlyMany"})),),
        (pv("pv-1"),),
        vpod("p", "data"),
        N1,
        BIND_CONFLICT,
    ),
    "volume has more access modes": FilterCase(
        (WFFC,),
        (pv("pv-1", access_modes=frozenset({"ReadWriteOnce", "ReadWriteMany"})),),
        vpod("p", "data"),
        N1,
    ),
    "block volume for a filesystem claim": FilterCase(
        (WFFC,), (pv("pv-1", volume_mode="Block"),), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "volume attributes class differs": FilterCase(
        (WFFC,), (pv("pv-1", attributes_class="gold"),), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "volume of another class": FilterCase(
        (WFFC,), (pv("pv-1", storage_class="other"),), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "released volume": FilterCase(
        (WFFC,), (pv("pv-1", phase="Released"),), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "volume being deleted": FilterCase(
        (WFFC,), (pv("pv-1", deleting=True),), vpod("p", "data"), N1, BIND_CONFLICT
    ),
    "volume claimed by another claim": FilterCase(
        (WFFC,),
        (pv("pv-1", claim_ref=ClaimRef(NS, "other", "uid-other")),),
        vpod("p", "data"),
        N1,
        BIND_CONFLICT,
    ),
    "claim selector matches": FilterCase(
        (replace(WFFC, selector=LabelSelector((("tier", "ssd"),))),),
        (pv("pv-1", labels={"tier": "ssd"}),),
        vpod("p", "data"),
        N1,
    ),
    "claim selector does not match": FilterCase(
        (replace(WFFC, selector=LabelSelector((("tier", "ssd"),))),),
        (pv("pv-1", labels={"tier": "hdd"}),),
        vpod("p", "data"),
        N1,
        BIND_CONFLICT,
    ),
    "pre-bound volume on the node": FilterCase(
        (WFFC,),
        (pv("pv-1", node_affinity=on_host("n1"), claim_ref=ClaimRef(NS, "data", "")),),
        vpod("p", "data"),
        N1,
    ),
    "pre-bound volume elsewhere hides an available one here": FilterCase(
        (WFFC,),
        (
            pv("pv-1", node_affinity=on_host("n2"), claim_ref=ClaimRef(NS, "data", "uid-data")),
            pv("pv-2", node_affinity=on_host("n1")),
        ),
        vpod("p", "data"),
        N1,
        BIND_CONFLICT,
    ),
    "pre-bound volume elsewhere, the class provisions here": FilterCase(
        (claim("data", storage_class="fast"),),
        (
            pv(
                "pv-1",
                storage_class="fast",
                node_affinity=on_host("n2"),
                claim_ref=ClaimRef(NS, "data"),
            ),
        ),
        vpod("p", "data"),
        N1,
    ),
    "two claims, one volume": FilterCase(
        (WFFC, claim("logs", storage_class="local")),
        (pv("pv-1"),),
        vpod("p", "data", "logs"),
        N1,
        BIND_CONFLICT,
    ),
    "two claims, two volumes": FilterCase(
        (WFFC, claim("logs", storage_class="local")),
        (pv("pv-1"), pv("pv-2")),
        vpod("p", "data", "logs"),
        N1,
    ),
    "dynamic class provisions anywhere": FilterCase(
        (claim("data", storage_class="fast"),), (), vpod("p", "data"), N1
    ),
    "allowed topologies include the node": FilterCase(
        (claim("data", storage_class="zoned"),), (), vpod("p", "data"), N1
    ),
    "allowed topologies exclude the node": FilterCase(
        (claim("data", storage_class="zoned"),), (), vpod("p", "data"), N2, BIND_CONFLICT
    ),
    "claim already given this node": FilterCase(
        (claim("data", storage_class="fast", selected_node="n1"),), (), vpod("p", "data"), N1
    ),
    "claim already given another node": FilterCase(
        (claim("data", storage_class="fast", selected_node="n2"),),
        (),
        vpod("p", "data"),
        N1,
        BIND_CONFLICT,
    ),
    "bound volume elsewhere and no volume to bind: affinity first": FilterCase(
        (bound("a", "pv-1"), claim("b", storage_class="local")),
        (pv("pv-1", node_affinity=on_host("n2")),),
        vpod("p", "a", "b"),
        N1,
        NODE_CONFLICT,
    ),
}


@pytest.mark.parametrize("case", FILTER_CASES.values(), ids=FILTER_CASES.keys())
def test_volume_binding_filter(case: FilterCase) -> None:
    world = World(claims=case.claims, volumes=case.volumes, nodes=(N1, N2))
    pre, status = run(VolumeBinding(world.cache), case.pod, world.info(case.node.name))
    assert pre.ok, pre
    assert status is not None
    if case.reason:
        assert (status.code, status.reason) == (Code.UNRESOLVABLE, case.reason)
    else:
        assert status.ok, status


def test_smallest_fitting_volume_is_chosen() -> None:
    world = World(
        claims=(WFFC,),
        volumes=(
            pv("big", capacity=10 * GI),
            pv("small", capacity=2 * GI),
            pv("tiny", capacity=GI // 2),
        ),
        nodes=(N1,),
    )
    p = vpod("p", "data")
    world.cache.upsert_pod(p)
    world.cache.assume(p.uid, "n1")
    plan = world.cache.volumes.plan_of(p.uid)
    assert plan is not None
    assert [(c.name, v) for c, v in plan.static] == [("data", "small")]


# ---- VolumeRestrictions --------------------------------------------------------------------


def test_read_write_once_pod_claim_in_use_is_refused_everywhere() -> None:
    world = World(
        claims=(bound("solo", "pv-1", access_modes=RWOP),),
        volumes=(pv("pv-1"),),
        nodes=(N1, N2),
        placed=((vpod("holder", "solo"), "n2"),),
    )
    plugin = VolumeRestrictions(world.cache)
    for name in ("n1", "n2"):
        pre, status = run(plugin, vpod("p", "solo"), world.info(name))
        assert pre.ok
        assert status is not None
        assert (status.code, status.reason) == (Code.UNSCHEDULABLE, RWOP_REASON)


@pytest.mark.parametrize(
    ("access", "holder", "code", "reason"),
    [
        (RWOP, None, Code.SKIP, ""),  # nobody uses it
        (RWO, "n2", Code.SKIP, ""),  # only ReadWriteOncePod is exclusive
        (RWX, "n2", Code.SKIP, ""),
    ],
)
def test_volume_restrictions_prefilter(
    access: frozenset[str], holder: str | None, code: Code, reason: str
) -> None:
    placed = ((vpod("holder", "shared"), holder),) if holder else ()
    world = World(
        claims=(bound("shared", "pv-1", access_modes=access),),
        volumes=(pv("pv-1"),),
        nodes=(N1, N2),
        placed=placed,
    )
    status = VolumeRestrictions(world.cache).pre_filter(vpod("p", "shared"), CycleState())
    assert (status.code, status.reason) == (code, reason)


def test_volume_restrictions_missing_claim_and_ephemeral_claims() -> None:
    world = World(nodes=(N1,))
    plugin = VolumeRestrictions(world.cache)
    status = plugin.pre_filter(vpod("p", "data"), CycleState())
    assert (status.code, status.reason) == (
        Code.UNRESOLVABLE,
        'persistentvolumeclaim "data" not found',
    )
    # generic ephemeral volumes are VolumeBinding's business, not this plugin's
    status = plugin.pre_filter(vpod("p", ephemeral=["p-tmp"]), CycleState())
    assert status.code is Code.SKIP


def test_read_write_once_pod_claim_held_by_a_finished_pod_is_free() -> None:
    world = World(
        claims=(bound("solo", "pv-1", access_modes=RWOP),), volumes=(pv("pv-1"),), nodes=(N1,)
    )
    holder = replace(vpod("holder", "solo"), node_name="n1", phase=PodPhase.SUCCEEDED)
    world.cache.upsert_pod(holder)
    status = VolumeRestrictions(world.cache).pre_filter(vpod("p", "solo"), CycleState())
    assert status.code is Code.SKIP


# ---- VolumeZone ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ZoneCase:
    volume_labels: dict[str, str]
    node_labels: dict[str, str]
    reason: str = ""  # empty: feasible; "skip": PreFilter skips


ZONE_CASES = {
    "same zone": ZoneCase({ZONE: "a"}, {ZONE: "a"}),
    "other zone": ZoneCase({ZONE: "a"}, {ZONE: "b"}, ZONE_CONFLICT),
    "node without topology labels": ZoneCase({ZONE: "a"}, {"other": "x"}),
    "node with only a region": ZoneCase({ZONE: "a"}, {REGION: "r1"}, ZONE_CONFLICT),
    "volume in several zones": ZoneCase({ZONE: "a__b"}, {ZONE: "b"}),
    "beta volume label, GA node label": ZoneCase({BETA_ZONE: "a"}, {ZONE: "a"}),
    "beta volume label, other GA zone": ZoneCase({BETA_ZONE: "a"}, {ZONE: "c"}, ZONE_CONFLICT),
    "region mismatch": ZoneCase({REGION: "r1"}, {ZONE: "a", REGION: "r2"}, ZONE_CONFLICT),
    "zone and region match": ZoneCase({ZONE: "a", REGION: "r1"}, {ZONE: "a", REGION: "r1"}),
    "malformed zone list is ignored": ZoneCase({ZONE: "a__"}, {ZONE: "b"}, "skip"),
    "no topology label": ZoneCase({"tier": "ssd"}, {ZONE: "b"}, "skip"),
}


@pytest.mark.parametrize("case", ZONE_CASES.values(), ids=ZONE_CASES.keys())
def test_volume_zone(case: ZoneCase) -> None:
    n = Node("z", {}, labels=case.node_labels)
    world = World(
        claims=(bound("data", "pv-1"),),
        volumes=(pv("pv-1", labels=case.volume_labels),),
        nodes=(n,),
    )
    pre, status = run(VolumeZone(world.cache), vpod("p", "data"), world.info("z"))
    if case.reason == "skip":
        assert pre.code is Code.SKIP
        return
    assert pre.ok and status is not None
    if case.reason:
        assert (status.code, status.reason) == (Code.UNRESOLVABLE, case.reason)
    else:
        assert status.ok


@pytest.mark.parametrize(
    ("claims", "code", "reason"),
    [
        ((claim("data", storage_class="local"),), Code.SKIP, ""),  # WaitForFirstConsumer
        ((bound("data", "pv-gone"),), Code.UNRESOLVABLE, 'persistentvolume "pv-gone" not found'),
        (
            (claim("data", storage_class="standard"),),
            Code.UNRESOLVABLE,
            "PersistentVolume had no name",
        ),
        (
            (claim("data"),),
            Code.UNRESOLVABLE,
            "PersistentVolumeClaim had no pv name and storageClass name",
        ),
        (
            (claim("data", storage_class="nowhere"),),
            Code.UNRESOLVABLE,
            'storageclass.storage.k8s.io "nowhere" not found',
        ),
        ((), Code.UNRESOLVABLE, 'persistentvolumeclaim "data" not found'),
    ],
)
def test_volume_zone_prefilter(claims: tuple[Claim, ...], code: Code, reason: str) -> None:
    world = World(claims=claims)
    status = VolumeZone(world.cache).pre_filter(vpod("p", "data"), CycleState())
    assert (status.code, status.reason) == (code, reason)


# ---- NodeVolumeLimits ----------------------------------------------------------------------

CSI = "csi.example.com"


def csi_pv(name: str, driver: str = CSI) -> PersistentVolume:
    return pv(name, csi_driver=driver, csi_handle=f"h-{name}")


@dataclass(frozen=True)
class LimitCase:
    limits: dict[str, int] | None  # None: no CSINode
    existing: tuple[str, ...]  # claims mounted by a pod already on the node
    new: tuple[str, ...]
    reason: str = ""


LIMIT_CLAIMS = (
    bound("a", "pv-a"),
    bound("b", "pv-b"),
    bound("c", "pv-c"),
    bound("other", "pv-other"),
    bound("intree", "pv-intree"),
    claim("dyn", storage_class="fast"),
    claim("dyn2", storage_class="fast"),
    claim("nocsi", storage_class="local"),
)
LIMIT_VOLUMES = (
    csi_pv("pv-a"),
    csi_pv("pv-b"),
    csi_pv("pv-c"),
    csi_pv("pv-other", "other.example.com"),
    pv("pv-intree"),
)

LIMIT_CASES = {
    "under the limit": LimitCase({CSI: 2}, ("a",), ("b",)),
    "over the limit": LimitCase({CSI: 2}, ("a", "b"), ("c",), EXCEEDED),
    "exactly at the limit with two new": LimitCase({CSI: 2}, (), ("a", "b")),
    "two new over the limit": LimitCase({CSI: 1}, (), ("a", "b"), EXCEEDED),
    "a shared volume is counted once": LimitCase({CSI: 2}, ("a", "b"), ("a",)),
    "no CSINode": LimitCase(None, ("a", "b"), ("c",)),
    "no limit for that driver": LimitCase({"other.example.com": 0}, ("a",), ("b",)),
    "another driver's volume does not count": LimitCase({CSI: 1}, ("other",), ("a",)),
    "limit of zero": LimitCase({CSI: 0}, (), ("a",), EXCEEDED),
    "unbound claim counts for its provisioner": LimitCase({CSI: 1}, ("a",), ("dyn",), EXCEEDED),
    "two pods sharing one unbound claim count it once": LimitCase({CSI: 1}, ("dyn",), ("dyn",)),
    "two unbound claims count twice": LimitCase({CSI: 1}, ("dyn",), ("dyn2",), EXCEEDED),
    "class without provisioner does not count": LimitCase({CSI: 0}, (), ("nocsi",)),
    "in-tree volume does not count": LimitCase({CSI: 0}, (), ("intree",)),
}


@pytest.mark.parametrize("case", LIMIT_CASES.values(), ids=LIMIT_CASES.keys())
def test_node_volume_limits(case: LimitCase) -> None:
    csi = () if case.limits is None else (CSINode("n1", frozenset(case.limits), case.limits),)
    placed = ((vpod("old", *case.existing), "n1"),) if case.existing else ()
    world = World(
        claims=LIMIT_CLAIMS, volumes=LIMIT_VOLUMES, csi_nodes=csi, nodes=(N1,), placed=placed
    )
    pre, status = run(NodeVolumeLimits(world.cache), vpod("p", *case.new), world.info("n1"))
    assert pre.ok and status is not None
    if case.reason:
        assert (status.code, status.reason) == (Code.UNSCHEDULABLE, case.reason)
    else:
        assert status.ok, status


def test_node_volume_limits_missing_claim() -> None:
    world = World(nodes=(N1,))
    pre, status = run(NodeVolumeLimits(world.cache), vpod("p", "data"), world.info("n1"))
    assert pre.ok and status is not None
    assert (status.code, status.reason) == (
        Code.UNRESOLVABLE,
        f'looking up PVC {NS}/data: persistentvolumeclaim "data" not found',
    )


# ---- the catalog: assumptions ---------------------------------------------------------------


def test_assumed_volume_is_not_offered_to_the_next_pod_and_forget_frees_it() -> None:
    world = World(
        claims=(claim("d0", storage_class="local"), claim("d1", storage_class="local")),
        volumes=(pv("pv-1", node_affinity=on_host("n1")),),
        nodes=(N1,),
    )
    cache = world.cache
    first, second = vpod("a", "d0"), vpod("b", "d1")
    cache.upsert_pod(first)
    cache.upsert_pod(second)
    cache.assume(first.uid, "n1")
    assert cache.volumes.volume("pv-1") == replace(
        pv("pv-1", node_affinity=on_host("n1")), claim_ref=ClaimRef(NS, "d0", "uid-d0")
    )
    _, status = run(VolumeBinding(cache), second, world.info("n1"))
    assert status is not None and status.reason == BIND_CONFLICT
    cache.forget(first.uid)
    assert cache.volumes.volume("pv-1") == pv("pv-1", node_affinity=on_host("n1"))
    _, status = run(VolumeBinding(cache), second, world.info("n1"))
    assert status is not None and status.ok


def selected(cache: ClusterCache, name: str) -> str | None:
    found = cache.volumes.claim(NS, name)
    assert found is not None
    return found.selected_node


def test_pods_sharing_an_unbound_claim_follow_its_selected_node() -> None:
    world = World(claims=(claim("shared", storage_class="fast", access_modes=RWX),), nodes=(N1, N2))
    cache = world.cache
    a, b = vpod("a", "shared"), vpod("b", "shared")
    cache.upsert_pod(a)
    cache.upsert_pod(b)
    cache.assume(a.uid, "n2")
    assert selected(cache, "shared") == "n2"
    plugin = VolumeBinding(cache)
    assert run(plugin, b, world.info("n1"))[1] == Status(Code.UNRESOLVABLE, BIND_CONFLICT)
    assert run(plugin, b, world.info("n2"))[1] == Status()
    cache.assume(b.uid, "n2")
    assert cache.volumes.prebind([a.uid, b.uid]) == (
        ClaimBinding(NS, "shared", "uid-shared", "n2"),
    )
    cache.forget(a.uid)  # b still relies on it
    assert selected(cache, "shared") == "n2"
    cache.forget(b.uid)
    assert selected(cache, "shared") is None


def test_assumption_ends_when_the_watch_shows_it() -> None:
    world = World(claims=(claim("data", storage_class="fast"),), nodes=(N1,))
    cache = world.cache
    p = vpod("p", "data")
    cache.upsert_pod(p)
    cache.assume(p.uid, "n1")
    cache.volumes.upsert_claim(claim("data", storage_class="fast", selected_node="n1"))
    assert not cache.volumes._assumed_claims
    # the pod's plan stays known (for BindGang) until the pod is forgotten or deleted
    assert cache.volumes.plan_of(p.uid) is not None
    cache.remove_pod(p.uid)
    assert cache.volumes.plan_of(p.uid) is None


def test_pod_with_only_bound_claims_assumes_nothing() -> None:
    world = World(claims=(bound("data", "pv-1"),), volumes=(pv("pv-1"),), nodes=(N1,))
    p = vpod("p", "data")
    world.cache.upsert_pod(p)
    world.cache.assume(p.uid, "n1")
    assert world.cache.volumes.plan_of(p.uid) is None
    assert world.cache.volumes.prebind([p.uid]) == ()


# ---- gangs through the Scheduler ------------------------------------------------------------

T0 = 1000.0


class Cluster:
    def __init__(self, *nodes: Node) -> None:
        self.clock = FakeClock(T0)
        self.s = Scheduler(CoreConfig(), self.clock)
        for n in nodes:
            self.s.node_upsert(n)
        for sc in (LOCAL, DYNAMIC, IMMEDIATE, ZONED):
            self.s.storage_class_upsert(sc)

    def gang(self, name: str, min_member: int, *pods: Pod) -> None:
        self.s.gang_upsert(GangSpec(f"{NS}/{name}", min_member, created=T0))
        for p in pods:
            self.s.pod_upsert(replace(p, group=f"{NS}/{name}", created=T0))

    def run(self) -> list[Decision]:
        return self.s.run_until_idle()


def binds(out: Iterable[Decision]) -> list[BindGang]:
    return [d for d in out if isinstance(d, BindGang)]


def failures(out: Iterable[Decision]) -> list[GangUnschedulable]:
    return [d for d in out if isinstance(d, GangUnschedulable)]


def hosts(n: int) -> list[Node]:
    return [node(f"n{i}") for i in range(n)]


def test_bound_volumes_with_node_affinity_steer_a_gang() -> None:
    c = Cluster(*hosts(4))
    for i, where in enumerate(("n2", "n3")):
        c.s.volume_upsert(pv(f"pv-{i}", node_affinity=on_host(where)))
        c.s.claim_upsert(bound(f"data-{i}", f"pv-{i}"))
    c.gang("train", 2, *(vpod(f"w{i}", f"data-{i}", gpus=1) for i in range(2)))
    (bind,) = binds(c.run())
    assert {b.pod.name: b.node for b in bind.bindings} == {"w0": "n2", "w1": "n3"}
    assert bind.volumes == ()


def test_static_volumes_are_never_given_twice_in_one_cycle() -> None:
    c = Cluster(*hosts(3))
    c.s.volume_upsert(pv("pv-a", node_affinity=on_host("n1")))
    c.s.volume_upsert(pv("pv-b", node_affinity=on_host("n1")))
    for i in range(3):
        c.s.claim_upsert(claim(f"d{i}", storage_class="local"))
    c.gang("g", 3, *(vpod(f"w{i}", f"d{i}", gpus=1) for i in range(3)))
    out = c.run()
    assert binds(out) == []  # two volumes for three claims: the gang waits whole
    (fail,) = failures(out)
    assert BIND_CONFLICT in fail.message
    assert not c.s.cache.assumed
    assert not c.s.cache.volumes._assumed_volumes  # the rollback dropped every assumption
    c.s.volume_upsert(pv("pv-c", node_affinity=on_host("n2")))
    c.clock.advance(60)
    (bind,) = binds(c.run())
    chosen = {v.claim: v.volume for v in bind.volumes}
    assert sorted(chosen.values()) == ["pv-a", "pv-b", "pv-c"]
    placed = {b.pod.name: b.node for b in bind.bindings}
    by_claim = {f"d{i}": placed[f"w{i}"] for i in range(3)}
    assert by_claim[next(k for k, v in chosen.items() if v == "pv-c")] == "n2"
    assert all(v.node == by_claim[v.claim] for v in bind.volumes)


def test_wait_for_first_consumer_claims_are_provisioned_only_for_a_committed_gang() -> None:
    c = Cluster(
        *(
            replace(n, labels={**n.labels, ZONE: "a" if i < 2 else "b"})
            for i, n in enumerate(hosts(4))
        )
    )
    for i in range(4):
        c.s.claim_upsert(claim(f"ckpt-{i}", storage_class="zoned"))
    # 4 members x 4 GPUs, provisionable only in zone a (2 nodes): the gang cannot be placed
    c.gang("big", 4, *(vpod(f"b{i}", f"ckpt-{i}", gpus=4) for i in range(4)))
    out = c.run()
    assert binds(out) == []
    assert failures(out)
    assert all(cl.selected_node is None for cl in c.s.cache.volumes.claims.values())
    assert not c.s.cache.volumes._assumed_claims
    # a gang that fits: 2 members, one per zone-a node
    for i in range(2):
        c.s.claim_upsert(claim(f"small-{i}", storage_class="zoned"))
    c.gang("small", 2, *(vpod(f"s{i}", f"small-{i}", gpus=4) for i in range(2)))
    (bind,) = binds(c.run())
    assert bind.gang == f"{NS}/small"
    nodes = {b.pod.name: b.node for b in bind.bindings}
    assert sorted(nodes.values()) == ["n0", "n1"]
    assert bind.volumes == (
        ClaimBinding(NS, "small-0", "uid-small-0", nodes["s0"]),
        ClaimBinding(NS, "small-1", "uid-small-1", nodes["s1"]),
    )


def test_a_member_with_a_missing_claim_holds_the_whole_gang() -> None:
    c = Cluster(*hosts(3))
    c.s.claim_upsert(bound("data-0", "pv-0"))
    c.s.claim_upsert(bound("data-1", "pv-1"))
    c.s.volume_upsert(pv("pv-0"))
    c.s.volume_upsert(pv("pv-1"))
    # minMember 2 of 3: the two members with claims could bind, but the third waits
    c.gang("g", 2, *(vpod(f"w{i}", f"data-{i}", gpus=1) for i in range(3)))
    out = c.run()
    assert binds(out) == []
    (fail,) = failures(out)
    assert fail.reason == "Unschedulable"
    assert {p.name for p in fail.pods} == {"w0", "w1", "w2"}
    assert f'{NS}/w2: 0/3 nodes are available: persistentvolumeclaim "data-2" not found.' in (
        fail.message
    )
    assert not c.s.cache.assumed
    view = c.s.view(f"{NS}/g")
    assert view is not None and 'persistentvolumeclaim "data-2" not found' in view.message
    # the claim arrives, bound: the gang wakes and binds whole
    c.s.volume_upsert(pv("pv-2"))
    c.s.claim_upsert(bound("data-2", "pv-2"))
    c.clock.advance(60)
    (bind,) = binds(c.run())
    assert len(bind.bindings) == 3


def test_an_unbound_immediate_claim_waits_with_kube_schedulers_message() -> None:
    c = Cluster(*hosts(2))
    c.s.claim_upsert(claim("data", storage_class="standard"))
    c.gang("g", 1, vpod("w0", "data", gpus=1))
    (fail,) = failures(c.run())
    assert fail.message.endswith(f"{NS}/w0: 0/2 nodes are available: {UNBOUND_IMMEDIATE}.")
    c.s.volume_upsert(pv("pv-9", storage_class="standard"))
    c.s.claim_upsert(bound("data", "pv-9", storage_class="standard"))
    c.clock.advance(60)
    assert len(binds(c.run())) == 1


def test_read_write_once_pod_claim_shared_by_two_members_fails_the_gang() -> None:
    c = Cluster(*hosts(2))
    c.s.volume_upsert(pv("pv-1", access_modes=RWOP))
    c.s.claim_upsert(bound("solo", "pv-1", access_modes=RWOP))
    c.gang("g", 2, vpod("w0", "solo", gpus=1), vpod("w1", "solo", gpus=1))
    out = c.run()
    assert binds(out) == []
    (fail,) = failures(out)
    assert RWOP_REASON in fail.message
    assert not c.s.cache.assumed
    assert not c.s.cache.volumes.claim_users


def test_volume_limits_count_earlier_members_of_the_gang() -> None:
    c = Cluster(node("n0"))
    c.s.csinode_upsert(CSINode("n0", frozenset({CSI}), {CSI: 2}))
    for i in range(3):
        c.s.volume_upsert(csi_pv(f"pv-{i}"))
        c.s.claim_upsert(bound(f"d{i}", f"pv-{i}"))
    c.gang("g", 3, *(vpod(f"w{i}", f"d{i}", gpus=1) for i in range(3)))
    out = c.run()
    assert binds(out) == []
    (fail,) = failures(out)
    assert EXCEEDED in fail.message
    c.s.csinode_upsert(CSINode("n0", frozenset({CSI}), {CSI: 3}))
    c.clock.advance(60)
    assert len(binds(c.run())) == 1


def test_storage_events_wake_only_on_change() -> None:
    c = Cluster(*hosts(1))
    c.gang("g", 1, vpod("w0", "data", gpus=1))
    c.run()
    assert c.s.queue.state_of(f"{NS}/g") != "active"
    sc = LOCAL
    c.s.storage_class_upsert(sc)  # unchanged: nothing to retry for
    c.clock.advance(15)  # less than the periodic flush: only an event retries it
    assert c.s.run_until_idle() == []
    c.s.claim_upsert(bound("data", "pv-1"))
    c.s.volume_upsert(pv("pv-1"))
    c.clock.advance(15)
    assert len(binds(c.run())) == 1
