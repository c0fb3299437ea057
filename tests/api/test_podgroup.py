"""PodGroups of three conventions into GangSpecs (gangsched.api.podgroup), table-driven: a
PodGroup the reader cannot understand becomes a GangSpec with ``invalid_reason``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gangsched.api.podgroup import podgroup_from, volcano_podgroup_from, xk8s_podgroup_from
from gangsched.core.model import GangMode, GangSpec, RoleSpec, TopologySpec
from tests.api.objects import CREATED, CREATED_TS, DELETE, GI, GPU, Path, patched

# ---- gangsched.io PodGroups ---------------------------------------------------------------
PODGROUP: dict[str, Any] = {
    "apiVersion": "gangsched.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {
        "name": "train",
        "namespace": "ml",
        "uid": "d7c1a3f0-2222-4a4a-9e9e-123456789abc",
        "resourceVersion": "55501",
        "generation": 1,
        "creationTimestamp": CREATED,
        "labels": {"app": "train"},
    },
    "spec": {
        "minMember": 4,
        "totalMember": 5,
        "minResources": {"cpu": "16", "memory": "64Gi", GPU: "4"},
        "scheduleTimeoutSeconds": 120,
        "mode": "NonStrict",
        "onceSatisfied": "Gang",
        "roles": [{"name": "ps", "minMember": 1}, {"name": "worker", "minMember": 3}],
        "gangGroup": ["eval", "ml/train", "data/loader"],
        "topology": {"affinity": [["ps", "worker"]], "antiAffinity": [["worker"]]},
    },
    "status": {"phase": "Pending", "running": 0, "succeeded": 0, "failed": 0},
}


def test_podgroup_every_field() -> None:
    assert podgroup_from(PODGROUP) == GangSpec(
        key="ml/train",
        min_member=4,
        min_resources={"cpu": 16000, "memory": 64 * GI, GPU: 4},
        timeout_seconds=120.0,
        created=CREATED_TS,
        mode=GangMode.NON_STRICT,
        roles=(RoleSpec("ps", 1), RoleSpec("worker", 3)),
        gang_group=("data/loader", "ml/eval", "ml/train"),
        topology=TopologySpec(affinity=(("ps", "worker"),), anti_affinity=(("worker",),)),
        once_satisfied_alone=False,
        invalid_reason="",
    )


def test_podgroup_defaults() -> None:
    pg = {
        "apiVersion": "gangsched.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "solo", "namespace": "ml", "creationTimestamp": CREATED},
        "spec": {"minMember": 2},
    }
    assert podgroup_from(pg) == GangSpec(key="ml/solo", min_member=2, created=CREATED_TS)
    spec = podgroup_from(pg)
    assert spec.timeout_seconds is None
    assert spec.mode is GangMode.STRICT
    assert spec.once_satisfied_alone is True
    assert spec.gang_group == ()
    assert spec.roles == ()
    assert spec.topology == TopologySpec()


def test_podgroup_namespace_defaults() -> None:
    pg = patched(PODGROUP, (("metadata", "namespace"), DELETE), (("spec", "gangGroup"), ["a"]))
    spec = podgroup_from(pg)
    assert spec.key == "default/train"
    assert spec.gang_group == ("default/a", "default/train")


@pytest.mark.parametrize(
    ("group", "expected"),
    [
        (DELETE, ()),
        ([], ()),
        (["eval"], ("ml/eval", "ml/train")),  # the gang's own key is always included
        (["train"], ("ml/train",)),  # naming itself is fine
        (["ml/train", "train"], ("ml/train",)),
        (["other/eval", "eval", "eval"], ("ml/eval", "ml/train", "other/eval")),
        (["z", "a"], ("ml/a", "ml/train", "ml/z")),  # sorted
    ],
)
def test_podgroup_gang_group(group: object, expected: tuple[str, ...]) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "gangGroup"), group)))
    assert spec.invalid_reason == ""
    assert spec.gang_group == expected


@pytest.mark.parametrize(
    ("value", "alone"), [("Independent", True), ("Gang", False), (DELETE, True)]
)
def test_podgroup_once_satisfied(value: object, alone: bool) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "onceSatisfied"), value)))
    assert spec.invalid_reason == ""
    assert spec.once_satisfied_alone is alone


@pytest.mark.parametrize(
    ("value", "mode"),
    [("Strict", GangMode.STRICT), ("NonStrict", GangMode.NON_STRICT), (DELETE, GangMode.STRICT)],
)
def test_podgroup_mode(value: object, mode: GangMode) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "mode"), value)))
    assert spec.invalid_reason == ""
    assert spec.mode is mode


@pytest.mark.parametrize(
    ("value", "expected"), [(1, 1.0), (300, 300.0), (86400, 86400.0), (DELETE, None)]
)
def test_podgroup_timeout(value: object, expected: float | None) -> None:
    spec = podgroup_from(patched(PODGROUP, (("spec", "scheduleTimeoutSeconds"), value)))
    assert spec.timeout_seconds == expected


def test_podgroup_roles_and_topology() -> None:
    pg = patched(
        PODGROUP,
        (("spec", "roles"), [{"name": "launcher", "minMember": 0}, {"name": "worker"}]),
        (("spec", "topology"), {"antiAffinity": [["launcher", "worker"], []]}),
    )
    spec = podgroup_from(pg)
    assert spec.invalid_reason == ""
    assert spec.roles == (RoleSpec("launcher", 0), RoleSpec("worker", 0))
    assert spec.topology == TopologySpec(affinity=(), anti_affinity=(("launcher", "worker"), ()))


INVALID_PODGROUP_CASES: dict[str, tuple[tuple[Path, object], str]] = {
    "minMember 0": ((("spec", "minMember"), 0), "spec.minMember"),
    "minMember negative": ((("spec", "minMember"), -1), "spec.minMember"),
    "minMember a string": ((("spec", "minMember"), "3"), "spec.minMember"),
    "minMember a float": ((("spec", "minMember"), 2.5), "spec.minMember"),
    "minMember a boolean": ((("spec", "minMember"), True), "spec.minMember"),
    "minMember null": ((("spec", "minMember"), None), "spec.minMember"),
    "unknown mode": ((("spec", "mode"), "Lenient"), "spec.mode"),
    "lowercase mode": ((("spec", "mode"), "strict"), "spec.mode"),
    "bad quantity": ((("spec", "minResources", "memory"), "12Qi"), "spec.minResources.memory"),
    "fractional gpu": ((("spec", "minResources", GPU), "0.5"), "spec.minResources.nvidia.com/gpu"),
    "negative cpu": ((("spec", "minResources", "cpu"), "-2"), "spec.minResources.cpu"),
    "minResources not an object": ((("spec", "minResources"), "16 cpus"), "spec.minResources"),
    "timeout 0": ((("spec", "scheduleTimeoutSeconds"), 0), "spec.scheduleTimeoutSeconds"),
    "timeout a string": ((("spec", "scheduleTimeoutSeconds"), "60"), "spec.scheduleTimeoutSeconds"),
    "timeout a float": ((("spec", "scheduleTimeoutSeconds"), 1.5), "spec.scheduleTimeoutSeconds"),
    "role minMember negative": (
        (("spec", "roles"), [{"name": "worker", "minMember": -1}]),
        "role",
    ),
    "role minMember a string": (
        (("spec", "roles"), [{"name": "worker", "minMember": "3"}]),
        "role",
    ),
    "roles not a list": ((("spec", "roles"), {"worker": 3}), "spec.roles"),
    "role not an object": ((("spec", "roles"), ["worker"]), "role"),
    "gangGroup not a list": ((("spec", "gangGroup"), "eval"), "spec.gangGroup"),
    "topology not an object": ((("spec", "topology"), [["ps"]]), "spec.topology"),
    "topology affinity not a list": ((("spec", "topology", "affinity"), "ps"), "topology.affinity"),
    "topology affinity group not a list": (
        (("spec", "topology", "antiAffinity"), ["worker"]),
        "antiAffinity",
    ),
    "spec not an object": ((("spec",), ["minMember", 4]), "spec"),
}


@pytest.mark.parametrize("case", INVALID_PODGROUP_CASES.values(), ids=INVALID_PODGROUP_CASES.keys())
def test_invalid_podgroup(case: tuple[tuple[Path, object], str]) -> None:
    change, field = case
    spec = podgroup_from(patched(PODGROUP, change))
    assert field in spec.invalid_reason
    assert spec.key == "ml/train"
    assert spec.created == CREATED_TS


# ---- scheduler-plugins PodGroups ----------------------------------------------------------

XK8S_PODGROUP: dict[str, Any] = {
    "apiVersion": "scheduling.x-k8s.io/v1alpha1",
    "kind": "PodGroup",
    "metadata": {
        "name": "nginx",
        "namespace": "web",
        "creationTimestamp": CREATED,
        "uid": "8a7b6c5d-3333-4f4f-8e8e-abcdefabcdef",
    },
    "spec": {
        "minMember": 3,
        "minResources": {"cpu": "3", "memory": "3Gi", GPU: "3"},
        "scheduleTimeoutSeconds": 10,
    },
    "status": {"phase": "Pending", "occupiedBy": "web/nginx-job", "scheduled": 0},
}


def test_xk8s_podgroup() -> None:
    assert xk8s_podgroup_from(XK8S_PODGROUP) == GangSpec(
        key="web/nginx",
        min_member=3,
        min_resources={"cpu": 3000, "memory": 3 * GI, GPU: 3},
        timeout_seconds=10.0,
        created=CREATED_TS,
    )


def test_xk8s_podgroup_reads_only_its_own_fields() -> None:
    pg = patched(
        XK8S_PODGROUP,
        (("spec", "mode"), "NonStrict"),
        (("spec", "roles"), [{"name": "w", "minMember": 1}]),
        (("spec", "gangGroup"), ["other"]),
        (("spec", "topology"), {"affinity": [["w"]]}),
        (("spec", "onceSatisfied"), "Gang"),
    )
    assert xk8s_podgroup_from(pg) == xk8s_podgroup_from(XK8S_PODGROUP)
    # Fields it does not read cannot make it invalid either.
    bogus = patched(XK8S_PODGROUP, (("spec", "mode"), "Bogus"), (("spec", "roles"), "x"))
    assert xk8s_podgroup_from(bogus).invalid_reason == ""


def test_xk8s_podgroup_minimal() -> None:
    pg = patched(
        XK8S_PODGROUP,
        (("spec", "minResources"), DELETE),
        (("spec", "scheduleTimeoutSeconds"), DELETE),
    )
    assert xk8s_podgroup_from(pg) == GangSpec("web/nginx", 3, created=CREATED_TS)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ((("spec", "minMember"), 0), "spec.minMember"),
        ((("spec", "minMember"), "3"), "spec.minMember"),
        ((("spec", "minResources", "cpu"), "12Qi"), "spec.minResources.cpu"),
        ((("spec", "scheduleTimeoutSeconds"), -1), "spec.scheduleTimeoutSeconds"),
        ((("spec", "scheduleTimeoutSeconds"), "60"), "spec.scheduleTimeoutSeconds"),
    ],
)
def test_invalid_xk8s_podgroup(change: tuple[Path, object], field: str) -> None:
    spec = xk8s_podgroup_from(patched(XK8S_PODGROUP, change))
    assert field in spec.invalid_reason
    assert spec.key == "web/nginx"


# ---- Volcano PodGroups --------------------------------------------------------------------

VOLCANO_PODGROUP: dict[str, Any] = {
    "apiVersion": "scheduling.volcano.sh/v1beta1",
    "kind": "PodGroup",
    "metadata": {
        "name": "tf-job",
        "namespace": "research",
        "creationTimestamp": CREATED,
        "ownerReferences": [{"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job"}],
    },
    "spec": {
        "minMember": 3,
        "minTaskMember": {"worker": 2, "ps": 1},
        "minResources": {"cpu": "3", "memory": "6Gi", GPU: 2},
        "queue": "default",
        "priorityClassName": "high",
    },
    "status": {"phase": "Inqueue"},
}


def test_volcano_podgroup() -> None:
    assert volcano_podgroup_from(VOLCANO_PODGROUP) == GangSpec(
        key="research/tf-job",
        min_member=3,
        min_resources={"cpu": 3000, "memory": 6 * GI, GPU: 2},
        timeout_seconds=None,
        created=CREATED_TS,
        roles=(RoleSpec("ps", 1), RoleSpec("worker", 2)),  # sorted by task name
    )


@pytest.mark.parametrize(
    ("change", "roles"),
    [
        ((("spec", "minTaskMember"), DELETE), ()),
        ((("spec", "minTaskMember"), {}), ()),
        ((("spec", "minTaskMember"), {"worker": 0}), (RoleSpec("worker", 0),)),
    ],
)
def test_volcano_task_minimums(change: tuple[Path, object], roles: tuple[RoleSpec, ...]) -> None:
    spec = volcano_podgroup_from(patched(VOLCANO_PODGROUP, change))
    assert spec.invalid_reason == ""
    assert spec.roles == roles


def test_volcano_podgroup_minimal() -> None:
    pg = {"metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": 2}}
    assert volcano_podgroup_from(pg) == GangSpec("ns/pg", 2)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ((("spec", "minMember"), 0), "spec.minMember"),
        ((("spec", "minTaskMember"), {"worker": -1}), "role"),
        ((("spec", "minTaskMember"), {"worker": "2"}), "role"),
        ((("spec", "minResources", "memory"), "6Gb"), "spec.minResources.memory"),
    ],
)
def test_invalid_volcano_podgroup(change: tuple[Path, object], field: str) -> None:
    spec = volcano_podgroup_from(patched(VOLCANO_PODGROUP, change))
    assert field in spec.invalid_reason
    assert spec.key == "research/tf-job"


# ---- preemption and expected run time: spec fields, or the other conventions' annotations ----
def _pg(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> Any:
    meta: dict[str, Any] = {"name": "g", "namespace": "ml"}
    if annotations is not None:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"minMember": 2, **spec}}


def test_a_podgroup_preempts_and_has_no_expected_runtime_by_default() -> None:
    gang = podgroup_from(_pg({}))
    assert (gang.preempt, gang.expected_runtime_seconds, gang.invalid_reason) == (True, None, "")


@pytest.mark.parametrize(
    ("spec", "preempt", "runtime"),
    [
        ({"preemptionPolicy": "Never"}, False, None),
        ({"preemptionPolicy": "PreemptLowerPriority"}, True, None),
        ({"expectedRuntimeSeconds": 600}, True, 600.0),
        ({"expectedRuntimeSeconds": 0.5, "preemptionPolicy": "Never"}, False, 0.5),
    ],
)
def test_podgroup_spec_fields(spec: dict[str, Any], preempt: bool, runtime: float | None) -> None:
    gang = podgroup_from(_pg(spec))
    assert not gang.invalid_reason
    assert (gang.preempt, gang.expected_runtime_seconds) == (preempt, runtime)
    assert gang.min_member == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"preemptionPolicy": "never"},
            "spec.preemptionPolicy: must be PreemptLowerPriority or Never, got 'never'",
        ),
        ({"preemptionPolicy": 1}, "spec.preemptionPolicy: must be PreemptLowerPriority or Never"),
        ({"expectedRuntimeSeconds": 0}, "spec.expectedRuntimeSeconds: must be a number of"),
        ({"expectedRuntimeSeconds": -5}, "spec.expectedRuntimeSeconds: must be a number of"),
        ({"expectedRuntimeSeconds": "600"}, "spec.expectedRuntimeSeconds: expected a number"),
        ({"expectedRuntimeSeconds": True}, "spec.expectedRuntimeSeconds: expected a number"),
        ({"expectedRuntimeSeconds": float("inf")}, "spec.expectedRuntimeSeconds: must be"),
    ],
)
def test_bad_podgroup_spec_fields_are_an_invalid_spec(spec: dict[str, Any], message: str) -> None:
    gang = podgroup_from(_pg(spec))
    assert gang.invalid_reason.startswith(message), gang.invalid_reason


@pytest.mark.parametrize("parse", [xk8s_podgroup_from, volcano_podgroup_from])
def test_other_conventions_say_it_with_annotations(parse: Callable[[Any], Any]) -> None:
    plain = parse(_pg({}))
    assert (plain.preempt, plain.expected_runtime_seconds, plain.invalid_reason) == (True, None, "")
    annotated = parse(
        _pg(
            {},
            {
                "gangsched.io/preemption-policy": "Never",
                "gangsched.io/expected-runtime-seconds": "90.5",
            },
        )
    )
    assert not annotated.invalid_reason
    assert (annotated.preempt, annotated.expected_runtime_seconds) == (False, 90.5)
    assert annotated.min_member == 2
    # the spec fields of gangsched's own PodGroup mean nothing there
    assert parse(_pg({"preemptionPolicy": "Never"})).preempt is True


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"gangsched.io/preemption-policy": "no"},
            "metadata.annotations[gangsched.io/preemption-policy]: must be "
            "PreemptLowerPriority or Never, got 'no'",
        ),
        (
            {"gangsched.io/expected-runtime-seconds": "10m"},
            "metadata.annotations[gangsched.io/expected-runtime-seconds]: expected a number "
            "of seconds, got '10m'",
        ),
        (
            {"gangsched.io/expected-runtime-seconds": "0"},
            "metadata.annotations[gangsched.io/expected-runtime-seconds]: must be a number of "
            "seconds > 0, got '0'",
        ),
        (
            {"gangsched.io/expected-runtime-seconds": "nan"},
            "metadata.annotations[gangsched.io/expected-runtime-seconds]: must be a number of "
            "seconds > 0",
        ),
    ],
)
@pytest.mark.parametrize("parse", [xk8s_podgroup_from, volcano_podgroup_from])
def test_bad_annotations_are_an_invalid_spec_naming_the_annotation(
    parse: Callable[[Any], Any], annotations: dict[str, str], message: str
) -> None:
    gang = parse(_pg({}, annotations))
    assert gang.invalid_reason.startswith(message), gang.invalid_reason
    assert gang.key == "ml/g"


def test_a_bad_minmember_is_reported_before_the_annotations() -> None:
    gang = xk8s_podgroup_from(
        _pg({"minMember": 0}, {"gangsched.io/preemption-policy": "no"}),
    )
    assert gang.invalid_reason.startswith("spec.minMember")
