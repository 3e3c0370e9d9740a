"""The flashinfer-aot layer of each cell's image in an OCI layout: its manifest, and per module the ELF machine
(`file`), NEEDED (`readelf -d`) and SASS (`cuobjdump -res-usage`, from pinmatrix's tool cache).

    python results/arch-scan/gb10-aot/aot_modules.py .pinmatrix/gb10-images/oci 34a5fc7fb6a2 68642c0882af
"""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from pinmatrix.archscan import tools
from pinmatrix.archscan.layers import aot_layer
from pinmatrix.oci.layer import open_layer


def main(layout: Path, cells: list[str]) -> int:
    cuobjdump = tools.cuobjdump(tools.cache_dir())
    for cell in cells:
        found = aot_layer(layout, cell)
        if found is None:
            print(f"cell {cell}: no image with a flashinfer-aot layer in {layout}")
            continue
        image, digest, media_type = found
        blob = layout / "blobs" / "sha256" / digest.split(":", 1)[1]
        print(f"cell {cell}: image {image}, flashinfer-aot layer {digest}, {blob.stat().st_size} bytes gzip")
        with tempfile.TemporaryDirectory() as tmp, open_layer(blob, media_type) as tar:
            for member in tar:
                if not member.isreg():
                    continue
                data = tar.extractfile(member)
                assert data is not None
                path = Path(tmp) / member.name.rsplit("/", 1)[1]
                path.write_bytes(data.read())
                if member.name.endswith(".json"):
                    print("  manifest:", json.dumps(json.loads(path.read_text()), sort_keys=True))
                    continue
                kind = subprocess.run(["file", "-b", str(path)], capture_output=True, text=True).stdout.strip()
                needed = re.findall(r"Shared library: \[([^\]]+)\]", subprocess.run(
                    ["readelf", "-d", str(path)], capture_output=True, text=True).stdout)
                sass = collections.Counter(re.findall(r"arch = (sm_\w+)", subprocess.run(
                    [cuobjdump or "cuobjdump", "-res-usage", str(path)], capture_output=True, text=True).stdout))
                print(f"  {member.name.split('/aot/', 1)[1]}: {member.size} bytes")
                print(f"    file: {kind[:120]}")
                print(f"    NEEDED: {', '.join(needed)}")
                print(f"    SASS (cuobjdump entries): {dict(sass)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), sys.argv[2:]))
