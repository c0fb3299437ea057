"""A pod's node selector, node affinity, tolerations and inter-pod affinity
(gangsched.api.affinity), table-driven, with the API server's label-key merging."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.pod import pod_from
from gangsched.core.model import (
    AffinityTerm,
    LabelSelector,
    NodeAffinity,
    PodAffinity,
    PodAffinityTerm,
    PreferredTerm,
    Requirement,
    Toleration,
    WeightedPodAffinityTerm,
)
from tests.api.objects import (
    AFFINITY,
    APP,
    APP_SELECTOR,
    DELETE,
    HOST,
    JOB,
    ML,
    POD,
    PREFERRED_KEY,
    REQUIRED_KEY,
    ROLE,
    ZONE,
    patched,
    pod_term,
)


def test_pod_node_selector() -> None:
    pod, _ = pod_from(
        patched(
            POD,
            (
                ("spec", "nodeSelector"),
                {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB", "kubernetes.io/os": "linux"},
            ),
        )
    )
    assert pod.placement.node_selector == (
        ("kubernetes.io/os", "linux"),
        ("nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB"),
    )


REQUIRED_TERMS = [
    {
        "matchExpressions": [
            {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a", "b"]},
            {"key": "node-role", "operator": "NotIn", "values": ["control-plane"]},
            {"key": "nvidia.com/gpu.product", "operator": "Exists"},
            {"key": "spot", "operator": "DoesNotExist"},
            {"key": "nvidia.com/gpu.count", "operator": "Gt", "values": ["3"]},
            {"key": "nvidia.com/gpu.memory", "operator": "Lt", "values": ["90000"]},
        ]
    },
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-a100-0"]}]},
    {
        "matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}],
        "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["bad-node"]}],
    },
]
EXPECTED_REQUIRED = (
    AffinityTerm(
        (
            Requirement("topology.kubernetes.io/zone", "In", ("a", "b")),
            Requirement("node-role", "NotIn", ("control-plane",)),
            Requirement("nvidia.com/gpu.product", "Exists", ()),
            Requirement("spot", "DoesNotExist", ()),
            Requirement("nvidia.com/gpu.count", "Gt", ("3",)),
            Requirement("nvidia.com/gpu.memory", "Lt", ("90000",)),
        )
    ),
    AffinityTerm((), (Requirement("metadata.name", "In", ("gpu-a100-0",)),)),
    AffinityTerm(
        (Requirement("pool", "In", ("batch",)),),
        (Requirement("metadata.name", "NotIn", ("bad-node",)),),
    ),
)
PREFERRED_TERMS = [
    {
        "weight": 80,
        "preference": {
            "matchExpressions": [
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["H100"]}
            ]
        },
    },
    {
        "weight": 1,
        "preference": {"matchFields": [{"key": "metadata.name", "operator": "Exists"}]},
    },
]
EXPECTED_PREFERRED = (
    PreferredTerm(80, AffinityTerm((Requirement("nvidia.com/gpu.product", "In", ("H100",)),))),
    PreferredTerm(1, AffinityTerm((), (Requirement("metadata.name", "Exists", ()),))),
)


@pytest.mark.parametrize(
    ("node_affinity", "expected"),
    [
        ({}, NodeAffinity(None, ())),
        (
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": REQUIRED_TERMS
                }
            },
            NodeAffinity(EXPECTED_REQUIRED, ()),
        ),
        (
            {"preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_TERMS},
            NodeAffinity(None, EXPECTED_PREFERRED),
        ),
        (
            {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": REQUIRED_TERMS
                },
                "preferredDuringSchedulingIgnoredDuringExecution": PREFERRED_TERMS,
            },
            NodeAffinity(EXPECTED_REQUIRED, EXPECTED_PREFERRED),
        ),
        # required with no terms matches nothing (distinct from no requirement)
        (
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
            NodeAffinity((), ()),
        ),
        (
            {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{}]}},
            NodeAffinity((AffinityTerm(),), ()),
        ),
    ],
    ids=["empty", "required", "preferred", "both", "required-no-terms", "required-empty-term"],
)
def test_pod_node_affinity(node_affinity: dict[str, Any], expected: NodeAffinity) -> None:
    obj = patched(POD, (("spec", "affinity"), {"nodeAffinity": node_affinity}))
    pod, _ = pod_from(obj)
    assert pod.invalid_reason == ""
    assert pod.placement.affinity == expected


def test_pod_without_affinity() -> None:
    pod, _ = pod_from(POD)
    assert pod.placement.affinity == NodeAffinity(None, ())
    pod, _ = pod_from(patched(POD, (("spec", "affinity"), {"podAntiAffinity": {}})))
    assert pod.placement.affinity == NodeAffinity(None, ())


@pytest.mark.parametrize(
    ("tolerations", "expected"),
    [
        (DELETE, ()),
        ([], ()),
        ([{"operator": "Exists"}], (Toleration("", "Exists", "", ""),)),
        (
            [{"key": "dedicated", "value": "training", "effect": "NoSchedule"}],
            (Toleration("dedicated", "Equal", "training", "NoSchedule"),),
        ),
        (
            [{"key": "dedicated", "operator": "Equal", "value": "training"}],
            (Toleration("dedicated", "Equal", "training", ""),),
        ),
        (
            [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60}],
            (Toleration("k", "Exists", "", "NoExecute"),),
        ),
    ],
    ids=["absent", "empty", "tolerate-everything", "equal-default", "any-effect", "seconds"],
)
def test_pod_tolerations(tolerations: object, expected: tuple[Toleration, ...]) -> None:
    pod, _ = pod_from(patched(POD, (("spec", "tolerations"), tolerations)))
    assert pod.placement.tolerations == expected


POD_AFFINITY_CASES: dict[str, tuple[dict[str, Any], PodAffinity]] = {
    "required anti-affinity on the hostname": (
        {"podAntiAffinity": {REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR)]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, APP, ML),)),
    ),
    "required affinity by zone": (
        {"podAffinity": {REQUIRED_KEY: [{"topologyKey": ZONE, "labelSelector": APP_SELECTOR}]}},
        PodAffinity(required=(PodAffinityTerm(ZONE, APP, ML),)),
    ),
    "preferred terms carry their weight": (
        {
            "podAffinity": {
                PREFERRED_KEY: [
                    {"weight": 100, "podAffinityTerm": pod_term(labelSelector=APP_SELECTOR)}
                ]
            },
            "podAntiAffinity": {
                PREFERRED_KEY: [{"weight": 1, "podAffinityTerm": pod_term(labelSelector={})}]
            },
        },
        PodAffinity(
            preferred=(WeightedPodAffinityTerm(100, PodAffinityTerm(HOST, APP, ML)),),
            preferred_anti=(
                WeightedPodAffinityTerm(1, PodAffinityTerm(HOST, LabelSelector(), ML)),
            ),
        ),
    ),
    "all four lists at once": (
        {
            "podAffinity": {
                REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR)],
                PREFERRED_KEY: [{"weight": 5, "podAffinityTerm": pod_term(labelSelector={})}],
            },
            "podAntiAffinity": {
                REQUIRED_KEY: [{"topologyKey": ZONE, "labelSelector": APP_SELECTOR}],
                PREFERRED_KEY: [{"weight": 7, "podAffinityTerm": pod_term(labelSelector={})}],
            },
        },
        PodAffinity(
            required=(PodAffinityTerm(HOST, APP, ML),),
            preferred=(WeightedPodAffinityTerm(5, PodAffinityTerm(HOST, LabelSelector(), ML)),),
            required_anti=(PodAffinityTerm(ZONE, APP, ML),),
            preferred_anti=(
                WeightedPodAffinityTerm(7, PodAffinityTerm(HOST, LabelSelector(), ML)),
            ),
        ),
    ),
    "no labelSelector selects no pod": (
        {"podAntiAffinity": {REQUIRED_KEY: [pod_term()]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, None, ML),)),
    ),
    "an empty labelSelector selects every pod": (
        {"podAntiAffinity": {REQUIRED_KEY: [pod_term(labelSelector={})]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, LabelSelector(), ML),)),
    ),
    "every selector operator": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [
                    pod_term(
                        labelSelector={
                            "matchLabels": {"b": "2", "a": "1"},
                            "matchExpressions": [
                                {"key": "tier", "operator": "In", "values": ["x", "y"]},
                                {"key": "env", "operator": "NotIn", "values": ["dev"]},
                                {"key": "gpu", "operator": "Exists"},
                                {"key": "spot", "operator": "DoesNotExist", "values": []},
                            ],
                        }
                    )
                ]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector(
                        (("a", "1"), ("b", "2")),
                        (
                            Requirement("tier", "In", ("x", "y")),
                            Requirement("env", "NotIn", ("dev",)),
                            Requirement("gpu", "Exists"),
                            Requirement("spot", "DoesNotExist"),
                        ),
                    ),
                    ML,
                ),
            )
        ),
    ),
    "namespaces replace the pod's own": (
        {
            "podAffinity": {
                REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR, namespaces=["a", "b", "a"])]
            }
        },
        PodAffinity(required=(PodAffinityTerm(HOST, APP, frozenset({"a", "b"})),)),
    ),
    "an empty namespaceSelector selects every namespace": (
        {
            "podAffinity": {
                REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR, namespaceSelector={})]
            }
        },
        PodAffinity(required=(PodAffinityTerm(HOST, APP, frozenset(), LabelSelector()),)),
    ),
    "namespaceSelector and namespaces together": (
        {
            "podAffinity": {
                REQUIRED_KEY: [
                    pod_term(
                        labelSelector=APP_SELECTOR,
                        namespaces=["shared"],
                        namespaceSelector={"matchLabels": {"team": "ml"}},
                    )
                ]
            }
        },
        PodAffinity(
            required=(
                PodAffinityTerm(HOST, APP, frozenset({"shared"}), LabelSelector((("team", "ml"),))),
            )
        ),
    ),
    "an empty namespaces list is the pod's own namespace": (
        {"podAffinity": {REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR, namespaces=[])]}},
        PodAffinity(required=(PodAffinityTerm(HOST, APP, ML),)),
    ),
    "matchLabelKeys merged as key In (pod's value)": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR, matchLabelKeys=[JOB])]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector((("app", "nccl"),), (Requirement(JOB, "In", ("train",)),)),
                    ML,
                ),
            )
        ),
    ),
    "mismatchLabelKeys merged as key NotIn (pod's value)": (
        {
            "podAffinity": {
                REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR, mismatchLabelKeys=[ROLE])]
            }
        },
        PodAffinity(
            required=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector((("app", "nccl"),), (Requirement(ROLE, "NotIn", ("worker",)),)),
                    ML,
                ),
            )
        ),
    ),
    "label keys the pod does not have add nothing": (
        {
            "podAffinity": {
                REQUIRED_KEY: [
                    pod_term(
                        labelSelector=APP_SELECTOR,
                        matchLabelKeys=["absent"],
                        mismatchLabelKeys=["also-absent"],
                    )
                ]
            }
        },
        PodAffinity(required=(PodAffinityTerm(HOST, APP, ML),)),
    ),
    "already merged by the API server: not added twice": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [
                    pod_term(
                        labelSelector={
                            "matchLabels": {"app": "nccl"},
                            "matchExpressions": [
                                {"key": JOB, "operator": "In", "values": ["train"]},
                                {"key": ROLE, "operator": "NotIn", "values": ["worker"]},
                            ],
                        },
                        matchLabelKeys=[JOB],
                        mismatchLabelKeys=[ROLE],
                    )
                ]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST,
                    LabelSelector(
                        (("app", "nccl"),),
                        (
                            Requirement(JOB, "In", ("train",)),
                            Requirement(ROLE, "NotIn", ("worker",)),
                        ),
                    ),
                    ML,
                ),
            )
        ),
    ),
    # The API server merged the value the pod had when it was created; kube-scheduler reads
    # that selector as stored, whatever the pod's labels became since.
    "merged at creation with a label value changed since: kept as stored": (
        {
            "podAntiAffinity": {
                REQUIRED_KEY: [
                    pod_term(
                        labelSelector={
                            "matchExpressions": [
                                {"key": JOB, "operator": "In", "values": ["old-job"]}
                            ]
                        },
                        matchLabelKeys=[JOB],
                    )
                ]
            }
        },
        PodAffinity(
            required_anti=(
                PodAffinityTerm(
                    HOST, LabelSelector((), (Requirement(JOB, "In", ("old-job",)),)), ML
                ),
            )
        ),
    ),
    "label keys with no labelSelector: still selects nothing": (
        {"podAntiAffinity": {REQUIRED_KEY: [pod_term(matchLabelKeys=[JOB])]}},
        PodAffinity(required_anti=(PodAffinityTerm(HOST, None, ML),)),
    ),
    "empty lists": (
        {"podAffinity": {REQUIRED_KEY: [], PREFERRED_KEY: []}, "podAntiAffinity": {}},
        PodAffinity(),
    ),
}


@pytest.mark.parametrize("case", POD_AFFINITY_CASES.values(), ids=POD_AFFINITY_CASES.keys())
def test_pod_affinity(case: tuple[dict[str, Any], PodAffinity]) -> None:
    affinity, expected = case
    pod, _ = pod_from(patched(POD, (AFFINITY, affinity)))
    assert pod.invalid_reason == ""
    assert pod.unsupported == ""
    assert pod.pod_affinity == expected
    assert pod.placement.affinity == NodeAffinity()


def test_pod_affinity_next_to_node_affinity() -> None:
    obj = patched(
        POD,
        (
            AFFINITY,
            {
                "nodeAffinity": {REQUIRED_KEY: {"nodeSelectorTerms": REQUIRED_TERMS}},
                "podAntiAffinity": {REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR)]},
            },
        ),
    )
    pod, _ = pod_from(obj)
    assert pod.placement.affinity == NodeAffinity(EXPECTED_REQUIRED, ())
    assert pod.pod_affinity == PodAffinity(required_anti=(PodAffinityTerm(HOST, APP, ML),))


def test_pod_without_pod_affinity() -> None:
    pod, _ = pod_from(POD)
    assert pod.pod_affinity == PodAffinity()
    assert not pod.pod_affinity
