"""Dynamic Resource Allocation in the simulator: nodes whose GPUs a DRA driver publishes,
device classes with CEL selectors, pods whose claims are made from templates, all read by the
scheduler's own readers; the core allocates a gang's claims together, the simulator writes them
before binding and checks that no device is ever allocated twice."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import gangsched.core.claimstate as claimstate
from gangsched.core.claimalloc import allocate_one_by_one
from gangsched.sim.run import simulate
from gangsched.sim.workload import Workload, WorkloadError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "dra.yaml"


def _run(example: Path = EXAMPLE) -> dict[str, Any]:
    code, text, _ = simulate(str(example), as_json=True, plot_path=None, show_all=False, until=None)
    assert code == 0, text
    summary: dict[str, Any] = json.loads(text)
    return summary


def test_gangs_with_claims_bind_whole_and_no_device_is_allocated_twice() -> None:
    s = _run()
    assert (s["gangs_bound"], s["gangs_total"], s["pods_bound"]) == (5, 5, 34)
    assert s["claims_allocated"] == 34
    assert s["partial_gangs"] == 0 and s["overcommitted_nodes"] == 0


def test_allocating_pod_by_pod_would_leave_the_pair_waiting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same workload with the claims of the pods on a node allocated one by one (as
    kube-scheduler does, never revisiting an earlier pod's devices): the pair never starts."""

    def one_by_one(
        claims: Any,
        devices: Any,
        classes: Any,
        used: Any,
        node: str,
        counters: Any = None,
        consumed: Any = None,
    ) -> Any:
        return allocate_one_by_one(
            claims, devices, classes, used, node, counters=counters, consumed=consumed
        )

    monkeypatch.setattr(claimstate, "allocate", one_by_one)
    s = _run()
    assert (s["gangs_bound"], s["gangs_total"]) == (4, 5)
    assert s["longest_waiting_gang"] == "default/pair"


def test_a_claim_template_the_scheduler_would_refuse_is_a_workload_error() -> None:
    from gangsched.sim.jobs import build_jobs

    w = Workload.model_validate(
        {
            "gangs": [
                {
                    "name": "g",
                    "pods": [
                        {"count": 1, "resourceClaims": [{"devices": {"config": [{"opaque": {}}]}}]}
                    ],
                }
            ]
        }
    )
    with pytest.raises(WorkloadError, match=r"gangs\.0\.pods\.0\.resourceClaims\.0: .*config"):
        build_jobs(w, Path("."))


MIG = Path(__file__).resolve().parents[2] / "examples" / "dra-mig.yaml"


def test_partitioned_gpus_slices_and_whole_gpus_share_counters() -> None:
    """examples/dra-mig.yaml: 8 slices packed onto two GPUs leave two whole GPUs for the
    training gang at once; the gang of 3 whole GPUs waits until the others end; no counter
    set is ever over-consumed (the simulator checks it on its own)."""
    s = _run(MIG)
    assert (s["gangs_bound"], s["gangs_total"]) == (3, 3)
    assert s["partial_gangs"] == 0 and s["overcommitted_nodes"] == 0
    assert s["longest_waiting_gang"] == "default/too-big"
    assert s["claims_allocated"] == 13


def test_the_simulator_sees_counters_over_consumed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator's own check: with the counters left out of the search (every pool seen
    as holding more than it has), slices and whole GPUs are given out together, and the
    over-consumption is reported."""
    real = claimstate.ClaimCatalog._counters_left

    def roomy(self: Any, devices: Any, keys: Any) -> Any:
        left = real(self, devices, keys)
        return None if left is None else dict.fromkeys(left, 10**30)

    monkeypatch.setattr(claimstate.ClaimCatalog, "_counters_left", roomy)
    code, text, _ = simulate(str(MIG), as_json=True, plot_path=None, show_all=False, until=None)
    assert code != 0  # an over-committed run fails
    assert json.loads(text)["overcommitted_nodes"] > 0
