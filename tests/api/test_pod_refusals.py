"""Pods the reader refuses (gangsched.api.pod), table-driven. Reading never raises: a pod it
cannot understand becomes a Pod with ``invalid_reason`` naming the field; a pod asking for what
gangsched does not implement (resource claims, in-tree volumes, node declared features) gets
``unsupported`` naming the field, and its other fields are still read."""

from __future__ import annotations

from typing import Any

import pytest

from gangsched.api.pod import pod_from
from gangsched.core.model import (
    GangSpec,
    HostPort,
    PodAffinityTerm,
    PodPhase,
    PodVolumes,
    SpreadConstraint,
)
from tests.api.objects import (
    AFFINITY,
    APP,
    APP_SELECTOR,
    C0,
    C0_REQUESTS,
    CREATED_TS,
    GI,
    GPU,
    HOST,
    ML,
    POD,
    PREFERRED_KEY,
    REQUIRED_KEY,
    ZONE,
    Path,
    ctr,
    patched,
    pod_term,
    port_term,
    sidecar,
    spread_term,
    with_spec,
)

# ---- invalid pods -------------------------------------------------------------------------
REQUIRED_AFFINITY = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "Matches", "values": ["a"]}]}
            ]
        }
    }
}

INVALID_POD_CASES: dict[str, tuple[tuple[Path, object], str]] = {
    "unparsable quantity": (
        ((*C0_REQUESTS, "memory"), "12Qi"),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "fractional gpu": (
        ((*C0_REQUESTS, GPU), "0.5"),
        "spec.containers[pytorch].resources.requests.nvidia.com/gpu",
    ),
    "gpu in milli-units that is not whole": (
        ((*C0_REQUESTS, GPU), "500m"),
        "spec.containers[pytorch].resources.requests.nvidia.com/gpu",
    ),
    "negative cpu": (
        ((*C0_REQUESTS, "cpu"), "-1"),
        "spec.containers[pytorch].resources.requests.cpu",
    ),
    "negative memory": (
        ((*C0_REQUESTS, "memory"), "-500Mi"),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "quantity with a space": (
        ((*C0_REQUESTS, "cpu"), "1 core"),
        "spec.containers[pytorch].resources.requests.cpu",
    ),
    "boolean quantity": (
        ((*C0_REQUESTS, "cpu"), True),
        "spec.containers[pytorch].resources.requests.cpu",
    ),
    "null quantity": (
        ((*C0_REQUESTS, "memory"), None),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "quantity too large": (
        ((*C0_REQUESTS, "memory"), "10E"),
        "spec.containers[pytorch].resources.requests.memory",
    ),
    "unnamed container uses its index": (
        (C0, {"image": "x", "resources": {"requests": {"memory": "12Qi"}}}),
        "spec.containers[0].resources.requests.memory",
    ),
    "string priority": ((("spec", "priority"), "100"), "spec.priority"),
    "float priority": ((("spec", "priority"), 1.5), "spec.priority"),
    "boolean priority": ((("spec", "priority"), True), "spec.priority"),
    "unknown affinity operator": (
        (AFFINITY, REQUIRED_AFFINITY),
        "nodeSelectorTerms[0].matchExpressions[0].operator",
    ),
    "lowercase affinity operator": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchFields": [{"key": "metadata.name", "operator": "in"}]}
                        ]
                    }
                }
            },
        ),
        "nodeSelectorTerms[0].matchFields[0].operator",
    ),
    "unknown operator in a preferred term": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 10,
                            "preference": {"matchExpressions": [{"key": "a", "operator": "Near"}]},
                        }
                    ]
                }
            },
        ),
        "matchExpressions[0].operator",
    ),
    "affinity values not a list": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "a", "operator": "In", "values": "x"}]}
                        ]
                    }
                }
            },
        ),
        "nodeSelectorTerms[0].matchExpressions[0].values",
    ),
    "nodeSelectorTerms not a list": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": {}}
                }
            },
        ),
        "nodeSelectorTerms",
    ),
    "preferred weight not a number": (
        (
            AFFINITY,
            {
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": "heavy", "preference": {}}
                    ]
                }
            },
        ),
        "weight",
    ),
    "affinity not an object": ((AFFINITY, ["nodeAffinity"]), "spec.affinity"),
    "containers not a list": ((("spec", "containers"), {"name": "pytorch"}), "spec.containers"),
    "container not an object": ((("spec", "containers"), ["pytorch"]), "spec.containers[0]"),
    "resources not an object": (((*C0, "resources"), "big"), "spec.containers[0].resources"),
    "requests not an object": ((C0_REQUESTS, ["cpu", "1"]), "requests"),
    "initContainers not a list": ((("spec", "initContainers"), "setup"), "spec.initContainers"),
    "bad init container quantity": (
        (("spec", "initContainers"), [ctr("setup", {"cpu": "2 cores"})]),
        "spec.initContainers[setup].resources.requests.cpu",
    ),
    "bad sidecar quantity": (
        (("spec", "initContainers"), [sidecar("proxy", {GPU: "0.5"})]),
        "spec.initContainers[proxy].resources.requests.nvidia.com/gpu",
    ),
    "bad overhead": ((("spec", "overhead"), {"cpu": "12Qi"}), "spec.overhead.cpu"),
    "overhead not an object": ((("spec", "overhead"), "250m"), "spec.overhead"),
    "bad pod-level request": (
        (("spec", "resources"), {"requests": {"memory": "-1Gi"}}),
        "spec.resources.requests.memory",
    ),
    "pod-level resources not an object": ((("spec", "resources"), ["cpu"]), "spec.resources"),
    "tolerations not a list": ((("spec", "tolerations"), {"key": "a"}), "spec.tolerations"),
    "nodeSelector not an object": ((("spec", "nodeSelector"), "gpu=true"), "nodeSelector"),
}


