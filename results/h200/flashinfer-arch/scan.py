"""Read every .so the builds produced: cuobjdump's own listing (each fatbin entry's `arch =` header) and
pinmatrix.archscan's reading of it with the verdict for sm_121 (GB10) and sm_120. Standard library plus
src/ on PYTHONPATH. argv: OUT CUOBJDUMP."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

from pinmatrix.archscan.binary import read_binary
from pinmatrix.archscan.verdict import binary_verdict

out, exe = Path(sys.argv[1]), sys.argv[2]
listing: list[str] = []
rows = []
for build in sorted(out.glob("build-*.json")):
    record = json.loads(build.read_text())
    for so in record.get("so", []):
        text = subprocess.run([exe, "-res-usage", so], capture_output=True, text=True).stdout
        kinds: Counter[str] = Counter()
        kind = None
        for line in text.splitlines():
            if line.startswith("Fatbin "):
                kind = line.split()[1]
            elif line.startswith("arch = ") and kind:
                kinds[f"{kind} {line.split('=', 1)[1].strip()}"] += 1
        listing.append(f"FLASHINFER_CUDA_ARCH_LIST={record['arch_list']!r} {so}")
        listing += [f"    {n} x {k}" for k, n in sorted(kinds.items())]
        found = read_binary(Path(so), exe)
        rows.append({
            "arch_list": record["arch_list"], "so": so, "cuobjdump_entries": dict(kinds),
            "sass": found.sass if found else [], "ptx": found.ptx if found else [],
            "on_sm_121": binary_verdict(found, (12, 1)).summary if found else "no device code",
            "on_sm_120": binary_verdict(found, (12, 0)).summary if found else "no device code",
        })
(out / "cuobjdump-listing.txt").write_text("\n".join(listing) + "\n")
(out / "flashinfer-arch.json").write_text(json.dumps(rows, indent=1) + "\n")
print("\n".join(listing))
for r in rows:
    print(f"{r['arch_list']}: {Path(r['so']).name}: SASS {' '.join(r['sass'])} PTX {' '.join(r['ptx']) or '-'} | "
          f"sm_121: {r['on_sm_121']}")
