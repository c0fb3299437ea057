#!/usr/bin/env bash
# Build (once) and cache the JobSet manager (sigs.k8s.io/jobset, the module's main package) from
# Go modules, with the manifests of the same module version that running it beside the dev
# control plane needs (package data of gangsched_dev.devcluster; hack/jobset.sh in a checkout runs
# it; gangsched_dev/devcluster/jobset.py starts what it builds):
#   jobset-manager                         the controller manager binary (`go build` of the
#                                          module's main package with its own go.mod pins)
#   crds/jobset.x-k8s.io_jobsets.yaml      config/components/crd/bases of the module
#   webhook/manifests.yaml, webhook/patches/*.yaml
#                                          config/components/webhook of the module: the webhook
#                                          paths and rules, and the objectSelector patches that
#                                          limit the pod webhooks to JobSet pods
#
# Output: ${GANGSCHED_JOBSET_CACHE:-$HOME/.cache/gangsched/jobset}/<version>/
# The output directory is printed as the last line of stdout; all progress goes to stderr.
#
# Usage: jobset.sh [VERSION]   VERSION: a JobSet release (v0.12.0); the same as
#   GANGSCHED_JOBSET_VERSION, which it overrides. Default: v0.12.0, the newest release built
#   against the Kubernetes 1.36 client libraries (k8s.io/client-go v0.36), the series that the
#   dev control plane runs. It is pinned rather than resolved: a newer JobSet moves to newer
#   client libraries and APIs in its own time, and a pin keeps the cached build reproducible.
#
# Environment:
#   GANGSCHED_JOBSET_CACHE    cache root (default ~/.cache/gangsched/jobset)
#   GANGSCHED_JOBSET_VERSION  JobSet version (default v0.12.0)
#   GANGSCHED_GO              go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GANGSCHED_BUILD_JOBS      go build -p (default: min(nproc, 2))
# The go toolchain must be at least the module's `go` line (go 1.26 for v0.12.0); GOTOOLCHAIN
# is local, so an older one fails with go's own message instead of downloading a toolchain.
set -euo pipefail

log() { printf '[jobset] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if (($# > 1)); then die "usage: $0 [VERSION]"; fi
if (($# == 1)); then GANGSCHED_JOBSET_VERSION="$1"; fi

CACHE_ROOT="${GANGSCHED_JOBSET_CACHE:-$HOME/.cache/gangsched/jobset}"
VERSION="${GANGSCHED_JOBSET_VERSION:-v0.12.0}"
case "$VERSION" in
  v[0-9]*.[0-9]*.[0-9]*) ;;
  [0-9]*.[0-9]*.[0-9]*) VERSION="v$VERSION" ;;
  *) die "not a JobSet release: $VERSION (try v0.12.0)" ;;
esac
MODULE=sigs.k8s.io/jobset

if [[ -n "${GANGSCHED_GO:-}" ]]; then
  GO="$GANGSCHED_GO"
elif command -v go >/dev/null 2>&1; then
  GO="$(command -v go)"
elif [[ -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
else
  GO=""
fi

export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

ncpu="$(nproc 2>/dev/null || echo 2)"
JOBS="${GANGSCHED_BUILD_JOBS:-$((ncpu < 2 ? ncpu : 2))}"

OUT_DIR="$CACHE_ROOT/$VERSION"
CRD=crds/jobset.x-k8s.io_jobsets.yaml

complete_dir() {
  [[ -x "$OUT_DIR/jobset-manager" && -s "$OUT_DIR/$CRD" && -s "$OUT_DIR/webhook/manifests.yaml" ]]
}

if complete_dir; then
  log "cached: $OUT_DIR"
  printf '%s\n' "$OUT_DIR"
  exit 0
fi

[[ -n "$GO" ]] || die "no go toolchain found (set GANGSCHED_GO)"
mkdir -p "$CACHE_ROOT"

# One builder at a time per cache root (parallel test workers call this script too).
exec 9>"$CACHE_ROOT/.lock"
log "waiting for lock $CACHE_ROOT/.lock"
flock 9
if complete_dir; then
  log "cached (built by another process): $OUT_DIR"
  printf '%s\n' "$OUT_DIR"
  exit 0
fi

WORK="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log "go: $("$GO" version)  jobs: $JOBS  work: $WORK"
start=$SECONDS

# The module source (manifests) and, with it, the version's existence on the proxy.
dir="$(cd "$WORK" && "$GO" mod download -json "$MODULE@$VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')" \
  || die "go mod download $MODULE@$VERSION failed (is the Go module proxy reachable?)"
[[ -d "$dir" ]] || die "$MODULE@$VERSION: module directory not found"
for f in config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml \
  config/components/webhook/manifests.yaml; do
  [[ -s "$dir/$f" ]] || die "$MODULE@$VERSION has no $f"
done

log "building jobset-manager from $MODULE@$VERSION"
mkdir -p "$WORK/out/crds" "$WORK/out/webhook/patches"
# Built as the main module, in its (read-only) module cache directory: exactly its go.mod and
# go.sum pins. (`go install module@version` would first ask the proxy for the module's version
# list, to look for a deprecation notice; some proxies refuse that list.)
"$GO" build -C "$dir" -mod=readonly -p "$JOBS" -trimpath \
  -ldflags "-s -w -X $MODULE/pkg/version.GitVersion=$VERSION -X $MODULE/pkg/version.GitCommit=$VERSION" \
  -o "$WORK/out/jobset-manager" . >&2
cp "$dir/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" "$WORK/out/$CRD"
cp "$dir/config/components/webhook/manifests.yaml" "$WORK/out/webhook/manifests.yaml"
if compgen -G "$dir/config/components/webhook/patches/*.yaml" >/dev/null; then
  cp "$dir"/config/components/webhook/patches/*.yaml "$WORK/out/webhook/patches/"
fi
chmod -R u+w "$WORK/out"

# Publish the whole directory at once: a reader never sees a half-written version.
rm -rf "$OUT_DIR"
mv "$WORK/out" "$OUT_DIR"
complete_dir || die "build finished but $OUT_DIR is incomplete"
log "built in $((SECONDS - start))s: jobset-manager" \
  "$(($(stat -c %s "$OUT_DIR/jobset-manager") / 1048576)) MB"
printf '%s\n' "$OUT_DIR"
