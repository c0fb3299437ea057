#!/usr/bin/env bash
# The project's one test command: installs what it needs, then runs every check and test.
#   bash hack/test.sh            everything (lint, types, import contracts, unit, property, e2e)
#   bash hack/test.sh -k gang    extra arguments go to pytest
# End-to-end tests need kube-apiserver, etcd, kubectl, kwok, kube-scheduler and
# kube-controller-manager: hack/control-plane.sh builds them from Go modules once (about 10 minutes
# on 2 cores) and caches them by version; the JobSet, LeaderWorkerSet, Kueue, Kubeflow Trainer and
# MPI operator tests need those controllers: hack/controllers.sh builds each the same way (about 10
# minutes for all five on 2 cores, cold); the chart checks need helm: hack/helm.sh
# (2 to 4 minutes).
#   GANGSCHED_TEST_NEXT_K8S=1 bash hack/test.sh   also builds Kubernetes 1.37 (about 15 more
#   minutes, cached) so that tests/e2e/test_kubernetes_next.py reruns the upstream gang API's
#   e2e tests on it; without it that test is skipped, saying so.
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
if [ "${GANGSCHED_TEST_NEXT_K8S:-}" = 1 ]; then
  echo "== control plane, Kubernetes 1.37 (build or reuse)" >&2
  bash hack/control-plane.sh 1.37 >/dev/null
fi
echo "== JobSet, LeaderWorkerSet, Kueue, Kubeflow Trainer, MPI operator (build or reuse)" >&2
GANGSCHED_JOBSET_BIN=$(bash hack/controllers.sh jobset)
GANGSCHED_LWS_BIN=$(bash hack/controllers.sh lws)
GANGSCHED_KUEUE_BIN=$(bash hack/controllers.sh kueue)
GANGSCHED_TRAINER_BIN=$(bash hack/controllers.sh trainer)
GANGSCHED_MPI_BIN=$(bash hack/controllers.sh mpi)
export GANGSCHED_JOBSET_BIN GANGSCHED_LWS_BIN GANGSCHED_KUEUE_BIN GANGSCHED_TRAINER_BIN \
  GANGSCHED_MPI_BIN
echo "== pytest" >&2
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
