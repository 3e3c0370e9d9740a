"""An image's root filesystem, unpacked from an OCI layout by manifest digest into a folder of its own
(``<roots>/<hex>/rootfs``), for the chroot runtime.

- Every blob is read through its sha256: the manifest and config before they are parsed (the layout's one
  checked reader, ``OCILayout.read_document``), each layer as it is unpacked; the root is renamed into place
  only once every layer's digest and size matched, so a tampered blob leaves nothing behind (the work happens
  in ``<roots>/.tmp-<hex>-*``, then one rename).
- Layers are plain, gzip or zstd tars (inflated by a ``pigz``/``gzip``/``zstd`` process beside this one, or
  in this process where there is no binary), applied in order with the OCI
  whiteouts: ``.wh.NAME`` removes NAME of the layers below, ``.wh..wh..opq`` empties its directory of them.
- Modes, times and (when run as root) owners are the layers'. Links are created, never followed: a member whose
  path is absolute, holds ``..`` or passes through a symlink, and a hard link to anything outside the root or not
  yet in it, is refused with one line naming the layer digest and the member. Setuid and setgid bits are dropped,
  and device nodes and FIFOs are not made (an image's /dev is the runtime's; one line counts what was left out), so
  no unpacked root holds a setuid-root program or a node of the host's disk or memory, whoever unpacked it.
- A root that is present and complete (``unpacked.json`` names the same manifest) is reused.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import tarfile
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO, cast

import zstandard

from pinmatrix.atomic import atomic_write_text, locked
from pinmatrix.oci.compression import Format, layer_format
from pinmatrix.oci.layout import LayoutError, OCILayout, checked_digest
from pinmatrix.oci.manifest import MANIFEST_TYPES, is_index

MAX_LAYERS = 512
MAX_MEMBER_NAME = 4096
CHUNK = 1 << 20
COMPLETE = "unpacked.json"
ROOTFS = "rootfs"
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"


class RootfsError(LayoutError):
    """The image cannot be unpacked: a blob is missing or does not match its digest, or a layer is unsafe."""


@dataclass(frozen=True)
class ImageRoot:
    """An unpacked image: its root folder and what its config says about running it."""

    digest: str  # the manifest digest
    path: Path  # the rootfs folder
    config: dict[str, Any]  # the image config (architecture, os, config.Env/User/WorkingDir, ...)
    reused: bool = False

    @property
    def run_config(self) -> dict[str, Any]:
        value = self.config.get("config") or {}
        return value if isinstance(value, dict) else {}

    @property
    def env(self) -> dict[str, str]:
        """The config's Env as a mapping (a later entry of a name wins, as engines do)."""
        out: dict[str, str] = {}
        for item in self.run_config.get("Env") or []:
            if isinstance(item, str) and "=" in item:
                key, _, value = item.partition("=")
                out[key] = value
        return out

    @property
    def user(self) -> str:
        value = self.run_config.get("User") or ""
        return value if isinstance(value, str) else ""

    @property
    def working_dir(self) -> str:
        value = self.run_config.get("WorkingDir") or "/"
        return value if isinstance(value, str) and value.startswith("/") else "/"

    @property
    def architecture(self) -> str:
        return str(self.config.get("architecture") or "")


def _check_digest(digest: object, what: str) -> str:
    with _refused():
        return checked_digest(digest, what)


@contextmanager
def _refused() -> Iterator[None]:
    """A layout read's LayoutError raised as this unpacker's RootfsError, with the same line."""
    try:
        yield
    except RootfsError:
        raise
    except LayoutError as err:
        raise RootfsError(str(err)) from None


def _layout(layout_dir: Path) -> OCILayout:
    layout = OCILayout(layout_dir)
    if not layout.has_index():
        raise RootfsError(f"{layout_dir}: not an OCI image layout (no index.json)")
    return layout


def image_digest(layout_dir: Path, ref_or_digest: str) -> str | None:
    """The manifest digest that the layout's index names ``ref_or_digest`` (a reference name annotation), or that
    digest itself when the index lists it; None when neither."""
    with _refused():
        return _layout(layout_dir).find(ref_or_digest)


