#!/usr/bin/env bash
# bench/versus.py (gangsched against kube-scheduler through a real kube-apiserver + etcd + kwok)
# on a lent machine that has Python 3.12 but no network, no Go and no checkout of its own: the
# device tool's machines (16 cores), which receive the checkout and the paths named in `carry`.
#
#   bench/device_versus.sh pack [COMMIT]        here, in the checkout (network for pip)
#   bench/device_versus.sh run [VERSUS ARGS...]  there, from the copy of the checkout
#
# pack builds .devbench/ (add `/.devbench/` to .git/info/exclude; pack does it if missing):
#   src.tar.xz  the source of COMMIT (default HEAD) as `git archive` gives it: what is measured,
#               whatever the working tree holds meanwhile;
#   cp.tar.xz   the control plane's binaries (etcd, kube-apiserver, kubectl, kube-scheduler, kwok
#               and kwok-stages.yaml), from $GANGSCHED_CP_BIN or hack's control-plane.sh cache
#               (v1.36.3 unless GANGSCHED_K8S_VERSION says otherwise), stripped and compressed
#               with one xz dictionary over all of them (about 40 MiB for 330 MB; the
#               compression takes about 5 minutes and a few GiB of memory);
#   whl/        cp312 manylinux x86-64 wheels of requirements.lock, less the command-line
#               packages of the CEL library that the device image already holds;
#   COMMIT      the commit packed.
# The checkout plus .devbench/ must stay under the device tool's 64 MiB.
#
# run unpacks them under $DEVBENCH_WORK (default /tmp/devbench; xz, else Python's lzma),
# installs the wheels with pip --no-index --target (byte-compiled), points $GANGSCHED_CP_BIN at
# the binaries and runs bench/versus.py from the unpacked source with the device's python3. It
# writes to $OUT (the device tool's output folder; else $DEVBENCH_OUT, default
# /tmp/devbench-out): log.txt (everything printed), versus.json (one record a run), env.txt
# (nproc, Python, commit) and scheduler-logs.tar.xz. It runs the fill workload at 5,000 nodes
# (40,000 pods), kube-scheduler then gangsched, one repetition, each run given up after 300 s and
# its writes waited for at most 10 s, which fits one device command (600 s at most); arguments
# after `run` go to versus.py after these, so they override them:
#
#   bench/versus.py --workload fill --nodes 5000 --schedulers kube-scheduler,gangsched --reps 1
#       --timeout 300 --settle 10
#
# With the device tool, after `bench/device_versus.sh pack` here (test it here first with
# `OUT=/tmp/o PATH=<a python3.12>/bin:$PATH bench/device_versus.sh run --nodes 100`):
#
#   run(command="bash bench/device_versus.sh run", carry=[".devbench"], timeout_s=600)
#
# then give_back. The figure is seconds_to_all_bound in versus.json (or the table in log.txt).
# Several runs in one device command: the second and later with DEVBENCH_REUSE=1, which keeps
# what the first unpacked and installed (their records and output are appended to the same
# versus.json and log.txt):
#
#   bash bench/device_versus.sh run --nodes 200 --reps 3;
#   DEVBENCH_REUSE=1 bash bench/device_versus.sh run --nodes 1000
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUNDLE="${DEVBENCH_DIR:-$REPO/.devbench}"
CP_FILES=(kube-apiserver kube-scheduler kubectl etcd kwok kwok-stages.yaml)
# The CEL library's command-line tool brings these; the device image has them already.
SKIP_WHEELS='^(typer|rich|pygments|markdown-it-py|mdurl|shellingham)=='
DEFAULT_ARGS=(--workload fill --nodes 5000 --schedulers kube-scheduler,gangsched --reps 1
  --timeout 300 --settle 10)

