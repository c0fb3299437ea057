"""The storage side of the adapter (gangsched.kube.storage): PersistentVolumeClaims,
PersistentVolumes, StorageClasses and CSINodes into the core's volume model; the storage
reflectors against the fake API server, listed and watched into the core's volume catalog (what
is deleted while a watch is down is dropped by the relist); and the binder's PreBind for a
committed gang (gangsched.kube.write.binder), against a fake API client.

Translation never raises: what cannot be read is translated so that nothing is placed on the
strength of it. PreBind writes what the gang's claims need, waits until the claims are bound,
and only then binds pods; if anything fails, no pod is bound and every reservation is released.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.core.clock import FakeClock
from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang, Binding, ClaimBinding, PodRef
from gangsched.core.model import AffinityTerm, LabelSelector, Requirement
from gangsched.core.scheduler import Scheduler
from gangsched.core.volumes import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    Claim,
    ClaimRef,
    CSINode,
    PersistentVolume,
    StorageClass,
    TopologyTerm,
    VolumeCatalog,
)
from gangsched.kube.io.client import ApiError
from gangsched.kube.io.reflector import Reflector
from gangsched.kube.storage import (
    claim_from,
    csinode_from,
    pv_from,
    storage_class_from,
    storage_reflectors,
)
from gangsched.kube.write.binder import Binder
from tests.support.fakekube import FakeKube

GI = 2**30

CLAIM: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "PersistentVolumeClaim",
    "metadata": {
        "name": "data",
        "namespace": "ml",
        "uid": "u-1",
        "annotations": {ANN_SELECTED_NODE: "n1", ANN_BIND_COMPLETED: "yes"},
        "ownerReferences": [
            {"kind": "Pod", "name": "p", "uid": "other", "controller": False},
            {"kind": "Pod", "name": "p", "uid": "pod-uid", "controller": True},
        ],
    },
    "spec": {
        "accessModes": ["ReadWriteOnce", "ReadOnlyMany"],
        "storageClassName": "fast",
        "resources": {"requests": {"storage": "1.5Gi"}},
        "volumeName": "pv-1",
        "volumeMode": "Block",
        "volumeAttributesClassName": "gold",
        "selector": {
            "matchLabels": {"tier": "ssd"},
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}],
        },
    },
    "status": {"phase": "Bound"},
}

PV: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "PersistentVolume",
    "metadata": {"name": "pv-1", "labels": {"tier": "ssd"}},
    "spec": {
        "capacity": {"storage": "10Gi"},
        "accessModes": ["ReadWriteOncePod"],
        "storageClassName": "fast",
        "claimRef": {"kind": "PersistentVolumeClaim", "namespace": "ml", "name": "data"},
        "csi": {"driver": "csi.example.com", "volumeHandle": "vol-1"},
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
                        ]
                    }
                ]
            }
        },
    },
    "status": {"phase": "Bound"},
}


def test_claim_from() -> None:
    assert claim_from(CLAIM) == Claim(
        namespace="ml",
        name="data",
        uid="u-1",
        storage_class="fast",
        volume_name="pv-1",
        bind_completed=True,
        selected_node="n1",
        access_modes=frozenset({"ReadWriteOnce", "ReadOnlyMany"}),
        request=GI + GI // 2,
        volume_mode="Block",
        attributes_class="gold",
        selector=LabelSelector((("tier", "ssd"),), (Requirement("zone", "In", ("a",)),)),
        phase="Bound",
        deleting=False,
        owner_uid="pod-uid",
    )


def test_claim_class_from_the_beta_annotation_first() -> None:
    obj = {
        "metadata": {
            "name": "c",
            "namespace": "ml",
            "annotations": {"volume.beta.kubernetes.io/storage-class": "old"},
        },
        "spec": {"storageClassName": "new"},
    }
    assert claim_from(obj).storage_class == "old"
    assert claim_from({"metadata": {"name": "c"}, "spec": {}}) == Claim("", "c")


def test_claim_defaults_and_deletion() -> None:
    got = claim_from(
        {"metadata": {"name": "c", "namespace": "ml", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    )
    assert got == Claim("ml", "c", deleting=True)
    assert got.selector is None and got.selected_node is None and not got.bound


@pytest.mark.parametrize(
    "broken",
    [
        {"spec": {"resources": {"requests": {"storage": "lots"}}}},
        {"spec": {"accessModes": "ReadWriteOnce"}},
        {"spec": {"selector": ["x"]}},
        {"metadata": {"annotations": {"a": 1}}},
    ],
)
def test_unreadable_claim_stays_unbound_without_class(broken: dict[str, Any]) -> None:
    obj = {**CLAIM, **{k: {**CLAIM.get(k, {}), **v} for k, v in broken.items()}}
    got = claim_from(obj)
    assert (got.namespace, got.name) == ("ml", "data")
    assert (got.storage_class, got.volume_name, got.bound) == ("", "", False)


def test_pv_from() -> None:
    assert pv_from(PV) == PersistentVolume(
        name="pv-1",
        capacity=10 * GI,
        access_modes=frozenset({"ReadWriteOncePod"}),
        storage_class="fast",
        labels={"tier": "ssd"},
        node_affinity=(AffinityTerm((Requirement("kubernetes.io/hostname", "In", ("n1",)),)),),
        claim_ref=ClaimRef("ml", "data", ""),
        phase="Bound",
        csi_driver="csi.example.com",
        csi_handle="vol-1",
    )


def test_pv_node_affinity_shapes() -> None:
    spec = PV["spec"]
    assert pv_from({**PV, "spec": {**spec, "nodeAffinity": {}}}).node_affinity is None
    assert pv_from({**PV, "spec": {**spec, "nodeAffinity": None}}).node_affinity is None
    empty: dict[str, Any] = {"required": {"nodeSelectorTerms": []}}
    assert pv_from({**PV, "spec": {**spec, "nodeAffinity": empty}}).node_affinity == ()


def test_unreadable_pv_is_never_available_and_matches_no_node() -> None:
    got = pv_from({**PV, "spec": {**PV["spec"], "capacity": {"storage": "much"}}})
    assert got == PersistentVolume("pv-1", phase="Unreadable", node_affinity=())


def test_storage_class_from() -> None:
    obj = {
        "metadata": {"name": "zoned"},
        "provisioner": "csi.example.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [
            {
                "matchLabelExpressions": [
                    {"key": "topology.kubernetes.io/zone", "values": ["a", "b"]}
                ]
            }
        ],
    }
    assert storage_class_from(obj) == StorageClass(
        "zoned",
        "csi.example.com",
        "WaitForFirstConsumer",
        (TopologyTerm((("topology.kubernetes.io/zone", ("a", "b")),)),),
    )
    assert storage_class_from({"metadata": {"name": "s"}, "provisioner": "x"}) == StorageClass(
        "s", "x", "Immediate"
    )
    assert storage_class_from({"metadata": {"name": "s"}, "allowedTopologies": 3}) == (
        StorageClass("s")
    )


def test_csinode_from() -> None:
    obj = {
        "metadata": {"name": "n1"},
        "spec": {
            "drivers": [
                {"name": "a.example.com", "nodeID": "n1", "allocatable": {"count": 3}},
                {"name": "b.example.com", "nodeID": "n1"},
            ]
        },
    }
    assert csinode_from(obj) == CSINode(
        "n1", frozenset({"a.example.com", "b.example.com"}), {"a.example.com": 3}
    )
    bad = {
        "metadata": {"name": "n1"},
        "spec": {"drivers": [{"name": "a", "allocatable": {"count": -1}}]},
    }
    assert csinode_from(bad) == CSINode("n1")


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=12,
)
PATHS = [
    ("metadata",),
    ("metadata", "name"),
    ("metadata", "annotations"),
    ("metadata", "ownerReferences"),
    ("spec",),
    ("spec", "resources"),
    ("spec", "capacity"),
    ("spec", "claimRef"),
    ("spec", "nodeAffinity"),
    ("spec", "selector"),
    ("spec", "drivers"),
    ("spec", "accessModes"),
    ("allowedTopologies",),
    ("status",),
]


def _plant(obj: dict[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    out = dict(obj)
    if len(path) == 1:
        out[path[0]] = value
        return out
    inner = out.get(path[0])
    out[path[0]] = _plant(inner if isinstance(inner, dict) else {}, path[1:], value)
    return out


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(PATHS), JSON, st.sampled_from([CLAIM, PV]))
def test_translators_never_raise(
    path: tuple[str, ...], value: object, base: dict[str, Any]
) -> None:
    obj = _plant(base, path, value)
    translators: list[Callable[[Any], object]] = [
        claim_from,
        pv_from,
        storage_class_from,
        csinode_from,
    ]
    for translate in translators:
        translate(obj)
        translate(value)


# ---- PreBind ---------------------------------------------------------------------------------


class FakeApi:
    """Answers the binder's calls, records them in order, and plays the PV controller: a claim
    written by PreBind is bound ``bind_after`` seconds later, in the catalog the watches keep."""

    def __init__(self, catalog: VolumeCatalog, bind_after: float | None = 0.05) -> None:
        self.catalog = catalog
        self.bind_after = bind_after
        self.calls: list[tuple[str, str, Any]] = []
        self.volumes: dict[str, dict[str, Any]] = {}
        self.patch_errors: dict[str, ApiError] = {}

    async def get(self, path: str, **params: Any) -> dict[str, Any]:
        self.calls.append(("GET", path, None))
        name = path.rsplit("/", 1)[1]
        if name not in self.volumes:
            raise ApiError(404, "NotFound")
        return self.volumes[name]

    async def merge_patch(self, path: str, body: Any, *, fence: object = None) -> dict[str, Any]:
        self.calls.append(("PATCH", path, body))
        if path in self.patch_errors:
            raise self.patch_errors[path]
        parts = path.split("/")
        if parts[-2] == "persistentvolumeclaims":
            key = f"{parts[-3]}/{parts[-1]}"
            node = body["metadata"]["annotations"][ANN_SELECTED_NODE]
            claim = self.catalog.claims[key]
            self.catalog.upsert_claim(replace(claim, selected_node=node))
            self._later(key, f"pv-{parts[-1]}")
        else:
            ref = body["spec"]["claimRef"]
            key = f"{ref['namespace']}/{ref['name']}"
            pv = self.catalog.volumes[parts[-1]]
            self.catalog.upsert_volume(
                replace(pv, claim_ref=ClaimRef(ref["namespace"], ref["name"], ref.get("uid", "")))
            )
            self._later(key, parts[-1])
        return {}

    async def post(self, path: str, body: Any, *, fence: object = None) -> dict[str, Any]:
        self.calls.append(("POST", path, body))
        return {}

    def _later(self, key: str, volume: str) -> None:
        if self.bind_after is None:
            return

        def bind() -> None:
            claim = self.catalog.claims[key]
            self.catalog.upsert_claim(replace(claim, volume_name=volume, bind_completed=True))

        asyncio.get_running_loop().call_later(self.bind_after, bind)


def _gang(*claims: ClaimBinding) -> BindGang:
    pods = (Binding(PodRef("u-a", "ml", "a"), "n1"), Binding(PodRef("u-b", "ml", "b"), "n2"))
    return BindGang("ml/g", pods, claims)


def _catalog() -> VolumeCatalog:
    cat = VolumeCatalog()
    cat.upsert_claim(Claim("ml", "dyn", "c-dyn", storage_class="fast"))
    cat.upsert_claim(Claim("ml", "static", "c-static", storage_class="local"))
    cat.upsert_volume(PersistentVolume("pv-local", storage_class="local"))
    return cat


def _binder(api: FakeApi, failures: dict[str, str], timeout: float = 5.0) -> Binder:
    return Binder(
        api,  # type: ignore[arg-type]
        failures.__setitem__,
        retries=0,
        volumes=api.catalog,
        volume_bind_timeout=timeout,
        volume_poll=0.01,
    )


DYN = ClaimBinding("ml", "dyn", "c-dyn", "n1")
STATIC = ClaimBinding("ml", "static", "c-static", "n2", "pv-local")


async def test_prebind_writes_then_waits_then_binds_pods() -> None:
    api = FakeApi(_catalog())
    api.volumes["pv-local"] = {"metadata": {"name": "pv-local", "resourceVersion": "7"}, "spec": {}}
    failures: dict[str, str] = {}
    results = await _binder(api, failures).bind_gang(_gang(DYN, STATIC))
    assert [r.ok for r in results] == [True, True] and failures == {}
    kinds = [(verb, path) for verb, path, _ in api.calls]
    assert kinds == [
        ("GET", "/api/v1/persistentvolumes/pv-local"),
        ("PATCH", "/api/v1/persistentvolumes/pv-local"),
        ("PATCH", "/api/v1/namespaces/ml/persistentvolumeclaims/dyn"),
        ("POST", "/api/v1/namespaces/ml/pods/a/binding"),
        ("POST", "/api/v1/namespaces/ml/pods/b/binding"),
    ]
    pv_patch = api.calls[1][2]
    assert pv_patch == {
        "metadata": {"resourceVersion": "7", "annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}},
        "spec": {
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": "ml",
                "name": "static",
                "uid": "c-static",
            }
        },
    }
    assert api.calls[2][2] == {
        "metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}, "uid": "c-dyn"}
    }


async def test_prebind_timeout_binds_no_pod_and_releases_all() -> None:
    api = FakeApi(_catalog(), bind_after=None)
    failures: dict[str, str] = {}
    results = await _binder(api, failures, timeout=0.1).bind_gang(_gang(DYN))
    assert not any(r.ok for r in results)
    assert set(failures) == {"u-a", "u-b"}
    assert all(m.startswith("binding volumes: timed out") for m in failures.values())
    assert not any(verb == "POST" for verb, _, _ in api.calls)


async def test_volume_taken_by_another_claim_is_not_taken_over() -> None:
    api = FakeApi(_catalog())
    api.volumes["pv-local"] = {
        "metadata": {"name": "pv-local", "resourceVersion": "7"},
        "spec": {"claimRef": {"namespace": "ml", "name": "someone-else"}},
    }
    failures: dict[str, str] = {}
    await _binder(api, failures).bind_gang(_gang(STATIC))
    assert set(failures) == {"u-a", "u-b"}
    assert "already bound to claim ml/someone-else" in failures["u-a"]
    assert [verb for verb, _, _ in api.calls] == ["GET"]


async def test_write_conflict_binds_no_pod() -> None:
    api = FakeApi(_catalog())
    api.patch_errors["/api/v1/namespaces/ml/persistentvolumeclaims/dyn"] = ApiError(
        409, "Conflict", {"message": "the object has been modified"}
    )
    failures: dict[str, str] = {}
    await _binder(api, failures).bind_gang(_gang(DYN))
    assert set(failures) == {"u-a", "u-b"}
    assert not any(verb == "POST" for verb, _, _ in api.calls)


async def test_provisioner_giving_up_fails_the_gang_early() -> None:
    api = FakeApi(_catalog(), bind_after=None)
    failures: dict[str, str] = {}
    binder = _binder(api, failures)

    async def give_up() -> None:
        await asyncio.sleep(0.05)
        api.catalog.upsert_claim(Claim("ml", "dyn", "c-dyn", storage_class="fast"))

    task = asyncio.create_task(give_up())
    await binder.bind_gang(_gang(DYN))
    await task
    assert failures["u-a"] == 'binding volumes: provisioning failed for PVC "dyn"'


async def test_claim_deleted_while_waiting_fails_the_gang() -> None:
    api = FakeApi(_catalog(), bind_after=None)
    failures: dict[str, str] = {}

    async def delete() -> None:
        await asyncio.sleep(0.05)
        api.catalog.remove_claim("ml", "dyn")

    task = asyncio.create_task(delete())
    await _binder(api, failures).bind_gang(_gang(DYN))
    await task
    assert failures["u-b"] == 'binding volumes: persistentvolumeclaim "ml/dyn" was deleted'


# ---- watches -----------------------------------------------------------------------------


async def test_storage_watches_feed_the_catalog_and_relists_drop_what_went_away() -> None:
    core = Scheduler(CoreConfig(), FakeClock())
    pokes: list[int] = []
    reflectors = {
        r.name: r
        for r in storage_reflectors(object(), core, lambda: pokes.append(1))  # type: ignore[arg-type]
    }
    assert set(reflectors) == {
        "persistentvolumeclaims",
        "persistentvolumes",
        "storageclasses",
        "csinodes",
    }

    async def feed(name: str, kind: str, obj: dict[str, Any]) -> None:
        """As the reflector hands an event over: a full list's awaitable is awaited."""
        result = reflectors[name]._handler(kind, obj)
        assert (result is not None) == (kind == "SYNC"), "only a full list is handled later"
        if result is not None:
            await result

    cat = core.cache.volumes
    other = {**CLAIM, "metadata": {**CLAIM["metadata"], "name": "other"}}
    await feed("persistentvolumeclaims", "SYNC", {"items": [CLAIM, other]})
    assert set(cat.claims) == {"ml/data", "ml/other"}
    await feed("persistentvolumeclaims", "DELETED", other)
    assert set(cat.claims) == {"ml/data"}
    await feed("persistentvolumeclaims", "ADDED", other)
    await feed("persistentvolumeclaims", "SYNC", {"items": [other]})
    assert set(cat.claims) == {"ml/other"}
    await feed("persistentvolumes", "SYNC", {"items": [PV]})
    assert set(cat.volumes) == {"pv-1"}
    await feed("persistentvolumes", "SYNC", {"items": []})
    assert cat.volumes == {}
    await feed("storageclasses", "ADDED", {"metadata": {"name": "fast"}, "provisioner": "p"})
    assert cat.classes["fast"] == StorageClass("fast", "p")
    await feed("storageclasses", "DELETED", {"metadata": {"name": "fast"}})
    assert cat.classes == {}
    await feed("csinodes", "MODIFIED", {"metadata": {"name": "n1"}, "spec": {"drivers": []}})
    assert cat.csi_nodes == {"n1": CSINode("n1")}
    assert len(pokes) == 9


