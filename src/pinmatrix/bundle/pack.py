"""Packing: files concatenated in order and cut into parts of at most a given size, written with the manifest,
the host's unpack script and any extra file (the lock) into a fresh folder that replaces the output at once."""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from securesystemslib.signer import CryptoSigner

from pinmatrix import sizes
from pinmatrix.atomic import atomic_write_bytes
from pinmatrix.bundle.model import (
    MANIFEST_NAME,
    MAX_MANIFEST_BYTES,
    SCRIPT_NAME,
    BundleError,
    BundleManifest,
    Part,
    part_name,
)
from pinmatrix.bundle.sign import SIGNATURE_NAME, sign_bundle
from pinmatrix.hashing import CHUNK
from pinmatrix.project.smoke_bundle import shipped_file
from pinmatrix.transfer import TransferMeter

Say = Callable[[str], None]
MAX_PARTS = 20000


def parse_size(text: str) -> int:
    """``--part-size``: ``56MB`` (10^6), ``60MiB`` (2^20), ``1000`` (bytes) as a byte count of at least one."""
    try:
        return sizes.parse_size(text, "--part-size")
    except sizes.SizeError as err:
        raise BundleError(str(err)) from None


def write_parts(files: Sequence[Path], part_size: int, folder: Path, say: Say,
                clock: Callable[[], float] = time.monotonic) -> list[Part]:
    """``files`` back to back, cut every ``part_size`` bytes into ``folder/part-NNN-of-MMM.bin``; ``say`` hears
    each part written and, about once a second within a part, the bytes of the whole, the rate and the time left."""
    total = sum(f.stat().st_size for f in files)
    meter = TransferMeter(total, clock=clock)
    count = -(-total // part_size)
    if count > MAX_PARTS:
        raise BundleError(f"{total} bytes in parts of {part_size} would be {count} parts (at most {MAX_PARTS})")
    parts: list[Part] = []
    handle = None
    digest = hashlib.sha256()
    written = 0

    def close() -> None:
        nonlocal handle, written, digest
        if handle is None:
            return
        handle.close()
        name = part_name(len(parts), count)
        parts.append(Part(name=name, size=written, sha256=digest.hexdigest()))
        say(f"part {len(parts)}/{count} {name}: {written} bytes; {meter.line()}")
        handle, written, digest = None, 0, hashlib.sha256()

    for path in files:
        with open(path, "rb") as source:
            for chunk in iter(lambda: source.read(CHUNK), b""):
                view = memoryview(chunk)
                while view:
                    if handle is None:
                        handle = open(folder / part_name(len(parts), count), "xb")
                    take = view[:part_size - written]
                    handle.write(take)
                    digest.update(take)
                    written += len(take)
                    meter.advance(len(take))
                    view = view[len(take):]
                    if written < part_size and meter.due():
                        say(f"writing part {len(parts) + 1}/{count}: {meter.line()}")
                    if written == part_size:
                        close()
    close()
    return parts


def publish(manifest: BundleManifest, parts_folder: Path, out: Path, extra: dict[str, bytes],
            signer: CryptoSigner | None = None) -> None:
    """Write the manifest, the unpack script, ``extra`` and (with ``signer``) the signature into ``parts_folder``,
    then make it ``out``: an existing ``out`` is replaced only when it is a bundle itself (it has a manifest) or
    empty."""
    body = (manifest.model_dump_json(indent=1, exclude_none=True) + "\n").encode()
    if len(body) > MAX_MANIFEST_BYTES:
        raise BundleError(f"{out}: the manifest would be {len(body)} bytes (at most {MAX_MANIFEST_BYTES})")
    for name, data in extra.items():
        atomic_write_bytes(parts_folder / name, data)
    script = shipped_file(SCRIPT_NAME).read_bytes()
    atomic_write_bytes(parts_folder / SCRIPT_NAME, script)
    atomic_write_bytes(parts_folder / MANIFEST_NAME, body)
    if signer is not None:
        atomic_write_bytes(parts_folder / SIGNATURE_NAME,
                           sign_bundle(body, manifest, hashlib.sha256(script).hexdigest(), signer))
    old = None
    if out.exists():
        check_out(out)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
    os.rename(parts_folder, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def check_out(out: Path) -> None:
    """``out`` may become a bundle: absent, empty, or a bundle already (it is replaced)."""
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MANIFEST_NAME).is_file())):
        raise BundleError(f"{out}: exists and is not a bundle folder: not replacing it")


def staging_folder(out: Path) -> Path:
    """A fresh folder next to ``out`` (same file system, so the final rename is atomic)."""
    out = out.absolute()
    check_out(out)
    folder = out.with_name(f".{out.name}.bundle-{os.getpid()}")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder
