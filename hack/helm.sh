#!/usr/bin/env bash
# Build (once) and cache the helm binary from its Go module, for `helm lint` / `helm template`
# of charts/gangsched and the chart's end-to-end test. No helm package is needed.
#
# Output: ${GANGSCHED_HELM_CACHE:-$HOME/.cache/gangsched/helm}/<version>/helm
# The binary's path is printed as the last line of stdout; all progress goes to stderr.
#
# Environment:
#   GANGSCHED_HELM           an existing helm binary to use instead (printed as it is, after a
#                            check that it runs); nothing is built
#   GANGSCHED_HELM_VERSION   helm.sh/helm/v4 version to build (default v4.3.1)
#   GANGSCHED_HELM_CACHE     cache root (default ~/.cache/gangsched/helm)
#   GANGSCHED_GO             go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GANGSCHED_BUILD_JOBS     go build -p (default: min(nproc, 2))
#
# The version is pinned, not resolved, so a cached build answers without asking the Go module
# proxy. helm v4 needs Go 1.26 or later.
set -euo pipefail

log() { printf '[helm] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ -n "${GANGSCHED_HELM:-}" ]]; then
  [[ -x "$GANGSCHED_HELM" ]] || die "GANGSCHED_HELM=$GANGSCHED_HELM is not executable"
  "$GANGSCHED_HELM" version --short >/dev/null || die "$GANGSCHED_HELM does not run"
  printf '%s\n' "$GANGSCHED_HELM"
  exit 0
fi

VERSION="${GANGSCHED_HELM_VERSION:-v4.3.1}"
CACHE_ROOT="${GANGSCHED_HELM_CACHE:-$HOME/.cache/gangsched/helm}"
OUT="$CACHE_ROOT/$VERSION/helm"

if [[ -x "$OUT" ]]; then
  log "cached: $OUT"
  printf '%s\n' "$OUT"
  exit 0
fi

if [[ -n "${GANGSCHED_GO:-}" ]]; then
  GO="$GANGSCHED_GO"
elif command -v go >/dev/null 2>&1; then
  GO="$(command -v go)"
elif [[ -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
else
  die "no go toolchain found (set GANGSCHED_GO, or GANGSCHED_HELM to an existing helm)"
fi

export GOTOOLCHAIN=local
export CGO_ENABLED=0
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
ncpu="$(nproc 2>/dev/null || echo 2)"
JOBS="${GANGSCHED_BUILD_JOBS:-$((ncpu < 2 ? ncpu : 2))}"

mkdir -p "$CACHE_ROOT"
# One builder at a time per cache root (parallel test workers call this script too).
exec 9>"$CACHE_ROOT/.lock"
flock 9
if [[ -x "$OUT" ]]; then
  log "cached (built by another process): $OUT"
  printf '%s\n' "$OUT"
  exit 0
fi

WORK="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log "building helm.sh/helm/v4/cmd/helm@$VERSION (go: $("$GO" version), jobs: $JOBS)"
start=$SECONDS
pkg=helm.sh/helm/v4/internal/version
(
  cd "$WORK"
  GOBIN="$WORK/bin" "$GO" install -p "$JOBS" -trimpath \
    -ldflags "-s -w -X $pkg.version=$VERSION -X $pkg.gitTreeState=clean" \
    "helm.sh/helm/v4/cmd/helm@$VERSION" >&2
)
mkdir -p "$(dirname "$OUT")"
mv -f "$WORK/bin/helm" "$OUT"
log "built in $((SECONDS - start))s: $OUT ($(($(stat -c %s "$OUT") / 1048576)) MB)"
printf '%s\n' "$OUT"
