#!/usr/bin/env bash
# The exact command behind the files in results/h200/: pinmatrix's host runtime on one H200 (the H200 machine),
# the two cells of the shipped matrix's `h200` stack (xformers 0.0.35 plain, and with the int64 patch).
#
# Run from the repository root with the wheels carried under .whl/ (ignored by git):
#   .whl/h200/  xformers 0.0.35, flashinfer-python 0.6.8.post1, apache-tvm-ffi, cuda-tile: the cells' extra
#               wheels, installed per cell into .pinmatrix/overlay/<cell-id>/site (+ the cell's patches)
#   .whl/pm/    pinmatrix's own pure-Python dependencies that machine lacks (pydantic, tomlkit, ...)
# Everything is written under $OUT (default results/h200/out); BUDGET_S bounds the whole run.
set -uo pipefail
OUT=${OUT:-results/h200/out}
BUDGET_S=${BUDGET_S:-540}
START=$(date +%s)
mkdir -p "$OUT"
# A fresh store and fresh logs unless RESUME=1 (then smokes already recorded are skipped, as on any rerun).
[[ ${RESUME:-0} == 1 ]] || rm -rf .pinmatrix
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pmsite .whl/pm/*.whl || exit 1
export PYTHONPATH=/tmp/pmsite:$PWD/src
export TRITON_PRINT_AUTOTUNING=1
STORE=.pinmatrix/results.sqlite
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
pm() { python3 -m pinmatrix.cli "$@"; }
smoke() {  # smoke CELL-NAME JSON-NAME [pinmatrix smoke args...]
  local cell=$1 name=$2; shift 2
  local t; t=$(left)
  if (( t < 30 )); then echo "== skipped $name: budget spent"; return; fi
  echo "== $name ($cell), $t s left"
  timeout --signal=INT "$t" python3 -m pinmatrix.cli smoke matrix.toml --stack h200 --cell "$cell" \
    --wheels .whl/h200 --results "$STORE" --timeout 300 --json "$OUT/$name.json" "$@"
  echo "== $name: exit $?"
}
echo "== host: $(date -u)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
echo "GNU patch: $(command -v patch || echo absent); nvcc: $(command -v nvcc); cuobjdump: $(command -v cuobjdump)"
python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'
smoke 'h200[xformers=0.0.35]' unpatched-xformers -k 'host-probe or xformers'
smoke 'h200[xformers=0.0.35-int64]' int64
smoke 'h200[xformers=0.0.35]' unpatched-rest
pm results --results "$STORE" --json > "$OUT/results.json"
pm results --results "$STORE"
python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' "$STORE" "$OUT/results.sqlite"
tar czf "$OUT/logs.tgz" .pinmatrix/logs
echo "== done in $(( $(date +%s) - START )) s"
