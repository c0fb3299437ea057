"""The ``gangsched.io/SchedulerError`` pod condition: what a scheduler that failed inside itself
records on a gang's pending pods, read back by the next process (api/schedulererror.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.api.pod import as_bound, pod_from, with_status
from gangsched.api.schedulererror import (
    CONDITION,
    ERROR_TEXT_MAX,
    condition,
    read_scheduler_error,
)
from gangsched.core.model import SchedulerError
from tests.api.objects import DELETE, POD, patched

UNTIL = datetime(2026, 11, 29, 1, 30, tzinfo=UTC).timestamp()
RECORD = SchedulerError(2, UNTIL, "KeyError: 'gpu-3'")


def status_with(*conditions: dict[str, Any]) -> dict[str, Any]:
    return {"phase": "Pending", "conditions": list(conditions)}


def test_a_record_reads_back_as_written() -> None:
    c = condition(RECORD, "2026-11-29T01:20:00Z")
    assert c["type"] == CONDITION == "gangsched.io/SchedulerError"
    assert c["status"] == "True" and c["reason"] == "SchedulerError"
    assert json.loads(c["message"]) == {
        "count": 2,
        "until": "2026-11-29T01:30:00Z",
        "error": "KeyError: 'gpu-3'",
    }
    scheduled = {"type": "PodScheduled", "status": "False", "reason": "SchedulerError"}
    assert read_scheduler_error(status_with(scheduled, c)) == RECORD
    assert read_scheduler_error(status_with(scheduled)) is None
    assert read_scheduler_error({}) is None


def test_the_time_is_written_to_the_second_rounded_up_and_the_error_cut() -> None:
    c = condition(SchedulerError(1, UNTIL + 0.25, "E: " + "x" * 2000), "now")
    back = read_scheduler_error(status_with(c))
    assert back is not None
    assert back.until == UNTIL + 1
    assert len(back.error) == ERROR_TEXT_MAX


def test_a_record_set_to_false_holds_nothing_back() -> None:
    c = {**condition(RECORD, "now"), "status": "False"}
    assert read_scheduler_error(status_with(c)) is None


@pytest.mark.parametrize(
    "message",
    [
        None,
        "not json",
        "[1]",
        '{"count": 0, "until": "2026-11-29T01:30:00Z"}',
        '{"count": true, "until": "2026-11-29T01:30:00Z"}',
        '{"count": 1}',
        '{"count": 1, "until": "tomorrow"}',
    ],
)
def test_a_record_that_cannot_be_read_holds_nothing_back(message: object) -> None:
    c = {**condition(RECORD, "now"), "message": message}
    assert read_scheduler_error(status_with(c)) is None


def test_a_record_without_an_error_text_still_holds() -> None:
    c = {**condition(RECORD, "now"), "message": '{"count": 1, "until": "2026-11-29T01:30:00Z"}'}
    assert read_scheduler_error(status_with(c)) == SchedulerError(1, UNTIL, "")


def test_a_pending_pod_carries_its_record_and_a_bound_one_does_not() -> None:
    obj = patched(
        POD,
        (("spec", "nodeName"), DELETE),
        (("status",), status_with(condition(RECORD, "now"))),
    )
    pod, _ = pod_from(obj)
    assert pod.scheduler_error == RECORD
    assert not pod.invalid_reason
    bound, _ = pod_from(patched(obj, (("spec", "nodeName"), "n1")))
    assert bound.scheduler_error is None


def test_the_record_is_read_on_a_status_only_change_too() -> None:
    """The pod reader's fast path (kube/podreader.py) reads the status without the spec."""
    obj = patched(POD, (("spec", "nodeName"), DELETE))
    pod, _ = pod_from(obj)
    assert pod.scheduler_error is None
    status = status_with(condition(RECORD, "now"))
    assert with_status(pod, obj["metadata"], status).scheduler_error == RECORD
    assert with_status(pod, obj["metadata"], status_with()).scheduler_error is None
    bound = as_bound(with_status(pod, obj["metadata"], status), "n1", obj["metadata"], status)
    assert bound is not None and bound.scheduler_error is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(
    status=st.just("True") | _json,
    message=_json | _json.map(json.dumps),
    record=st.fixed_dictionaries(
        {},
        optional={
            "count": _json,
            "until": _json
            | st.sampled_from(
                [
                    "2026-11-29T01:30:00Z",
                    "0001-01-01T00:00:00",
                    "0001-01-01T00:00:00+14:00",
                    "9999-12-31T23:59:59-14:00",
                ]
            ),
            "error": _json,
        },
    ).map(json.dumps),
)
def test_reading_a_record_never_raises(status: object, message: object, record: str) -> None:
    """Whatever a pod's status holds (someone may write the condition by hand): a record, or
    None."""
    for text in (message, record):
        c = {"type": CONDITION, "status": status, "message": text}
        got = read_scheduler_error({"conditions": [c]})
        assert got is None or (got.count >= 1 and isinstance(got.error, str))
    read_scheduler_error({"conditions": status})  # (any list, or not a list at all)
