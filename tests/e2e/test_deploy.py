"""The deployment manifests (manifests/) against the real API server.

- the whole kustomization passes a server-side dry run (schemas, admission, Pod Security);
- the RBAC is enough: the daemon runs as the ServiceAccount with a minted token, exactly as the
  Deployment runs it (shipped config file, leader election), takes the Lease, binds a real
  gang, times one out, reports an unschedulable one, writes PodGroup status (both field
  managers), events and pod conditions, and the API server's audit log shows that not one of
  its requests was refused;
- the RBAC is no more than that: ``kubectl auth can-i`` says no to everything else, ``patch``
  on pods included (gangsched writes only ``pods/status`` and events about a pod).

The control plane here is one of its own (it keeps an audit log of the ServiceAccount's
requests), started for this module.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import yaml

from gangsched_dev.devcluster import ControlPlane

from .conftest import REPO, SchedulerProcess
from .kube import (
    bound,
    condition,
    create,
    event_reasons,
    get_pg,
    http_status,
    pod,
    podgroup,
    pods,
    wait_for,
)

Nodes = Callable[..., dict[str, str]]

MANIFESTS = REPO / "manifests"
NAMESPACE = "gangsched-system"
SA = "gangsched"
SA_USER = f"system:serviceaccount:{NAMESPACE}:{SA}"
LEASE = "gangsched"  # config.yaml leaseName, and role.yaml's resourceNames
IDENTITY = "deploy-e2e"
# A scheduler name of its own: if another scheduler of the session (with admin credentials)
# runs too, it must not be the one that binds these pods.
SCHEDULER = "gangsched-deploy-e2e"
FORBIDDEN = re.compile(r"\b403\b|forbidden|not enough permissions", re.IGNORECASE)
# Every request of the ServiceAccount, at Metadata level (verb, URI, response code), and no
# other: what the RBAC let through and what it refused, from the API server itself.
AUDIT_POLICY: dict[str, Any] = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [{"level": "Metadata", "users": [SA_USER]}, {"level": "None"}],
}
RBAC_FILES = (
    "namespace.yaml",
    "serviceaccount.yaml",
    "clusterrole.yaml",
    "clusterrolebinding.yaml",
    "role.yaml",
    "rolebinding.yaml",
)


@pytest.fixture(scope="module")
def control_plane() -> Iterator[ControlPlane]:
    """This module's control plane (it replaces the session's): the same CRDs and fake nodes,
    and an audit log of the ServiceAccount's requests."""
    cp = ControlPlane(audit_policy=AUDIT_POLICY, kill_with_parent=False)
    cp.start()
    try:
        cp.apply(REPO / "crds")
        cp.apply(REPO / "tests" / "e2e" / "fixtures" / "foreign-podgroup-crds.yaml")
        wait_for(
            "the PodGroup CRDs to be served",
            lambda: all(
                cp.kubectl("get", f"podgroups.{g}", "-A", check=False).returncode == 0
                for g in ("gangsched.io", "scheduling.x-k8s.io", "scheduling.volcano.sh")
            ),
            timeout=30,
        )
        cp.start_kwok()
        yield cp
    finally:
        cp.stop()


def _apply_for_real(cp: ControlPlane, *files: str) -> None:
    for name in files:
        cp.apply(MANIFESTS / name)


def _rendered(cp: ControlPlane) -> dict[tuple[str, str], dict[str, Any]]:
    out = cp.kubectl("kustomize", str(MANIFESTS)).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


# ---- static checks ------------------------------------------------------------------------


def test_manifest_crd_is_a_copy_of_the_crd() -> None:
    """kustomize cannot load ../crds/ from manifests/, so manifests/ carries a copy."""
    original = (REPO / "crds" / "podgroups.gangsched.io.yaml").read_bytes()
    copy = (MANIFESTS / "podgroups.gangsched.io.yaml").read_bytes()
    assert copy == original, (
        "manifests/podgroups.gangsched.io.yaml drifted from crds/: "
        "cp crds/podgroups.gangsched.io.yaml manifests/"
    )


