#!/usr/bin/env bash
# The project's one test command: installs what it needs, then runs every check and test.
#   bash hack/test.sh            everything (lint, types, import contracts, unit, property, e2e)
#   bash hack/test.sh -k gang    extra arguments go to pytest
# End-to-end tests need kube-apiserver, etcd, kubectl and kwok: hack/control-plane.sh builds
# them from Go modules once (about 6 minutes on 2 cores) and caches them by version.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[dev]'

echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict" >&2
.venv/bin/mypy
echo "== import contracts" >&2
.venv/bin/lint-imports
echo "== control plane (build or reuse)" >&2
GANGSCHED_CP_BIN=$(bash hack/control-plane.sh)
export GANGSCHED_CP_BIN
echo "== pytest" >&2
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
