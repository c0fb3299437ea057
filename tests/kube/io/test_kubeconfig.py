"""Reading where the API server is: kubeconfig users with a token, a token file, a client
certificate (files or inline data) or a password; clusters' CA, TLS and proxy settings; the
pod's service account in-cluster; exec credential plugins through kubernetes-asyncio; clear
errors for what cannot be read. And the daemon's start does not import kubernetes-asyncio."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gangsched.kube.io import kubeconfig
from gangsched.kube.io.kubeconfig import KubeconfigError, load


def _write(path: Path, user: dict[str, Any], cluster: dict[str, Any] | None = None) -> Path:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ml",
        "contexts": [
            {"name": "ml", "context": {"cluster": "c", "user": "u", "namespace": "team"}},
            {"name": "other", "context": {"cluster": "c2", "user": "u"}},
        ],
        "clusters": [
            {"name": "c", "cluster": {"server": "https://api.example:6443/", **(cluster or {})}},
            {"name": "c2", "cluster": {"server": "https://other:6443"}},
        ],
        "users": [{"name": "u", "user": user}],
    }
    path.write_text(yaml.safe_dump(doc))
    return path


async def test_a_token_user_and_a_ca_file_relative_to_the_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / "ca.crt").write_text("CA")
    cfg = await load(
        str(_write(tmp_path / "config", {"token": "t0k"}, {"certificate-authority": "ca.crt"}))
    )
    assert cfg.host == "https://api.example:6443"
    assert cfg.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert await cfg.auth_header() == "Bearer t0k"
    assert cfg.namespace == "team" and cfg.verify_ssl and cfg.proxy is None


async def test_inline_certificate_data_is_written_to_private_files(tmp_path: Path) -> None:
    def b64(text: str) -> str:
        return base64.b64encode(text.encode()).decode()

    path = _write(
        tmp_path / "config",
        {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY")},
        {"certificate-authority-data": b64("CA")},
    )
    cfg = await load(str(path))
    assert cfg.ssl_ca_cert and cfg.cert_file and cfg.key_file
    assert Path(cfg.ssl_ca_cert).read_text() == "CA"
    assert Path(cfg.cert_file).read_text() == "CERT"
    assert Path(cfg.key_file).read_text() == "KEY"
    assert Path(cfg.key_file).stat().st_mode & 0o077 == 0
    assert await cfg.auth_header() is None


async def test_a_token_file_is_read_again_when_invalidated(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    cfg = await load(str(_write(tmp_path / "config", {"tokenFile": "token"})))
    assert await cfg.auth_header() == "Bearer first"
    token.write_text("second")
    assert await cfg.auth_header() == "Bearer first"  # read once a minute
    cfg.invalidate()  # (a 401)
    assert await cfg.auth_header() == "Bearer second"


async def test_basic_auth_tls_settings_proxy_and_another_context(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "config",
        {"username": "me", "password": "pw"},
        {
            "insecure-skip-tls-verify": True,
            "tls-server-name": "api.internal",
            "proxy-url": "http://proxy:3128",
        },
    )
    cfg = await load(str(path))
    assert await cfg.auth_header() == "Basic " + base64.b64encode(b"me:pw").decode()
    assert not cfg.verify_ssl and cfg.tls_server_name == "api.internal"
    assert cfg.proxy == "http://proxy:3128"
    other = await load(str(path), "other")
    assert other.host == "https://other:6443" and other.namespace == "default"


async def test_an_exec_credential_plugin_goes_through_kubernetes_asyncio(tmp_path: Path) -> None:
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-plugin"},
    }
    plugin = tmp_path / "plugin.sh"
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    user = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": str(plugin),
            "interactiveMode": "Never",
        }
    }
    cfg = await load(str(_write(tmp_path / "config", user)))
    assert cfg.host == "https://api.example:6443"
    assert await cfg.auth_header() == "Bearer from-plugin"


@pytest.mark.parametrize(
    ("doc", "context", "match"),
    [
        ("not: [a, kubeconfig", None, "config"),
        ("- a list", None, "not a kubeconfig"),
        (
            yaml.safe_dump({"contexts": [], "clusters": [], "users": []}),
            None,
            "no context given",
        ),
    ],
)
async def test_what_cannot_be_read_is_a_clear_error(
    tmp_path: Path, doc: str, context: str | None, match: str
) -> None:
    path = tmp_path / "config"
    path.write_text(doc)
    with pytest.raises(KubeconfigError, match=match):
        await load(str(path), context)


async def test_missing_files_contexts_and_servers_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(KubeconfigError, match="does not exist"):
        await load(str(tmp_path / "nope"))
    path = _write(tmp_path / "config", {"token": "t"})
    with pytest.raises(KubeconfigError, match="no context named 'gone'"):
        await load(str(path), "gone")
    doc = yaml.safe_load(path.read_text())
    doc["clusters"][0]["cluster"] = {}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(KubeconfigError, match="has no server"):
        await load(str(path))


async def test_in_cluster_the_service_account_token_and_ca(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("sa-token")
    (tmp_path / "ca.crt").write_text("CA")
    (tmp_path / "namespace").write_text("gangsched-system")
    monkeypatch.setattr(kubeconfig, "SERVICE_ACCOUNT", tmp_path)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    cfg = await load(None)
    assert cfg.host == "https://[fd00::1]:443"
    assert cfg.ssl_ca_cert == str(tmp_path / "ca.crt")
    assert await cfg.auth_header() == "Bearer sa-token"
    assert cfg.namespace == "gangsched-system"
    (tmp_path / "token").unlink()
    with pytest.raises(KubeconfigError, match="token"):
        await load(None)


def test_the_daemon_starts_without_importing_kubernetes_asyncio() -> None:
    """Its client models take about a quarter of a second to import: the daemon does not
    need them unless a kubeconfig asks for what only kubernetes-asyncio reads."""
    code = "import sys, gangsched.app, gangsched.cli_kube; print(sorted(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules = out.stdout
    assert "kubernetes_asyncio" not in modules and "'kopf'" not in modules
