#!/usr/bin/env bash
# Build (once) and cache the peer schedulers the side-by-side benchmark (bench/versus.py) runs
# against gangsched. kube-scheduler comes with the test control plane (hack/control-plane.sh);
# this builds, from Go modules:
# - (no argument) scheduler-plugins' scheduler (kube-scheduler with Coscheduling compiled in),
#   with the Coscheduling scheduler configuration and the scheduling.x-k8s.io PodGroup CRD of
#   the same release beside it (about 11 minutes of compile on 2 cores, cold);
# - `volcano`: Volcano's scheduler (vc-scheduler) from the volcano.sh/volcano module of a
#   release, with its CRDs and its helm chart's default scheduler configuration;
# - `kai`: NVIDIA's KAI scheduler: its scheduler and its binder (KAI binds through BindRequest
#   objects that the binder carries out), in one go build, with its CRDs.
# Not part of the test command: only the benchmark needs them.
#
# Output: ${GANGSCHED_PEERS_CACHE:-$HOME/.cache/gangsched/peers}/
#   scheduler-plugins-<version>/  scheduler, scheduler-config.yaml, podgroups-crd.yaml
#   volcano-<version>/            vc-scheduler, crds/*.yaml, scheduler.conf
#   kai-<version>/                scheduler, binder, crds/*.yaml (with Kueue's Topology CRD)
# The output directory is printed as the last line of stdout; progress goes to stderr.
#
# Environment:
#   GANGSCHED_SP_VERSION       scheduler-plugins version (default v0.34.7: the newest the
#                              module proxy serves; v0.35.0 is refused)
#   GANGSCHED_VOLCANO_VERSION  Volcano version (default v1.15.0: the module proxy serves it;
#                              v1.13.x and v1.16.x were refused when this was written)
#   GANGSCHED_VOLCANO_APIS     volcano.sh/apis version (default: the release's, else v1.14.0)
#   GANGSCHED_KAI_VERSION      KAI version (default v0.20.1: the one the module proxy serves
#                              from v0.16 on; v0.16-v0.19, v0.21 and v0.22 were refused)
#   GANGSCHED_GO               go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GANGSCHED_BUILD_JOBS       go build -p (default: min(nproc, 2))
set -euo pipefail

log() { printf '[peers] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

PEER="${1:-scheduler-plugins}"
SP_VERSION="${GANGSCHED_SP_VERSION:-v0.34.7}"
VOLCANO_VERSION="${GANGSCHED_VOLCANO_VERSION:-v1.15.0}"
KAI_VERSION="${GANGSCHED_KAI_VERSION:-v0.20.1}"
CACHE_ROOT="${GANGSCHED_PEERS_CACHE:-$HOME/.cache/gangsched/peers}"
case "$PEER" in
  scheduler-plugins)
    OUT_DIR="$CACHE_ROOT/scheduler-plugins-$SP_VERSION"
    built() { [[ -x "$OUT_DIR/scheduler" && -s "$OUT_DIR/scheduler-config.yaml" && -s "$OUT_DIR/podgroups-crd.yaml" ]]; }
    ;;
  volcano)
    OUT_DIR="$CACHE_ROOT/volcano-$VOLCANO_VERSION"
    built() { [[ -x "$OUT_DIR/vc-scheduler" && -s "$OUT_DIR/scheduler.conf" && -d "$OUT_DIR/crds" ]]; }
    ;;
  kai)
    OUT_DIR="$CACHE_ROOT/kai-$KAI_VERSION"
    built() { [[ -x "$OUT_DIR/scheduler" && -x "$OUT_DIR/binder" && -s "$OUT_DIR/crds/kueue.x-k8s.io_topologies.yaml" ]]; }
    ;;
  *) die "unknown peer $PEER (scheduler-plugins, volcano or kai)" ;;
esac

if built; then
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
trap 'chmod -R u+w "$work" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$CACHE_ROOT"

# Publish a staged build directory as $OUT_DIR and print it.
publish() {
  chmod -R u+w "$1"
  rm -rf "$OUT_DIR"
  mv "$1" "$OUT_DIR"
  printf '%s\n' "$OUT_DIR"
}

