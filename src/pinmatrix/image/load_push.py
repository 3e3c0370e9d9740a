"""Where assembled images go from the OCI layout: into an engine's store, then tagged by image id, and to a
registry (``skopeo copy --preserve-digests`` from the layout, so the registry serves the manifest digest
computed by the assembler).

Into podman's store, ``skopeo copy`` to ``containers-storage:`` (the store podman reads, through the same
``CONTAINERS_STORAGE_CONF``): it asks the store for each layer by digest first and copies only the layers the
store lacks, so a cell whose image shares all but its patched layer with one already loaded copies that layer
and its config, not the whole image again. Without skopeo, an ``oci-archive`` of the whole image is streamed to
``podman load``. Into Docker, ``skopeo copy`` to ``docker-daemon:`` (Docker's classic store loads no OCI
archive; the daemon's API takes the whole image each time).

``say`` hears the progress: the archive streamed to ``podman load``, about once a second (bytes of the image's,
rate, time left); skopeo's copies, whose bytes cannot be watched, once at the start (the image's bytes, from its
manifest) and once at the end (the time they took, the rate over them: a push or a load into containers-storage
skips the blobs already there, so the rate is at most that)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, cast

from pinmatrix.engine import OCIEngine
from pinmatrix.errors import EngineError, PinmatrixError
from pinmatrix.oci.layout import OCILayout, StoredImage
from pinmatrix.oci.manifest import image_bytes
from pinmatrix.transfer import TransferMeter, opaque_copy

Say = Callable[[str], None]


class PublishError(PinmatrixError):
    """An image could not be loaded into an engine or pushed to a registry."""


def _quiet(line: str) -> None:
    """A ``say`` that says nothing."""


def load_into_engine(layout: OCILayout, image: StoredImage, engine: OCIEngine, *, reuse_layers: bool = True,
                     say: Say = _quiet, clock: Callable[[], float] = time.monotonic) -> str:
    """Make ``image.ref`` name the image in ``engine``'s store; return the engine's image id (the config
    digest). Nothing is loaded when the engine already has that id under that name. ``reuse_layers=False``
    streams the whole image to ``podman load`` even where skopeo could copy only the missing layers (the way
    benchmarks/load.py measures what that saves)."""
    image_id = image.config_digest
    have = engine.inspect(image.ref)
    if have is not None and have.id == image_id:
        return image_id
    named = False  # skopeo's copy to containers-storage:REF names the image REF (moved off any other image)
    total = image_bytes(image.manifest)
    if engine.name == "docker":
        with opaque_copy(f"load {image.ref} into docker", total, say, tool="skopeo", clock=clock):
            _skopeo_to_docker(layout, image, engine)
    elif reuse_layers and (skopeo := shutil.which("skopeo")) is not None:
        with opaque_copy(f"load {image.ref} into {engine.name}", total, say, tool="skopeo", clock=clock):
            _skopeo_to_storage(skopeo, layout, image, engine)
        named = True
    else:
        _stream_load(layout, image, engine, TransferMeter(total, clock=clock), say)
    if not named:
        try:
            engine.tag(image_id if engine.name == "docker" else image_id.removeprefix("sha256:"), image.ref)
        except EngineError as err:
            raise PublishError(f"engine {engine.name}: loaded {image.ref} but cannot tag it: {err}") from None
    loaded = engine.inspect(image.ref)
    if loaded is None or loaded.id != image_id:
        raise PublishError(f"engine {engine.name}: after loading, {image.ref} is {loaded.id if loaded else 'absent'}, "
                           f"not {image_id}")
    return image_id


def _skopeo_to_docker(layout: OCILayout, image: StoredImage, engine: OCIEngine) -> None:
    """Docker's classic image store does not load OCI archives: skopeo hands the image to the daemon through
    its API (the config blob, hence the image id, unchanged)."""
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise PublishError("skopeo is not installed (apt-get install skopeo): it loads images into docker")
    argv = [skopeo, "copy", "--quiet"]
    host = engine.env.get("DOCKER_HOST")
    if host:
        argv.append(f"--dest-daemon-host={host}")
    argv += ["--", f"oci:{layout.root.resolve()}:{image.ref}", f"docker-daemon:{image.ref}"]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False, env=engine.env)
    if proc.returncode != 0:
        raise PublishError(f"engine docker: loading {image.ref} failed: {_last_message(proc.stderr)}")


def _skopeo_to_storage(skopeo: str, layout: OCILayout, image: StoredImage, engine: OCIEngine) -> None:
    """Copy the image into the containers-storage store podman uses, reusing every layer it already has."""
    argv = [skopeo, "copy", "--quiet", "--", f"oci:{layout.root.resolve()}:{image.ref}",
            f"containers-storage:{image.ref}"]
    proc = subprocess.run(argv, capture_output=True, check=False, env=engine.env)
    if proc.returncode != 0:
        text = proc.stderr[:MAX_LOAD_OUTPUT].decode("utf-8", "replace")
        raise PublishError(f"engine {engine.name}: loading {image.ref} failed (exit {proc.returncode}): "
                           f"{load_cause(text)}")


class _MeteredPipe:
    """What ``write_archive`` writes, passed on to ``out``, counted, and said about once a second."""

    def __init__(self, out: BinaryIO, meter: TransferMeter, what: str, say: Say) -> None:
        self.out, self.meter, self.what, self.say = out, meter, what, say

    def write(self, data: bytes) -> int:
        written = self.out.write(data)
        self.meter.advance(len(data))
        if self.meter.due():
            self.say(f"{self.what}: {self.meter.line()}")
        return written

    def flush(self) -> None:
        self.out.flush()


def _stream_load(layout: OCILayout, image: StoredImage, engine: OCIEngine, meter: TransferMeter, say: Say) -> None:
    """``podman load`` reads an oci-archive from standard input: streamed, never written to disk; ``say`` hears
    the bytes streamed of the image's, about once a second, and the time and rate once it is loaded."""
    argv = engine._argv(["load"])  # noqa: SLF001 - the engine's own argv (binary, connection flags)
    with tempfile.TemporaryFile() as output:
        with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=output, stderr=subprocess.STDOUT,
                              env=engine.env) as proc:
            assert proc.stdin is not None
            meter.started = meter.clock()
            what = f"load {image.ref} into {engine.name}"
            try:
                layout.write_archive([image], cast(BinaryIO, _MeteredPipe(cast(BinaryIO, proc.stdin), meter, what,
                                                                          say)))
            except BrokenPipeError:
                pass
            finally:
                try:
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            code = proc.wait()
        if code != 0:
            output.seek(0)
            text = output.read(MAX_LOAD_OUTPUT).decode("utf-8", "replace")
            raise PublishError(f"engine {engine.name}: loading {image.ref} failed (exit {code}): {load_cause(text)}")
    say(f"{what}: done, {meter.summary()}")


