#!/usr/bin/env bash
# Build (once) and cache the JobSet manager (sigs.k8s.io/jobset) from Go modules, with the CRD
# and webhook manifests of the same module version, and print the directory that holds them
# (last line of stdout). The script itself ships in the dev tools' package
# (gangsched_dev/devcluster/jobset.sh); this is its name in a checkout. Its header documents the
# environment.
set -euo pipefail
exec bash "$(dirname "$0")/../gangsched_dev/devcluster/jobset.sh" "$@"
