#!/bin/sh
# The gb10 cells' flashinfer-aot layer cross-compiled on this x86_64 builder (image/datapath/crossaot.py), then read:
# one 12.1a and one 12.0f gb10-nvfp4 cell (vllm 0.20.0, torch 2.11.0 cu130, flashinfer 0.6.8.post1, aarch64).
# A benchmark session, not CI (tens of minutes on 2 shared cores). Run from the repository root:
#     sh results/arch-scan/gb10-aot/run.sh 2>&1 | tee results/arch-scan/gb10-aot/log
# Needs what results/gb10-images/run.sh needs, plus Debian's g++-aarch64-linux-gnu (the cross compiler).
# The layout is the one of results/gb10-images/ (.pinmatrix/gb10-images/oci, ignored).
set -eu
OUT=.pinmatrix/gb10-images
RES=results/arch-scan/gb10-aot
CELLS="${CELLS:-34a5fc7fb6a2 68642c0882af}"   # 12.1a, 12.0f (driver 580.142, env default)
SITE=/opt/venv/lib/python3.13/site-packages
step() { echo; echo "## $(date -u +%H:%M:%S) $*"; }

for id in $CELLS; do
    step "build $id (--engine none): the flashinfer-aot layer cross-compiled"
    /usr/bin/time -f "build: %e s wall, %U s user" .venv/bin/pinmatrix build --engine none -k "$id" --jobs 2 \
        --layout "$OUT/oci" --logs-dir "$OUT/logs" --metadata-file "$OUT/build-aot-$id.json"
    grep "flashinfer-aot" "$OUT/logs/$id.log" | cut -c1-600
done

step "the layers' modules: ELF machine, NEEDED, SASS (file, readelf, cuobjdump from the tool cache)"
.venv/bin/python "$RES/aot_modules.py" "$OUT/oci" $CELLS

step "arch-scan with the layout: the flashinfer-aot layer is a row"
.venv/bin/pinmatrix arch-scan --stack gb10-nvfp4 $(for id in $CELLS; do printf -- "--cell %s " "$id"; done) \
    --layout "$OUT/oci" --out "$RES" > /dev/null
gzip -9nf "$RES/arch-scan.json"

for id in $CELLS; do
    step "load $id into podman (the project's store), then under qemu-aarch64: qemu.sh"
    /usr/bin/time -f "load: %e s" .venv/bin/pinmatrix build --engine podman -k "$id" --layout "$OUT/oci" \
        --logs-dir "$OUT/logs-load" --metadata-file "$OUT/loaded-aot-$id.json"
    sh "$RES/qemu.sh" "$id" 2>&1 | tee "$RES/qemu-$id.log"
done
step "done"
