"""Resource amounts, resource lists and a pod's effective request (gangsched.core.resources)."""

from __future__ import annotations

import re

import pytest

from gangsched.core.quantity import QuantityError
from gangsched.core.resources import (
    CPU,
    GPU,
    MEMORY,
    PODS,
    ContainerRequests,
    parse_amount,
    parse_resource_list,
    pod_requests,
)

MI = 2**20
GI = 2**30


def _requests(cpu: int, memory: int, gpu: int, storage: int) -> dict[str, int]:
    named = {CPU: cpu, MEMORY: memory, GPU: gpu, "ephemeral-storage": storage}
    return {k: v for k, v in named.items() if v}


def c(cpu: int = 0, memory: int = 0, gpu: int = 0, storage: int = 0) -> ContainerRequests:
    """An app container or a regular init container (zero amounts left out)."""
    return ContainerRequests(_requests(cpu, memory, gpu, storage))


def sidecar(cpu: int = 0, memory: int = 0, gpu: int = 0, storage: int = 0) -> ContainerRequests:
    """A restartable init container (``restartPolicy: Always``)."""
    return ContainerRequests(_requests(cpu, memory, gpu, storage), restartable=True)


# ---- parse_amount -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        (CPU, "100m", 100),
        (CPU, "1", 1000),
        (CPU, 2, 2000),
        (CPU, "1.5", 1500),
        (CPU, "0.0001", 1),  # 0.1m rounds up to 1m
        (CPU, "1e3", 1_000_000),
        (CPU, "0", 0),
        (MEMORY, "2Gi", 2 * GI),
        (MEMORY, "500Mi", 500 * MI),
        (MEMORY, "1k", 1000),
        (MEMORY, "1E3", 1000),
        (MEMORY, "100m", 1),  # 0.1 byte rounds up to a whole byte
        (MEMORY, 1024, 1024),
        ("ephemeral-storage", "10Gi", 10 * GI),
        (PODS, "110", 110),
        (GPU, "2", 2),
        (GPU, 8, 8),
        (GPU, "1000m", 1),  # a whole number written in milli-units is still whole
        (GPU, "1e1", 10),
        ("example.com/foo", "3", 3),
        ("hugepages-2Mi", "1Gi", GI),
    ],
)
def test_parse_amount(name: str, value: object, expected: int) -> None:
    assert parse_amount(name, value, f"requests.{name}") == expected


@pytest.mark.parametrize(
    ("name", "value"),
    [
        (GPU, "0.5"),  # extended resources must be whole
        (GPU, "500m"),
        (GPU, 1.5),
        ("example.com/foo", "1.1"),
        (CPU, "-1"),  # negatives are refused for every resource
        (CPU, "-100m"),
        (MEMORY, "-1Gi"),
        (GPU, "-1"),
        (GPU, -1),
        (MEMORY, "8Ei"),  # 2^63 bytes: beyond the 2^62 cap
        (CPU, "1e16"),  # 10^19 milli-cores: beyond the cap
        (MEMORY, "bogus"),
        (CPU, None),
        (CPU, True),
    ],
)
def test_parse_amount_rejects(name: str, value: object) -> None:
    field = f"spec.containers[0].resources.requests.{name}"
    with pytest.raises(QuantityError) as info:
        parse_amount(name, value, field)
    assert info.value.field == field


def test_parse_amount_accepts_the_cap() -> None:
    assert parse_amount(MEMORY, "4Ei", "m") == 2**62
    with pytest.raises(QuantityError, match="too large"):
        parse_amount(MEMORY, 2**62 + 1, "m")


def test_extended_error_names_the_resource() -> None:
    with pytest.raises(QuantityError, match=re.escape("nvidia.com/gpu must be a whole number")):
        parse_amount(GPU, "0.5", "requests.nvidia.com/gpu")


def test_native_prefixed_resource_is_not_extended() -> None:
    # kubernetes.io/... names are native, not extended: fractions round up like plain units.
    assert parse_amount("kubernetes.io/foo", "0.5", "f") == 1


# ---- parse_resource_list ----------------------------------------------------------------


