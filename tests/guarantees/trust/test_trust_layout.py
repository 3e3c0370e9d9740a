"""The builder's OCI layout trusts a blob only while its bytes hash to its name: a cached blob is re-hashed
before reuse and a damaged one is removed so it is rebuilt (also where layouts share it by a hard link), and
the temporary files of a killed build are cleaned when a layout is opened."""

from __future__ import annotations

import builtins
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.image.assembly.assemble import LayerCache
from pinmatrix.oci.layer import LayerWriter
from pinmatrix.oci.layout import OCILayout, remove_dead_temporaries


def _damage(path: Path) -> None:
    with open(path, "r+b") as handle:  # in place: a hard link to it sees the change
        first = handle.read(1)
        handle.seek(0)
        handle.write(bytes([first[0] ^ 0xFF]))


def test_a_damaged_blob_is_found_removed_and_written_again(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    digest = layout.put_blob(b"config bytes")
    assert layout.intact_blob(digest)
    fresh = OCILayout(tmp_path / "oci")  # another process: nothing remembered
    _damage(layout.blob_path(digest))
    assert not fresh.intact_blob(digest)
    assert not layout.blob_path(digest).exists()
    assert fresh.put_blob(b"config bytes") == digest  # repaired
    assert OCILayout(tmp_path / "oci").intact_blob(digest)
    # a blob of the right bytes but the wrong size given is no good either
    assert not OCILayout(tmp_path / "oci").intact_blob(digest, size=3)


def test_a_damaged_layer_is_not_reused_as_cached(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    writer = LayerWriter(layout.blobs, epoch=0)
    writer.add_bytes("opt/venv/x.py", b"x = 1\n" * 100)
    desc = writer.close()
    cache = LayerCache(tmp_path / "cache", layout)
    cache.put("key", desc, "wheel:x")
    assert cache.get("key") == desc
    _damage(layout.blob_path(desc.digest))
    again = LayerCache(tmp_path / "cache", OCILayout(tmp_path / "oci"))
    assert again.get("key") is None and not layout.blob_path(desc.digest).exists()


def test_a_layer_this_process_wrote_is_reused_unread_and_another_process_hashes_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    writer = LayerWriter(layout.blobs, epoch=0)
    writer.add_bytes("opt/venv/x.py", b"x = 1\n" * 100)
    desc = writer.close()
    layout.written(desc.digest, desc.size)  # as the assembler does: the writer hashed what it wrote
    cache = LayerCache(tmp_path / "cache", layout)
    cache.put("key", desc, "wheel:x")
    read: list[str] = []
    real_open = builtins.open

    def spying_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        read.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spying_open)
    assert cache.get("key") == desc
    assert str(layout.blob_path(desc.digest)) not in read  # not hashed a second time
    monkeypatch.undo()
    assert not layout.intact_blob(desc.digest, size=desc.size + 1)  # the size still counts
    _damage(layout.blob_path(desc.digest))
    assert LayerCache(tmp_path / "cache", OCILayout(tmp_path / "oci")).get("key") is None  # another process


def test_a_hard_linked_blob_damaged_in_one_layout_is_rebuilt_in_each(tmp_path: Path) -> None:
    a, b = OCILayout(tmp_path / "a").init(), OCILayout(tmp_path / "b").init()
    digest = a.put_blob(b"base layer")
    os.link(a.blob_path(digest), b.blob_path(digest))
    _damage(a.blob_path(digest))  # through the shared inode: both are damaged
    assert not b.intact_blob(digest)
    b.put_blob(b"base layer")
    assert b.intact_blob(digest) and b.blob_path(digest).stat().st_ino != a.blob_path(digest).stat().st_ino
    assert not a.intact_blob(digest)  # a's copy is still damaged, and found
    a.put_blob(b"base layer")
    assert a.read_blob(digest) == b"base layer"


def test_missing_blobs_counts_a_damaged_one(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    config = layout.put_blob(b"{}")
    layer = layout.put_blob(b"layer")
    manifest = {"schemaVersion": 2, "config": {"digest": config, "size": 2},
                "layers": [{"digest": layer, "size": 5}]}
    layout.put_image("x:1", manifest)
    stored = OCILayout(tmp_path / "oci").image("x:1")
    assert stored is not None and OCILayout(tmp_path / "oci").missing_blobs(stored) == []
    _damage(layout.blob_path(layer))
    assert OCILayout(tmp_path / "oci").missing_blobs(stored) == [layer]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_temporaries_of_dead_writers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = _dead_pid()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        blobs = tmp_path / "oci" / "blobs" / "sha256"
        blobs.mkdir(parents=True)
        names = {
            f".layer-{dead}-7f00aa.tmp": False, f".index.json.{dead}.deadbeef.tmp": False,
            f".tiny-1.0-py3-none-any.whl.{dead}.part": False,
            f".layer-{live.pid}-7f00aa.tmp": True, f".index.json.{live.pid}.deadbeef.tmp": True,
            f".layer-{os.getpid()}-1.tmp": True, "a" * 64: True, ".layer-x-1.tmp": True, "notes.tmp": True,
        }
        for name in names:
            (blobs / name).write_bytes(b"partial")
        OCILayout(tmp_path / "oci").init()
        assert {p.name for p in blobs.iterdir()} == {n for n, kept in names.items() if kept}
        assert remove_dead_temporaries(tmp_path / "none") == []
    finally:
        live.kill()
        live.wait()


def test_a_killed_build_leaves_nothing_once_the_layout_is_opened_again(tmp_path: Path) -> None:
    blobs = tmp_path / "oci" / "blobs" / "sha256"
    code = ("import sys, time; from pathlib import Path; from pinmatrix.oci.layer import LayerWriter\n"
            f"w = LayerWriter(Path({str(blobs)!r}), epoch=0)\n"
            "w.add_bytes('opt/x', b'x' * 100000); w._file.flush(); print('writing', flush=True); time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "writing"
        assert [p.name for p in blobs.iterdir() if p.name.startswith(".layer-")]
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{proc.pid}").exists():
        time.sleep(0.05)
    OCILayout(tmp_path / "oci").init()
    assert list(blobs.iterdir()) == []