build_volcano() {
  log "volcano $VOLCANO_VERSION: resolving the module"
  local mod_dir src apis="${GANGSCHED_VOLCANO_APIS:-}" stage="$work/volcano-out" v
  mod_dir="$(cd "$work" && "$GO" mod download -json "volcano.sh/volcano@$VOLCANO_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$mod_dir" ]] || die "go mod download volcano.sh/volcano@$VOLCANO_VERSION gave no directory"
  # The module is its own main module here (its replace lines apply): a writable copy.
  src="$work/volcano"
  cp -r "$mod_dir" "$src"
  chmod -R u+w "$src"
  # Its go.mod points volcano.sh/apis at ./staging/src/volcano.sh/apis, a nested module the
  # module zip leaves out: the published volcano.sh/apis module is used instead.
  if [[ ! -d "$src/staging/src/volcano.sh/apis" ]]; then
    for v in ${apis:-$VOLCANO_VERSION v1.14.0}; do
      if (cd "$work" && "$GO" mod download "volcano.sh/apis@$v" >/dev/null 2>&1); then
        apis="$v"
        break
      fi
      apis=""
    done
    [[ -n "$apis" ]] || die "the module proxy serves none of the volcano.sh/apis versions tried"
    log "volcano $VOLCANO_VERSION: volcano.sh/apis $apis (the staging copy is not in the module zip)"
    cp -r "$(cd "$work" && "$GO" mod download -json "volcano.sh/apis@$apis" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')" "$work/apis"
    chmod -R u+w "$work/apis"
    # The one name v1.15's scheduler uses that volcano.sh/apis v1.14.0 lacks (the proxy
    # refuses v1.15.0 of it), with the value its design document gives.
    if ! grep -rq "QueueAllocationGateKey" "$work/apis/pkg/apis/scheduling/v1beta1"; then
      printf '%s\n' "package v1beta1" "" \
        "// QueueAllocationGateKey: in volcano.sh/apis from v1.15 (added by bench/peers.sh)." \
        'const QueueAllocationGateKey = GroupName + "/queue-allocation-gate"' \
        >"$work/apis/pkg/apis/scheduling/v1beta1/zz_queue_allocation_gate.go"
    fi
    (cd "$src" && "$GO" mod edit -replace "volcano.sh/apis=../apis")
  fi
  log "volcano $VOLCANO_VERSION: building cmd/scheduler (-p $JOBS; minutes when cold)"
  (cd "$src" && GOFLAGS="$GOFLAGS -mod=mod" "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" \
    -o "$work/vc-scheduler" ./cmd/scheduler) >&2 \
    || die "go build ./cmd/scheduler failed (volcano.sh/volcano@$VOLCANO_VERSION)"
  mkdir -p "$stage/crds"
  cp "$work/vc-scheduler" "$stage/"
  cp "$src"/config/crd/volcano/bases/*.yaml "$stage/crds/"
  # the scheduler configuration Volcano's helm chart installs (enqueue, allocate, backfill;
  # gang scheduling in the first tier)
  cp "$src/installer/helm/chart/volcano/config/volcano-scheduler.conf" "$stage/scheduler.conf"
  publish "$stage"
}

build_kai() {
  log "KAI $KAI_VERSION: resolving the module"
  local mod_dir src stage="$work/kai-out"
  mod_dir="$(cd "$work" && "$GO" mod download -json "github.com/NVIDIA/KAI-scheduler@$KAI_VERSION" \
    | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  [[ -d "$mod_dir" ]] || die "go mod download github.com/NVIDIA/KAI-scheduler@$KAI_VERSION gave no directory"
  src="$work/kai"
  cp -r "$mod_dir" "$src"
  chmod -R u+w "$src"
  mkdir -p "$stage/crds"
  log "KAI $KAI_VERSION: building cmd/scheduler and cmd/binder (-p $JOBS; minutes when cold)"
  (cd "$src" && GOFLAGS="$GOFLAGS -mod=mod" "$GO" build -p "$JOBS" -trimpath -ldflags "-s -w" \
    -o "$stage/" ./cmd/scheduler ./cmd/binder) >&2 \
    || die "go build ./cmd/scheduler ./cmd/binder failed (github.com/NVIDIA/KAI-scheduler@$KAI_VERSION)"
  cp "$src"/deployments/kai-scheduler/crds/*.yaml "$stage/crds/"
  # Kueue's Topology CRD: KAI's scheduler watches topologies.kueue.x-k8s.io.
  cp "$src"/deployments/external-crds/*.yaml "$stage/crds/"
  publish "$stage"
}

case "$PEER" in
  volcano) build_volcano; exit 0 ;;
  kai) build_kai; exit 0 ;;
esac

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
publish "$tmp_out"