def test_parse_resource_list() -> None:
    raw = {"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": 2, "pods": "3"}
    assert parse_resource_list(raw, "requests") == {
        CPU: 500,
        MEMORY: GI,
        GPU: 2,
        PODS: 3,
    }


@pytest.mark.parametrize("raw", [None, {}])
def test_parse_resource_list_empty(raw: dict[str, object] | None) -> None:
    assert parse_resource_list(raw, "requests") == {}


def test_parse_resource_list_keeps_zero_entries() -> None:
    assert parse_resource_list({"cpu": "0"}, "requests") == {CPU: 0}


def test_parse_resource_list_error_names_the_entry() -> None:
    field = "spec.containers[1].resources.requests"
    with pytest.raises(QuantityError) as info:
        parse_resource_list({"cpu": "1", "memory": "12 Gi"}, field)
    assert info.value.field == f"{field}.memory"
    assert str(info.value).startswith(f"{field}.memory: ")


def test_parse_resource_list_rejects_fractional_gpu() -> None:
    with pytest.raises(QuantityError) as info:
        parse_resource_list({"nvidia.com/gpu": "0.5"}, "limits")
    assert info.value.field == "limits.nvidia.com/gpu"


@pytest.mark.parametrize("raw", [["cpu"], "cpu: 1", 5])
def test_parse_resource_list_rejects_non_mappings(raw: object) -> None:
    with pytest.raises(QuantityError) as info:
        parse_resource_list(raw, "requests")  # type: ignore[arg-type]
    assert info.value.field == "requests"


@pytest.mark.parametrize("raw", [{"": "1"}, {1: "1"}])
def test_parse_resource_list_rejects_bad_names(raw: dict[object, object]) -> None:
    with pytest.raises(QuantityError) as info:
        parse_resource_list(raw, "requests")  # type: ignore[arg-type]
    assert info.value.field == "requests"


# ---- pod_requests: plain containers -----------------------------------------------------


def test_no_containers_still_takes_a_pod_slot() -> None:
    assert pod_requests([]) == {PODS: 1}


def test_containers_are_summed() -> None:
    got = pod_requests([c(cpu=250, memory=64 * MI), c(cpu=500, memory=128 * MI), c()])
    assert got == {CPU: 750, MEMORY: 192 * MI, PODS: 1}


def test_zero_requests_are_dropped() -> None:
    assert pod_requests([ContainerRequests({CPU: 0, MEMORY: 0})]) == {PODS: 1}


def test_inputs_are_not_mutated() -> None:
    app = {CPU: 100}
    init = {CPU: 500}
    side = {CPU: 50}
    overhead = {CPU: 10}
    pod_level = {MEMORY: MI}
    pod_requests(
        [ContainerRequests(app)],
        [ContainerRequests(side, restartable=True), ContainerRequests(init)],
        overhead=overhead,
        pod_level=pod_level,
    )
    assert (app, init, side, overhead, pod_level) == (
        {CPU: 100},
        {CPU: 500},
        {CPU: 50},
        {CPU: 10},
        {MEMORY: MI},
    )


# ---- pod_requests: regular init containers ----------------------------------------------


def test_init_container_maximum_per_resource() -> None:
    # Init containers run one at a time: the effective init request is the largest per
    # resource, and each resource is compared with the app sum on its own.
    # cpu: max(init 2000, init 500) = 2000 > app 300+200 = 500            -> 2000
    # memory: max(init 64Mi, init 256Mi) = 256Mi < app 200Mi+100Mi = 300Mi -> 300Mi
    got = pod_requests(
        [c(cpu=300, memory=200 * MI), c(cpu=200, memory=100 * MI)],
        [c(cpu=2000, memory=64 * MI), c(cpu=500, memory=256 * MI)],
    )
    assert got == {CPU: 2000, MEMORY: 300 * MI, PODS: 1}


def test_resource_only_in_an_init_container_counts() -> None:
    got = pod_requests([c(cpu=100)], [c(storage=GI)])
    assert got == {CPU: 100, "ephemeral-storage": GI, PODS: 1}


