"""PodReader: a pod's spec is read again only when what it depends on changed, and what it
returns is always what a full read would give."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gangsched.api.gpushare import DEVICE_ALLOCATED
from gangsched.api.pod import pod_from
from gangsched.kube.podreader import PodReader
from tests.api.test_pod import small_pod


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "w-0",
            "namespace": "ml",
            "uid": "u-1",
            "generation": 1,
            "resourceVersion": "10",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"scheduling.x-k8s.io/pod-group": "g"},
        },
        "spec": {
            "schedulerName": "gangsched",
            "containers": [
                {"name": "c", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "2"}}}
            ],
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def _same(a: object, b: object) -> bool:
    assert dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b)
    return dataclasses.asdict(a) == dataclasses.asdict(b)  # type: ignore[arg-type]


def test_a_status_only_change_reuses_the_read_spec_with_the_new_phase_and_version() -> None:
    reader = PodReader()
    obj = _pod(nodeName="n1")
    first, _ = reader.read(obj)
    running = copy.deepcopy(obj)
    running["status"] = {
        "phase": "Running",
        "podIP": "10.0.0.1",
        "containerStatuses": [{"name": "c", "ready": True, "state": {"running": {}}}],
    }
    running["metadata"]["resourceVersion"] = "11"
    pod, membership = reader.read(running)
    assert reader.full_reads == 1 and reader.reused == 1
    assert pod is not first
    assert pod.phase.value == "Running" and pod.resource_version == "11"
    assert _same(pod, pod_from(running)[0])
    assert membership == pod_from(running)[1]


def test_a_binding_is_taken_without_a_full_read() -> None:
    """A binding sets spec.nodeName (no new generation) and the PodScheduled condition: the
    pod read while pending, on its node."""
    reader = PodReader()
    obj = _pod()
    reader.read(obj)
    bound = copy.deepcopy(obj)
    bound["spec"]["nodeName"] = "n1"
    bound["metadata"]["resourceVersion"] = "11"
    bound["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-01-01T00:00:05Z"}
    ]
    pod, _ = reader.read(bound)
    assert (reader.full_reads, reader.rebound) == (1, 1)
    assert pod.node_name == "n1" and pod.bound_at > 0 and pod.resource_version == "11"
    assert _same(pod, pod_from(bound)[0])
    # and the next status change reuses the bound pod
    running = copy.deepcopy(bound)
    running["status"]["phase"] = "Running"
    pod, _ = reader.read(running)
    assert (reader.full_reads, reader.reused) == (1, 1)
    assert _same(pod, pod_from(running)[0])


def test_a_binding_with_an_unreadable_device_record_is_read_in_full() -> None:
    reader = PodReader()
    obj = _pod()
    obj["metadata"]["annotations"] = {DEVICE_ALLOCATED: "not json"}
    reader.read(obj)
    bound = copy.deepcopy(obj)
    bound["spec"]["nodeName"] = "n1"
    reader.read(bound)
    assert (reader.full_reads, reader.rebound) == (2, 0)


def test_what_scheduling_reads_changing_makes_a_full_read() -> None:
    reader = PodReader()
    obj = _pod()
    obj["spec"]["nodeName"] = "n1"
    reader.read(obj)
    changes = []
    bound = copy.deepcopy(obj)
    bound["spec"]["nodeName"] = "n2"  # not a binding (a node name never changes once set)
    changes.append(bound)
    relabelled = copy.deepcopy(bound)
    relabelled["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "other"}
    changes.append(relabelled)
    annotated = copy.deepcopy(relabelled)
    annotated["metadata"]["annotations"] = {"example.com/x": "y"}
    changes.append(annotated)
    respecced = copy.deepcopy(annotated)
    respecced["metadata"]["generation"] = 2
    respecced["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    changes.append(respecced)
    resized = copy.deepcopy(respecced)
    resized["status"]["containerStatuses"] = [
        {"name": "c", "allocatedResources": {"cpu": "5"}, "resources": {"requests": {"cpu": "5"}}}
    ]
    changes.append(resized)
    for n, changed in enumerate(changes, start=2):
        pod, _ = reader.read(changed)
        assert reader.full_reads == n
        assert _same(pod, pod_from(changed)[0])
    assert reader.read(resized)[0].requests["cpu"] == 5000


def test_a_pod_without_a_generation_is_read_in_full_every_time() -> None:
    reader = PodReader()
    obj = _pod()
    del obj["metadata"]["generation"]
    reader.read(obj)
    reader.read(obj)
    assert reader.full_reads == 2 and reader.reused == 0


def test_what_the_core_adds_to_a_pod_does_not_stick_to_the_next_event() -> None:
    reader = PodReader()
    obj = _pod()
    pod, _ = reader.read(obj)
    pod.unsupported = "set by whoever holds the object"
    again, _ = reader.read(obj)
    assert again.unsupported == pod_from(obj)[0].unsupported == ""


def test_forget_and_keep_only() -> None:
    reader = PodReader()
    obj = _pod()
    reader.read(obj)
    reader.forget("u-1")
    reader.read(obj)
    assert reader.full_reads == 2
    reader.keep_only(set())
    assert len(reader) == 0


_status = st.fixed_dictionaries(
    {},
    optional={
        "phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Weird"]),
        "podIP": st.just("10.0.0.2"),
        "conditions": st.lists(
            st.fixed_dictionaries(
                {
                    "type": st.sampled_from(
                        ["Ready", "PodScheduled", "PodResizePending", "DisruptionTarget"]
                    ),
                    "status": st.sampled_from(["True", "False"]),
                    "reason": st.sampled_from(
                        ["Infeasible", "Deferred", "PreemptionByScheduler", ""]
                    ),
                },
                optional={
                    "lastTransitionTime": st.sampled_from(
                        ["2026-01-01T00:00:05Z", "2026-01-01T00:07:00Z"]
                    ),
                    "message": st.just("gangsched: preempted"),
                },
            ),
            max_size=3,
        ),
        "containerStatuses": st.lists(
            st.fixed_dictionaries(
                {"name": st.just("c")},
                optional={
                    "ready": st.booleans(),
                    "allocatedResources": st.fixed_dictionaries(
                        {"cpu": st.sampled_from(["1", "2", "500m"])}
                    ),
                    "resources": st.fixed_dictionaries(
                        {"requests": st.fixed_dictionaries({"cpu": st.sampled_from(["1", "4"])})}
                    ),
                },
            ),
            max_size=1,
        ),
    },
)


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(
        st.tuples(_status, st.booleans(), st.sampled_from(["", "n1", "n2"])),
        min_size=1,
        max_size=6,
    ),
    record=st.sampled_from([None, '{"gpu":[{"minor":1,"resources":{}}]}', "unreadable"]),
)
def test_every_read_equals_a_full_read(
    events: list[tuple[dict[str, Any], bool, str]], record: str | None
) -> None:
    """Whatever happens to a pod's status, deletion and node (its spec unchanged, so its
    generation unchanged; a GPU device record or none), what the reader returns is what a
    full read of the event gives."""
    reader = PodReader()
    for version, (status, deleting, node) in enumerate(events):
        obj = _pod(**({"nodeName": node} if node else {}))
        if record is not None:
            obj["metadata"]["annotations"] = {DEVICE_ALLOCATED: record}
        obj["status"] = status
        obj["metadata"]["resourceVersion"] = str(version)
        if deleting:
            obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
        pod, membership = reader.read(obj)
        want_pod, want_membership = pod_from(obj)
        assert _same(pod, want_pod)
        assert membership == want_membership


# ---- preemption ----------------------------------------------------------------------------
def test_a_pods_nominated_node_is_read_and_kept_current_without_a_full_read() -> None:
    reader = PodReader()
    pod, _ = reader.read(small_pod())
    assert pod.nominated_node == ""
    nominated = small_pod(status={"phase": "Pending", "nominatedNodeName": "n3"})
    pod, _ = reader.read(nominated)
    assert pod.nominated_node == "n3"
    assert (reader.full_reads, reader.reused) == (1, 1), "a status change is no new spec"
    pod, _ = reader.read(small_pod(status={"phase": "Pending"}))
    assert pod.nominated_node == ""
