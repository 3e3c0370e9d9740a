"""Layer blobs sent to the registry while the rest of the image is still being built (``build --push``).

The assembler hands over each layer's descriptor once its blob is in the layout. One thread uploads the blobs the
registry lacks, in the order they came, while the build goes on: the FlashInfer AOT step leaves a core idle for much
of its time, and a remote registry's upload waits on the network, not the cores. The push at the end
(``publish.push``, skopeo) then finds those blobs in the registry and sends only the rest, the config and the
manifest, so the image and its digest are what they would be without this.

Sending ahead only saves time; it decides nothing. The registry checks each blob against its digest before it keeps
it. When an upload fails (the registry refuses, the credentials are not the ones skopeo gets, the network), sending
ahead stops, with the reason in ``AheadReport.stopped``, and the push sends the rest and reports its own error. When
the build fails, the upload under way is cut off at its next chunk and nothing more is sent.

``say`` hears each upload's progress, at most a line a second (``transfer.TransferMeter``: bytes read out of the
blob for the registry of its size, rate, time left), in the same thread; a blob sent in less than a second says
nothing. The summary at the end (``AheadReport.describe``) is unchanged.
"""

from __future__ import annotations

import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import BinaryIO

from pinmatrix.imageref import RegistryError
from pinmatrix.oci.layer import LayerDescriptor
from pinmatrix.registry.blobs import CHUNK
from pinmatrix.registry.client import Registry
from pinmatrix.transfer import TransferMeter


@dataclass
class AheadReport:
    """What went ahead: blobs sent, blobs the registry had already, their bytes, and why sending stopped early."""

    sent: int = 0
    present: int = 0
    bytes_sent: int = 0
    stopped: str | None = None

    def describe(self) -> str:
        said = f"{self.sent} blob(s) sent ahead ({self.bytes_sent / 1e6:.1f} MB), {self.present} already there"
        return said + (f"; stopped early: {self.stopped}" if self.stopped else "")


def _lowest_priority() -> None:
    """This thread at niceness 19 (Linux keeps one per thread): its uploads use the cores the build leaves idle
    instead of taking them from it (on two cores, at the normal priority, they slowed the h200 cell's build by 16 s
    and saved 7 s in all); a remote registry's upload waits on the network either way."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass  # no per-thread priority here: the uploads run as they are


class _Cancelled(Exception):
    """The build ended before this upload did."""


def _no_progress(count: int) -> None:
    """A ``moved`` that counts nothing."""


class _CancellableReader:
    """A blob file read for an upload in large chunks (http.client asks for 8 KiB), cut off once ``cancelled``;
    ``moved`` hears the size of each chunk read."""

    def __init__(self, path: Path, cancelled: threading.Event,
                 moved: Callable[[int], None] = _no_progress) -> None:
        self._handle: BinaryIO = open(path, "rb")
        self._cancelled = cancelled
        self._moved = moved

    def read(self, size: int = -1) -> bytes:
        if self._cancelled.is_set():
            raise _Cancelled
        chunk = self._handle.read(max(size, CHUNK))
        self._moved(len(chunk))
        return chunk

    def close(self) -> None:
        self._handle.close()


class BlobsAhead:
    """Uploads handed-over layer blobs to ``repository`` on ``registry`` in a thread of its own; a context manager.

    ``blob_path`` maps a digest to its file (the layout's ``blob_path``). ``finish`` waits for every blob handed
    over so far; leaving the block without it (an error) cancels what is left. ``say`` hears each upload's
    progress (at most a line a second on ``clock``), from the uploading thread."""

    def __init__(self, registry: Registry, repository: str, blob_path: Callable[[str], Path], *,
                 say: Callable[[str], None] = lambda line: None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._registry = registry.another()
        self._repository = repository
        self._blob_path = blob_path
        self._say = say
        self._clock = clock
        self._todo: queue.Queue[tuple[str, int] | None] = queue.Queue()
        self._handed: set[str] = set()
        self._cancelled = threading.Event()
        self._report = AheadReport()
        self._thread = threading.Thread(target=self._send_all, name="pinmatrix-blobs-ahead", daemon=True)

    def __enter__(self) -> BlobsAhead:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._thread.is_alive():
            self._cancelled.set()
            self._todo.put(None)
            self._thread.join()

    def add(self, descriptor: LayerDescriptor) -> None:
        """Send ``descriptor``'s blob once (a digest handed over again is not sent twice)."""
        if descriptor.digest in self._handed:
            return
        self._handed.add(descriptor.digest)
        self._todo.put((descriptor.digest, descriptor.size))

    def finish(self) -> AheadReport:
        """Wait for every blob handed over; what was sent, and why sending stopped if it did."""
        self._todo.put(None)
        self._thread.join()
        return self._report

    def _send_all(self) -> None:
        _lowest_priority()
        while (item := self._todo.get()) is not None:
            if self._cancelled.is_set() or self._report.stopped is not None:
                continue  # drained: the push sends what is left
            digest, size = item
            try:
                self._send(digest, size)
            except _Cancelled:
                self._report.stopped = "the build ended first"
            except (RegistryError, OSError) as err:
                self._report.stopped = f"{digest}: {err}"

    def _send(self, digest: str, size: int) -> None:
        path = self._blob_path(digest)

        def body() -> tuple[BinaryIO, int]:  # a fresh meter for each attempt (the client may send it again)
            meter = TransferMeter(size, clock=self._clock)

            def moved(count: int) -> None:
                meter.advance(count)
                if meter.due():
                    self._say(f"push: sending {digest[:19]} ahead: {meter.line()}")

            return _CancellableReader(path, self._cancelled, moved), size  # type: ignore[return-value]

        if self._registry.push_blob_as(self._repository, digest, body):
            self._report.sent += 1
            self._report.bytes_sent += size
        else:
            self._report.present += 1
