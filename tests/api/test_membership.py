"""Which gang a pod belongs to (gangsched.api.membership.resolve_membership).

Every convention users already have, their precedence, conflicts, malformed declarations and
roles. resolve_membership never raises: a bad declaration is a Membership with ``error`` set.
"""

from __future__ import annotations

import pytest

from gangsched.api import labels as lbl
from gangsched.api.membership import Membership, Source, resolve_membership
from gangsched.api.pod import pod_from
from gangsched.core.model import GangMode, GangSpec

NS = "ml"
CREATED = 1714564800.0

GANGSCHED = {lbl.POD_GROUP_LABEL: "train"}
XK8S = {lbl.XK8S_POD_GROUP_LABEL: "train"}
VOLCANO = {lbl.GROUP_NAME_ANNOTATION: "train"}
ANNOTATIONS = {lbl.GROUP_NAME_ANNOTATION: "train", lbl.GROUP_POD_NUM_ANNOTATION: "4"}
LABELS = {lbl.POD_GROUP_NAME_LABEL: "train", lbl.POD_GROUP_MIN_LABEL: "3"}
KOORD = {lbl.KOORD_NAME: "train", lbl.KOORD_MIN: "2"}


def resolve(
    labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> Membership:
    return resolve_membership(NS, labels or {}, annotations or {}, CREATED)


def koord(**extra: str) -> Membership:
    """A Koordinator declaration with extra annotations (``waiting_time`` → ``waiting-time``)."""
    ann = dict(KOORD)
    ann.update({f"{lbl.KOORD}/{k.replace('_', '-')}": v for k, v in extra.items()})
    return resolve(annotations=ann)


# ---- each convention ----------------------------------------------------------------------


def test_plain_pod() -> None:
    assert resolve({"app": "web"}, {"note": "x"}) == Membership()


def test_empty_values_declare_nothing() -> None:
    m = resolve(
        {lbl.POD_GROUP_LABEL: "", lbl.XK8S_POD_GROUP_LABEL: "", lbl.POD_GROUP_NAME_LABEL: ""},
        {lbl.GROUP_NAME_ANNOTATION: "", lbl.KOORD_NAME: ""},
    )
    assert m == Membership()


def test_gangsched_label() -> None:
    assert resolve(GANGSCHED) == Membership("ml/train", Source.GANGSCHED)


def test_xk8s_label() -> None:
    assert resolve(XK8S) == Membership("ml/train", Source.XK8S)


def test_volcano_annotation_names_a_podgroup() -> None:
    assert resolve(annotations=VOLCANO) == Membership("ml/train", Source.VOLCANO)


def test_volcano_annotation_with_pod_num_declares_the_gang() -> None:
    m = resolve(annotations=ANNOTATIONS)
    assert m == Membership(
        "ml/train", Source.ANNOTATIONS, implicit=GangSpec("ml/train", 4, created=CREATED)
    )


def test_pod_group_labels() -> None:
    m = resolve(LABELS)
    assert m == Membership(
        "ml/train", Source.LABELS, implicit=GangSpec("ml/train", 3, created=CREATED)
    )


def test_koordinator_minimal() -> None:
    m = resolve(annotations=KOORD)
    assert m == Membership(
        "ml/train",
        Source.KOORDINATOR,
        implicit=GangSpec("ml/train", 2, timeout_seconds=600.0, created=CREATED),
    )


def test_koordinator_every_annotation() -> None:
    m = koord(
        waiting_time="1h30m",
        total_number="5",
        mode="NonStrict",
        groups='["eval", "data/loader"]',
    )
    assert m.error == ""
    assert m.implicit == GangSpec(
        "ml/train",
        2,
        timeout_seconds=5400.0,
        created=CREATED,
        mode=GangMode.NON_STRICT,
        gang_group=("data/loader", "ml/eval", "ml/train"),
    )


def test_names_are_namespaced() -> None:
    m = resolve_membership("team-a", GANGSCHED, {}, 0.0)
    assert m.key == "team-a/train"
    m = resolve_membership("team-b", {}, KOORD, 7.0)
    assert m.key == "team-b/train"
    assert m.implicit is not None
    assert (m.implicit.key, m.implicit.created) == ("team-b/train", 7.0)


# ---- precedence ---------------------------------------------------------------------------

ALL_SAME = [
    ("gangsched", GANGSCHED, {}),
    ("xk8s", XK8S, {}),
    ("annotations", {}, ANNOTATIONS),
    ("labels", LABELS, {}),
    ("koordinator", {}, KOORD),
]
ORDER = [Source.GANGSCHED, Source.XK8S, Source.ANNOTATIONS, Source.LABELS, Source.KOORDINATOR]


@pytest.mark.parametrize("first", range(len(ALL_SAME)), ids=[c[0] for c in ALL_SAME])
def test_same_gang_by_several_conventions_highest_precedence_wins(first: int) -> None:
    """Every convention from ``first`` down names the same gang: the first one wins."""
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    for _, lab, ann in ALL_SAME[first:]:
        labels.update(lab)
        annotations.update(ann)
    m = resolve(labels, annotations)
    assert m.error == ""
    assert m.key == "ml/train"
    assert m.source == ORDER[first]


@pytest.mark.parametrize(
    ("i", "j"),
    [(i, j) for i in range(len(ALL_SAME)) for j in range(i + 1, len(ALL_SAME))],
    ids=[
        f"{ALL_SAME[i][0]}+{ALL_SAME[j][0]}"
        for i in range(len(ALL_SAME))
        for j in range(i + 1, len(ALL_SAME))
    ],
)
def test_pairs_naming_the_same_gang_agree(i: int, j: int) -> None:
    _, lab_i, ann_i = ALL_SAME[i]
    _, lab_j, ann_j = ALL_SAME[j]
    m = resolve({**lab_i, **lab_j}, {**ann_i, **ann_j})
    assert (m.key, m.source, m.error) == ("ml/train", ORDER[i], "")


def test_same_gang_keeps_the_winning_conventions_spec() -> None:
    # The labels convention carries a spec; the gangsched label (a PodGroup) outranks it.
    assert resolve({**GANGSCHED, **LABELS}).implicit is None
    # Volcano annotations (min 4) outrank Koordinator (min 2).
    m = resolve(annotations={**ANNOTATIONS, **KOORD})
    assert m.implicit == GangSpec("ml/train", 4, created=CREATED)


def _renamed(
    labels: dict[str, str], annotations: dict[str, str], name: str
) -> tuple[dict[str, str], dict[str, str]]:
    """The declaration with its gang renamed (every name label/annotation set to ``name``)."""
    names = {lbl.POD_GROUP_LABEL, lbl.XK8S_POD_GROUP_LABEL, lbl.POD_GROUP_NAME_LABEL}
    names |= {lbl.GROUP_NAME_ANNOTATION, lbl.KOORD_NAME}
    return (
        {k: (name if k in names else v) for k, v in labels.items()},
        {k: (name if k in names else v) for k, v in annotations.items()},
    )


@pytest.mark.parametrize(
    ("i", "j"),
    [(i, j) for i in range(len(ALL_SAME)) for j in range(i + 1, len(ALL_SAME))],
    ids=[
        f"{ALL_SAME[i][0]}+{ALL_SAME[j][0]}"
        for i in range(len(ALL_SAME))
        for j in range(i + 1, len(ALL_SAME))
    ],
)
def test_two_different_gangs_is_an_error_naming_both(i: int, j: int) -> None:
    _, lab_i, ann_i = ALL_SAME[i]
    lab_j, ann_j = _renamed(*ALL_SAME[j][1:], "other")
    m = resolve({**lab_i, **lab_j}, {**ann_i, **ann_j})
    assert m.key == ""
    assert m.implicit is None
    assert "ml/train" in m.error
    assert "ml/other" in m.error
    assert ORDER[i] in m.error
    assert ORDER[j] in m.error


def test_conflict_keeps_the_role() -> None:
    m = resolve({**GANGSCHED, lbl.XK8S_POD_GROUP_LABEL: "b", lbl.ROLE_LABEL: "worker"})
    assert m.role == "worker"
    assert m.error


def test_three_conventions_two_gangs() -> None:
    m = resolve({**GANGSCHED, **XK8S}, {lbl.KOORD_NAME: "x", lbl.KOORD_MIN: "1"})
    assert "ml/train" in m.error
    assert "ml/x" in m.error
    assert m.key == ""


# ---- malformed minimums -------------------------------------------------------------------

BAD_MINIMUMS = ["0", "-1", "abc", "", " ", "1.5", "3x", "1e2"]


@pytest.mark.parametrize("raw", BAD_MINIMUMS, ids=repr)
def test_pod_group_min_available_malformed(raw: str) -> None:
    m = resolve({lbl.POD_GROUP_NAME_LABEL: "train", lbl.POD_GROUP_MIN_LABEL: raw})
    assert m.key == ""
    assert m.error.startswith("invalid gang declaration")
    assert lbl.POD_GROUP_MIN_LABEL in m.error


def test_pod_group_name_without_min() -> None:
    m = resolve({lbl.POD_GROUP_NAME_LABEL: "train"})
    assert m.key == ""
    assert lbl.POD_GROUP_MIN_LABEL in m.error


@pytest.mark.parametrize("raw", [r for r in BAD_MINIMUMS if r], ids=repr)
def test_group_pod_num_malformed(raw: str) -> None:
    m = resolve(annotations={lbl.GROUP_NAME_ANNOTATION: "train", lbl.GROUP_POD_NUM_ANNOTATION: raw})
    assert m.key == ""
    assert lbl.GROUP_POD_NUM_ANNOTATION in m.error


def test_group_pod_num_empty_means_a_podgroup_object() -> None:
    m = resolve(annotations={lbl.GROUP_NAME_ANNOTATION: "train", lbl.GROUP_POD_NUM_ANNOTATION: ""})
    assert m == Membership("ml/train", Source.VOLCANO)


@pytest.mark.parametrize("raw", BAD_MINIMUMS, ids=repr)
def test_koordinator_min_available_malformed(raw: str) -> None:
    m = resolve(annotations={lbl.KOORD_NAME: "train", lbl.KOORD_MIN: raw})
    assert m.key == ""
    assert lbl.KOORD_MIN in m.error


def test_koordinator_name_without_min() -> None:
    m = resolve(annotations={lbl.KOORD_NAME: "train"})
    assert m.key == ""
    assert lbl.KOORD_MIN in m.error


@pytest.mark.parametrize(("raw", "n"), [("1", 1), ("16", 16), (" 8 ", 8), ("+2", 2), ("007", 7)])
def test_minimums_accepted(raw: str, n: int) -> None:
    for m in (
        resolve({lbl.POD_GROUP_NAME_LABEL: "g", lbl.POD_GROUP_MIN_LABEL: raw}),
        resolve(annotations={lbl.GROUP_NAME_ANNOTATION: "g", lbl.GROUP_POD_NUM_ANNOTATION: raw}),
        resolve(annotations={lbl.KOORD_NAME: "g", lbl.KOORD_MIN: raw}),
    ):
        assert m.error == ""
        assert m.implicit is not None
        assert m.implicit.min_member == n


def test_malformed_lower_precedence_declaration_spoils_the_pod() -> None:
    """A bad declaration is an error even when a higher-precedence convention names a gang."""
    m = resolve({**GANGSCHED, lbl.POD_GROUP_NAME_LABEL: "train", lbl.POD_GROUP_MIN_LABEL: "0"})
    assert m.key == ""
    assert m.error


# ---- Koordinator details ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("600s", 600.0),
        ("10m", 600.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1h30m15s", 5415.0),
        ("2m30s", 150.0),
        ("1.5h", 5400.0),
        ("0.5s", 0.5),
        ("90", 90.0),
        ("90.5", 90.5),
        (" 45s ", 45.0),
    ],
)
def test_koordinator_waiting_time(raw: str, seconds: float) -> None:
    m = koord(waiting_time=raw)
    assert m.error == ""
    assert m.implicit is not None
    assert m.implicit.timeout_seconds == seconds


