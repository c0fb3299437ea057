"""JobSet (sigs.k8s.io/jobset) beside the dev control plane: its CRD, its manager as a local
process, and its admission webhooks served on loopback.

``jobset.sh`` (package data beside this file; ``hack/jobset.sh`` in a checkout) builds the
manager from Go modules once, caches it by version, and puts the CRD and webhook manifests of
the same module version beside it. :class:`JobSet` then, against a started
:class:`~gangsched_dev.devcluster.ControlPlane`:

- applies the JobSet CRD and waits until it is established;
- writes a self-signed serving certificate for ``127.0.0.1`` (openssl) and a JobSet
  ``Configuration`` file (``config.jobset.x-k8s.io/v1alpha1``, passed with ``--config``) that
  turns JobSet's internal certificate management off (it would write a Secret and patch webhook
  configurations that point at an in-cluster Service) and serves the webhooks from that
  certificate on a free loopback port; no leader election, metrics off;
- starts the manager with the admin kubeconfig and waits for its ``/readyz``, which JobSet
  answers only once its webhook server listens;
- registers the module's mutating and validating webhooks (paths and rules from
  ``config/components/webhook``, with the patches that limit the pod webhooks to JobSet's pods)
  with ``clientConfig.url: https://127.0.0.1:<port>/<path>`` and the certificate as
  ``caBundle``, and waits until the API server reaches them: a server-side dry-run create of a
  JobSet passes through both JobSet webhooks.

JobSet creates Jobs; the Job controller of kube-controller-manager
(:meth:`ControlPlane.start_controller_manager`) creates their pods.

    with ControlPlane() as cp:
        cp.start_kwok()
        cp.start_controller_manager()
        with JobSet(cp):
            cp.kubectl("apply", "-f", "jobset.yaml")
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import logging
import os
import shutil
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import yaml

from gangsched_dev.devcluster.controlplane import ControlPlane, ControlPlaneError, free_ports

log = logging.getLogger(__name__)

# Package data (pyproject.toml): present in a checkout and in an installed wheel alike.
BUILD_SCRIPT: Final = Path(__file__).resolve().with_name("jobset.sh")
BINARY: Final = "jobset-manager"
CRD_FILE: Final = "crds/jobset.x-k8s.io_jobsets.yaml"
CRD_NAME: Final = "jobsets.jobset.x-k8s.io"
WEBHOOK_MANIFESTS: Final = "webhook/manifests.yaml"
WEBHOOK_PATCHES: Final = "webhook/patches"
# The webhook configurations' name in the dev cluster (the module's kustomize prefixes its own).
WEBHOOK_CONFIGURATION: Final = "gangsched-devcluster-jobset"

API_VERSION: Final = "jobset.x-k8s.io/v1alpha2"
JOBSET_NAME_LABEL: Final = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL: Final = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_KEY_LABEL: Final = "jobset.sigs.k8s.io/job-key"
JOB_INDEX_LABEL: Final = "jobset.sigs.k8s.io/job-index"

_LOOPBACK: Final = "127.0.0.1"
_STOP_GRACE_SECONDS: Final = 10.0
_PROBE_NAMESPACE: Final = "default"

_OPENSSL_CNF: Final = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = jobset-webhook
[ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,digitalSignature,keyEncipherment,keyCertSign
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
subjectAltName = IP:127.0.0.1,DNS:localhost
"""


class JobSetError(ControlPlaneError):
    """JobSet could not be built, started or reached."""


# ------------------------------------------------------------------------------ the build


def _missing(bin_dir: Path) -> list[str]:
    missing = [] if os.access(bin_dir / BINARY, os.X_OK) else [BINARY]
    return missing + [f for f in (CRD_FILE, WEBHOOK_MANIFESTS) if not (bin_dir / f).is_file()]


@functools.cache
def _run_build_script(env_key: tuple[tuple[str, str], ...]) -> Path:
    """Run the build script once per process and environment; return its output dir."""
    del env_key  # only the memo key: the script reads os.environ itself
    if not BUILD_SCRIPT.is_file():
        raise JobSetError(f"{BUILD_SCRIPT} not found; pass bin_dir or set GANGSCHED_JOBSET_BIN")
    log.info("running %s", BUILD_SCRIPT)
    # stderr is inherited so that a long first build shows its progress.
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise JobSetError(f"{BUILD_SCRIPT} failed with exit code {result.returncode}")
    return Path(lines[-1])


