"""Topology-aware placement as each convention writes it: gangsched's spec.topologyPlacement,
the upstream PodGroup's schedulingConstraints, Kueue's podset annotations."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.pod import pod_from
from gangsched.api.podgroup import podgroup_from, xk8s_podgroup_from
from gangsched.api.topology import (
    completion_index,
    kueue_domain,
    lws_leader_first,
    podgroup_domain,
)
from gangsched.api.workloadapi import upstream_podgroup_from
from gangsched.core.model import DomainConstraint, LeaderFirst
from gangsched.kube.statuscontroller import verdict

RACK = "example.com/rack"


def podgroup(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2, **spec}}


def test_gangsched_topology_placement() -> None:
    spec = podgroup_from(podgroup({"topologyPlacement": {"required": RACK}}))
    assert spec.domain == DomainConstraint(required=RACK) and not spec.invalid_reason
    raw = {
        "preferred": "example.com/block",
        "slices": {"podLabel": "jobset.sigs.k8s.io/job-key", "required": RACK},
    }
    assert podgroup_from(podgroup({"topologyPlacement": raw})).domain == DomainConstraint(
        preferred="example.com/block",
        slice_required=RACK,
        slice_label="jobset.sigs.k8s.io/job-key",
    )
    sized = podgroup_domain({"slices": {"size": 4, "required": RACK}})
    assert sized == DomainConstraint(slice_required=RACK, slice_size=4)
    assert podgroup_from(podgroup({})).domain == DomainConstraint()


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"required": RACK, "preferred": RACK}, "at most one of required and preferred"),
        ({"required": "bad key!"}, "spec.topologyPlacement.required: 'bad key!' is not a valid"),
        ({"required": ""}, "spec.topologyPlacement.required: expected a label key"),
        ({"rack": RACK}, "spec.topologyPlacement: unknown field(s) ['rack']"),
        ({"slices": {"required": RACK}}, "exactly one of podLabel and size"),
        ({"slices": {"size": 0, "required": RACK}}, "slices.size: expected an integer >= 1"),
        ({"slices": {"size": 2}}, "spec.topologyPlacement.slices.required: expected a label"),
        ("rack", "spec.topologyPlacement: expected an object"),
    ],
)
def test_a_bad_topology_placement_makes_the_podgroup_invalid(raw: object, fragment: str) -> None:
    spec = podgroup_from(podgroup({"topologyPlacement": raw}))
    assert fragment in spec.invalid_reason


LONG_KEY = "x" * 312  # no prefix; a name of 312 characters where 63 is the most


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"required": LONG_KEY}, "spec.topologyPlacement.required"),
        ({"preferred": LONG_KEY}, "spec.topologyPlacement.preferred"),
        ({"slices": {"size": 2, "required": LONG_KEY}}, "spec.topologyPlacement.slices.required"),
        (
            {"slices": {"podLabel": LONG_KEY, "required": RACK}},
            "spec.topologyPlacement.slices.podLabel",
        ),
        ({LONG_KEY: RACK}, "spec.topologyPlacement: unknown field(s)"),
    ],
)
def test_a_long_bad_value_is_not_echoed_whole(raw: object, field: str) -> None:
    """The reason lands in the PodGroup's status and events: a long value is cut short."""
    reason = podgroup_from(podgroup({"topologyPlacement": raw})).invalid_reason
    assert field in reason
    assert "'" + "x" * 63 + "...' (312 characters)" in reason
    assert "x" * 64 not in reason
    assert verdict(podgroup({"topologyPlacement": raw})).message == reason


def test_a_long_value_of_another_type_is_cut_short_too() -> None:
    reason = podgroup_from(podgroup({"topologyPlacement": ["x" * 500]})).invalid_reason
    assert "spec.topologyPlacement: expected an object, got ['xxx" in reason
    assert len(reason) < 150


def test_a_long_bad_kueue_annotation_is_not_echoed_whole() -> None:
    p, _ = pod_from(pod({"kueue.x-k8s.io/podset-required-topology": LONG_KEY}))
    assert "kueue.x-k8s.io/podset-required-topology]: 'xxx" in p.invalid_reason
    assert "x" * 64 not in p.invalid_reason


def upstream(constraints: object) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 4}}}
    if constraints is not None:
        spec["schedulingConstraints"] = constraints
    return {"metadata": {"name": "pg", "namespace": "ml"}, "spec": spec}


def test_upstream_scheduling_constraints_topology_is_required() -> None:
    spec = upstream_podgroup_from(upstream({"topology": [{"key": RACK}]}))
    assert spec.domain == DomainConstraint(required=RACK) and spec.min_member == 4
    assert upstream_podgroup_from(upstream(None)).domain == DomainConstraint()
    two = upstream_podgroup_from(upstream({"topology": [{"key": RACK}, {"key": "x"}]}))
    assert "spec.schedulingConstraints.topology: at most one entry" in two.invalid_reason
    bad = upstream_podgroup_from(upstream({"topology": [{"key": ""}]}))
    assert "spec.schedulingConstraints.topology[0].key" in bad.invalid_reason


