#!/usr/bin/env bash
# Build (once) and cache the binaries of a test Kubernetes control plane from Go modules (the
# package data of gangsched_dev.devcluster, so an installed wheel has it; hack/control-plane.sh
# in a checkout runs it):
#   kube-apiserver + kubectl + kube-scheduler + kube-controller-manager (k8s.io/kubernetes, one go
#   build: they share their modules and most packages; kube-scheduler is the reference the
#   differential tests compare gangsched against, kube-controller-manager runs the Job, StatefulSet
#   and ReplicaSet controllers for the tests whose pods come from them), etcd
#   (go.etcd.io/etcd/server/v3), kwok (sigs.k8s.io/kwok) and a kwok stages file (node-initialize,
#   pod-ready, pod-complete, pod-delete) taken from the kwok module; pod-complete finishes the
#   Running pods that a Job owns, so Jobs complete.
#
# Output: ${GANGSCHED_CP_CACHE:-$HOME/.cache/gangsched/control-plane}/<k8s>-<etcd>-<kwok>/
# The output directory is printed as the last line of stdout; all progress goes to stderr.
#
# Usage: control-plane.sh [VERSION]   VERSION: a Kubernetes release (1.37.2, v1.36.3) or a series
#   (1.37: its newest release); the same as GANGSCHED_K8S_VERSION / GANGSCHED_K8S_SERIES, which
#   it overrides. Default: the newest 1.36 release. Each version is cached on its own, so tests
#   pick one with GANGSCHED_CP_BIN=$(control-plane.sh 1.37). The dev control plane turns on what
#   the version needs for the upstream gang API (gangsched_dev/devcluster/featuregates.py).
#
# Environment:
#   GANGSCHED_CP_CACHE       cache root (default ~/.cache/gangsched/control-plane)
#   GANGSCHED_K8S_VERSION    exact k8s.io/kubernetes version (default: newest v${K8S_SERIES}.x)
#   GANGSCHED_ETCD_VERSION   exact etcd version (default: newest v${ETCD_SERIES}.x)
#   GANGSCHED_KWOK_VERSION   kwok version (default v0.8.0)
#   GANGSCHED_K8S_SERIES     default 1.36;  GANGSCHED_ETCD_SERIES  default 3.6
#   GANGSCHED_GO             go binary (default: go on PATH, else /usr/local/go/bin/go)
#   GANGSCHED_BUILD_JOBS     go build -p (default: min(nproc, 2))
#   KUBEBUILDER_ASSETS       dir with any of kube-apiserver/etcd/kubectl: those are used as they
#                            are and only the missing binaries are built. The output directory is
#                            then <cache>/assets-<hash>-<kwok>/ holding symlinks.
set -euo pipefail

log() { printf '[control-plane] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if (($# > 1)); then die "usage: $0 [VERSION]"; fi
if (($# == 1)); then
  case "$1" in
    v[0-9]*.[0-9]*.[0-9]* | [0-9]*.[0-9]*.[0-9]*) GANGSCHED_K8S_VERSION="v${1#v}" ;;
    v[0-9]*.[0-9]* | [0-9]*.[0-9]*) GANGSCHED_K8S_SERIES="${1#v}"; GANGSCHED_K8S_VERSION="" ;;
    *) die "not a Kubernetes version or series: $1 (try 1.36, 1.37 or v1.36.3)" ;;
  esac
fi

CACHE_ROOT="${GANGSCHED_CP_CACHE:-$HOME/.cache/gangsched/control-plane}"
K8S_SERIES="${GANGSCHED_K8S_SERIES:-1.36}"
ETCD_SERIES="${GANGSCHED_ETCD_SERIES:-3.6}"
KWOK_VERSION="${GANGSCHED_KWOK_VERSION:-v0.8.0}"

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

mkdir -p "$CACHE_ROOT"

# --- version resolution -----------------------------------------------------------------------

# newest release (no pre-release) of module $1 whose version starts with v$2.
newest_version() {
  local module="$1" series="$2" versions
  [[ -n "$GO" ]] || return 1
  versions="$(cd "$CACHE_ROOT" && timeout 60 "$GO" list -m -versions "$module" 2>/dev/null)" \
    || return 1
  # shellcheck disable=SC2086
  printf '%s\n' $versions \
    | grep -E "^v${series//./\\.}\.[0-9]+$" \
    | sort -V | tail -n 1
}

# Newest complete cache dir (used when the module proxy cannot be asked).
newest_cached_dir() {
  local d best=""
  while IFS= read -r d; do
    if complete_dir "$d"; then best="$d"; fi
  done < <(compgen -G "$CACHE_ROOT/v$K8S_SERIES.*-v$ETCD_SERIES.*-$KWOK_VERSION" | sort -V)
  [[ -n "$best" ]] && printf '%s\n' "$best"
}

BINARIES=(kube-apiserver kubectl kube-scheduler kube-controller-manager etcd kwok)

