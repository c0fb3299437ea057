"""Launch etcd + kube-apiserver (+ kwok, + kube-controller-manager) as local processes for
end-to-end tests.

Everything lives in one temporary directory; ports are free loopback ports picked per run. No
asyncio and no Kubernetes client: processes via :mod:`subprocess`, checks via the kubectl binary.

    with ControlPlane() as cp:
        cp.start_kwok()
        cp.add_fake_node("gpu-0", cpu=8, memory="64Gi", gpus=4)
        cp.kubectl("get", "nodes")
        cp.start_controller_manager()  # optional: Jobs, StatefulSets, ReplicaSets make pods

Binaries are looked up in this order: the ``bin_dir`` argument, ``$GANGSCHED_CP_BIN``, else
the build script that ships in this package, ``control-plane.sh`` (which builds them from Go
modules once, caches them by version under ``~/.cache/gangsched/control-plane`` and honours
``$KUBEBUILDER_ASSETS``); nothing depends on a repository checkout.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import json
import logging
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

from gangsched_dev.devcluster import controllermanager, featuregates

log = logging.getLogger(__name__)

BINARIES: Final = ("etcd", "kube-apiserver", "kubectl", "kwok")
STAGES_FILE: Final = "kwok-stages.yaml"
# A stage of this project's: a running pod deleted while a finalizer holds it ends Failed, as
# the kubelet would end it (package data beside this file).
TERMINATE_STAGE: Final = Path(__file__).resolve().with_name("kwok-terminate.yaml")
KWOK_NODE_ANNOTATION: Final = "kwok.x-k8s.io/node"
KWOK_NODE_SELECTOR: Final = f"{KWOK_NODE_ANNOTATION}=fake"
GPU_RESOURCE: Final = "nvidia.com/gpu"
# Package data (pyproject.toml): present in a checkout and in an installed wheel alike.
BUILD_SCRIPT: Final = Path(__file__).resolve().with_name("control-plane.sh")

_LOOPBACK: Final = "127.0.0.1"
# kwok v0.8.0 (through easycel v0.6.0, the newest of both) builds the CEL environment of a stage
# on first use from several goroutines that write one unguarded map: now and then it dies with
# this Go runtime error, mostly when it starts on a cluster that already has nodes and pods.
_KWOK_MAP_RACE: Final = "fatal error: concurrent map writes"
# kwok stands in for kubelets, which systemd restarts: an unexpected exit is followed by a new
# kwok, this many times per control plane at most (a crash loop still ends the test).
_KWOK_RESTARTS: Final = 5
_KWOK_START_SECONDS: Final = 0.5
_STOP_GRACE_SECONDS: Final = 10.0
_START_ATTEMPTS: Final = 3

_OPENSSL_CNF: Final = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = gangsched-devcluster
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign,digitalSignature
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical,CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
subjectAltName = IP:127.0.0.1,DNS:localhost
"""


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or queried."""


class KubectlError(ControlPlaneError):
    """A kubectl command exited with a non-zero status."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        self.cmd = list(args)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        detail = (stderr.strip() or stdout.strip())[-2000:]
        super().__init__(f"kubectl {' '.join(args)} exited with {returncode}: {detail}")


def _missing_binaries(bin_dir: Path) -> list[str]:
    missing = [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]
    if not (bin_dir / STAGES_FILE).is_file():
        missing.append(STAGES_FILE)
    return missing


def _build_env_key() -> tuple[tuple[str, str], ...]:
    """The environment that the build script depends on (the memo key of its answer)."""
    return tuple(
        sorted(
            (k, v)
            for k, v in os.environ.items()
            if k.startswith(("GANGSCHED_", "GO")) or k in ("KUBEBUILDER_ASSETS", "HOME", "PATH")
        )
    )


