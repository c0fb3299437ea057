"""Offline checks of the PodGroup CRD (crds/podgroups.gangsched.io.yaml): no cluster needed.

These pin the API's shape: names, the structural schema, enums, defaults, bounds, printer columns,
the quantity pattern and that every CEL rule carries a message. Whether the API server accepts the
CRD and what the CEL rules do with real objects is tested end to end against a kube-apiserver.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched.api.topology import podgroup_domain

CRD_PATH = Path(__file__).resolve().parents[1] / "crds" / "podgroups.gangsched.io.yaml"
Schema = dict[str, Any]

# controller-gen's pattern for resource.Quantity.
QUANTITY_PATTERN = (
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)
DNS1123_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
# Keywords a structural schema allows inside anyOf/allOf/oneOf/not (value validations only).
VALUE_VALIDATION_KEYS = {
    "type",  # only the int-or-string pair, checked separately
    "enum",
    "maximum",
    "minimum",
    "exclusiveMaximum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "maxProperties",
    "minProperties",
    "required",
    "format",
    "items",
    "properties",
    "anyOf",
    "allOf",
    "oneOf",
    "not",
}


def _obj(value: Any) -> Schema:
    assert isinstance(value, dict)
    return value


@pytest.fixture(scope="module")
def crd() -> Schema:
    with CRD_PATH.open(encoding="utf-8") as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert len(docs) == 1, "the file holds exactly one CustomResourceDefinition"
    return _obj(docs[0])


@pytest.fixture(scope="module")
def version(crd: Schema) -> Schema:
    versions = crd["spec"]["versions"]
    assert [v["name"] for v in versions] == ["v1alpha1"]
    return _obj(versions[0])


@pytest.fixture(scope="module")
def root(version: Schema) -> Schema:
    return _obj(version["schema"]["openAPIV3Schema"])


@pytest.fixture(scope="module")
def spec(root: Schema) -> Schema:
    return _obj(root["properties"]["spec"])


@pytest.fixture(scope="module")
def status(root: Schema) -> Schema:
    return _obj(root["properties"]["status"])


def walk(schema: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every schema node with its path (``.spec.roles[].name``, ``.spec.minResources{}``)."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from walk(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], f"{path}{{}}")


def quantity_ok(text: str) -> bool:
    # Go's regexp (which the API server uses) has no "$ before a final newline" rule: forbid it.
    return "\n" not in text and re.search(QUANTITY_PATTERN, text) is not None


# ---------------------------------------------------------------------------------- identity


def test_crd_identity(crd: Schema) -> None:
    assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["metadata"]["name"] == "podgroups.gangsched.io"
    s = crd["spec"]
    assert s["group"] == "gangsched.io"
    assert s["scope"] == "Namespaced"
    names = s["names"]
    assert names["kind"] == "PodGroup"
    assert names["listKind"] == "PodGroupList"
    assert names["plural"] == "podgroups"
    assert names["singular"] == "podgroup"
    assert names["shortNames"] == ["pg"]
    assert names["categories"] == ["gangsched"]
    assert crd["metadata"]["name"] == f"{names['plural']}.{s['group']}"


def test_version_served_stored_with_status_subresource(version: Schema) -> None:
    assert version["served"] is True
    assert version["storage"] is True
    assert version["subresources"] == {"status": {}}


# -------------------------------------------------------------------------------- structural


def test_every_node_has_a_type(root: Schema) -> None:
    for path, node in walk(root):
        if node.get("x-kubernetes-int-or-string"):
            assert "type" not in node, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
            continue
        assert node.get("type") in {"object", "array", "string", "integer", "boolean", "number"}, (
            f"{path or '<root>'} has no valid type"
        )


def test_no_unknown_field_preservation(root: Schema) -> None:
    for path, node in walk(root):
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
        assert "x-kubernetes-embedded-resource" not in node, path
    for path, node in walk(root["properties"]["spec"], ".spec"):
        if node.get("type") == "object" and path != ".spec.minResources":
            assert "properties" in node, f"{path}: an object must declare its fields"
            assert "additionalProperties" not in node, path


def test_junctors_hold_only_value_validations(root: Schema) -> None:
    """Structural schemas allow no type-shaping keywords under anyOf/allOf/oneOf/not."""

    def check(node: Any, path: str) -> None:
        if isinstance(node, list):
            for i, item in enumerate(node):
                check(item, f"{path}[{i}]")
            return
        assert isinstance(node, dict), path
        extra = set(node) - VALUE_VALIDATION_KEYS
        assert not extra, f"{path}: {sorted(extra)} not allowed in a junctor"
        for key in ("anyOf", "allOf", "oneOf", "not", "items"):
            if key in node:
                check(node[key], f"{path}.{key}")
        for name, child in node.get("properties", {}).items():
            check(child, f"{path}.{name}")

    for path, node in walk(root):
        for key in ("anyOf", "allOf", "oneOf", "not"):
            if key in node:
                check(node[key], f"{path}.{key}")


def test_root_metadata_is_plain_object(root: Schema) -> None:
    assert root["type"] == "object"
    assert root["required"] == ["spec"]
    assert set(root["properties"]) == {"apiVersion", "kind", "metadata", "spec", "status"}
    assert root["properties"]["metadata"] == {"type": "object"}


def test_defaults_only_under_spec(root: Schema) -> None:
    defaults = {path for path, node in walk(root) if "default" in node}
    assert defaults == {".spec.mode", ".spec.onceSatisfied", ".spec.onMemberLoss"}


def test_lists_have_list_types(root: Schema) -> None:
    for path, node in walk(root):
        if node.get("type") == "array":
            assert node.get("x-kubernetes-list-type") in {"atomic", "set", "map"}, path
            if node["x-kubernetes-list-type"] == "map":
                keys = node["x-kubernetes-list-map-keys"]
                assert set(keys) <= set(node["items"]["required"]), path


def test_cel_reachable_values_are_bounded(spec: Schema) -> None:
    """Bounded lists, maps and strings keep the CEL cost estimate within the API's budget."""
    for path, node in walk(spec, ".spec"):
        if node.get("type") == "array":
            assert "maxItems" in node, path
        if node.get("type") == "object" and "additionalProperties" in node:
            assert "maxProperties" in node, path
        if node.get("type") == "string" or node.get("x-kubernetes-int-or-string"):
            assert "maxLength" in node or "enum" in node, path