complete_dir() {
  local d="$1" b
  for b in "${BINARIES[@]}"; do [[ -x "$d/$b" ]] || return 1; done
  [[ -s "$d/kwok-stages.yaml" ]]
}

K8S_VERSION="${GANGSCHED_K8S_VERSION:-}"
ETCD_VERSION="${GANGSCHED_ETCD_VERSION:-}"
if [[ -z "$K8S_VERSION" ]]; then
  K8S_VERSION="$(newest_version k8s.io/kubernetes "$K8S_SERIES" || true)"
fi
if [[ -z "$ETCD_VERSION" ]]; then
  ETCD_VERSION="$(newest_version go.etcd.io/etcd/server/v3 "$ETCD_SERIES" || true)"
fi
if [[ -z "$K8S_VERSION" || -z "$ETCD_VERSION" ]]; then
  # Offline: fall back to whatever complete build is cached for these series.
  if [[ -z "${KUBEBUILDER_ASSETS:-}" ]] && cached="$(newest_cached_dir)"; then
    log "module proxy unreachable; using cached $cached"
    printf '%s\n' "$cached"
    exit 0
  fi
  die "cannot resolve versions (k8s='$K8S_VERSION' etcd='$ETCD_VERSION'); is the Go module proxy reachable? Set GANGSCHED_K8S_VERSION / GANGSCHED_ETCD_VERSION."
fi

VERSION_DIR="$CACHE_ROOT/${K8S_VERSION}-${ETCD_VERSION}-${KWOK_VERSION}"

# --- KUBEBUILDER_ASSETS -----------------------------------------------------------------------

declare -A FROM_ASSETS=()
if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  [[ -d "$KUBEBUILDER_ASSETS" ]] || die "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS is not a directory"
  assets="$(cd "$KUBEBUILDER_ASSETS" && pwd -P)"
  for b in kube-apiserver etcd kubectl; do
    if [[ -x "$assets/$b" ]]; then FROM_ASSETS[$b]="$assets/$b"; fi
  done
fi

