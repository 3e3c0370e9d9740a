#!/usr/bin/env bash
# The exact command behind results/h200/bisect/: `pinmatrix bisect param` on one H200 (the H200 machine), host
# runtime, the two cells of the shipped matrix's `h200` stack: xformers 0.0.35 as released, and with the
# project's int64 patch (patches/xformers-tiled-matmul-int64.patch, applied in the cell's overlay).
# Smoke xformers-tiled-matmul-shape: tiled_matmul of M x 2048 by 2048 x 64512 in bf16, checked against cuBLAS;
# the search runs over M in [1, 131072], every probe in its own process with a 120 s timeout.
#
# Run from the repository root with the wheels carried under .whl/ (ignored by git):
#   .whl/cell/  xformers-0.0.35-py39-none-manylinux_2_28_x86_64.whl (the cells' overlay wheel)
#   .whl/pm/    pinmatrix's own dependencies that machine lacks (pydantic, tomlkit, securesystemslib, ...)
# Everything is written under $OUT (default results/h200/bisect/out).
set -uo pipefail
OUT=${OUT:-results/h200/bisect/out}
mkdir -p "$OUT"
[[ ${RESUME:-0} == 1 ]] || rm -rf .pinmatrix
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/pmsite .whl/pm/*.whl || exit 1
export PYTHONPATH=/tmp/pmsite:$PWD/src
STORE=.pinmatrix/results.sqlite
echo "== host: $(date -u)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'
python3 -m pinmatrix cells matrix.toml --stack h200
bisect() {  # bisect CELL-NAME JSON-NAME MAX-SECONDS
  echo "== bisect $1"
  python3 -m pinmatrix bisect param xformers-tiled-matmul-shape matrix.toml --stack h200 --cell "$1" --param M \
    --wheels .whl/cell --timeout 120 --max-probes 20 --max-seconds "$3" --results "$STORE" --logs .pinmatrix/logs \
    --json "$OUT/$2.json"
  echo "== bisect $1: exit $?"
}
START=$(date +%s)
bisect 'h200[xformers=0.0.35]' unpatched "${UNPATCHED_S:-210}"
bisect 'h200[xformers=0.0.35-int64]' int64 "${INT64_S:-60}"
python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' "$STORE" "$OUT/results.sqlite"
tar czf "$OUT/logs.tgz" .pinmatrix/logs
echo "== done in $(( $(date +%s) - START )) s"
