"""pinmatrix.image.assembly.assemble rule by rule, in process: a cell's image is its base, venv, one layer per locked
wheel (by name), its patches, smoke and CA layers, then a config and manifest that name them in that order; a
layer is found again by its key (what its bytes depend on) only while its blob re-hashes to its digest; an
unchanged image is not assembled again, a damaged one is; the same cell gives the same bytes in another cache
and layout; past ``max_layers`` the smallest wheels share one layer holding each path once; a base of another
Python, a source patch, a patch of a package not in the lock and a cell whose layers would not fit are refused
before anything is written. The base is a small layer written here (no mmdebstrap), the wheels come from an
index on 127.0.0.1 (tests/pep691.py)."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import re
import shutil
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from pep691 import serve_pages

from conftest import make_cell
from pinmatrix.cell import Cell, CellPatch, IndexSpec
from pinmatrix.image.assembly import assemble as assemble_module
from pinmatrix.image.assembly.assemble import (
    INPUTS,
    Assembler,
    AssemblyError,
    AssemblySettings,
    LayerCache,
    PlannedLayer,
    WheelChoices,
    describe,
)
from pinmatrix.image.assembly.rootfs import BaseLayers
from pinmatrix.image.cellconfig import LOCK_LABEL
from pinmatrix.index.wheel_index import WheelFile
from pinmatrix.oci.compression import DEFAULT_COMPRESSION, LayerCompression
from pinmatrix.oci.layer import LayerDescriptor, LayerWriter, open_layer
from pinmatrix.oci.layout import OCILayout
from pinmatrix.oci.scratch_unpack import RootLayers

BUNDLE = b"-----BEGIN CERTIFICATE-----\nBASE\n-----END CERTIFICATE-----"  # no newline at the end
SITE = "opt/venv/lib/python3.11/site-packages"


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


EXECUTABLE = {"alpha/run.sh"}  # written 0755 in its wheel


def wheel_bytes(name: str, version: str, files: dict[str, bytes]) -> bytes:
    dist = f"{name.replace('-', '_')}-{version}.dist-info"
    entries = {**files, f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
               f"{dist}/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = "".join(f"{n},{_record_hash(d)},{len(d)}\n" for n, d in entries.items()) + f"{dist}/RECORD,,\n"
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:  # fixed times: the same bytes in every Project
        for n, d in [*entries.items(), (f"{dist}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(n, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if n in EXECUTABLE else 0o100644) << 16
            zf.writestr(info, d)
    return buf.getvalue()


WHEELS = {
    "alpha": ("1.0", {"alpha.py": b"A = 1\n" * 2000, "shared/data.txt": b"from alpha\n",
                      "alpha/run.sh": b"#!/bin/sh\necho one\n", "alpha/sub/deep.py": b"D = 1\n",
                      "alpha/same.py": b"S = 1\n"}),
    "alpha-x": ("1.0", {"alpha_x.py": b"AX = 1\n"}),  # its layer name sorts before alpha's: "-" < "="
    "beta": ("2.0", {"beta.py": b"B = 2\n", "shared/data.txt": b"from beta\n", "beta/libX": b"X", "beta/trail ": b"T"}),
    "gamma": ("3.0", {"gamma.py": b"G = 3\n" * 200,  # and bytes that do not compress: the largest layer
                      "gamma.bin": b"".join(hashlib.sha256(bytes([i, j])).digest() for i in range(4) for j in range(256))}),
}


def base_layer(layout: OCILayout) -> LayerDescriptor:
    """A base layer as a pulled rootfs names its entries (``./etc/...``), as a plain tar."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (("./etc/ssl/certs/ca-certificates.crt", BUNDLE), ("./etc/os-release", b"ID=test\n")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("./etc/ssl/certs/ca-certificates.crt.link")
        link.type, link.linkname = tarfile.SYMTYPE, "ca-certificates.crt"
        tar.addfile(link)
    data = buf.getvalue()
    digest = layout.put_blob(data)
    return LayerDescriptor(digest, len(data), digest, "application/vnd.oci.image.layer.v1.tar")


class Project:
    """A project with a smoke folder, an index serving WHEELS, a cell that locks them and a base written here."""

    def __init__(self, tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch, *, python: str = "3.11",
                 packages: tuple[str, ...] = ("alpha", "beta"), **settings: object) -> None:
        self.tmp = tmp_path
        self.url = url
        (tmp_path / "smoke").mkdir(parents=True, exist_ok=True)
        (tmp_path / "smoke" / "catalogue.toml").write_bytes(b"# the smokes\n")
        self.data = {n: wheel_bytes(n, WHEELS[n][0], WHEELS[n][1]) for n in WHEELS}
        self.sha = {n: hashlib.sha256(d).hexdigest() for n, d in self.data.items()}
        self.packages = packages
        self.cell = self.make(packages)
        self.base_python: str | None = python
        self.base_calls: list[bool] = []
        self.base_logs: list[Path] = []  # where mmdebstrap's output would go
        monkeypatch.setattr(assemble_module, "debian_base", self._base)
        chosen: dict[str, object] = {"smoke_dir": tmp_path / "smoke", "jobs": 2, **settings}
        self.settings = AssemblySettings(root=tmp_path, cache_dir=tmp_path / "cache", layout_dir=tmp_path / "oci",
                                         **chosen)  # type: ignore[arg-type]
        self.assembler = Assembler(self.settings)
        self.log = tmp_path / "build.log"

    def make(self, packages: tuple[str, ...], **over: object) -> Cell:
        cell = make_cell("rules", tuple(f"{n}=={WHEELS[n][0]}" for n in packages), pins={"alpha": "1.0"})
        return dataclasses.replace(cell, indexes=(IndexSpec(name="test", url=f"{self.url}/simple", default=True),),
                                   **over)  # type: ignore[arg-type]

    def lock(self, cell: Cell | None = None) -> str:
        cell = cell or self.cell
        lines = [f"# pinmatrix lock for cell {cell.id}: test", f"# python {cell.python} on {cell.platform}; test"]
        for n in sorted(WHEELS):
            if f"{n}=={WHEELS[n][0]}" in cell.requirements:
                lines += [f"{n}=={WHEELS[n][0]} \\", f"    --hash=sha256:{self.sha[n]}"]
        return "\n".join(lines) + "\n"

    def _base(self, spec: object, platform: str, layout: OCILayout, cache_dir: Path, log: Path, *,
              dry: bool = False) -> BaseLayers:
        self.base_calls.append(dry)
        self.base_logs.append(log)
        return BaseLayers((base_layer(layout),), ("PATH=/usr/bin:/bin", "LANG=C.UTF-8", "OPTS=a=b"), "debian:test",
                          "base-key",
                          self.base_python)

    def assemble(self, cell: Cell | None = None, ref: str = "localhost/rules:one",
                 steps: list[str] | None = None, assembler: Assembler | None = None,
                 on_blob=lambda layer: None):  # noqa: ANN001, ANN201
        cell = cell or self.cell
        return (assembler or self.assembler).assemble(cell, self.lock(cell), ref, self.log,
                                                      on_step=(steps.append if steps is not None else lambda s: None),
                                                      on_blob=on_blob)

    def layer_files(self, desc: LayerDescriptor) -> dict[str, bytes | None]:
        out: dict[str, bytes | None] = {}
        with open_layer(self.assembler.layout.blob_path(desc.digest), desc.media_type) as tar:
            for member in tar:
                handle = tar.extractfile(member) if member.isreg() else None
                out[member.name] = handle.read() if handle else None
        return out


@pytest.fixture
def index() -> Iterator[tuple[str, dict[str, bytes]]]:
    pages: dict[str, bytes] = {}
    with serve_pages(pages) as url:
        yield url, pages


def _serve(pages: dict[str, bytes], project: Project) -> None:
    for name, data in project.data.items():
        filename = f"{name.replace('-', '_')}-{WHEELS[name][0]}-py3-none-any.whl"
        pages[f"/simple/{name}/"] = json.dumps({"files": [{
            "filename": filename, "url": f"/files/{filename}", "hashes": {"sha256": project.sha[name]},
            "size": len(data)}]}).encode()
        pages[f"/files/{filename}"] = data


