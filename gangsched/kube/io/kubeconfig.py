"""Where the API server is and how to talk to it: a kubeconfig file, or in-cluster.

The daemon reads the common cases itself: in a pod, the service account's token (read again
once a minute, as client-go does, so a rotated token is picked up) and CA; a kubeconfig whose
user has a token, a token file, a client certificate or a user name and password. Importing
kubernetes-asyncio (its client models) costs about a quarter of a second of start-up, so it is
imported only for what it alone reads: a user with an ``exec`` credential plugin or an
``auth-provider``, and several kubeconfig files in ``$KUBECONFIG`` to merge. Its
``Configuration`` is turned into a :class:`ClusterConfig` then, its refresh hook included.

Relative paths in a kubeconfig are relative to the file's directory; inline data
(``certificate-authority-data``, ``client-certificate-data``, ``client-key-data``) is written
to private temporary files (what TLS libraries and kopf take), removed when the process exits.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ClusterConfig", "KubeconfigError", "from_kubernetes_asyncio", "load"]

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TOKEN_REFRESH = 60.0  # client-go re-reads a token file once a minute


class KubeconfigError(Exception):
    """The configuration cannot be read or does not say how to reach the API server."""


@dataclass
class ClusterConfig:
    host: str
    ssl_ca_cert: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    verify_ssl: bool = True
    tls_server_name: str | None = None
    proxy: str | None = None
    # the Authorization header: a fixed one, a token file to read, or a refresh callable
    authorization: str | None = None
    token_file: str | None = None
    refresh: Callable[[], Awaitable[str | None]] | None = None
    namespace: str = "default"
    _read_at: float = field(default=-1e18, repr=False)

    async def auth_header(self) -> str | None:
        """The Authorization header to send now (a token file is read again once a minute;
        :meth:`invalidate` makes the next call read it at once)."""
        if self.token_file:
            now = time.monotonic()
            if now - self._read_at >= TOKEN_REFRESH:
                self._read_at = now
                try:
                    token = Path(self.token_file).read_text().strip()
                except OSError:
                    token = ""
                if token:
                    self.authorization = f"Bearer {token}"
        elif self.refresh is not None:
            now = time.monotonic()
            if now - self._read_at >= TOKEN_REFRESH:
                self._read_at = now
                header = await self.refresh()
                if header:
                    self.authorization = header
        return self.authorization

    def invalidate(self) -> None:
        self._read_at = -1e18

    @property
    def bearer_token(self) -> str | None:
        """The token of a ``Bearer`` header, if that is how this authenticates."""
        header = self.authorization or ""
        return header[7:] if header.startswith("Bearer ") else None


# ---- inline data ---------------------------------------------------------------------------
_data_dir: str | None = None


def _data_file(data: str, name: str) -> str:
    """Base64 ``data`` from a kubeconfig, written to a file only this user can read."""
    global _data_dir
    if _data_dir is None:
        _data_dir = tempfile.mkdtemp(prefix="gangsched-kubeconfig-")
        atexit.register(shutil.rmtree, _data_dir, True)
    try:
        raw = base64.b64decode(data, validate=False)
    except ValueError as e:
        raise KubeconfigError(f"{name}: not base64: {e}") from e
    fd, path = tempfile.mkstemp(dir=_data_dir, prefix=name + "-")
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
    return path


# ---- loading -------------------------------------------------------------------------------
async def load(kubeconfig: str | None, context: str | None = None) -> ClusterConfig:
    """A kubeconfig file when given (or ``$KUBECONFIG``, or ``~/.kube/config`` outside a
    pod), else in-cluster."""
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if path:
        paths = [p for p in path.split(os.pathsep) if p]
        if not os.path.exists(os.path.expanduser(paths[0])):
            raise KubeconfigError(f"kubeconfig {path} does not exist")
        if len(paths) > 1:
            return await _with_kubernetes_asyncio(path, context)
        return await _from_file(Path(os.path.expanduser(paths[0])), context)
    if in_cluster:
        return _in_cluster()
    default = Path.home() / ".kube" / "config"
    if not default.exists():
        raise KubeconfigError(
            f"no kubeconfig ({default} does not exist, $KUBECONFIG is not set) and not "
            "running in a pod"
        )
    return await _from_file(default, context)


def _in_cluster() -> ClusterConfig:
    host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "")
    if not host or not port:
        raise KubeconfigError("in a pod, but KUBERNETES_SERVICE_HOST/PORT are not both set")
    if ":" in host:
        host = f"[{host}]"  # IPv6
    token = SERVICE_ACCOUNT / "token"
    ca = SERVICE_ACCOUNT / "ca.crt"
    if not token.exists():
        raise KubeconfigError(f"in a pod, but the service account token {token} is missing")
    namespace = "default"
    ns_file = SERVICE_ACCOUNT / "namespace"
    if ns_file.exists():
        namespace = ns_file.read_text().strip() or "default"
    return ClusterConfig(
        host=f"https://{host}:{port}",
        ssl_ca_cert=str(ca) if ca.exists() else None,
        token_file=str(token),
        namespace=namespace,
    )


def _named(items: object, name: str, what: str, where: Path) -> Mapping[str, Any]:
    for item in items if isinstance(items, list) else []:
        if isinstance(item, Mapping) and item.get("name") == name:
            body = item.get(what)
            return body if isinstance(body, Mapping) else {}
    raise KubeconfigError(f"{where}: no {what} named {name!r}")


async def _from_file(path: Path, context: str | None) -> ClusterConfig:
    import yaml

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise KubeconfigError(f"{path}: {e}") from e
    if not isinstance(doc, Mapping):
        raise KubeconfigError(f"{path}: not a kubeconfig")
    name = context or doc.get("current-context")
    if not name:
        raise KubeconfigError(f"{path}: no context given and no current-context")
    ctx = _named(doc.get("contexts"), str(name), "context", path)
    cluster = _named(doc.get("clusters"), str(ctx.get("cluster", "")), "cluster", path)
    user: Mapping[str, Any] = {}
    if ctx.get("user"):
        user = _named(doc.get("users"), str(ctx["user"]), "user", path)
    if "exec" in user or "auth-provider" in user:
        # credential plugins and auth providers: what kubernetes-asyncio implements
        return await _with_kubernetes_asyncio(str(path), context)
    server = cluster.get("server")
    if not isinstance(server, str) or not server:
        raise KubeconfigError(f"{path}: cluster {ctx.get('cluster')!r} has no server")
    base = path.parent

    def local(value: object) -> str | None:
        if not isinstance(value, str) or not value:
            return None
        p = Path(os.path.expanduser(value))
        return str(p if p.is_absolute() else base / p)

    def pick(section: Mapping[str, Any], key: str) -> str | None:
        data = section.get(f"{key}-data")
        if isinstance(data, str) and data:
            return _data_file(data, key)
        return local(section.get(key))

    cfg = ClusterConfig(
        host=server.rstrip("/"),
        ssl_ca_cert=pick(cluster, "certificate-authority"),
        cert_file=pick(user, "client-certificate"),
        key_file=pick(user, "client-key"),
        verify_ssl=not bool(cluster.get("insecure-skip-tls-verify")),
        tls_server_name=cluster.get("tls-server-name") or None,
        proxy=cluster.get("proxy-url") or None,
        namespace=str(ctx.get("namespace") or "default"),
    )
    token = user.get("token")
    if isinstance(token, str) and token:
        cfg.authorization = f"Bearer {token}"
    elif user.get("tokenFile"):
        cfg.token_file = local(user.get("tokenFile"))
    elif user.get("username") and user.get("password"):
        raw = f"{user['username']}:{user['password']}".encode()
        cfg.authorization = "Basic " + base64.b64encode(raw).decode("ascii")
    return cfg


async def _with_kubernetes_asyncio(path: str, context: str | None) -> ClusterConfig:
    from kubernetes_asyncio import config as kconfig
    from kubernetes_asyncio.client import Configuration

    cfg = Configuration()
    try:
        await kconfig.load_kube_config(
            config_file=path, context=context, client_configuration=cfg, persist_config=False
        )
    except kconfig.ConfigException as e:
        raise KubeconfigError(str(e)) from e
    return from_kubernetes_asyncio(cfg)


def from_kubernetes_asyncio(cfg: Any) -> ClusterConfig:
    """A kubernetes-asyncio ``Configuration`` as a :class:`ClusterConfig` (its credential
    asked for through the configuration, refresh hook included)."""

    async def refresh() -> str | None:
        if "BearerToken" in (cfg.api_key or {}) or cfg.refresh_api_key_hook is not None:
            token = await cfg.get_api_key_with_prefix("BearerToken")
            if token:
                return str(token)
        if cfg.username or cfg.password:
            return str(cfg.get_basic_auth_token())
        return None

    return ClusterConfig(
        host=str(cfg.host).rstrip("/"),
        ssl_ca_cert=cfg.ssl_ca_cert or None,
        cert_file=cfg.cert_file or None,
        key_file=cfg.key_file or None,
        verify_ssl=bool(cfg.verify_ssl),
        tls_server_name=getattr(cfg, "tls_server_name", None) or None,
        proxy=cfg.proxy or None,
        refresh=refresh,
    )
