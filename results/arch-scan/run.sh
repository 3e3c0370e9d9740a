#!/usr/bin/env bash
# The exact commands behind results/arch-scan/: no GPU, run on the development machine (x86_64). Wheels are
# downloaded once into ~/.cache/pinmatrix/wheels/<arch>-py<python> (aarch64 ones for the gb10 cells), cuobjdump
# is installed from its PyPI wheel into ~/.cache/pinmatrix/tools; nothing of either is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."
pinmatrix arch-scan --stack gb10-nvfp4 --out results/arch-scan/gb10-nvfp4 > /dev/null
pinmatrix arch-scan --stack h200 --out results/arch-scan/h200 > /dev/null
# The same tables inside the report (report.json carries them under arch_scan):
pinmatrix report --stack gb10-nvfp4 --stack h200 --arch-scan results/arch-scan/gb10-nvfp4/arch-scan.json --arch-scan results/arch-scan/h200/arch-scan.json \
  --out results/arch-scan/report --format md --format json
# 2026-12-01: the gb10 PyPI cells (vLLM 0.20.0, torch 2.11.0 cu130, aarch64), wheels from the build's cache where
# `pinmatrix build` already fetched them (--cache-dir, default .pinmatrix/cache), the rest downloaded:
pinmatrix arch-scan --cell 34a5fc7fb6a2 --cell 68642c0882af --stack gb10-nvfp4 --out results/arch-scan/gb10 > /dev/null
# The flashinfer-aot layers for 12.1a and 12.0f built on the x86_64 h200 cell's root (root: chroot), read by arch-scan:
python results/arch-scan/aot_x86.py fp4-quantize fp4-gemm-cutlass
# The gb10 images with their flashinfer-aot layer cross-compiled on this x86_64 builder (image/datapath/crossaot.py), read
# with --layout, then loaded into podman and the modules loaded under qemu-aarch64: results/arch-scan/gb10-aot/
sh results/arch-scan/gb10-aot/run.sh
