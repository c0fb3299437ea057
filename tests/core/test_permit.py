"""The Permit waiting map: deadlines, reservations, idempotent release."""

from __future__ import annotations

from gangsched.core.permit import PermitMap


def test_first_reservation_sets_the_deadline() -> None:
    pm = PermitMap()
    wg = pm.wait("ns/g", {"u1": "n1"}, deadline=100.0)
    assert wg.deadline == 100.0
    wg2 = pm.wait("ns/g", {"u2": "n2"}, deadline=500.0)
    assert wg2 is wg
    assert wg.deadline == 100.0  # later reservations do not extend the wait
    assert wg.reserved == {"u1": "n1", "u2": "n2"}
    assert "ns/g" in pm
    assert len(pm) == 1


def test_release_returns_reservations_once() -> None:
    pm = PermitMap()
    pm.wait("ns/g", {"u1": "n1", "u2": "n1"}, deadline=10.0)
    assert pm.release("ns/g") == {"u1": "n1", "u2": "n1"}
    assert "ns/g" not in pm
    assert pm.release("ns/g") == {}
    assert pm.release("never-waited") == {}
    assert len(pm) == 0
    assert pm.get("ns/g") is None


def test_release_twice_equals_release_once_for_other_gangs() -> None:
    once, twice = PermitMap(), PermitMap()
    for pm in (once, twice):
        pm.wait("a", {"u1": "n1"}, 5.0)
        pm.wait("b", {"u2": "n2"}, 6.0)
    once.release("a")
    twice.release("a")
    twice.release("a")
    assert once.waiting_gangs() == twice.waiting_gangs() == ["b"]
    assert once.next_deadline() == twice.next_deadline() == 6.0


def test_drop_pod_removes_gang_when_empty() -> None:
    pm = PermitMap()
    pm.wait("g", {"u1": "n1", "u2": "n2"}, 10.0)
    pm.drop_pod("g", "u1")
    wg = pm.get("g")
    assert wg is not None
    assert wg.reserved == {"u2": "n2"}
    pm.drop_pod("g", "unknown")
    pm.drop_pod("other", "u2")
    assert "g" in pm
    pm.drop_pod("g", "u2")
    assert "g" not in pm
    assert pm.release("g") == {}


def test_expired_is_sorted_and_inclusive() -> None:
    pm = PermitMap()
    pm.wait("c", {"u1": "n"}, 10.0)
    pm.wait("a", {"u2": "n"}, 10.0)
    pm.wait("b", {"u3": "n"}, 20.0)
    assert pm.expired(9.99) == []
    assert pm.expired(10.0) == ["a", "c"]
    assert pm.expired(100.0) == ["a", "b", "c"]
    assert pm.next_deadline() == 10.0
    assert pm.waiting_gangs() == ["a", "b", "c"]


def test_empty_map() -> None:
    pm = PermitMap()
    assert pm.next_deadline() is None
    assert pm.expired(1e9) == []
    assert pm.waiting_gangs() == []
    assert len(pm) == 0
