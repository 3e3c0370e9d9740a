#!/usr/bin/env bash
# The h200 cells as images on this machine (no GPU): assembled, loaded into podman (native overlay storage),
# smoked inside the images with the podman runtime (GPU smokes skip: no GPU), and the patched kernel file
# read from the int64 image. Writes results/h200-images/{results.json,log.txt,patched-kernel.txt,build.json}.
# Run from the repository root after ./dev (setup): bash results/h200-images/run.sh 2>&1 | tee results/h200-images/log.txt
set -euo pipefail
OUT=results/h200-images
STORE=.pinmatrix/h200-images
rm -rf "$STORE/results.sqlite" "$STORE/logs"  # this run's results only
eval "$(.venv/bin/python - <<'PY'
from pathlib import Path
from pinmatrix.engine.services import podman_config
for key, value in podman_config(Path(".pinmatrix/h200-images/podman").resolve()).env.items():
    print(f"export {key}={value}")
PY
)"
echo "== podman storage: $(podman info --format '{{.Store.GraphDriverName}}')"
.venv/bin/pinmatrix build --stack h200 --engine podman --no-lock --metadata-file "$OUT/build.json"
.venv/bin/pinmatrix smoke --stack h200 --runtime podman --results "$STORE/results.sqlite" --logs "$STORE/logs" || true
.venv/bin/pinmatrix results --results "$STORE/results.sqlite" --json > "$OUT/results.json"
.venv/bin/pinmatrix results --results "$STORE/results.sqlite"
KERNEL=/opt/venv/lib/python3.13/site-packages/xformers/ops/_triton/tiled_matmul_kernels.py
for cell in $(.venv/bin/pinmatrix cells --stack h200 --json | .venv/bin/python -c 'import json,sys; print(" ".join(c["id"] for c in json.load(sys.stdin)["cells"]))'); do
  ref=$(.venv/bin/python -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]]["ref"])' "$OUT/build.json" "$cell")
  echo "== $cell $ref: lines mentioning INT64_OFFSETS in $KERNEL: $(podman run --rm --network=none "$ref" grep -c INT64_OFFSETS "$KERNEL" || true)"
done | tee "$OUT/patched-kernel.txt"
