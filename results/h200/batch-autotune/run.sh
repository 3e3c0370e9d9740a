#!/usr/bin/env bash
# The int64 h200 cell's smokes INSIDE its own image on the H200 machine (chroot runtime), three ways in one session:
#   baseline  --no-batch --kernel-cache off : every smoke in its own process, nothing kept (the suite as of 2026-12-01)
#   cold      --kernel-cache cold           : batches, the image's kernel cache emptied first (cold host cache)
#   warm      --kernel-cache keep           : batches, the same cache warm from the cold run (autotune choices kept)
#
#   results/h200/batch-autotune/run.sh LAYOUT DIGEST [STEP...]   STEP: host unpack baseline cold warm collect
#
# LAYOUT: the OCI layout the image was unbundled into (`python3 -I unbundle.py BUNDLE --out LAYOUT`), DIGEST its
# manifest digest. Run from the repository root, as root, with pinmatrix's pure-Python dependencies under .whl/pm/.
# `unpack` runs host-probe alone into a store of its own, so the root's unpacking is timed apart and every run
# below starts on an unpacked root. TRITON_PRINT_AUTOTUNING=1 makes Triton print each autotune it runs.
# Everything is written under $OUT (default results/h200/batch-autotune/out).
set -uo pipefail
LAYOUT=$(realpath "${1:?usage: run.sh LAYOUT DIGEST [host|unpack|baseline|cold|warm|collect ...]}")
DIGEST=${2:?usage: run.sh LAYOUT DIGEST [STEP...]}
shift 2
STEPS=${*:-host unpack baseline cold warm collect}
OUT=${OUT:-results/h200/batch-autotune/out}
ROOTS=${ROOTS:-$PWD/.pinmatrix/roots}
CELL=${CELL:-h200[xformers=0.0.35-int64]}
STORE=.pinmatrix/batch-run/results.sqlite
LOGS=.pinmatrix/batch-run/logs
START=$(date +%s)
mkdir -p "$OUT" .pinmatrix/batch-run
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
  echo "== $name: --kernel-cache $mode $*, start $(date -u +%T.%N)"
  timeout --signal=INT 580 python3 -m pinmatrix.cli smoke matrix.toml --stack h200 --cell "$CELL" \
    --runtime chroot --layout "$LAYOUT" --image "$DIGEST" --roots "$ROOTS" --logs "$LOGS" --timeout 300 \
    --kernel-cache "$mode" --json "$OUT/$name.json" "$@"
  local rc=$?
  echo "== $name: exit $rc at $(date -u +%T.%N), wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
}
cache_listing() {  # what the image's kernel cache folder holds: bytes and files per tool
  local dir; dir=$(ls -d "$ROOTS"/kernel-cache/*/ 2>/dev/null | head -1)
  echo "== kernel cache after $1: ${dir:-none}"
  [[ -n $dir ]] || return
  du -sb "$dir" "$dir"/* 2>/dev/null
  for sub in "$dir"/*; do [[ -d $sub ]] && echo "$(find "$sub" -type f | wc -l) files in $sub"; done
}
for step in $STEPS; do
  case $step in
    host)
      echo "== host: $(date -u)"
      nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
      python3 -c 'import sys; print("host python", sys.version.split()[0])' ;;
    unpack)
      smoke unpack off -k host-probe --results .pinmatrix/batch-run/unpack.sqlite ;;
    baseline)
      smoke baseline off --no-batch --results "$STORE" --rerun ;;
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
    *) echo "unknown step $step (host, unpack, baseline, cold, warm, collect)"; exit 2 ;;
  esac
done
echo "== done in $(( $(date +%s) - START )) s"