def find_jobset(bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a directory holding ``jobset-manager`` and the module's CRD and webhook manifests.

    Order: ``bin_dir``, ``$GANGSCHED_JOBSET_BIN``, else run the packaged ``jobset.sh`` (builds
    from Go modules on first use; afterwards it answers from its cache).
    """
    if bin_dir is not None:
        found, source = Path(bin_dir), "bin_dir argument"
    elif os.environ.get("GANGSCHED_JOBSET_BIN"):
        found, source = Path(os.environ["GANGSCHED_JOBSET_BIN"]), "$GANGSCHED_JOBSET_BIN"
    else:
        env_key = tuple(
            sorted(
                (k, v)
                for k, v in os.environ.items()
                if k.startswith(("GANGSCHED_", "GO")) or k in ("HOME", "PATH")
            )
        )
        found, source = _run_build_script(env_key), str(BUILD_SCRIPT)
    found = found.expanduser().resolve()
    missing = _missing(found)
    if missing:
        raise JobSetError(f"{found} (from {source}) lacks: {', '.join(missing)}")
    return found


# ---------------------------------------------------------------- configuration and webhooks


def configuration(*, webhook_port: int, cert_dir: Path, probe_port: int) -> dict[str, Any]:
    """JobSet's ``Configuration`` for a manager outside the cluster (read with ``--config``).

    The webhook server serves ``tls.crt``/``tls.key`` from ``cert_dir`` on loopback; internal
    certificate management is off (it targets an in-cluster Service and Secret); one manager,
    so no leader election; metrics off (``"0"``), so they need no certificate of their own.
    """
    return {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "webhook": {"host": _LOOPBACK, "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"{_LOOPBACK}:{probe_port}"},
    }


def argv(binary: Path, *, kubeconfig: Path, config_file: Path) -> list[str]:
    """The manager's command line: everything but the kubeconfig is in the config file."""
    return [str(binary), f"--kubeconfig={kubeconfig}", f"--config={config_file}", "--zap-devel"]


def _replace(doc: dict[str, Any], patch: Sequence[Mapping[str, Any]]) -> None:
    """Apply the ``replace /webhooks/<i>`` operations of a kustomize JSON patch."""
    for op in patch:
        parts = str(op.get("path", "")).strip("/").split("/")
        if op.get("op") != "replace" or len(parts) != 2 or parts[0] != "webhooks":
            raise JobSetError(f"unsupported webhook patch operation: {dict(op)}")
        doc["webhooks"][int(parts[1])] = op["value"]


def webhook_configurations(bin_dir: Path, *, port: int, ca_bundle: bytes) -> list[dict[str, Any]]:
    """The module's webhook configurations, pointed at ``https://127.0.0.1:<port>``.

    From ``config/components/webhook``: ``manifests.yaml`` (controller-gen's output) with the
    kustomize patches applied (they add the pod webhooks' ``objectSelector``, JobSet pods only);
    each ``clientConfig.service`` becomes a ``url`` with the same path, and ``caBundle`` the
    serving certificate.
    """
    docs = [d for d in yaml.safe_load_all((bin_dir / WEBHOOK_MANIFESTS).read_text()) if d]
    patches: dict[str, list[Any]] = {}
    for path in sorted((bin_dir / WEBHOOK_PATCHES).glob("*.yaml")):
        patch = yaml.safe_load(path.read_text()) or []
        # mutating-patch.yaml / validating-patch.yaml, as the module's kustomization targets them
        patches[path.name.split("-", 1)[0]] = patch
    bundle = base64.b64encode(ca_bundle).decode()
    out: list[dict[str, Any]] = []
    for doc in docs:
        kind = str(doc.get("kind", ""))
        target = "mutating" if kind == "MutatingWebhookConfiguration" else "validating"
        _replace(doc, patches.get(target, []))
        for hook in doc["webhooks"]:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://{_LOOPBACK}:{port}{path}", "caBundle": bundle}
            hook.setdefault("timeoutSeconds", 10)
        doc["metadata"] = {"name": WEBHOOK_CONFIGURATION}
        out.append(doc)
    return out


def write_serving_cert(cert_dir: Path) -> bytes:
    """A self-signed serving certificate for 127.0.0.1 (``tls.crt``/``tls.key``, the names
    controller-runtime's webhook server reads); returns the certificate, the ``caBundle``."""
    if shutil.which("openssl") is None:
        raise JobSetError("openssl not found: it makes the JobSet webhook's certificate")
    cert_dir.mkdir(parents=True, exist_ok=True)
    cnf = cert_dir / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF)
    result = subprocess.run(
        [
            *["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "3650"],
            *["-keyout", "tls.key", "-out", "tls.crt", "-config", str(cnf), "-extensions", "ext"],
        ],
        cwd=cert_dir,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise JobSetError(f"openssl could not make the webhook certificate: {result.stderr}")
    return (cert_dir / "tls.crt").read_bytes()


def probe_jobset(name: str) -> dict[str, Any]:
    """The smallest valid JobSet: a server-side dry-run create of it passes both webhooks."""
    container = {"name": "c", "image": "busybox"}
    template = {"spec": {"restartPolicy": "Never", "containers": [container]}}
    return {
        "apiVersion": API_VERSION,
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": _PROBE_NAMESPACE},
        "spec": {
            "replicatedJobs": [
                {"name": "probe", "replicas": 1, "template": {"spec": {"template": template}}}
            ]
        },
    }


def _readyz(port: int) -> bool:
    try:
        url = f"http://{_LOOPBACK}:{port}/readyz"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def _webhook_serves(port: int, ca_file: Path) -> bool:
    """True when the webhook server completes a TLS handshake that trusts our certificate."""
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with (
            socket.create_connection((_LOOPBACK, port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname=_LOOPBACK),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


# --------------------------------------------------------------------------------- JobSet


class JobSet:
    """The JobSet manager beside a started :class:`ControlPlane` (see the module docstring)."""

    def __init__(
        self,
        cp: ControlPlane,
        bin_dir: str | os.PathLike[str] | None = None,
        *,
        ready_timeout: float = 120.0,
    ) -> None:
        self.cp = cp
        self._bin_dir_arg = bin_dir
        self._bin_dir: Path | None = None
        self.ready_timeout = ready_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self.webhook_port = 0
        self.probe_port = 0

    @property
    def bin_dir(self) -> Path:
        """Directory holding ``jobset-manager`` and the manifests of the same version."""
        if self._bin_dir is None:
            self._bin_dir = find_jobset(self._bin_dir_arg)
        return self._bin_dir

    @property
    def workdir(self) -> Path:
        return self.cp.workdir / "jobset"

    @property
    def log_path(self) -> Path:
        return self.cp.log_path("jobset")

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {self.log_path})"

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> Self:
        """Install the CRD, start the manager, register its webhooks; return once the API
        server reaches them."""
        if self.is_running():
            raise JobSetError("the JobSet manager is already running")
        binary = self.bin_dir / BINARY
        self.install_crd()
        self.workdir.mkdir(parents=True, exist_ok=True)
        cert_dir = self.workdir / "certs"
        ca_bundle = write_serving_cert(cert_dir)
        self.webhook_port, self.probe_port = free_ports(2)
        config_file = self.workdir / "config.yaml"
        config = configuration(
            webhook_port=self.webhook_port, cert_dir=cert_dir, probe_port=self.probe_port
        )
        config_file.write_text(json.dumps(config, indent=2) + "\n")
        args = argv(binary, kubeconfig=self.cp.kubeconfig, config_file=config_file)
        log.debug("starting the JobSet manager: %s", " ".join(args))
        with self.log_path.open("ab") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(args)}\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        try:
            self._wait("/readyz (its webhook server listening)", lambda: _readyz(self.probe_port))
            self._wait(
                f"a TLS handshake on its webhook port {self.webhook_port}",
                lambda: _webhook_serves(self.webhook_port, cert_dir / "tls.crt"),
            )
            configs = webhook_configurations(
                self.bin_dir, port=self.webhook_port, ca_bundle=ca_bundle
            )
            for doc in configs:
                self.cp.kubectl("apply", "-f", "-", input=json.dumps(doc))
            self._wait("the API server to reach its webhooks", self._webhooks_answer)
        except BaseException:
            self.stop()
            raise
        return self

    def install_crd(self) -> None:
        """Apply the JobSet CRD of this version and wait until it is established."""
        # Server-side: the CRD is larger than client-side apply's annotation may hold.
        self.cp.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(self.bin_dir / CRD_FILE)
        )
        deadline = time.monotonic() + self.ready_timeout
        while not self._crd_established():
            if time.monotonic() > deadline:
                raise JobSetError(f"crd/{CRD_NAME} not Established after {self.ready_timeout}s")
            time.sleep(0.25)

    def _crd_established(self) -> bool:
        crd = self.cp.kubectl_json("get", "crd", CRD_NAME)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def _webhooks_answer(self) -> bool:
        """A server-side dry-run create calls the mutating then the validating webhook."""
        result = self.cp.kubectl(
            "create",
            "--dry-run=server",
            "-f",
            "-",
            "-o",
            "json",
            input=json.dumps(probe_jobset("gangsched-webhook-probe")),
            check=False,
        )
        if result.returncode != 0:
            log.debug("JobSet webhook probe: %s", result.stderr.strip())
            return False
        # The mutating webhook makes the child Jobs Indexed (the CRD has no such default):
        # proof that it ran; the validating webhook ran too, or the create would have failed.
        created: dict[str, Any] = json.loads(result.stdout)
        jobs = created.get("spec", {}).get("replicatedJobs") or [{}]
        return bool(jobs[0].get("template", {}).get("spec", {}).get("completionMode") == "Indexed")

    def _wait(self, what: str, probe: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if not self.is_running():
                code = None if self._proc is None else self._proc.returncode
                raise JobSetError(
                    f"the JobSet manager exited (code {code}) before {what}; last log lines of "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise JobSetError(
                    f"the JobSet manager: no {what} after {self.ready_timeout:.0f}s; last log "
                    f"lines of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def stop(self) -> None:
        """Remove the webhook configurations (their failurePolicy is Fail: left behind, they
        would refuse every JobSet and JobSet pod), then stop the manager. The CRD and the
        objects stay."""
        with contextlib.suppress(ControlPlaneError, OSError, subprocess.TimeoutExpired):
            for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
                self.cp.kubectl("delete", kind, WEBHOOK_CONFIGURATION, "--ignore-not-found")
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=_STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