def test_rendered_kustomization(control_plane: ControlPlane) -> None:
    objs = _rendered(control_plane)
    assert sorted(kind for kind, _ in objs) == sorted(
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "CustomResourceDefinition",
            "Deployment",
            "Namespace",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "ServiceAccount",
        ]
    )
    spec = objs[("Deployment", "gangsched")]["spec"]
    pod_spec = spec["template"]["spec"]
    (container,) = pod_spec["containers"]
    # More than one replica only with leader election.
    assert spec["replicas"] == 2
    assert container["args"] == [
        "run",
        "--config",
        "/etc/gangsched/config.yaml",
        "--log-format",
        "json",
        "--leader-elect",
    ]
    assert pod_spec["serviceAccountName"] == SA
    assert container["image"] == "ghcr.io/gangsched/gangsched:0.1.0"
    sc = container["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65532
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert container["resources"]["requests"] and container["resources"]["limits"]

    (configmap,) = [name for kind, name in objs if kind == "ConfigMap"]
    assert configmap.startswith("gangsched-config-")  # hash suffix: a change rolls the pods
    volume = next(v for v in pod_spec["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == configmap
    config = yaml.safe_load(objs[("ConfigMap", configmap)]["data"]["config.yaml"])
    assert config == yaml.safe_load((MANIFESTS / "config.yaml").read_text())

    # The probes hit the port the configuration file serves them on.
    port = int(config["httpBindAddress"].rpartition(":")[2])
    assert container["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}

    # The Role is for the Lease the configuration names.
    role = objs[("Role", "gangsched-leader-election")]
    assert role["metadata"]["namespace"] == config["leaseNamespace"] == NAMESPACE
    assert [config["leaseName"]] == role["rules"][0]["resourceNames"] == [LEASE]

    pdb = objs[("PodDisruptionBudget", "gangsched")]["spec"]
    assert pdb["maxUnavailable"] == 1
    assert pdb["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()


# ---- (a) server-side dry run --------------------------------------------------------------


def test_kustomization_passes_a_server_side_dry_run(control_plane: ControlPlane) -> None:
    cp = control_plane
    # A server-side dry run does not create the namespace, and objects of a namespace that
    # does not exist are refused (NamespaceLifecycle): create it for real first.
    _apply_for_real(cp, "namespace.yaml")
    # The CRD is usually installed already (session fixture): the dry run must pass anyway.
    # --warnings-as-errors: Pod Security "restricted" violations of a Deployment are warnings.
    out = cp.kubectl(
        "apply", "-k", str(MANIFESTS), "--dry-run=server", "--warnings-as-errors", check=False
    )
    assert out.returncode == 0, out.stderr
    for what in (
        "customresourcedefinition.apiextensions.k8s.io/podgroups.gangsched.io",
        "namespace/gangsched-system",
        "serviceaccount/gangsched",
        "clusterrole.rbac.authorization.k8s.io/gangsched",
        "clusterrolebinding.rbac.authorization.k8s.io/gangsched",
        "role.rbac.authorization.k8s.io/gangsched-leader-election",
        "rolebinding.rbac.authorization.k8s.io/gangsched-leader-election",
        "configmap/gangsched-config-",
        "deployment.apps/gangsched",
        "poddisruptionbudget.policy/gangsched",
    ):
        assert what in out.stdout, out.stdout


# ---- (b) the RBAC is enough ---------------------------------------------------------------


@pytest.fixture(scope="module")
def rbac(control_plane: ControlPlane) -> ControlPlane:
    """Namespace, ServiceAccount and RBAC applied for real (not the Deployment: there is no
    kubelet to run it)."""
    _apply_for_real(control_plane, *RBAC_FILES)
    return control_plane


@pytest.fixture(scope="module")
def sa_kubeconfig(rbac: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A kubeconfig holding a token of the ServiceAccount (TokenRequest: works without a
    controller-manager, the API server signs it with --service-account-signing-key-file)."""
    cp = rbac
    token = cp.kubectl("create", "token", SA, "-n", NAMESPACE, "--duration=1h").stdout.strip()
    assert token
    ca = base64.b64encode(cp.ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "e2e", "cluster": {"server": cp.server, "certificate-authority-data": ca}}
        ],
        "users": [{"name": SA, "user": {"token": token}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": SA}}],
        "current-context": "e2e",
    }
    path = tmp_path_factory.mktemp("sa") / "kubeconfig"
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    who = subprocess.run(
        [str(cp.bin_dir / "kubectl"), "--kubeconfig", str(path), "auth", "whoami", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert json.loads(who.stdout)["status"]["userInfo"]["username"] == SA_USER
    return path


def _log(proc: SchedulerProcess) -> str:
    try:
        return proc.log.read_text(errors="replace")
    except OSError:
        return ""


def _lease_holder(cp: ControlPlane) -> str:
    out = cp.kubectl("get", "lease", LEASE, "-n", NAMESPACE, "-o", "json", check=False)
    if out.returncode != 0:
        return ""
    holder: str = (json.loads(out.stdout).get("spec") or {}).get("holderIdentity") or ""
    return holder


@pytest.fixture(scope="module")
def sa_daemon(
    control_plane: ControlPlane, sa_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerProcess]:
    """``gangsched run`` as the ServiceAccount, with the shipped configuration file and leader
    election, as the Deployment runs it."""
    cp = control_plane
    log = tmp_path_factory.mktemp("sa-daemon") / "gangsched.log"
    proc = SchedulerProcess(cp, log)
    proc.args = [
        sys.executable,
        "-m",
        "gangsched.cli",
        "run",
        "--kubeconfig",
        str(sa_kubeconfig),
        "--config",
        str(MANIFESTS / "config.yaml"),
        "--log-format",
        "console",
        # debug: failed fire-and-forget writes (events, conditions, annotations) are logged at
        # debug only, and a 403 there must show
        "--log-level",
        "debug",
        "--leader-elect",
        "--identity",
        IDENTITY,
        "--scheduler-name",
        SCHEDULER,
        "--backoff-initial",
        "0.5",
        "--backoff-max",
        "2",
        # a port of its own: tests may run several daemons at once
        "--http-bind-address",
        f"127.0.0.1:{proc.port}",
    ]
    proc.start()
    try:
        try:
            wait_for(
                "the daemon to take the Lease and sync its caches as the ServiceAccount",
                lambda: not proc.alive() or "caches synced" in _log(proc),
                timeout=60,
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\ngangsched log (tail):\n{proc.tail()}") from None
        assert proc.alive(), f"the daemon exited:\n{proc.tail()}"
        yield proc
    finally:
        proc.stop()


def _sa_requests(cp: ControlPlane) -> list[dict[str, Any]]:
    """The ServiceAccount's requests in the audit log, each once (a watch's ResponseStarted
    and ResponseComplete are one request)."""
    seen: dict[str, dict[str, Any]] = {}
    for e in cp.audit_events():
        if (e.get("user") or {}).get("username") == SA_USER:
            seen[e.get("auditID", "")] = e
    return list(seen.values())


def _refused(cp: ControlPlane) -> list[str]:
    """``<code> <verb> <URI>`` of every request of the ServiceAccount that was refused."""
    return [
        f"{e['responseStatus']['code']} {e['verb']} {e['requestURI']}"
        for e in _sa_requests(cp)
        if (e.get("responseStatus") or {}).get("code") in (401, 403)
    ]


def _assert_never_forbidden(proc: SchedulerProcess) -> None:
    bad = [line for line in _log(proc).splitlines() if FORBIDDEN.search(line)]
    assert not bad, "the daemon was refused something:\n" + "\n".join(bad[:20])
    refused = _refused(proc.cp)
    assert not refused, "the API server refused the ServiceAccount:\n" + "\n".join(refused)
    assert proc.alive(), f"the daemon exited:\n{proc.tail()}"


def test_service_account_leads_and_is_healthy(
    control_plane: ControlPlane, sa_daemon: SchedulerProcess
) -> None:
    """leases create/get/update in gangsched-system; the probes' endpoints answer."""
    assert _lease_holder(control_plane) == IDENTITY
    assert "leading" in _log(sa_daemon)
    wait_for("/readyz 200", lambda: http_status(sa_daemon.port, "/readyz") == 200)
    assert http_status(sa_daemon.port, "/healthz") == 200
    # renewals (update) go on: the lease's renewTime moves
    first = control_plane.kubectl_json("get", "lease", LEASE, "-n", NAMESPACE)["spec"]
    wait_for(
        "a lease renewal",
        lambda: (
            control_plane.kubectl_json("get", "lease", LEASE, "-n", NAMESPACE)["spec"]["renewTime"]
            != first["renewTime"]
        ),
        timeout=15,
    )
    _assert_never_forbidden(sa_daemon)


def test_service_account_can_schedule_a_gang(
    control_plane: ControlPlane, sa_daemon: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = control_plane
    sel = nodes(1, gpus=2)
    create(cp, podgroup("ddp", ns, 2))
    for i in range(2):
        create(cp, pod(f"ddp-{i}", ns, group="ddp", selector=sel, scheduler=SCHEDULER))
    try:
        # pods/binding create
        placed = wait_for(
            "both pods bound", lambda: len(bound(cp, ns)) == 2 and bound(cp, ns), timeout=60
        )
        assert set(placed.values()) == {f"{ns}-n0"}
        # podgroups/status patch (server-side apply) by the scheduler's reporter. Only that
        # it was written, not its final value: that is the scheduler's business, not the RBAC's.
        wait_for(
            "PodGroup phase Running or Scheduled",
            lambda: (
                (get_pg(cp, ns, "ddp").get("status") or {}).get("phase") in ("Running", "Scheduled")
            ),
            timeout=60,
        )
        wait_for(
            "the PodGroup's Scheduled condition",
            lambda: condition(get_pg(cp, ns, "ddp"), "Scheduled") is not None,
        )
        # podgroups/status patch (server-side apply) by the PodGroup controller (kopf, in the
        # daemon)
        wait_for(
            "the PodGroup's Accepted condition",
            lambda: (condition(get_pg(cp, ns, "ddp"), "Accepted") or {}).get("status") == "True",
        )
        # events.k8s.io events create
        wait_for("Scheduled events", lambda: "Scheduled" in event_reasons(cp, ns, "ddp-0"))
        _assert_never_forbidden(sa_daemon)
    except AssertionError:
        print(f"gangsched log (tail):\n{sa_daemon.tail(80)}")
        raise


def test_service_account_can_report_failures_and_timeouts(
    control_plane: ControlPlane, sa_daemon: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """The other writes: PodScheduled=False (pods/status patch) on the unschedulable gang and,
    saying it timed out, on the gang that did; FailedScheduling and GangTimeout events. No
    write to the pods themselves (no annotations: the ServiceAccount may not patch pods)."""
    cp = control_plane
    sel = nodes(4, gpus=2)  # 8 GPUs: the group's 2 + 6 fit the totals, not the nodes
    group = ["left", "right"]
    create(cp, podgroup("left", ns, 2, timeout=3, gangGroup=group))
    create(cp, podgroup("right", ns, 2, timeout=3, gangGroup=group))
    for i in range(2):
        create(cp, pod(f"left-{i}", ns, group="left", selector=sel, scheduler=SCHEDULER))
    for i in range(2):  # never fits: more GPUs than the node has
        create(cp, pod(f"right-{i}", ns, group="right", selector=sel, gpus=3, scheduler=SCHEDULER))
    try:

        def right_unschedulable() -> bool:
            ps = pods(cp, ns)
            return all(
                (c := condition(ps[n], "PodScheduled")) is not None and c["status"] == "False"
                for n in ("right-0", "right-1")
            )

        wait_for("PodScheduled=False on the unschedulable gang", right_unschedulable, timeout=30)
        wait_for(
            "FailedScheduling events",
            lambda: "FailedScheduling" in event_reasons(cp, ns, "right-0"),
        )

        def timed_out() -> bool:
            ps = pods(cp, ns)
            return all(
                (c := condition(ps[n], "PodScheduled")) is not None
                and c["status"] == "False"
                and c["message"].startswith("Timeout: timed out after 3s")
                for n in ("left-0", "left-1")
            )

        wait_for("PodScheduled=False saying the left gang timed out", timed_out, timeout=40)
        wait_for("GangTimeout events", lambda: "GangTimeout" in event_reasons(cp, ns, "left-0"))
        assert bound(cp, ns) == {}
        for p in pods(cp, ns).values():
            written = [
                k
                for k in p["metadata"].get("annotations") or {}
                if k.startswith(("gangsched.io/", "gang.scheduling.koordinator.sh/"))
            ]
            assert not written, (p["metadata"]["name"], written)
        _assert_never_forbidden(sa_daemon)
    except AssertionError:
        print(f"gangsched log (tail):\n{sa_daemon.tail(80)}")
        raise


def _query(e: dict[str, Any]) -> dict[str, list[str]]:
    return parse_qs(urlsplit(e["requestURI"]).query)


def _path(e: dict[str, Any]) -> str:
    return urlsplit(e["requestURI"]).path


def test_every_request_of_the_service_account_is_allowed(
    control_plane: ControlPlane, sa_daemon: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    """The audit log, not the daemon's log, is the judge: across a run that binds a gang, times
    one out and reports an unschedulable one, writing PodGroup status all along, every request
    the ServiceAccount made got an answer other than 401/403. And the writes are the ones
    expected: bindings, pods/status, events, PodGroup status by server-side apply from both
    field managers, never a pod itself, never a read before a status write."""
    cp = control_plane
    # 12 GPUs: ddp's 2, and the group's 2 + 6 fit the totals (the 3-GPU pods no node)
    sel = nodes(6, gpus=2)
    group = ["left", "right"]
    create(cp, podgroup("ddp", ns, 2))
    create(cp, podgroup("left", ns, 2, timeout=3, gangGroup=group))
    create(cp, podgroup("right", ns, 2, timeout=3, gangGroup=group))
    for i in range(2):
        create(cp, pod(f"ddp-{i}", ns, group="ddp", selector=sel, scheduler=SCHEDULER))
        create(cp, pod(f"left-{i}", ns, group="left", selector=sel, scheduler=SCHEDULER))
        create(cp, pod(f"right-{i}", ns, group="right", selector=sel, gpus=3, scheduler=SCHEDULER))
    try:
        wait_for("the ddp gang bound", lambda: {"ddp-0", "ddp-1"} <= set(bound(cp, ns)))
        wait_for("GangTimeout events", lambda: "GangTimeout" in event_reasons(cp, ns, "left-0"))
        wait_for(
            "FailedScheduling events",
            lambda: "FailedScheduling" in event_reasons(cp, ns, "right-0"),
        )

        def applied_by_both() -> bool:
            pg = cp.kubectl_json(
                "get", "podgroups.gangsched.io", "right", "-n", ns, "--show-managed-fields"
            )
            managers = {
                m.get("manager")
                for m in pg["metadata"].get("managedFields") or []
                if m.get("operation") == "Apply" and m.get("subresource") == "status"
            }
            return {"gangsched-scheduler", "gangsched-controller"} <= managers

        wait_for("the status of right applied by both field managers", applied_by_both)

        def requests_seen() -> list[dict[str, Any]] | None:
            mine = [e for e in _sa_requests(cp) if f"/namespaces/{ns}/" in e["requestURI"]]
            kinds = {(e["verb"], _path(e).rsplit("/", 1)[-1]) for e in mine}
            want = {("create", "binding"), ("patch", "status"), ("create", "events")}
            return mine if want <= kinds else None

        mine = wait_for("the audit log to show the run's writes", requests_seen)
        refused = _refused(cp)
        assert not refused, "the API server refused the ServiceAccount:\n" + "\n".join(refused)

        pod_path = re.compile(rf"^/api/v1/namespaces/{ns}/pods/[^/]+$")
        podgroup_path = re.compile(rf"^/apis/gangsched\.io/v1alpha1/namespaces/{ns}/podgroups/")
        for e in mine:
            where = f"{e['verb']} {e['requestURI']}"
            assert not (pod_path.match(_path(e)) and e["verb"] != "get"), f"wrote a pod: {where}"
            if podgroup_path.match(_path(e)):
                assert e["verb"] == "patch" and _path(e).endswith("/status"), where
                assert _query(e).get("force") == ["true"], f"not a forced apply: {where}"
        managers = {
            _query(e).get("fieldManager", [""])[0] for e in mine if podgroup_path.match(_path(e))
        }
        assert managers == {"gangsched-scheduler", "gangsched-controller"}, managers
        _assert_never_forbidden(sa_daemon)
    except AssertionError:
        print(f"gangsched log (tail):\n{sa_daemon.tail(80)}")
        raise


# ---- (c) and no more than that ------------------------------------------------------------

IN_NS = ("-n", NAMESPACE)

ALLOWED: list[tuple[str, ...]] = [
    ("list", "deviceclasses.resource.k8s.io"),
    ("watch", "devicetaintrules.resource.k8s.io"),
    ("watch", "resourceslices.resource.k8s.io"),
    ("watch", "resourceclaims.resource.k8s.io"),
    ("get", "resourceclaims.resource.k8s.io"),
    ("update", "resourceclaims.resource.k8s.io"),
    ("update", "resourceclaims.resource.k8s.io", "--subresource=status"),
    # DRA extended resources: the claim made for a pod, and deleted if the pod does not bind
    ("create", "resourceclaims.resource.k8s.io"),
    ("delete", "resourceclaims.resource.k8s.io"),
    ("list", "nodes"),
    ("watch", "nodes"),
    ("list", "namespaces"),
    ("watch", "namespaces"),
    ("get", "pods"),
    ("list", "pods"),
    ("watch", "pods"),
    ("delete", "pods"),  # preemption's victims
    ("create", "pods", "--subresource=binding"),
    ("patch", "pods", "--subresource=status"),
    ("create", "events.events.k8s.io"),
    ("list", "podgroups.gangsched.io"),
    ("watch", "podgroups.gangsched.io"),
    ("patch", "podgroups.gangsched.io", "--subresource=status"),
    ("list", "podgroups.scheduling.x-k8s.io"),
    ("watch", "podgroups.scheduling.x-k8s.io"),
    ("list", "podgroups.scheduling.volcano.sh"),
    ("watch", "podgroups.scheduling.volcano.sh"),
    ("list", "podgroups.scheduling.k8s.io"),
    ("watch", "podgroups.scheduling.k8s.io"),
    ("patch", "podgroups.scheduling.k8s.io", "--subresource=status"),
    ("list", "customresourcedefinitions.apiextensions.k8s.io"),
    ("watch", "customresourcedefinitions.apiextensions.k8s.io"),
    ("list", "persistentvolumeclaims"),
    ("watch", "persistentvolumeclaims"),
    ("patch", "persistentvolumeclaims"),
    ("get", "persistentvolumes"),
    ("list", "persistentvolumes"),
    ("watch", "persistentvolumes"),
    ("patch", "persistentvolumes"),
    ("list", "storageclasses.storage.k8s.io"),
    ("watch", "storageclasses.storage.k8s.io"),
    ("list", "csinodes.storage.k8s.io"),
    ("watch", "csinodes.storage.k8s.io"),
    ("list", "poddisruptionbudgets.policy"),
    ("watch", "poddisruptionbudgets.policy"),
    ("get", f"leases.coordination.k8s.io/{LEASE}", *IN_NS),
    ("update", f"leases.coordination.k8s.io/{LEASE}", *IN_NS),
    ("create", "leases.coordination.k8s.io", *IN_NS),
]

DENIED: list[tuple[str, ...]] = [
    ("patch", "resourceclaims.resource.k8s.io"),
    ("deletecollection", "resourceclaims.resource.k8s.io"),
    ("update", "resourceslices.resource.k8s.io"),
    ("create", "deviceclasses.resource.k8s.io"),
    ("create", "resourceclaimtemplates.resource.k8s.io"),
    ("create", "pods"),
    ("update", "pods"),
    ("patch", "pods"),
    ("patch", "pods", "-n", "default"),
    ("patch", "pods", "-n", NAMESPACE),
    ("deletecollection", "pods"),
    ("create", "pods", "--subresource=eviction"),
    ("create", "pods", "--subresource=exec"),
    ("update", "pods", "--subresource=status"),
    ("get", "nodes"),
    ("update", "nodes"),
    ("patch", "nodes"),
    ("delete", "nodes"),
    ("patch", "nodes", "--subresource=status"),
    ("get", "podgroups.gangsched.io"),
    ("create", "podgroups.gangsched.io"),
    ("patch", "podgroups.gangsched.io"),
    ("update", "podgroups.gangsched.io"),
    ("delete", "podgroups.gangsched.io"),
    ("update", "podgroups.gangsched.io", "--subresource=status"),
    ("get", "podgroups.scheduling.x-k8s.io"),
    ("patch", "podgroups.scheduling.x-k8s.io"),
    ("patch", "podgroups.scheduling.volcano.sh"),
    ("get", "podgroups.scheduling.k8s.io"),
    ("patch", "podgroups.scheduling.k8s.io"),
    ("update", "podgroups.scheduling.k8s.io", "--subresource=status"),
    ("list", "workloads.scheduling.k8s.io"),
    ("patch", "events.events.k8s.io"),
    ("delete", "events.events.k8s.io"),
    ("create", "events"),  # core/v1 events: kopf's event posting is disabled
    ("create", "persistentvolumeclaims"),
    ("update", "persistentvolumeclaims"),
    ("delete", "persistentvolumeclaims"),
    ("patch", "persistentvolumeclaims", "--subresource=status"),
    ("create", "persistentvolumes"),
    ("update", "persistentvolumes"),
    ("delete", "persistentvolumes"),
    ("patch", "storageclasses.storage.k8s.io"),
    ("get", "csinodes.storage.k8s.io"),
    ("patch", "csinodes.storage.k8s.io"),
    ("list", "volumeattachments.storage.k8s.io"),
    ("get", "poddisruptionbudgets.policy"),
    ("patch", "poddisruptionbudgets.policy"),
    ("update", "poddisruptionbudgets.policy", "--subresource=status"),
    ("get", "secrets"),
    ("list", "secrets"),
    ("list", "configmaps"),
    ("get", "namespaces"),
    ("patch", "namespaces"),
    ("delete", "namespaces"),
    ("get", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "customresourcedefinitions.apiextensions.k8s.io"),
    ("update", "customresourcedefinitions.apiextensions.k8s.io"),
    ("create", "clusterroles.rbac.authorization.k8s.io"),
    ("create", "serviceaccounts", "--subresource=token"),
    ("impersonate", "users"),
    # leases: only gangsched-system/gangsched
    ("list", "leases.coordination.k8s.io", *IN_NS),
    ("delete", f"leases.coordination.k8s.io/{LEASE}", *IN_NS),
    ("update", "leases.coordination.k8s.io/other", *IN_NS),
    ("get", "leases.coordination.k8s.io/other", *IN_NS),
    ("create", "leases.coordination.k8s.io", "-n", "kube-system"),
    ("update", "leases.coordination.k8s.io/kube-scheduler", "-n", "kube-system"),
    ("update", f"leases.coordination.k8s.io/{LEASE}", "-n", "default"),
]


def _can_i(cp: ControlPlane, verb: str, resource: str, *extra: str) -> bool:
    scope = () if "-n" in extra else ("-A",)
    out = cp.kubectl("auth", "can-i", verb, resource, *extra, *scope, "--as", SA_USER, check=False)
    answer = out.stdout.strip()
    assert answer in ("yes", "no"), (verb, resource, extra, out.stdout, out.stderr)
    return answer == "yes"


def test_service_account_has_what_it_needs(rbac: ControlPlane) -> None:
    missing = [c for c in ALLOWED if not _can_i(rbac, *c)]
    assert not missing, f"not allowed: {missing}"


def test_service_account_has_no_more(rbac: ControlPlane) -> None:
    excess = [c for c in DENIED if _can_i(rbac, *c)]
    assert not excess, f"allowed but not needed: {excess}"


def test_service_account_cannot_patch_pods(rbac: ControlPlane) -> None:
    """Patching a pod would let a compromised scheduler change any pod's image: gangsched
    writes a pod's PodScheduled condition (pods/status) and events, never the pod."""
    assert not _can_i(rbac, "patch", "pods")
    assert not _can_i(rbac, "update", "pods")
    assert not _can_i(rbac, "patch", "pods", "-n", "default")
    assert _can_i(rbac, "patch", "pods", "--subresource=status")
    # and the question is really asked as the ServiceAccount: the admin may
    assert rbac.kubectl("auth", "can-i", "patch", "pods", "-A").stdout.strip() == "yes"


def test_service_account_cannot_update_nodes(rbac: ControlPlane) -> None:
    """It deletes pods (preemption's victims) but never a pod's collection, and never
    changes a node."""
    assert _can_i(rbac, "delete", "pods")
    assert not _can_i(rbac, "deletecollection", "pods")
    assert not _can_i(rbac, "update", "nodes")
    assert not _can_i(rbac, "patch", "nodes")
    # and the question is really asked as the ServiceAccount: the admin may
    assert rbac.kubectl("auth", "can-i", "patch", "nodes", "-A").stdout.strip() == "yes"
