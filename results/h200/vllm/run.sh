#!/usr/bin/env bash
# The exact command behind results/h200/vllm/: the vLLM smokes of the shipped matrix's `h200-vllm` stack (vllm 0.20.0
# on the host's torch 2.11.0+cu130) on one H200 in pinmatrix's host runtime, each cell's wheels installed as its
# overlay from the unpacked bundle (`pinmatrix bundle wheels`, then `python3 -I unbundle.py BUNDLE --out DIR`).
#
#   bash results/h200/vllm/run.sh WHEELS_DIR [PHASE...]          (from the repository root; OUT, BUDGET_S optional)
#
# WHEELS_DIR: the unpacked bundle (a folder of the wheels the host lacks). Carried beside it, ignored by git:
#   .whl/pm/   pinmatrix's own dependencies for the host's Python 3.12 (as for results/h200/run.sh; PM=DIR elsewhere)
#   .whl/uv/   optional: the uv 0.13.9 wheel; with it the overlays are installed by uv (seconds) instead of pip
# Phases, in the order given (default: real faults), all inside one budget of BUDGET_S seconds (default 540):
#   real        both cells (env default, env fp8-moe): host-probe, vllm-generate, vllm-moe-bf16-triton, vllm-moe-fp8,
#               vllm-moe-block-fp8 (env default only: under fp8-moe vLLM picks FlashInfer CUTLASS, see flashinfer),
#               vllm-moe-nvfp4 (a skip on sm_90): 4 + 3 engine starts
#   faults      env default, every one must FAIL, in a store of their own: PINMATRIX_FAULT=perturb-expert for
#               vllm-moe-bf16-triton, vllm-moe-fp8, vllm-moe-block-fp8; wrong-token for vllm-generate
#   faults-more wrong-token for the three MoE smokes of faults (the same oracle code, another fault)
#   flashinfer  what needs FlashInfer's fused-MoE module, JIT-built on first use (a long nvcc build, then cached):
#               vllm-moe-bf16 (vLLM's own choice on sm_90: FlashInfer CUTLASS) in both cells, and
#               vllm-moe-block-fp8 under fp8-moe (VLLM_USE_FLASHINFER_MOE_FP8=1: FlashInfer CUTLASS block FP8)
# One device command may run 10 minutes: call it once per phase (results and the FlashInfer JIT cache stay on the
# warm machine between calls; FRESH=1 starts over). Everything is written under $OUT.
set -uo pipefail
WHEELS=${1:?usage: run.sh WHEELS_DIR [real|faults|faults-more|flashinfer ...]}
shift
PHASES=${*:-real faults}
OUT=${OUT:-results/h200/vllm/out}
BUDGET_S=${BUDGET_S:-540}
PY=${PY:-python3}
START=$(date +%s)
STATE=.pinmatrix/vllm
STORE=$STATE/results.sqlite        # the real runs
FAULT_STORE=$STATE/faults.sqlite   # the fault-injected runs, never mixed with real results
mkdir -p "$OUT"
[[ ${FRESH:-0} == 1 ]] && rm -rf "$STATE"
mkdir -p "$STATE"
[[ -d $WHEELS ]] && compgen -G "$WHEELS/*.whl" > /dev/null || { echo "no wheels in $WHEELS" >&2; exit 2; }
PM=${PM:-.whl/pm}  # PM=none: the interpreter has pinmatrix's dependencies itself
if [[ $PM != none ]]; then
  if [[ ! -f $STATE/pmsite/.done ]]; then
    rm -rf "$STATE/pmsite"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target "$STATE/pmsite" "$PM"/*.whl || exit 1
    touch "$STATE/pmsite/.done"
  fi
  export PYTHONPATH=$PWD/$STATE/pmsite
fi
if compgen -G ".whl/uv/uv-*.whl" > /dev/null; then
  [[ -x $STATE/uvsite/bin/uv ]] || "$PY" -m pip install -q --no-index --no-deps --target "$STATE/uvsite" .whl/uv/uv-*.whl
  export PATH=$PWD/$STATE/uvsite/bin:$PATH PINMATRIX_OVERLAY_INSTALLER=uv
fi
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 VLLM_LOGGING_COLOR=0 NO_COLOR=1
DEFAULT='h200-vllm[env=default]'
FP8MOE='h200-vllm[env=fp8-moe]'
REAL_K='not vllm-moe-bf16 or triton'   # every smoke of the stack but vllm-moe-bf16 itself (phase flashinfer)
FI_K='vllm-moe-bf16 and not triton'     # vllm-moe-bf16 alone

left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
smoke() {  # smoke TAG CELL STORE [pinmatrix smoke args...]; PINMATRIX_FAULT passes through the environment
  local tag=$1 cell=$2 store=$3 t
  shift 3
  t=$(left)
  if (( t < 75 )); then echo "== $tag: not run, $t s of the budget left"; return; fi
  echo "== $tag ($cell${PINMATRIX_FAULT:+, fault $PINMATRIX_FAULT}): $t s left, $(date -u +%T)"
  timeout --signal=INT --kill-after=20 "$t" "$PY" -m pinmatrix.cli smoke matrix.toml --stack h200-vllm \
    --cell "$cell" --wheels "$WHEELS" --results "$store" --logs "$STATE/logs" --timeout $(( t - 15 )) \
    --json "$OUT/$tag.json" "$@"
  echo "== $tag: exit $? after $(( BUDGET_S - $(left) )) s of the budget"
}
echo "== host: $(date -u)"
nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__)'
echo "nvcc: $(command -v nvcc || echo absent); wheels: $(ls "$WHEELS"/*.whl | wc -l) in $WHEELS ($(du -sh "$WHEELS" | cut -f1)); overlay installer: ${PINMATRIX_OVERLAY_INSTALLER:-pip}"
for phase in $PHASES; do
  case $phase in
    real)
      smoke real-default "$DEFAULT" "$STORE" -k "$REAL_K"
      smoke real-fp8-moe "$FP8MOE" "$STORE" -k "($REAL_K) and not block-fp8" ;;
    faults)
      PINMATRIX_FAULT=perturb-expert smoke fault-perturb-expert "$DEFAULT" "$FAULT_STORE" --rerun \
        -k 'triton or fp8'
      PINMATRIX_FAULT=wrong-token smoke fault-wrong-token "$DEFAULT" "$FAULT_STORE" --rerun -k vllm-generate ;;
    faults-more)
      PINMATRIX_FAULT=wrong-token smoke fault-wrong-token-moe "$DEFAULT" "$FAULT_STORE" --rerun -k 'triton or fp8' ;;
    flashinfer)
      smoke flashinfer-default "$DEFAULT" "$STORE" -k "$FI_K"
      smoke flashinfer-fp8-moe "$FP8MOE" "$STORE" -k "($FI_K) or block-fp8" ;;
    *) echo "unknown phase $phase (real, faults, faults-more, flashinfer)" >&2; exit 2 ;;
  esac
done
for s in "$STORE" "$FAULT_STORE"; do
  [[ -f $s ]] || continue
  name=$(basename "$s" .sqlite)
  "$PY" -m pinmatrix.cli results --results "$s" --json > "$OUT/$name.json"
  "$PY" -m pinmatrix.cli results --results "$s"
  "$PY" -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' "$s" "$OUT/$name.sqlite"
done
[[ -d $STATE/logs ]] && tar czf "$OUT/logs.tgz" -C "$STATE" logs
echo "== done in $(( $(date +%s) - START )) s"