@pytest.fixture
def project(tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> Project:
    url, pages = index
    p = Project(tmp_path / "p", url, monkeypatch)
    _serve(pages, p)
    return p


# -- the image -------------------------------------------------------------------------------------------

def test_an_image_is_base_venv_wheels_smoke_in_that_order_named_by_its_config(project: Project) -> None:
    steps: list[str] = []
    image = project.assemble(steps=steps)
    layout = project.assembler.layout
    assert [p.name for p in image.layers] == ["base", "venv", "wheel:alpha==1.0", "wheel:beta==2.0", "smoke"]
    assert not image.cached and image.ref == "localhost/rules:one" and 0 < image.seconds < 600  # this run's time
    stored = layout.image("localhost/rules:one")
    assert stored is not None and (stored.digest, stored.config_digest) == (image.digest, image.config_digest)
    assert stored.annotations[INPUTS] == image.inputs and stored.annotations["io.pinmatrix.cell.id"] == project.cell.id
    descriptors = [p.descriptor for p in image.layers]
    assert all(descriptors) and image.size == sum(d.size for d in descriptors if d)
    manifest = stored.manifest
    assert manifest["schemaVersion"] == 2 and manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    assert manifest["layers"] == [d.as_oci() for d in descriptors if d]
    config_bytes = layout.blob_path(image.config_digest).read_bytes()
    assert manifest["config"] == {"mediaType": "application/vnd.oci.image.config.v1+json",
                                  "digest": image.config_digest, "size": len(config_bytes)}
    config = json.loads(config_bytes)
    assert config["rootfs"]["diff_ids"] == [d.diff_id for d in descriptors if d]
    assert [h["created_by"] for h in config["history"]] == [
        "pinmatrix: base debian:test", "pinmatrix: venv", "pinmatrix: wheel:alpha==1.0", "pinmatrix: wheel:beta==2.0",
        "pinmatrix: smoke"]
    labels = config["config"]["Labels"]
    assert labels[INPUTS] == image.inputs
    assert labels["io.pinmatrix.layers"] == "base,venv,wheel:alpha==1.0,wheel:beta==2.0,smoke"
    assert labels[LOCK_LABEL] == hashlib.sha256(project.lock().encode()).hexdigest()
    assert labels["org.opencontainers.image.base.name"] == "debian:test"
    assert "LANG=C.UTF-8" in config["config"]["Env"]
    assert steps[0] == "plan" and steps[-2:] == ["config", "runnable"]
    for name in ("alpha", "beta"):
        filename = f"{name.replace('-', '_')}-{WHEELS[name][0]}-py3-none-any.whl"
        assert steps.index(f"fetch {filename}") < steps.index(f"layer {filename}") < steps.index("config")
    assert project.layer_files(descriptors[2])[f"{SITE}/alpha.py"] == b"A = 1\n" * 2000  # type: ignore[arg-type]
    assert project.layer_files(descriptors[3])[f"{SITE}/beta.py"] == b"B = 2\n"  # type: ignore[arg-type]
    venv = project.layer_files(descriptors[1])  # type: ignore[arg-type]
    assert "opt/venv/pyvenv.cfg" in venv
    smoke = project.layer_files(descriptors[4])  # type: ignore[arg-type]
    assert smoke["pinmatrix/smoke/catalogue.toml"] == b"# the smokes\n"
    assert project.base_calls == [False] and project.base_logs == [project.log]


def test_a_layer_being_written_says_its_bytes_share_and_rate(project: Project) -> None:
    """On a clock where every read is two seconds on, each write of a layer's tar is worth a line: the wheel's
    layer names itself with the bytes written of its files' unpacked size (its zip's), the rate and time left."""
    ticks = iter(range(0, 10**6, 2))
    project.assembler.clock = lambda: float(next(ticks))
    steps: list[str] = []
    project.assemble(steps=steps)
    alpha = [s for s in steps if s.startswith("layer wheel:alpha==1.0: ")]
    shape = re.compile(r"layer wheel:alpha==1\.0: [\d.]+ (B|KiB) of ([\d.]+) KiB \(\d+%\), [\d.]+ (B|KiB)/s, [\d:]+ left")
    found = [shape.fullmatch(s) for s in alpha]
    assert alpha and all(found), alpha
    totals = {float(m[2]) for m in found if m}
    payload = sum(len(data) for data in WHEELS["alpha"][1].values()) / 1024  # and its dist-info: a little more
    assert len(totals) == 1 and payload <= totals.pop() < payload + 4, (payload, alpha)
    assert any(s.startswith("layer venv: ") for s in steps)  # every written layer, without a total when none is known


def test_an_unchanged_image_is_not_assembled_again_and_a_damaged_one_is(project: Project) -> None:
    first = project.assemble()
    blobs = sorted(p.name for p in project.assembler.layout.blobs.iterdir())
    steps: list[str] = []
    again = project.assemble(steps=steps)
    assert again.cached and (again.digest, again.config_digest) == (first.digest, first.config_digest)
    assert steps == ["plan"] and 0 <= again.seconds < 600
    assert sorted(p.name for p in project.assembler.layout.blobs.iterdir()) == blobs
    fresh = Assembler(project.settings)  # another process: the same records
    assert project.assemble(assembler=fresh).cached
    wheel = first.layers[2].descriptor
    assert wheel is not None
    path = project.assembler.layout.blob_path(wheel.digest)
    path.write_bytes(b"\0" + path.read_bytes()[1:])  # damaged in place
    steps = []
    rebuilt = project.assemble(assembler=Assembler(project.settings), steps=steps)
    assert not rebuilt.cached and rebuilt.digest == first.digest  # the same bytes again
    assert "layer alpha-1.0-py3-none-any.whl" in steps and "layer beta-2.0-py3-none-any.whl" not in steps
    assert hashlib.sha256(path.read_bytes()).hexdigest() == wheel.digest[7:]
    assert [p.cached for p in rebuilt.layers] == [True, True, False, True, True]


def test_another_ref_of_the_same_inputs_is_written_under_that_ref(project: Project) -> None:
    first = project.assemble()
    other = project.assemble(ref="localhost/rules:two")
    assert not other.cached and other.digest == first.digest
    assert project.assembler.layout.image("localhost/rules:two") is not None


def test_the_same_cell_gives_the_same_image_in_another_cache_and_layout(project: Project, tmp_path: Path,
                                                                         index: tuple[str, dict[str, bytes]],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    first = project.assemble()
    other = Project(tmp_path / "elsewhere" / "q", index[0], monkeypatch, jobs=1)
    second = other.assemble()
    assert (second.digest, second.config_digest, second.inputs) == (first.digest, first.config_digest, first.inputs)


def test_a_layer_key_holds_what_its_bytes_depend_on_and_nothing_else(project: Project, tmp_path: Path,
                                                                      index: tuple[str, dict[str, bytes]],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    def keys(p: Project, cell: Cell | None = None) -> dict[str, str]:
        cell = cell or p.cell
        image, _ = p.assembler.plan(cell, p.lock(cell), p.log)
        return {layer.name: layer.key for layer in image.layers} | {"inputs": image.inputs}

    plain = keys(project)
    three = project.make(("alpha", "beta", "gamma"))
    with_gamma = keys(project, three)
    assert with_gamma["wheel:alpha==1.0"] == plain["wheel:alpha==1.0"]  # shared with a cell that has more wheels
    assert with_gamma["venv"] == plain["venv"] and with_gamma["inputs"] != plain["inputs"]
    level = keys(Project(tmp_path / "level", index[0], monkeypatch, compression=LayerCompression("gzip", 6)))
    plain_cell = project.cell
    epoch = keys(project, dataclasses.replace(plain_cell, base=dataclasses.replace(
        plain_cell.base, source_date_epoch=(plain_cell.base.source_date_epoch or 0) + 1)))
    for changed in (level, epoch):
        for name in ("venv", "wheel:alpha==1.0", "wheel:beta==2.0", "smoke", "inputs"):
            assert changed[name] != plain[name], name
    (project.tmp / "smoke" / "catalogue.toml").write_bytes(b"# other smokes\n")
    smoke = keys(project)
    assert smoke["smoke"] != plain["smoke"] and smoke["wheel:alpha==1.0"] == plain["wheel:alpha==1.0"]
    assert keys(project)["smoke"] == smoke["smoke"]
    assert len({plain[n] for n in ("venv", "wheel:alpha==1.0", "wheel:beta==2.0", "smoke")}) == 4


def test_the_plan_says_what_is_cached_and_what_would_be_downloaded(project: Project) -> None:
    image, context = project.assembler.plan(project.cell, project.lock(), project.log, dry=True)
    assert project.base_calls == [True]
    assert [(p.name, p.cached, p.download) for p in image.layers] == [
        ("base", True, None), ("venv", False, None), ("wheel:alpha==1.0", False, len(project.data["alpha"])),
        ("wheel:beta==2.0", False, len(project.data["beta"])), ("smoke", False, None)]
    (planned,) = describe([image])
    assert planned["download_bytes"] == len(project.data["alpha"]) + len(project.data["beta"])
    assert planned["cell"] == project.cell.id and planned["digest"] is None and planned["config"] is None
    assert [layer["download"] for layer in planned["layers"]] == [  # type: ignore[union-attr]
        None, None, len(project.data["alpha"]), len(project.data["beta"]), None]
    assert set(context) == {"base", "venv", "wheels", "labels", "env", "epoch", "smoke", "aot", "annotations"}
    built = project.assemble()
    again, _ = project.assembler.plan(project.cell, project.lock(), project.log)
    assert all(p.cached for p in again.layers) and all(p.download is None for p in again.layers)
    assert [p.descriptor for p in again.layers] == [p.descriptor for p in built.layers]
    (done,) = describe([built])
    assert done["digest"] == built.digest and done["config"] == built.config_digest and done["cached"] is False
    assert done["download_bytes"] == len(project.data["alpha"]) + len(project.data["beta"])
    assert done["layers"][2] == {  # type: ignore[index]
        "name": "wheel:alpha==1.0", "key": built.layers[2].key, "cached": False,
        "digest": built.layers[2].descriptor.digest, "size": built.layers[2].descriptor.size,  # type: ignore[union-attr]
        "download": len(project.data["alpha"])}


def test_the_wheel_chosen_for_a_lock_line_is_remembered(project: Project, index: tuple[str, dict[str, bytes]]) -> None:
    project.assemble()
    index[1].clear()  # the index is gone: a warm build asks it nothing
    image, context = Assembler(project.settings).plan(project.cell, project.lock(), project.log)
    wheels = context["wheels"]
    assert isinstance(wheels, dict) and wheels["alpha"].sha256 == project.sha["alpha"]
    assert wheels["alpha"].size == len(project.data["alpha"])
    assert all(p.cached for p in image.layers)


def test_wheel_choices_are_kept_per_target_and_index(tmp_path: Path) -> None:
    class Fetcher:
        def __init__(self) -> None:
            self.asked = 0

        def choose(self, entry, target, indexes):  # noqa: ANN001, ANN201
            self.asked += 1
            return WheelFile(entry.name, entry.version, f"{entry.name}-{self.asked}.whl", "u", "a" * 64, self.asked)

    from pinmatrix.index.wheel_index import Target
    from pinmatrix.project.lockfile import parse_lock

    fetcher = Fetcher()
    choices = WheelChoices(tmp_path, fetcher)  # type: ignore[arg-type]
    entry = parse_lock(f"six==1.17.0 --hash=sha256:{'a' * 64}\n").entries[0]
    cell = make_cell("c", ("six==1.17.0",))
    first = choices.choose(entry, Target("3.11", "x86_64-manylinux_2_28"), cell)
    assert choices.choose(entry, Target("3.11", "x86_64-manylinux_2_28"), cell) == first and fetcher.asked == 1
    assert WheelChoices(tmp_path, fetcher).choose(entry, Target("3.11", "x86_64-manylinux_2_28"), cell) == first  # type: ignore[arg-type]
    assert choices.choose(entry, Target("3.12", "x86_64-manylinux_2_28"), cell).size == 2
    assert choices.choose(entry, Target("3.11", "aarch64-manylinux_2_28"), cell).size == 3
    other_index = dataclasses.replace(cell, indexes=(IndexSpec(name="mirror", url="https://mirror.invalid/simple"),))
    assert choices.choose(entry, Target("3.11", "x86_64-manylinux_2_28"), other_index).size == 4
    assert fetcher.asked == 4


# -- the layer cache -------------------------------------------------------------------------------------

def test_a_layer_record_counts_only_while_its_blob_rehashes_to_its_digest(tmp_path: Path) -> None:
    layout = OCILayout(tmp_path / "oci").init()
    writer = LayerWriter(layout.blobs, epoch=0)
    writer.add_bytes("x", b"x")
    desc = writer.close()
    cache = LayerCache(tmp_path / "cache", layout)
    assert cache.get("k") is None
    cache.put("k", desc, "wheel:x==1")
    record = json.loads((tmp_path / "cache" / "layers" / "k.json").read_text())
    assert record == {**desc.to_json(), "what": "wheel:x==1"}
    assert cache.get("k") == desc
    (tmp_path / "cache" / "layers" / "bad.json").write_text("{not json")
    assert cache.get("bad") is None
    (tmp_path / "cache" / "layers" / "partial.json").write_text(json.dumps({"digest": desc.digest}))
    assert cache.get("partial") is None
    layout.blob_path(desc.digest).unlink()
    assert LayerCache(tmp_path / "cache", OCILayout(tmp_path / "oci")).get("k") is None
    writer = LayerWriter(layout.blobs, epoch=0)
    writer.add_bytes("x", b"x")
    assert writer.close() == desc
    cache.put("wrong-size", dataclasses.replace(desc, size=desc.size + 1), "x")
    assert LayerCache(tmp_path / "cache", OCILayout(tmp_path / "oci")).get("wrong-size") is None
    assert cache.lock("a") is cache.lock("a") and cache.lock("a") is not cache.lock("b")


def test_a_failed_layer_build_leaves_no_blob_no_temporary_and_no_record(project: Project) -> None:
    planned = PlannedLayer("wheel:x==1", "key-x")

    def build(writer: LayerWriter) -> None:
        writer.add_bytes("opt/x", b"x" * 1000)
        raise KeyboardInterrupt

    blobs = set(project.assembler.layout.blobs.iterdir())
    with pytest.raises(KeyboardInterrupt):
        project.assembler._cached_or_build(planned, build, 0)
    assert set(project.assembler.layout.blobs.iterdir()) == blobs
    assert planned.descriptor is None and project.assembler.layers.get("key-x") is None
    project.assembler._cached_or_build(planned, lambda w: w.add_bytes("opt/x", b"x"), 7)
    assert planned.descriptor is not None and not planned.cached and 0 < planned.seconds < 600
    with open_layer(project.assembler.layout.blob_path(planned.descriptor.digest), planned.descriptor.media_type) as tar:
        assert {m.mtime for m in tar} == {7}
    again = PlannedLayer("wheel:x==1", "key-x")

    def must_not_build(writer: LayerWriter) -> None:
        raise AssertionError("a layer in the cache was built again")  # a test failure, not an interrupt

    project.assembler._cached_or_build(again, must_not_build, 0)  # found: not built
    assert again.cached and again.descriptor == planned.descriptor
    # hashed as it was written: this process reuses it without reading it again (oci.OCILayout.written)
    assert project.assembler.layout._intact.get(planned.descriptor.digest) == planned.descriptor.size
    record = json.loads((project.settings.cache_dir / "layers" / "key-x.json").read_text())
    assert record["what"] == "wheel:x==1"


# -- many wheels -----------------------------------------------------------------------------------------

def test_past_max_layers_the_smallest_wheels_share_one_layer_holding_each_path_once(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "five", index[0], monkeypatch, max_layers=5)
    _serve(index[1], p)
    cell = p.make(("alpha", "beta", "gamma"))
    image = p.assemble(cell)
    names = [layer.name for layer in image.layers]
    assert names == ["base", "venv", "wheel:gamma==3.0", "wheels:alpha==1.0,beta==2.0", "smoke"]  # by size
    stored = p.assembler.layout.image("localhost/rules:one")
    assert stored is not None and len(stored.manifest["layers"]) == 5
    config = json.loads(p.assembler.layout.blob_path(image.config_digest).read_bytes())
    assert config["history"][3]["created_by"] == "pinmatrix: wheels:alpha==1.0,beta==2.0"
    merged = image.layers[3].descriptor
    assert merged is not None
    with open_layer(p.assembler.layout.blob_path(merged.digest), merged.media_type) as tar:
        members = [m.name for m in tar]
    assert len(members) == len(set(members))  # each path once: containers/storage refuses repeats
    files = p.layer_files(merged)
    assert files[f"{SITE}/beta.py"] == b"B = 2\n" and files[f"{SITE}/alpha.py"] == b"A = 1\n" * 2000
    assert f"{SITE}/gamma.py" not in files
    assert any(n.startswith(f"{SITE}/beta-2.0.dist-info/") for n in files)
    assert any(n.startswith(f"{SITE}/alpha-1.0.dist-info/") for n in files)

    everything = Project(tmp_path / "four", index[0], monkeypatch, max_layers=4)
    image = everything.assemble(cell)
    assert [layer.name for layer in image.layers] == ["base", "venv", "wheels:alpha==1.0,beta==2.0,gamma==3.0",
                                                      "smoke"]
    files = everything.layer_files(image.layers[2].descriptor)  # type: ignore[arg-type]
    assert files[f"{SITE}/shared/data.txt"] == b"from beta\n"  # the later layer's, as the layers' order leaves it
    with open_layer(everything.assembler.layout.blob_path(image.layers[2].descriptor.digest),  # type: ignore[union-attr]
                    image.layers[2].descriptor.media_type) as tar:  # type: ignore[union-attr]
        members = [m.name for m in tar]
    assert len(members) == len(set(members)) and members.count(f"{SITE}/shared/data.txt") == 1
    parts = [p.layer_files(d) for d in (p.assemble(p.make((n,)), ref=f"localhost/rules:{n}").layers[2].descriptor
                                         for n in ("alpha", "beta", "gamma")) if d]
    assert set(files) == set().union(*parts)  # every path of every wheel, once

    roomy = Project(tmp_path / "six", index[0], monkeypatch, max_layers=6)
    assert [layer.name for layer in roomy.assemble(cell).layers] == [
        "base", "venv", "wheel:alpha==1.0", "wheel:beta==2.0", "wheel:gamma==3.0", "smoke"]


def test_the_merged_layer_is_shared_by_its_parts_keys(tmp_path: Path, index: tuple[str, dict[str, bytes]],
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "p", index[0], monkeypatch, max_layers=4)
    _serve(index[1], p)
    cell = p.make(("alpha", "beta", "gamma"))
    first = p.assemble(cell)
    steps: list[str] = []
    other = p.make(("alpha", "beta", "gamma"), env={"X": "1"})
    second = p.assemble(other, ref="localhost/rules:env", steps=steps)
    assert second.digest != first.digest
    assert second.layers[2].descriptor == first.layers[2].descriptor and second.layers[2].key == first.layers[2].key
    assert not any(s.startswith("layer ") for s in steps)
    two = Assembler(dataclasses.replace(p.settings, max_layers=3))  # alpha and beta merged: another layer
    merged = p.assemble(p.make(("alpha", "beta")), ref="localhost/rules:two", assembler=two).layers[2]
    assert merged.name == "wheels:alpha==1.0,beta==2.0" and merged.key != first.layers[2].key
    assert f"{SITE}/gamma.py" not in p.layer_files(merged.descriptor)  # type: ignore[arg-type]


def test_wheels_below_merge_below_share_one_layer_that_the_plan_shows(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = {n: len(wheel_bytes(n, WHEELS[n][0], WHEELS[n][1])) for n in WHEELS}
    bound = max(sizes["alpha"], sizes["beta"]) + 1
    assert bound <= sizes["gamma"]
    p = Project(tmp_path / "p", index[0], monkeypatch, merge_below=bound)
    _serve(index[1], p)
    cell = p.make(("alpha", "beta", "gamma"))
    plan, _ = p.assembler.plan(cell, p.lock(cell), p.log, dry=True)
    (shown,) = describe([plan])
    layers = shown["layers"]
    assert isinstance(layers, list)
    assert [entry["name"] for entry in layers] == ["base", "venv", "wheel:gamma==3.0", "wheels:alpha==1.0,beta==2.0",
                                                   "smoke"]  # where the image will have it
    merged_entry = layers[3]
    assert [q["name"] for q in merged_entry["parts"]] == ["wheel:alpha==1.0", "wheel:beta==2.0"]
    assert merged_entry["cached"] is False and merged_entry["digest"] is None
    assert [q["download"] for q in merged_entry["parts"]] == [sizes["alpha"], sizes["beta"]]

    image = p.assemble(cell)
    assert [layer.name for layer in image.layers] == ["base", "venv", "wheel:gamma==3.0", "wheels:alpha==1.0,beta==2.0",
                                                      "smoke"]
    assert image.merged is None and image.layers[3].key == merged_entry["key"]
    files = p.layer_files(image.layers[3].descriptor)  # type: ignore[arg-type]
    assert files[f"{SITE}/shared/data.txt"] == b"from beta\n" and f"{SITE}/alpha.py" in files
    again, _ = p.assembler.plan(cell, p.lock(cell), p.log)
    merged_again = describe([again])[0]["layers"][3]  # type: ignore[index]
    assert merged_again["cached"] is True and merged_again["digest"] == image.layers[3].descriptor.digest  # type: ignore[union-attr]

    # another cell with the same small wheels shares the merged layer; building nothing of it again
    steps: list[str] = []
    other = p.assemble(p.make(("alpha", "beta", "gamma"), env={"X": "1"}), ref="localhost/rules:env", steps=steps)
    assert other.layers[3].descriptor == image.layers[3].descriptor and not any(s.startswith("layer ") for s in steps)

    # the choice is an input: without it (a bound below every wheel, or none) the image is the one-layer-per-wheel one
    plain = Project(tmp_path / "plain", index[0], monkeypatch)
    tiny = Project(tmp_path / "tiny", index[0], monkeypatch, merge_below=min(sizes.values()))
    plain_plan, _ = plain.assembler.plan(cell, plain.lock(cell), plain.log, dry=True)
    tiny_plan, _ = tiny.assembler.plan(cell, tiny.lock(cell), tiny.log, dry=True)
    assert tiny_plan.inputs == plain_plan.inputs != plan.inputs
    assert tiny_plan.merge_by_size == [] and tiny_plan.merged is None
    built_plain = plain.assemble(cell)
    assert [layer.name for layer in built_plain.layers][2:5] == ["wheel:alpha==1.0", "wheel:beta==2.0",
                                                                 "wheel:gamma==3.0"]
    assert built_plain.digest != image.digest


def test_the_plan_keys_a_merged_layer_as_the_build_does_whatever_the_names_sort_to(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = {n: len(wheel_bytes(n, WHEELS[n][0], WHEELS[n][1])) for n in WHEELS}
    p = Project(tmp_path / "p", index[0], monkeypatch, merge_below=max(sizes["alpha"], sizes["alpha-x"]) + 1)
    _serve(index[1], p)
    cell = p.make(("alpha", "alpha-x", "gamma"))
    plan, _ = p.assembler.plan(cell, p.lock(cell), p.log, dry=True)
    assert plan.merged is not None and plan.merge_by_size == ["wheel:alpha-x==1.0", "wheel:alpha==1.0"]
    built = next(layer for layer in p.assemble(cell).layers if layer.name.startswith("wheels:"))
    assert (built.name, built.key) == (plan.merged.name, plan.merged.key)
    again, _ = p.assembler.plan(cell, p.lock(cell), p.log)
    assert again.merged is not None and again.merged.cached


# -- refusals --------------------------------------------------------------------------------------------

def test_a_base_without_python_or_with_another_one_is_refused(project: Project) -> None:
    project.base_python = None
    with pytest.raises(AssemblyError) as err:
        project.assemble()
    assert str(err.value) == (f"cell {project.cell.id} ({project.cell.name}): its base debian:test has no "
                              "/usr/bin/python3")
    project.base_python = "3.12"
    with pytest.raises(AssemblyError) as err:
        project.assemble()
    assert str(err.value) == (f"cell {project.cell.id} ({project.cell.name}): the cell wants Python 3.11 but its "
                              "base debian:test has 3.12")
    assert project.assembler.layout.image("localhost/rules:one") is None


def _patch(project: Project, kind: str = "installed-tree", package: str = "alpha",
           text: bytes | None = None) -> CellPatch:
    text = text if text is not None else (b"--- a/alpha.py\n+++ b/alpha.py\n@@ -1,2 +1,2 @@\n-A = 1\n+A = 2\n A = 1\n"
                                          b"--- a/shared/data.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-from alpha\n"
                                          b"--- a/alpha/run.sh\n+++ b/alpha/run.sh\n@@ -1,2 +1,2 @@\n #!/bin/sh\n"
                                          b"-echo one\n+echo two\n"
                                          b"--- /dev/null\n+++ b/alpha/new.py\n@@ -0,0 +1 @@\n+NEW = 1\n"
                                          b"--- a/alpha/sub/deep.py\n+++ b/alpha/sub/deep.py\n@@ -1 +1 @@\n-D = 1\n"
                                          b"+D = 2\n"
                                          b"--- a/alpha/same.py\n+++ b/alpha/same.py\n@@ -1 +1 @@\n-S = 1\n+S = 1\n")
    (project.tmp / "patches").mkdir(exist_ok=True)
    (project.tmp / "patches" / "fix.patch").write_bytes(text)
    return CellPatch(id="fix", package=package, version="1.0", kind=kind, status="apply",  # type: ignore[arg-type]
                     upstream="https://example.invalid/pr/1", sha256=hashlib.sha256(text).hexdigest(),
                     source="patches/fix.patch")


def test_a_source_patch_or_one_of_a_package_not_in_the_lock_is_refused_before_any_layer(project: Project) -> None:
    source = project.make(("alpha", "beta"), patches=(_patch(project, kind="source"),))
    with pytest.raises(AssemblyError) as err:
        project.assemble(source)
    assert str(err.value) == (f"cell {source.id} ({source.name}): a source patch must be compiled; it builds "
                              "through the Containerfile path (pinmatrix build routes it there)")
    assert project.base_calls == []
    stray = project.make(("alpha", "beta"), patches=(_patch(project, package="Delta_Pkg"),))
    with pytest.raises(AssemblyError) as err:
        project.assemble(stray)
    assert str(err.value) == f"cell {stray.id}: patch fix targets Delta_Pkg, which is not in the lock"
    assert not list(project.assembler.layout.blobs.glob("*.tmp"))


def test_an_installed_tree_patch_is_a_layer_of_the_files_it_changes(project: Project) -> None:
    cell = project.make(("alpha", "beta"), patches=(_patch(project, package="Alpha"),))
    steps: list[str] = []
    image = project.assemble(cell, steps=steps)
    assert [p.name for p in image.layers] == ["base", "venv", "wheel:alpha==1.0", "wheel:beta==2.0", "patch:fix",
                                              "smoke"]
    assert "patch fix" in steps
    files = project.layer_files(image.layers[4].descriptor)  # type: ignore[arg-type]
    assert files[f"{SITE}/alpha.py"] == b"A = 2\n" + b"A = 1\n" * 1999
    assert files[f"{SITE}/shared/.wh.data.txt"] == b""  # a file the patch removes is whited out
    assert files[f"{SITE}/alpha/run.sh"] == b"#!/bin/sh\necho two\n"
    assert files[f"{SITE}/alpha/new.py"] == b"NEW = 1\n"  # a file the patch adds
    assert files[f"{SITE}/alpha/sub/deep.py"] == b"D = 2\n"  # two folders down
    assert {n for n, d in files.items() if d is not None} == {
        f"{SITE}/alpha.py", f"{SITE}/shared/.wh.data.txt", f"{SITE}/alpha/run.sh", f"{SITE}/alpha/new.py",
        f"{SITE}/alpha/sub/deep.py"}
    with open_layer(project.assembler.layout.blob_path(image.layers[4].descriptor.digest),  # type: ignore[union-attr]
                    image.layers[4].descriptor.media_type) as tar:  # type: ignore[union-attr]
        modes = {m.name: m.mode for m in tar if m.isreg()}
    wheel_modes = project.layer_files(image.layers[2].descriptor)  # type: ignore[arg-type]
    assert f"{SITE}/alpha/run.sh" in wheel_modes
    assert modes[f"{SITE}/alpha/run.sh"] == 0o755  # as executable as in its wheel
    assert modes[f"{SITE}/alpha.py"] == modes[f"{SITE}/alpha/new.py"] == 0o644


def test_a_patch_that_does_not_apply_or_is_already_applied_is_refused(project: Project) -> None:
    bad = project.make(("alpha", "beta"), patches=(_patch(project, text=b"--- a/alpha.py\n+++ b/alpha.py\n"
                                                                       b"@@ -1 +1 @@\n-Z = 9\n+Z = 0\n"),))
    with pytest.raises(AssemblyError, match=rf"^cell {bad.id} \({re.escape(bad.name)}\): patch fix does not apply "
                                            r"to alpha 1\.0: "):
        project.assemble(bad)
    reverse = b"--- a/beta.py\n+++ b/beta.py\n@@ -1 +1 @@\n-B = 0\n+B = 2\n"
    done = project.make(("alpha", "beta"), patches=(dataclasses.replace(_patch(project, package="beta", text=reverse),
                                                                        version="2.0"),))
    with pytest.raises(AssemblyError) as err:
        project.assemble(done)
    assert str(err.value) == (f"cell {done.id}: patch fix is already in beta 2.0; declare contained_in instead")


def test_a_cell_whose_new_layers_would_not_fit_is_refused_with_the_sizes(project: Project,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Path] = []

    def usage(path: Path) -> object:
        seen.append(Path(path))
        return shutil._ntuple_diskusage(10**12, 10**12 - 100_000_000, 100_000_000)  # type: ignore[attr-defined]

    monkeypatch.setattr(shutil, "disk_usage", usage)
    big = WheelFile("torch", "2.11.0", "torch-2.11.0-py3-none-any.whl", "u", "0" * 64, 1_000_000_000)
    unknown = dataclasses.replace(big, name="other", size=None)
    with pytest.raises(AssemblyError) as err:
        project.assembler._check_disk(project.cell, [big, unknown])
    assert str(err.value) == (f"cell {project.cell.id} ({project.cell.name}): not enough disk: its 2 new layer(s) "
                              f"need about 2.7 GB free under {project.settings.cache_dir} and "
                              f"{project.settings.layout_dir}, 0.1 GB are")
    assert set(seen) == {project.settings.cache_dir, project.settings.layout_dir}
    assert project.settings.cache_dir.is_dir()
    seen.clear()
    project.assembler._check_disk(project.cell, [])
    assert seen == []  # nothing new: nothing asked
    small = dataclasses.replace(big, size=0)
    with pytest.raises(AssemblyError, match=r"need about 0\.5 GB free"):  # a layer's own room: 512 MiB
        project.assembler._check_disk(project.cell, [small])
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(1, 0, 512 << 20))  # type: ignore[attr-defined]
    project.assembler._check_disk(project.cell, [small])  # just enough
    with pytest.raises(AssemblyError, match="not enough disk"):
        project.assembler.assemble(project.cell, project.lock(), "localhost/rules:one", project.log)
    assert project.assembler.layout.image("localhost/rules:one") is None
    assert not [p for p in project.assembler.layout.blobs.iterdir() if not p.name.startswith(".")][1:]


# -- CA certificates -------------------------------------------------------------------------------------

def test_the_ca_layer_appends_the_extra_certificates_to_the_bases_bundle(tmp_path: Path,
                                                                        index: tuple[str, dict[str, bytes]],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    real = [p.read_bytes() for p in sorted(Path("/etc/ssl/certs").glob("*.pem"))[:4]]
    if len(real) < 4:
        pytest.skip("no system certificates to use as extra ones")
    cert_a, cert_b, cert_one, cert_two = real[0].rstrip(b"\n"), real[1], real[2], real[3]
    certs = tmp_path / "certs"
    certs.mkdir()
    (certs / "b.crt").write_bytes(cert_b)
    (certs / "a.crt").write_bytes(cert_a)  # no newline at its end
    (certs / "skip.pem").write_bytes(b"not a crt")
    single = tmp_path / "one.pem"
    single.write_bytes(cert_one)
    p = Project(tmp_path / "p", index[0], monkeypatch, extra_ca=(certs, single), ca_in_images=True)
    _serve(index[1], p)
    image = p.assemble()
    assert [layer.name for layer in image.layers][-2:] == ["smoke", "ca"]
    files = p.layer_files(image.layers[-1].descriptor)  # type: ignore[arg-type]
    assert files["etc/ssl/certs/ca-certificates.crt"] == BUNDLE + b"\n" + cert_a + b"\n" + cert_b + cert_one
    assert {n: d for n, d in files.items() if n.startswith("usr/local/share/ca-certificates/pinmatrix/") and d} == {
        "usr/local/share/ca-certificates/pinmatrix/a.crt": cert_a,
        "usr/local/share/ca-certificates/pinmatrix/b.crt": cert_b,
        "usr/local/share/ca-certificates/pinmatrix/one.pem": cert_one}
    key = image.layers[-1].key
    (certs / "a.crt").write_bytes(cert_two)
    again, _ = p.assembler.plan(p.cell, p.lock(), p.log)
    assert again.layers[-1].key != key
    (certs / "a.crt").write_bytes(cert_a)
    single.write_bytes(cert_two)
    assert p.assembler.plan(p.cell, p.lock(), p.log)[0].layers[-1].key not in (key, again.layers[-1].key)
    without = Project(tmp_path / "q", index[0], monkeypatch, extra_ca=(certs,))
    assert [layer.name for layer in without.assembler.plan(without.cell, without.lock(), without.log)[0].layers][-1] \
        == "smoke"


def test_a_base_without_a_bundle_gets_the_extra_certificates_alone(project: Project, tmp_path: Path) -> None:
    cert = tmp_path / "x.crt"
    data = next(iter(sorted(Path("/etc/ssl/certs").glob("*.pem")))).read_bytes()
    cert.write_bytes(data)
    settings = dataclasses.replace(project.settings, extra_ca=(cert,))
    assembler = Assembler(settings)
    writer = LayerWriter(assembler.layout.blobs, epoch=0)
    writer.add_bytes("etc/other", b"")
    empty = BaseLayers((writer.close(),), (), "empty", "k", "3.11")
    out = LayerWriter(assembler.layout.blobs, epoch=0)
    assembler._ca_layer(empty, out)
    desc = out.close()
    assert project.layer_files(desc)["etc/ssl/certs/ca-certificates.crt"] == data


def test_no_smoke_folder_means_no_smoke_layer(tmp_path: Path, index: tuple[str, dict[str, bytes]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "p", index[0], monkeypatch, smoke_dir=None)
    _serve(index[1], p)
    assert p.assembler.smoke_dir == tmp_path / "p" / "smoke"
    shutil.rmtree(tmp_path / "p" / "smoke")
    image = p.assemble()
    assert [layer.name for layer in image.layers] == ["base", "venv", "wheel:alpha==1.0", "wheel:beta==2.0"]


def test_the_wheels_are_fetched_largest_first(tmp_path: Path, index: tuple[str, dict[str, bytes]],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "p", index[0], monkeypatch, jobs=1)
    _serve(index[1], p)
    steps: list[str] = []
    p.assemble(p.make(("alpha", "beta", "gamma")), steps=steps)
    fetched = [s.split()[1].split("-")[0] for s in steps if s.startswith("fetch ")]
    assert fetched == sorted(("alpha", "beta", "gamma"), key=lambda n: -len(p.data[n]))


def test_os_environment_is_not_in_the_image(project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINMATRIX_SECRET_TEST", "leak")
    image = project.assemble()
    config = project.assembler.layout.blob_path(image.config_digest).read_bytes()
    assert b"leak" not in config and os.environ["PINMATRIX_SECRET_TEST"] == "leak"



# -- the runnable check and a base pinned by digest -------------------------------------------------------

def test_an_image_that_would_not_run_is_refused_before_its_manifest_and_optional_files_are_noted(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.image.assembly.loadcheck import Problem, summary

    seen: dict[str, object] = {}
    fatal = Problem("/opt/venv/bin/prog", "its interpreter /lib/ld.so is not in the image")

    def check(layers: list[tuple[Path, str]], arch: str, env: dict[str, str], scans: Path | None = None) -> list[Problem]:
        seen.update(layers=list(layers), arch=arch, env=dict(env))
        return [Problem("/opt/venv/x.so", "needs libgone.so.1 (searched /usr/lib)", optional="loaded by a plugin"),
                fatal]

    monkeypatch.setattr(assemble_module, "check_layers", check)
    cell = project.make(("alpha", "beta"), env={"LANG": "en_GB.UTF-8", "EXTRA": "1"})
    steps: list[str] = []
    with pytest.raises(AssemblyError) as err:
        project.assemble(cell, steps=steps)
    assert str(err.value) == f"cell {cell.id} ({cell.name}): the image would not run: {summary([fatal])}"
    assert steps[-2:] == ["runnable", "runnable: /opt/venv/x.so needs libgone.so.1: optional, loaded by a plugin"]
    assert project.assembler.layout.image("localhost/rules:one") is None
    assert seen["arch"] == "amd64"
    env = seen["env"]
    assert isinstance(env, dict) and env["LANG"] == "en_GB.UTF-8" and env["EXTRA"] == "1"  # the cell's env wins
    assert env["PATH"].startswith("/opt/venv/bin:") and env["OPTS"] == "a=b"  # split at the first '='

    layers = seen["layers"]
    assert isinstance(layers, list) and len(layers) == 5
    assert layers[0] == (project.assembler.layout.blob_path(base_layer(project.assembler.layout).digest),
                         "application/vnd.oci.image.layer.v1.tar")
    assert all(path.is_file() for path, _ in layers)

    monkeypatch.setattr(assemble_module, "check_layers", lambda layers, arch, env, scans=None: seen.update(env=dict(env)) or [])
    base_only = project.make(("alpha", "beta"), env={"ONLY_BASE": "x"})
    project.assemble(base_only, ref="localhost/rules:base-env")
    assert seen["env"]["LANG"] == "C.UTF-8"  # type: ignore[index]  # from the base's config

    monkeypatch.setattr(assemble_module, "check_layers", lambda *a, **kw: [])
    steps = []
    project.assemble(cell, steps=steps)
    assert steps[-2:] == ["config", "runnable"]
    off = Assembler(dataclasses.replace(project.settings, check_runnable=False))
    monkeypatch.setattr(assemble_module, "check_layers", lambda *a, **kw: [fatal])
    steps = []
    image = project.assemble(cell, ref="localhost/rules:unchecked", steps=steps, assembler=off)
    assert steps[-1] == "config" and image.digest


def test_a_base_pinned_by_digest_is_asked_of_its_registry_with_its_credentials(
        project: Project, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from pinmatrix.cell import BaseSpec
    from pinmatrix.registry.auth import Credentials

    name = f"127.0.0.1:5000/library/debian@sha256:{'a' * 64}"
    cell = project.make(("alpha", "beta"), base=BaseSpec(kind="image", image=name, source_date_epoch=5))
    asked: list[tuple[object, ...]] = []

    def pinned(spec: BaseSpec, platform: str, layout: OCILayout, *, tls_verify: bool, authfile: Path | None):  # noqa: ANN202
        asked.append((spec.image, platform, tls_verify, authfile))
        return BaseLayers((base_layer(layout),), (), f"image:{spec.image}", "k", project.base_python)

    def creds(host: str, repository: str = "") -> Credentials | None:
        asked.append((host, repository))
        return Credentials(username="u", password="p", source=tmp_path / "auth.json", key=host) if host == "127.0.0.1:5000" \
            else None

    monkeypatch.setattr(assemble_module, "pinned_base", pinned)
    monkeypatch.setattr(assemble_module, "find_credentials", creds)
    dry = project.assembler.base(cell, project.log, dry=True)
    assert dry == BaseLayers((), (), name, f"image:{name}", "3.11") and asked == []
    base = project.assembler.base(cell, project.log)
    assert base.name == f"image:{name}"
    assert asked == [("127.0.0.1:5000", "library/debian"), (name, cell.platform, False, tmp_path / "auth.json")]
    asked.clear()
    given = Assembler(dataclasses.replace(project.settings, registry_authfile=tmp_path / "given.json"))
    given.base(cell, project.log)
    assert asked[-1] == (name, cell.platform, False, tmp_path / "given.json")
    asked.clear()
    remote = project.make(("alpha", "beta"), base=BaseSpec(kind="image", image=f"quay.example/debian@sha256:{'a' * 64}"))
    project.assembler.base(remote, project.log)
    assert asked == [("quay.example", "debian"), (remote.base.image, remote.platform, True, None)]
    plain = project.make(("alpha", "beta"), base=BaseSpec(kind="image", image="debian"))
    asked.clear()
    project.assembler.base(plain, project.log)
    assert asked == [("debian", plain.platform, True, None)]  # no registry part: no credentials asked for


# -- the CUDA link and FlashInfer AOT layers (image/assembly/aot_plan.py, image/assembly/crossaot.py stand-ins) ---------------

class AotStandIn:
    """jitcache's and crossaot's entry points as assemble calls them: each records its arguments and its
    builder writes one marker file, so what assemble hands them and does with their layers is seen."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, project: Project, *, skip: str = "", modules=("norm", "rope"),
                 foreign: bool = False) -> None:
        from pinmatrix.image.assembly import aot_plan, crossaot
        from pinmatrix.image.assembly.aot_plan import AotPlan, CrossInputs

        self.calls: list[tuple[object, ...]] = []
        self.plans: list[AotPlan] = []
        self.built: list[str] = []  # the layers whose builder ran
        self.given: list[tuple[str, str, object]] = []  # (entry point, cell id, the plan it was given)
        self.project = project
        cross_base = LayerWriter(project.assembler.layout.blobs, epoch=0)
        cross_base.add_bytes("builder/os-release", b"ID=builder\n")
        gamma = WheelFile("gamma", "3.0", "gamma-3.0-py3-none-any.whl", f"{project.url}/files/gamma-3.0-py3-none-any.whl",
                          project.sha["gamma"], len(project.data["gamma"]))
        self.cross = CrossInputs(types_spec(("beta", "absent")), compiler="/usr/bin/cc | cc 14 | x",
                                 platform="x86_64-manylinux_2_35", base_key="bk", base_layers=(cross_base.close(),),
                                 wheels={"gamma": gamma})

        def plan(cell, shas, base_key, *, epoch, level, cross=None):  # noqa: ANN001, ANN202
            self.calls.append(("plan", cell.id, dict(shas), base_key, epoch, level, cross))
            self.plans.append(AotPlan(None, tuple(modules), "9.0a", link_key=f"link-{level}",
                                      key=f"aot-{level}-{cross is None}", skip=skip, cross=cross, foreign=foreign))
            return self.plans[-1]

        def inputs(cell, aot, entries, choose, base_for):  # noqa: ANN001, ANN202
            self.calls.append(("inputs", [e.name for e in entries]))
            return self.cross

        def marker(name: str):  # noqa: ANN202
            def build(writer: LayerWriter) -> None:
                self.built.append(name)
                writer.add_bytes(f"opt/{name}/marker", name.encode())
            return build

        def link_layer_builder(cell, aot, site_packages):  # noqa: ANN001, ANN202
            self.calls.append(("link", site_packages))
            self.given.append(("link", cell.id, aot))
            return marker("link")

        def aot_layer_builder(cell, aot, site_packages, layers, cache_dir, log, on_step, *, beside):  # noqa: ANN001, ANN202
            self.calls.append(("aot", site_packages, layers, cache_dir, log))
            self.given.append(("aot", cell.id, aot))
            on_step("aot: compiling")

            def build(writer: LayerWriter) -> None:
                with beside():  # what the real builder runs while nvcc compiles
                    marker("aot")(writer)
            return build

        def layer_builder(cell, aot, site_packages, builder_layers, cell_wheels, cache_dir, log, on_step, *, jobs):  # noqa: ANN001, ANN202
            self.given.append(("cross", cell.id, aot))
            on_step("cross: compiling")

            def build(writer: LayerWriter) -> None:
                self.calls.append(("cross", site_packages, builder_layers(), list(cell_wheels()), cache_dir,
                                   log, jobs))
                writer.add_bytes("opt/cross/marker", b"cross")
            return build

        monkeypatch.setattr(aot_plan, "plan", plan)
        monkeypatch.setattr(aot_plan, "link_layer_builder", link_layer_builder)
        monkeypatch.setattr(aot_plan, "aot_layer_builder", aot_layer_builder)
        monkeypatch.setattr(crossaot, "inputs", inputs)
        monkeypatch.setattr(crossaot, "layer_builder", layer_builder)
        def describe(cell, aot):  # noqa: ANN001, ANN202
            self.given.append(("describe", cell.id, aot))
            return f"flashinfer-aot: cross-compiled for {cell.id}"

        monkeypatch.setattr(crossaot, "describe", describe)

    def of(self, kind: str) -> list[tuple[object, ...]]:
        return [c for c in self.calls if c[0] == kind]


def types_spec(libraries_from: tuple[str, ...]) -> object:
    import types

    return types.SimpleNamespace(libraries_from=libraries_from, modules=("norm",))


def test_a_cuda_cell_gets_its_link_layer_and_its_modules_built_in_its_own_root(project: Project,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    aot = AotStandIn(monkeypatch, project)
    project.log.write_text("earlier\n")  # the build log is appended to
    steps: list[str] = []
    image = project.assemble(steps=steps)
    names = [p.name for p in image.layers]
    assert names == ["base", "venv", "wheel:alpha==1.0", "wheel:beta==2.0", "cuda-link", "flashinfer-aot", "smoke"]
    assert [p.key for p in image.layers[4:6]] == [f"link-{DEFAULT_COMPRESSION.key}", f"aot-{DEFAULT_COMPRESSION.key}-True"]
    (planned,) = aot.of("plan")
    assert planned == ("plan", project.cell.id, {"alpha": project.sha["alpha"], "beta": project.sha["beta"]},
                       "base-key", project.cell.base.source_date_epoch, DEFAULT_COMPRESSION.key, None)
    assert aot.of("link") == [("link", SITE)]
    ((_, site, layers, cache_dir, log),) = aot.of("aot")
    layout = project.assembler.layout
    assert (site, cache_dir, log) == (SITE, project.settings.cache_dir, project.log)
    blobs = [(layout.blob_path(p.descriptor.digest), p.descriptor.media_type) for p in image.layers[:4] if p.descriptor]
    assert len(blobs) == 4
    unpacked = sum(p.descriptor.unpacked for p in image.layers[:4] if p.descriptor)
    assert unpacked > 0  # the root's size: where it is unpacked depends on it (scratchplace.py)
    assert layers == RootLayers(blobs[:2], blobs[2:], unpacked)  # base and venv in turn, then the wheels side by side
    assert project.layer_files(image.layers[4].descriptor)["opt/link/marker"] == b"link"  # type: ignore[arg-type]
    assert project.layer_files(image.layers[5].descriptor)["opt/aot/marker"] == b"aot"  # type: ignore[arg-type]
    assert project.log.read_text() == (f"earlier\nflashinfer-aot: built in cell {project.cell.id}'s own root: norm, "
                                       "rope for 9.0a\n")
    assert aot.given == [("link", project.cell.id, aot.plans[-1]), ("aot", project.cell.id, aot.plans[-1])]
    assert "aot: compiling" in steps and aot.built == ["link", "aot"]
    project.assemble(ref="localhost/rules:again")  # another name for the same image: its layers are found
    assert aot.built == ["link", "aot"]
    assert aot.of("inputs") == []


def test_the_runnable_checks_scans_of_the_layers_built_so_far_are_made_while_the_aot_layer_compiles(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    from contextlib import contextmanager

    aot = AotStandIn(monkeypatch, project)
    events: list[tuple[object, ...]] = []

    @contextmanager
    def beside(layers: list[tuple[Path, str]], arch: str, scans: Path) -> Iterator[None]:
        events.append(("scans", list(layers), arch, scans, list(aot.built)))
        yield
        events.append(("joined", list(aot.built)))

    monkeypatch.setattr(assemble_module, "scanned_beside", beside)
    image = project.assemble()
    layout = project.assembler.layout
    before = [(layout.blob_path(p.descriptor.digest), p.descriptor.media_type) for p in image.layers[:5] if p.descriptor]
    assert [p.name for p in image.layers[:5]][-1] == "cuda-link" and len(before) == 5
    # base, venv, the two wheels and the link layer: every layer made before the AOT layer, scanned while it builds
    assert events == [("scans", before, "amd64", project.settings.cache_dir / "runnable", ["link"]),
                      ("joined", ["link", "aot"])]
    off = Assembler(dataclasses.replace(project.settings, check_runnable=False, compression=LayerCompression("gzip", 5)))
    project.assemble(assembler=off, ref="localhost/rules:unchecked")
    assert len(events) == 2 and aot.built == ["link", "aot", "link", "aot"]  # built again, no scans beside it


def test_each_layer_is_handed_over_once_as_soon_as_its_blob_is_in_the_layout_the_aot_layer_after_the_others(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    aot = AotStandIn(monkeypatch, project)
    handed: list[tuple[str, list[str], bool]] = []
    layout = project.assembler.layout

    def on_blob(layer: LayerDescriptor) -> None:
        handed.append((layer.digest, list(aot.built), layout.blob_path(layer.digest).is_file()))

    image = project.assemble(on_blob=on_blob)
    digests = [p.descriptor.digest for p in image.layers if p.descriptor]
    # each once; base and venv first, the wheels in the order their threads finished
    assert sorted(d for d, _, _ in handed) == sorted(digests) and len(handed) == len(digests)
    assert [d for d, _, _ in handed][:2] == digests[:2] and all(there for _, _, there in handed)
    when = {d: built for d, built, _ in handed}
    assert [when[d] for d in digests[:4]] == [[], [], [], []]  # base, venv, wheels: before the link layer
    assert when[digests[4]] == ["link"]  # the link layer before the AOT build starts, so it goes while nvcc runs
    assert when[digests[5]] == when[digests[6]] == ["link", "aot"]
    again: list[LayerDescriptor] = []
    project.assemble(on_blob=again.append)
    assert again == []  # the image is in the layout already: nothing to hand over


def test_the_wheel_layers_merged_by_size_are_not_handed_over_their_merged_layer_is(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = {n: len(wheel_bytes(n, WHEELS[n][0], WHEELS[n][1])) for n in WHEELS}
    p = Project(tmp_path / "p", index[0], monkeypatch, merge_below=max(sizes["alpha"], sizes["beta"]) + 1)
    _serve(index[1], p)
    handed: list[str] = []
    cell = p.make(("alpha", "beta", "gamma"))
    image = p.assemble(cell, on_blob=lambda layer: handed.append(layer.digest))
    layers = {layer.name: layer.descriptor.digest for layer in image.layers if layer.descriptor}
    assert "wheels:alpha==1.0,beta==2.0" in layers
    assert sorted(handed) == sorted(layers.values()) and len(handed) == len(layers)  # the merged one after smoke
    # the parts' own layers are in the layout (the merged one is made of them) but not in the image
    parts = Project(tmp_path / "parts", index[0], monkeypatch).assemble(cell)
    alone = {layer.descriptor.digest for layer in parts.layers if layer.name in ("wheel:alpha==1.0", "wheel:beta==2.0")
             and layer.descriptor}
    assert len(alone) == 2 and all(p.assembler.layout.has_blob(d) for d in alone) and not alone & set(handed)


def test_the_merged_layer_of_small_wheels_is_made_and_handed_over_while_the_aot_layer_compiles(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = {n: len(wheel_bytes(n, WHEELS[n][0], WHEELS[n][1])) for n in WHEELS}
    p = Project(tmp_path / "p", index[0], monkeypatch, merge_below=max(sizes["alpha"], sizes["beta"]) + 1)
    _serve(index[1], p)
    aot = AotStandIn(monkeypatch, p)
    made: list[tuple[str, list[str]]] = []
    real = assemble_module.Assembler._merge_early

    def merge_early(self: Assembler, job: object) -> None:
        real(self, job)
        made.append(("merged", list(aot.built)))

    monkeypatch.setattr(assemble_module.Assembler, "_merge_early", merge_early)
    handed: list[str] = []
    image = p.assemble(p.make(("alpha", "beta", "gamma")), on_blob=lambda layer: handed.append(layer.digest))
    names = [layer.name for layer in image.layers]
    assert names == ["base", "venv", "wheel:gamma==3.0", "wheels:alpha==1.0,beta==2.0", "cuda-link", "flashinfer-aot",
                     "smoke"]  # right after the wheels: what a sibling cell adds comes after it
    assert made == [("merged", ["link", "aot"])]  # joined before the AOT layer's build ended
    by_name = {layer.name: layer.descriptor.digest for layer in image.layers if layer.descriptor}
    assert sorted(handed) == sorted(by_name.values())
    # handed over before the AOT layer, not after the smoke layer as a cell without one has it
    assert handed.index(by_name["wheels:alpha==1.0,beta==2.0"]) < handed.index(by_name["flashinfer-aot"])


def test_a_patched_sibling_shares_every_layer_below_its_patch_which_goes_after_the_aot_layer(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    sizes = {n: len(wheel_bytes(n, WHEELS[n][0], WHEELS[n][1])) for n in WHEELS}
    p = Project(tmp_path / "p", index[0], monkeypatch, merge_below=max(sizes["alpha"], sizes["beta"]) + 1)
    _serve(index[1], p)
    AotStandIn(monkeypatch, p)
    plain = p.assemble(p.make(("alpha", "beta", "gamma")))
    patched = p.assemble(p.make(("alpha", "beta", "gamma"), patches=(_patch(p, package="alpha"),)),
                         ref="localhost/rules:patched")
    assert [layer.name for layer in patched.layers] == [
        "base", "venv", "wheel:gamma==3.0", "wheels:alpha==1.0,beta==2.0", "cuda-link", "flashinfer-aot", "patch:fix",
        "smoke"]
    below = [layer.descriptor for layer in patched.layers[:6]]
    assert below == [layer.descriptor for layer in plain.layers[:6]]  # all shared: only the patch and smoke reapply
    again = p.assemble(p.make(("alpha", "beta", "gamma"), patches=(_patch(p, package="alpha"),)),
                       ref="localhost/rules:patched")
    assert again.cached and [layer.name for layer in again.layers] == [layer.name for layer in patched.layers]
    assert [layer.descriptor for layer in again.layers] == [layer.descriptor for layer in patched.layers]


def test_a_cuda_cell_whose_modules_cannot_be_built_gets_its_link_layer_and_the_reason_in_the_log(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    aot = AotStandIn(monkeypatch, project, skip="no smoke of the cell loads a FlashInfer module")
    project.log.write_text("earlier\n")
    image = project.assemble()
    assert [p.name for p in image.layers][4:] == ["cuda-link", "smoke"]
    assert len(aot.of("link")) == 1 and aot.of("aot") == [] and aot.of("cross") == []
    assert project.log.read_text() == (f"earlier\nflashinfer-aot: none for cell {project.cell.id}: no smoke of the "
                                       "cell loads a FlashInfer module\n")
    none = AotStandIn(monkeypatch, project, modules=())
    assert [p.name for p in project.assembler.plan(project.cell, project.lock(), project.log)[0].layers][4:] == [
        "cuda-link", "smoke"]
    assert none.of("link") == []


def test_a_foreign_cuda_cell_is_planned_again_with_its_cross_inputs_and_built_in_a_builder_root(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    aot = AotStandIn(monkeypatch, project, foreign=True)
    project.log.write_text("earlier\n")
    steps: list[str] = []
    image = project.assemble(steps=steps)
    assert [p.name for p in image.layers][4:] == ["cuda-link", "flashinfer-aot", "smoke"]
    assert image.layers[5].key == f"aot-{DEFAULT_COMPRESSION.key}-False"  # planned again, with the cross inputs in its key
    assert [c[-1] for c in aot.of("plan")] == [None, aot.cross]
    assert aot.of("inputs") == [("inputs", ["alpha", "beta"])]
    ((_, site, builder, cell_wheels, cache_dir, log, jobs),) = aot.of("cross")
    assert (site, cache_dir, log, jobs) == (SITE, project.settings.cache_dir, project.log, 2)
    layout = project.assembler.layout
    venv = image.layers[1].descriptor
    assert venv is not None
    base = aot.cross.base_layers[0]
    assert builder.ordered == [(layout.blob_path(base.digest), base.media_type), (layout.blob_path(venv.digest),
                                                                                   venv.media_type)]
    (gamma,) = builder.side_by_side  # the builder root's one wheel (gamma, laid out for it)
    with open_layer(*gamma) as tar:
        assert f"{SITE}/gamma.py" in {m.name for m in tar}
    beta = project.sha["beta"]  # libraries_from: beta is in the lock, 'absent' is not
    assert cell_wheels == [project.settings.cache_dir / "wheels" / beta[:2] / beta / "beta-2.0-py3-none-any.whl"]
    assert cell_wheels[0].read_bytes() == project.data["beta"]
    assert "flashinfer-aot: cross-compiled for " + project.cell.id in steps
    assert project.log.read_text() == f"earlier\nflashinfer-aot: cross-compiled for {project.cell.id}\n"
    assert project.layer_files(image.layers[5].descriptor)["opt/cross/marker"] == b"cross"  # type: ignore[arg-type]
    final = aot.plans[-1]
    assert aot.given == [("link", project.cell.id, final), ("describe", project.cell.id, final),
                         ("describe", project.cell.id, final), ("cross", project.cell.id, final)]
    assert "cross: compiling" in steps
    # the builder root's gamma layer is the layer any cell holding that wheel has: not laid out again
    steps = []
    project.assemble(project.make(("alpha", "beta", "gamma")), ref="localhost/rules:gamma", steps=steps)
    assert "layer gamma-3.0-py3-none-any.whl" not in steps and "layer alpha-1.0-py3-none-any.whl" not in steps
    for jobs, used in ((1, 1), (4, 2)):  # at most two compilers at once, at least one
        other = Assembler(dataclasses.replace(project.settings, jobs=jobs, compression=LayerCompression("gzip", jobs + 4)))  # new keys: built
        project.assemble(assembler=other, ref=f"localhost/rules:jobs{jobs}")
        assert aot.of("cross")[-1][-1] == used


def test_a_patch_from_a_url_is_fetched_once_into_the_cache_and_laid_out(project: Project,
                                                                         index: tuple[str, dict[str, bytes]]) -> None:
    local = _patch(project, package="alpha")
    text = (project.tmp / "patches" / "fix.patch").read_bytes()
    index[1]["/patches/fix.patch"] = text
    remote = dataclasses.replace(local, source=f"{project.url}/patches/fix.patch")
    cell = project.make(("alpha", "beta"), patches=(remote,))
    image = project.assemble(cell)
    assert (project.settings.cache_dir / "patches" / f"{local.sha256}.patch").read_bytes() == text
    files = project.layer_files(image.layers[4].descriptor)  # type: ignore[arg-type]
    assert files[f"{SITE}/alpha.py"] == b"A = 2\n" + b"A = 1\n" * 1999


def test_a_patch_file_that_holds_no_diff_is_refused_naming_the_patch(project: Project) -> None:
    from pinmatrix.errors import PatchError

    cell = project.make(("alpha", "beta"), patches=(_patch(project, text=b"not a diff\n"),))
    with pytest.raises(PatchError, match=r"^fix: no unified diff found"):
        project.assemble(cell)


def test_a_layer_in_the_cache_needs_no_download_even_when_its_wheel_file_is_gone(project: Project) -> None:
    built = project.assemble()
    shutil.rmtree(project.settings.cache_dir / "wheels")
    image, _ = Assembler(project.settings).plan(project.cell, project.lock(), project.log)
    assert [p.download for p in image.layers[2:4]] == [len(project.data["alpha"]), len(project.data["beta"])]
    (planned,) = describe([image])
    assert planned["download_bytes"] == 0 and all(layer["download"] is None for layer in planned["layers"])  # type: ignore[union-attr]
    assert {k: v for k, v in planned.items() if k != "layers"} == {
        "cell": project.cell.id, "name": project.cell.name, "ref": "", "digest": None, "config": None,
        "inputs": built.inputs, "cached": False, "download_bytes": 0}


def test_the_merged_layer_goes_before_the_patch_smoke_and_ca_layers_or_last(tmp_path: Path,
                                                                           index: tuple[str, dict[str, bytes]],
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "p", index[0], monkeypatch, max_layers=4)
    _serve(index[1], p)
    patched = p.make(("alpha", "beta", "gamma"), patches=(_patch(p, package="alpha"),))
    assert [layer.name for layer in p.assemble(patched).layers] == [
        "base", "venv", "wheels:alpha==1.0,beta==2.0,gamma==3.0", "patch:fix", "smoke"]
    shutil.rmtree(p.tmp / "smoke")
    bare = p.make(("alpha", "beta", "gamma"))
    assert [layer.name for layer in p.assemble(bare, ref="localhost/rules:bare").layers] == [
        "base", "venv", "wheel:gamma==3.0", "wheels:alpha==1.0,beta==2.0"]  # nothing after the wheels: last
    cert = next(iter(sorted(Path("/etc/ssl/certs").glob("*.pem"))))
    ca = Assembler(dataclasses.replace(p.settings, max_layers=3, extra_ca=(cert,), ca_in_images=True))
    assert [layer.name for layer in p.assemble(bare, ref="localhost/rules:ca", assembler=ca).layers] == [
        "base", "venv", "wheels:alpha==1.0,beta==2.0,gamma==3.0", "ca"]


def test_without_compression_every_layer_of_the_cell_is_a_plain_tar(tmp_path: Path,
                                                                    index: tuple[str, dict[str, bytes]],
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "p", index[0], monkeypatch, compression=LayerCompression("none", 0))
    _serve(index[1], p)
    image = p.assemble()
    assert {layer.descriptor.media_type for layer in image.layers[1:]} == {  # type: ignore[union-attr]
        "application/vnd.oci.image.layer.v1.tar"}


def test_a_lock_made_for_another_cell_is_refused_naming_the_cells_lock_file(project: Project) -> None:
    from pinmatrix.image.assembly.lockcheck import LockMismatch

    other = project.make(("alpha",))
    assert other.id != project.cell.id
    with pytest.raises(LockMismatch) as err:
        project.assembler.assemble(project.cell, project.lock(other), "localhost/rules:one", project.log)
    assert str(err.value).startswith(f"cell {project.cell.id} ({project.cell.name}): locks/{project.cell.id}.txt: "
                                     f"the lock was made for cell {other.id}")
    assert project.base_calls == []


def test_every_layer_key_holds_the_cells_python_and_a_base_without_an_epoch_means_epoch_zero(
        project: Project) -> None:
    def keys(cell: Cell) -> dict[str, str]:
        image, _ = project.assembler.plan(cell, project.lock(cell), project.log)
        return {layer.name: layer.key for layer in image.layers}

    patched = project.make(("alpha", "beta"), patches=(_patch(project, package="alpha"),))
    eleven = keys(patched)
    project.base_python = "3.12"
    twelve = keys(dataclasses.replace(patched, python="3.12"))
    for name in ("venv", "wheel:alpha==1.0", "wheel:beta==2.0", "patch:fix"):
        assert twelve[name] != eleven[name], name  # site-packages is another folder
    project.base_python = "3.11"
    no_epoch = dataclasses.replace(project.cell, base=dataclasses.replace(project.cell.base, source_date_epoch=None))
    image = project.assemble(no_epoch, ref="localhost/rules:epoch")
    with open_layer(project.assembler.layout.blob_path(image.layers[1].descriptor.digest),  # type: ignore[union-attr]
                    image.layers[1].descriptor.media_type) as tar:  # type: ignore[union-attr]
        assert {m.mtime for m in tar} == {0}


def rootfs_blob_type(project: Project) -> str:
    """The media type of the base layer the project's stand-in for debian_base writes."""
    return base_layer(OCILayout(project.tmp / "probe-oci")).media_type


def test_a_zstd_cells_debian_base_is_the_default_bases_tar_as_zstd(tmp_path: Path, index: tuple[str, dict[str, bytes]],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    url, pages = index
    gzip_cells = Project(tmp_path / "g", url, monkeypatch)
    zstd_cells = Project(tmp_path / "z", url, monkeypatch, compression=LayerCompression.parse("zstd:3"))
    _serve(pages, gzip_cells)
    _serve(pages, zstd_cells)
    as_gzip, as_zstd = gzip_cells.assemble(), zstd_cells.assemble()
    base_gzip, base_zstd = as_gzip.layers[0].descriptor, as_zstd.layers[0].descriptor
    assert base_gzip is not None and base_zstd is not None
    assert base_gzip.media_type == rootfs_blob_type(gzip_cells) and base_zstd.media_type.endswith("+zstd")
    assert base_zstd.diff_id == base_gzip.diff_id and as_zstd.layers[0].key != as_gzip.layers[0].key
    assert zstd_cells.assembler.layout.has_blob(base_zstd.digest)
