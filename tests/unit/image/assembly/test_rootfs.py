"""rootfs.debian_base_as: a Debian base's gzip layer compressed as the cell's layers are, the same tar (diff_id),
made once and kept in the cache, its key part of the image's inputs; layer.recompress underneath; and
debian_base's one line when a base is neither cached nor can be made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pinmatrix.cell import BaseSpec
from pinmatrix.image.assembly import rootfs
from pinmatrix.image.assembly.rootfs import BaseImageError, BaseLayers, debian_base_as
from pinmatrix.oci.compression import DEFAULT_COMPRESSION, LayerCompression
from pinmatrix.oci.layer import LayerWriter, open_layer, recompress
from pinmatrix.oci.layout import OCILayout

ZSTD = LayerCompression.parse("zstd:3")


def _base(layout: OCILayout) -> BaseLayers:
    writer = LayerWriter(layout.blobs, epoch=0)  # the default gzip, as debian_base writes it
    writer.add_symlink("lib", "usr/lib")
    writer.add_bytes("usr/lib/libc.so.6", os.urandom(300_000))
    writer.add_bytes("usr/bin/python3.13", b"\x7fELF" + b"p" * 50_000, executable=True)
    return BaseLayers((writer.close(),), (), "debian:trixie (amd64, k)", "basekey", "3.13")


def _names(layout: OCILayout, base: BaseLayers) -> list[tuple[str, int]]:
    layer = base.layers[0]
    with open_layer(layout.blob_path(layer.digest), layer.media_type) as tar:
        return [(m.name, m.mode) for m in tar]


@pytest.mark.parametrize("target", ["zstd:3", "none", "gzip:6"])
def test_recompress_keeps_the_tar_and_changes_only_the_blob(tmp_path: Path, target: str) -> None:
    layout = OCILayout(tmp_path / "oci")
    gz = _base(layout).layers[0]
    again = recompress(layout.blob_path(gz.digest), gz.media_type, layout.blobs, LayerCompression.parse(target),
                       entries=gz.entries)
    assert again.diff_id == gz.diff_id and again.unpacked == gz.unpacked and again.entries == gz.entries
    assert again.digest != gz.digest and again.media_type == LayerCompression.parse(target).media_type
    assert layout.has_blob(again.digest) and not list(layout.blobs.glob(".layer-*"))
    same = recompress(layout.blob_path(gz.digest), gz.media_type, layout.blobs, LayerCompression.parse(target))
    assert same.digest == again.digest  # the same bytes every time


def test_the_default_compression_gives_the_base_as_it_is(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci")
    base = _base(layout)
    assert debian_base_as(base, DEFAULT_COMPRESSION, layout, tmp_path / "cache") is base


def test_a_zstd_cell_gets_a_zstd_base_with_the_same_entries_and_a_key_of_its_own(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci")
    base = _base(layout)
    as_zstd = debian_base_as(base, ZSTD, layout, tmp_path / "cache")
    layer = as_zstd.layers[0]
    assert layer.media_type == ZSTD.media_type and layer.diff_id == base.layers[0].diff_id
    assert _names(layout, as_zstd) == _names(layout, base)
    assert as_zstd.key not in (base.key, "") and as_zstd.name == base.name and as_zstd.python == "3.13"
    as_level_9 = debian_base_as(base, LayerCompression.parse("zstd:9"), layout, tmp_path / "cache")
    assert as_level_9.key != as_zstd.key  # another choice, other inputs


def test_it_is_made_once_and_kept_for_another_layout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = OCILayout(tmp_path / "oci")
    base = _base(layout)
    first = debian_base_as(base, ZSTD, layout, tmp_path / "cache")
    monkeypatch.setattr(rootfs, "recompress", lambda *a, **k: pytest.fail("made again"))
    assert debian_base_as(base, ZSTD, layout, tmp_path / "cache") == first
    other = OCILayout(tmp_path / "other")
    assert debian_base_as(base, ZSTD, other, tmp_path / "cache") == first
    assert other.blob_path(first.layers[0].digest).read_bytes() == layout.blob_path(first.layers[0].digest).read_bytes()


def test_a_dry_plan_has_the_same_key_and_no_layer_until_it_is_made(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci")
    base = _base(layout)
    unbuilt = BaseLayers((), (), base.name, base.key, base.python)
    planned = debian_base_as(unbuilt, ZSTD, layout, tmp_path / "cache", dry=True)
    made = debian_base_as(base, ZSTD, layout, tmp_path / "cache")
    assert planned.layers == () and planned.key == made.key
    assert debian_base_as(unbuilt, ZSTD, layout, tmp_path / "cache", dry=True).layers == made.layers


def test_a_tar_that_reads_back_otherwise_is_refused_and_not_kept(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    layout = OCILayout(tmp_path / "oci")
    base = _base(layout)
    real = rootfs.recompress

    def lying(*args: object, **kwargs: object) -> object:
        from dataclasses import replace
        return replace(real(*args, **kwargs), diff_id="sha256:" + "0" * 64)  # type: ignore[arg-type]

    monkeypatch.setattr(rootfs, "recompress", lying)
    with pytest.raises(BaseImageError, match="its tar is sha256:0+, not the gzip layer's"):
        debian_base_as(base, ZSTD, layout, tmp_path / "cache")
    assert not list((tmp_path / "cache" / "rootfs").glob("*.json"))


def test_a_base_missing_from_the_cache_without_mmdebstrap_names_its_mirror_and_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host whose inputs give another key (another mirror), the base is not the cached one: the line says
    which base it looked for, so the mirror can be seen at once."""
    spec = BaseSpec(kind="mmdebstrap", suite="trixie", source_date_epoch=1735689600, packages=("python3",),
                    mirror="http://mirror.invalid/debian")
    real_which = rootfs.shutil.which
    monkeypatch.setattr(rootfs.shutil, "which", lambda name: None if name == "mmdebstrap" else real_which(name))
    key = rootfs.rootfs_inputs(spec, "x86_64-manylinux_2_28").key()
    with pytest.raises(BaseImageError) as raised:
        rootfs.debian_base(spec, "x86_64-manylinux_2_28", OCILayout(tmp_path / "oci").init(), tmp_path / "cache",
                           tmp_path / "base.log")
    assert str(raised.value) == (f"the Debian base trixie (amd64, mirror http://mirror.invalid/debian, key {key}) is "
                                 "not in the cache and mmdebstrap is not installed: apt-get install mmdebstrap, or "
                                 "pin base.image by digest")
    assert not list((tmp_path / "cache" / "rootfs").glob("*.json"))  # nothing recorded