def pod(annotations: dict[str, str], labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ml",
            "uid": "u",
            "annotations": annotations,
            "labels": labels or {},
        },
        "spec": {"schedulerName": "gangsched", "containers": [{"name": "c"}]},
    }


def test_kueue_podset_annotations_on_the_pod() -> None:
    p, _ = pod_from(pod({"kueue.x-k8s.io/podset-required-topology": RACK}))
    assert p.domain == DomainConstraint(required=RACK) and not p.invalid_reason
    p, _ = pod_from(
        pod(
            {
                "kueue.x-k8s.io/podset-preferred-topology": "example.com/block",
                "kueue.x-k8s.io/podset-slice-required-topology": RACK,
                "kueue.x-k8s.io/podset-slice-size": "4",
                "batch.kubernetes.io/job-completion-index": "6",
            }
        )
    )
    assert p.domain == DomainConstraint(
        preferred="example.com/block", slice_required=RACK, slice_size=4
    )
    assert p.index == 6


def test_bad_kueue_annotations_refuse_the_pod_naming_the_annotation() -> None:
    p, _ = pod_from(pod({"kueue.x-k8s.io/podset-slice-required-topology": RACK}))
    assert "kueue.x-k8s.io/podset-slice-size]: required" in p.invalid_reason
    p, _ = pod_from(
        pod(
            {
                "kueue.x-k8s.io/podset-slice-required-topology": RACK,
                "kueue.x-k8s.io/podset-slice-size": "four",
            }
        )
    )
    assert "podset-slice-size]: expected an integer >= 1, got 'four'" in p.invalid_reason
    with pytest.raises(ValueError, match="at most one of"):
        kueue_domain(
            {
                "kueue.x-k8s.io/podset-required-topology": RACK,
                "kueue.x-k8s.io/podset-preferred-topology": RACK,
            }
        )


def test_completion_index_from_annotation_or_label() -> None:
    assert completion_index({"batch.kubernetes.io/job-completion-index": "3"}, {}) == 3
    assert completion_index({}, {"batch.kubernetes.io/job-completion-index": "2"}) == 2
    assert completion_index({}, {}) == -1
    assert completion_index({"batch.kubernetes.io/job-completion-index": "x"}, {}) == -1


def test_scheduler_plugins_timeout_zero_means_the_default() -> None:
    """The MPI operator writes scheduleTimeoutSeconds 0 by default and Kubeflow Trainer
    documents 0 as the default timeout: on a scheduler-plugins PodGroup it is "not set"."""

    obj = {
        "metadata": {"name": "pi", "namespace": "ml"},
        "spec": {"minMember": 5, "scheduleTimeoutSeconds": 0},
    }
    spec = xk8s_podgroup_from(obj)
    assert not spec.invalid_reason and spec.timeout_seconds is None and spec.min_member == 5
    obj["spec"] = {"minMember": 5, "scheduleTimeoutSeconds": 30}
    assert xk8s_podgroup_from(obj).timeout_seconds == 30.0
    # gangsched's own PodGroup still refuses 0
    assert (
        "scheduleTimeoutSeconds"
        in podgroup_from(podgroup({"scheduleTimeoutSeconds": 0})).invalid_reason
    )


def test_a_leaderworkerset_leader_with_exclusive_topology_is_leader_first() -> None:
    lws = {"leaderworkerset.sigs.k8s.io/exclusive-topology": RACK}
    leader = {"leaderworkerset.sigs.k8s.io/worker-index": "0"}
    worker = {"leaderworkerset.sigs.k8s.io/worker-index": "1"}
    size = {"leaderworkerset.sigs.k8s.io/size": "4"}
    assert lws_leader_first({**lws, **size}, leader) == LeaderFirst(RACK, 4)
    assert lws_leader_first({**lws, **size}, worker) is None, "workers come after"
    assert lws_leader_first(size, leader) is None, "no exclusive topology: a plain gang"
    assert lws_leader_first({**lws, "leaderworkerset.sigs.k8s.io/size": "1"}, leader) is None
    with pytest.raises(ValueError, match="size]: expected the group's size, got 'four'"):
        lws_leader_first({**lws, "leaderworkerset.sigs.k8s.io/size": "four"}, leader)
    with pytest.raises(ValueError, match="exclusive-topology]"):
        lws_leader_first(
            {"leaderworkerset.sigs.k8s.io/exclusive-topology": "-bad-", **size}, leader
        )
