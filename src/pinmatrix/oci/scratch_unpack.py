"""A cell's layers unpacked into a scratch root (the root FlashInfer's AOT generator runs in: image/assembly/aot_plan.py,
crossaot.py), with the result an overlay of the layers in their order would give for the entries pinmatrix writes.

The base and venv layers are unpacked one after another (a base's layers may build on each other's links, such as
``lib -> usr/lib``). The wheel layers are then unpacked side by side by ``workers`` worker processes (``python -m
pinmatrix.oci.scratch_unpack ROOT``, fed one layer at a time, the largest first): unpacking is Python's
tarfile at work on 5 GB, and threads of one process share one interpreter lock.
Side by side, a worker writes only regular files and folders; each reports every path its layer holds. Then, in
this process and in the layers' order, each layer writes what is left to it: its links and other entries, and the
paths it shares with an earlier layer (the later layer's entry is the one an overlay shows). No two workers ever
make a link, so none writes through one. Whiteouts and device nodes are skipped; anything reaching outside the
root is refused by tarfile's ``tar`` filter (in the workers, ``_WorkerFilter``: its checks, each folder resolved once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

from pinmatrix.errors import PinmatrixError
from pinmatrix.oci.layer import member_path, open_layer

Blob = tuple[Path, str]  # a layer's blob and its media type


class ScratchRootError(PinmatrixError):
    """A layer could not be unpacked into the scratch root."""


@dataclass(frozen=True)
class RootLayers:
    """A scratch root's layers (blob path, media type): ``ordered`` one after another, then ``side_by_side``;
    ``unpacked``: the bytes they take unpacked, 0 when not known (where the root goes: image/assembly/scratch_space.py)."""

    ordered: Sequence[Blob]
    side_by_side: Sequence[Blob] = ()
    unpacked: int = 0


@dataclass(frozen=True)
class _Held:
    """What a side-by-side worker found in its layer: the folders, the regular files it wrote, the rest it left."""

    folders: frozenset[str]
    files: frozenset[str]
    left: frozenset[str]  # links and other entries: written later, in order, by this process


def _skipped(member: tarfile.TarInfo) -> bool:
    return member.isdev() or member.name.rsplit("/", 1)[-1].startswith(".wh.")


class _WorkerFilter:
    """tarfile's ``tar`` filter for a side-by-side worker, which writes only folders and regular files: the same
    checks (no absolute name, the member's path inside the root once its links are followed, no high mode bits,
    no group or other write), but a member's folder is resolved once per layer, not its whole path per member.
    That holds because no link appears under the root while workers run: every link comes from the ordered
    layers, written before, or from the pass in order after. A member whose own path is a link is resolved in
    full, as the ``tar`` filter does."""

    def __init__(self, root: Path) -> None:
        self.root = os.path.realpath(root)
        self.inside: set[str] = set()

    def _check(self, member: tarfile.TarInfo, name: str) -> None:
        target = os.path.realpath(os.path.join(self.root, name))
        if os.path.commonpath([target, self.root]) != self.root:
            raise tarfile.OutsideDestinationError(member, target)

    def __call__(self, member: tarfile.TarInfo, dest_path: str) -> tarfile.TarInfo:
        name = member.name.lstrip("/")
        if os.path.isabs(name):
            raise tarfile.AbsolutePathError(member)
        folder = os.path.dirname(name)
        if folder not in self.inside:
            self._check(member, folder)
            self.inside.add(folder)
        if os.path.islink(os.path.join(self.root, name)):
            self._check(member, name)
        return member.replace(name=name, mode=None if member.mode is None else member.mode & 0o755, deep=False)


def _extract(tar: tarfile.TarFile, member: tarfile.TarInfo, root: Path,
             checks: _WorkerFilter | None = None) -> None:
    how: Literal["tar"] | _WorkerFilter = "tar" if checks is None else checks
    try:
        tar.extract(member, root, filter=how)
    except FileExistsError:  # tarfile makes a member's parent folders with os.makedirs: another worker just did
        tar.extract(member, root, filter=how)


def _failed(blob: Path, exc: Exception) -> ScratchRootError:
    return ScratchRootError(f"the AOT scratch root: layer {blob.name} could not be unpacked: {exc}")


def _unpack_in_order(root: Path, blob: Blob, only: frozenset[str] | None = None) -> None:
    """One layer's entries into ``root`` (``only``: just those paths)."""
    path, media_type = blob
    try:
        with open_layer(path, media_type) as tar:
            for member in tar:
                if _skipped(member) or (only is not None and member_path(member.name) not in only):
                    continue
                _extract(tar, member, root)
    except (tarfile.TarError, OSError) as exc:
        raise _failed(path, exc) from exc


def _unpack_side_by_side(root: Path, blob: Blob) -> _Held:
    """In a worker process: the layer's folders and regular files into ``root``."""
    path, media_type = blob
    folders: set[str] = set()
    files: set[str] = set()
    left: set[str] = set()
    checks = _WorkerFilter(root)
    try:
        with open_layer(path, media_type) as tar:
            for member in tar:
                if _skipped(member):
                    continue
                name = member_path(member.name)
                if member.isdir():
                    folders.add(name)
                elif member.isreg():
                    files.add(name)
                else:
                    left.add(name)
                    continue
                _extract(tar, member, root, checks)
    except (tarfile.TarError, OSError) as exc:
        raise _failed(path, exc) from exc
    return _Held(frozenset(folders), frozenset(files), frozenset(left))


