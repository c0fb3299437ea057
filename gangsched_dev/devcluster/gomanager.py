"""A job controller's manager (JobSet, LeaderWorkerSet, Kueue) beside the dev control plane:
its CRDs, the manager as a local process, and its admission webhooks served on loopback.

``controllers.sh`` (package data beside this file; ``hack/controllers.sh`` in a checkout)
builds a manager from its Go module once, caches it by version, and puts the CRDs and webhook
manifests of the same module version beside it. :class:`GoManager` then, against a started
:class:`~gangsched_dev.devcluster.ControlPlane`:

- applies the CRDs (server-side) and waits until they are established;
- writes a self-signed serving certificate for ``127.0.0.1`` (openssl) and the manager's
  ``Configuration`` file (passed with ``--config``), which turns its internal certificate
  management off (it would write a Secret and patch webhook configurations that point at an
  in-cluster Service) and serves the webhooks from that certificate on a free loopback port;
  no leader election, metrics off;
- starts the manager with the admin kubeconfig and waits for its ``/readyz``, which
  controller-runtime answers once the webhook server listens;
- registers the module's mutating and validating webhooks (paths and rules from its
  ``manifests.yaml`` with the module's kustomize patches; a subclass may keep only some) with
  ``clientConfig.url: https://127.0.0.1:<port>/<path>`` and the certificate as ``caBundle``,
  and waits until the API server reaches them (a subclass's :meth:`GoManager.webhooks_answer`,
  typically a server-side dry-run create that only the mutating webhook could have changed).

Subclasses (jobset.py, lws.py, kueue.py) name the controller and give its configuration and
probe.
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
from typing import Any, ClassVar, Final, Self

import yaml

from gangsched_dev.devcluster.controlplane import ControlPlane, ControlPlaneError, free_ports

log = logging.getLogger(__name__)

# Package data (pyproject.toml): present in a checkout and in an installed wheel alike.
BUILD_SCRIPT: Final = Path(__file__).resolve().with_name("controllers.sh")
CRD_DIR: Final = "crds"
WEBHOOK_MANIFESTS: Final = "webhook/manifests.yaml"
WEBHOOK_PATCHES: Final = "webhook/patches"

LOOPBACK: Final = "127.0.0.1"
_STOP_GRACE_SECONDS: Final = 10.0

_OPENSSL_CNF: Final = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = {name}-webhook
[ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,digitalSignature,keyEncipherment,keyCertSign
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
subjectAltName = IP:127.0.0.1,DNS:localhost
"""


class ManagerError(ControlPlaneError):
    """A controller's manager could not be built, started or reached."""


# ------------------------------------------------------------------------------ the build


def binary_name(name: str) -> str:
    return f"{name}-manager"


def _missing(name: str, bin_dir: Path) -> list[str]:
    """What a build directory lacks (a controller without webhooks has no webhook manifests)."""
    missing = [] if os.access(bin_dir / binary_name(name), os.X_OK) else [binary_name(name)]
    if not any((bin_dir / CRD_DIR).glob("*.yaml")):
        missing.append(f"{CRD_DIR}/*.yaml")
    return missing


@functools.cache
def _run_build_script(name: str, env_key: tuple[tuple[str, str], ...]) -> Path:
    """Run the build script once per process, controller and environment; return its output
    directory."""
    del env_key  # only the memo key: the script reads os.environ itself
    if not BUILD_SCRIPT.is_file():
        raise ManagerError(f"{BUILD_SCRIPT} not found; pass bin_dir or set {bin_variable(name)}")
    log.info("running %s %s", BUILD_SCRIPT, name)
    # stderr is inherited so that a long first build shows its progress.
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), name],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise ManagerError(f"{BUILD_SCRIPT} {name} failed with exit code {result.returncode}")
    return Path(lines[-1])


def bin_variable(name: str) -> str:
    """The environment variable that names a built controller's directory."""
    return f"GANGSCHED_{name.upper()}_BIN"


