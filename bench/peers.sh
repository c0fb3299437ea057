#!/usr/bin/env bash
# Build (once) and cache the peer schedulers the side-by-side benchmark (bench/versus.py) runs
# against gangsched. kube-scheduler comes with the test control plane (hack/control-plane.sh);
# this builds scheduler-plugins' scheduler (kube-scheduler with Coscheduling compiled in) from Go
# modules, and copies the Coscheduling scheduler configuration and the scheduling.x-k8s.io
# PodGroup CRD of the same release beside it. Not part of the test command: only the benchmark
# needs it (about 11 minutes of compile on 2 cores, cold).
#
# Output: ${GANGSCHED_PEERS_CACHE:-$HOME/.cache/gangsched/peers}/scheduler-plugins-<version>/
#   scheduler, scheduler-config.yaml, podgroups-crd.yaml
# The output directory is printed as the last line of stdout; progress goes to stderr.
#
# Environment:
#   GANGSCHED_SP_VERSION   scheduler-plugins version (default v0.34.7: the newest the module
#                          proxy serves; v0.35.0 is refused)
#   GANGSCHED_GO           go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GANGSCHED_BUILD_JOBS   go build -p (default: min(nproc, 2))
set -euo pipefail

log() { printf '[peers] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

SP_VERSION="${GANGSCHED_SP_VERSION:-v0.34.7}"
CACHE_ROOT="${GANGSCHED_PEERS_CACHE:-$HOME/.cache/gangsched/peers}"
OUT_DIR="$CACHE_ROOT/scheduler-plugins-$SP_VERSION"

if [[ -x "$OUT_DIR/scheduler" && -s "$OUT_DIR/scheduler-config.yaml" && -s "$OUT_DIR/podgroups-crd.yaml" ]]; then
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
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -buildvcs=false"
ncpu="$(nproc 2>/dev/null || echo 2)"
JOBS="${GANGSCHED_BUILD_JOBS:-$((ncpu < 2 ? ncpu : 2))}"

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$CACHE_ROOT"

log "scheduler-plugins $SP_VERSION: resolving the module"
sp_dir="$(cd "$work" && "$GO" mod download -json "sigs.k8s.io/scheduler-plugins@$SP_VERSION" \
  | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
[[ -d "$sp_dir" ]] || die "go mod download sigs.k8s.io/scheduler-plugins@$SP_VERSION gave no directory"

# A module's replace lines bind only itself: a module that builds its scheduler must repeat them.
# The module proxy refuses some of the patch releases they name (v0.34.7 of cluster-bootstrap,
# kubectl, cri-api...); for those the newest patch release of the same minor it serves is used.
# The scheduler compiles little of them (most are only in the module graph).
available() { (cd "$work" && "$GO" mod download "$1@$2" >/dev/null 2>&1); }
replaces=""
while read -r mod _ target version; do
  [[ -n "$mod" ]] || continue
  if ! available "$target" "$version"; then
    base="${version%.*}" patch="${version##*.}" found=""
    for ((p = patch - 1; p >= 0; p--)); do
      if available "$target" "$base.$p"; then found="$base.$p"; break; fi
    done
    if [[ -z "$found" ]]; then
      # (legacy-cloud-providers: named in the replaces, needed by nothing the scheduler builds)
      log "the module proxy serves no $base.x of $target; leaving its replace out"
      continue
    fi
    log "$target $version is refused by the module proxy; using $found"
    version="$found"
  fi
  replaces+="	$mod => $target $version"$'\n'
done < <(awk '
  /^replace \(/ {inblock=1; next}
  inblock && /^\)/ {inblock=0; next}
  inblock && /=>/ {print; next}
  /^replace [^(]/ {sub(/^replace /, ""); print}
' "$sp_dir/go.mod")

cd "$work"
cat >go.mod <<EOF
module gangsched.io/bench-peers

go 1.24.0

require sigs.k8s.io/scheduler-plugins $SP_VERSION

replace (
$replaces)
EOF
cat >tools.go <<'EOF'
//go:build tools

package tools

import _ "sigs.k8s.io/scheduler-plugins/cmd/scheduler"
EOF
log "resolving dependencies (go mod tidy)"
"$GO" mod tidy >&2
k8s_minor="$(sed -n 's/^[[:space:]]*k8s\.io\/kubernetes => k8s\.io\/kubernetes v1\.\([0-9]*\)\..*/\1/p' go.mod | head -1)"
k8s_full="$(sed -n 's/^[[:space:]]*k8s\.io\/kubernetes => k8s\.io\/kubernetes \(v[0-9.]*\).*/\1/p' go.mod | head -1)"
ldflags=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$k8s_full -X $pkg.gitMajor=1 -X $pkg.gitMinor=$k8s_minor"
done
log "building sigs.k8s.io/scheduler-plugins/cmd/scheduler (-p $JOBS; minutes when cold)"
start=$SECONDS
"$GO" build -p "$JOBS" -trimpath -ldflags "-s -w$ldflags" -o "$work/scheduler" \
  sigs.k8s.io/scheduler-plugins/cmd/scheduler >&2
log "built in $((SECONDS - start)) s"

tmp_out="$OUT_DIR.tmp.$$"
rm -rf "$tmp_out"
mkdir -p "$tmp_out"
cp "$work/scheduler" "$tmp_out/scheduler"
cp "$sp_dir/manifests/coscheduling/scheduler-config.yaml" "$tmp_out/scheduler-config.yaml"
cp "$sp_dir/config/crd/bases/scheduling.x-k8s.io_podgroups.yaml" "$tmp_out/podgroups-crd.yaml"
chmod -R u+w "$tmp_out"
rm -rf "$OUT_DIR"
mv "$tmp_out" "$OUT_DIR"
printf '%s\n' "$OUT_DIR"
