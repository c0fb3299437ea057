#!/usr/bin/env bash
# Build (once) and cache kube-apiserver, kubectl, kube-scheduler, kube-controller-manager, etcd
# and kwok from Go modules, and print the directory that holds them (last line of stdout). The
# script itself ships in the dev tools' package (gangsched_dev/devcluster/control-plane.sh), so
# `gangsched dev-cluster` finds it in an installed wheel too; this is its name in a checkout. Its
# header documents the environment.
set -euo pipefail
exec bash "$(dirname "$0")/../gangsched_dev/devcluster/control-plane.sh" "$@"
