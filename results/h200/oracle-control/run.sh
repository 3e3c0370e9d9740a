#!/usr/bin/env bash
# The xformers tiled-matmul smokes on the H200 after the comparison's negative control moved into a copy of
# the reference (smoke/xformers_tiled.py -> _oracles.planted_probe / comparison_failure): each boundary smoke
# must still record its control ("checker_self_test": "caught" in the metrics), the plain cell's cases above
# 2^31 must stay xfail (illegal memory access), the cases below them pass.
# Run from the repository root with .whl/h200 (the cell's extra wheels) and .whl/pm2 (pinmatrix's deps),
# as results/h200/boundary-a-rerun/run.sh does.
set -uo pipefail
OUT=${OUT:-results/h200/oracle-control/out}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/pmsite .whl/pm2/*.whl || exit 1
export PYTHONPATH=/tmp/pmsite:$PWD/src
python3 -m pinmatrix.cli smoke matrix.toml --stack h200 --cell 'h200[xformers=0.0.35]' \
  -k 'xformers-tiled-matmul-boundary' --wheels .whl/h200 --results "$OUT/results.sqlite" \
  --logs "$OUT/logs" --timeout 300 --json "$OUT/boundary.json"
echo "== exit $?"
python3 - "$OUT/boundary.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    m = r.get("metrics", {})
    print(r["smoke"], r["status"], r.get("failure_class"), "control:", m.get("checker_self_test"))
PY
tar czf "$OUT/logs.tgz" -C "$OUT" logs
