#!/usr/bin/env bash
# The int64 h200 cell built a second time, from clean, on another host (the H200 machine: 16 cores, another kernel
# and CPU), once per compression choice, to compare its digests with the build machine's.
#
#   results/h200/cross-host/run.sh PARTS SEED STEP...     STEP: seed | build-zstd | build-gzip | compare
#
# PARTS: the folder of part-NNN files (the seed tar cut in pieces: the cell's wheels, as the build machine's cache
# holds them under wheels/, and the Debian base mmdebstrap made there, rootfs/KEY.{json,layer}: this host has no
# network, so neither PyPI nor Debian can be reached from it). SEED: where the seed is unpacked. Each build starts
# from a cache holding only the seed (hard links) and an empty OCI layout; everything else (the wheel layers, the
# zstd base made from the gzip one, the merged layer, the link and FlashInfer AOT layers built with this host's
# cores, the patch layer, the config, the manifest) is made here. Run from the repository root, as root, with
# pinmatrix's dependencies for the host's Python under .whl/pm/. Everything is written under $OUT.
set -uo pipefail
PARTS=${1:?usage: run.sh PARTS SEED STEP...}
SEED=${2:?usage: run.sh PARTS SEED STEP...}
shift 2
OUT=${OUT:-results/h200/cross-host/out}
WORK=${WORK:-/root/xh}
PMSITE=${PMSITE:-/tmp/pmsite}
mkdir -p "$OUT" "$WORK"
if [[ ! -d $PMSITE/pydantic ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$PMSITE" .whl/pm/*.whl || exit 1
fi
export PYTHONPATH=$PMSITE:$PWD/src
build() {  # build COMPRESSION NAME
  local c=$1 name=$2 t0
  rm -rf "$WORK/cache-$name" "$WORK/oci-$name" "$WORK/logs-$name"
  mkdir -p "$WORK/cache-$name"
  cp -al "$SEED"/. "$WORK/cache-$name"/
  t0=$(date +%s.%N)
  echo "== build $name ($c): start $(date -u +%T), $(nproc) CPUs"
  python3 -m pinmatrix.cli build matrix.toml --stack h200 -k int64 --engine none --compression "$c" \
    --cache-dir "$WORK/cache-$name" --layout "$WORK/oci-$name" --logs-dir "$WORK/logs-$name" \
    --metadata-file "$OUT/B-$name.json"
  local rc=$?
  echo "== build $name: exit $rc, wall $(python3 -c "import time; print(round(time.time() - $t0, 1))") s"
  cp "$WORK/logs-$name"/*.log "$OUT/build-$name.log" 2>/dev/null
}
for step in "$@"; do
  case $step in
    seed)
      rm -rf "$SEED" && mkdir -p "$SEED"
      (cd "$PARTS" && sha256sum -c SHA256SUMS --quiet) || { echo "== seed: a part's sha256 differs"; exit 1; }
      cat "$PARTS"/part-* | tar -x -C "$SEED" && echo "== seed: $(du -sb "$SEED" | cut -f1) bytes" ;;
    build-zstd) build zstd:3 zstd ;;
    build-gzip) build gzip gzip ;;
    compare)
      for f in "$OUT"/B-*.json; do
        python3 -c 'import json, sys; d = json.load(open(sys.argv[1]))
for cell, e in d.items(): print(sys.argv[1], cell, e["status"], e.get("digest"))' "$f"
      done ;;
    *) echo "unknown step $step (seed, build-zstd, build-gzip, compare)"; exit 2 ;;
  esac
done
