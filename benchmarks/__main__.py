"""python -m benchmarks [NAME ...]: run the named benchmarks (default: all) and print their figures."""

from __future__ import annotations

import argparse
import importlib
import json
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}")
    args = parser.parse_args(argv)
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
        if figures.get("target_met") is False:
            failed = True
            print(f"   TARGET MISSED: {figures.get('target')}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