# ------------------------------------------------------------------------------------- spec


def test_spec_fields(spec: Schema) -> None:
    assert spec["type"] == "object"
    assert spec["required"] == ["minMember"]
    assert set(spec["properties"]) == {
        "minMember",
        "totalMember",
        "minResources",
        "scheduleTimeoutSeconds",
        "mode",
        "onceSatisfied",
        "onMemberLoss",
        "preemptionPolicy",
        "expectedRuntimeSeconds",
        "roles",
        "gangGroup",
        "topology",
        "topologyPlacement",
    }


def test_preemption_policy_and_expected_runtime(spec: Schema) -> None:
    p = spec["properties"]
    assert p["preemptionPolicy"]["type"] == "string"
    assert p["preemptionPolicy"]["enum"] == ["PreemptLowerPriority", "Never"]
    assert "default" not in p["preemptionPolicy"]  # absent means PreemptLowerPriority
    runtime = p["expectedRuntimeSeconds"]
    assert (runtime["type"], runtime["minimum"], runtime["exclusiveMinimum"]) == (
        "number",
        0,
        True,
    )


def test_member_counts_and_timeout(spec: Schema) -> None:
    p = spec["properties"]
    for count in ("minMember", "totalMember"):
        assert (p[count]["type"], p[count]["format"], p[count]["minimum"]) == (
            "integer",
            "int32",
            1,
        ), count
    timeout = p["scheduleTimeoutSeconds"]
    assert (timeout["type"], timeout["format"]) == ("integer", "int32")
    assert (timeout["minimum"], timeout["maximum"]) == (1, 86400)
    assert "default" not in timeout, "the scheduler's own default applies when unset"


def test_min_resources_is_a_quantity_map(spec: Schema) -> None:
    mr = spec["properties"]["minResources"]
    assert mr["type"] == "object"
    value = mr["additionalProperties"]
    assert value["x-kubernetes-int-or-string"] is True
    assert value["anyOf"] == [{"type": "integer"}, {"type": "string"}]
    assert value["pattern"] == QUANTITY_PATTERN


@pytest.mark.parametrize(
    "text",
    ["100m", "1.5", "2Gi", "1e3", "500Mi", "1k", "0", "16", "+1", ".5", "1.", "1E-3", "64Gi", "5n"],
)
def test_quantity_pattern_accepts(text: str) -> None:
    assert quantity_ok(text)