def _left_to_each(layers: Sequence[Blob], held: Sequence[_Held]) -> list[frozenset[str]]:
    """Per layer, the paths it writes in order: each path it is the last to hold that is a link or other entry
    or that an earlier layer holds too. A path that is a folder in one layer and not in another is refused: an
    overlay would replace the one by the other, which workers side by side cannot do."""
    owner: dict[str, int] = {}
    shared: set[str] = set()
    for rank, found in enumerate(held):
        for name in found.files | found.left:
            if name in owner:
                shared.add(name)
            owner[name] = rank
    clash = sorted({name for found in held for name in found.folders} & owner.keys())
    if clash:
        raise ScratchRootError(f"the AOT scratch root: {clash[0]} is a folder in one layer and not in "
                               f"{layers[owner[clash[0]]][0].name}")
    left: list[set[str]] = [set() for _ in held]
    for rank, found in enumerate(held):
        left[rank].update(name for name in found.left if owner[name] == rank)
    for name in shared:
        left[owner[name]].add(name)
    return [frozenset(names) for names in left]


def _sizes_first(layers: Sequence[Blob]) -> list[int]:
    def size(index: int) -> int:
        try:
            return layers[index][0].stat().st_size
        except OSError:  # not there: its layer's open names it
            return 0
    return sorted(range(len(layers)), key=lambda i: -size(i))


class _Workers:
    """Worker processes, each driven by a thread of ``drive``, fed the layers' indexes from one queue (in
    ``order``); the first error kills every worker (the root is scratch: what a killed worker half wrote is thrown away with the failed build)."""

    def __init__(self, root: Path, layers: Sequence[Blob], order: Sequence[int]) -> None:
        self.root, self.layers = root, layers
        self.queue = deque(order)
        self.held: dict[int, _Held] = {}
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.procs: list[subprocess.Popen[str]] = []
        self.stopped = False

    def stop(self, error: str | None = None) -> None:
        with self.lock:
            if error is not None:
                self.errors.append(error)
            self.stopped = True
            for proc in self.procs:
                proc.kill()

    def _next(self) -> int | None:
        with self.lock:
            return None if self.stopped or not self.queue else self.queue.popleft()

    def drive(self) -> None:
        with tempfile.TemporaryFile("w+", encoding="utf-8") as errors:
            proc = subprocess.Popen([sys.executable, "-m", __name__, str(self.root)], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=errors, text=True, encoding="utf-8")
            with self.lock:
                self.procs.append(proc)
                if self.stopped:
                    proc.kill()
            assert proc.stdin is not None and proc.stdout is not None
            try:
                while (index := self._next()) is not None:
                    blob, media_type = self.layers[index]
                    answer = _ask(proc.stdin, proc.stdout, [str(blob), media_type])
                    if answer is None:
                        if not self.stopped:
                            errors.seek(0)
                            tail = " | ".join(errors.read().strip().splitlines()[-3:]) or "no output"
                            self.stop(f"the AOT scratch root: the worker unpacking {blob.name} exited "
                                      f"{proc.wait()}: {tail[:400]}")
                        return
                    if "error" in answer:
                        self.stop(str(answer["error"]))
                        return
                    self.held[index] = _Held(*(frozenset(str(n) for n in answer[k]) for k in ("folders", "files",
                                                                                             "left")))
            finally:
                proc.stdin.close()
                proc.wait()


def _ask(stdin: IO[str], stdout: IO[str], layer: list[str]) -> dict[str, list[str] | str] | None:
    """One layer sent to a worker and its answer; None when the worker is gone."""
    try:
        stdin.write(json.dumps(layer) + "\n")
        stdin.flush()
    except BrokenPipeError:
        return None
    line = stdout.readline()
    return json.loads(line) if line else None


def _side_by_side(root: Path, layers: Sequence[Blob], workers: int) -> list[_Held]:
    """Every layer's folders and regular files, ``workers`` processes at once, the largest first. The first error
    stops the other workers and is raised."""
    pool = _Workers(root, layers, _sizes_first(layers))
    threads = [threading.Thread(target=pool.drive, name=f"scratch-root-{n}", daemon=True)
               for n in range(max(1, min(workers, len(layers))))]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # interrupted: the workers are killed
        pool.stop()
        raise
    if pool.errors:
        raise ScratchRootError(pool.errors[0])
    if len(pool.held) != len(layers):
        raise ScratchRootError("the AOT scratch root: a layer was left unpacked")
    return [pool.held[i] for i in range(len(layers))]


def unpack(root: Path, layers: RootLayers, *, workers: int = 2) -> None:
    """``layers`` into ``root``: the ordered ones in order, then the others side by side (``workers`` processes;
    1: one after another in this process)."""
    for blob in layers.ordered:
        _unpack_in_order(root, blob)
    if not layers.side_by_side:
        return
    if workers <= 1 or len(layers.side_by_side) == 1:
        for blob in layers.side_by_side:
            _unpack_in_order(root, blob)
        return
    held = _side_by_side(root, layers.side_by_side, workers)
    for blob, names in zip(layers.side_by_side, _left_to_each(layers.side_by_side, held)):
        if names:
            _unpack_in_order(root, blob, names)


def _worker(root: Path) -> int:
    """A side-by-side worker: each line on stdin names a layer (``[blob, media type]``); each answer on stdout is
    one line, what ``_Held`` holds, or the error that stopped it."""
    for line in sys.stdin:
        path, media_type = json.loads(line)
        try:
            held = _unpack_side_by_side(root, (Path(path), media_type))
        except ScratchRootError as exc:
            print(json.dumps({"error": str(exc)}), flush=True)
            return 1
        print(json.dumps({"folders": sorted(held.folders), "files": sorted(held.files), "left": sorted(held.left)}),
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(_worker(Path(sys.argv[1])))
