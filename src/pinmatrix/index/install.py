"""Install a wheel into an image layer without executing any of its code and without touching the host's
filesystem: the wheel's files go straight from the zip into the layer's tar, at the paths of the image's virtual
environment, with entry-point scripts, ``INSTALLER`` and ``RECORD`` written as an installer does (pypa's
``installer`` does the mapping; pinmatrix only supplies a destination that writes tar entries). No bytecode is
compiled: the layer holds exactly the wheel's files and what installing them adds.

What a wheel may do is what pip lets it do, checked before or as each file is written:
- every file lands inside its own scheme's directory (``purelib``/``platlib`` = site-packages, ``scripts`` =
  ``bin``, ``headers``, ``data`` = the environment): a purelib ``../six.py`` is refused;
- never over what the venv layer owns (``bin/python*``, ``pyvenv.cfg``, ``lib64``), nor twice over one path;
- its RECORD is checked (installer's ``validate_record``: every file listed with a hash and a size) and each
  file's sha256 and size are compared with RECORD as it streams into the layer; each member is read by
  ``zipmember`` (zlib-ng's inflate, its local header, CRC-32 and size checked against the central directory);
- a name twice in the zip is refused, and the sum of its members' sizes must fit the unpacked-size budget
  (``unpack_budget``: 16 times the wheel's size, at least 64 MiB) and the free disk under the layer's blob
  folder: the disk check counts what the wheel unpacks to, not its download size, before anything is written."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import posixpath
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, cast

from installer import install
from installer.destinations import WheelDestination
from installer.records import Hash, RecordEntry, parse_record_file
from installer.scripts import Script
from installer.sources import WheelFile as InstallerWheel
from installer.utils import Scheme, construct_record_file, fix_shebang

from pinmatrix.errors import PinmatrixError
from pinmatrix.index.zipmember import open_member
from pinmatrix.oci.layer import LayerWriter

VENV = "opt/venv"  # the image's environment, relative to the image root
UNPACK_RATIO = 16  # a wheel may unpack to this many times its size (CUDA wheels: about 2-3x)
MIN_UNPACK_BUDGET = 64 << 20


def unpack_budget(wheel_size: int) -> int:
    """How many bytes a wheel of ``wheel_size`` bytes may unpack to."""
    return max(MIN_UNPACK_BUDGET, UNPACK_RATIO * wheel_size)


class InstallError(PinmatrixError):
    """A wheel could not be laid out in a layer (a broken wheel, or a path outside the environment)."""


@dataclass(frozen=True)
class VenvLayout:
    """Where a wheel's schemes land in the image, for CPython ``python`` in the venv at ``/opt/venv``."""

    python: str  # "3.13"

    @property
    def site_packages(self) -> str:
        return f"{VENV}/lib/python{self.python}/site-packages"

    @property
    def interpreter(self) -> str:
        return f"/{VENV}/bin/python"

    def schemes(self, dist: str) -> dict[str, str]:
        return {
            "purelib": self.site_packages,
            "platlib": self.site_packages,
            "scripts": f"{VENV}/bin",
            "headers": f"{VENV}/include/site/python{self.python}/{dist}",
            "data": VENV,
        }

    def owned(self) -> tuple[str, ...]:
        """The paths the venv layer writes, which no wheel may write over (or through)."""
        return (f"{VENV}/bin/python", f"{VENV}/bin/python3", f"{VENV}/bin/python{self.python}",
                f"{VENV}/pyvenv.cfg", f"{VENV}/lib64")

    def pyvenv_cfg(self) -> bytes:
        return (f"home = /usr/bin\ninclude-system-site-packages = false\nversion = {self.python}\n"
                f"executable = /usr/bin/python{self.python}\n").encode()

    def write_venv(self, layer: LayerWriter) -> None:
        """The environment itself: ``pyvenv.cfg``, the interpreter links, an empty site-packages."""
        layer.add_dir(f"{VENV}/bin")
        layer.add_symlink(f"{VENV}/bin/python", f"/usr/bin/python{self.python}")
        layer.add_symlink(f"{VENV}/bin/python3", "python")
        layer.add_symlink(f"{VENV}/bin/python{self.python}", "python")
        layer.add_dir(f"{VENV}/include")
        layer.add_dir(self.site_packages)
        layer.add_symlink(f"{VENV}/lib64", "lib")
        layer.add_bytes(f"{VENV}/pyvenv.cfg", self.pyvenv_cfg())


