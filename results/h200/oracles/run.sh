#!/usr/bin/env bash
# The exact command behind results/h200/oracles/: on one H200 (the H200 machine), each GPU smoke of the h200 stack
# that has an oracle of its own, run as the runner runs it (python -X faulthandler smoke/<module>.py <smoke>,
# result JSON through $PINMATRIX_SMOKE_RESULT) once as it is and once per fault it can inject
# ($PINMATRIX_FAULT, smoke/_oracles.py), then the timing oracle (timing_check.py). The real runs must pass, the
# fault runs must fail; NVFP4 has no sm_90 kernels, so its smokes must skip. Carried wheels (ignored by git):
#   .whl/oracles/  flashinfer-python 0.6.8.post1, apache-tvm-ffi 0.1.15.post2, cuda-tile 1.7.0
# Run from the repository root:  OUT=<dir> bash results/h200/oracles/run.sh
set -uo pipefail
OUT=${OUT:-results/h200/oracles/out}
BUDGET_S=${BUDGET_S:-270}
START=$(date +%s)
mkdir -p "$OUT" /tmp/oracles
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/oracles/*.whl || exit 1
export PYTHONPATH=/tmp/site PYTHONUNBUFFERED=1 FLASHINFER_CUDA_ARCH_LIST=9.0a
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader > "$OUT/nvidia-smi-query.csv"
nvidia-smi > "$OUT/nvidia-smi.txt"
echo "== $(date -u) $(head -1 "$OUT/nvidia-smi-query.csv")"
python3 -c 'import sys, torch, triton; print("python", sys.version.split()[0], "torch", torch.__version__, "triton", triton.__version__)'
one() {  # one MODULE SMOKE [FAULT]: one process, as the runner starts it
  local mod=$1 smoke=$2 fault=${3:-} tag=$2${3:+.$3}
  if (( BUDGET_S - ($(date +%s) - START) < 20 )); then echo "== $tag: not run, budget spent"; return; fi
  PINMATRIX_FAULT=$fault PINMATRIX_SMOKE_RESULT=/tmp/oracles/$tag.json \
    timeout 240 python3 -X faulthandler "smoke/$mod.py" "$smoke" > "/tmp/oracles/$tag.log" 2>&1
  echo "== $tag: exit $? $(grep -h '^\[' "/tmp/oracles/$tag.log" | tail -1)"
}
one torch_kernels torch-gemm
for f in skip-k-block zero-tile zero-row; do one torch_kernels torch-gemm $f; done
one torch_kernels torch-d2d-copy; one torch_kernels torch-d2d-copy zero-tile; one torch_kernels torch-d2d-copy leak
one torch_kernels triton-jit; one torch_kernels triton-jit zero-tile
one host unified-memory-leak; one host unified-memory-leak leak
one flashinfer_ops flashinfer-fp8-gemm
for f in skip-k-block zero-tile zero-row; do one flashinfer_ops flashinfer-fp8-gemm $f; done
one flashinfer_ops flashinfer-decode; one flashinfer_ops flashinfer-decode skip-k-block; one flashinfer_ops flashinfer-decode zero-row
one flashinfer_ops flashinfer-nvfp4-gemm; one flashinfer_ops flashinfer-nvfp4-gemm swap-scales; one flashinfer_ops flashinfer-nvfp4-vs-fp8
echo "== timing check"; timeout 120 python3 results/h200/oracles/timing_check.py "$OUT/timing-check.json"; echo "== timing check: exit $?"
python3 - "$OUT/oracles.json" <<'PY'
import glob, json, os, sys
rows = []
for path in sorted(glob.glob("/tmp/oracles/*.json")):
    r = json.load(open(path))
    r["fault"] = r.get("metrics", {}).get("fault")
    rows.append(r)
json.dump(rows, open(sys.argv[1], "w"), indent=2, sort_keys=True)
for r in rows:
    print(f"{r['smoke']:28} {r['fault'] or '-':13} {r['status']:5} {r['failure_class'] or '':14} {r['reason'][:150]}")
PY
for f in /tmp/oracles/*.log; do echo "===== $(basename "$f")"; cat "$f"; done > "$OUT/logs.txt"
echo "== done in $(( $(date +%s) - START )) s"
