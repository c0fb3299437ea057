"""Reservations: a gang that waited too long gets the nodes where it fits soonest; lower or
equal priority work backfills only capacity the reservation does not need, or ends first."""

from __future__ import annotations

from dataclasses import replace

from gangsched.core.config import CoreConfig
from gangsched.core.decisions import BindGang
from gangsched.core.model import DomainConstraint, Pod, PodPhase
from gangsched.core.reservation import DEVICES
from gangsched.core.resourceclaims import (
    Claim,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    ExactRequest,
)
from tests.core.builders import make_node
from tests.core.test_scheduler import T0, Harness, binds, gpu_node, members, pod


def cluster(after: float | None = 60.0) -> Harness:
    return Harness(
        CoreConfig(reservation_after_seconds=after, backoff_max_seconds=1.0),
        gpu_node("n0", 8),
        gpu_node("n1", 8),
    )


def fill_with_small(h: Harness, n: int, start: int = 0) -> list[str]:
    uids = []
    for i in range(start, start + n):
        p = pod(f"s{i}", gpus=1, priority=0, created=float(i))
        h.add(p)
        uids.append(p.uid)
    h.run()
    return uids


def big_gang(h: Harness, gpus: int = 8, **kw: object) -> None:
    """The gang that waits: ``ml/big``, two members of ``gpus`` GPUs at priority 0, tried."""
    h.gang("ml/big", 2, **kw)
    h.add(*members("ml/big", 2, gpus=gpus, priority=0))
    h.run()


def wait(h: Harness, seconds: float = 61) -> None:
    """Past reservationAfterSeconds (60), and the next run."""
    h.advance(seconds)
    h.run()


def test_a_waiting_gang_gets_a_reservation_and_small_jobs_stop_taking_its_nodes() -> None:
    h = cluster()
    small = fill_with_small(h, 4)  # 4 of 16 GPUs busy
    big_gang(h)
    assert h.s.reserve.current is None, "not before it has waited long enough"
    wait(h)
    r = h.s.reserve.current
    assert r is not None and r.gang == "ml/big" and set(r.nodes) == {"n0", "n1"}
    view = h.s.view("ml/big")
    assert view is not None and view.reserved_nodes == ("n0", "n1")
    assert view.reserved_since is not None
    # a new small job of the same priority no longer fits anywhere
    h.add(pod("late", gpus=1, priority=0))
    assert not binds(h.run())
    # the running ones end; the big gang binds whole
    for uid in small:
        h.finish(uid)
    h.advance(2)
    out = h.run()
    assert [b.gang for b in binds(out)] == ["ml/big"]
    assert h.s.reserve.current is None


def test_a_pod_whose_binding_is_in_flight_is_waited_for_like_the_running_ones() -> None:
    """The gang's attempt can come while a pod it must wait for is assumed but not yet bound
    (with nothing else queued, the gang is tried at the event that let that pod in): the
    reservation still waits for it, rather than finding no way to fit."""
    h = cluster()
    fill_with_small(h, 15)
    big_gang(h)
    h.advance(61)
    # older than the gang: tried first, it takes the last free GPU
    h.add(pod("inflight", gpus=1, priority=0, created=T0 - 10))
    h.run(confirm=False)  # bound by the core, not yet confirmed by the API server
    assert not h.s.cache.pods["uid-inflight"].node_name
    r = h.s.reserve.current
    assert r is not None and r.gang == "ml/big" and set(r.nodes) == {"n0", "n1"}


def test_backfill_uses_only_what_the_reservation_does_not_need() -> None:
    h = Harness(
        CoreConfig(reservation_after_seconds=60.0, backoff_max_seconds=1.0),
        gpu_node("n0", 8),
        gpu_node("n1", 8),
        gpu_node("n2", 8),
    )
    fill_with_small(h, 16)  # two nodes full, one empty
    empty = next(n for n, i in h.s.cache.nodes.items() if not i.requested.get("nvidia.com/gpu"))
    big_gang(h, gpus=6)  # one fits the empty node, not both
    wait(h)
    r = h.s.reserve.current
    assert r is not None and r.gang == "ml/big" and empty in r.nodes and len(r.nodes) == 2
    # 2 GPUs of the empty node are not needed by the reservation: small jobs backfill them,
    # and no more
    h.add(*(pod(f"late{i}", gpus=1, priority=0) for i in range(3)))
    out = h.run()
    assert sorted(b.bindings[0].node for b in binds(out)) == [empty, empty]


def test_higher_priority_work_is_not_held_back() -> None:
    h = cluster()
    fill_with_small(h, 4)
    big_gang(h)
    wait(h)
    assert h.s.reserve.current is not None
    h.add(pod("urgent", gpus=1, priority=10))
    assert [b.bindings[0].pod.name for b in binds(h.run())] == ["urgent"]


def test_a_short_job_that_ends_before_the_reservation_is_complete_backfills() -> None:
    h = cluster()
    h.gang("ml/long", 1, expected_runtime_seconds=600.0)
    h.add(*members("ml/long", 1, gpus=4, priority=0))
    h.run()
    big_gang(h)
    wait(h)
    r = h.s.reserve.current
    assert r is not None and r.ready_at is not None
    h.gang("ml/short", 1, expected_runtime_seconds=60.0)
    h.add(*members("ml/short", 1, gpus=1, priority=0))
    h.gang("ml/slow", 1, expected_runtime_seconds=6000.0)
    h.add(*members("ml/slow", 1, gpus=1, priority=0))
    out = h.run()
    assert [b.gang for b in binds(out)] == ["ml/short"]