@pytest.mark.parametrize(
    "raw", ["0s", "0", "0m0s", "-5", "-5s", "abc", "", "10x", "5 minutes", "m", "1d", "nan", "10ms"]
)
def test_koordinator_waiting_time_bad(raw: str) -> None:
    m = koord(waiting_time=raw)
    assert m.key == ""
    assert m.error.startswith("invalid gang declaration")


def test_koordinator_default_waiting_time() -> None:
    m = koord()
    assert m.implicit is not None
    assert m.implicit.timeout_seconds == 600.0


@pytest.mark.parametrize(
    ("raw", "mode"),
    [
        ("Strict", GangMode.STRICT),
        ("NonStrict", GangMode.NON_STRICT),
        ("strict", GangMode.STRICT),
        ("nonstrict", GangMode.NON_STRICT),
        ("NONSTRICT", GangMode.NON_STRICT),
    ],
)
def test_koordinator_mode(raw: str, mode: GangMode) -> None:
    m = koord(mode=raw)
    assert m.implicit is not None
    assert m.implicit.mode is mode


def test_koordinator_mode_default_strict() -> None:
    m = koord()
    assert m.implicit is not None
    assert m.implicit.mode is GangMode.STRICT


@pytest.mark.parametrize("raw", ["Lenient", "", "Non-Strict", "strict "])
def test_koordinator_mode_bad(raw: str) -> None:
    m = koord(mode=raw)
    assert m.key == ""
    assert lbl.KOORD_MODE in m.error


