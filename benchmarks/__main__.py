"""python -m benchmarks [NAME ...]: run the named benchmarks (default: all) and print their figures."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

# name -> module under benchmarks/. Register new benchmarks here.
BENCHMARKS: dict[str, str] = {
    "expansion": "benchmarks.expansion",
    "build": "benchmarks.build",
    "assembly": "benchmarks.assembly",
    "compression": "benchmarks.compression",
    "load": "benchmarks.load",
    "merge": "benchmarks.merge",
    "report": "benchmarks.report",
    "userpath": "benchmarks.userpath",
    "buildcache": "benchmarks.buildcache",
}
# --smallest: every benchmark at the size that runs in seconds (what CI runs, so that none breaks unseen); the
# figures are then not the benchmark's and its target is not judged. An engine step that another benchmark of the
# run makes is made there only, and build runs no Containerfile baseline; each says so in its figures. Each
# variable can still be set by hand.
SMALLEST = {"PINMATRIX_BENCH_SMALLEST": "1", "PINMATRIX_BENCH_STACK": "demo", "PINMATRIX_BENCH_ROUNDS": "1",
            "PINMATRIX_BENCH_PULL_ROUNDS": "1", "PINMATRIX_BENCH_WHOLE_MATRIX": "0", "PINMATRIX_BENCH_BYTES": "2e6"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    parser.add_argument("--smallest", action="store_true",
                        help="each benchmark at its smallest size (seconds; its target is not judged): "
                             "the demo stack, one round; PINMATRIX_BENCH_BASE_CACHE=DIR takes the Debian base "
                             "made there instead of running mmdebstrap")
    args = parser.parse_args(argv)
    if args.smallest:
        for name, value in SMALLEST.items():
            os.environ.setdefault(name, value)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {unknown[0]!r} (known: {', '.join(BENCHMARKS)})")
    names = args.names or list(BENCHMARKS)
    out_dir = Path(".pinmatrix/benchmarks")
    out_dir.mkdir(parents=True, exist_ok=True)
    failed = False
    for name in names:
        module = importlib.import_module(BENCHMARKS[name])
        start = time.perf_counter()
        figures = module.run()
        figures["wall_s"] = round(time.perf_counter() - start, 3)
        (out_dir / f"{name}.json").write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
        print(f"== {name}")
        for key, value in figures.items():
            print(f"   {key}: {value}")
        if figures.get("target_met") is False and not args.smallest:
            failed = True
            print(f"   TARGET MISSED: {figures.get('target')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
