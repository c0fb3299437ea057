#!/usr/bin/env bash
# Build (once) and cache Volcano's scheduler (vc-scheduler) for the side-by-side benchmark
# (bench/versus.py --schedulers volcano). Built from the volcano.sh/volcano Go module of a
# release (its own go.mod, with its replace lines and the volcano.sh/apis staging module it
# carries), with the CRDs of the same release beside it. Not part of the test command: only
# the benchmark needs it.
#
# Output: ${GANGSCHED_PEERS_CACHE:-$HOME/.cache/gangsched/peers}/volcano-<version>/
#   vc-scheduler, crds/*.yaml, scheduler.conf
# The output directory is printed as the last line of stdout; progress goes to stderr.
#
# Environment:
#   GANGSCHED_VOLCANO_VERSION  Volcano version (default v1.15.0: the module proxy serves it;
#                              v1.13.x and v1.16.x were refused when this was written)
#   GANGSCHED_GO               go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GANGSCHED_BUILD_JOBS       go build -p (default: min(nproc, 2))
set -euo pipefail

log() { printf '[peers] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

VERSION="${GANGSCHED_VOLCANO_VERSION:-v1.15.0}"
CACHE_ROOT="${GANGSCHED_PEERS_CACHE:-$HOME/.cache/gangsched/peers}"
OUT_DIR="$CACHE_ROOT/volcano-$VERSION"

if [[ -x "$OUT_DIR/vc-scheduler" && -s "$OUT_DIR/scheduler.conf" && -d "$OUT_DIR/crds" ]]; then
  printf '%s\n' "$OUT_DIR"
  exit 0
fi

if [[ -n "${GANGSCHED_GO:-}" ]]; then
  GO="$GANGSCHED_GO"
elif command -v go >/dev/null 2>&1; then
  GO="$(command -v go)"
elif [[ -x /usr/local/go/bin/go ]]; then
  GO=/usr/local/go/bin/go
else
  die "no go toolchain found (set GANGSCHED_GO)"
fi
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false -mod=mod"
ncpu="$(nproc 2>/dev/null || echo 2)"
JOBS="${GANGSCHED_BUILD_JOBS:-$((ncpu < 2 ? ncpu : 2))}"

work="$(mktemp -d)"
trap 'chmod -R u+w "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$CACHE_ROOT"

log "volcano $VERSION: resolving the module"
mod_dir="$(cd "$work" && "$GO" mod download -json "volcano.sh/volcano@$VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$mod_dir" ]] || die "go mod download volcano.sh/volcano@$VERSION gave no directory"

# The module is its own main module here (its replace lines apply): a writable copy.
src="$work/volcano"
cp -r "$mod_dir" "$src"
chmod -R u+w "$src"
log "volcano $VERSION: building cmd/scheduler (-p $JOBS)"
(cd "$src" && "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" -o "$work/vc-scheduler" \
  ./cmd/scheduler) >&2 || die "go build ./cmd/scheduler failed (volcano.sh/volcano@$VERSION)"

stage="$work/out"
mkdir -p "$stage/crds"
cp "$work/vc-scheduler" "$stage/"
cp "$src"/config/crd/volcano/bases/*.yaml "$stage/crds/"
# Volcano's default scheduler configuration, as its helm chart installs it (enqueue, allocate,
# backfill; gang scheduling in the first tier).
cp "$src/installer/helm/chart/volcano/config/volcano-scheduler.conf" "$stage/scheduler.conf"
rm -rf "$OUT_DIR"
mv "$stage" "$OUT_DIR"
log "volcano $VERSION: built into $OUT_DIR"
printf '%s\n' "$OUT_DIR"
