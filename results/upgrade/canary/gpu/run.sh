#!/usr/bin/env bash
# The h200 canary on the H200 machine (issue 43): the int64 candidate bc536720250d (torch 2.15.0, triton 3.9.0,
# CUDA 13.2, flashinfer 0.7.4, xformers 0.0.35 + the int64 patch) smoked inside its own image through the sandbox
# runtime as an ordinary user (uid 65534), then its results exported as host-signed test-result attestations.
#
#   results/upgrade/canary/gpu/run.sh STEP...     STEP: setup unbundle host cand again export
#
# Run from the repository root as root (the machine's login). What the build machine sent (.ship/, not in git):
#   .ship/tool   the pinmatrix tool bundle (pinmatrix and its dependencies as wheels for Python 3.12, signed)
#   .ship/proj.tgz   the project at the commit that built the image, the candidate's lock, matrix.toml with the
#                candidate written in by `pinmatrix propose --write`, and the build machine's signing.pub
#   .ship/cand   the candidate image bundle; its parts moved into $SHIP/cand beforehand, one call each
#   .ship/kg     (BUNDLE=kg CELL=0e749e61e75a) the known-good image bundle, the same way
# TOOL_SHA256 is the tool bundle's manifest sha256 that `pinmatrix bundle tool` printed on the build machine.
set -uo pipefail
OUT=${OUT:-results/upgrade/canary/gpu/out}
U=/tmp/u
PROJ=$U/proj
LAYOUT=/tmp/oci
ROOTS=$U/roots
STORE=$U/results.sqlite
LOGS=$U/logs
PMSITE=${PMSITE:-/tmp/pmsite}
SHIP=${SHIP:-/root/ship}
BUDGET_S=${BUDGET_S:-570}
CELL=${CELL:-bc536720250d}  # the candidate; CELL=0e749e61e75a BUNDLE=kg: the known-good from its own bundle
BUNDLE=${BUNDLE:-cand}      # the bundle under .ship/ (its manifest) and $SHIP/ (its parts)
START=$(date +%s)
mkdir -p "$OUT"
left() { echo $(( BUDGET_S - ($(date +%s) - START) )); }
as_user() { (cd "$PROJ" && setpriv --reuid 65534 --regid 65534 --clear-groups env -i HOME=$U PATH=$PATH \
    PYTHONPATH=$PROJ/src:$PMSITE PYTHONUNBUFFERED=1 "$@"); }

smoke() {  # smoke JSON-NAME [pinmatrix smoke args...]
  local name=$1; shift
  local t; t=$(left)
  echo "== $name ($CELL) as uid 65534, $t s left: $(date -u +%T)"
  local t0; t0=$(date +%s.%N)
  as_user timeout --signal=INT "$t" python3 -m pinmatrix smoke matrix.toml --stack h200 --cell "$CELL" \
    --runtime sandbox --layout "$LAYOUT" --roots "$ROOTS" --results "$STORE" --logs "$LOGS" --timeout 300 \
    --json "$U/out/$name.json" "$@"
  local rc=$?
  echo "== $name: exit $rc, $(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t0" "$(date +%s.%N)") s wall, at $(date -u +%T)"
  cp "$U/out/$name.json" "$OUT/" 2>/dev/null
}

for step in "$@"; do
  case $step in
    setup)  # the stdlib-only unpacker checks the tool bundle against the digest given out of band, then pip
      : "${TOOL_SHA256:?the tool bundle manifest sha256 that pinmatrix bundle tool printed on the build machine}"
      python3 -I .ship/tool/unbundle.py .ship/tool --manifest-sha256 "$TOOL_SHA256" --out /tmp/pmwheels --quiet || exit 1
      python3 -m pip install -q --no-index --find-links /tmp/pmwheels --target "$PMSITE" pinmatrix || exit 1
      chmod -R a+rX "$PMSITE"
      rm -rf "$U" && mkdir -p "$U/out" && tar -xzf .ship/proj.tgz -C "$U" || exit 1
      mkdir -p "$SHIP/$BUNDLE" && cp -a ".ship/$BUNDLE/manifest.json" ".ship/$BUNDLE/manifest.dsse.json" "$SHIP/$BUNDLE/"
      chown -R 65534:65534 "$U"; chmod 0755 "$U"
      echo "== setup: pinmatrix in $PMSITE, the project in $PROJ (owned by 65534), $(ls "$SHIP/$BUNDLE" | wc -l) files in $SHIP/$BUNDLE" ;;
    unbundle)  # pinmatrix's own unpacker: the build machine's signature, then every part and blob, before writing
      (cd "$PROJ" && PYTHONPATH=$PROJ/src:$PMSITE python3 -m pinmatrix unbundle "$SHIP/$BUNDLE" --key signing.pub \
        --out "$LAYOUT") || exit 1
      chmod -R a+rX "$LAYOUT"; rm -rf "${SHIP:?}/$BUNDLE" ;;
    host)
      echo "== host: $(date -u)"; uname -r
      nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader
      as_user python3 -m pinmatrix doctor --json > "$OUT/doctor.json"; echo "doctor exit $?" ;;
    cand) smoke "$BUNDLE" ;;
    again) smoke cand-again --rerun ;;
    export)  # a host key made here; the image-measured records signed as in-toto test-result attestations
      as_user python3 -m pinmatrix keygen --host --out "$U/host" && \
        as_user python3 -m pinmatrix results --results "$STORE" --export-signed "$U/out/signed-results.json" \
          --host-key "$U/host.key" && cp "$U/out/signed-results.json" "$U/host.pub" "$OUT/"
      echo "== export: exit $?" ;;
    *) echo "unknown step $step"; exit 2 ;;
  esac
done
if [[ -f $STORE ]]; then
  as_user python3 -m pinmatrix results --results "$STORE" --json > "$OUT/results.json"
  as_user python3 -m pinmatrix results --results "$STORE"
fi
echo "== done in $(( $(date +%s) - START )) s"
