#!/bin/sh
# Under qemu-aarch64 (podman, no GPU, no network), in the gb10 image of cell $1 (loaded into the project store):
# tvm_ffi loads each cross-built module of its flashinfer-aot layer, then FlashInfer (JIT disabled) takes the
# decode module from its AOT folder. Usage: sh results/arch-scan/gb10-aot/qemu.sh CELL_ID
set -u
cd "$(dirname "$0")/../../.."
eval "$(.venv/bin/pinmatrix engine-env)"
SITE=/opt/venv/lib/python3.13/site-packages
id="$1"
REF=$(podman images --format '{{.Repository}}:{{.Tag}}' | grep ":$id\$" | head -1)
echo "## $(date -u +%H:%M:%S) cell $id: $REF (image id $(podman image inspect --format '{{.Id}}' "$REF"))"
echo "## $(date -u +%H:%M:%S) tvm_ffi loads each cross-built module (no torch, no libcuda)"
/usr/bin/time -f "tvm_ffi load under emulation: %e s" podman run --rm --network=none \
    -e LD_LIBRARY_PATH="$SITE/nvidia/cu13/lib" "$REF" python -c "
import glob, platform, tvm_ffi
print(platform.machine(), 'tvm_ffi', tvm_ffi.__version__)
for so in sorted(glob.glob('$SITE/flashinfer/data/aot/*/*.so')):
    mod = tvm_ffi.load_module(so)
    print('loaded', so.rsplit('/', 1)[1][:60], type(mod).__name__)
" || echo "tvm_ffi load failed: exit $?"
echo "## $(date -u +%H:%M:%S) import flashinfer; FlashInfer takes the decode module from its AOT folder (JIT disabled)"
/usr/bin/time -f "import + AOT load under emulation: %e s" podman run --rm --network=none \
    -e FLASHINFER_DISABLE_JIT=1 "$REF" python -c "
import os, torch, flashinfer
from flashinfer.jit.attention import gen_single_decode_module
print('FLASHINFER_CUDA_ARCH_LIST', os.environ.get('FLASHINFER_CUDA_ARCH_LIST'))
spec = gen_single_decode_module(torch.float16, torch.float16, torch.float16, 128, 128, 0, False, False)
print('flashinfer', flashinfer.__version__, 'torch', torch.__version__, 'is_aot', spec.is_aot)
mod = spec.build_and_load()
print('loaded from the AOT folder:', spec.aot_path.parent.parent.name, type(mod).__name__)
" || echo "flashinfer AOT load failed: exit $?"
echo "## $(date -u +%H:%M:%S) done"
