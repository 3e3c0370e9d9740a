#!/usr/bin/env bash
# Triton's autotune cache (TRITON_CACHE_AUTOTUNING=1, which the image runtimes' kernel cache now sets) measured on
# the H200 machine with pinmatrix's host runtime: the int64 h200 cell's five xformers smokes, twice over one
# fresh TRITON_CACHE_DIR with the knob off (the kernel cache as it was: the second run compiles nothing but
# autotunes again), then twice over another fresh one with the knob on (the second run should autotune nothing).
# Host runtime: the H200 machine's own torch 2.11.0 / triton 3.6.0, the cell's xformers 0.0.35 (+ int64 patch),
# flashinfer-python, apache-tvm-ffi and cuda-tile from .whl/h200 as an overlay (every difference from the lock
# is in each record's host_vs_lock).
#
#   results/h200/autotune/run.sh off|on      (one mode per call: two runs of ~130 s each)
#
# Run from the repository root with .whl/pm (pinmatrix's pure-Python dependencies for Python 3.12) and .whl/h200.
set -uo pipefail
MODE=${1:?usage: run.sh off|on}
OUT=${OUT:-results/h200/autotune/out}
W=/root/autotune
mkdir -p "$OUT" "$W"
[[ -d /tmp/pmsite/pydantic ]] || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pmsite .whl/pm/*.whl || exit 1
export PYTHONPATH=/tmp/pmsite:$PWD/src
export TRITON_PRINT_AUTOTUNING=1
rm -rf "$W/$MODE"
export TRITON_CACHE_DIR=$W/$MODE/triton
if [[ $MODE == on ]]; then export TRITON_CACHE_AUTOTUNING=1; else unset TRITON_CACHE_AUTOTUNING; fi
for run in 1 2; do
  t0=$(date +%s.%N)
  echo "== $MODE run $run: start $(date -u +%T)"
  timeout --signal=INT 290 python3 -m pinmatrix.cli smoke matrix.toml --stack h200 --cell 'h200[xformers=0.0.35-int64]' \
    -k xformers --wheels .whl/h200 --results "$W/$MODE/results.sqlite" --logs "$W/$MODE/logs-$run" --rerun \
    --timeout 280 --json "$OUT/$MODE-$run.json"
  echo "== $MODE run $run: exit $?, wall $(python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$t0") s"
  grep -rhoE "finished after [0-9.]+s" "$W/$MODE/logs-$run" | awk '{gsub("s","",$3); s+=$3; n++} END {print "== autotune: " n " tunings, " s " s"}'
done
du -sb "$TRITON_CACHE_DIR"; find "$TRITON_CACHE_DIR" -type f | wc -l
tar czf "$OUT/logs-$MODE.tgz" -C "$W/$MODE" logs-1 logs-2
