#!/usr/bin/env bash
# Copy the CRDs from their one source, crds/, to every place they ship from:
#   manifests/                  kubectl apply -k refuses files outside manifests/
#   charts/gangsched/crds/      Helm installs a chart's crds/
#   gangsched_dev/devcluster/crds/  package data: the dev cluster from a wheel
# Edit crds/ only, then run this; tests/test_packaging.py fails while a copy differs.
#
#   bash hack/sync-crds.sh
set -euo pipefail
cd "$(dirname "$0")/.."

COPIES=(
  manifests
  charts/gangsched/crds
  gangsched_dev/devcluster/crds
)

for dir in "${COPIES[@]}"; do
  cp crds/*.yaml "$dir/"
done
