#!/bin/sh
# The gb10 benchmark session (not CI: it takes minutes): one 12.1a and one 12.0f gb10-nvfp4 cell (vllm 0.20.0,
# torch 2.11.0, flashinfer 0.6.8.post1 from PyPI, driver 580.142, default env) assembled here as arm64 images,
# loaded into podman, and `python -c "import torch, vllm, flashinfer"` run in each under qemu-user emulation.
# Run from the repository root:  sh results/gb10-images/run.sh  (log: results/gb10-images/log)
# Needs: mmdebstrap, podman (+ runc), qemu-user-static and binfmt-support (Debian), root for binfmt_misc.
# The layouts stay under .pinmatrix/gb10-images/ (ignored): arch-scan reads them from there.
set -eu
OUT=.pinmatrix/gb10-images
CELLS="${CELLS:-34a5fc7fb6a2 68642c0882af}"   # 12.1a, 12.0f (driver 580.142, env default)
mkdir -p "$OUT"
K=$(echo $CELLS | sed 's/ / or /g')
step() { echo; echo "## $(date -u +%H:%M:%S) $*"; }

step "cells"
.venv/bin/pinmatrix cells -s gb10-nvfp4 -k "$K"

step "assemble (no engine): pinmatrix build --engine none"
/usr/bin/time -v .venv/bin/pinmatrix build --engine none -k "$K" --jobs 2 --layout "$OUT/oci" \
    --logs-dir "$OUT/logs" --metadata-file "$OUT/build.json" 2>&1 | grep -v "^	[A-Z].*: 0$"
python3 -c "import json; d=json.load(open('$OUT/build.json')); [print(c['cell'], c['ref'], c['digest'], len(c['layers']), 'layers') for c in (d if isinstance(d, list) else d.values())]" || true
du -sh "$OUT/oci"

step "load into podman (the project's store: pinmatrix engine-env)"
/usr/bin/time -f "load: %e s" .venv/bin/pinmatrix build --engine podman -k "$K" --layout "$OUT/oci" \
    --logs-dir "$OUT/logs" --metadata-file "$OUT/loaded.json"

step "binfmt_misc and qemu-user-static"
[ -f /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
update-binfmts --enable qemu-aarch64 || true
cat /proc/sys/fs/binfmt_misc/qemu-aarch64
qemu-aarch64-static --version | head -1

eval "$(.venv/bin/pinmatrix engine-env)"
for id in $CELLS; do
    REF=$(podman images --format '{{.Repository}}:{{.Tag}}' | grep ":$id\$" | head -1)
    step "cell $id: $REF"
    podman image inspect --format '{{.Architecture}} {{.Os}} {{.Size}} bytes, {{len .RootFS.Layers}} layers' "$REF"
    # The base has no coreutils (an extract base holds python3's closure, dash and the C++ runtime): ask Python.
    podman run --rm --network=none "$REF" /bin/sh -c 'echo "/bin/sh runs: $0"; python -c "
import getpass, os, platform, ssl
print(platform.machine(), getpass.getuser(), os.readlink(\"/lib\"), os.path.exists(\"/lib/ld-linux-aarch64.so.1\"))
print(os.path.getsize(ssl.get_default_verify_paths().cafile or \"/etc/ssl/certs/ca-certificates.crt\"), \"bytes of CA bundle\")
print({k: v for k, v in os.environ.items() if k.endswith(\"_CUDA_ARCH_LIST\") or k in (\"CUDA_HOME\", \"CXX\")})
"' || echo "inspection failed: exit $?"
    /usr/bin/time -f "import under emulation: %e s" podman run --rm --network=none "$REF" \
        python -c "import torch, vllm, flashinfer; print('torch', torch.__version__, 'cuda', torch.version.cuda); print('vllm', vllm.__version__); print('flashinfer', flashinfer.__version__)" \
        || echo "import failed: exit $?"
done
step "done"
