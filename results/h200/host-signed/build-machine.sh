#!/bin/sh
# The build machine's half (results/h200/host-signed/README.md): a scratch project whose matrix.toml is the
# shipped one with its own registry port and trusted_hosts = ["h200-host.pub"] for the h200 stack; the int64
# image pushed from the build's OCI layout; promote refused on the store's plain records, then the H200
# machine's signed file imported and the cell promoted; verify prints the host.
# Usage, from the repository root: sh results/h200/host-signed/build-machine.sh SCRATCH
set -eu
REPO=$(pwd)
HERE=$REPO/results/h200/host-signed
PM=$REPO/.venv/bin/pinmatrix
SCRATCH=$1
CELL=0e749e61e75a
DIGEST=sha256:088b8ef4dd451de8348c937d43dcf581b22a9124ea17a1e83298cdcdeb126178
mkdir "$SCRATCH" && cd "$SCRATCH"
for d in patches smoke locks images requirements; do ln -s "$REPO/$d" "$d"; done
cp "$HERE/h200-host.pub" "$HERE/int64-signed.json" .
sed -e 's|^registry = "127.0.0.1:5000/pinmatrix"|registry = "127.0.0.1:5077/pinmatrix"|' \
    -e 's|^\[stacks.h200.promotion\]$|&\ntrusted_hosts = ["h200-host.pub"]  # the H200 machine'"'"'s host key|' \
    "$REPO/matrix.toml" > matrix.toml
set -x
diff "$REPO/matrix.toml" matrix.toml || true
$PM registry start
$PM keygen
time skopeo copy --quiet --preserve-digests --dest-tls-verify=false \
    "oci:$REPO/.pinmatrix/oci:127.0.0.1:5000/pinmatrix/h200:$CELL" "docker://127.0.0.1:5077/pinmatrix/h200:$CELL"
skopeo inspect --tls-verify=false --format '{{.Digest}}' "docker://127.0.0.1:5077/pinmatrix/h200:$CELL"
cp "$REPO/results/h200/sandbox/results.sqlite" .pinmatrix/results.sqlite   # the H200 run's plain records
$PM promote --cell $CELL --dry-run || echo "exit status $?"
"$REPO/.venv/bin/python" -c '
import base64, json
(e,) = json.load(open("int64-signed.json"))
s = json.loads(base64.b64decode(e["payload"]))
[r.update(status="pass") for r in s["predicate"]["pinmatrixRecords"] if r["smoke"] == "shared-libraries"]
e["payload"] = base64.b64encode(json.dumps(s).encode()).decode()
json.dump([e], open("forged.json", "w"))'   # the xfail turned into a pass after signing
$PM results --import-signed forged.json --key h200-host.pub 2>&1 || echo "exit status $?"
$PM results --import-signed int64-signed.json --key h200-host.pub
$PM promote --cell $CELL --cache-dir "$REPO/.pinmatrix/cache"
$PM verify 127.0.0.1:5077/pinmatrix/known-good/h200:known-good
$PM verify 127.0.0.1:5077/pinmatrix/known-good/h200@$DIGEST --json > "$HERE/verify.json"
cp known-good.toml "$HERE/known-good.toml"
$PM registry stop