class _SizedStream:
    """A zip member stream that knows its size (so a tar header can be written before the data) and hashes
    what is read from it (for RECORD); ``record`` is RECORD's (hash, size) for it, checked once it is read."""

    def __init__(self, stream: BinaryIO, size: int, name: str, record: tuple[str, str]) -> None:
        self.stream, self.size, self.name, self.record = stream, size, name, record
        self.sha = hashlib.sha256()
        self.count = 0

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.sha.update(data)
        self.count += len(data)
        return data

    def readline(self, limit: int = -1) -> bytes:
        data = self.stream.readline(limit)
        self.sha.update(data)
        self.count += len(data)
        return data

    def seek(self, offset: int, whence: int = 0) -> int:
        """Only back to the start (installer's shebang fix does that): the hash starts again."""
        if (offset, whence) != (0, 0):
            raise InstallError(f"{self.name}: unexpected seek")
        self.sha, self.count = hashlib.sha256(), 0
        return self.stream.seek(0)

    def check(self) -> None:
        """The bytes read against RECORD's hash and size for this file."""
        hash_text, size_text = self.record
        algorithm, _, value = hash_text.partition("=")
        if algorithm != "sha256":
            raise InstallError(f"RECORD: {self.name}: hash {hash_text[:40]!r} is not a sha256")
        got = base64.urlsafe_b64encode(self.sha.digest()).decode("ascii").rstrip("=")
        if got != value.rstrip("=") or size_text != str(self.count) or self.count != self.size:
            raise InstallError(f"RECORD: {self.name}: the file's sha256/size ({got}, {self.count}) are not RECORD's "
                               f"({value[:60]}, {size_text[:20]})")


class _SortedWheel(InstallerWheel):
    """The wheel's files in path order, each with its size, so the layer's entries come in a fixed order."""

    def check(self, budget: int) -> int:
        """Before anything is written: no name twice, the unpacked size within ``budget``, RECORD complete.
        Returns the unpacked size."""
        names = [i.filename for i in self._zipfile.infolist()]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise InstallError(f"the zip holds {twice[0]!r} more than once")
        total = sum(i.file_size for i in self._zipfile.infolist())
        if total > budget:
            raise InstallError(f"it unpacks to {total} bytes, more than its budget of {budget} "
                               f"({UNPACK_RATIO}x its size, at least {MIN_UNPACK_BUDGET >> 20} MiB)")
        self.validate_record(validate_contents=False)
        return total

    def get_contents(self) -> Iterator[tuple[tuple[str, str, str], BinaryIO, bool]]:
        records = {r[0]: r for r in parse_record_file(self.read_dist_info("RECORD").splitlines())}
        record_file = f"{self.dist_info_dir}/RECORD"
        for item in sorted(self._zipfile.infolist(), key=lambda i: i.filename):
            if item.filename.endswith("/"):
                continue
            mode = item.external_attr >> 16
            executable = bool(mode and stat.S_ISREG(mode) and mode & 0o111)
            record = records.get(item.filename, (item.filename, "", ""))
            with open_member(self._zipfile, item) as stream:
                sized = _SizedStream(cast(BinaryIO, stream), item.file_size, item.filename, (record[1], record[2]))
                yield record, cast(BinaryIO, sized), executable
            if item.filename != record_file and not item.filename.endswith((".dist-info/RECORD.jws",
                                                                              ".dist-info/RECORD.p7s")):
                sized.check()


