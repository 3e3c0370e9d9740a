"""Install a wheel into an image layer without executing any of its code and without touching the host's
filesystem: the wheel's files go straight from the zip into the layer's tar, at the paths of the image's virtual
environment, with entry-point scripts, ``INSTALLER`` and ``RECORD`` written as an installer does (pypa's
``installer`` does the mapping; pinmatrix only supplies a destination that writes tar entries). No bytecode is
compiled: the layer holds exactly the wheel's files and what installing them adds."""

from __future__ import annotations

import base64
import hashlib
import io
import os
import posixpath
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
from installer.utils import Scheme, construct_record_file

from pinmatrix.errors import PinmatrixError
from pinmatrix.image.layer import LayerWriter

VENV = "opt/venv"  # the image's environment, relative to the image root


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
    what is read from it (for RECORD)."""

    def __init__(self, stream: BinaryIO, size: int) -> None:
        self.stream, self.size = stream, size
        self.sha = hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.stream.read(n)
        self.sha.update(data)
        return data


class _SortedWheel(InstallerWheel):
    """The wheel's files in path order, each with its size, so the layer's entries come in a fixed order."""

    def get_contents(self) -> Iterator[tuple[tuple[str, str, str], BinaryIO, bool]]:
        records = {r[0]: r for r in parse_record_file(self.read_dist_info("RECORD").splitlines())}
        for item in sorted(self._zipfile.infolist(), key=lambda i: i.filename):
            if item.filename.endswith("/"):
                continue
            mode = item.external_attr >> 16
            executable = bool(mode and stat.S_ISREG(mode) and mode & 0o111)
            with self._zipfile.open(item) as stream:
                yield (records.get(item.filename, (item.filename, "", "")),
                       cast(BinaryIO, _SizedStream(cast(BinaryIO, stream), item.file_size)), executable)


class TarDestination(WheelDestination):
    """installer's destination, writing into a ``LayerWriter`` instead of a directory."""

    def __init__(self, layer: LayerWriter, layout: VenvLayout, dist: str) -> None:
        self.layer = layer
        self.layout = layout
        self.scheme_dict = layout.schemes(dist)

    def _target(self, scheme: Scheme, path: str) -> str:
        base = self.scheme_dict[scheme]
        target = posixpath.normpath(posixpath.join(base, path))
        if not target.startswith(VENV + "/") or ".." in target.split("/"):
            raise InstallError(f"wheel file {path!r} would be installed outside {VENV}")
        return target

    def write_file(self, scheme: Scheme, path: str | os.PathLike[str], stream: BinaryIO,
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


def install_wheel(wheel: Path, layer: LayerWriter, layout: VenvLayout) -> None:
    """Lay ``wheel`` out in ``layer`` as an installer would install it into the image's environment."""
    try:
        with _SortedWheel.open(wheel) as source:
            destination = TarDestination(layer, layout, source.distribution)
            install(source, destination, additional_metadata={"INSTALLER": b"pinmatrix\n"})
    except InstallError:
        raise
    except Exception as err:  # noqa: BLE001 - installer raises plain exceptions for broken wheels
        raise InstallError(f"{wheel.name}: cannot be installed: {type(err).__name__}: {err}") from None
