"""``kubectl gang`` picks its namespace as kubectl does: -n, else the kubeconfig context's
namespace (default when it names none), -A for all; in a pod without a kubeconfig, the pod's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gangsched import kubectl_gang
from gangsched.kubectl_gang import default_namespace


def _kubeconfig(path: Path, current: str | None, contexts: dict[str, str | None]) -> Path:
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [
            {
                "name": name,
                "context": {"cluster": "c", "user": "u"} | ({"namespace": ns} if ns else {}),
            }
            for name, ns in contexts.items()
        ],
    }
    if current is not None:
        config["current-context"] = current
    path.write_text(json.dumps(config))
    return path


def test_the_current_contexts_namespace(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", "ml", {"ml": "ml-team", "ops": "ops"})
    assert default_namespace(str(path), None, env={}) == "ml-team"


def test_context_flag_picks_another_context(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", "ml", {"ml": "ml-team", "ops": "ops"})
    assert default_namespace(str(path), "ops", env={}) == "ops"


def test_a_context_without_a_namespace_means_default(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "config", "bare", {"bare": None})
    assert default_namespace(str(path), None, env={}) == "default"
    assert default_namespace(str(path), "missing", env={}) == "default"


def test_kubeconfig_env_files_merge_first_wins(tmp_path: Path) -> None:
    """$KUBECONFIG lists files; the first current-context and the first definition of a
    context win, as kubectl merges them; missing files are skipped."""
    first = _kubeconfig(tmp_path / "a", "ml", {"ml": "from-a"})
    second = _kubeconfig(tmp_path / "b", "ops", {"ml": "from-b", "ops": "ops"})
    env = {"KUBECONFIG": f"{tmp_path / 'missing'}:{first}:{second}"}
    assert default_namespace(None, None, env=env) == "from-a"
    env = {"KUBECONFIG": f"{second}:{first}"}
    assert default_namespace(None, None, env=env) == "ops"
    assert default_namespace(None, "ml", env=env) == "from-b"


def test_home_kubeconfig(tmp_path: Path) -> None:
    (tmp_path / ".kube").mkdir()
    _kubeconfig(tmp_path / ".kube" / "config", "ml", {"ml": "ml-team"})
    assert default_namespace(None, None, env={"HOME": str(tmp_path)}) == "ml-team"


def test_in_a_pod_without_a_kubeconfig(tmp_path: Path) -> None:
    sa = tmp_path / "namespace"
    sa.write_text("team-a\n")
    pod = {"HOME": str(tmp_path), "KUBERNETES_SERVICE_HOST": "10.0.0.1"}
    assert default_namespace(None, None, env=pod, service_account_namespace=sa) == "team-a"
    with_env = pod | {"POD_NAMESPACE": "team-b"}
    assert default_namespace(None, None, env=with_env, service_account_namespace=sa) == "team-b"
    missing = tmp_path / "none"
    assert default_namespace(None, None, env=pod, service_account_namespace=missing) == "default"
    # outside a pod the ServiceAccount file is not read
    outside = {"HOME": str(tmp_path)}
    assert default_namespace(None, None, env=outside, service_account_namespace=sa) == "default"


def test_an_unreadable_kubeconfig_means_default(tmp_path: Path) -> None:
    bad = tmp_path / "config"
    bad.write_text("{not yaml: [")
    assert default_namespace(str(bad), None, env={}) == "default"


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        ([], "ml-team"),
        (["-n", "other"], "other"),
        (["--namespace", "other"], "other"),
        (["-A"], None),
        (["--context", "ops"], "ops"),
    ],
)
def test_main_asks_the_namespace_kubectl_would_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: str | None
) -> None:
    path = _kubeconfig(tmp_path / "config", "ml", {"ml": "ml-team", "ops": "ops"})
    monkeypatch.delenv("KUBECONFIG", raising=False)
    asked: list[str | None] = []

    async def fetch(
        kubeconfig: str | None, context: str | None, ns: str | None
    ) -> tuple[list[Any], list[Any]]:
        assert kubeconfig == str(path)
        asked.append(ns)
        return [], []

    monkeypatch.setattr(kubectl_gang, "_fetch", fetch)
    assert kubectl_gang.main(["--kubeconfig", str(path), *argv]) == 0
    assert asked == [expected]