@functools.cache
def _run_build_script(env_key: tuple[tuple[str, str], ...]) -> Path:
    """Run the build script once per process and environment; return its output dir."""
    del env_key  # only the memo key: the script reads os.environ itself
    if not BUILD_SCRIPT.is_file():
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} not found (an incomplete installation?); "
            "pass bin_dir or set GANGSCHED_CP_BIN"
        )
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
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} failed with exit code {result.returncode} (see its stderr)"
        )
    return Path(lines[-1])


def find_binaries(bin_dir: str | os.PathLike[str] | None = None) -> Path:
    """Return a directory holding etcd, kube-apiserver, kubectl, kwok and kwok-stages.yaml.

    Order: ``bin_dir``, ``$GANGSCHED_CP_BIN``, else run the packaged ``control-plane.sh`` (builds
    from Go modules on first use, which takes many minutes; afterwards it answers from its cache).
    """
    source: str
    if bin_dir is not None:
        found, source = Path(bin_dir), "bin_dir argument"
    elif os.environ.get("GANGSCHED_CP_BIN"):
        found, source = Path(os.environ["GANGSCHED_CP_BIN"]), "$GANGSCHED_CP_BIN"
    else:
        found, source = _run_build_script(_build_env_key()), str(BUILD_SCRIPT)
    found = found.expanduser().resolve()
    missing = _missing_binaries(found)
    if missing:
        raise ControlPlaneError(f"{found} (from {source}) lacks: {', '.join(missing)}")
    return found


def free_ports(count: int) -> list[int]:
    """Distinct free TCP ports on the loopback address (all held open until all are chosen)."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((_LOOPBACK, 0))
            sockets.append(sock)
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    return "\n".join(text.splitlines()[-lines:])


def _parent_death_prefix() -> list[str]:
    """A command prefix asking Linux to SIGKILL the child when the forking thread dies.

    SIGKILL rather than SIGTERM: an orphaned kube-apiserver whose etcd got SIGTERM too spends
    minutes in a graceful shutdown that waits on etcd.

    ``setpriv --pdeathsig`` (util-linux) sets PR_SET_PDEATHSIG and execs the real binary, which
    keeps the setting; this avoids a ``preexec_fn`` (unsafe in threaded programs).
    """
    setpriv = shutil.which("setpriv")
    if not sys.platform.startswith("linux") or setpriv is None:
        return []
    return [setpriv, "--pdeathsig", "KILL", "--"]


def _terminate(proc: subprocess.Popen[bytes], grace: float = _STOP_GRACE_SECONDS) -> None:
    """SIGTERM, wait up to ``grace`` seconds, then SIGKILL (at once if ``grace`` is 0)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            if grace > 0:
                proc.terminate()
            else:
                proc.kill()
        try:
            proc.wait(timeout=max(grace, 0.1))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait()


def _generate_pki(pki: Path) -> None:
    """Write sa.key (service-account signing key), ca.crt/ca.key and server.crt/server.key."""
    pki.mkdir(parents=True, exist_ok=True)
    if shutil.which("openssl"):
        _generate_pki_openssl(pki)
    else:
        _generate_pki_cryptography(pki)