@pytest.mark.parametrize("case", INVALID_POD_CASES.values(), ids=INVALID_POD_CASES.keys())
def test_invalid_pod(case: tuple[tuple[Path, object], str]) -> None:
    change, field = case
    pod, membership = pod_from(patched(POD, change))
    assert field in pod.invalid_reason
    # Identity, gang and phase are still known, so the pod is reported and accounted.
    assert (pod.uid, pod.key, pod.group, pod.role) == (
        "7c0e9a52-64d4-4b0b-8f0e-0c2f0d9d6a31",
        "ml/train-worker-0",
        "ml/train",
        "worker",
    )
    assert membership.key == "ml/train"
    assert pod.requests.get("pods") == 1


def test_invalid_pod_is_accounted_where_it_runs() -> None:
    obj = patched(
        POD,
        ((*C0_REQUESTS, "memory"), "12Qi"),
        (("spec", "nodeName"), "gpu-a100-0"),
        (("status", "phase"), "Running"),
    )
    pod, _ = pod_from(obj)
    assert pod.invalid_reason
    assert pod.node_name == "gpu-a100-0"
    assert pod.phase is PodPhase.RUNNING
    assert pod.requests == {"pods": 1}  # its requests are unknown; it still takes a pod slot


def test_invalid_reason_names_the_quantity() -> None:
    pod, _ = pod_from(patched(POD, ((*C0_REQUESTS, "memory"), "12Qi")))
    assert "12Qi" in pod.invalid_reason


def test_pod_declaring_two_gangs_is_invalid() -> None:
    obj = patched(POD, (("metadata", "labels", "scheduling.x-k8s.io/pod-group"), "other"))
    pod, membership = pod_from(obj)
    assert "ml/train" in pod.invalid_reason
    assert "ml/other" in pod.invalid_reason
    assert pod.group == ""
    assert pod.role == "worker"
    assert membership.error and membership.error in pod.invalid_reason
    assert pod.requests == {"cpu": 7500, "memory": 60 * GI, GPU: 1, "pods": 1}


def test_pod_with_two_problems_reports_both() -> None:
    obj = patched(
        POD,
        (("metadata", "labels", "scheduling.x-k8s.io/pod-group"), "other"),
        ((*C0_REQUESTS, "cpu"), "-1"),
    )
    pod, _ = pod_from(obj)
    assert "more than one gang" in pod.invalid_reason
    assert "spec.containers[pytorch].resources.requests.cpu" in pod.invalid_reason


