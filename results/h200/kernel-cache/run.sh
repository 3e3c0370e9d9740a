#!/usr/bin/env bash
# The int64 h200 cell's smokes INSIDE its own image on the H200 machine (chroot runtime), twice over the
# per-image kernel cache (src/pinmatrix/smoke/kernel_cache.py): first `--kernel-cache cold` (the image's cache
# folder emptied before its first smoke, then shared by its smokes), then `--kernel-cache keep` (the same folder,
# warm from the first run).
#
#   results/h200/kernel-cache/run.sh LAYOUT [STEP...]    STEP: host unpack cold warm collect (default: all)
#
# LAYOUT: the OCI layout the image was unbundled into (`python3 -I unbundle.py BUNDLE --out LAYOUT`). Run from the
# repository root, as root, with pinmatrix's pure-Python dependencies under .whl/pm/ (see ../run.sh).
# `unpack` runs host-probe alone with `--kernel-cache off` into a store of its own, so the root's unpacking is
# timed apart and the cold and warm runs below both start on an unpacked root (as the earlier second run did).
# TRITON_PRINT_AUTOTUNING=1 (passed from the host into each smoke) makes Triton print each autotune it runs, so the
# logs show whether the warm run autotuned again.
# Everything is written under $OUT (default results/h200/kernel-cache/out).
set -uo pipefail
LAYOUT=$(realpath "${1:?usage: run.sh LAYOUT [host|unpack|cold|warm|collect ...]}")
shift
STEPS=${*:-host unpack cold warm collect}
OUT=${OUT:-results/h200/kernel-cache/out}
ROOTS=${ROOTS:-$PWD/.pinmatrix/roots}
STACK=${STACK:-h200}
CELL=${CELL:-h200[xformers=0.0.35-int64]}
STORE=.pinmatrix/kernel-cache-run/results.sqlite
LOGS=.pinmatrix/kernel-cache-run/logs
START=$(date +%s)
mkdir -p "$OUT" .pinmatrix/kernel-cache-run
PMSITE=${PMSITE-/tmp/pmsite}
if [[ -n $PMSITE && ! -d $PMSITE/pydantic ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$PMSITE" .whl/pm/*.whl || exit 1
fi
export PYTHONPATH=${PMSITE:+$PMSITE:}$PWD/src
export TRITON_PRINT_AUTOTUNING=1
pm() { python3 -m pinmatrix.cli "$@"; }
smoke() {  # smoke NAME MODE [pinmatrix smoke args...]
  local name=$1 mode=$2; shift 2
  local t0; t0=$(date +%s.%N)
  echo "== $name: --kernel-cache $mode, start $(date -u +%T.%N)"
  timeout --signal=INT 580 python3 -m pinmatrix.cli smoke matrix.toml --stack "$STACK" --cell "$CELL" \
    --runtime chroot --layout "$LAYOUT" --roots "$ROOTS" --logs "$LOGS" --timeout 300 \
    --kernel-cache "$mode" --json "$OUT/$name.json" "$@"
  local rc=$?
  echo "== $name: exit $rc at $(date -u +%T.%N), wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
}
cache_listing() {  # what the image's kernel cache folder holds: bytes and files per tool
  local dir; dir=$(ls -d "$ROOTS"/kernel-cache/*/ 2>/dev/null | head -1)
  echo "== kernel cache after $1: ${dir:-none}"
  [[ -n $dir ]] || return
  du -sb "$dir" "$dir"/* "$dir"/.cache/* 2>/dev/null
  for sub in "$dir"/* "$dir"/.cache/*; do [[ -d $sub ]] && echo "$(find "$sub" -type f | wc -l) files in $sub"; done
}
for step in $STEPS; do
  case $step in
    host)
      echo "== host: $(date -u)"
      nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
      python3 -c 'import sys; print("host python", sys.version.split()[0])' ;;
    unpack)
      smoke unpack off -k host-probe --results .pinmatrix/kernel-cache-run/unpack.sqlite ;;
    cold)
      smoke cold cold --results "$STORE" --rerun
      cache_listing cold ;;
    warm)
      smoke warm keep --results "$STORE" --rerun
      cache_listing warm ;;
    collect)
      pm results --results "$STORE" --json > "$OUT/results.json"
      pm results --results "$STORE"
      tar czf "$OUT/logs.tgz" "$LOGS" 2>/dev/null
      ls -la "$OUT" ;;
    *) echo "unknown step $step (host, unpack, cold, warm, collect)"; exit 2 ;;
  esac
done
echo "== done in $(( $(date +%s) - START )) s"