class TarDestination(WheelDestination):
    """installer's destination, writing into a ``LayerWriter`` instead of a directory."""

    def __init__(self, layer: LayerWriter, layout: VenvLayout, dist: str) -> None:
        self.layer = layer
        self.layout = layout
        self.scheme_dict = layout.schemes(dist)
        self.written: set[str] = set()

    def _target(self, scheme: Scheme, path: str) -> str:
        """Where ``path`` of ``scheme`` goes: inside that scheme's directory, not over the venv layer's files,
        not where another file of the wheel went."""
        base = self.scheme_dict[scheme]
        target = posixpath.normpath(posixpath.join(base, path))
        if not target.startswith(base + "/") or "\0" in target or "\\" in path:
            raise InstallError(f"wheel file {path!r} ({scheme}) would be installed outside {base}")
        for owned in self.layout.owned():
            if target == owned or target.startswith(owned + "/"):
                raise InstallError(f"wheel file {path!r} ({scheme}) would replace /{owned}, which the venv owns")
        if target in self.written:
            raise InstallError(f"wheel file {path!r} ({scheme}) would be installed twice at /{target}")
        self.written.add(target)
        return target

    def write_file(self, scheme: Scheme, path: str | os.PathLike[str], stream: BinaryIO,
                   is_executable: bool) -> RecordEntry:
        """Lay one file out; a script's ``#!python`` first line becomes the venv's interpreter, as pip and
        installer's own destination do (RECORD then lists the file as written)."""
        if scheme == "scripts":
            with fix_shebang(stream, self.layout.interpreter) as fixed:
                return self._write(scheme, path, fixed, is_executable)
        return self._write(scheme, path, stream, is_executable)

    def _write(self, scheme: Scheme, path: str | os.PathLike[str], stream: BinaryIO,
               is_executable: bool) -> RecordEntry:
        rel = Path(path).as_posix()
        target = self._target(scheme, rel)
        if isinstance(stream, _SizedStream):
            self.layer.add_file(target, cast(BinaryIO, stream), stream.size, executable=is_executable)
            digest, size = stream.sha.digest(), stream.size
        else:
            data = stream.read()
            self.layer.add_bytes(target, data, executable=is_executable)
            digest, size = hashlib.sha256(data).digest(), len(data)
        value = base64.urlsafe_b64encode(digest).decode("ascii").rstrip("=")
        return RecordEntry(rel, Hash("sha256", value), size)

    def write_script(self, name: str, module: str, attr: str, section: str) -> RecordEntry:
        script_name, data = Script(name, module, attr, section).generate(self.layout.interpreter, "posix")  # type: ignore[arg-type]
        return self.write_file(Scheme("scripts"), script_name, io.BytesIO(data), True)

    def finalize_installation(self, scheme: Scheme, record_file_path: str,
                              records: Iterable[tuple[Scheme, RecordEntry]]) -> None:
        def prefix_for_scheme(file_scheme: str) -> str | None:
            if file_scheme == scheme:
                return None
            return posixpath.relpath(self.scheme_dict[file_scheme], self.scheme_dict[scheme]) + "/"

        with construct_record_file(list(records), prefix_for_scheme) as record_stream:
            self.write_file(scheme, record_file_path, record_stream, False)


def install_wheel(wheel: Path, layer: LayerWriter, layout: VenvLayout, *, budget: int | None = None) -> None:
    """Lay ``wheel`` out in ``layer`` as an installer would install it into the image's environment.
    ``budget``: the most bytes it may unpack to (default ``unpack_budget`` of its size)."""
    limit = unpack_budget(wheel.stat().st_size) if budget is None else budget
    try:
        with _SortedWheel.open(wheel) as opened:
            source = cast(_SortedWheel, opened)
            total = source.check(limit)
            free = shutil.disk_usage(layer.blobs_dir).free
            if total > free:  # the disk check, by what the wheel unpacks to (a layer can be as large)
                raise InstallError(f"it unpacks to {total} bytes, {free} are free under {layer.blobs_dir}")
            destination = TarDestination(layer, layout, source.distribution)
            install(source, destination, additional_metadata={"INSTALLER": b"pinmatrix\n"})
    except InstallError as err:
        raise InstallError(f"{wheel.name}: {err}") from None
    except Exception as err:  # noqa: BLE001 - installer raises plain exceptions for broken wheels
        raise InstallError(f"{wheel.name}: cannot be installed: {type(err).__name__}: {err}") from None
