"""The ``gangsched.io/SchedulerError`` pod condition: what a scheduler that failed inside itself
while deciding a gang (a bug in gangsched, not in the gang) records on the gang's pending pods
before it exits, so that the next process holds that gang back for a while and schedules every
other gang, instead of failing on the same gang after every restart.

It is written through ``pods/status``, as the ``PodScheduled`` condition is (the scheduler never
changes a pod's metadata or spec), next to ``PodScheduled=False`` with reason ``SchedulerError``
and a message for people. Its own message is the record, a JSON object::

    {"count": 1, "until": "2026-11-29T01:30:00Z", "error": "KeyError: 'gpu-3'"}

``count``: how many times deciding the gang failed (each time doubles the hold); ``until``: the
gang is not decided again before then; ``error``: the exception. The condition holds the gang
back only while its status is ``True``: setting it to ``False`` tries the gang again at once
(core/steps/quarantine.py). A record that cannot be read holds nothing back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from gangsched.api.labels import SCHEDULER_ERROR_CONDITION
from gangsched.core.model import SchedulerError
from gangsched.core.steps.quarantine import held_until

__all__ = ["CONDITION", "ERROR_TEXT_MAX", "condition", "encode", "read_scheduler_error"]

CONDITION = SCHEDULER_ERROR_CONDITION
ERROR_TEXT_MAX = 512  # the exception's text kept in the record, at most (characters)


def read_scheduler_error(status: Mapping[str, Any]) -> SchedulerError | None:
    """The record in a pod's status, None when there is none, when its condition is not
    ``True``, or when it cannot be read."""
    conditions = status.get("conditions")
    if type(conditions) is not list:
        return None
    for c in conditions:
        if isinstance(c, Mapping) and c.get("type") == CONDITION:
            if c.get("status") != "True":
                return None
            return _decode(c.get("message"))
    return None


def _decode(text: object) -> SchedulerError | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    count, until, error = value.get("count"), value.get("until"), value.get("error", "")
    if type(count) is not int or count < 1 or not isinstance(until, str):
        return None
    try:
        at = datetime.fromisoformat(until.replace("Z", "+00:00"))
    except ValueError:
        return None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    if not isinstance(error, str):
        error = ""
    return SchedulerError(count, at.timestamp(), error[:ERROR_TEXT_MAX])


def encode(record: SchedulerError) -> str:
    """The record as the condition's message (``until`` to the second, rounded up)."""
    return json.dumps(
        {
            "count": record.count,
            "until": held_until(record),
            "error": record.error[:ERROR_TEXT_MAX],
        },
        separators=(",", ":"),
    )


def condition(record: SchedulerError, now: str) -> dict[str, str]:
    """The condition that carries ``record``, made at ``now`` (RFC 3339)."""
    return {
        "type": CONDITION,
        "status": "True",
        "reason": "SchedulerError",
        "message": encode(record),
        "lastTransitionTime": now,
    }
