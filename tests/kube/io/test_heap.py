"""The collector is paused while lists are handled (nesting across reflectors) and what the
first lists loaded is frozen before it runs again."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gangsched.kube.io.heap import collector_paused


@pytest.fixture(autouse=True)
def _unfreeze() -> Iterator[None]:
    yield
    gc.unfreeze()
    gc.enable()


def test_nested_pauses_enable_the_collector_only_when_the_last_ends() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()


def test_a_first_list_freezes_what_is_there_before_the_collector_runs_again() -> None:
    gc.unfreeze()
    before = gc.get_freeze_count()
    with collector_paused(freeze=True):
        loaded = [{"pod": i} for i in range(1000)]
        with collector_paused():  # another reflector listing at the same time
            pass
        assert gc.get_freeze_count() == before
    assert gc.get_freeze_count() >= before + len(loaded)
    frozen = gc.get_freeze_count()
    with collector_paused():  # a relist: collected as usual afterwards, nothing frozen
        more = [{"pod": i} for i in range(1000)]
    assert gc.get_freeze_count() == frozen and len(more) == 1000


def test_the_collector_runs_again_after_a_list_that_failed() -> None:
    with pytest.raises(RuntimeError), collector_paused(freeze=True):
        raise RuntimeError("the API server went away")
    assert gc.isenabled()
