#!/usr/bin/env bash
# The project's one test command: installs what it needs, then runs every check and test.
#   bash hack/test.sh            everything (lint, types, import contracts, unit, property, e2e)
#   bash hack/test.sh -k gang    extra arguments go to pytest
# End-to-end tests need kube-apiserver, etcd, kubectl, kwok, kube-scheduler and
# kube-controller-manager: hack/control-plane.sh builds them from Go modules once (about 10 minutes
# on 2 cores) and caches them by version; the chart checks need helm: hack/helm.sh builds it
# the same way (2 to 4 minutes).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# What ships is what is tested: the locked versions, each file checked against its sha256
# (requirements-dev.lock holds requirements.lock's pins, the dev tools and the build backend;
# hack/lock.sh makes both), then the project alone, built with that locked backend.
.venv/bin/python -m pip install -q --disable-pip-version-check --require-hashes \
  -r requirements-dev.lock
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
  -e .

echo "== ruff" >&2
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict" >&2
.venv/bin/mypy
echo "== import contracts" >&2
.venv/bin/lint-imports
echo "== helm chart" >&2
GANGSCHED_HELM=$(bash hack/helm.sh)
export GANGSCHED_HELM
.venv/bin/python hack/chart_schema.py --check
"$GANGSCHED_HELM" lint --strict charts/gangsched
"$GANGSCHED_HELM" lint --strict charts/gangsched --set serviceMonitor.enabled=true \
  --set namespace.create=true
"$GANGSCHED_HELM" template gangsched charts/gangsched --namespace gangsched-system >/dev/null
echo "== control plane (build or reuse)" >&2
GANGSCHED_CP_BIN=$(bash hack/control-plane.sh)
export GANGSCHED_CP_BIN
echo "== pytest" >&2
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
