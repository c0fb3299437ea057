"""The webhook configurations a controller's manager is registered with beside the dev control
plane (gangsched_dev/devcluster/gomanager.py), from a build directory laid out as
controllers.sh leaves it: the module's patches applied, only the webhooks kept that the
manager serves, every service reference turned into a loopback URL with the CA bundle."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from gangsched_dev.devcluster.gomanager import ManagerError, find_build, webhook_configurations
from gangsched_dev.devcluster.kueue import Kueue

MANIFESTS = """\
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata: {name: mutating-webhook-configuration}
webhooks:
- name: mjob.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-batch-v1-job}}
  rules: [{apiGroups: [batch], apiVersions: [v1], operations: [CREATE], resources: [jobs]}]
- name: mpod.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
  rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
- name: mdeployment.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate-deploy}}
  rules: [{apiGroups: [apps], apiVersions: [v1], operations: [CREATE], resources: [deployments]}]
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {name: validating-webhook-configuration}
webhooks:
- name: vclusterqueue.kb.io
  clientConfig: {service: {name: webhook-service, namespace: system, path: /validate-cq}}
  rules:
  - {apiGroups: [kueue.x-k8s.io], apiVersions: [v1beta2], operations: [CREATE],
     resources: [clusterqueues]}
"""

PATCH = """\
- op: replace
  path: /webhooks/1
  value:
    name: mpod.kb.io
    clientConfig: {service: {name: webhook-service, namespace: system, path: /mutate--v1-pod}}
    objectSelector: {matchExpressions: [{key: example.com/app, operator: Exists}]}
    rules: [{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [pods]}]
"""


def build_dir(tmp: Path, name: str, patch: str | None = None) -> Path:
    (tmp / "crds").mkdir(parents=True)
    (tmp / "crds" / "a.yaml").write_text("kind: CustomResourceDefinition\n")
    (tmp / "webhook" / "patches").mkdir(parents=True)
    (tmp / "webhook" / "manifests.yaml").write_text(MANIFESTS)
    if patch:
        (tmp / "webhook" / "patches" / "mutating-patch.yaml").write_text(patch)
    binary = tmp / f"{name}-manager"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    return tmp


def test_patches_apply_and_every_webhook_points_at_loopback(tmp_path: Path) -> None:
    bin_dir = build_dir(tmp_path, "x", PATCH)
    docs = webhook_configurations(bin_dir, name="dev-x", port=9443, ca_bundle=b"CA")
    assert [d["metadata"] for d in docs] == [{"name": "dev-x"}, {"name": "dev-x"}]
    mutating = {h["name"]: h for h in docs[0]["webhooks"]}
    assert mutating["mpod.kb.io"]["objectSelector"]["matchExpressions"][0]["key"] == (
        "example.com/app"
    ), "the module's patch"
    for doc in docs:
        for hook in doc["webhooks"]:
            url = hook["clientConfig"]["url"]
            assert url.startswith("https://127.0.0.1:9443/"), url
            assert hook["clientConfig"]["caBundle"] == base64.b64encode(b"CA").decode()
            assert hook["timeoutSeconds"] == 10


def test_only_the_webhooks_a_manager_serves_are_registered(tmp_path: Path) -> None:
    """Kueue with its Job and pod integrations: their webhooks and those of Kueue's objects,
    not the Deployment integration's (Kueue would not serve it, and the API server would then
    refuse every Deployment)."""
    bin_dir = build_dir(tmp_path, "kueue")
    keep = Kueue.__new__(Kueue)
    keep.frameworks = ("batch/job", "pod")
    docs = webhook_configurations(
        bin_dir, name="dev-kueue", port=1, ca_bundle=b"", keep=keep.keep_webhook
    )
    names = [h["name"] for d in docs for h in d["webhooks"]]
    assert names == ["mjob.kb.io", "mpod.kb.io", "vclusterqueue.kb.io"]


def test_an_unsupported_patch_is_refused(tmp_path: Path) -> None:
    bad = yaml.safe_dump([{"op": "add", "path": "/webhooks/0/x", "value": 1}])
    bin_dir = build_dir(tmp_path, "x", bad)
    with pytest.raises(ManagerError, match="unsupported webhook patch"):
        webhook_configurations(bin_dir, name="dev-x", port=1, ca_bundle=b"")


def test_a_build_directory_is_checked(tmp_path: Path) -> None:
    assert find_build("x", build_dir(tmp_path / "ok", "x")) == (tmp_path / "ok").resolve()
    (tmp_path / "empty").mkdir()
    with pytest.raises(ManagerError, match="lacks: x-manager, crds/"):
        find_build("x", tmp_path / "empty")