log() { printf '[device_versus] %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

pack() {
  local commit="${1:-HEAD}" sha cp_dir mib
  command -v xz >/dev/null || die "xz is needed to pack"
  sha="$(git -C "$REPO" rev-parse --verify "$commit^{commit}")"
  local exclude
  exclude="$(git -C "$REPO" rev-parse --git-path info/exclude)"
  [[ "$exclude" = /* ]] || exclude="$REPO/$exclude"
  if [[ "$BUNDLE" == "$REPO/.devbench" ]] && ! grep -qx '/.devbench/' "$exclude" 2>/dev/null; then
    mkdir -p "$(dirname "$exclude")"
    echo '/.devbench/' >>"$exclude"
  fi
  rm -rf "$BUNDLE"
  mkdir -p "$BUNDLE/whl"
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT

  log "source of $sha"
  git -C "$REPO" archive --format=tar "$sha" | xz -9 -T0 >"$BUNDLE/src.tar.xz"
  echo "$sha" >"$BUNDLE/COMMIT"

  if [[ -n "${GANGSCHED_CP_BIN:-}" ]]; then
    cp_dir="$GANGSCHED_CP_BIN"
  else
    cp_dir="$(bash "$REPO/gangsched_dev/devcluster/control-plane.sh" \
      "${GANGSCHED_K8S_VERSION:-v1.36.3}" | tail -n1)"
  fi
  log "control plane binaries from $cp_dir"
  mkdir -p "$stage/bin"
  local f
  for f in "${CP_FILES[@]}"; do
    [[ -e "$cp_dir/$f" ]] || die "$cp_dir lacks $f"
    if [[ "$f" == *.yaml ]]; then
      cp -L "$cp_dir/$f" "$stage/bin/$f"
    elif ! strip -s -o "$stage/bin/$f" "$cp_dir/$f" 2>/dev/null \
      || ! "$stage/bin/$f" --version >/dev/null 2>&1; then
      cp -L "$cp_dir/$f" "$stage/bin/$f"  # strip missing or harmful: as it is
    fi
  done
  "$stage/bin/kube-apiserver" --version >&2
  # One dictionary over the whole tar: kube-apiserver, kube-scheduler and kubectl share most of
  # their code, so the second and third cost little.
  mib=$(($(du -sm "$stage/bin" | cut -f1) + 16))
  log "compressing $(du -sh "$stage/bin" | cut -f1) (xz, dictionary ${mib} MiB)"
  tar -C "$stage/bin" -c "${CP_FILES[@]}" \
    | xz -T1 --lzma2="preset=9e,dict=${mib}MiB" >"$BUNDLE/cp.tar.xz"

  log "wheels (cp312, manylinux x86-64)"
  grep -E '^[A-Za-z0-9._-]+==' "$REPO/requirements.lock" | sed 's/[ \\].*//' \
    | grep -Eiv "$SKIP_WHEELS" >"$stage/requirements.txt"
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 --platform manylinux_2_5_x86_64 \
    -d "$BUNDLE/whl" -r "$stage/requirements.txt"
  du -sh "$BUNDLE"/* >&2
  log "bundle: $(du -sm "$BUNDLE" | cut -f1) MiB in $BUNDLE (with the checkout, under 64 MiB)"
}

unxz_to() {  # unxz_to FILE.tar.xz DIR
  mkdir -p "$2"
  if command -v xz >/dev/null; then
    xz -dc "$1" | tar -x -C "$2"
  else
    python3 -c 'import lzma, shutil, sys
shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer, 1 << 20)' "$1" | tar -x -C "$2"
  fi
}

OUT_DIR="${OUT:-${DEVBENCH_OUT:-/tmp/devbench-out}}"

run() {
  local work="${DEVBENCH_WORK:-/tmp/devbench}" out="$OUT_DIR"
  [[ -f "$BUNDLE/cp.tar.xz" && -f "$BUNDLE/src.tar.xz" ]] \
    || die "no bundle in $BUNDLE (bench/device_versus.sh pack, and carry it)"
  set -- "${DEFAULT_ARGS[@]}" "$@"  # argparse: the last of a repeated option wins
  local t0=$SECONDS
  {
    echo "commit: $(cat "$BUNDLE/COMMIT" 2>/dev/null || echo unknown)"
    echo "nproc: $(nproc)"
    echo "python3: $(command -v python3) $(python3 --version 2>&1)"
    echo "kernel: $(uname -srm)"
    echo "memory: $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
    echo "xz: $(command -v xz || echo 'none (lzma)'); openssl: $(command -v openssl || echo none)"
    echo "setpriv: $(command -v setpriv || echo none)"
  } | tee "$out/env.txt"

  if [[ -n "${DEVBENCH_REUSE:-}" && -f "$work/installed" ]]; then
    log "reusing what an earlier run unpacked in $work"
  else
    rm -rf "$work"
    unxz_to "$BUNDLE/src.tar.xz" "$work/src"
    unxz_to "$BUNDLE/cp.tar.xz" "$work/bin"
    "$work/bin/kube-scheduler" --version
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target "$work/site" "$BUNDLE"/whl/*.whl
    # Byte-compile now, as an installed checkout would be, so that the first scheduler started
    # does not pay for it inside its timed run.
    python3 -m compileall -q -j0 "$work/site" "$work/src/gangsched" "$work/src/gangsched_dev" \
      "$work/src/bench" >/dev/null
    touch "$work/installed"
    log "unpacked and installed in $((SECONDS - t0)) s"
  fi

  export GANGSCHED_CP_BIN="$work/bin" PYTHONPATH="$work/site" PYTHONUNBUFFERED=1
  ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" || true
  (cd "$work/src" && python3 -c 'import gangsched.cli, kopf, kubernetes_asyncio, pydantic
import msgspec, structlog; print("imports ok")')
  local cmd=(python3 bench/versus.py "$@" --json-out "$out/versus.json" --log-dir "$work/logs")
  log "running (in $work/src): ${cmd[*]}"
  local rc=0
  (cd "$work/src" && "${cmd[@]}") || rc=$?
  log "versus.py exited with $rc after $((SECONDS - t0)) s in all"
  if [[ -d "$work/logs" ]]; then
    tar -C "$work/logs" -c . | xz -6 -T0 >"$out/scheduler-logs.tar.xz" || true
    if (($(stat -c %s "$out/scheduler-logs.tar.xz") > 15 * 1024 * 1024)); then
      rm -f "$out/scheduler-logs.tar.xz"  # over what comes back
    fi
  fi
  return "$rc"
}

case "${1:-}" in
  pack) shift; pack "$@" ;;
  run)
    shift
    mkdir -p "$OUT_DIR"
    run "$@" 2>&1 | tee -a "$OUT_DIR/log.txt"  # pipefail: run's status
    ;;
  *) die "usage: $0 pack [COMMIT] | run [VERSUS ARGS...]" ;;
esac
