"""After an in-image run on the H200 (results/h200/in-image/run.sh, images built with the flashinfer-aot layer):
did the FlashInfer smokes load their modules from the image's AOT folder, or compile them at run time?

    python3 results/arch-scan/check_aot_in_image.py results/h200/in-image/out/*.json

A fresh image root has no FlashInfer JIT cache, so a first call that compiles costs what the host's did
(decode 9.0 s, bmm_fp8 33.5 s: results/h200/results.json); from the AOT folder it costs a module load (the host's
warm-cache first call: 0.012 s). Exit 1 when a smoke run inside an image passed with a first call over 5 s."""

from __future__ import annotations

import json
import sys

SMOKES = ("flashinfer-decode", "flashinfer-fp8-gemm")
COMPILED_S = 5.0


def main(paths: list[str]) -> int:
    bad = seen = 0
    for path in paths:
        with open(path, encoding="utf-8") as handle:
            records = json.load(handle)
        for r in records if isinstance(records, list) else records.get("records", []):
            if r.get("smoke") not in SMOKES or not r.get("image_digest"):
                continue
            seen += 1
            first = (r.get("metrics") or {}).get("first_call_s")
            compiled = r.get("status") == "pass" and isinstance(first, (int, float)) and first > COMPILED_S
            bad += compiled
            print(f"{r['cell_id']} {r['smoke']}: {r['status']}, first call {first} s "
                  f"({'compiled at run time' if compiled else 'no compile' if first is not None else 'no timing'}) "
                  f"image {r['image_digest'][:19]}")
    if not seen:
        print("no FlashInfer smoke run inside an image in these files")
        return 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