def test_gpu_init_container_does_not_add_to_app_gpus() -> None:
    # An init container holding 4 GPUs before an app container using 2: max, not sum.
    assert pod_requests([c(gpu=2)], [c(gpu=4)]) == {GPU: 4, PODS: 1}


# ---- pod_requests: sidecars (restartable init containers) -------------------------------


def test_sidecar_adds_to_steady_state() -> None:
    # Sidecars keep running beside the app containers: cpu 1000 + 100 = 1100.
    assert pod_requests([c(cpu=1000)], [sidecar(cpu=100)]) == {CPU: 1100, PODS: 1}


def test_sidecar_before_init_container_adds_to_that_step() -> None:
    # sidecar (200m) starts, then init (1000m) runs beside it: that step needs 1200m.
    # steady state: 200m + app 300m = 500m.  max(1200, 500) = 1200m.
    assert pod_requests([c(cpu=300)], [sidecar(cpu=200), c(cpu=1000)]) == {CPU: 1200, PODS: 1}


def test_sidecar_after_init_container_does_not() -> None:
    # init (1000m) finishes before the sidecar starts: its step is 1000m alone.
    # sidecar step: 200m. steady state: 200m + 300m = 500m. max = 1000m.
    assert pod_requests([c(cpu=300)], [c(cpu=1000), sidecar(cpu=200)]) == {CPU: 1000, PODS: 1}


def test_declaration_order_matters() -> None:
    before = pod_requests([c(cpu=100)], [sidecar(cpu=500), c(cpu=800)])
    after = pod_requests([c(cpu=100)], [c(cpu=800), sidecar(cpu=500)])
    # before: steps 500, 500+800=1300; steady 500+100=600 -> 1300
    # after:  steps 800, 500;          steady 600          -> 800
    assert before[CPU] == 1300
    assert after[CPU] == 800


def test_sidecars_only() -> None:
    # Two sidecars and no app containers: steps 100, 100+50=150; steady 150.
    assert pod_requests([], [sidecar(cpu=100), sidecar(cpu=50)]) == {CPU: 150, PODS: 1}


# Worked examples for the rules on the Kubernetes "Sidecar containers" page (section
# "Resource sharing within containers") and the formula of KEP-753, "Resources calculation
# for scheduling and pod admission":
#
#   InitContainerUse(i) = Sum(sidecars with index < i) + InitContainer(i)
#   Pod = Max( Max(each InitContainerUse), Sum(sidecars) + Sum(containers) ) + overhead
#
# with a sidecar's own step counting every sidecar up to and including itself.


def test_docs_example_init_then_sidecar_then_init() -> None:
    # initContainers: init-1 cpu 2, sidecar-1 cpu 1 (Always), init-2 cpu 1.5; containers: main 1.
    #   InitContainerUse(init-1)    = 0 + 2     = 2
    #   InitContainerUse(sidecar-1) = 1         = 1
    #   InitContainerUse(init-2)    = 1 + 1.5   = 2.5
    #   effective init              = max(2, 1, 2.5) = 2.5
    #   sidecars + containers       = 1 + 1     = 2
    #   pod cpu                     = max(2.5, 2)    = 2.5 -> 2500m
    # The KEP's "easiest formula", Max(Max(non-sidecar inits) + Sum(sidecars), ...) would say
    # max(2 + 1, 2) = 3: init-1 completes before sidecar-1 starts, so it is not charged.
    got = pod_requests([c(cpu=1000)], [c(cpu=2000), sidecar(cpu=1000), c(cpu=1500)])
    assert got == {CPU: 2500, PODS: 1}


def test_docs_example_memory_two_sidecars_with_overhead() -> None:
    # initContainers: sidecar-a 64Mi (Always), init-db 512Mi, sidecar-b 128Mi (Always);
    # containers: app 256Mi, worker 128Mi; overhead 32Mi (RuntimeClass podFixed).
    #   InitContainerUse(sidecar-a) = 64                       = 64Mi
    #   InitContainerUse(init-db)   = 64 + 512                 = 576Mi
    #   InitContainerUse(sidecar-b) = 64 + 128                 = 192Mi
    #   effective init              = 576Mi
    #   sidecars + containers       = 64 + 128 + 256 + 128     = 576Mi
    #   higher of the two           = 576Mi
    #   plus overhead               = 576 + 32                 = 608Mi
    got = pod_requests(
        [c(memory=256 * MI), c(memory=128 * MI)],
        [sidecar(memory=64 * MI), c(memory=512 * MI), sidecar(memory=128 * MI)],
        overhead={MEMORY: 32 * MI},
    )
    assert got == {MEMORY: 608 * MI, PODS: 1}


