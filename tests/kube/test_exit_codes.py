"""How the daemon's command ends: the exit status a kubelet (or a supervisor) sees."""

from __future__ import annotations

import pytest

from gangsched.app import ControllerStoppedError, LostLeadershipError
from gangsched.cli_kube import _run_async


async def _raise(error: Exception) -> None:
    raise error


@pytest.mark.parametrize(
    "error",
    [
        LostLeadershipError("lost the leader lease; exiting"),
        ControllerStoppedError("the PodGroup controller stopped"),
    ],
)
def test_a_fatal_stop_exits_1_with_one_line(
    error: Exception, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run_async(_raise(error), "gangsched run") == 1
    err = capsys.readouterr().err
    assert err == f"gangsched run: {error}\n"


def test_a_connection_failure_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert _run_async(_raise(ConnectionRefusedError("refused")), "gangsched run") == 2
    assert "cannot connect" in capsys.readouterr().err


async def _nothing() -> None:
    return None


def test_a_clean_stop_exits_0() -> None:
    assert _run_async(_nothing(), "gangsched run") == 0


def test_an_unexpected_error_is_not_swallowed() -> None:
    with pytest.raises(ValueError):
        _run_async(_raise(ValueError("bug")), "gangsched run")