def test_the_gang_that_waited_longer_keeps_the_reservation_across_attempts() -> None:
    """Two gangs of equal priority need the whole cluster. The older one, which failed last
    (and so stands behind the other in the queue's order), keeps the reservation, and binds
    first once the running gang ends."""
    h = cluster()
    h.gang("ml/a", 2)
    h.add(*members("ml/a", 2, gpus=8, priority=0))
    h.run()
    h.gang("ml/first", 2)
    h.add(*members("ml/first", 2, gpus=8, priority=0))
    h.run()
    h.advance(1)
    h.gang("ml/second", 2, created=h.clock.now())
    h.add(*members("ml/second", 2, gpus=8, priority=0))
    h.run()
    for _ in range(3):
        wait(h)
        r = h.s.reserve.current
        assert r is not None and r.gang == "ml/first"
    for p in members("ml/a", 2, gpus=8, priority=0):
        h.finish(p.uid)
    h.advance(2)
    assert [b.gang for b in binds(h.run())] == ["ml/first"]


def test_reservations_can_be_turned_off() -> None:
    h = cluster(after=None)
    fill_with_small(h, 4)
    big_gang(h)
    wait(h, 3600)
    assert h.s.reserve.current is None
    h.add(pod("late", gpus=1, priority=0))
    assert binds(h.run())


def test_the_reservation_goes_with_its_gang() -> None:
    h = cluster()
    fill_with_small(h, 4)
    big_gang(h)
    wait(h)
    assert h.s.reserve.current is not None
    h.s.gang_delete("ml/big")
    assert h.s.reserve.current is None


def test_zero_gives_the_reservation_to_the_queue_head_at_its_first_failure() -> None:
    h = cluster(after=0.0)
    fill_with_small(h, 4)
    big_gang(h)
    r = h.s.reserve.current
    assert r is not None and r.gang == "ml/big"


def test_a_reservation_for_a_required_rack_is_made_inside_one_rack() -> None:
    """Racks ra (a0), rb (b0, b1), rc (c0) of 8-GPU nodes; small jobs on each, two on each
    node of rb. A gang of 2 x 8 GPUs that needs one rack waits for rb's four small pods: its
    reservation holds b0 and b1. Without the rack it would wait for fewer pods, across racks."""
    rack = "example.com/rack"
    layout = (("a0", "ra", 1), ("b0", "rb", 2), ("b1", "rb", 2), ("c0", "rc", 1))
    chosen = {}
    for required in ("", rack):
        nodes = [
            make_node(n).gpus(8).cpu("32").memory("128Gi").label(rack, r).node()
            for n, r, _ in layout
        ]
        h = Harness(CoreConfig(reservation_after_seconds=60.0, backoff_max_seconds=1.0), *nodes)
        for n, _, count in layout:
            for j in range(count):
                small = pod(f"s-{n}-{j}", gpus=1, node_name=n, phase=PodPhase.RUNNING)
                h.add(small)
        big_gang(h, domain=DomainConstraint(required=required))
        wait(h)
        r = h.s.reserve.current
        assert r is not None and r.gang == "ml/big"
        chosen[required] = set(r.nodes)
    racks = {n: r for n, r, _ in layout}
    assert len({racks[n] for n in chosen[""]}) == 2  # the control: across racks
    assert chosen[rack] == {"b0", "b1"}


def test_a_reservation_holds_dra_devices_too() -> None:
    """A gang whose GPUs come through claims: small jobs with claims of the same priority stop
    taking the reserved nodes' devices, and the gang binds once theirs are given back."""
    h = Harness(
        CoreConfig(reservation_after_seconds=60.0, backoff_max_seconds=1.0),
        *(make_node(n).cpu("64").memory("256Gi").node() for n in ("n0", "n1")),
    )
    h.s.device_class_upsert(DeviceClass("gpu.example.com"))
    for n in ("n0", "n1"):
        h.s.resource_slice_upsert(
            n, [Device(DeviceId("gpu.example.com", n, f"g{i}"), n) for i in range(8)]
        )
    claims: dict[str, Claim] = {}

    def claimed(p: Pod, count: int) -> Pod:
        claim = Claim(
            p.namespace,
            f"{p.name}-gpu",
            f"u-{p.name}",
            (DeviceRequest("gpu", ExactRequest("gpu.example.com", count=count)),),
        )
        claims[claim.key] = claim
        h.s.resource_claim_upsert(claim)
        return replace(p, resource_claims=(claim.key,))

    def run() -> list[BindGang]:
        """A run, with the claims and bindings written as the watch shows them."""
        out = binds(h.run(confirm=False))
        for b in out:
            for w in b.claims:
                written = replace(claims[w.claim], allocation=w.allocation, reserved_for=w.pods)
                h.s.resource_claim_upsert(written)
        h.confirm(out)
        return out

    small = [claimed(pod(f"s{i}", gpus=0, priority=0, created=float(i)), 1) for i in range(4)]
    h.add(*small)
    assert len(run()) == 4
    h.gang("ml/big", 2)
    h.add(*(claimed(p, 8) for p in members("ml/big", 2, gpus=0, priority=0)))
    run()
    h.advance(61)
    run()
    r = h.s.reserve.current
    assert r is not None and r.gang == "ml/big"
    assert sorted(need.get(DEVICES + "gpu.example.com", 0) for need in r.need.values()) == [8, 8]
    # a new small job of the same priority no longer gets a device
    h.add(claimed(pod("late", gpus=0, priority=0), 1))
    assert not run()
    # the small jobs end and their claims go (the resourceclaim controller's job)
    for p in small:
        h.s.pod_delete(p.uid)
        h.s.resource_claim_delete(f"{p.namespace}/{p.name}-gpu")
    h.advance(2)
    assert [b.gang for b in run()] == ["ml/big"]