def test_pod_gang_from_annotations() -> None:
    obj = patched(
        POD,
        (("metadata", "labels"), {"app": "train"}),
        (
            ("metadata", "annotations"),
            {
                "scheduling.k8s.io/group-name": "train",
                "scheduling.k8s.io/group-pod-num": "4",
                "volcano.sh/task-spec": "ps",
            },
        ),
    )
    pod, membership = pod_from(obj)
    assert (pod.group, pod.role) == ("ml/train", "ps")
    assert membership.implicit == GangSpec("ml/train", 4, created=CREATED_TS)


# ---- pods gangsched refuses ---------------------------------------------------------------
RESOURCE_CLAIMS = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]


def test_resource_claims_are_read_by_name_and_from_the_status_for_templates() -> None:
    claims = [*RESOURCE_CLAIMS, {"name": "imex", "resourceClaimName": "domain-a"}]
    pod, _ = pod_from(with_spec(resourceClaims=claims))
    assert (pod.invalid_reason, pod.unsupported) == ("", "")
    assert pod.resource_claims == ("ml/domain-a",)
    assert pod.claims_waiting.startswith("spec.resourceClaims[0] (gpu): waiting for the")
    made = patched(
        with_spec(resourceClaims=claims),
        (("status", "resourceClaimStatuses"), [{"name": "gpu", "resourceClaimName": "w0-gpu"}]),
    )
    pod, _ = pod_from(made)
    assert (pod.resource_claims, pod.claims_waiting) == (("ml/w0-gpu", "ml/domain-a"), "")
    # an entry the status lists without a name needs no claim
    none = patched(
        with_spec(resourceClaims=RESOURCE_CLAIMS),
        (("status", "resourceClaimStatuses"), [{"name": "gpu"}]),
    )
    pod, _ = pod_from(none)
    assert (pod.resource_claims, pod.claims_waiting) == ((), "")


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ({"name": "gpu"}, "spec.resourceClaims[0]: exactly one of"),
        (
            {"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"},
            "spec.resourceClaims[0]: exactly one of",
        ),
        ({"resourceClaimName": "a"}, "spec.resourceClaims[0].name"),
        ({"name": "gpu", "resourceClaimName": 7}, "spec.resourceClaims[0].resourceClaimName"),
    ],
)
def test_a_malformed_resource_claim_entry_names_the_field(
    entry: dict[str, Any], field: str
) -> None:
    pod, _ = pod_from(with_spec(resourceClaims=[entry]))
    assert field in pod.invalid_reason


UNSUPPORTED_CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    **{
        f"inline {source}": (
            with_spec(
                volumes=[
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "disk", source: {"volumeID": "x"}},
                ]
            ),
            [f"spec.volumes[1].{source}: inline {source} volumes are not supported by gangsched"],
        )
        for source in (
            "gcePersistentDisk",
            "awsElasticBlockStore",
            "rbd",
            "iscsi",
            "azureDisk",
            "azureFile",
            "cinder",
            "vsphereVolume",
            "portworxVolume",
        )
    },
    "RestartAllContainers rule (NodeDeclaredFeatures)": (
        with_spec(
            containers=[
                ctr("a"),
                ctr(
                    "b",
                    restartPolicy="Never",
                    restartPolicyRules=[
                        {"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}},
                        {"action": "RestartAllContainers"},
                    ],
                ),
            ]
        ),
        [
            "spec.containers[1].restartPolicyRules[1].action: RestartAllContainers needs a node "
            "that declares the feature RestartAllContainersOnContainerExits"
        ],
    ),
    "RestartAllContainers rule on an init container": (
        with_spec(
            initContainers=[ctr("i", restartPolicyRules=[{"action": "RestartAllContainers"}])]
        ),
        ["spec.initContainers[0].restartPolicyRules[0].action"],
    ),
    "user namespace with hostNetwork (NodeDeclaredFeatures)": (
        with_spec(hostNetwork=True, hostUsers=False),
        ["spec.hostUsers: a user namespace with hostNetwork needs a node that declares"],
    ),
    "several fields, each named": (
        with_spec(
            hostNetwork=True,
            hostUsers=False,
            volumes=[{"name": "d", "rbd": {"image": "i"}}, {"name": "e", "cinder": {}}],
        ),
        ["spec.hostUsers", "spec.volumes[0].rbd", "spec.volumes[1].cinder"],
    ),
}