@pytest.mark.parametrize(
    "text",
    ["abc", "1.2.3", "1Q", "", "Gi", "1e", "1 Gi", " 1", "1Mi ", "1ki", "1KiB", "1\n", "--1"],
)
def test_quantity_pattern_rejects(text: str) -> None:
    assert not quantity_ok(text)


def test_quantity_pattern_agrees_with_the_scheduler_parser() -> None:
    """What the API accepts, the scheduler's parser (which reads minResources) accepts too."""
    quantity = pytest.importorskip("gangsched.core.quantity")
    for text in ["100m", "1.5", "2Gi", "1e3", "500Mi", "1k", ".5", "1.", "1E-3", "5n", "12Ki"]:
        assert quantity_ok(text)
        quantity.parse_quantity(text)
    for text in ["abc", "1.2.3", "1Q", "Gi", "1e"]:
        assert not quantity_ok(text)
        with pytest.raises(quantity.QuantityError):
            quantity.parse_quantity(text)


def test_enums_and_defaults(spec: Schema, status: Schema) -> None:
    p = spec["properties"]
    assert p["mode"]["type"] == "string"
    assert p["mode"]["enum"] == ["Strict", "NonStrict"]
    assert p["mode"]["default"] == "Strict"
    assert p["onceSatisfied"]["type"] == "string"
    assert p["onceSatisfied"]["enum"] == ["Independent", "Gang"]
    assert p["onceSatisfied"]["default"] == "Independent"
    assert p["onMemberLoss"]["type"] == "string"
    assert p["onMemberLoss"]["enum"] == ["None", "RestartGang"]
    assert p["onMemberLoss"]["default"] == "None"
    assert status["properties"]["phase"]["enum"] == [
        "Pending",
        "Scheduling",
        "Scheduled",
        "Running",
        "Succeeded",
        "Failed",
        "Unknown",
    ]
    cond = status["properties"]["conditions"]["items"]["properties"]
    assert cond["status"]["enum"] == ["True", "False", "Unknown"]


def test_model_enums_match_the_crd(spec: Schema) -> None:
    model = pytest.importorskip("gangsched.core.model")
    assert [m.value for m in model.GangMode] == spec["properties"]["mode"]["enum"]


def test_roles(spec: Schema) -> None:
    roles = spec["properties"]["roles"]
    assert roles["type"] == "array"
    assert roles["maxItems"] == 32
    assert roles["x-kubernetes-list-type"] == "map"
    assert roles["x-kubernetes-list-map-keys"] == ["name"]
    item = roles["items"]
    assert set(item["required"]) == {"name", "minMember"}
    assert set(item["properties"]) == {"name", "minMember"}
    name = item["properties"]["name"]
    assert (name["type"], name["maxLength"], name["pattern"]) == ("string", 63, DNS1123_LABEL)
    mm = item["properties"]["minMember"]
    assert (mm["type"], mm["format"], mm["minimum"]) == ("integer", "int32", 0)


@pytest.mark.parametrize(
    ("text", "ok"),
    [
        ("ps", True),
        ("worker-0", True),
        ("a", True),
        ("PS", False),
        ("-ps", False),
        ("ps-", False),
        ("ps_1", False),
        ("p.s", False),
    ],
)
def test_role_name_pattern(spec: Schema, text: str, ok: bool) -> None:
    pattern = spec["properties"]["roles"]["items"]["properties"]["name"]["pattern"]
    assert (re.search(pattern, text) is not None) is ok


def test_gang_group(spec: Schema) -> None:
    gg = spec["properties"]["gangGroup"]
    assert gg["type"] == "array"
    assert gg["maxItems"] == 16
    assert gg["x-kubernetes-list-type"] == "set"
    pattern = gg["items"]["pattern"]
    for ok in ["train", "team-a/train", "team-a/train.v2", "a/b"]:
        assert re.search(pattern, ok), ok
    for bad in ["", "a/b/c", "Team/train", "team/", "/train", "team a/train", "train."]:
        assert not re.search(pattern, bad), bad
    assert gg["items"]["maxLength"] == 63 + 1 + 63


