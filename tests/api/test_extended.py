"""A pod's extended resources laid out as the claim kube-scheduler v1.36 would make for them
(DRA extended resources, KEP-5004); the end-to-end differential test against kube-scheduler
itself is tests/e2e/test_dra.py. The reader gives the layout and the claim the pod's status
names; bad input is an error naming the field, never a crash."""

from __future__ import annotations

from typing import Any

from gangsched.api.dra import resource_claim_from
from gangsched.api.extended import extended_asks, is_dra_extended
from gangsched.api.pod import pod_from
from gangsched.core.model import ExtendedAsk

GPU = "nvidia.com/gpu"


def c(name: str, gpus: int | str = 0, sidecar: bool = False, **more: str) -> dict[str, Any]:
    req: dict[str, Any] = {"cpu": "1", **more}
    if gpus:
        req[GPU] = gpus
    body: dict[str, Any] = {"name": name, "resources": {"requests": req, "limits": {}}}
    if sidecar:
        body["restartPolicy"] = "Always"
    return body


def test_which_resources_a_device_class_may_serve() -> None:
    assert is_dra_extended(GPU)
    assert is_dra_extended("deviceclass.resource.kubernetes.io/gpu.example.com")
    assert not is_dra_extended("cpu")
    assert not is_dra_extended("hugepages-2Mi")
    assert not is_dra_extended("kubernetes.io/something")
    assert not is_dra_extended("requests.example.com/x")


def test_one_container_asks_one_request_named_by_its_place() -> None:
    [ask] = extended_asks({"containers": [c("main", 8)]})
    # (cpu, nvidia.com/gpu sorted: the GPU is the second name)
    assert ask == ExtendedAsk(
        GPU, (("container-0-request-1", 8),), (("main", "container-0-request-1"),)
    )


def test_an_init_container_reuses_what_the_containers_after_it_ask() -> None:
    [ask] = extended_asks({"initContainers": [c("prep", 3)], "containers": [c("a", 1), c("b", 1)]})
    assert ask.requests == (
        ("container-0-request-1", 1),
        ("container-1-request-1", 1),
        ("container-2-request-1", 1),
    )
    assert ask.mappings == (
        ("a", "container-1-request-1"),
        ("b", "container-2-request-1"),
        ("prep", "container-1-request-1"),
        ("prep", "container-2-request-1"),
        ("prep", "container-0-request-1"),
    )


def test_of_several_init_containers_only_the_largest_request_is_kept() -> None:
    [ask] = extended_asks({"initContainers": [c("a", 1), c("b", 2)], "containers": [c("main")]})
    assert ask.requests == (("container-1-request-1", 2),)
    assert ask.mappings == (("a", "container-1-request-1"), ("b", "container-1-request-1"))


def test_a_pod_without_extended_resources_asks_nothing() -> None:
    assert extended_asks({"containers": [c("main")]}) == ()
    assert extended_asks({"containers": [c("main", **{"example.com/x": "0"})]}) == ()


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u1"},
        "spec": {"schedulerName": "gangsched", **spec},
        "status": {},
    }


def test_the_reader_gives_the_layout_and_the_claim_the_status_names() -> None:
    obj = _pod(containers=[c("main", 2)])
    obj["status"]["extendedResourceClaimStatus"] = {
        "requestMappings": [],
        "resourceClaimName": "p-extended-resources-abcde",
    }
    pod, _ = pod_from(obj)
    assert not pod.invalid_reason
    assert [a.resource for a in pod.extended] == [GPU]
    assert pod.extended_claim == "p-extended-resources-abcde"


def test_an_unreadable_count_or_status_is_an_error_naming_the_field() -> None:
    pod, _ = pod_from(_pod(containers=[c("main", "lots")]))
    assert "nvidia.com/gpu" in pod.invalid_reason
    obj = _pod(containers=[c("main", 1)])
    obj["status"]["extendedResourceClaimStatus"] = {"resourceClaimName": 7}
    pod, _ = pod_from(obj)
    assert "status.extendedResourceClaimStatus.resourceClaimName" in pod.invalid_reason


def test_a_claim_made_for_a_pod_is_read_as_serving_it() -> None:
    obj = {
        "metadata": {
            "name": "p-extended-resources-abcde",
            "namespace": "ml",
            "uid": "cu",
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u1", "controller": True}
            ],
        },
        "spec": {"devices": {"requests": []}},
    }
    claim = resource_claim_from(obj)
    assert not isinstance(claim, Exception) and getattr(claim, "made_for", "") == "u1"
    obj["metadata"]["annotations"] = {}
    assert getattr(resource_claim_from(obj), "made_for", None) == ""
