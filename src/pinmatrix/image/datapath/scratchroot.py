"""A cell's layers unpacked into a scratch root (the root FlashInfer's AOT generator runs in: image/datapath/jitcache.py,
crossaot.py), with the result an overlay of the layers in their order would give for the entries pinmatrix writes.

The base and venv layers are unpacked one after another (a base's layers may build on each other's links, such as
``lib -> usr/lib``). The wheel layers are then unpacked side by side, ``workers`` at once: unpacking is mostly
writing 5 GB into the page cache, and one thread leaves the other core idle. The largest start first. A path that two of them hold ends as
the later one has it, whichever thread gets there first: each path is claimed under a lock by the layer that writes
it, and an earlier layer never writes over a later one's claim. Whiteouts and device nodes are skipped; anything
reaching outside the root is refused by tarfile's ``tar`` filter."""

from __future__ import annotations

import tarfile
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.image.format.layer import member_path, open_layer

STRIPES = 64  # locks a path's claim may take; two threads rarely want one


@dataclass(frozen=True)
class RootLayers:
    """A scratch root's layers (blob path, media type): ``ordered`` one after another, then ``side_by_side``."""

    ordered: Sequence[tuple[Path, str]]
    side_by_side: Sequence[tuple[Path, str]] = ()


class _Claims:
    """Which side-by-side layer (by its rank, later = higher) last wrote each path."""

    def __init__(self) -> None:
        self._owner: dict[str, int] = {}
        self._locks = [threading.Lock() for _ in range(STRIPES)]

    @contextmanager
    def hold(self, name: str, rank: int) -> Iterator[bool]:
        """Whether layer ``rank`` should write ``name``: not when a later layer already did. The path's lock is held
        while the caller writes, so two layers never write one path at once."""
        with self._locks[hash(name) % STRIPES]:
            owner = self._owner.get(name)
            mine = owner is None or owner <= rank
            if mine:
                self._owner[name] = rank
            yield mine


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path) -> None:
    try:
        tar.extract(member, root, filter="tar")
    except FileExistsError:  # tarfile makes a member's parent folders with os.makedirs: another thread just did
        tar.extract(member, root, filter="tar")


def _unpack_layer(root: Path, blob: tuple[Path, str], claims: _Claims | None, rank: int,
                  stop: threading.Event) -> None:
    path, media_type = blob
    with open_layer(path, media_type) as tar:
        for member in tar:
            if stop.is_set():
                return
            if member.isdev() or member.name.rsplit("/", 1)[-1].startswith(".wh."):
                continue
            if claims is None:
                _extract(tar, member, root)
                continue
            with claims.hold(member_path(member.name), rank) as mine:
                if mine:
                    _extract(tar, member, root)


def _size(blob: Path) -> int:
    try:
        return blob.stat().st_size
    except OSError:  # not there: its layer's open names it
        return 0


def unpack(root: Path, layers: RootLayers, *, workers: int = 2) -> None:
    """``layers`` into ``root``: the ordered ones in order, then the others ``workers`` at once. The first error
    stops the other threads and is raised."""
    stop = threading.Event()
    for blob in layers.ordered:
        _unpack_layer(root, blob, None, 0, stop)
    claims = _Claims()
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        # the largest first, so the last one left running alone is a small one; a layer's rank stays its place
        ranked = sorted(enumerate(layers.side_by_side), key=lambda item: -_size(item[1][0]))
        futures = [pool.submit(_unpack_layer, root, blob, claims, rank, stop) for rank, blob in ranked]
        try:
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        except BaseException:  # interrupted: the threads stop at their next entry
            stop.set()
            raise
        failed = next((f for f in futures if f in done and f.exception() is not None), None)
        if failed is not None:
            stop.set()
            raise failed.exception()  # type: ignore[misc]
