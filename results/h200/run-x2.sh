#!/usr/bin/env bash
# The exact command behind results/h200/x2/: the 2-GPU sequence_parallel_leading_matmul smoke (and the
# output-boundary smoke with its comparison self-check) on a machine with two H200s, for the stack-A cells
# that match what that machine has installed (CUDA 13.0, torch 2.11.0, triton 3.6.0), plain and int64.
# Same carried wheels as run.sh.
set -uo pipefail
OUT=${OUT:-results/h200/x2/out}
BUDGET_S=${BUDGET_S:-540}
START=$(date +%s)
mkdir -p "$OUT"
[[ ${RESUME:-0} == 1 ]] || rm -rf .pinmatrix
rm -rf /tmp/pmsite
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
  timeout --signal=INT "$t" python3 -m pinmatrix.cli smoke matrix.toml --stack xformers-tiled-matmul \
    --cell "$cell" --wheels .whl/cell --results "$STORE" --timeout 300 --json "$OUT/$name.json" "$@"
  echo "== $name: exit $?"
}
echo "== host: $(date -u)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
env | grep -E '^(NCCL_NVLS_ENABLE|TORCH_SYMM_MEM_DISABLE_MULTICAST|NVSHMEM_DISABLE_NVLS)=' | sort
A='xformers-tiled-matmul[cuda=13.0,torch=2.11.0,triton=3.6.0,xformers=0.0.35'
smoke "$A-int64]" int64 -k 'host-probe or boundary-output or seqpar'
smoke "$A]" unpatched -k 'host-probe or boundary-output or seqpar'
pm results --results "$STORE" --json > "$OUT/results.json"
pm results --results "$STORE"
tar czf "$OUT/logs.tgz" .pinmatrix/logs
echo "== done in $(( $(date +%s) - START )) s"
