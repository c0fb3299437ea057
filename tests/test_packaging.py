"""What ships: the license, the lock files, the copies of the CRD, every setting at its default,
a wheel that runs the dev cluster's binary lookup without a checkout, and the image's wheel,
which holds the scheduler without its dev tools. No cluster, no Go build, no Docker."""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from gangsched.settings import Settings, load_settings

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "gangsched"
CRD = "podgroups.gangsched.io.yaml"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())

# sha256 of the Apache License 2.0 as the Apache Software Foundation publishes it
# (LICENSE-2.0.txt, with its appendix), byte for byte.
APACHE_2_0_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_is_the_apache_2_0_text_the_metadata_names() -> None:
    text = (REPO / "LICENSE").read_bytes()
    assert hashlib.sha256(text).hexdigest() == APACHE_2_0_SHA256
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    chart = (REPO / "charts" / "gangsched" / "Chart.yaml").read_text()
    assert "licenses: Apache-2.0" in chart
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (REPO / "Dockerfile").read_text()


# ---- lock files ----------------------------------------------------------------------------

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$")
_HASH = re.compile(r"^    --hash=sha256:([0-9a-f]{64})(?: \\)?$")


def _lock(name: str) -> dict[str, tuple[str, frozenset[str]]]:
    """{canonical name: (version, sha256s)}; fails on any line a hash-checked install refuses."""
    pins: dict[str, tuple[str, frozenset[str]]] = {}
    current: tuple[str, str] | None = None
    hashes: set[str] = set()

    def close() -> None:
        if current is not None:
            assert hashes, f"{name}: {current[0]} has no --hash"
            pins[canonicalize_name(current[0])] = (current[1], frozenset(hashes))

    for line in (REPO / name).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if m := _PIN.match(line):
            close()
            current, hashes = (m[1], m[2]), set()
        elif m := _HASH.match(line):
            hashes.add(m[1])
        else:
            raise AssertionError(f"{name}: unexpected line {line!r} (options, links, editables?)")
    close()
    return pins


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def test_runtime_lock_pins_every_dependency_with_hashes() -> None:
    lock = _lock("requirements.lock")
    assert _names(PYPROJECT["project"]["dependencies"]) <= set(lock)
    assert "gangsched" not in lock
    # the dev tools stay out of the image
    assert not {"pytest", "mypy", "ruff", "hypothesis"} & set(lock)
    assert "bash hack/lock.sh" in (REPO / "requirements.lock").read_text()


def _third_party_imports(package: Path) -> set[str]:
    """The top-level names of the modules that ``package`` imports from outside the project
    and the standard library."""
    names: set[str] = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names - set(sys.stdlib_module_names) if not n.startswith("gangsched")}


def test_every_third_party_import_of_the_scheduler_is_declared() -> None:
    """A module the scheduler imports comes from a dependency of its own, not only through
    another one's requirements (which a new release may drop). Lazy imports may come from an
    extra (``plot``: matplotlib)."""
    declared = _names(PYPROJECT["project"]["dependencies"])
    extras = {
        name
        for extra, requirements in PYPROJECT["project"]["optional-dependencies"].items()
        if extra != "dev"
        for name in _names(requirements)
    }
    distributions = importlib.metadata.packages_distributions()
    imported = _third_party_imports(REPO / "gangsched")
    assert {"aiohttp", "kubernetes_asyncio", "yaml"} <= imported
    undeclared = {
        module: distributions.get(module)
        for module in imported
        if not {canonicalize_name(d) for d in distributions.get(module, [])} & (declared | extras)
    }
    assert not undeclared, f"imported, not declared in pyproject.toml: {undeclared}"


def test_dev_lock_runs_exactly_the_runtime_pins() -> None:
    """The tests run the versions (and files) that ship, plus the dev tools and the build
    backend that hack/test.sh installs the project with."""
    runtime, dev = _lock("requirements.lock"), _lock("requirements-dev.lock")
    differ = {n: (v, dev.get(n)) for n, v in runtime.items() if dev.get(n) != v}
    assert not differ, f"requirements-dev.lock differs from requirements.lock: {differ}"
    assert _names(PYPROJECT["project"]["optional-dependencies"]["dev"]) <= set(dev)
    build = _names(PYPROJECT["build-system"]["requires"])
    assert build <= set(dev), f"the build backend is not locked: {build - set(dev)}"


def test_the_test_command_and_the_image_install_from_the_locks_with_hashes() -> None:
    test_sh = (REPO / "hack" / "test.sh").read_text()
    assert "--require-hashes" in test_sh and "-r requirements-dev.lock" in test_sh
    assert "--no-deps --no-build-isolation" in test_sh
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "--require-hashes --no-deps -r requirements.lock" in dockerfile
    assert "!LICENSE" in (REPO / ".dockerignore").read_text()


