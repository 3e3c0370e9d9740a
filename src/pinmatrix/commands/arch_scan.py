"""``pinmatrix arch-scan``: what each cell's CUDA binaries can run on the cell's GPU, without a GPU."""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from pinmatrix.archscan.render import render_scan_markdown
from pinmatrix.archscan.scan import scan_cell, scan_document, scan_tool
from pinmatrix.commands._common import add_matrix_argument, add_selection_arguments, examples, selected
from pinmatrix.matrix.selection import load
from pinmatrix.paths import CACHE_DIR, OCI_DIR


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "arch-scan", help="read the SASS/PTX targets of every CUDA binary in each cell's wheels and judge them "
                          "against the cell's GPU (no GPU needed)",
        description="For each selected cell: fetch its locked wheels for the cell's platform and Python (from "
                    "locks/<cell-id>.txt; without a lock, what the default index resolves, saying what is "
                    "missing), open every .so/.cubin/.fatbin in them, list the exact SASS and PTX targets with "
                    "cuobjdump (installed from its PyPI wheel into the cache; the fatbin header parser is the "
                    "fallback and cannot see a/f suffixes), and give a verdict per binary and package for the "
                    "cell's GPU: native, PTX JIT, partial or cannot run. Rules: src/pinmatrix/data/arch_rules.toml. "
                    "Wheels come from the build's wheel cache (--cache-dir), and the ones it lacks are downloaded into "
                    "it; the scan results are cached in $PINMATRIX_CACHE (default ~/.cache/pinmatrix). A cell whose image is in the OCI layout "
                    "(--layout) also gets its flashinfer-aot layer read. Verdicts: native, PTX JIT, partial, cannot "
                    "run, or other GPUs only (built only for other GPU generations: left out of a package's verdict).",
        **examples("pinmatrix arch-scan --stack gb10-nvfp4    # SASS/PTX of each cell's wheels vs its GPU",
                   "pinmatrix arch-scan -k h200 --json",
                   "pinmatrix arch-scan --stack gb10-nvfp4 --out scan/ && pinmatrix report --arch-scan scan/arch-scan.json"),
    )
    add_matrix_argument(p)
    add_selection_arguments(p)
    p.add_argument("--json", action="store_true", help="print the JSON document (pinmatrix-arch-scan/1) on stdout")
    p.add_argument("--out", "-o", type=Path, metavar="DIR",
                   help="also write DIR/arch-scan.json and DIR/arch-scan.md")
    p.add_argument("--no-cuobjdump", action="store_true",
                   help="use only the fatbin header parser (no suffixes; for comparison)")
    p.add_argument("--cache-dir", type=Path, default=None,
                   help="the build's cache, the one wheel cache: wheels are read from it and downloaded into it, "
                        f"never twice (default: {CACHE_DIR} next to the matrix)")
    p.add_argument("--layout", type=Path, default=None,
                   help="the OCI layout of the cells' images: a cell's image adds its flashinfer-aot layer (the "
                        "FlashInfer modules compiled at build time for its arch list) as a row (default: "
                        f"{OCI_DIR} next to the matrix)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    matrix, expansion = load(args.matrix)
    cells = selected(matrix, expansion, args)
    tool, label = scan_tool(not args.no_cuobjdump)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    scans = []
    for i, cell in enumerate(cells, 1):
        log(f"[{i}/{len(cells)}] {cell.id} {cell.name}")
        scans.append(scan_cell(cell, Path(matrix.root), matrix.settings.exclude_newer, tool=tool, tool_label=label,
                               log=log, build_cache=args.cache_dir or Path(matrix.root) / CACHE_DIR,
                               layout=args.layout or Path(matrix.root) / OCI_DIR))
    command = "pinmatrix arch-scan " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["arch-scan"] else sys.argv[1:])
    doc = scan_document(scans, label, command)
    markdown = render_scan_markdown(doc)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "arch-scan.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        (args.out / "arch-scan.md").write_text(markdown, encoding="utf-8")
        log(f"wrote {args.out / 'arch-scan.json'} and {args.out / 'arch-scan.md'}")
    print(json.dumps(doc, indent=1, sort_keys=True) if args.json else markdown, end="" if not args.json else "\n")
    return 0
