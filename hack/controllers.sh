#!/usr/bin/env bash
# Build (once) and cache a job controller (jobset, lws or kueue) from Go modules, with the CRD
# and webhook manifests of the same module version, and print the directory that holds them
# (last line of stdout). The script itself ships in the dev tools' package
# (gangsched_dev/devcluster/controllers.sh); this is its name in a checkout. Its header documents
# the versions and the environment.
#   bash hack/controllers.sh jobset     bash hack/controllers.sh kueue v0.19.2
set -euo pipefail
exec bash "$(dirname "$0")/../gangsched_dev/devcluster/controllers.sh" "$@"