def find_build(name: str, bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a directory holding ``<name>-manager`` and the module's CRD and webhook manifests.

    Order: ``bin_dir``, ``$GANGSCHED_<NAME>_BIN``, else run the packaged ``controllers.sh``
    (builds from Go modules on first use; afterwards it answers from its cache).
    """
    variable = bin_variable(name)
    if bin_dir is not None:
        found, source = Path(bin_dir), "bin_dir argument"
    elif os.environ.get(variable):
        found, source = Path(os.environ[variable]), f"${variable}"
    else:
        env_key = tuple(
            sorted(
                (k, v)
                for k, v in os.environ.items()
                if k.startswith(("GANGSCHED_", "GO")) or k in ("HOME", "PATH")
            )
        )
        found, source = _run_build_script(name, env_key), f"{BUILD_SCRIPT} {name}"
    found = found.expanduser().resolve()
    missing = _missing(name, found)
    if missing:
        raise ManagerError(f"{found} (from {source}) lacks: {', '.join(missing)}")
    return found


# --------------------------------------------------------------------------------- webhooks


def _replace(doc: dict[str, Any], patch: Sequence[Mapping[str, Any]]) -> None:
    """Apply the ``replace /webhooks/<i>`` operations of a kustomize JSON patch."""
    for op in patch:
        parts = str(op.get("path", "")).strip("/").split("/")
        if op.get("op") != "replace" or len(parts) != 2 or parts[0] != "webhooks":
            raise ManagerError(f"unsupported webhook patch operation: {dict(op)}")
        doc["webhooks"][int(parts[1])] = op["value"]


def webhook_configurations(
    bin_dir: Path,
    *,
    name: str,
    port: int,
    ca_bundle: bytes,
    keep: Callable[[Mapping[str, Any]], bool] = lambda _: True,
) -> list[dict[str, Any]]:
    """The module's webhook configurations, named ``name``, pointed at
    ``https://127.0.0.1:<port>``.

    ``manifests.yaml`` (controller-gen's output) with the module's kustomize patches applied
    (``mutating-*.yaml`` to the mutating configuration, ``validating-*.yaml`` to the validating
    one); the webhooks ``keep`` accepts; each ``clientConfig.service`` becomes a ``url`` with
    the same path, and ``caBundle`` the serving certificate.
    """
    docs = [d for d in yaml.safe_load_all((bin_dir / WEBHOOK_MANIFESTS).read_text()) if d]
    patches: dict[str, list[Any]] = {}
    for path in sorted((bin_dir / WEBHOOK_PATCHES).glob("*.yaml")):
        patch = yaml.safe_load(path.read_text()) or []
        patches.setdefault(path.name.split("-", 1)[0], []).extend(patch)
    bundle = base64.b64encode(ca_bundle).decode()
    out: list[dict[str, Any]] = []
    for doc in docs:
        kind = str(doc.get("kind", ""))
        target = "mutating" if kind == "MutatingWebhookConfiguration" else "validating"
        _replace(doc, patches.get(target, []))
        hooks = [hook for hook in doc["webhooks"] if keep(hook)]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://{LOOPBACK}:{port}{path}", "caBundle": bundle}
            hook.setdefault("timeoutSeconds", 10)
        if hooks:
            out.append({**doc, "metadata": {"name": name}, "webhooks": hooks})
    return out


def kubebuilder_configuration(
    api_version: str, *, webhook_port: int, cert_dir: Path, probe_port: int
) -> dict[str, Any]:
    """The ``Configuration`` that kubebuilder-made managers (JobSet, LWS, Kueue) share, for a
    manager outside the cluster: webhooks on loopback from ``cert_dir``, internal certificate
    management off (it targets an in-cluster Service and Secret), one manager so no leader
    election, metrics off (``"0"``, so they need no certificate of their own)."""
    return {
        "apiVersion": api_version,
        "kind": "Configuration",
        "internalCertManagement": {"enable": False},
        "leaderElection": {"leaderElect": False},
        "webhook": {"host": LOOPBACK, "port": webhook_port, "certDir": str(cert_dir)},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"{LOOPBACK}:{probe_port}"},
    }


def write_serving_cert(cert_dir: Path, name: str) -> bytes:
    """A self-signed serving certificate for 127.0.0.1 (``tls.crt``/``tls.key``, the names
    controller-runtime's webhook server reads); returns the certificate, the ``caBundle``."""
    if shutil.which("openssl") is None:
        raise ManagerError(f"openssl not found: it makes the {name} webhook's certificate")
    cert_dir.mkdir(parents=True, exist_ok=True)
    cnf = cert_dir / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF.format(name=name))
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
        raise ManagerError(f"openssl could not make the webhook certificate: {result.stderr}")
    return (cert_dir / "tls.crt").read_bytes()


def _readyz(port: int) -> bool:
    try:
        url = f"http://{LOOPBACK}:{port}/readyz"
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status) == 200
    except (OSError, urllib.error.URLError):
        return False


def _webhook_serves(port: int, ca_file: Path) -> bool:
    """True when the webhook server completes a TLS handshake that trusts our certificate."""
    context = ssl.create_default_context(cafile=str(ca_file))
    try:
        with (
            socket.create_connection((LOOPBACK, port), timeout=5) as sock,
            context.wrap_socket(sock, server_hostname=LOOPBACK),
        ):
            return True
    except (OSError, ssl.SSLError):
        return False


# ---------------------------------------------------------------------------- the manager


class GoManager:
    """A controller's manager beside a started :class:`ControlPlane` (see the module
    docstring). Subclasses set ``NAME`` and ``TITLE`` and give :meth:`configuration` and
    :meth:`webhooks_answer`."""

    NAME: ClassVar[str]  # the build script's argument; the binary is <NAME>-manager
    TITLE: ClassVar[str]  # "the JobSet manager", for messages

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

    # ---- what a subclass gives

    def configuration(
        self, *, webhook_port: int, cert_dir: Path, probe_port: int
    ) -> dict[str, Any] | None:
        """The manager's ``Configuration`` (read with ``--config``; None: it has none)."""
        raise NotImplementedError

    def argv(self, binary: Path, *, config_file: Path | None) -> list[str]:
        """The manager's command line: everything but the kubeconfig is in the config file."""
        return [
            str(binary),
            f"--kubeconfig={self.cp.kubeconfig}",
            f"--config={config_file}",
            "--zap-devel",
        ]

    @property
    def cert_dir(self) -> Path:
        """Where the serving certificate is written (``tls.crt``, ``tls.key``)."""
        return self.workdir / "certs"

    def env(self) -> dict[str, str] | None:
        """The manager's environment (None: this process's)."""
        return None

    def keep_webhook(self, hook: Mapping[str, Any]) -> bool:
        """Whether to register one webhook of the module's manifests (all, unless a subclass
        serves only some: a webhook whose path nothing serves would refuse what it matches)."""
        del hook
        return True

    def webhooks_answer(self) -> bool:
        """Whether the API server reaches the registered webhooks (a manager with webhooks
        says how it knows)."""
        raise NotImplementedError

    # ---- the rest

    @property
    def webhook_configuration(self) -> str:
        """The webhook configurations' name in the dev cluster."""
        return f"gangsched-devcluster-{self.NAME}"

    @property
    def bin_dir(self) -> Path:
        """Directory holding the manager and the manifests of the same version."""
        if self._bin_dir is None:
            self._bin_dir = find_build(self.NAME, self._bin_dir_arg)
        return self._bin_dir

    @property
    def workdir(self) -> Path:
        return self.cp.workdir / self.NAME

    @property
    def log_path(self) -> Path:
        return self.cp.log_path(self.NAME)

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
        """Install the CRDs, start the manager, register its webhooks (where it has any);
        return once it is ready (:meth:`ready`) and the API server reaches its webhooks."""
        if self.is_running():
            raise ManagerError(f"{self.TITLE} is already running")
        binary = self.bin_dir / binary_name(self.NAME)
        self.install_crds()
        self.workdir.mkdir(parents=True, exist_ok=True)
        webhooks = (self.bin_dir / WEBHOOK_MANIFESTS).is_file()
        cert_dir = self.cert_dir
        ca_bundle = write_serving_cert(cert_dir, self.NAME) if webhooks else b""
        self.webhook_port, self.probe_port = free_ports(2)
        config = self.configuration(
            webhook_port=self.webhook_port, cert_dir=cert_dir, probe_port=self.probe_port
        )
        config_file = None
        if config is not None:
            config_file = self.workdir / "config.yaml"
            config_file.write_text(json.dumps(config, indent=2) + "\n")
        args = self.argv(binary, config_file=config_file)
        log.debug("starting %s: %s", self.TITLE, " ".join(args))
        with self.log_path.open("ab") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(args)}\n".encode())
            out.flush()
            self._proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                env=self.env(),
            )
        try:
            self._wait(self.READY, self.ready)
            if webhooks:
                self._wait(
                    f"a TLS handshake on its webhook port {self.webhook_port}",
                    lambda: _webhook_serves(self.webhook_port, cert_dir / "tls.crt"),
                )
                configs = webhook_configurations(
                    self.bin_dir,
                    name=self.webhook_configuration,
                    port=self.webhook_port,
                    ca_bundle=ca_bundle,
                    keep=self.keep_webhook,
                )
                for doc in configs:
                    self.cp.kubectl("apply", "-f", "-", input=json.dumps(doc))
                self._wait("the API server to reach its webhooks", self.webhooks_answer)
        except BaseException:
            self.stop()
            raise
        return self

    READY: ClassVar[str] = "/readyz (its webhook server listening)"

    def ready(self) -> bool:
        """Whether the manager is ready (controller-runtime's ``/readyz``)."""
        return _readyz(self.probe_port)

    def install_crds(self) -> None:
        """Apply the CRDs of this version and wait until they are established."""
        files = sorted((self.bin_dir / CRD_DIR).glob("*.yaml"))
        # Server-side: a CRD may be larger than client-side apply's annotation may hold.
        args = [a for f in files for a in ("-f", str(f))]
        self.cp.kubectl("apply", "--server-side", "--force-conflicts", *args)
        names = [
            str(d["metadata"]["name"])
            for f in files
            for d in yaml.safe_load_all(f.read_text())
            if d
        ]
        deadline = time.monotonic() + self.ready_timeout
        for name in names:
            while not self._crd_established(name):
                if time.monotonic() > deadline:
                    raise ManagerError(f"crd/{name} not Established after {self.ready_timeout}s")
                time.sleep(0.25)

    def _crd_established(self, name: str) -> bool:
        crd = self.cp.kubectl_json("get", "crd", name)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)

    def dry_run_create(self, obj: Mapping[str, Any]) -> dict[str, Any] | None:
        """A server-side dry-run create of ``obj`` (through every admission webhook): what the
        API server would store, or None when it refused."""
        result = self.cp.kubectl(
            "create",
            "--dry-run=server",
            "-f",
            "-",
            "-o",
            "json",
            input=json.dumps(obj),
            check=False,
        )
        if result.returncode != 0:
            log.debug("%s webhook probe: %s", self.TITLE, result.stderr.strip())
            return None
        created: dict[str, Any] = json.loads(result.stdout)
        return created

    def _wait(self, what: str, probe: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            if not self.is_running():
                code = None if self._proc is None else self._proc.returncode
                raise ManagerError(
                    f"{self.TITLE} exited (code {code}) before {what}; last log lines of "
                    f"{self.log_path}:\n{self.log_tail()}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise ManagerError(
                    f"{self.TITLE}: no {what} after {self.ready_timeout:.0f}s; last log "
                    f"lines of {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.25)

    def stop(self) -> None:
        """Remove the webhook configurations (their failurePolicy is Fail: left behind, they
        would refuse what they match), then stop the manager. The CRDs and the objects stay."""
        with contextlib.suppress(ControlPlaneError, OSError, subprocess.TimeoutExpired):
            for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
                self.cp.kubectl("delete", kind, self.webhook_configuration, "--ignore-not-found")
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(timeout=_STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