def _layers_of(layout: OCILayout, digest: str) -> tuple[dict[str, Any], list[tuple[str, int, Format]]]:
    """The image config and (digest, size, compression) of each layer, bottom first."""
    manifest = layout.read_document(digest, "manifest")
    media = manifest.get("mediaType")
    if is_index(manifest):
        raise RootfsError(f"{layout.root}: {digest} is an image index: name one platform's manifest digest")
    if media is not None and media not in MANIFEST_TYPES:
        raise RootfsError(f"{layout.root}: manifest {digest} has media type {str(media)[:80]!r}, not an image manifest")
    config_desc = manifest.get("config")
    layers = manifest.get("layers")
    if not isinstance(config_desc, dict) or not isinstance(layers, list):
        raise RootfsError(f"{layout.root}: manifest {digest} has no config or layers")
    if len(layers) > MAX_LAYERS:
        raise RootfsError(f"{layout.root}: manifest {digest} has {len(layers)} layers (at most {MAX_LAYERS})")
    config = layout.read_document(_check_digest(config_desc.get("digest"), f"manifest {digest} config"), "config")
    out = []
    for n, layer in enumerate(layers):
        if not isinstance(layer, dict):
            raise RootfsError(f"{layout.root}: manifest {digest} layer {n} is not a descriptor")
        layer_digest = _check_digest(layer.get("digest"), f"manifest {digest} layer {n}")
        size = layer.get("size")
        if type(size) is not int or size < 0:
            raise RootfsError(f"{layout.root}: layer {layer_digest} has no valid size")
        compression = layer_format(str(layer.get("mediaType")))
        if compression is None:
            raise RootfsError(f"{layout.root}: layer {layer_digest} has media type "
                              f"{str(layer.get('mediaType'))[:80]!r}, not a tar layer")
        out.append((layer_digest, size, compression))
    return config, out


class _Verified:
    """Reads a blob file, hashing and counting every byte; ``finish`` reads the rest and checks digest and size."""

    def __init__(self, path: Path, digest: str, size: int) -> None:
        self.fh: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed by finish/close
        self.digest = digest
        self.size = size
        self.hash = hashlib.sha256()
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.fh.read(CHUNK if n is None or n < 0 else n)
        self.hash.update(data)
        self.count += len(data)
        if self.count > self.size:
            raise RootfsError(f"layer {self.digest}: longer than the {self.size} bytes its descriptor says")
        return data

    def finish(self) -> None:
        while self.read(CHUNK):
            pass
        if self.count != self.size or "sha256:" + self.hash.hexdigest() != self.digest:
            raise RootfsError(f"layer {self.digest}: the blob does not match its digest and size "
                              f"({self.count} bytes read, {self.size} expected): tampered or damaged; refused")

    def close(self) -> None:
        self.fh.close()


