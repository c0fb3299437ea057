#!/usr/bin/env bash
# Build (once) and cache a job controller that the e2e tests and the dev cluster run beside the
# control plane, from its Go module, with the manifests of the same module version that running
# it outside a cluster needs (package data of gangsched_dev.devcluster; hack/controllers.sh in a
# checkout runs it; gangsched_dev/devcluster/gomanager.py starts what it builds):
#   <name>-manager                 the controller manager binary (`go build` of the module's
#                                  main package with the module's own go.mod pins)
#   crds/*.yaml                    the module's CRDs (controller-gen's bases)
#   webhook/manifests.yaml         the module's webhook configurations (paths and rules), where
#                                  it has webhooks
#   webhook/patches/*.yaml         the kustomize patches the module applies to them, where it
#                                  has any (mutating-*.yaml, validating-*.yaml)
#
# Controllers (NAME, module, default version; each default is a release built on the
# Kubernetes 1.36 client libraries, k8s.io/client-go v0.36, the series that the dev control
# plane runs; pinned rather than resolved, so that a cached build stays reproducible):
#   jobset  sigs.k8s.io/jobset  v0.12.0
#   lws     sigs.k8s.io/lws     v0.9.0   (LeaderWorkerSet; v0.10.0 is refused by the proxy)
#   kueue   sigs.k8s.io/kueue   v0.19.2  (v0.19.3 and v0.20 are refused by the proxy)
#   trainer github.com/kubeflow/trainer/v2  v2.3.0  (Kubeflow Trainer; v2.3.1 and v2.4 are refused)
#   mpi     github.com/kubeflow/mpi-operator  v0.8.0  (the MPI operator, on client-go v0.35:
#           no release on v0.36 yet; it has no webhooks)
# All but the MPI operator pin the same Kubernetes libraries, so each build after the first
# reuses most of the first one's compiled packages (Go's build cache).
#
# Output: ${GANGSCHED_<NAME>_CACHE:-$HOME/.cache/gangsched/<name>}/<version>/
# The output directory is printed as the last line of stdout; all progress goes to stderr.
#
# Usage: controllers.sh NAME [VERSION]   VERSION overrides GANGSCHED_<NAME>_VERSION.
#
# Environment:
#   GANGSCHED_<NAME>_CACHE    cache root of that controller
#   GANGSCHED_<NAME>_VERSION  its version
#   GANGSCHED_GO              go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GANGSCHED_BUILD_JOBS      go build -p (default: min(nproc, 2))
# The go toolchain must be at least the module's `go` line (go 1.26 for all three); GOTOOLCHAIN
# is local, so an older one fails with go's own message instead of downloading a toolchain.
set -euo pipefail

log() { printf '[controllers] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if (($# < 1 || $# > 2)); then die "usage: $0 jobset|lws|kueue|trainer|mpi [VERSION]"; fi
NAME="$1"
# Per controller (globs quoted: they are expanded in the module's directory): module, default version, main package, CRD files, webhook manifests, the
# directory of the webhook patches, and the version variable ldflags sets.
case "$NAME" in
  jobset)
    MODULE=sigs.k8s.io/jobset DEFAULT=v0.12.0 MAIN=.
    CRDS=(config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml)
    WEBHOOKS=config/components/webhook/manifests.yaml
    PATCHES=('config/components/webhook/patches/*.yaml')
    ;;
  lws)
    MODULE=sigs.k8s.io/lws DEFAULT=v0.9.0 MAIN=./cmd
    CRDS=('config/crd/bases/*.yaml')
    WEBHOOKS=config/webhook/manifests.yaml
    PATCHES=(config/webhook/mutating-patch.yaml config/webhook/validating-patch.yaml)
    ;;
  kueue)
    MODULE=sigs.k8s.io/kueue DEFAULT=v0.19.2 MAIN=./cmd/kueue
    CRDS=('config/components/crd/bases/*.yaml')
    WEBHOOKS=config/components/webhook/manifests.yaml
    PATCHES=()
    ;;
  trainer)
    MODULE=github.com/kubeflow/trainer/v2 DEFAULT=v2.3.0 MAIN=./cmd/trainer-controller-manager
    CRDS=('manifests/base/crds/trainer.kubeflow.org_*.yaml')
    WEBHOOKS=manifests/base/webhook/manifests.yaml
    PATCHES=()  # they only rename the service and the configurations
    ;;
  mpi)
    MODULE=github.com/kubeflow/mpi-operator DEFAULT=v0.8.0 MAIN=./cmd/mpi-operator
    CRDS=(manifests/base/kubeflow.org_mpijobs.yaml)
    WEBHOOKS=""
    PATCHES=()
    ;;
  *) die "unknown controller $NAME (jobset, lws, kueue, trainer or mpi)" ;;
esac
UPPER="$(printf '%s' "$NAME" | tr '[:lower:]' '[:upper:]')"
version_var="GANGSCHED_${UPPER}_VERSION"
cache_var="GANGSCHED_${UPPER}_CACHE"
VERSION="${2:-${!version_var:-$DEFAULT}}"
CACHE_ROOT="${!cache_var:-$HOME/.cache/gangsched/$NAME}"
case "$VERSION" in
  v[0-9]*.[0-9]*.[0-9]*) ;;
  [0-9]*.[0-9]*.[0-9]*) VERSION="v$VERSION" ;;
  *) die "not a $NAME release: $VERSION (try $DEFAULT)" ;;
esac
BINARY="$NAME-manager"

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

complete_dir() {
  [[ -x "$OUT_DIR/$BINARY" ]] && compgen -G "$OUT_DIR/crds/*.yaml" >/dev/null \
    && { [[ -z "$WEBHOOKS" ]] || [[ -s "$OUT_DIR/webhook/manifests.yaml" ]]; }
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
[[ -z "$WEBHOOKS" || -s "$dir/$WEBHOOKS" ]] || die "$MODULE@$VERSION has no $WEBHOOKS"

log "building $BINARY from $MODULE@$VERSION"
mkdir -p "$WORK/out/crds" "$WORK/out/webhook/patches"
# Built as the main module, in its (read-only) module cache directory: exactly its go.mod and
# go.sum pins. (`go install module@version` would first ask the proxy for the module's version
# list, to look for a deprecation notice; some proxies refuse that list.)
"$GO" build -C "$dir" -mod=readonly -p "$JOBS" -trimpath \
  -ldflags "-s -w -X $MODULE/pkg/version.GitVersion=$VERSION -X $MODULE/pkg/version.GitCommit=$VERSION" \
  -o "$WORK/out/$BINARY" "$MAIN" >&2
for f in "${CRDS[@]}"; do
  (cd "$dir" && for g in $f; do
    [[ -s "$g" ]] || die "$MODULE@$VERSION has no $g"
    cp "$g" "$WORK/out/crds/"
  done)
done
if [[ -n "$WEBHOOKS" ]]; then cp "$dir/$WEBHOOKS" "$WORK/out/webhook/manifests.yaml"; fi
for f in "${PATCHES[@]}"; do
  (cd "$dir" && for g in $f; do
    if [[ -s "$g" ]]; then cp "$g" "$WORK/out/webhook/patches/"; fi
  done)
done
chmod -R u+w "$WORK/out"

# Publish the whole directory at once: a reader never sees a half-written version.
rm -rf "$OUT_DIR"
mv "$WORK/out" "$OUT_DIR"
complete_dir || die "build finished but $OUT_DIR is incomplete"
log "built in $((SECONDS - start))s: $BINARY" \
  "$(($(stat -c %s "$OUT_DIR/$BINARY") / 1048576)) MB"
printf '%s\n' "$OUT_DIR"