def test_docs_example_cpu_and_memory_peak_at_different_steps() -> None:
    # Per resource, the peak may come from different phases:
    # initContainers: proxy cpu 100m / 128Mi (Always), migrate cpu 2 / 64Mi;
    # containers: web cpu 500m / 1Gi.
    #   cpu:    steps proxy 100m, migrate 100m + 2000m = 2100m; steady 100m + 500m = 600m
    #           -> 2100m
    #   memory: steps proxy 128Mi, migrate 128 + 64 = 192Mi; steady 128Mi + 1024Mi = 1152Mi
    #           -> 1152Mi
    got = pod_requests(
        [c(cpu=500, memory=GI)],
        [sidecar(cpu=100, memory=128 * MI), c(cpu=2000, memory=64 * MI)],
    )
    assert got == {CPU: 2100, MEMORY: 1152 * MI, PODS: 1}


def test_docs_example_fits_exactly_nine_cpus() -> None:
    # A pod sized to a node with 9 CPUs free: init 9 CPUs; sidecars 1 + 2 and main 6 also
    # total 9. Effective cpu = max(9, 1 + 2 + 6) = 9 -> 9000m; one more milli-CPU anywhere
    # raises it above 9 CPUs.
    got = pod_requests([c(cpu=6000)], [c(cpu=9000), sidecar(cpu=1000), sidecar(cpu=2000)])
    assert got[CPU] == 9000
    more = pod_requests([c(cpu=6001)], [c(cpu=9000), sidecar(cpu=1000), sidecar(cpu=2000)])
    assert more[CPU] == 9001


# ---- pod_requests: overhead and pod-level requests --------------------------------------


def test_overhead_is_added_after_the_maximum() -> None:
    # max(init 1000m, app 200m) = 1000m, + overhead 250m = 1250m; overhead memory alone: 120Mi.
    got = pod_requests([c(cpu=200)], [c(cpu=1000)], overhead={CPU: 250, MEMORY: 120 * MI})
    assert got == {CPU: 1250, MEMORY: 120 * MI, PODS: 1}


def test_pod_level_requests_replace_container_figures() -> None:
    # Pod-level cpu 4 replaces the containers' 1500m; memory is not set at pod level, so the
    # container figure (max(init 2Gi, app 1Gi) = 2Gi) stands.
    got = pod_requests(
        [c(cpu=500, memory=GI), c(cpu=1000)],
        [c(memory=2 * GI)],
        pod_level={CPU: 4000},
    )
    assert got == {CPU: 4000, MEMORY: 2 * GI, PODS: 1}


def test_pod_level_can_be_lower_than_container_sum() -> None:
    assert pod_requests([c(cpu=3000)], pod_level={CPU: 1000}) == {CPU: 1000, PODS: 1}


def test_overhead_is_added_to_pod_level_requests() -> None:
    got = pod_requests([c(cpu=100)], pod_level={CPU: 2000}, overhead={CPU: 100})
    assert got == {CPU: 2100, PODS: 1}


def test_pods_slot_is_always_one() -> None:
    got = pod_requests([c(cpu=1), c(cpu=1)], [c(cpu=1), sidecar(cpu=1)], overhead={CPU: 1})
    assert got[PODS] == 1


def test_huge_integer_is_a_quantity_error() -> None:
    # An int with more digits than Python will turn into a string: refusing it must not fail
    # while formatting the error message.
    with pytest.raises(QuantityError) as info:
        parse_amount(MEMORY, 10**5000, "spec.minResources.memory")
    assert info.value.field == "spec.minResources.memory"
