"""The upstream gang API (scheduling.k8s.io PodGroup, v1alpha2 and v1beta1) as gangsched reads
it (gangsched.api.workloadapi): how a PodGroup maps to a gang and how a pod joins one."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.membership import Source, resolve_membership
from gangsched.api.pod import pod_from
from gangsched.api.workloadapi import upstream_podgroup_from
from tests.kube.test_service import pod


def upstream_pg(name: str, policy: dict[str, Any], version: str = "v1alpha2") -> dict[str, Any]:
    return {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "ml", "generation": 2},
        "spec": {"schedulingPolicy": policy},
    }


def member(name: str, group: str) -> dict[str, Any]:
    body = pod(name)
    body["spec"]["schedulingGroup"] = {"podGroupName": group}
    return body


# ---- mapping ---------------------------------------------------------------------------------
def test_gang_min_count_is_min_member() -> None:
    spec = upstream_pg_spec({"gang": {"minCount": 4}})
    assert (spec.key, spec.min_member, spec.invalid_reason) == ("ml/train", 4, "")


def test_basic_is_a_gang_of_one() -> None:
    spec = upstream_pg_spec({"basic": {}})
    assert (spec.min_member, spec.invalid_reason) == (1, "")


@pytest.mark.parametrize(
    ("policy", "says"),
    [
        ({}, "exactly one of basic and gang"),
        ({"basic": {}, "gang": {"minCount": 2}}, "exactly one of basic and gang"),
        ({"gang": {"minCount": 0}}, "minCount: must be >= 1"),
        ({"gang": {"minCount": "4"}}, "minCount: must be >= 1"),
        ({"gang": {}}, "minCount: must be >= 1"),
    ],
)
def test_an_unreadable_policy_is_invalid(policy: dict[str, Any], says: str) -> None:
    assert says in upstream_pg_spec(policy).invalid_reason


def test_no_spec_is_invalid() -> None:
    obj = upstream_pg("train", {})
    del obj["spec"]
    assert upstream_podgroup_from(obj).invalid_reason == "spec: missing"


def upstream_pg_spec(policy: dict[str, Any]) -> Any:
    return upstream_podgroup_from(upstream_pg("train", policy))


# ---- membership ------------------------------------------------------------------------------
def test_a_pod_joins_through_its_scheduling_group() -> None:
    p, m = pod_from(member("train-0", "train"))
    assert (m.key, m.source, m.error, p.group) == ("ml/train", Source.UPSTREAM, "", "ml/train")


def test_naming_another_gang_by_label_too_is_refused() -> None:
    m = resolve_membership("ml", {"gangsched.io/pod-group": "a"}, {}, 0.0, "b")
    assert "more than one gang" in m.error and m.key == ""


def test_the_same_gang_by_label_and_scheduling_group_agrees() -> None:
    m = resolve_membership("ml", {"gangsched.io/pod-group": "a"}, {}, 0.0, "a")
    assert (m.key, m.source, m.error) == ("ml/a", Source.GANGSCHED, "")


def test_an_unreadable_scheduling_group_makes_the_pod_invalid() -> None:
    body = pod("p")
    body["spec"]["schedulingGroup"] = {"podGroupName": 7}
    p, _ = pod_from(body)
    assert "spec.schedulingGroup.podGroupName" in p.invalid_reason
