"""The Helm chart (charts/gangsched) against the real API server.

- with default values it renders the objects of manifests/, modulo Helm's own labels and the
  ConfigMap's name (manifests/ is what `kubectl apply -k` installs; the chart must not drift
  from it: same RBAC, same Deployment, same configuration);
- `helm install` on the dev control plane: the API server accepts every object (CRD skipped as
  already there, RBAC, Deployment under Pod Security "restricted", PDB);
- the daemon, run as the chart's ServiceAccount with the configuration file and the arguments
  of the installed Deployment, takes the Lease, binds a gang and is never refused anything;
- `helm uninstall` removes the release and keeps the CRD.

helm comes from $GANGSCHED_HELM (hack/test.sh sets it) or hack/helm.sh (cached Go build).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched.settings import load_settings
from gangsched_dev.devcluster import ControlPlane

from .conftest import REPO, SchedulerProcess
from .kube import bound, create, http_status, pod, podgroup, wait_for

Nodes = Callable[..., dict[str, str]]
Objects = dict[tuple[str, str], dict[str, Any]]

CHART = REPO / "charts" / "gangsched"
MANIFESTS = REPO / "manifests"
# Labels the chart adds to every object (and to its selectors), which manifests/ has not.
HELM_LABELS = frozenset(
    {
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
        "app.kubernetes.io/managed-by",
        "helm.sh/chart",
    }
)
CONFIG_HASH = re.compile(r"^gangsched-config-[a-z0-9]+$")

RELEASE = "chart-e2e"
NAMESPACE = "chart-e2e-system"
FULLNAME = f"{RELEASE}-gangsched"  # the release name does not contain the chart's
SA_USER = f"system:serviceaccount:{NAMESPACE}:{FULLNAME}"
SCHEDULER = "gangsched-chart-e2e"
IDENTITY = "chart-e2e-0"
FORBIDDEN = re.compile(r"\b403\b|forbidden|not enough permissions", re.IGNORECASE)


@cache
def helm_binary() -> str:
    if os.environ.get("GANGSCHED_HELM"):
        return os.environ["GANGSCHED_HELM"]
    out = subprocess.run(
        ["bash", str(REPO / "hack" / "helm.sh")],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
        timeout=1800,
    )
    return out.stdout.strip().splitlines()[-1]


def helm(tmp: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    # helm's own cache, config and data in a directory of the test's, not the user's home
    env = {**os.environ} | {
        f"HELM_{k}_HOME": str(tmp / f"helm-{k.lower()}") for k in ("CACHE", "CONFIG", "DATA")
    }
    out = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=180, env=env, check=False
    )
    if check and out.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {out.returncode}:\n{out.stderr}")
    return out


def _objects(text: str) -> Objects:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


def _drop_helm_labels(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _drop_helm_labels(v) for k, v in node.items() if k not in HELM_LABELS}
    if isinstance(node, list):
        return [_drop_helm_labels(v) for v in node]
    return node


def _normalized(objs: Objects) -> Objects:
    """Objects as comparable: no Helm labels; the ConfigMap as ``gangsched-config`` (kustomize
    appends a content hash, the chart rolls pods with a checksum annotation instead), its file
    as the Settings it loads to (the chart's is written by toYaml: other order, no nulls)."""
    out: Objects = {}
    for (kind, name), obj in objs.items():
        obj = _drop_helm_labels(obj)
        if kind == "ConfigMap":
            name = "gangsched-config"
            obj["metadata"]["name"] = name
            obj["data"] = {"config.yaml": _settings(obj["data"]["config.yaml"])}
        if kind == "Deployment":
            template = obj["spec"]["template"]
            annotations = template["metadata"].pop("annotations", {})
            annotations.pop("checksum/config", None)
            if annotations:
                template["metadata"]["annotations"] = annotations
            for volume in template["spec"]["volumes"]:
                if "configMap" in volume and CONFIG_HASH.match(volume["configMap"]["name"]):
                    volume["configMap"]["name"] = "gangsched-config"
        out[(kind, name)] = obj
    return out


def _settings(text: str) -> dict[str, Any]:
    data = yaml.safe_load(text)
    assert isinstance(data, dict)
    settings = load_settings(None, data, env={})
    dumped: dict[str, Any] = settings.model_dump(by_alias=True, mode="json")
    return dumped


# ---- the chart is manifests/ -----------------------------------------------------------------


def test_default_values_render_the_manifests(control_plane: ControlPlane, tmp_path: Path) -> None:
    rendered = helm(
        tmp_path,
        "template",
        "gangsched",
        str(CHART),
        "--namespace",
        "gangsched-system",
        "--include-crds",
        "--set",
        "namespace.create=true",
    ).stdout
    chart = _normalized(_objects(rendered))
    kustomized = _normalized(_objects(control_plane.kubectl("kustomize", str(MANIFESTS)).stdout))
    assert sorted(chart) == sorted(kustomized)
    differ = [
        f"{kind}/{name}{path}: chart {a!r}, manifests {b!r}"
        for kind, name in kustomized
        for path, a, b in _diff(chart[(kind, name)], kustomized[(kind, name)])
    ]
    assert not differ, "the chart drifted from manifests/:\n" + "\n".join(differ)


def _diff(a: Any, b: Any, path: str = "") -> Iterator[tuple[str, Any, Any]]:
    """(path, chart value, manifests value) of every difference."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            yield from _diff(a.get(key), b.get(key), f"{path}.{key}")
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff(x, y, f"{path}[{i}]")
    elif a != b:
        yield path, a, b


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (["--set", "config.fooBar=1"], "additional properties 'fooBar' not allowed"),
        (["--set", "config.filters[0]=Nope"], "value must be one of"),
        (["--set", "config.apiBurst=0"], "/config/apiBurst"),
        (["--set", "replicas=3"], "additional properties 'replicas' not allowed"),
        (["--set", "leaderElect=false"], "replicaCount > 1 needs leaderElect"),
        (["--set", "config.httpBindAddress="], "the chart needs host:port"),
    ],
)
def test_bad_values_fail_at_render(tmp_path: Path, flags: list[str], error: str) -> None:
    out = helm(tmp_path, "template", "x", str(CHART), *flags, check=False)
    assert out.returncode != 0
    assert error in out.stderr, out.stderr


def test_values_shape_what_is_rendered(tmp_path: Path) -> None:
    digest = "sha256:" + "ab" * 32
    objs = _objects(
        helm(
            tmp_path,
            "template",
            "team",
            str(CHART),
            "--namespace",
            "sched",
            "--set",
            "config.httpBindAddress=:8080",
            "--set",
            "config.leaseName=team-lease",
            "--set",
            f"image.digest={digest}",
            "--set",
            "serviceMonitor.enabled=true",
            "--set",
            "leaderElect=false,replicaCount=1",
            "--set",
            "config.logFormat=console",
        ).stdout
    )
    deploy = objs[("Deployment", "team-gangsched")]
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/gangsched/gangsched@{digest}"
    assert container["ports"][0]["containerPort"] == 8080
    assert "--leader-elect" not in container["args"]
    assert container["args"][-2:] == ["--log-format", "console"]
    assert container["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    role = objs[("Role", "team-gangsched-leader-election")]
    assert role["metadata"]["namespace"] == "sched"
    assert role["rules"][0]["resourceNames"] == ["team-lease"]
    config = yaml.safe_load(objs[("ConfigMap", "team-gangsched-config")]["data"]["config.yaml"])
    assert config["leaseNamespace"] == "sched" and config["leaseName"] == "team-lease"
    service = objs[("Service", "team-gangsched")]
    monitor = objs[("ServiceMonitor", "team-gangsched")]
    assert service["spec"]["ports"][0]["port"] == 8080
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert service["spec"]["selector"].items() <= (
        deploy["spec"]["template"]["metadata"]["labels"].items()
    )
    assert ("PodDisruptionBudget", "team-gangsched") in objs
    assert not any(kind == "Namespace" for kind, _ in objs)  # namespace.create is off


# ---- helm install on the dev control plane ---------------------------------------------------


@pytest.fixture(scope="module")
def helm_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("helm")


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane, helm_home: Path) -> Iterator[ControlPlane]:
    cp = control_plane
    # helm keeps its release record in the release namespace, so it must exist first (or
    # --create-namespace, which cannot label it): created as an operator would, with Pod
    # Security "restricted" enforced, which the Deployment must then pass.
    cp.create_namespace(NAMESPACE)
    cp.kubectl(
        "label",
        "namespace",
        NAMESPACE,
        "pod-security.kubernetes.io/enforce=restricted",
        "pod-security.kubernetes.io/enforce-version=latest",
    )
    helm(
        helm_home,
        "install",
        RELEASE,
        str(CHART),
        "--kubeconfig",
        str(cp.kubeconfig),
        "--namespace",
        NAMESPACE,
        "--set",
        f"config.schedulerName={SCHEDULER}",
    )
    try:
        yield cp
    finally:  # a no-op when test_helm_uninstall_keeps_the_crd ran
        uninstall = ("uninstall", RELEASE, "--kubeconfig", str(cp.kubeconfig), "-n", NAMESPACE)
        helm(helm_home, *uninstall, check=False)


def test_helm_install_is_accepted(installed: ControlPlane, helm_home: Path) -> None:
    cp = installed
    status = json.loads(
        helm(
            helm_home,
            "status",
            RELEASE,
            "--kubeconfig",
            str(cp.kubeconfig),
            "--namespace",
            NAMESPACE,
            "-o",
            "json",
        ).stdout
    )
    assert status["info"]["status"] == "deployed"
    deploy = cp.kubectl_json("get", "deployment", FULLNAME, "-n", NAMESPACE)
    assert deploy["spec"]["replicas"] == 2
    assert deploy["spec"]["template"]["spec"]["serviceAccountName"] == FULLNAME
    ns = cp.kubectl_json("get", "namespace", NAMESPACE)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for what in (
        ("serviceaccount", FULLNAME, "-n", NAMESPACE),
        ("configmap", f"{FULLNAME}-config", "-n", NAMESPACE),
        ("poddisruptionbudget", FULLNAME, "-n", NAMESPACE),
        ("role", f"{FULLNAME}-leader-election", "-n", NAMESPACE),
        ("rolebinding", f"{FULLNAME}-leader-election", "-n", NAMESPACE),
        ("clusterrole", FULLNAME),
        ("clusterrolebinding", FULLNAME),
    ):
        cp.kubectl("get", *what)
    # The pod template passes Pod Security "restricted": a violation is only a warning on a
    # Deployment, so ask again as a server-side dry run that turns warnings into errors.
    deploy.pop("status", None)
    meta = deploy["metadata"]
    deploy["metadata"] = {"name": meta["name"], "namespace": meta["namespace"]}
    dry = cp.kubectl(
        "apply",
        "--dry-run=server",
        "--warnings-as-errors",
        "-f",
        "-",
        input=json.dumps(deploy),
        check=False,
    )
    assert dry.returncode == 0, dry.stderr


def _sa_kubeconfig(cp: ControlPlane, path: Path) -> Path:
    token = cp.kubectl("create", "token", FULLNAME, "-n", NAMESPACE, "--duration=1h").stdout
    ca = base64.b64encode(cp.ca_file.read_bytes()).decode()
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "e2e", "cluster": {"server": cp.server, "certificate-authority-data": ca}}
        ],
        "users": [{"name": "sa", "user": {"token": token.strip()}}],
        "contexts": [{"name": "e2e", "context": {"cluster": "e2e", "user": "sa"}}],
        "current-context": "e2e",
    }
    path.write_text(json.dumps(config))
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def chart_daemon(
    installed: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[SchedulerProcess]:
    """``gangsched run`` as the installed Deployment runs it: its arguments, the installed
    ConfigMap's file, the chart's ServiceAccount; only the API server address and the HTTP
    port differ (a pod would use the in-cluster address and its own network)."""
    cp = installed
    tmp = tmp_path_factory.mktemp("chart-daemon")
    config = tmp / "config.yaml"
    cm = cp.kubectl_json("get", "configmap", f"{FULLNAME}-config", "-n", NAMESPACE)
    config.write_text(cm["data"]["config.yaml"])
    deploy = cp.kubectl_json("get", "deployment", FULLNAME, "-n", NAMESPACE)
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    args = [str(config) if a == "/etc/gangsched/config.yaml" else a for a in container["args"]]
    assert args[0] == "run" and str(config) in args and "--leader-elect" in args
    proc = SchedulerProcess(cp, tmp / "gangsched.log")
    proc.args = [
        sys.executable,
        "-m",
        "gangsched.cli",
        *args,
        "--kubeconfig",
        str(_sa_kubeconfig(cp, tmp / "kubeconfig")),
        "--identity",
        IDENTITY,
        # debug: a refused fire-and-forget write is logged at debug only
        "--log-level",
        "debug",
        "--http-bind-address",
        f"127.0.0.1:{proc.port}",
    ]
    proc.start()
    try:
        try:
            wait_for(
                "the daemon to take the Lease and sync its caches as the chart's ServiceAccount",
                lambda: not proc.alive() or "caches synced" in proc.tail(10_000),
                timeout=60,
            )
        except AssertionError as e:
            raise AssertionError(f"{e}\ngangsched log (tail):\n{proc.tail()}") from None
        assert proc.alive(), f"the daemon exited:\n{proc.tail()}"
        yield proc
    finally:
        proc.stop()


def test_chart_service_account_leads_and_schedules_a_gang(
    installed: ControlPlane, chart_daemon: SchedulerProcess, ns: str, nodes: Nodes
) -> None:
    cp = installed
    lease = cp.kubectl_json("get", "lease", "gangsched", "-n", NAMESPACE)
    assert lease["spec"]["holderIdentity"] == IDENTITY
    wait_for("/readyz 200", lambda: http_status(chart_daemon.port, "/readyz") == 200)
    sel = nodes(1, gpus=2)
    create(cp, podgroup("ddp", ns, 2))
    for i in range(2):
        create(cp, pod(f"ddp-{i}", ns, group="ddp", selector=sel, scheduler=SCHEDULER))

    def both_bound() -> dict[str, str] | None:
        placed = bound(cp, ns)
        return placed if len(placed) == 2 else None

    placed = wait_for("both pods bound", both_bound)
    assert set(placed.values()) == {f"{ns}-n0"}
    refused = [line for line in chart_daemon.tail(10_000).splitlines() if FORBIDDEN.search(line)]
    assert not refused, "the chart's ServiceAccount was refused:\n" + "\n".join(refused[:20])
    assert chart_daemon.alive()


def test_chart_service_account_has_no_more(installed: ControlPlane) -> None:
    cp = installed

    def can_i(*args: str) -> str:
        return cp.kubectl("auth", "can-i", *args, "--as", SA_USER, check=False).stdout.strip()

    assert can_i("create", "pods", "--subresource=binding", "-A") == "yes"
    assert can_i("delete", "pods", "-A") == "yes"  # preemption's victims
    for denied in (
        ("deletecollection", "pods", "-A"),
        ("patch", "pods", "-A"),
        ("update", "nodes"),
        ("get", "secrets", "-A"),
        ("update", "leases.coordination.k8s.io/other", "-n", NAMESPACE),
        ("update", "leases.coordination.k8s.io/gangsched", "-n", "gangsched-system"),
    ):
        assert can_i(*denied) == "no", denied


def test_helm_uninstall_keeps_the_crd(installed: ControlPlane, helm_home: Path) -> None:
    """Last in this module (pytest keeps file order): it uninstalls the release."""
    cp = installed
    helm(helm_home, "uninstall", RELEASE, "--kubeconfig", str(cp.kubeconfig), "-n", NAMESPACE)
    gone = cp.kubectl("get", "clusterrole", FULLNAME, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr
    cp.kubectl("get", "crd", "podgroups.gangsched.io")
