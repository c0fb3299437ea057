"""Which declaration of a gang's spec stands (kube/gangspecs.py): PodGroups in precedence
order (gangsched, scheduler-plugins, Volcano), then the pods' own declaration, of which the
first stands while its pod exists; and what the core must be told, once per change."""

from __future__ import annotations

from gangsched.api.membership import Source
from gangsched.core.model import GangMode, GangSpec
from gangsched.kube.gangspecs import GangSpecs, SpecChange, declaration_conflict

KEY = "ml/train"
SOURCES = (Source.GANGSCHED, Source.XK8S, Source.VOLCANO)


def _specs() -> GangSpecs:
    return GangSpecs(SOURCES)


def test_podgroups_stand_in_precedence_order_then_the_pods_declaration() -> None:
    specs = _specs()
    declared = GangSpec(KEY, 2)
    assert specs.declare(KEY, "u1", declared, exists={"u1"}) == ""
    assert specs.resolve(KEY) == declared
    volcano, xk8s, ours = GangSpec(KEY, 3), GangSpec(KEY, 4), GangSpec(KEY, 5)
    specs.put_podgroup(Source.VOLCANO, KEY, volcano)
    assert specs.resolve(KEY) == volcano
    specs.put_podgroup(Source.GANGSCHED, KEY, ours)
    specs.put_podgroup(Source.XK8S, KEY, xk8s)
    assert specs.resolve(KEY) == ours
    specs.delete_podgroup(Source.GANGSCHED, KEY)
    assert specs.resolve(KEY) == xk8s
    specs.delete_podgroup(Source.XK8S, KEY)
    specs.delete_podgroup(Source.VOLCANO, KEY)
    assert specs.resolve(KEY) == declared
    assert specs.forget_declaration(KEY)
    assert specs.resolve(KEY) is None
    assert not specs.forget_declaration(KEY)


def test_the_first_declaration_stands_while_its_pod_exists() -> None:
    specs = _specs()
    first, other = GangSpec(KEY, 2), GangSpec(KEY, 3, timeout_seconds=60.0)
    assert specs.declare(KEY, "u1", first, exists={"u1"}) == ""
    why = specs.declare(KEY, "u2", other, exists={"u1", "u2"})
    assert why == (
        "declares gang ml/train differently from its other members "
        "(minMember 3 vs 2, mode Strict vs Strict, timeout 60s vs default)"
    )
    assert specs.resolve(KEY) == first
    # the same declaration agrees; the declarer may change its own
    assert specs.declare(KEY, "u3", GangSpec(KEY, 2), exists={"u1", "u3"}) == ""
    assert specs.declare(KEY, "u1", GangSpec(KEY, 4), exists={"u1"}) == ""
    assert specs.resolve(KEY) == GangSpec(KEY, 4)
    # the declarer is gone: the next declaration stands
    assert specs.declare(KEY, "u2", other, exists={"u2"}) == ""
    assert specs.resolve(KEY) == other


def test_a_conflict_names_every_field_that_differs_without_none() -> None:
    a = GangSpec(KEY, 2, timeout_seconds=600.0)
    b = GangSpec(KEY, 2, mode=GangMode.NON_STRICT)
    assert declaration_conflict(KEY, a, b) == (
        "declares gang ml/train differently from its other members "
        "(minMember 2 vs 2, mode NonStrict vs Strict, timeout default vs 600s)"
    )
    assert declaration_conflict(KEY, a, GangSpec(KEY, 2, timeout_seconds=600.0)) == ""
    grouped = GangSpec(KEY, 2, gang_group=("ml/a", "ml/b"))
    assert declaration_conflict(KEY, GangSpec(KEY, 2), grouped) != ""


def test_the_core_is_told_once_per_change() -> None:
    specs = _specs()
    assert specs.settle(KEY) is None  # nothing declared, nothing told
    spec = GangSpec(KEY, 2)
    specs.put_podgroup(Source.XK8S, KEY, spec)
    assert specs.settle(KEY) == SpecChange(KEY, spec)
    assert specs.settle(KEY) is None
    specs.put_podgroup(Source.XK8S, KEY, GangSpec(KEY, 2))  # an equal spec: no change
    assert specs.settle(KEY) is None
    specs.delete_podgroup(Source.XK8S, KEY)
    assert specs.settle(KEY) == SpecChange(KEY, None)
    assert specs.settle(KEY) is None
    assert all(n == 0 for n in specs.sizes().values()), specs.sizes()


def test_a_relist_of_podgroups_returns_those_gone() -> None:
    specs = _specs()
    for name in ("a", "b", "c"):
        specs.put_podgroup(Source.GANGSCHED, f"ml/{name}", GangSpec(f"ml/{name}", 2))
    stale = specs.replace_podgroups(
        Source.GANGSCHED, {"ml/b": GangSpec("ml/b", 3), "ml/d": GangSpec("ml/d", 1)}
    )
    assert stale == ["ml/a", "ml/c"]
    assert sorted(specs.podgroups(Source.GANGSCHED)) == ["ml/b", "ml/d"]
    assert specs.resolve("ml/b") == GangSpec("ml/b", 3)
    assert specs.resolve("ml/a") is None