@contextmanager
def _tar_stream(raw: _Verified, compression: str) -> Iterator[IO[bytes]]:
    """The layer's tar bytes, decompressed as they are read from the verified blob."""
    if compression == "none":
        yield cast(BinaryIO, raw)
        return
    tool = (shutil.which("pigz") or shutil.which("gzip")) if compression == "gzip" else shutil.which("zstd")
    if tool is None and compression == "gzip":  # in this process, one core for everything
        with gzip.GzipFile(fileobj=cast(BinaryIO, raw), mode="rb") as stream:
            yield cast(IO[bytes], stream)
        return
    if tool is None:  # zstd in this process (the pinned zstandard wheel), one core for everything
        with zstandard.ZstdDecompressor().stream_reader(cast(BinaryIO, raw), read_across_frames=True,
                                                        closefd=False) as reader:
            yield cast(IO[bytes], reader)
            while reader.read(CHUNK):  # the rest: the whole blob must pass through the hash
                pass
        return
    # A decompressor process beside this one: it inflates while this one hashes the blob and makes the files.
    proc = subprocess.Popen([tool, "-d", "-c"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    assert proc.stdin is not None and proc.stdout is not None
    failure: list[BaseException] = []

    def feed() -> None:
        try:
            while data := raw.read(CHUNK):
                proc.stdin.write(data)  # type: ignore[union-attr]
        except BrokenPipeError:
            pass
        except BaseException as err:  # noqa: BLE001 - reported by the reader below
            failure.append(err)
        finally:
            try:
                proc.stdin.close()  # type: ignore[union-attr]
            except BrokenPipeError:
                pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    try:
        yield proc.stdout
        while proc.stdout.read(CHUNK):  # the rest: zstd must see, and the feeder hash, the whole blob
            pass
    finally:
        proc.stdout.close()
        feeder.join()
        code = proc.wait()
    if failure:
        raise failure[0]
    if code != 0:
        raise RootfsError(f"layer {raw.digest}: {Path(tool).name} cannot decompress it (exit {code})")


# ------------------------------------------------------------------------------------------- applying a layer


class _Layer:
    """One layer applied to ``root``: member paths checked, whiteouts applied, entries created without
    following any link."""

    def __init__(self, root: Path, digest: str, as_root: bool) -> None:
        self.root = root
        self.digest = digest
        self.as_root = as_root
        self.created: set[str] = set()  # paths this layer made: its whiteouts do not hide them
        self.dirs: list[tuple[Path, tarfile.TarInfo]] = []  # their modes and times are set at the end
        self.left_out = 0  # device nodes and FIFOs, never made

    def refuse(self, member: str, why: str) -> RootfsError:
        return RootfsError(f"layer {self.digest}: member {member[:200]!r}: {why}; refused")

    def clean(self, name: str, member: str) -> str:
        """The member's path relative to the root ('' for the root itself)."""
        if len(name) > MAX_MEMBER_NAME or "\0" in name:
            raise self.refuse(member, "name too long or holds a NUL byte")
        if name.startswith("/"):
            raise self.refuse(member, "absolute path")
        parts = [p for p in name.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise self.refuse(member, "a '..' path")
        return "/".join(parts)

    def parent(self, rel: str, member: str, *, make: bool = True) -> Path:
        """The folder that holds ``rel``, made where missing (``make``); every component must be a real directory,
        never a symlink (that could lead out of the root)."""
        current = self.root
        for part in rel.split("/")[:-1]:
            current = current / part
            try:
                st = os.lstat(current)
            except FileNotFoundError:
                if not make:
                    raise self.refuse(member, f"a hard link to {rel[:200]!r}, which is not in the root") from None
                os.mkdir(current, 0o755)
                self.created.add(str(current.relative_to(self.root)))
                continue
            if stat.S_ISLNK(st.st_mode):
                raise self.refuse(member, f"its path passes through the symlink /{current.relative_to(self.root)}")
            if not stat.S_ISDIR(st.st_mode):
                raise self.refuse(member, f"its path passes through /{current.relative_to(self.root)}, "
                                          "which is not a directory")
        return current

    def remove(self, path: Path) -> None:
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(path)  # never follows a symlink inside (fd-based walk)
        else:
            os.unlink(path)

    def apply(self, info: tarfile.TarInfo, tar: tarfile.TarFile) -> None:
        rel = self.clean(info.name, info.name)
        if not rel:
            return  # the root itself keeps its mode
        base = rel.rsplit("/", 1)[-1]
        folder = self.parent(rel, info.name)
        if base == OPAQUE:
            prefix = str(folder.relative_to(self.root)) if folder != self.root else ""
            for entry in os.listdir(folder):
                child = f"{prefix}/{entry}" if prefix else entry
                if child not in self.created:
                    self.remove(folder / entry)
            return
        if base.startswith(WHITEOUT):
            hidden = base[len(WHITEOUT):]
            if not hidden or hidden in (".", ".."):
                raise self.refuse(info.name, "a whiteout that names nothing")
            gone = rel[: -len(base)] + hidden
            if gone not in self.created:
                self.remove(folder / hidden)
            return
        path = folder / base
        self.created.add(rel)
        if info.isdir():
            try:
                st = os.lstat(path)
                if not stat.S_ISDIR(st.st_mode):
                    self.remove(path)
                    os.mkdir(path, 0o700)
            except FileNotFoundError:
                os.mkdir(path, 0o700)
            self.dirs.append((path, info))
            return
        self.remove(path)
        if info.issym():
            os.symlink(info.linkname, path)
        elif info.islnk():
            target_rel = self.clean(info.linkname, info.name)
            if not target_rel:
                raise self.refuse(info.name, "a hard link to the root folder")
            target = self.parent(target_rel, info.name, make=False) / target_rel.rsplit("/", 1)[-1]
            try:
                st = os.lstat(target)
            except FileNotFoundError:
                raise self.refuse(info.name, f"a hard link to {info.linkname[:200]!r}, which is not in the root "
                                             "(outside it, or not yet unpacked)") from None
            if stat.S_ISDIR(st.st_mode):
                raise self.refuse(info.name, "a hard link to a directory")
            os.link(target, path, follow_symlinks=False)
            return  # a hard link shares its target's inode: owner and mode are the target's
        elif info.isreg():
            source = tar.extractfile(info)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                if source is not None:
                    shutil.copyfileobj(source, out, CHUNK)
        elif info.ischr() or info.isblk() or info.isfifo():
            self.left_out += 1  # a node of the host's disk or memory must never exist on the host's file system
            return
        else:
            raise self.refuse(info.name, f"an entry of tar type {info.type!r} this runtime does not make")
        self.attributes(path, info)

    def attributes(self, path: Path, info: tarfile.TarInfo) -> None:
        if self.as_root:
            os.lchown(path, info.uid, info.gid)
        if not info.issym():  # the entry was just made here: a file, folder, node or fifo, never a link
            os.chmod(path, stat.S_IMODE(info.mode) & ~(stat.S_ISUID | stat.S_ISGID))
        try:
            os.utime(path, (info.mtime, info.mtime), follow_symlinks=False)
        except OSError as err:  # a time out of range for the filesystem: the content is what matters
            if err.errno not in (errno.EINVAL, errno.EOVERFLOW):
                raise

    def finish(self) -> None:
        for path, info in reversed(self.dirs):  # children first: a read-only folder is made read-only last
            self.attributes(path, info)


def apply_layer(root: Path, blob: Path, digest: str, size: int, compression: str, *, as_root: bool) -> int:
    """Apply one layer to ``root``; RootfsError when the blob does not match ``digest``/``size`` (checked over
    every byte, the tail past the tar's end included) or a member is unsafe. Returns how many device nodes and
    FIFOs it held (not made)."""
    raw = _Verified(blob, digest, size)
    layer = _Layer(root, digest, as_root)
    try:
        try:
            with _tar_stream(raw, compression) as stream, tarfile.open(fileobj=stream, mode="r|") as tar:
                for info in tar:
                    try:
                        layer.apply(info, tar)
                    except OSError as err:
                        raise RootfsError(f"layer {digest}: member {info.name[:200]!r}: cannot be made here: "
                                          f"{err.strerror or err}") from None
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as err:
            raw.finish()  # a damaged blob is named as such first
            raise RootfsError(f"layer {digest}: not a readable tar ({err})") from None
        raw.finish()
        layer.finish()
    finally:
        raw.close()
    return layer.left_out


# ------------------------------------------------------------------------------------------------ the root


def root_dir(roots: Path, digest: str) -> Path:
    return roots / _check_digest(digest, "image")[7:]


def unpack_image(layout_dir: Path, digest: str, roots: Path, *, echo: Any = None) -> ImageRoot:
    """The image ``digest`` of ``layout_dir`` unpacked under ``roots/<hex>/rootfs`` (made once, then reused)."""
    layout = _layout(layout_dir)
    _check_digest(digest, "image")
    with _refused():
        config, layers = _layers_of(layout, digest)
        blobs = [(layout.checked_blob(d), d, size, comp) for d, size, comp in layers]  # all present before any work
    final = root_dir(roots, digest)
    roots.mkdir(parents=True, exist_ok=True)
    as_root = os.geteuid() == 0
    with locked(roots / f".{digest[7:]}.lock"):
        done = _complete(final, digest)
        if done is not None:
            return ImageRoot(digest, final / ROOTFS, config, reused=True)
        for stale in roots.glob(f".tmp-{digest[7:]}-*"):
            force_remove(stale)
        if final.exists():
            force_remove(final)
        work = roots / f".tmp-{digest[7:]}-{secrets.token_hex(4)}"
        rootfs = work / ROOTFS
        rootfs.mkdir(parents=True)
        os.chmod(rootfs, 0o755)
        try:
            left_out = 0
            for n, (blob, layer_digest, size, comp) in enumerate(blobs, 1):
                if echo is not None:
                    echo(f"  unpack layer {n}/{len(blobs)} {layer_digest[:19]} ({size} bytes, {comp})")
                left_out += apply_layer(rootfs, blob, layer_digest, size, comp, as_root=as_root)
            if left_out and echo is not None:
                echo(f"  {left_out} device node(s) and FIFO(s) in the layers not made (the runtime gives /dev)")
            record = {"manifest": digest, "layers": [d for _, d, _, _ in blobs], "owners": as_root}
            atomic_write_text(work / COMPLETE, json.dumps(record, indent=1, sort_keys=True) + "\n")
            os.rename(work, final)
        except BaseException:
            force_remove(work)
            raise
    return ImageRoot(digest, final / ROOTFS, config)


def _complete(final: Path, digest: str) -> dict[str, Any] | None:
    try:
        record = json.loads((final / COMPLETE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("manifest") != digest or not (final / ROOTFS).is_dir():
        return None
    return record


def force_remove(path: Path) -> None:
    """Remove a partly made root or a smoke's scratch folder, whatever modes its layers or the smoke gave its
    folders."""
    if not path.exists() and not path.is_symlink():
        return

    def writable(func: Any, target: str, _exc: Any) -> None:
        parent = os.path.dirname(target)
        try:
            os.chmod(parent, 0o700)
            func(target)
        except OSError:
            pass

    if path.is_dir() and not path.is_symlink():
        for folder, dirs, _ in os.walk(path):
            for d in dirs:
                p = os.path.join(folder, d)
                if not os.path.islink(p):
                    try:
                        os.chmod(p, 0o700)
                    except OSError:
                        pass
        shutil.rmtree(path, onerror=writable)
    else:
        os.unlink(path)