MAX_LOAD_OUTPUT = 1 << 20  # bytes of the engine's output read for the cause


def load_cause(text: str, archive_format: str = "oci-archive") -> str:
    """Why the engine refused a load, in one line: podman tries every image format and lists each one's error
    after an ``Error:`` line, the last being for a format pinmatrix did not send (``dir``); the cause is the
    error line with the entry for the format it sent. Else the ``Error:`` line, else the last line."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    error = next((ln.removeprefix("Error:").strip() for ln in lines if ln.startswith("Error:")), None)
    entry = next((ln.removeprefix("*").strip() for ln in lines if ln.removeprefix("*").strip().startswith(
        f"{archive_format}:")), None)
    if error is not None:
        return f"{error.rstrip(':')}; {entry}" if entry else error
    return _logged_message(lines[-1]) if lines else "no output"


_LOGRUS_FATAL = re.compile(r'level=fatal msg="((?:[^"\\]|\\.)*)"')


def _logged_message(line: str) -> str:
    """The message of skopeo's ``time="..." level=fatal msg="..."`` line (its quotes unescaped); any other line
    as it is."""
    found = _LOGRUS_FATAL.search(line)
    return found.group(1).replace('\\"', '"') if found else line


def _last_message(stderr: str) -> str:
    """skopeo's last non-empty line of ``stderr``, as its message; "no output" when there is none."""
    last = [ln for ln in stderr.splitlines() if ln.strip()][-1:]
    return _logged_message(last[0]) if last else "no output"


def push(layout: OCILayout, image: StoredImage, target: str, *, tls_verify: bool,
         authfile: Path | None = None, say: Say = _quiet, clock: Callable[[], float] = time.monotonic) -> str:
    """Copy ``image`` from the layout to ``target`` (a registry reference) keeping its digest; return it.
    ``say`` hears the image's bytes before, and the time and rate once the copy ended."""
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise PublishError("skopeo is not installed (apt-get install skopeo): it pushes images from the layout")
    with tempfile.TemporaryDirectory(prefix="pinmatrix-push-") as tmp:
        digest_file = Path(tmp) / "digest"
        argv = [skopeo, "copy", "--quiet", "--preserve-digests", f"--dest-tls-verify={'true' if tls_verify else 'false'}",
                f"--digestfile={digest_file}"]
        if authfile is not None:
            argv.append(f"--authfile={authfile}")
        argv += ["--", f"oci:{layout.root.resolve()}:{image.ref}", f"docker://{target}"]
        with opaque_copy(f"push {target}", image_bytes(image.manifest), say, tool="skopeo", clock=clock):
            proc = subprocess.run(argv, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise PublishError(f"push of {image.ref} to {target} failed: {_last_message(proc.stderr)}")
        pushed = digest_file.read_text().strip()
    if pushed != image.digest:
        raise PublishError(f"push of {image.ref}: the registry has {pushed}, the layout {image.digest}")
    return pushed