if ((${#FROM_ASSETS[@]} > 0)); then
  assets_hash="$(printf '%s' "$assets" | sha256sum | cut -c1-12)"
  OUT_DIR="$CACHE_ROOT/assets-${assets_hash}-${KWOK_VERSION}"
  log "KUBEBUILDER_ASSETS provides: ${!FROM_ASSETS[*]}"
else
  OUT_DIR="$VERSION_DIR"
fi

# need NAME: true when $VERSION_DIR must get this binary (not built yet, not from assets).
need() { [[ -z "${FROM_ASSETS[$1]:-}" && ! -x "$VERSION_DIR/$1" ]]; }

needs_build() {
  local b
  for b in "${BINARIES[@]}"; do need "$b" && return 0; done
  [[ ! -s "$VERSION_DIR/kwok-stages.yaml" ]]
}

# With KUBEBUILDER_ASSETS: (re)point OUT_DIR's symlinks at the assets and at our own builds.
link_out_dir() {
  [[ "$OUT_DIR" != "$VERSION_DIR" ]] || return 0
  mkdir -p "$OUT_DIR"
  local b
  for b in kube-apiserver etcd kubectl; do
    ln -sfn "${FROM_ASSETS[$b]:-$VERSION_DIR/$b}" "$OUT_DIR/$b"
  done
  ln -sfn "$VERSION_DIR/kwok" "$OUT_DIR/kwok"
  ln -sfn "$VERSION_DIR/kube-scheduler" "$OUT_DIR/kube-scheduler"
  ln -sfn "$VERSION_DIR/kube-controller-manager" "$OUT_DIR/kube-controller-manager"
  ln -sfn "$VERSION_DIR/kwok-stages.yaml" "$OUT_DIR/kwok-stages.yaml"
}

finish() {
  link_out_dir
  complete_dir "$OUT_DIR" || die "$OUT_DIR is incomplete"
  printf '%s\n' "$OUT_DIR"
  exit 0
}

# Fast path: nothing to build.
if ! needs_build; then
  log "cached: $OUT_DIR"
  finish
fi

[[ -n "$GO" ]] || die "no go toolchain found (set GANGSCHED_GO)"

# One builder at a time per cache root (parallel test workers call this script too).
exec 9>"$CACHE_ROOT/.lock"
log "waiting for lock $CACHE_ROOT/.lock"
flock 9
if ! needs_build; then
  log "cached (built by another process): $OUT_DIR"
  finish
fi

mkdir -p "$VERSION_DIR"
WORK="$(mktemp -d "$CACHE_ROOT/.build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
log "go: $("$GO" version)  jobs: $JOBS  work: $WORK"

timed() {
  local start=$SECONDS
  "$@"
  if ((SECONDS > start)); then log "  $1 done in $((SECONDS - start))s"; fi
}

# --- kube-apiserver + kubectl + kube-scheduler + kube-controller-manager (one go build) -------

build_k8s() {
  local targets=() t
  need kube-apiserver && targets+=(kube-apiserver)
  need kubectl && targets+=(kubectl)
  need kube-scheduler && targets+=(kube-scheduler)
  need kube-controller-manager && targets+=(kube-controller-manager)
  ((${#targets[@]} > 0)) || return 0
  log "building ${targets[*]} from k8s.io/kubernetes@$K8S_VERSION"

  local mod="$WORK/k8s" gomod staging_version minor major
  mkdir -p "$mod"
  gomod="$(cd "$mod" && "$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION" \
    | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
  [[ -s "$gomod" ]] || die "go mod download k8s.io/kubernetes@$K8S_VERSION gave no go.mod"

  # v1.36.3 -> staging modules are published as v0.36.3
  staging_version="v0.${K8S_VERSION#v1.}"
  major="${K8S_VERSION#v}"; major="${major%%.*}"
  minor="${K8S_VERSION#v*.}"; minor="${minor%%.*}"

  (
    cd "$mod"
    "$GO" mod init gangsched.local/k8s-tools >/dev/null 2>&1
    {
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      echo "replace ("
      # lines like: "	k8s.io/api => ./staging/src/k8s.io/api"
      awk '$2 == "=>" && $3 ~ /^\.\/staging\// { print "\t" $1 " => " $1 " '"$staging_version"'" }' \
        "$gomod"
      echo ")"
    } >>go.mod
    local n
    n="$(grep -c " => .* $staging_version\$" go.mod || true)"
    ((n > 0)) || die "no staging replace lines found in $gomod"
    log "  $n staging replace lines ($staging_version)"
    cat >tools.go <<'EOF'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
)
EOF
    log "  go mod tidy"
    "$GO" mod tidy >&2

    local ldflags="-s -w" pkg
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
      ldflags+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
      ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
    done
    local pkgs=()
    for t in "${targets[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$t"); done
    mkdir -p "$WORK/out"
    log "  go build -p $JOBS ${pkgs[*]}"
    "$GO" build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$WORK/out/" "${pkgs[@]}" >&2
  )
  for t in "${targets[@]}"; do mv -f "$WORK/out/$t" "$VERSION_DIR/$t"; done
}

# --- etcd -------------------------------------------------------------------------------------

build_etcd() {
  need etcd || return 0
  log "building etcd from go.etcd.io/etcd/server/v3@$ETCD_VERSION"
  local mod="$WORK/etcd"
  mkdir -p "$mod"
  (
    cd "$mod"
    "$GO" mod init gangsched.local/etcd-tools >/dev/null 2>&1
    printf '\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >>go.mod
    cat >tools.go <<'EOF'
//go:build tools

package tools

import _ "go.etcd.io/etcd/server/v3"
EOF
    log "  go mod tidy"
    "$GO" mod tidy >&2
    local ldflags="-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION"
    log "  go build -p $JOBS go.etcd.io/etcd/server/v3"
    "$GO" build -p "$JOBS" -trimpath -ldflags "$ldflags" -o "$WORK/etcd.bin" \
      go.etcd.io/etcd/server/v3 >&2
  )
  mv -f "$WORK/etcd.bin" "$VERSION_DIR/etcd"
}

# --- kwok -------------------------------------------------------------------------------------

build_kwok() {
  if [[ ! -x "$VERSION_DIR/kwok" ]]; then
    log "building kwok from sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
    mkdir -p "$WORK/gobin"
    (
      cd "$WORK"
      GOBIN="$WORK/gobin" "$GO" install -p "$JOBS" -trimpath \
        -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}" \
        "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" >&2
    )
    mv -f "$WORK/gobin/kwok" "$VERSION_DIR/kwok"
  fi
  if [[ ! -s "$VERSION_DIR/kwok-stages.yaml" ]]; then
    log "assembling kwok-stages.yaml from sigs.k8s.io/kwok@$KWOK_VERSION"
    local dir f first=1
    dir="$(cd "$WORK" && "$GO" mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" \
      | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')"
    [[ -d "$dir" ]] || die "kwok module dir not found"
    {
      for f in node/fast/node-initialize.yaml pod/fast/pod-ready.yaml \
        pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
        [[ -s "$dir/kustomize/stage/$f" ]] || die "missing $dir/kustomize/stage/$f"
        ((first)) || echo "---"
        first=0
        cat "$dir/kustomize/stage/$f"
      done
    } >"$WORK/kwok-stages.yaml"
    mv -f "$WORK/kwok-stages.yaml" "$VERSION_DIR/kwok-stages.yaml"
  fi
}

total_start=$SECONDS
timed build_etcd
timed build_kwok
timed build_k8s
log "all builds done in $((SECONDS - total_start))s"

link_out_dir
complete_dir "$OUT_DIR" || die "build finished but $OUT_DIR is incomplete"
for b in "${BINARIES[@]}"; do
  log "  $(printf '%-16s %6s MB' "$b" "$(($(stat -L -c %s "$OUT_DIR/$b") / 1048576))")"
done
printf '%s\n' "$OUT_DIR"