# ---- the reflectors against the fake API server ----------------------------------------

CLAIMS = "/api/v1/namespaces/ml/persistentvolumeclaims"
VOLUMES = "/api/v1/persistentvolumes"
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
CSINODES = "/apis/storage.k8s.io/v1/csinodes"


async def until(what: str, cond: Callable[[], bool], timeout: float = 2.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            raise AssertionError(f"never: {what}")
        await asyncio.sleep(0)


@dataclass
class Rig:
    kube: FakeKube
    core: Scheduler
    reflectors: dict[str, Reflector]
    pokes: list[int]

    @property
    def catalog(self) -> VolumeCatalog:
        return self.core.cache.volumes


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    kube = FakeKube()
    kube.seed(
        CLAIMS,
        {"metadata": {"name": "data"}, "spec": {"storageClassName": "fast", "volumeName": "pv"}},
    )
    kube.seed(VOLUMES, {"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": "1Gi"}}})
    kube.seed(CLASSES, {"metadata": {"name": "fast"}, "provisioner": "csi.example.com"})
    kube.seed(CSINODES, {"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "d"}]}})
    core = Scheduler(CoreConfig(), FakeClock())
    pokes: list[int] = []
    reflectors = storage_reflectors(kube, core, lambda: pokes.append(1))
    tasks = [asyncio.create_task(r.run()) for r in reflectors]
    try:
        await asyncio.wait_for(asyncio.gather(*(r.synced.wait() for r in reflectors)), 5)
        yield Rig(kube, core, {r.name: r for r in reflectors}, pokes)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_first_lists_fill_the_catalog(rig: Rig) -> None:
    cat = rig.catalog
    assert set(cat.claims) == {"ml/data"} and cat.claims["ml/data"].volume_name == "pv"
    assert cat.volumes["pv"].capacity == 2**30
    assert cat.classes["fast"].provisioner == "csi.example.com"
    assert cat.csi_nodes["n1"].drivers == frozenset({"d"})
    assert len(rig.pokes) == 4, "each list wakes the scheduler once"


async def test_watch_events_keep_the_catalog_current(rig: Rig) -> None:
    rig.kube.seed(CLAIMS, {"metadata": {"name": "more"}, "spec": {"storageClassName": "fast"}})
    rig.kube.remove(f"{VOLUMES}/pv")
    rig.kube.seed(CLASSES, {"metadata": {"name": "fast"}, "provisioner": "other.example.com"})
    await until("the new claim", lambda: "ml/more" in rig.catalog.claims)
    await until("the volume gone", lambda: "pv" not in rig.catalog.volumes)
    await until(
        "the class changed", lambda: rig.catalog.classes["fast"].provisioner == "other.example.com"
    )


async def test_what_went_away_while_the_watch_was_down_is_dropped_by_the_relist(
    rig: Rig,
) -> None:
    claims = rig.reflectors["persistentvolumeclaims"]
    assert claims.relists == 0
    back = rig.kube.hold("watch", "/persistentvolumeclaims$", times=1)
    rig.kube.end_watches()
    await until("the claims' watch to be down", lambda: rig.kube.watching == 3)
    rig.kube.remove(f"{CLAIMS}/data")  # seen by no watch
    rig.kube.compact()  # and the watch cannot resume from where it was
    back.set()
    await until("the relist", lambda: claims.relists == 1)
    await until("the claim dropped", lambda: rig.catalog.claims == {})
    assert "pv" in rig.catalog.volumes, "the other kinds relist too, and keep what is there"


async def test_a_long_list_goes_in_by_slices_while_the_loop_turns() -> None:
    """A full list is handled in slices that yield to the event loop (here after every
    object): other tasks run meanwhile, and the catalog ends as the list says."""
    kube = FakeKube()
    kube.seed(CLAIMS, *({"metadata": {"name": f"c{i}"}} for i in range(100)))
    core = Scheduler(CoreConfig(), FakeClock())
    pokes: list[int] = []
    seen_at_yield: list[int] = []
    reflectors = {
        r.name: r
        for r in storage_reflectors(
            kube,
            core,
            lambda: pokes.append(1),
            slice_seconds=0.0,
            on_yield=lambda: seen_at_yield.append(len(core.cache.volumes.claims)),
        )
    }
    claims = reflectors["persistentvolumeclaims"]
    turns = 0

    async def other() -> None:
        nonlocal turns
        while True:
            turns += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other())
    tasks = [asyncio.create_task(r.run()) for r in reflectors.values()]
    try:
        await until("the first lists", lambda: all(r.synced.is_set() for r in reflectors.values()))
        assert set(core.cache.volumes.claims) == {f"ml/c{i}" for i in range(100)}
        assert seen_at_yield[:3] == [1, 2, 3], "one claim per slice"
        assert turns >= 100, "another task ran between the slices"
        assert len(pokes) == 4, "each list wakes the scheduler once, at its end"

        # A relist after missed events: 50 claims gone, 10 new.
        await until("the watches", lambda: kube.watching == 4)
        back = kube.hold("watch", "/persistentvolumeclaims$", times=1)
        kube.end_watches()
        await until(
            "the claims' watch back, held",
            lambda: len(kube.sent("watch", "/persistentvolumeclaims$")) == 2,
        )
        for i in range(50):
            kube.remove(f"{CLAIMS}/c{i}")
        kube.seed(CLAIMS, *({"metadata": {"name": f"d{i}"}} for i in range(10)))
        kube.compact()
        seen_at_yield.clear()
        back.set()
        await until("the relist", lambda: claims.relists == 1 and len(pokes) == 5)
        want = {f"ml/c{i}" for i in range(50, 100)} | {f"ml/d{i}" for i in range(10)}
        assert set(core.cache.volumes.claims) == want
        assert seen_at_yield[:50] == list(range(99, 49, -1)), "what went away first, by slices"
    finally:
        for t in [*tasks, ticker]:
            t.cancel()
        await asyncio.gather(*tasks, ticker, return_exceptions=True)