def test_topology(spec: Schema) -> None:
    topo = spec["properties"]["topology"]
    assert topo["type"] == "object"
    assert set(topo["properties"]) == {"affinity", "antiAffinity"}
    for field in ("affinity", "antiAffinity"):
        outer = topo["properties"][field]
        assert outer["type"] == "array"
        assert outer["maxItems"] >= 1
        inner = outer["items"]
        assert inner["type"] == "array"
        assert inner["minItems"] == 1
        assert inner["maxItems"] >= 2
        assert inner["x-kubernetes-list-type"] == "set"
        names = inner["items"]
        assert (names["type"], names["maxLength"], names["pattern"]) == (
            "string",
            63,
            DNS1123_LABEL,
        )


# ----------------------------------------------------------------------------------- status


LONGEST_PREFIX = ".".join(["a" * 63, "b" * 63, "c" * 63, "d" * 61])


def _placement_keys(spec: Schema) -> list[Schema]:
    placement = spec["properties"]["topologyPlacement"]
    return [
        placement["properties"]["required"],
        placement["properties"]["preferred"],
        placement["properties"]["slices"]["properties"]["podLabel"],
        placement["properties"]["slices"]["properties"]["required"],
    ]


def key_accepted(node: Schema, key: str) -> bool:
    return node["minLength"] <= len(key) <= node["maxLength"] and bool(
        re.match(node["pattern"], key)
    )


def test_topology_placement_keys_are_bounded_as_label_keys(spec: Schema) -> None:
    """A label key is at most 253 + 1 + 63 characters; the name's 63 is in the pattern too.
    What the pattern cannot bound (a prefix over 253 characters) the scheduler refuses."""
    assert len(LONGEST_PREFIX) == 253
    for node in _placement_keys(spec):
        assert (node["type"], node["minLength"], node["maxLength"]) == ("string", 1, 317)
        assert not key_accepted(node, LONGEST_PREFIX + "/" + "n" * 64)
        assert not key_accepted(node, "a" * 318)
    with pytest.raises(ValueError, match="is not a valid label key"):
        podgroup_domain({"required": "a" + LONGEST_PREFIX + "/rack"})


@pytest.mark.parametrize(
    ("key", "ok"),
    [
        ("example.com/rack", True),
        ("kubernetes.io/hostname", True),
        ("rack", True),
        ("cloud.google.com/gke-nodepool", True),
        ("Example.com/rack", False),
        ("example.com/", False),
        ("/rack", False),
        ("rack!", False),
        ("a/b/c", False),
        # The longest label key: a 253-character prefix, '/', a 63-character name.
        (LONGEST_PREFIX + "/" + "n" * 63, True),
        ("n" * 63, True),
        ("n" * 64, False),
        ("n" * 312, False),
        (LONGEST_PREFIX + "/" + "n" * 64, False),
    ],
)
def test_topology_placement_keys_agree_with_the_scheduler(spec: Schema, key: str, ok: bool) -> None:
    """The CRD's label-key pattern and length and the scheduler's own check accept the same
    keys."""
    for node in _placement_keys(spec):
        assert key_accepted(node, key) is ok, (node["pattern"], key)
    try:
        podgroup_domain({"required": key})
        parsed = True
    except ValueError:
        parsed = False
    assert parsed is ok


def test_status_fields(status: Schema) -> None:
    p = status["properties"]
    assert "required" not in status
    assert set(p) == {
        "phase",
        "scheduled",
        "running",
        "succeeded",
        "failed",
        "waiting",
        "scheduleStartTime",
        "lastFailureTime",
        "observedGeneration",
        "message",
        "conditions",
        "reservation",
        "expectedStart",
        "expectedStartBasis",
    }
    assert (p["expectedStart"]["type"], p["expectedStart"]["format"]) == ("string", "date-time")
    assert p["expectedStartBasis"]["type"] == "string"
    r = p["reservation"]
    assert r["type"] == "object" and set(r["properties"]) == {"nodes", "since", "reason"}
    assert r["properties"]["since"]["format"] == "date-time"
    for count in ("scheduled", "running", "succeeded", "failed", "waiting"):
        assert (p[count]["type"], p[count]["format"], p[count]["minimum"]) == (
            "integer",
            "int32",
            0,
        ), count
    for ts in ("scheduleStartTime", "lastFailureTime"):
        assert (p[ts]["type"], p[ts]["format"]) == ("string", "date-time"), ts
    assert (p["observedGeneration"]["type"], p["observedGeneration"]["format"]) == (
        "integer",
        "int64",
    )
    assert p["message"]["type"] == "string"


