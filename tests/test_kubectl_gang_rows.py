"""``kubectl gang``'s SOURCE and MIN columns: the documented convention names, and a minimum
the scheduler refuses shown as such, compactly."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from gangsched.api.membership import MAX_MEMBERS, Source, resolve_membership
from gangsched.api.podgroup import podgroup_from
from gangsched.kubectl_gang import SOURCES, GangRow, gang_rows, render

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"
TWENTY_DIGITS = "1" + "0" * 19


def _pod(
    name: str,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": labels or {},
            "annotations": annotations or {},
        },
        "spec": {"schedulerName": "gangsched", **(spec or {})},
        "status": {"phase": "Pending"},
    }


def _pg(name: str, min_member: object) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml"}, "spec": {"minMember": min_member}}


def _rows(pgs: list[dict[str, Any]], pods: list[dict[str, Any]]) -> dict[str, GangRow]:
    return {r.name: r for r in gang_rows(pgs, pods)}


def _documented_sources() -> set[str]:
    """The SOURCE values docs/operations.md lists (the `-o wide` bullet)."""
    text = OPERATIONS.read_text()
    start = text.index("- `-o wide` adds `SOURCE`")
    bullet = text[start : text.index("`-o json`", start)]
    # the values are the backticked words outside parentheses
    outside = re.sub(r"\([^)]*\)", "", bullet.removeprefix("- `-o wide` adds `SOURCE`"))
    return set(re.findall(r"`([^`]+)`", outside))


def test_the_documented_sources_are_the_ones_shown() -> None:
    documented = _documented_sources()
    assert documented == {
        "PodGroup",
        "scheduler-plugins",
        "volcano",
        "annotations",
        "labels",
        "koordinator",
        "upstream",
        "-",
    }
    shown = {SOURCES.get(v, v) for k, v in vars(Source).items() if k.isupper()}
    assert shown | {"-"} == documented


@pytest.mark.parametrize(
    ("pod", "source"),
    [
        (
            _pod(
                "a-0",
                annotations={
                    "scheduling.k8s.io/group-name": "g",
                    "scheduling.k8s.io/group-pod-num": "2",
                },
            ),
            "annotations",
        ),
        (_pod("v-0", annotations={"scheduling.k8s.io/group-name": "g"}), "volcano"),
        (_pod("x-0", labels={"scheduling.x-k8s.io/pod-group": "g"}), "scheduler-plugins"),
        (_pod("l-0", labels={"pod-group/name": "g", "pod-group/min-available": "2"}), "labels"),
        (
            _pod(
                "k-0",
                annotations={
                    "gang.scheduling.koordinator.sh/name": "g",
                    "gang.scheduling.koordinator.sh/min-available": "2",
                },
            ),
            "koordinator",
        ),
        (_pod("u-0", spec={"schedulingGroup": {"podGroupName": "g"}}), "upstream"),
        (_pod("p-0", labels={"gangsched.io/pod-group": "g"}), "PodGroup"),
    ],
)
def test_source_names_the_convention_as_documented(pod: dict[str, Any], source: str) -> None:
    [row] = gang_rows([], [pod])
    assert row.source == source
    table = render([row], wide=True, all_namespaces=False)
    assert table.splitlines()[1].split()[:2] == ["g", source]


def test_an_annotation_only_gang_is_not_named_volcano_in_a_refusal_either() -> None:
    m = resolve_membership(
        "ml",
        {"gangsched.io/pod-group": "a"},
        {"scheduling.k8s.io/group-name": "b", "scheduling.k8s.io/group-pod-num": "2"},
        0.0,
    )
    assert m.error == "the pod declares more than one gang: ml/a (gangsched), ml/b (annotations)"


@pytest.mark.parametrize("min_member", [10**19, MAX_MEMBERS + 1, 0, -3, "3", True, None, 2.0, [1]])
def test_a_podgroup_minimum_the_scheduler_refuses_shows_invalid(min_member: object) -> None:
    pods = [_pod(f"big-{i}", labels={"gangsched.io/pod-group": "big"}) for i in range(2)]
    rows = _rows([_pg("big", min_member), _pg("ok", 2)], pods)
    big = rows["big"]
    assert (big.min_member, big.min_member_invalid) == (0, True)
    # No condition written yet: WHY says what the scheduler says of the spec.
    assert big.why.startswith("PodGroup ml/big is invalid: spec.minMember: ")
    assert podgroup_from(_pg("big", min_member)).invalid_reason.startswith("spec.minMember: ")
    lines = render(list(rows.values()), wide=False, all_namespaces=False).splitlines()
    assert lines[0].split()[:3] == ["GANG", "PHASE", "MIN"]
    assert [line.split()[2] for line in lines[1:]] == ["invalid", "2"]
    # the column is as wide as its header or "invalid", not as a 20-digit number
    assert lines[1].index("invalid") == lines[0].index("MIN")
    next_column = lines[0].index("MEMBERS(bound/total)")
    assert next_column == lines[0].index("MIN") + len("invalid") + len("   ")


def test_the_largest_valid_minimum_is_shown() -> None:
    rows = _rows([_pg("big", MAX_MEMBERS)], [])
    assert (rows["big"].min_member, rows["big"].min_member_invalid) == (MAX_MEMBERS, False)
    assert not podgroup_from(_pg("big", MAX_MEMBERS)).invalid_reason


def test_a_written_invalid_spec_condition_is_shown_as_written() -> None:
    pg = _pg("big", 10**19)
    pg["status"] = {
        "conditions": [
            {
                "type": "Scheduled",
                "status": "False",
                "reason": "InvalidSpec",
                "message": "PodGroup ml/big is invalid: written",
            }
        ]
    }
    pods = [_pod("big-0", labels={"gangsched.io/pod-group": "big"})]
    [row] = gang_rows([pg], pods)
    assert row.why == "PodGroup ml/big is invalid: written" and row.min_member_invalid


@pytest.mark.parametrize(
    ("labels", "annotations", "field"),
    [
        ({"pod-group/name": "g", "pod-group/min-available": TWENTY_DIGITS}, {}, "pod-group/"),
        (
            {},
            {
                "scheduling.k8s.io/group-name": "g",
                "scheduling.k8s.io/group-pod-num": TWENTY_DIGITS,
            },
            "scheduling.k8s.io/group-pod-num",
        ),
        (
            {},
            {
                "gang.scheduling.koordinator.sh/name": "g",
                "gang.scheduling.koordinator.sh/min-available": TWENTY_DIGITS,
            },
            "gang.scheduling.koordinator.sh/min-available",
        ),
    ],
)
def test_pods_declaring_an_absurd_minimum_are_refused_not_a_wide_column(
    labels: dict[str, str], annotations: dict[str, str], field: str
) -> None:
    pods = [_pod(f"g-{i}", labels, annotations) for i in range(2)]
    m = resolve_membership("ml", labels, annotations, 0.0)
    assert m.key == "" and m.error == (
        f"invalid gang declaration: {field}"
        + ("min-available" if field == "pod-group/" else "")
        + f" must be at most {MAX_MEMBERS}, got '{TWENTY_DIGITS}'"
    )
    rows = gang_rows([], pods)
    assert [(r.name, r.phase, r.min_member) for r in rows] == [
        ("pod/g-0", "InvalidPod", 0),
        ("pod/g-1", "InvalidPod", 0),
    ]
    table = render(rows, wide=False, all_namespaces=False)
    assert TWENTY_DIGITS not in table.splitlines()[0]
    assert all(line.split()[2] == "-" for line in table.splitlines()[1:])


def test_a_very_long_minimum_is_cut_short_in_the_refusal() -> None:
    labels = {"pod-group/name": "g", "pod-group/min-available": "9" * 500}
    m = resolve_membership("ml", labels, {}, 0.0)
    assert m.error.endswith("got '999999999999999999999999'... (500 characters)")


def test_an_unreadable_scheduling_group_is_a_refused_pod() -> None:
    [row] = gang_rows([], [_pod("u-0", spec={"schedulingGroup": "g"})])
    assert (row.name, row.phase, row.source) == ("pod/u-0", "InvalidPod", "-")
    assert row.why == "spec.schedulingGroup: expected an object"


def test_the_expected_start_column() -> None:
    """status.expectedStart as written; "unknown" when only the basis is (the forecast gave no
    time); "-" when the scheduler made none."""
    pods = [_pod(f"{n}-0", labels={"gangsched.io/pod-group": n}) for n in ("a", "b", "c")]
    pgs = [_pg(n, 1) for n in ("a", "b", "c")]
    pgs[0]["status"] = {
        "expectedStart": "2026-11-27T16:00:00Z",
        "expectedStartBasis": "after ml/x ends (declared run time 2h0m)",
    }
    pgs[1]["status"] = {"expectedStartBasis": "waits for ml/y, which declared no end"}
    rows = _rows(pgs, pods)
    assert [rows[n].expected for n in ("a", "b", "c")] == ["2026-11-27T16:00:00Z", "unknown", ""]
    lines = render(list(rows.values()), wide=False, all_namespaces=False).splitlines()
    column = lines[0].split().index("EXPECTED-START")
    assert [line.split()[column] for line in lines[1:]] == [
        "2026-11-27T16:00:00Z",
        "unknown",
        "-",
    ]


def _waiting_pod(name: str, group: str, message: str) -> dict[str, Any]:
    pod = _pod(name, labels={"scheduling.x-k8s.io/pod-group": group})
    pod["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    ]
    return pod


def test_a_gang_of_another_convention_shows_the_forecast_its_pods_say() -> None:
    """A scheduler-plugins gang's forecast is in its pods' PodScheduled message: the column
    shows it, and WHY shows the reason without it."""
    why = "Unschedulable: 2 of 2 members need 4 nvidia.com/gpu; no node has room"
    pods = [
        _waiting_pod(
            "a-0", "a", f"{why}; expected to start at 2026-11-27T16:00:00Z, after ml/x ends"
        ),
        _waiting_pod("b-0", "b", f"{why}; expected start unknown: waits for ml/y, which declared"
                     " no end"),
        _waiting_pod("c-0", "c", why),
    ]  # fmt: skip
    rows = _rows([], pods)
    assert [rows[n].expected for n in ("a", "b", "c")] == ["2026-11-27T16:00:00Z", "unknown", ""]
    assert {rows[n].why for n in ("a", "b", "c")} == {why.partition(": ")[2]}


def test_a_member_being_deleted_is_not_counted_bound() -> None:
    """The scheduler's counting rule (``counted``): a running member with a deletionTimestamp
    exists but is neither bound nor running, so a gang of two with one terminating is no
    longer shown Running, whatever its last written status said."""
    pods = []
    for i in range(2):
        p = _pod(f"g-{i}", labels={"gangsched.io/pod-group": "g"}, spec={"nodeName": "n0"})
        p["status"]["phase"] = "Running"
        pods.append(p)
    pods[1]["metadata"]["deletionTimestamp"] = "2026-11-28T12:00:00Z"
    pg = _pg("g", 2)
    pg["status"] = {
        "scheduleStartTime": "2026-11-28T11:00:00Z",
        "conditions": [{"type": "Scheduled", "status": "True", "reason": "Scheduled"}],
    }
    row = _rows([pg], pods)["g"]
    assert (row.phase, row.why) == ("Scheduling", "1 of 2 members bound")
    del pods[1]["metadata"]["deletionTimestamp"]
    assert _rows([pg], pods)["g"].phase == "Running"