@pytest.mark.parametrize("case", UNSUPPORTED_CASES.values(), ids=UNSUPPORTED_CASES.keys())
def test_unsupported_pod(case: tuple[dict[str, Any], list[str]]) -> None:
    obj, expected = case
    pod, membership = pod_from(obj)
    assert pod.invalid_reason == ""
    for text in expected:
        assert text in pod.unsupported
    assert pod.refused == pod.unsupported
    # Everything else is read: it is reported and accounted like any other pod.
    assert (pod.key, pod.group, membership.key) == ("ml/train-worker-0", "ml/train", "ml/train")
    assert pod.labels == POD["metadata"]["labels"]


@pytest.mark.parametrize(
    "spec",
    [
        {"resourceClaims": []},
        {"resourceClaims": None},
        {"hostUsers": False},
        {"hostNetwork": True, "hostUsers": True},
        {"containers": [ctr("a", restartPolicyRules=[{"action": "Restart"}])]},
        {"volumes": [{"name": "d", "gcePersistentDisk": None}]},
    ],
    ids=repr,
)
def test_supported_lookalikes_are_not_refused(spec: dict[str, Any]) -> None:
    pod, _ = pod_from(with_spec(**spec))
    assert (pod.invalid_reason, pod.unsupported) == ("", "")


def test_unsupported_bound_pod_still_counts_its_ports_and_terms() -> None:
    obj = with_spec(
        nodeName="gpu-a100-0",
        volumes=[{"name": "d", "rbd": {"image": "i"}}],
        containers=[ctr("a", {"cpu": "1"}, ports=[port_term(80, hostPort=80)])],
        affinity={"podAntiAffinity": {REQUIRED_KEY: [pod_term(labelSelector=APP_SELECTOR)]}},
        topologySpreadConstraints=[spread_term()],
    )
    obj = patched(obj, (("status", "phase"), "Running"))
    pod, _ = pod_from(obj)
    assert pod.unsupported.startswith("spec.volumes[0].rbd")
    assert pod.node_name == "gpu-a100-0"
    assert pod.requests == {"cpu": 1000, "pods": 1}
    assert pod.host_ports == (HostPort(80),)
    assert pod.pod_affinity.required_anti == (PodAffinityTerm(HOST, APP, ML),)
    assert pod.spread == (SpreadConstraint(1, ZONE, "DoNotSchedule", APP),)


def _affinity_term(kind: str, term: object) -> tuple[Path, object]:
    return (AFFINITY, {kind: {REQUIRED_KEY: [term]}})


ANTI_TERM = "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0]"
SPREAD0 = "spec.topologySpreadConstraints[0]"
TSC: Path = ("spec", "topologySpreadConstraints")

