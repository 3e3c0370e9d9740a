"""Benchmark session (minutes to an hour; not CI): the flashinfer-aot modules of the FP4 smokes built on an x86_64
cell's own root for FLASHINFER_CUDA_ARCH_LIST 12.1a and for 12.0f, written as layers into the OCI layout and read
by arch-scan (results/arch-scan/aot-x86.json, .md). The cell is the shipped plain h200 cell with its arch flag
replaced: the same lock, base and generator as its image; only the arch list differs.

    .venv/bin/python results/arch-scan/aot_x86.py [MODULE ...]   (default: fp4-quantize fp4-gemm-cutlass)

Needs root (chroot, mount namespace), the cell's base and wheel layers in .pinmatrix (a `pinmatrix build` of it)."""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

from pinmatrix.archscan import verdict as V
from pinmatrix.archscan.layers import scan_aot_layer
from pinmatrix.archscan.scan import scan_tool
from pinmatrix.image.assembly import aot_plan
from pinmatrix.image.assembly.assemble import Assembler, AssemblySettings
from pinmatrix.matrix.selection import load
from pinmatrix.oci.layer import LayerWriter

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(__file__).resolve().parent
FLAGS = ("12.1a", "12.0f")


def main(modules: list[str]) -> int:
    _, expansion = load(ROOT / "matrix.toml")
    plain = next(c for c in expansion.cells if c.stack == "h200" and "int64" not in c.name)
    asm = Assembler(AssemblySettings(root=ROOT, cache_dir=ROOT / ".pinmatrix" / "cache", layout_dir=ROOT / ".pinmatrix" / "oci"))
    log = OUT / "aot-x86.log"
    log.write_text("")
    image, ctx = asm.plan(plain, (ROOT / "locks" / f"{plain.id}.txt").read_text(), log)
    base = ctx["base"]
    descriptors = [*base.layers, *(p.descriptor for p in image.layers
                                   if p.descriptor and (p.name == "venv" or p.name.startswith("wheel:")))]
    missing = [p.name for p in image.layers if (p.name == "venv" or p.name.startswith("wheel:")) and not p.descriptor]
    if missing:
        raise SystemExit(f"build the cell first (pinmatrix build -k {plain.id}): {len(missing)} layers missing")
    tool, label = scan_tool()
    record: dict[str, object] = {"cell": plain.id, "modules": modules, "runs": []}
    with tempfile.TemporaryDirectory(prefix="aot-x86-", dir=ROOT / ".pinmatrix" / "cache") as tmp:
        work = Path(tmp)
        t0 = time.monotonic()
        aot_plan.unpack(work / "root", aot_plan.layer_blobs(asm.layout.blob_path, descriptors))
        record["unpack_s"] = round(time.monotonic() - t0, 1)
        planned = aot_plan.plan(plain, {n: w.sha256 for n, w in ctx["wheels"].items()}, base.key, epoch=0, level=1)
        assert planned is not None and planned.toolchain is not None
        aot_plan.add_link_files(work / "root", aot_plan.link_entries(
            planned.toolchain, ctx["venv"].site_packages, aot_plan.stub_libcuda(aot_plan.host_machine(), work)))
        for flag in FLAGS:
            cell = dataclasses.replace(plain, arch_flags=(flag,), torch_cuda_arch_list=flag, flashinfer_cuda_arch_list=flag)
            aot = dataclasses.replace(planned, modules=tuple(modules), arch_list=flag)
            built = aot_plan.run_generator(cell, aot, work / "root", log, out_name=f"out-{flag}")
            writer = LayerWriter(asm.layout.blobs, epoch=0)
            aot_plan.write_aot_layer(writer, ctx["venv"].site_packages, built)
            desc = writer.close()
            scan = scan_aot_layer(ROOT / ".pinmatrix" / "oci", desc.digest, desc.media_type, tool, label)
            binaries = []
            for b in scan.binaries:
                judged = V.binary_verdict(b, (12, 1))
                binaries.append({"path": b.path, "sass": b.sass, "ptx": b.ptx, "groups": [list(g) for g in b.groups][:4],
                                 "n_groups": len(b.groups), "on_sm_121": judged.summary})
            record["runs"].append({"flag": flag, "seconds": round(built.seconds, 1), "layer": desc.digest,
                                   "layer_bytes": desc.size, "manifest": built.manifest, "binaries": binaries})
            (OUT / "aot-x86.json").write_text(json.dumps(record, indent=1) + "\n")
            print(json.dumps(record["runs"][-1]["binaries"], indent=1), flush=True)
        aot_plan._remove_tree(work / "root")
    lines = ["# flashinfer-aot layers built on an x86_64 cell for 12.1a and 12.0f", "",
             f"Cell {plain.id} (h200 plain) with its arch flag replaced; modules {', '.join(modules)}; "
             f"unpack {record['unpack_s']} s; tool {label}.", "",
             "| arch list | module | SASS | PTX | on sm_121 | build s |", "|---|---|---|---|---|---|"]
    for run in record["runs"]:  # type: ignore[attr-defined]
        for b in run["binaries"]:
            lines.append(f"| {run['flag']} | `{b['path'].split('/')[0]}` | {' '.join(b['sass'])} | {' '.join(b['ptx']) or '-'} | "
                         f"{b['on_sm_121']} | {run['seconds']} |")
    (OUT / "aot-x86.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["fp4-quantize", "fp4-gemm-cutlass"]))
