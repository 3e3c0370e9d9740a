"""Shared-library smoke: every compiled extension of the cell's packages can find the libraries it links.

Oracle (two lines): each ELF .so under the pinned distributions is read (ELF64 DT_NEEDED, RPATH/RUNPATH),
and every needed library must resolve in the system's, the RUNPATH's or the cell's own library folders.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import re
import struct
import sysconfig
from pathlib import Path

from _smokelib import Context, Degraded, Skip, main

SMOKES = {
    "shared-libraries": {
        "func": "shared_libraries",
        "description": "every compiled extension (.so) of the cell's pinned distributions finds each library it "
        "links (DT_NEEDED through RPATH/RUNPATH, the pip-installed nvidia-* lib folders and the system's); "
        "degraded when some cannot load, with who needs what. Runs without a GPU.",
        "needs": {},
        "phase": 8,
        "timeout_s": 600,
        "batch": "kernels",
    },
}

_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")
# Provided by the NVIDIA driver on the GPU host (mounted by the container toolkit), never by the image.
DRIVER_LIBS = re.compile(r"^(libcuda\.so|libnvidia-ml\.so|libnvcuvid\.so|libnvidia-.*\.so)")
SYSTEM_DIRS = ("/lib", "/usr/lib", "/lib64", "/usr/lib64", "/usr/local/lib")


def elf_dynamic(path: Path) -> tuple[list[str], list[str]] | None:
    """(DT_NEEDED names, RPATH/RUNPATH entries) of an ELF64 little-endian file, None if it is not one."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        return None
    phoff, = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    loads, dynamic = [], None
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from("<IIQQQQQQ", data, phoff + i * phentsize)
        if p_type == 1:
            loads.append((p_vaddr, p_offset, p_filesz))
        elif p_type == 2:
            dynamic = (p_offset, p_filesz)
    if dynamic is None:
        return [], []

    def offset(vaddr: int) -> int:
        for base, off, size in loads:
            if base <= vaddr < base + size:
                return off + vaddr - base
        return vaddr

    entries, strtab = [], 0
    for i in range(dynamic[1] // 16):
        tag, value = struct.unpack_from("<qQ", data, dynamic[0] + 16 * i)
        if tag == 0:
            break
        if tag == 5:
            strtab = offset(value)
        entries.append((tag, value))

    def string(at: int) -> str:
        end = data.index(b"\0", strtab + at)
        return data[strtab + at:end].decode("utf-8", "replace")

    needed = [string(v) for t, v in entries if t == 1]
    paths = [p for t, v in entries if t in (15, 29) for p in string(v).split(":") if p]
    return needed, paths


def library_dirs(site: Path) -> list[Path]:
    dirs = [Path(d) for d in SYSTEM_DIRS]
    dirs += [Path(d) for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    if multiarch:
        dirs += [Path("/lib") / multiarch, Path("/usr/lib") / multiarch]
    # torch and friends preload the pip-installed CUDA libraries from these folders
    dirs += sorted(p for p in site.glob("nvidia/*/lib") if p.is_dir())
    dirs += sorted(p for p in site.glob("nvidia/cu*/lib") if p.is_dir())
    dirs += sorted(p for p in site.glob("*.libs") if p.is_dir())
    return dirs


def shared_libraries(ctx: Context) -> None:
    names = [m.group(1) for line in ctx.cell.get("requirements") or [] if (m := _REQ.match(line))]
    if not names:
        raise Skip("no cell requirements: nothing to check")
    problems: list[str] = []
    checked = 0
    dists = []
    for name in names:
        try:
            dists.append(md.distribution(name))
        except md.PackageNotFoundError:
            continue
    # Libraries the cell's own distributions ship (torch/lib, nvidia/*/lib, ...): an extension built against
    # torch finds libtorch*.so there once torch is imported, as it always is first.
    shipped = sorted({Path(d.locate_file(f)).parent for d in dists for f in d.files or ()
                      if str(f).endswith(".so") or ".so." in str(f)})
    for name in names:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        for file in dist.files or ():
            if not (str(file).endswith(".so") or ".so." in str(file)):
                continue
            path = Path(dist.locate_file(file))
            site = Path(dist.locate_file(""))
            try:
                found = elf_dynamic(path)
            except (OSError, struct.error, ValueError):
                continue
            if found is None:
                continue
            checked += 1
            needed, rpaths = found
            dirs = [Path(p.replace("$ORIGIN", str(path.parent))) for p in rpaths] + [path.parent]
            dirs += library_dirs(site) + shipped
            missing = [lib for lib in needed if not DRIVER_LIBS.match(lib) and not any((d / lib).exists() for d in dirs)]
            if missing:
                problems.append(f"{name} {dist.version}: {file} needs {', '.join(missing)}")
    ctx.metric("elf_files_checked", checked)
    if problems:
        ctx.metric("unresolved", len(problems))
        for line in problems:
            print(line)
        raise Degraded(f"{len(problems)} compiled extension(s) cannot load: " + "; ".join(problems[:4])
                       + (f" and {len(problems) - 4} more" if len(problems) > 4 else ""), "missing-library")
    ctx.summary = f"{checked} compiled extension(s): every linked library resolves"


if __name__ == "__main__":
    main(SMOKES, globals())