def _generate_pki_openssl(pki: Path) -> None:
    cnf = pki / "openssl.cnf"
    cnf.write_text(_OPENSSL_CNF)
    rsa = ["-newkey", "rsa:2048", "-nodes"]
    cfg = ["-config", str(cnf)]
    serial = f"0x{secrets.token_hex(8)}"
    steps: list[list[str]] = [
        ["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key"],
        [
            *["req", "-x509", *rsa, "-keyout", "ca.key", "-out", "ca.crt", "-days", "3650"],
            *cfg,
            *["-extensions", "ca_ext", "-subj", "/CN=gangsched-devcluster-ca"],
        ],
        [
            *["req", "-new", *rsa, "-keyout", "server.key", "-out", "server.csr"],
            *cfg,
            *["-subj", "/CN=kube-apiserver"],
        ],
        [
            *["x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key"],
            *["-set_serial", serial, "-days", "3650", "-out", "server.crt"],
            *["-extfile", str(cnf), "-extensions", "server_ext"],
        ],
    ]
    for step in steps:
        result = subprocess.run(
            ["openssl", *step], cwd=pki, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ControlPlaneError(f"openssl {' '.join(step)} failed: {result.stderr.strip()}")


def _generate_pki_cryptography(pki: Path) -> None:  # pragma: no cover - only without openssl
    try:
        import datetime
        import ipaddress

        from cryptography import x509  # type: ignore[import-not-found, unused-ignore]
        from cryptography.hazmat.primitives import (  # type: ignore[import-not-found, unused-ignore]
            hashes,
            serialization,
        )
        from cryptography.hazmat.primitives.asymmetric import (  # type: ignore[import-not-found, unused-ignore]
            rsa,
        )
        from cryptography.x509.oid import (  # type: ignore[import-not-found, unused-ignore]
            ExtendedKeyUsageOID,
            NameOID,
        )
    except ImportError as exc:
        raise ControlPlaneError(
            "need the openssl CLI or the Python 'cryptography' package to make keys"
        ) from exc

    def write_key(key: Any, name: str) -> None:
        (pki / name).write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.TraditionalOpenSSL,
                serialization.NoEncryption(),
            )
        )

    def name_of(cn: str) -> Any:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    def usage(sign: bool = False, encipher: bool = False, cert_sign: bool = False) -> Any:
        return x509.KeyUsage(
            digital_signature=sign,
            content_commitment=False,
            key_encipherment=encipher,
            data_encipherment=False,
            key_agreement=False,
            key_cert_sign=cert_sign,
            crl_sign=cert_sign,
            encipher_only=False,
            decipher_only=False,
        )

    now = datetime.datetime.now(datetime.UTC)
    later = now + datetime.timedelta(days=3650)
    write_key(rsa.generate_private_key(public_exponent=65537, key_size=2048), "sa.key")
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(name_of("gangsched-devcluster-ca"))
        .issuer_name(name_of("gangsched-devcluster-ca"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(usage(sign=True, cert_sign=True), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name_of("kube-apiserver"))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(later)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(usage(sign=True, encipher=True), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address(_LOOPBACK)), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    write_key(ca_key, "ca.key")
    write_key(key, "server.key")
    (pki / "ca.crt").write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    (pki / "server.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def fake_node(
    name: str,
    cpu: str | float,
    memory: str | int,
    gpus: int,
    labels: Mapping[str, str] | None = None,
    *,
    pods: int = 110,
    taints: Sequence[Mapping[str, str]] = (),
) -> dict[str, Any]:
    """A Node object for kwok to manage (annotated ``kwok.x-k8s.io/node: fake``), with
    capacity = allocatable = the given resources and the usual hostname/os/arch labels."""
    resources = {
        "cpu": str(cpu),
        "memory": str(memory),
        "pods": str(pods),
        GPU_RESOURCE: str(gpus),
    }
    node_labels = {
        "kubernetes.io/hostname": name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        **(labels or {}),
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": node_labels,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {"taints": [dict(t) for t in taints]} if taints else {},
        "status": {"capacity": resources, "allocatable": dict(resources)},
    }


class ControlPlane:
    """etcd + kube-apiserver (and optionally kwok) in a temporary directory.

    Without kube-controller-manager (the default): no ServiceAccounts, no garbage collection,
    namespaces never finish deleting (give each test its own namespace), Jobs, StatefulSets and
    ReplicaSets create no pods; :meth:`start_controller_manager` adds the controllers asked for.
    Binding pods (``pods/binding`` or ``spec.nodeName``) works, and kwok then runs them.
    """

    def __init__(
        self,
        bin_dir: str | os.PathLike[str] | None = None,
        *,
        ready_timeout: float = 120.0,
        extra_apiserver_args: Sequence[str] = (),
        keep_workdir: bool | None = None,
        kill_with_parent: bool = True,
        audit_policy: Mapping[str, Any] | None = None,
    ) -> None:
        """Configure, but do not start, a control plane.

        Args:
            bin_dir: directory with the binaries (default: see :func:`find_binaries`).
            ready_timeout: seconds to wait for etcd health and for kube-apiserver ``/readyz``.
            extra_apiserver_args: appended to the kube-apiserver command line.
            keep_workdir: keep the temporary directory (logs, data) after :meth:`stop`;
                default: true if ``$GANGSCHED_CP_KEEP`` is set to a non-empty value.
            kill_with_parent: on Linux (with util-linux ``setpriv``), have the kernel SIGKILL
                the child processes when this process dies, so that a killed test run leaks no
                apiserver. Only applies to processes started from the main thread.
            audit_policy: an ``audit.k8s.io/v1`` Policy; when given, kube-apiserver writes
                its audit log (JSON lines, see :attr:`audit_log` and :meth:`audit_events`).
                Default: no audit log.
        """
        self._bin_dir_arg = bin_dir
        self.audit_policy = dict(audit_policy) if audit_policy is not None else None
        self._bin_dir: Path | None = None
        self.ready_timeout = ready_timeout
        self.extra_apiserver_args = list(extra_apiserver_args)
        self.keep_workdir = (
            bool(os.environ.get("GANGSCHED_CP_KEEP")) if keep_workdir is None else keep_workdir
        )
        self._prefix = _parent_death_prefix() if kill_with_parent else []
        self._workdir: Path | None = None
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._kwok_args: tuple[str, ...] = ()
        self._kwok_lock = threading.Lock()
        self._kwok_restarts = 0
        self._token: str | None = None
        self._etcd_port = 0
        self._etcd_peer_port = 0
        self._apiserver_port = 0
        self._atexit_registered = False

    # ----------------------------------------------------------------------------- properties

    def _need(self, value: Any, what: str) -> Any:
        if value is None:
            raise ControlPlaneError(f"{what} is unknown: the control plane was not started")
        return value

    @property
    def bin_dir(self) -> Path:
        """Directory holding etcd, kube-apiserver, kubectl, kwok and kwok-stages.yaml."""
        if self._bin_dir is None:
            self._bin_dir = find_binaries(self._bin_dir_arg)
        return self._bin_dir

    @property
    def workdir(self) -> Path:
        """The temporary directory holding data, certificates, kubeconfig and logs."""
        workdir: Path = self._need(self._workdir, "workdir")
        return workdir

    @property
    def kubeconfig(self) -> Path:
        """Path of a kubeconfig (bearer token, CA data) for the admin user."""
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        """The API server URL, ``https://127.0.0.1:<port>``."""
        self._need(self._workdir, "server")
        return f"https://{_LOOPBACK}:{self._apiserver_port}"

    @property
    def token(self) -> str:
        """Bearer token of the admin user (group system:masters)."""
        token: str = self._need(self._token, "token")
        return token

    @property
    def ca_file(self) -> Path:
        """CA certificate that signed the API server's serving certificate."""
        return self.workdir / "pki" / "ca.crt"

    @property
    def etcd_url(self) -> str:
        self._need(self._workdir, "etcd_url")
        return f"http://{_LOOPBACK}:{self._etcd_port}"

    def log_path(self, name: str) -> Path:
        """Log file of a process: ``etcd``, ``kube-apiserver``, ``kwok`` or
        ``kube-controller-manager``."""
        return self.workdir / "logs" / f"{name}.log"

    @property
    def audit_log(self) -> Path:
        """kube-apiserver's audit log (only written with an ``audit_policy``)."""
        return self.workdir / "logs" / "audit.log"

    def audit_events(self) -> list[dict[str, Any]]:
        """The audit events written so far, oldest first (a line being written is skipped)."""
        try:
            text = self.audit_log.read_text(errors="replace")
        except FileNotFoundError:
            return []
        events: list[dict[str, Any]] = []
        for line in text.splitlines():
            with contextlib.suppress(ValueError):
                events.append(json.loads(line))
        return events

    def log_tail(self, name: str, lines: int = 40) -> str:
        return _tail(self.log_path(name), lines)

    def is_running(self, name: str) -> bool:
        proc = self._procs.get(name)
        return proc is not None and proc.poll() is None

    def crash(self, name: str) -> None:
        """SIGKILL one process, as a crash would end it."""
        proc = self._procs.get(name)
        if proc is None:
            raise ControlPlaneError(f"{name} is not running")
        with contextlib.suppress(ProcessLookupError):
            proc.kill()

    # ------------------------------------------------------------------------------ lifecycle

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
        """Start etcd and kube-apiserver and wait until ``/readyz`` answers 200.

        On any failure everything started so far is stopped before the error propagates. Should
        another process grab one of the picked ports first, it starts over with fresh ports.
        """
        if self._workdir is not None:
            raise ControlPlaneError("already started")
        bin_dir = self.bin_dir
        for attempt in range(1, _START_ATTEMPTS + 1):
            try:
                self._start_once()
                break
            except ControlPlaneError as exc:
                if "address already in use" not in str(exc) or attempt == _START_ATTEMPTS:
                    raise
                log.warning("port clash on attempt %d, retrying with new ports: %s", attempt, exc)
        log.info("control plane up at %s (bin %s, workdir %s)", self.server, bin_dir, self.workdir)
        return self

    def _start_once(self) -> None:
        self._workdir = Path(tempfile.mkdtemp(prefix="gangsched-cp-"))
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        try:
            (self.workdir / "logs").mkdir()
            self._etcd_port, self._etcd_peer_port, self._apiserver_port = free_ports(3)
            self._token = secrets.token_urlsafe(32)
            _generate_pki(self.workdir / "pki")
            (self.workdir / "tokens.csv").write_text(f"{self._token},admin,admin,system:masters\n")
            self._write_kubeconfig()
            self._start_etcd()
            self.start_apiserver()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop kube-controller-manager, kwok, kube-apiserver and etcd and remove the temporary
        directory.

        Idempotent; also fine after a partial or failed :meth:`start`.
        """
        for name in (controllermanager.BINARY, "kwok", "kube-apiserver", "etcd"):
            with self._kwok_lock:
                proc = self._procs.pop(name, None)
            if proc is not None:
                _terminate(proc)
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            if self.keep_workdir:
                log.info("keeping control plane workdir %s", workdir)
            else:
                shutil.rmtree(workdir, ignore_errors=True)
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

    def _spawn(self, name: str, argv: Sequence[str]) -> subprocess.Popen[bytes]:
        if self.is_running(name):
            raise ControlPlaneError(f"{name} is already running")
        log.debug("starting %s: %s", name, " ".join(argv))
        with self.log_path(name).open("ab") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            # Linux ties the parent-death signal to the forking *thread*: only use it from the
            # main thread (a worker thread, e.g. asyncio.to_thread, may exit any time).
            main = threading.current_thread() is threading.main_thread()
            proc = subprocess.Popen(
                [*(self._prefix if main else []), *argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
            )
        self._procs[name] = proc
        return proc

    def _wait_until(self, name: str, probe: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            proc = self._procs.get(name)
            if proc is None or proc.poll() is not None:
                code = None if proc is None else proc.returncode
                raise ControlPlaneError(
                    f"{name} exited (code {code}) before {what}; last log lines of "
                    f"{self.log_path(name)}:\n{self.log_tail(name)}"
                )
            if probe():
                return
            if time.monotonic() > deadline:
                raise ControlPlaneError(
                    f"{name}: no {what} after {self.ready_timeout:.0f}s; last log lines of "
                    f"{self.log_path(name)}:\n{self.log_tail(name)}"
                )
            time.sleep(0.2)

    def _start_etcd(self) -> None:
        client = f"http://{_LOOPBACK}:{self._etcd_port}"
        peer = f"http://{_LOOPBACK}:{self._etcd_peer_port}"
        self._spawn(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=gangsched",
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=gangsched={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )

        def healthy() -> bool:
            try:
                with urllib.request.urlopen(f"{client}/health", timeout=2) as resp:
                    body: Any = json.load(resp)
            except (OSError, ValueError):
                return False
            return isinstance(body, dict) and body.get("health") == "true"

        self._wait_until("etcd", healthy, "healthy /health")

    def _apiserver_argv(self) -> list[str]:
        wd, pki = self.workdir, self.workdir / "pki"
        return [
            str(self.bin_dir / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            f"--bind-address={_LOOPBACK}",
            f"--advertise-address={_LOOPBACK}",
            f"--secure-port={self._apiserver_port}",
            f"--cert-dir={wd / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'server.crt'}",
            f"--tls-private-key-file={pki / 'server.key'}",
            f"--token-auth-file={wd / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={self.server}/",
            f"--service-account-key-file={pki / 'sa.key'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            # No controller-manager runs here: nothing would ever lift the not-ready taint that
            # TaintNodesByCondition puts on every new Node, so it is not enabled.
            "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
            "--endpoint-reconciler-type=none",
            # Otherwise SIGTERM waits on open watches (kwok's, a scheduler's) for a minute.
            "--shutdown-watch-termination-grace-period=1s",
            *self._audit_args(),
            # the upstream gang API (scheduling.k8s.io Workload, PodGroup): its gates and version
            *featuregates.apiserver_args(
                featuregates.server_version(self.bin_dir / "kube-apiserver")
            ),
            *self.extra_apiserver_args,
        ]

    def _audit_args(self) -> list[str]:
        if self.audit_policy is None:
            return []
        policy = self.workdir / "audit-policy.json"  # JSON is YAML
        policy.write_text(json.dumps(self.audit_policy))
        return [
            f"--audit-policy-file={policy}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            "--audit-log-maxsize=0",
        ]

    def _readyz(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        request = urllib.request.Request(
            f"{self.server}/readyz", headers={"Authorization": f"Bearer {self.token}"}
        )
        try:
            with urllib.request.urlopen(request, timeout=5, context=context) as resp:
                return int(resp.status) == 200
        except (OSError, urllib.error.URLError):
            return False

    def start_apiserver(self) -> None:
        """Start kube-apiserver (same port, etcd and keys every time) and wait for /readyz.

        If kwok is running it is restarted once the server is ready: after a few outages its
        client-go watches back off for up to half a minute, during which new fake nodes would
        not become Ready, where real kubelets keep heartbeating and report at once.
        """
        self._spawn("kube-apiserver", self._apiserver_argv())
        self._wait_until("kube-apiserver", self._readyz, "/readyz == 200")
        if "kwok" in self._procs:
            self.stop_kwok()
            self.start_kwok(self._kwok_args)

    def stop_apiserver(self, *, kill: bool = False) -> None:
        """Stop kube-apiserver only; etcd and kwok keep running.

        ``kill=False`` is a graceful shutdown (SIGTERM, SIGKILL after 10 s; about 1 s with open
        watches); ``kill=True`` simulates a crash (SIGKILL at once).
        """
        proc = self._procs.pop("kube-apiserver", None)
        if proc is not None:
            _terminate(proc, grace=0.0 if kill else _STOP_GRACE_SECONDS)

    def restart_apiserver(self, downtime: float = 0.0, *, kill: bool = False) -> None:
        """Stop kube-apiserver, wait ``downtime`` seconds, start it again on the same port.

        Same port, etcd, token and keys, so existing kubeconfigs and clients keep working.
        """
        self.stop_apiserver(kill=kill)
        if downtime > 0:
            time.sleep(downtime)
        self.start_apiserver()

    def _write_kubeconfig(self) -> None:
        # JSON is YAML: every kubeconfig reader accepts it.
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "gangsched",
                    "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.token}}],
            "contexts": [
                {"name": "gangsched", "context": {"cluster": "gangsched", "user": "admin"}}
            ],
            "current-context": "gangsched",
            "preferences": {},
        }
        self.kubeconfig.write_text(json.dumps(config, indent=2) + "\n")
        self.kubeconfig.chmod(0o600)

    # ---------------------------------------------------------------------------------- kwok

    def start_kwok(self, extra_args: Sequence[str] = ()) -> None:
        """Start kwok for nodes annotated ``kwok.x-k8s.io/node: fake`` (see add_fake_node).

        kwok marks those nodes Ready and moves pods bound to them to Running; it never touches
        unbound pods. A running pod deleted while a finalizer holds it ends Failed, as the
        kubelet would end it (``kwok-terminate.yaml``).

        kwok is supervised as kubelets are: when it exits without :meth:`stop_kwok`, a new one
        starts (a few times at most), so a kwok crash cannot pass for a scheduler's fault.
        """
        self._need(self._workdir, "kwok")
        self._kwok_args = tuple(extra_args)
        while True:
            with self._kwok_lock:
                proc = self._spawn("kwok", self._kwok_argv())
            # kwok has no readiness endpoint we rely on: just make sure it did not die at once.
            time.sleep(_KWOK_START_SECONDS)
            if proc.poll() is None:
                break
            with self._kwok_lock:
                self._procs.pop("kwok", None)
                raced = _KWOK_MAP_RACE in self._kwok_last_run()
                if not raced or self._kwok_restarts >= _KWOK_RESTARTS:
                    raise ControlPlaneError(
                        f"kwok exited with {proc.returncode}:\n{self.log_tail('kwok')}"
                    )
                self._kwok_restarts += 1
            log.warning("kwok died of its map race while starting; starting it again")
        threading.Thread(
            target=self._supervise_kwok, args=(proc,), name="kwok-supervisor", daemon=True
        ).start()

    def _kwok_argv(self) -> list[str]:
        return [
            str(self.bin_dir / "kwok"),
            f"--kubeconfig={self.kubeconfig}",
            f"--config={self.bin_dir / STAGES_FILE}",
            f"--config={TERMINATE_STAGE}",
            "--manage-all-nodes=false",
            f"--manage-nodes-with-annotation-selector={KWOK_NODE_SELECTOR}",
            *self._kwok_args,
        ]

    def _kwok_last_run(self) -> str:
        """kwok's log since its latest start."""
        try:
            text = self.log_path("kwok").read_text(errors="replace")
        except OSError:
            return ""
        return text[text.rfind("\n==== ") :]

    def _supervise_kwok(self, proc: subprocess.Popen[bytes]) -> None:
        """Start kwok again whenever it exits without :meth:`stop_kwok` (or :meth:`stop`)."""
        while True:
            proc.wait()
            with self._kwok_lock:
                if self._procs.get("kwok") is not proc or self._workdir is None:
                    return  # stopped on purpose
                self._procs.pop("kwok")
                tail = _tail(self.log_path("kwok"), 5)
                if self._kwok_restarts >= _KWOK_RESTARTS:
                    log.error("kwok exited with %s, not restarted:\n%s", proc.returncode, tail)
                    return
                self._kwok_restarts += 1
                log.warning("kwok exited with %s, starting it again:\n%s", proc.returncode, tail)
                try:
                    proc = self._spawn("kwok", self._kwok_argv())
                except (OSError, ControlPlaneError) as exc:
                    log.error("kwok could not be started again: %s", exc)
                    return

    def stop_kwok(self) -> None:
        with self._kwok_lock:
            proc = self._procs.pop("kwok", None)
        if proc is not None:
            _terminate(proc)

    # ---------------------------------------------------------------- kube-controller-manager

    def start_controller_manager(
        self,
        controllers: Sequence[str] = controllermanager.DEFAULT_CONTROLLERS,
        extra_args: Sequence[str] = (),
    ) -> None:
        """Start kube-controller-manager with these controllers (upstream names, such as
        ``job-controller``) and wait until its ``/healthz`` reports each one started.

        Default: the Job, StatefulSet and ReplicaSet controllers and the garbage collector, so
        those workloads create their pods as in a real cluster (kwok runs them once bound, and
        finishes the pods that a Job owns). It uses the admin kubeconfig, without leader
        election; :meth:`stop_controller_manager` stops it, :meth:`stop` too.
        """
        self._need(self._workdir, "kube-controller-manager")
        binary = self.bin_dir / controllermanager.BINARY
        if not os.access(binary, os.X_OK):
            raise ControlPlaneError(
                f"{binary} not found: rebuild the binaries with control-plane.sh "
                "(it builds kube-controller-manager with kube-apiserver)"
            )
        port = free_ports(1)[0]
        self._spawn(
            controllermanager.BINARY,
            controllermanager.argv(
                binary,
                kubeconfig=self.kubeconfig,
                cert_dir=self.workdir / "controller-manager-certs",
                port=port,
                controllers=controllers,
                service_account_key=self.workdir / "pki" / "sa.key",
                root_ca=self.ca_file,
                extra_args=extra_args,
            ),
        )
        self._wait_until(
            controllermanager.BINARY,
            lambda: controllermanager.controllers_healthy(port, controllers),
            f"/healthz?verbose to list {', '.join(controllers)}",
        )

    def stop_controller_manager(self) -> None:
        """Stop kube-controller-manager (if running); the objects it made stay."""
        proc = self._procs.pop(controllermanager.BINARY, None)
        if proc is not None:
            _terminate(proc)

    # ------------------------------------------------------------------------------- kubectl

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``kubectl --kubeconfig=<ours> *args``; raise KubectlError on failure if check."""
        argv = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", *args]
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise KubectlError(args, result.returncode, result.stdout, result.stderr)
        return result

    def kubectl_json(self, *args: str, timeout: float = 60.0) -> Any:
        """Run ``kubectl *args -o json`` and return the decoded output."""
        return json.loads(self.kubectl(*args, "-o", "json", timeout=timeout).stdout)

    def apply(
        self, path: str | os.PathLike[str], namespace: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``kubectl apply -f path`` (a file, a directory or ``-`` is not supported)."""
        args = ["apply", "-f", os.fspath(path)]
        if namespace is not None:
            args += ["--namespace", namespace]
        return self.kubectl(*args)

    def create_namespace(self, name: str) -> None:
        self.kubectl("create", "namespace", name)

    def add_fake_node(
        self,
        name: str,
        cpu: str | float,
        memory: str | int,
        gpus: int,
        labels: Mapping[str, str] | None = None,
        *,
        pods: int = 110,
        taints: Sequence[Mapping[str, str]] = (),
    ) -> dict[str, Any]:
        """Create a Node for kwok to manage, with capacity = allocatable = the given resources.

        ``cpu`` like ``8`` or ``"7500m"``, ``memory`` like ``"64Gi"`` (an int means bytes),
        ``gpus`` is the ``nvidia.com/gpu`` count (also written when 0). The status is sent with
        the create request: the Node create strategy keeps it (no status subresource call
        needed). Returns the created Node as a dict.
        """
        node = fake_node(name, cpu, memory, gpus, labels, pods=pods, taints=taints)
        created: dict[str, Any] = json.loads(
            self.kubectl("create", "-f", "-", "-o", "json", input=json.dumps(node)).stdout
        )
        status = created.get("status", {})
        if status.get("allocatable", {}).get(GPU_RESOURCE) is None:
            # Defensive: should an apiserver ever drop status on create, set it explicitly.
            created = json.loads(
                self.kubectl(
                    "patch",
                    "node",
                    name,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    json.dumps({"status": node["status"]}),
                    "-o",
                    "json",
                ).stdout
            )
        return created