INVALID_CONSTRAINT_CASES: dict[str, tuple[tuple[Path, object], str]] = {
    "unknown selector operator": (
        _affinity_term(
            "podAntiAffinity",
            pod_term(labelSelector={"matchExpressions": [{"key": "a", "operator": "Gt"}]}),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].operator",
    ),
    "In without values": (
        _affinity_term(
            "podAntiAffinity",
            pod_term(labelSelector={"matchExpressions": [{"key": "a", "operator": "In"}]}),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].values",
    ),
    "Exists with values": (
        _affinity_term(
            "podAntiAffinity",
            pod_term(
                labelSelector={
                    "matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]
                }
            ),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].values",
    ),
    "selector value not a string": (
        _affinity_term(
            "podAntiAffinity",
            pod_term(
                labelSelector={"matchExpressions": [{"key": "a", "operator": "In", "values": [1]}]}
            ),
        ),
        f"{ANTI_TERM}.labelSelector.matchExpressions[0].values[0]",
    ),
    "matchLabels value not a string": (
        _affinity_term("podAntiAffinity", pod_term(labelSelector={"matchLabels": {"app": None}})),
        f"{ANTI_TERM}.labelSelector.matchLabels.app",
    ),
    "no topologyKey": (
        _affinity_term("podAntiAffinity", {"labelSelector": APP_SELECTOR}),
        f"{ANTI_TERM}.topologyKey",
    ),
    "empty topologyKey": (
        _affinity_term("podAffinity", pod_term(topologyKey="", labelSelector=APP_SELECTOR)),
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
    ),
    "namespaces not a list": (
        _affinity_term("podAntiAffinity", pod_term(labelSelector=APP_SELECTOR, namespaces="ml")),
        f"{ANTI_TERM}.namespaces",
    ),
    "bad namespaceSelector": (
        _affinity_term(
            "podAntiAffinity",
            pod_term(
                labelSelector=APP_SELECTOR,
                namespaceSelector={"matchExpressions": [{"key": "t", "operator": "Near"}]},
            ),
        ),
        f"{ANTI_TERM}.namespaceSelector.matchExpressions[0].operator",
    ),
    "matchLabelKeys not strings": (
        _affinity_term("podAntiAffinity", pod_term(labelSelector={}, matchLabelKeys=[7])),
        f"{ANTI_TERM}.matchLabelKeys[0]",
    ),
    "preferred weight 0": (
        (
            AFFINITY,
            {"podAffinity": {PREFERRED_KEY: [{"weight": 0, "podAffinityTerm": pod_term()}]}},
        ),
        "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    "preferred weight 101": (
        (
            AFFINITY,
            {"podAntiAffinity": {PREFERRED_KEY: [{"weight": 101, "podAffinityTerm": pod_term()}]}},
        ),
        "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    "preferred weight a string": (
        (
            AFFINITY,
            {"podAntiAffinity": {PREFERRED_KEY: [{"weight": "5", "podAffinityTerm": pod_term()}]}},
        ),
        "preferredDuringSchedulingIgnoredDuringExecution[0].weight",
    ),
    "preferred without a term": (
        (AFFINITY, {"podAntiAffinity": {PREFERRED_KEY: [{"weight": 5}]}}),
        "preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm",
    ),
    "podAntiAffinity not an object": (
        (AFFINITY, {"podAntiAffinity": [pod_term()]}),
        "spec.affinity.podAntiAffinity",
    ),
    "required terms not a list": (
        (AFFINITY, {"podAffinity": {REQUIRED_KEY: pod_term()}}),
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    ),
    "maxSkew 0": ((TSC, [spread_term(maxSkew=0)]), f"{SPREAD0}.maxSkew"),
    "maxSkew a string": ((TSC, [spread_term(maxSkew="1")]), f"{SPREAD0}.maxSkew"),
    "maxSkew a float": ((TSC, [spread_term(maxSkew=1.5)]), f"{SPREAD0}.maxSkew"),
    "maxSkew missing": (
        (TSC, [{"topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}]),
        f"{SPREAD0}.maxSkew",
    ),
    "unknown whenUnsatisfiable": (
        (TSC, [spread_term(whenUnsatisfiable="Sometimes")]),
        f"{SPREAD0}.whenUnsatisfiable",
    ),
    "whenUnsatisfiable missing": (
        (TSC, [{"maxSkew": 1, "topologyKey": ZONE}]),
        f"{SPREAD0}.whenUnsatisfiable",
    ),
    "spread without a topologyKey": (
        (TSC, [spread_term(topologyKey="")]),
        f"{SPREAD0}.topologyKey",
    ),
    "minDomains 0": ((TSC, [spread_term(minDomains=0)]), f"{SPREAD0}.minDomains"),
    "minDomains with ScheduleAnyway": (
        (TSC, [spread_term(minDomains=2, whenUnsatisfiable="ScheduleAnyway")]),
        f"{SPREAD0}.minDomains",
    ),
    "unknown nodeAffinityPolicy": (
        (TSC, [spread_term(nodeAffinityPolicy="Always")]),
        f"{SPREAD0}.nodeAffinityPolicy",
    ),
    "unknown nodeTaintsPolicy": (
        (TSC, [spread_term(nodeTaintsPolicy="honor")]),
        f"{SPREAD0}.nodeTaintsPolicy",
    ),
    "duplicate topologyKey and whenUnsatisfiable": (
        (TSC, [spread_term(), spread_term(maxSkew=2)]),
        "spec.topologySpreadConstraints[1]: duplicate",
    ),
    "bad spread selector": (
        (TSC, [spread_term(labelSelector={"matchExpressions": [{"key": "a", "operator": "Lt"}]})]),
        f"{SPREAD0}.labelSelector.matchExpressions[0].operator",
    ),
    "topologySpreadConstraints not a list": (
        (TSC, spread_term()),
        "spec.topologySpreadConstraints",
    ),
    "hostPort above 65535": (
        ((*C0, "ports"), [port_term(80, hostPort=70000)]),
        "spec.containers[0].ports[0].hostPort",
    ),
    "negative hostPort": (
        ((*C0, "ports"), [port_term(80, hostPort=-1)]),
        "spec.containers[0].ports[0].hostPort",
    ),
    "hostPort a string": (
        ((*C0, "ports"), [port_term(80, hostPort="80")]),
        "spec.containers[0].ports[0].hostPort",
    ),
    "unknown protocol": (
        ((*C0, "ports"), [port_term(80, hostPort=80, protocol="tcp")]),
        "spec.containers[0].ports[0].protocol",
    ),
    "hostIP not a string": (
        ((*C0, "ports"), [port_term(80, hostPort=80, hostIP=["10.0.0.1"])]),
        "spec.containers[0].ports[0].hostIP",
    ),
    "ports not a list": (((*C0, "ports"), {"containerPort": 80}), "spec.containers[0].ports"),
    "scheduling gate without a name": (
        (("spec", "schedulingGates"), [{"name": ""}]),
        "spec.schedulingGates[0].name",
    ),
    "scheduling gate not an object": (
        (("spec", "schedulingGates"), ["kueue"]),
        "spec.schedulingGates[0]",
    ),
    "claim without a name": (
        (("spec", "volumes"), [{"name": "d", "persistentVolumeClaim": {}}]),
        "spec.volumes[0].persistentVolumeClaim.claimName",
    ),
    "ephemeral volume without a name": (
        (("spec", "volumes"), [{"ephemeral": {"volumeClaimTemplate": {}}}]),
        "spec.volumes[0].name",
    ),
    "inline CSI volume without a driver": (
        (("spec", "volumes"), [{"name": "s", "csi": {"readOnly": True}}]),
        "spec.volumes[0].csi.driver",
    ),
    "volumes not a list": ((("spec", "volumes"), {"name": "d"}), "spec.volumes"),
    "resourceClaims not a list": (
        (("spec", "resourceClaims"), {"name": "gpu"}),
        "spec.resourceClaims",
    ),
}


@pytest.mark.parametrize(
    "case", INVALID_CONSTRAINT_CASES.values(), ids=INVALID_CONSTRAINT_CASES.keys()
)
def test_invalid_constraint(case: tuple[tuple[Path, object], str]) -> None:
    change, field = case
    pod, membership = pod_from(patched(POD, change))
    assert field in pod.invalid_reason
    assert pod.refused == pod.invalid_reason
    assert (pod.key, pod.group, membership.key) == ("ml/train-worker-0", "ml/train", "ml/train")
    assert pod.labels == POD["metadata"]["labels"]


def test_each_bad_part_is_reported_and_the_others_still_read() -> None:
    obj = with_spec(
        containers=[ctr("a", {"cpu": "2"}, ports=[port_term(80, hostPort=80)])],
        topologySpreadConstraints=[spread_term(maxSkew=0)],
        schedulingGates=[{"name": 5}],
        volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}],
    )
    pod, _ = pod_from(obj)
    assert f"{SPREAD0}.maxSkew" in pod.invalid_reason
    assert "spec.schedulingGates[0].name" in pod.invalid_reason
    assert pod.requests == {"cpu": 2000, "pods": 1}
    assert pod.host_ports == (HostPort(80),)
    assert pod.volumes == PodVolumes(("data",))
