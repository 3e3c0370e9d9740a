#!/usr/bin/env bash
# The exact command behind results/h200/flashinfer-arch/: on one H200 (the H200 machine; nvcc 13.0, torch
# 2.11.0+cu130), compile -- no kernel is launched, no GB10 is needed -- the FlashInfer 0.6.8.post1 JIT modules
# the gb10 NVFP4 smokes use, once with FLASHINFER_CUDA_ARCH_LIST="12.0f" and once with "12.1a" (the two arch
# values of the gb10-nvfp4 stack), side by side, then list what each .so carries with cuobjdump.
#
# Run from the repository root with these wheels carried under .whl/fi/ (ignored by git):
#   flashinfer-python 0.6.8.post1, apache-tvm-ffi 0.1.15.post2, cuda-tile 1.7.0 (cp312 x86_64) and
#   nvidia-cuda-cuobjdump 13.2.86 (the machine's image may have no cuobjdump).
#     OUT=$OUT bash results/h200/flashinfer-arch/run.sh
set -uo pipefail
OUT=${OUT:-results/h200/flashinfer-arch/out}
BUILD_S=${BUILD_S:-330}
HERE=results/h200/flashinfer-arch
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/fisite .whl/fi/*.whl || exit 1
export PYTHONPATH=/tmp/fisite
CUOBJDUMP=/tmp/fisite/nvidia/cu13/bin/cuobjdump
echo "== host: $(date -u); $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader
nvcc --version | tail -2
for list in 12.0f 12.1a; do
  FLASHINFER_CUDA_ARCH_LIST=$list FLASHINFER_WORKSPACE_BASE=/tmp/fi-$list \
    timeout --signal=INT "$BUILD_S" python3 "$HERE/build.py" "$OUT" > "$OUT/build-$list.log" 2>&1 &
done
wait
tail -n 3 "$OUT"/build-*.log
PYTHONPATH=$PWD/src python3 "$HERE/scan.py" "$OUT" "$CUOBJDUMP"
echo "== done: $(date -u)"