@pytest.mark.parametrize(("total", "ok"), [("2", True), ("10", True), ("1", False)])
def test_koordinator_total_number(total: str, ok: bool) -> None:
    m = koord(total_number=total)  # min-available is 2
    assert (m.error == "") is ok
    if not ok:
        assert lbl.KOORD_MIN in m.error
        assert lbl.KOORD_TOTAL in m.error


@pytest.mark.parametrize("total", ["0", "-3", "abc", ""])
def test_koordinator_total_number_malformed(total: str) -> None:
    m = koord(total_number=total)
    assert m.key == ""
    assert lbl.KOORD_TOTAL in m.error


@pytest.mark.parametrize(
    ("raw", "group"),
    [
        ('["a"]', ("ml/a", "ml/train")),
        ('["a", "other/b", "train"]', ("ml/a", "ml/train", "other/b")),
        ('["ml/train", "a", "a"]', ("ml/a", "ml/train")),
        ("", ()),  # empty: no group
    ],
)
def test_koordinator_groups(raw: str, group: tuple[str, ...]) -> None:
    m = koord(groups=raw)
    assert m.error == ""
    assert m.implicit is not None
    assert m.implicit.gang_group == group


@pytest.mark.parametrize(
    "raw", ["[a, b]", "a,b", "{", '{"a": 1}', '"a"', "3", "null", "[1, 2]", '["a", null]', "[[]]"]
)
def test_koordinator_groups_bad(raw: str) -> None:
    m = koord(groups=raw)
    assert m.key == ""
    assert lbl.KOORD_GROUPS in m.error