def test_conditions_are_metav1_conditions(status: Schema) -> None:
    conds = status["properties"]["conditions"]
    assert conds["type"] == "array"
    assert conds["x-kubernetes-list-type"] == "map"
    assert conds["x-kubernetes-list-map-keys"] == ["type"]
    item = conds["items"]
    assert set(item["required"]) == {"type", "status", "lastTransitionTime", "reason", "message"}
    p = item["properties"]
    assert set(p) == {
        "type",
        "status",
        "observedGeneration",
        "lastTransitionTime",
        "reason",
        "message",
    }
    assert p["lastTransitionTime"]["format"] == "date-time"
    assert p["observedGeneration"]["format"] == "int64"
    reason = re.compile(p["reason"]["pattern"])
    for r in (
        "Scheduled",
        "Unschedulable",
        "WaitingForMembers",
        "PodGroupNotFound",
        "InvalidSpec",
        "Timeout",
    ):
        assert reason.search(r), r
    assert re.search(p["type"]["pattern"], "Scheduled")


# ------------------------------------------------------------------------------ printer columns


def test_printer_columns(version: Schema) -> None:
    cols = [
        (c["name"], c["type"], c["jsonPath"], c.get("priority", 0))
        for c in version["additionalPrinterColumns"]
    ]
    assert cols == [
        ("Phase", "string", ".status.phase", 0),
        ("Min", "integer", ".spec.minMember", 0),
        ("Scheduled", "integer", ".status.scheduled", 0),
        ("Running", "integer", ".status.running", 0),
        ("Succeeded", "integer", ".status.succeeded", 0),
        ("Failed", "integer", ".status.failed", 0),
        # a string, not a date: kubectl shows a date in the future as "<invalid>"
        ("Expected-Start", "string", ".status.expectedStart", 1),
        ("Age", "date", ".metadata.creationTimestamp", 0),
        ("Message", "string", ".status.message", 1),
    ]


# ---------------------------------------------------------------------------------------- CEL


def cel_rules(root: Schema) -> list[tuple[str, Schema]]:
    return [
        (path or "<root>", rule)
        for path, node in walk(root)
        for rule in node.get("x-kubernetes-validations", [])
    ]


def test_every_cel_rule_has_a_message(root: Schema) -> None:
    rules = cel_rules(root)
    assert rules
    for path, rule in rules:
        assert set(rule) <= {"rule", "message", "messageExpression", "fieldPath", "reason"}, path
        assert isinstance(rule["rule"], str), path
        assert rule["rule"].strip(), path
        assert isinstance(rule.get("message"), str), f"{path}: {rule['rule']!r} has no message"
        assert rule["message"].strip(), path
        assert "\n" not in rule["message"], path
        if "messageExpression" in rule:
            assert rule["messageExpression"].strip(), path
        assert "oldSelf" not in rule["rule"], f"{path}: no transition rules expected"


def _rule_by_message(root: Schema, message: str) -> tuple[str, Schema]:
    found = [(p, r) for p, r in cel_rules(root) if r["message"] == message]
    assert len(found) == 1, f"no single rule with message {message!r}"
    return found[0]


def test_cel_rules_present(root: Schema) -> None:
    path, rule = _rule_by_message(root, "minMember must not exceed totalMember")
    assert path == ".spec"
    assert "totalMember" in rule["rule"] and "minMember" in rule["rule"]

    path, rule = _rule_by_message(root, "a role's minMember cannot exceed the gang's minMember")
    assert path == ".spec"
    assert "self.roles" in rule["rule"]

    path, rule = _rule_by_message(root, "topology names a role that spec.roles does not declare")
    assert path == ".spec"
    assert "affinity" in rule["rule"] and "antiAffinity" in rule["rule"]

    path, rule = _rule_by_message(root, "minResources must not be negative")
    assert path == ".spec"

    name_rules = [r for p, r in cel_rules(root) if p == "<root>"]
    assert [r["rule"] for r in name_rules] == ["self.metadata.name.size() <= 63"]


def test_cel_field_paths_name_spec_fields(spec: Schema) -> None:
    for rule in spec["x-kubernetes-validations"]:
        if "fieldPath" in rule:
            field = rule["fieldPath"].removeprefix(".")
            assert field in spec["properties"], rule["fieldPath"]