def test_dockerfile_pins_its_base_image_by_digest() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    (image,) = re.findall(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.MULTILINE)
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", image), image
    assert "imagetools inspect" in dockerfile  # how to update it
    froms = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert froms and all(f == "${PYTHON_IMAGE}" for f in froms), froms
    assert f"EXPOSE {_default_port()}" in dockerfile


def _default_port() -> int:
    return int(Settings().http_bind_address.rpartition(":")[2])


def test_metrics_port_is_not_kube_schedulers() -> None:
    assert _default_port() not in (10251, 10259)


# ---- the CRD -------------------------------------------------------------------------------


SYNC_CRDS = "hack/sync-crds.sh"  # copies crds/ (the source) to each of CRD_COPIES
CRD_COPIES = [
    "manifests",  # kustomize refuses files outside its directory
    "charts/gangsched/crds",  # Helm installs a chart's crds/
    "gangsched_dev/devcluster/crds",  # package data: the dev cluster from a wheel
]


@pytest.mark.parametrize("copy", CRD_COPIES)
def test_every_copy_of_the_crd_is_the_crd(copy: str) -> None:
    original = (REPO / "crds" / CRD).read_bytes()
    assert (REPO / copy / CRD).read_bytes() == original, (
        f"{copy}/{CRD} drifted from crds/, its source: edit crds/{CRD}, then run bash {SYNC_CRDS}"
    )


def test_the_sync_script_writes_every_copy(tmp_path: Path) -> None:
    text = (REPO / SYNC_CRDS).read_text()
    block = re.search(r"^COPIES=\((.*?)^\)", text, re.MULTILINE | re.DOTALL)
    assert block is not None, f"{SYNC_CRDS} lists the copies in COPIES=( ... )"
    assert block.group(1).split() == CRD_COPIES
    # run it on a tree of its own: crds/ and the copies' folders
    (tmp_path / "hack").mkdir()
    shutil.copy(REPO / SYNC_CRDS, tmp_path / SYNC_CRDS)
    shutil.copytree(REPO / "crds", tmp_path / "crds")
    for copy in CRD_COPIES:
        (tmp_path / copy).mkdir(parents=True)
    subprocess.run(["bash", str(tmp_path / SYNC_CRDS)], check=True, capture_output=True)
    for copy in CRD_COPIES:
        assert (tmp_path / copy / CRD).read_bytes() == (REPO / "crds" / CRD).read_bytes()


def test_the_crd_is_defined_only_in_crds_and_its_copies() -> None:
    found = set()
    for root, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "dist")]
        for name in files:
            path = Path(root) / name
            if name.endswith(".yaml") and "name: podgroups.gangsched.io" in path.read_text():
                found.add(path.relative_to(REPO).parent.as_posix())
    assert found == {"crds", *CRD_COPIES}, (
        f"the PodGroup CRD is written once, in crds/, and copied by {SYNC_CRDS}"
    )


# ---- every setting at its default: the chart's values (helm itself: tests/e2e/test_chart.py)
# and the manifests' configuration file (kustomize: tests/e2e/test_deploy.py) ------------------


def test_config_file_lists_every_setting_at_its_default() -> None:
    path = REPO / "manifests" / "config.yaml"
    raw = yaml.safe_load(path.read_text())
    aliases = {info.alias or name for name, info in Settings.model_fields.items()}
    assert set(raw) == aliases, (
        f"missing: {sorted(aliases - set(raw))}, unknown: {sorted(set(raw) - aliases)}"
    )
    assert load_settings(str(path), {}, env={}) == Settings()


def test_values_config_is_every_setting_at_its_default() -> None:
    config = yaml.safe_load((CHART / "values.yaml").read_text())["config"]
    aliases = {info.alias or name for name, info in Settings.model_fields.items()}
    assert set(config) == aliases, (
        f"missing: {sorted(aliases - set(config))}, unknown: {sorted(set(config) - aliases)}"
    )
    assert config["leaseNamespace"] == ""  # the chart fills in the release namespace
    config["leaseNamespace"] = Settings().lease_namespace
    assert load_settings(None, config, env={}) == Settings()


def test_values_schema_is_up_to_date() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "hack" / "chart_schema.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr


# ---- the wheels: from a checkout (scheduler and dev tools) and the image's (scheduler only) ---


def _build_and_install(tmp_path: Path, src: Path) -> tuple[Path, Path]:
    """Build the wheel of ``src`` alone, install it into a fresh virtualenv whose dependencies
    come from this environment; (the wheel, the virtualenv)."""
    dist = tmp_path / "dist"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
        check=True,
        timeout=300,
    )
    (wheel,) = dist.glob("gangsched-*.whl")

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        check=True,
        timeout=300,
    )
    # The dependencies come from this environment (a path, so its editable gangsched is not
    # picked up: that needs this site-packages' own .pth files, which a path entry skips).
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return wheel, venv


def _clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if k not in ("GANGSCHED_CP_BIN", "KUBEBUILDER_ASSETS", "PYTHONPATH")
    }