def test_koordinator_groups_deeply_nested_is_an_error_not_a_crash() -> None:
    """A hostile annotation must not crash translation (json.loads hits the recursion limit)."""
    m = koord(groups="[" * 100_000)
    assert m.key == ""
    assert m.error


def test_koordinator_groups_deeply_nested_through_pod_from() -> None:
    obj = {
        "metadata": {
            "name": "p",
            "namespace": NS,
            "annotations": {**KOORD, lbl.KOORD_GROUPS: "[" * 100_000},
        },
        "spec": {"containers": []},
    }
    pod, _ = pod_from(obj)
    assert pod.invalid_reason


def test_koordinator_groups_with_a_huge_number_is_an_error() -> None:
    m = koord(groups="[" + "9" * 5000 + "]")
    assert m.key == ""
    assert m.error


# ---- roles --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "annotations", "role"),
    [
        ({lbl.ROLE_LABEL: "worker"}, {}, "worker"),
        ({}, {lbl.VOLCANO_TASK_SPEC_ANNOTATION: "ps"}, "ps"),
        ({lbl.ROLE_LABEL: "worker"}, {lbl.VOLCANO_TASK_SPEC_ANNOTATION: "ps"}, "worker"),
        ({lbl.ROLE_LABEL: ""}, {lbl.VOLCANO_TASK_SPEC_ANNOTATION: "ps"}, "ps"),
        ({}, {}, ""),
        ({lbl.VOLCANO_TASK_SPEC_ANNOTATION: "ps"}, {}, ""),  # a Volcano annotation as a label
    ],
)
@pytest.mark.parametrize(
    ("gang_labels", "gang_annotations"),
    [(GANGSCHED, {}), ({}, VOLCANO), ({}, KOORD), ({}, {})],
    ids=["gangsched", "volcano", "koordinator", "no-gang"],
)
def test_roles(
    labels: dict[str, str],
    annotations: dict[str, str],
    role: str,
    gang_labels: dict[str, str],
    gang_annotations: dict[str, str],
) -> None:
    m = resolve({**gang_labels, **labels}, {**gang_annotations, **annotations})
    assert m.error == ""
    assert m.role == role


@pytest.mark.parametrize(
    ("gang_labels", "gang_annotations"),
    [(GANGSCHED, {}), ({}, VOLCANO), ({}, KOORD), ({}, {})],
    ids=["gangsched", "volcano", "koordinator", "no-gang"],
)
def test_a_role_label_set_as_an_annotation_is_refused_by_name(
    gang_labels: dict[str, str], gang_annotations: dict[str, str]
) -> None:
    m = resolve(gang_labels, {**gang_annotations, lbl.ROLE_LABEL: "worker"})
    assert m.key == ""
    assert m.error == (
        "unknown gang declaration: annotation gangsched.io/role is read as a label, "
        "not as an annotation"
    )


def test_role_kept_when_the_declaration_is_malformed() -> None:
    m = resolve(
        annotations={
            lbl.KOORD_NAME: "g",
            lbl.KOORD_MIN: "0",
            lbl.VOLCANO_TASK_SPEC_ANNOTATION: "ps",
        }
    )
    assert m.error
    assert m.role == "ps"
