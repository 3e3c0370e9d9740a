#!/usr/bin/env bash
# The h200 cells' smokes INSIDE their own images on the H200 machine (no engine, no network), with
# `pinmatrix smoke --runtime chroot`, then `pinmatrix promote --dry-run` under the shipped policy
# (host_runs = "refuse": only image runs count).
#
#   results/h200/in-image/run.sh LAYOUT [STEP...]     STEP: host plain int64 promote (default: all, in order)
#
# LAYOUT: the OCI layout the images were unbundled into (`python3 -I unbundle.py BUNDLE --out LAYOUT`, the int64
# one with `--have LAYOUT`), its index.json naming both images by their build references. Run from the
# repository root, as root, with pinmatrix's pure-Python dependencies under .whl/pm/ (as results/h200/run.sh).
# Each step fits one device call (unpacking a 5.2 GB root takes about as long as untarring it, once per image
# digest; the root stays under $ROOTS while the machine is warm); a later call continues where the last one
# stopped: smokes already recorded for a cell, host and image digest are skipped (FRESH=1 starts a new store).
# Everything is written under $OUT (default results/h200/in-image/out); BUDGET_S bounds one call.
set -uo pipefail
LAYOUT=$(realpath "${1:?usage: run.sh LAYOUT [host|plain|int64|promote ...]}")
shift
STEPS=${*:-host plain int64 promote}
OUT=${OUT:-results/h200/in-image/out}
BUDGET_S=${BUDGET_S:-560}
ROOTS=${ROOTS:-$PWD/.pinmatrix/roots}
STACK=${STACK:-h200}
PLAIN=${PLAIN:-h200[xformers=0.0.35]}
INT64=${INT64:-h200[xformers=0.0.35-int64]}
PORT=${PORT:-5000}  # the matrix's registry is 127.0.0.1:5000/pinmatrix: promote asks it for the build tags
STORE=.pinmatrix/in-image/results.sqlite
LOGS=.pinmatrix/in-image/logs
START=$(date +%s)
mkdir -p "$OUT" .pinmatrix/in-image
[[ ${FRESH:-0} == 1 ]] && rm -rf "$STORE" "$STORE"-* "$LOGS"
PMSITE=${PMSITE-/tmp/pmsite}  # PMSITE= (empty): pinmatrix's dependencies are already importable (a rehearsal)
if [[ -n $PMSITE && ! -d $PMSITE/pydantic ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$PMSITE" .whl/pm/*.whl || exit 1
fi
export PYTHONPATH=${PMSITE:+$PMSITE:}$PWD/src
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
pm() { python3 -m pinmatrix.cli "$@"; }

smoke() {  # smoke CELL-NAME JSON-NAME [pinmatrix smoke args...]
  local cell=$1 name=$2; shift 2
  local t; t=$(left)
  if (( t < 60 )); then echo "== skipped $name: budget spent (run this step again: recorded smokes are skipped)"; return; fi
  echo "== $name ($cell), $t s left: $(date -u +%T)"
  timeout --signal=INT "$t" python3 -m pinmatrix.cli smoke matrix.toml --stack "$STACK" --cell "$cell" \
    --runtime chroot --layout "$LAYOUT" --roots "$ROOTS" --results "$STORE" --logs "$LOGS" --timeout 300 \
    --json "$OUT/$name.json" "$@"
  echo "== $name: exit $? at $(date -u +%T)"
}

for step in $STEPS; do
  case $step in
    host)
      echo "== host: $(date -u)"
      nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
      python3 - "$LAYOUT" > "$OUT/host.json" <<'EOF'
import json, os, sys
from pathlib import Path
from pinmatrix.smoke.chroot_host import find_driver, gpu_device_nodes, privilege_mode
from pinmatrix.smoke.chroot_rootfs import Layout
layout = Layout(Path(sys.argv[1]))
driver = find_driver()
print(json.dumps({
    "python": sys.version.split()[0], "uid": os.geteuid(), "mode": privilege_mode(),
    "gpu_nodes": [str(p) for p in gpu_device_nodes()],
    "driver_libraries": {str(k): list(v) for k, v in driver.libraries.items()},
    "nvidia_smi": [str(b) for b in driver.binaries],
    "images": [{"ref": (m.get("annotations") or {}).get("org.opencontainers.image.ref.name"),
                "digest": m.get("digest")} for m in layout.index()],
}, indent=1))
EOF
      cat "$OUT/host.json"
      pm cells matrix.toml --stack "$STACK" ;;
    plain) smoke "$PLAIN" plain ;;
    int64) smoke "$INT64" int64 ;;
    promote)
      echo "== promote --dry-run ($(date -u +%T)): the layout served read-only as the matrix's registry"
      STACK=$STACK python3 - <<'EOF' | tee "$OUT/policy.json"
import json
from pathlib import Path
from pinmatrix.matrix.selection import load
from pinmatrix.project.policy import policy_for
import os
matrix, _ = load(Path("matrix.toml"))
print(json.dumps(policy_for(matrix, os.environ.get("STACK", "h200")).model_dump(), indent=1))
EOF
      python3 -I results/h200/in-image/serve_layout.py "$LAYOUT" "127.0.0.1:$PORT" 2> "$OUT/serve_layout.log" &
      SERVER=$!
      for _ in $(seq 50); do python3 -c "import socket,sys; socket.create_connection(('127.0.0.1', $PORT), 1)" 2>/dev/null && break; sleep 0.2; done
      pm promote matrix.toml --stack "$STACK" --dry-run --results "$STORE" --registry "127.0.0.1:$PORT/pinmatrix" \
        --json > "$OUT/promote.json"
      echo "== promote: exit $? (0: a cell would be promoted, 1: every cell refused)"
      kill "$SERVER"; wait "$SERVER" 2>/dev/null
      python3 -c 'import json, sys
for o in json.load(open(sys.argv[1])):
    print(o["outcome"], o["cell"], o["name"], o["digest"] or "", "; ".join(o["reasons"]))' "$OUT/promote.json" ;;
    *) echo "unknown step $step (host, plain, int64, promote)"; exit 2 ;;
  esac
done
if [[ -f $STORE ]]; then
  pm results --results "$STORE" --json > "$OUT/results.json"
  pm results --results "$STORE"
  python3 -c 'import sqlite3, sys; sqlite3.connect(sys.argv[1]).backup(sqlite3.connect(sys.argv[2]))' "$STORE" "$OUT/results.sqlite"
  tar czf "$OUT/logs.tgz" "$LOGS" 2>/dev/null
fi
du -sh "$ROOTS"/* 2>/dev/null
echo "== done in $(( $(date +%s) - START )) s"
