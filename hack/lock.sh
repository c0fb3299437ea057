#!/usr/bin/env bash
# Regenerate the lock files, with the sha256 of every distribution file of each pinned version:
#   requirements.lock      the runtime dependencies ([project.dependencies]): what the image
#                          installs (Dockerfile) and what the package is tested with;
#   requirements-dev.lock  the same pins plus the dev extra and the build backend (setuptools,
#                          wheel), for hack/test.sh.
# Both are installed with `pip install --require-hashes`. Resolved for CPython 3.11 on Linux
# (the image's Python); run this with such a python3.
#
#   bash hack/lock.sh                                 keep existing pins, add what is new
#   bash hack/lock.sh --upgrade                       newest versions pyproject.toml allows
#   bash hack/lock.sh --upgrade-package aiohttp       one package (and what it needs)
# Extra arguments go to both pip-compile runs. pip-tools runs from a throwaway virtualenv.
set -euo pipefail
cd "$(dirname "$0")/.."

PIP_TOOLS_VERSION=7.6.2
PYTHON=${PYTHON:-python3}
TOOLS="$(mktemp -d)"
trap 'rm -rf "$TOOLS"' EXIT
"$PYTHON" -m venv "$TOOLS/venv"
"$TOOLS/venv/bin/python" -m pip install -q --disable-pip-version-check \
  "pip-tools==$PIP_TOOLS_VERSION"

# Files only (no --find-links lines from a local pip configuration), and one header command.
compile() {
  PIP_FIND_LINKS="" CUSTOM_COMPILE_COMMAND="bash hack/lock.sh" \
    "$TOOLS/venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
    --no-emit-find-links --no-emit-index-url "$@"
}

compile --output-file requirements.lock "$@" pyproject.toml
# Constrained to requirements.lock: the dev environment runs exactly the versions that ship.
compile --output-file requirements-dev.lock --extra dev --all-build-deps \
  --constraint requirements.lock "$@" pyproject.toml
echo "requirements.lock: $(grep -c '==' requirements.lock) pins;" \
  "requirements-dev.lock: $(grep -c '==' requirements-dev.lock) pins" >&2