def _fake_binaries(root: Path, k8s: str, etcd: str, kwok: str) -> Path:
    """A control-plane cache as hack/control-plane.sh leaves it (stand-ins, not binaries)."""
    out = root / f"{k8s}-{etcd}-{kwok}"
    out.mkdir(parents=True)
    for name in (
        "kube-apiserver",
        "kubectl",
        "kube-scheduler",
        "kube-controller-manager",
        "etcd",
        "kwok",
    ):
        path = out / name
        path.write_text("#!/bin/sh\nexit 0\n")
        path.chmod(0o755)
    (out / "kwok-stages.yaml").write_text("kind: Stage\n")
    return out


def test_installed_wheel_finds_the_dev_cluster_binaries_without_a_checkout(
    tmp_path: Path,
) -> None:
    """Build the wheel from the sources alone, install it into a fresh virtualenv, and run the
    dev cluster's "where are my binaries" path from a directory that is no checkout: it runs
    the build script shipped in the wheel, which answers from its cache (no Go build)."""
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(REPO / name, src / name)
    for package in ("gangsched", "gangsched_dev"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    _, venv = _build_and_install(tmp_path, src)
    python = venv / "bin" / "python"

    cache = tmp_path / "cache"
    expected = _fake_binaries(cache, "v1.36.3", "v3.6.16", "v0.8.0")
    env = _clean_env() | {
        "GANGSCHED_CP_CACHE": str(cache),
        "GANGSCHED_K8S_VERSION": "v1.36.3",
        "GANGSCHED_ETCD_VERSION": "v3.6.16",
        "GANGSCHED_KWOK_VERSION": "v0.8.0",
        "GANGSCHED_GO": "/nonexistent/go",  # a build would fail loudly
    }
    probe = (
        "import gangsched, gangsched_dev, json\n"
        "from gangsched_dev.devcluster import find_binaries\n"
        "from gangsched_dev.devcluster.cli import CRDS\n"
        "print(json.dumps({'module': gangsched.__file__, 'dev': gangsched_dev.__file__,"
        " 'bin': str(find_binaries()),"
        " 'crds': sorted(p.name for p in CRDS.glob('*.yaml'))}))\n"
    )
    run = subprocess.run(
        [str(python), "-c", probe],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    found = json.loads(run.stdout.strip().splitlines()[-1])
    assert Path(found["module"]).is_relative_to(venv), found  # the wheel, not the checkout
    assert Path(found["dev"]).is_relative_to(venv), found
    assert Path(found["bin"]) == expected.resolve()
    assert found["crds"] == [CRD]
    assert "cached:" in run.stderr  # the packaged script answered from its cache

    status = subprocess.run(
        [str(venv / "bin" / "gangsched"), "dev-cluster", "status", "--state-dir", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 1 and "no dev-cluster is running" in status.stderr


def _dockerfile_builder_copies() -> list[tuple[list[str], str]]:
    """The builder stage's COPY instructions (sources, destination), in order."""
    dockerfile = (REPO / "Dockerfile").read_text()
    builder = dockerfile.split("\nFROM ")[1]  # up to the runtime stage
    copies = re.findall(r"^COPY (?!--)(.+) (\S+)$", builder, re.MULTILINE)
    return [(sources.split(), dest) for sources, dest in copies]


def test_the_image_builds_the_scheduler_without_its_dev_tools(tmp_path: Path) -> None:
    """The Dockerfile's builder copies, from a build context that .dockerignore cuts down to an
    allow-list, what it installs: build that, as it does, and the wheel holds the scheduler
    only; ``gangsched`` runs without the dev tools' commands."""
    allowed = {
        line[1:].rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.startswith("!")
    }
    assert "gangsched" in allowed and "gangsched_dev" not in allowed
    src = tmp_path / "src"
    src.mkdir()
    for sources, dest in _dockerfile_builder_copies():
        for source in sources:
            assert source in allowed, f"the Dockerfile copies {source}, left out of the context"
            target = src / dest / source if dest.endswith("/") else src / dest
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(REPO / source, target)
    assert (src / "gangsched").is_dir() and not (src / "gangsched_dev").exists()

    wheel, venv = _build_and_install(tmp_path, src)
    with zipfile.ZipFile(wheel) as z:
        packages = {name.split("/")[0] for name in z.namelist() if "/" in name}
    assert "gangsched" in packages and "gangsched_dev" not in packages, packages

    help_ = subprocess.run(
        [str(venv / "bin" / "gangsched"), "--help"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert help_.returncode == 0, help_.stderr
    commands = re.search(r"\{([a-z,-]+)\}", help_.stdout)
    assert commands is not None, help_.stdout
    assert commands[1].split(",") == ["simulate", "run", "status-controller"]
    probe = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import gangsched_dev"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert probe.returncode == 1 and "No module named 'gangsched_dev'" in probe.stderr
