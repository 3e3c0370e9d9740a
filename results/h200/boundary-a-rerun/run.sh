#!/usr/bin/env bash
# Re-run of the plain h200 cell's xformers-tiled-matmul-boundary-a on the H200 after the comparison
# self-check was fixed (it planted 2*ref + 1, which equals ref when ref = -1; now ref + 1 + 4|ref|).
# Run from the repository root with .whl/h200 (the cell's extra wheels) and .whl/pm2 (pinmatrix's deps).
set -uo pipefail
OUT=${OUT:-results/h200/boundary-a-rerun/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pmsite .whl/pm2/*.whl || exit 1
export PYTHONPATH=/tmp/pmsite:$PWD/src
python3 -m pinmatrix.cli smoke matrix.toml --stack h200 --cell 'h200[xformers=0.0.35]' \
  -k 'xformers-tiled-matmul-boundary-a' --wheels .whl/h200 --results "$OUT/results.sqlite" \
  --logs "$OUT/logs" --timeout 300 --json "$OUT/boundary-a.json"
echo "== exit $?"
tar czf "$OUT/logs.tgz" -C "$OUT" logs
