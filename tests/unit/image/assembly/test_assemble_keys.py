"""The layer keys of pinmatrix.image.assembly.assemble, ingredient by ingredient. A layer is found again in the
cache by its key alone, so a key that leaves out something its bytes depend on makes a cell reuse a layer built
for another input: a patch layer of an older patch text, or of the patched package's previous wheel; a layer laid
out by a previous format (LAYOUT_FORMAT, INSTALLER_VERSION, PATCH_FORMAT, MERGE_FORMAT: each bumped when the
bytes for the same inputs change). Also what a plan says of its base (by key, also when the base has no layers
yet), of a wheel whose index declares no size, and what it hands crossaot for a foreign cell (the wheels chosen
for the builder's target, the builder's base made or not as the plan is dry or not). Same fixtures as
test_assemble.py (a base written here, wheels from an index on 127.0.0.1)."""

# ruff: noqa: F811 (the fixtures index and project, imported from test_assemble, are arguments of the tests)
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import ssl
import zipfile
from pathlib import Path

import pytest
from test_assemble import (  # noqa: F401 (index and project are fixtures)
    WHEELS,
    AotStandIn,
    Project,
    _patch,
    _serve,
    index,
    project,
    wheel_bytes,
)

from pinmatrix.cell import BaseSpec, Cell
from pinmatrix.image.assembly import assemble as assemble_module
from pinmatrix.image.assembly import crossaot, merge
from pinmatrix.image.assembly.assemble import Assembler, describe
from pinmatrix.image.assembly.rootfs import BaseLayers
from pinmatrix.index.wheel_index import Target
from pinmatrix.oci.compression import DEFAULT_COMPRESSION, LayerCompression
from pinmatrix.oci.layer import LayerWriter, open_layer

LAYERS = ("venv", "wheel:alpha==1.0", "wheel:beta==2.0", "patch:fix", "smoke", "ca")


def _keys(p: Project, cell: Cell) -> dict[str, str]:
    image, _ = p.assembler.plan(cell, p.lock(cell), p.log)
    return {layer.name: layer.key for layer in image.layers} | {"inputs": image.inputs}


@pytest.fixture
def full(tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> Project:
    """A project whose cell has every kind of layer the plan keys: venv, wheels, a patch, smoke and CA."""
    system = sorted(Path("/etc/ssl/certs").glob("*.pem"))
    if not system:
        pytest.skip("no system certificate to use as an extra one")
    cert = tmp_path / "extra.crt"
    cert.write_bytes(system[0].read_bytes())
    p = Project(tmp_path / "p", index[0], monkeypatch, extra_ca=(cert,), ca_in_images=True)
    _serve(index[1], p)
    p.cell = p.make(("alpha", "beta"), patches=(_patch(p, package="alpha"),))
    return p


@pytest.mark.parametrize(("constant", "shaped"), [
    ("LAYOUT_FORMAT", set(LAYERS)),  # every layer of this module
    ("INSTALLER_VERSION", {"wheel:alpha==1.0", "wheel:beta==2.0"}),  # the RECORD and scripts of a wheel's layer
    ("PATCH_FORMAT", {"patch:fix"}),
])
def test_a_format_version_is_in_the_key_of_every_layer_whose_bytes_it_versions_and_no_other(
        full: Project, monkeypatch: pytest.MonkeyPatch, constant: str, shaped: set[str]) -> None:
    before = _keys(full, full.cell)
    assert set(LAYERS) <= set(before)
    monkeypatch.setattr(assemble_module, constant, "another")  # as after a bump: layers cached before are not reused
    after = _keys(full, full.cell)
    assert {name for name in LAYERS if after[name] != before[name]} == shaped
    assert after["base"] == before["base"] and after["inputs"] != before["inputs"]


def test_a_merge_format_bump_gives_the_merged_layer_a_new_key_and_builds_it_again(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "p", index[0], monkeypatch, max_layers=4)
    _serve(index[1], p)
    cell = p.make(("alpha", "beta", "gamma"))
    first = p.assemble(cell).layers[2]
    assert first.name == "wheels:alpha==1.0,beta==2.0,gamma==3.0" and not first.cached
    monkeypatch.setattr(merge, "MERGE_FORMAT", merge.MERGE_FORMAT + 1)
    second = p.assemble(cell, ref="localhost/rules:merge").layers[2]
    assert second.name == first.name
    assert second.key != first.key and not second.cached  # a merged layer of the old format is not reused


def test_a_patch_layers_key_changes_with_the_patch_text(full: Project) -> None:
    before = _keys(full, full.cell)
    edited = full.make(("alpha", "beta"), patches=(_patch(full, package="alpha", text=(
        b"--- a/alpha.py\n+++ b/alpha.py\n@@ -1,2 +1,2 @@\n-A = 1\n+A = 3\n A = 1\n")),))
    after = _keys(full, edited)
    assert after["patch:fix"] != before["patch:fix"]  # the same id, another text: its layer is made again
    assert {n: after[n] for n in LAYERS if n != "patch:fix"} == {n: before[n] for n in LAYERS if n != "patch:fix"}


def test_a_patch_layers_key_changes_with_the_wheel_it_patches(full: Project, index: tuple[str, dict[str, bytes]]) -> None:
    before = _keys(full, full.cell)
    # the lock now pins another build of alpha (its bytes differ; the patch still applies): the files the patch
    # layer holds are patched from that wheel, so the layer patched from the previous one must not be reused
    files = {**WHEELS["alpha"][1], "alpha/extra.py": b"E = 1\n"}
    full.data["alpha"] = wheel_bytes("alpha", "1.0", files)
    full.sha["alpha"] = hashlib.sha256(full.data["alpha"]).hexdigest()
    _serve(index[1], full)
    full.assembler = Assembler(full.settings)  # the same caches; the index pages read afresh
    after = _keys(full, full.cell)
    assert after["wheel:alpha==1.0"] != before["wheel:alpha==1.0"]
    assert after["patch:fix"] != before["patch:fix"]
    assert after["wheel:beta==2.0"] == before["wheel:beta==2.0"]
    image = full.assemble()
    patched = full.layer_files(image.layers[4].descriptor)  # type: ignore[arg-type]
    assert patched["opt/venv/lib/python3.11/site-packages/alpha.py"] == b"A = 2\n" + b"A = 1\n" * 1999
    # and the same patch on another package's wheel is another layer too
    beta = _keys(full, full.make(("alpha", "beta"), patches=(dataclasses.replace(full.cell.patches[0],
                                                                                  package="beta"),)))
    assert beta["patch:fix"] != after["patch:fix"]


def test_a_patch_layers_key_changes_with_the_epoch_and_the_compression(
        full: Project, tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    before = _keys(full, full.cell)
    later = dataclasses.replace(full.cell, base=dataclasses.replace(
        full.cell.base, source_date_epoch=(full.cell.base.source_date_epoch or 0) + 1))
    assert _keys(full, later)["patch:fix"] != before["patch:fix"]  # every entry's mtime is the epoch
    other = Project(tmp_path / "level", index[0], monkeypatch, compression=LayerCompression("gzip", 6))
    other.cell = other.make(("alpha", "beta"), patches=(_patch(other, package="alpha"),))
    assert other.cell.patches[0].sha256 == full.cell.patches[0].sha256
    assert _keys(other, other.cell)["patch:fix"] != before["patch:fix"]  # the blob's bytes are another gzip's


def test_the_plan_names_the_base_by_its_key_also_when_the_base_has_no_layers_yet(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    (planned,) = describe([project.assembler.plan(project.cell, project.lock(), project.log)[0]])
    assert planned["layers"][0]["name"] == "base" and planned["layers"][0]["key"] == "base-key"  # type: ignore[index]
    given: list[str] = []

    def unbuilt(spec: object, platform: str, layout: object, cache_dir: Path, log: Path, *,
                dry: bool = False) -> BaseLayers:
        # a Debian base a dry plan does not make: no layers yet, only the key of what it will hold
        return BaseLayers((), ("PATH=/usr/bin:/bin",), "debian:test", given[-1], "3.11")

    monkeypatch.setattr(assemble_module, "debian_base", unbuilt)
    inputs = {}
    for key in ("snapshot-one", "snapshot-two"):
        given.append(key)
        image, _ = project.assembler.plan(project.cell, project.lock(), project.log, dry=True)
        assert (image.layers[0].key, image.layers[0].descriptor, image.layers[0].cached) == (key, None, False)
        inputs[key] = image.inputs
    assert inputs["snapshot-one"] != inputs["snapshot-two"]  # another base: another image


def test_a_dry_plan_of_a_cell_on_a_pinned_image_asks_no_registry_and_says_its_base_is_not_there_yet(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_registry(*args: object, **kwargs: object) -> BaseLayers:
        raise AssertionError("a dry plan fetched the base")

    monkeypatch.setattr(assemble_module, "pinned_base", no_registry)
    image_ref = f"quay.example/debian@sha256:{'a' * 64}"
    cell = project.make(("alpha", "beta"), base=BaseSpec(kind="image", image=image_ref))
    image, _ = project.assembler.plan(cell, project.lock(cell), project.log, dry=True)
    base = image.layers[0]
    assert (base.name, base.key, base.descriptor, base.cached) == ("base", f"image:{image_ref}", None, False)
    (planned,) = describe([image])
    assert planned["layers"][0]["cached"] is False  # type: ignore[index]


def test_a_wheel_whose_index_declares_no_size_counts_no_bytes_to_download(project: Project,
                                                                       index: tuple[str, dict[str, bytes]]) -> None:
    page = json.loads(index[1]["/simple/alpha/"])
    del page["files"][0]["size"]
    index[1]["/simple/alpha/"] = json.dumps(page).encode()
    image, _ = project.assembler.plan(project.cell, project.lock(), project.log, dry=True)
    assert [(p.name, p.download) for p in image.layers[2:4]] == [
        ("wheel:alpha==1.0", 0), ("wheel:beta==2.0", len(project.data["beta"]))]
    (planned,) = describe([image])
    assert planned["download_bytes"] == len(project.data["beta"])  # what the indexes declared, no guess


@pytest.mark.parametrize("dry", [True, False])
def test_a_foreign_cell_hands_crossaot_its_plan_a_wheel_chooser_and_a_base_maker_that_keeps_dry(
        project: Project, monkeypatch: pytest.MonkeyPatch, dry: bool) -> None:
    aot = AotStandIn(monkeypatch, project, foreign=True)
    seen: dict[str, object] = {}

    def inputs(cell, plan, entries, choose, base_for):  # noqa: ANN001, ANN202
        seen["cell"], seen["plan"], seen["entries"] = cell, plan, [e.name for e in entries]
        builder = Target(python=cell.python, platform="aarch64-manylinux_2_35")  # the builder's own target
        seen["alpha"] = choose(next(e for e in entries if e.name == "alpha"), builder)
        calls = len(project.base_calls)
        seen["base"] = base_for(dataclasses.replace(cell, platform="aarch64-manylinux_2_35"))
        seen["base calls"] = project.base_calls[calls:]
        seen["base log"] = project.base_logs[-1]
        return aot.cross

    monkeypatch.setattr(crossaot, "inputs", inputs)
    image, _ = project.assembler.plan(project.cell, project.lock(), project.log, dry=dry)
    assert seen["cell"] == project.cell and seen["plan"] is aot.plans[0] and seen["entries"] == ["alpha", "beta"]
    alpha = seen["alpha"]
    assert (alpha.name, alpha.sha256) == ("alpha", project.sha["alpha"])  # type: ignore[attr-defined]
    assert isinstance(seen["base"], BaseLayers) and seen["base"].key == "base-key"  # type: ignore[attr-defined]
    assert seen["base calls"] == [dry] and seen["base log"] == project.log  # a dry plan makes no base
    assert [c[-1] for c in aot.of("plan")] == [None, aot.cross] and image.layers[5].key == f"aot-{DEFAULT_COMPRESSION.key}-False"
    first, again = aot.of("plan")
    assert again[:-1] == first[:-1] == ("plan", project.cell.id, {"alpha": project.sha["alpha"],
                                        "beta": project.sha["beta"]}, "base-key", project.cell.base.source_date_epoch, DEFAULT_COMPRESSION.key)


def test_a_merge_format_bump_assembles_again_an_image_already_under_its_ref(
        tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    p = Project(tmp_path / "p", index[0], monkeypatch, max_layers=4)
    _serve(index[1], p)
    cell = p.make(("alpha", "beta", "gamma"))
    first = p.assemble(cell)
    monkeypatch.setattr(merge, "MERGE_FORMAT", merge.MERGE_FORMAT + 1)
    again = p.assemble(cell)  # the same ref
    assert not again.cached and again.inputs != first.inputs


def test_another_layer_bound_is_another_image_with_the_same_layer_keys(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    """max_layers decides, after the plan, which wheels share a merged layer: a build with another bound must not
    find the first one's image under its ref and call it cached."""
    _base_with(project, monkeypatch)
    plain, _ = project.assembler.plan(project.cell, project.lock(), project.log)
    other = Assembler(dataclasses.replace(project.settings, max_layers=project.settings.max_layers + 1))
    bounded, _ = other.plan(project.cell, project.lock(), project.log)
    assert [p.key for p in bounded.layers] == [p.key for p in plain.layers]
    assert bounded.inputs != plain.inputs


# -- the patch layer's scratch copy ----------------------------------------------------------------------


def _with_mode(data: bytes, name: str, mode: int) -> bytes:
    """The wheel ``data`` with ``name``'s zip mode set to ``mode`` (the bytes and RECORD unchanged)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            if info.filename == name:
                info.external_attr = mode << 16
            dst.writestr(info, src.read(info.filename))
    return out.getvalue()


def test_a_patched_file_of_a_wheel_written_world_writable_stays_not_executable(
        full: Project, index: tuple[str, dict[str, bytes]]) -> None:
    # zips made under umask 000 hold 0o100666 files: not executable to install.py, so not to the patch layer
    full.data["alpha"] = _with_mode(full.data["alpha"], "alpha.py", 0o100666)
    full.sha["alpha"] = hashlib.sha256(full.data["alpha"]).hexdigest()
    _serve(index[1], full)
    full.assembler = Assembler(full.settings)
    image = full.assemble()
    site = "opt/venv/lib/python3.11/site-packages"
    modes = {}
    for planned in image.layers[2], image.layers[4]:  # alpha's wheel layer, the patch layer
        assert planned.descriptor is not None
        with open_layer(full.assembler.layout.blob_path(planned.descriptor.digest), planned.descriptor.media_type) as tar:
            modes[planned.name] = {m.name: m.mode for m in tar if m.isreg()}
    assert modes["wheel:alpha==1.0"][f"{site}/alpha.py"] == modes["patch:fix"][f"{site}/alpha.py"] == 0o644
    assert modes["patch:fix"][f"{site}/alpha/run.sh"] == 0o755


def test_a_patch_of_a_file_two_folders_down_alone_is_laid_out(full: Project) -> None:
    # its scratch copy needs alpha/ and alpha/sub/ made at once: no earlier target of the patch made alpha/
    cell = full.make(("alpha", "beta"), patches=(_patch(full, package="alpha", text=(
        b"--- a/alpha/sub/deep.py\n+++ b/alpha/sub/deep.py\n@@ -1 +1 @@\n-D = 1\n+D = 2\n")),))
    image = full.assemble(cell)
    files = full.layer_files(image.layers[4].descriptor)  # type: ignore[arg-type]
    assert {n: d for n, d in files.items() if d is not None} == {
        "opt/venv/lib/python3.11/site-packages/alpha/sub/deep.py": b"D = 2\n"}


def test_a_key_names_its_parts_contents_not_the_order_a_dict_among_them_was_filled_in() -> None:
    # labels and env are dicts in the image's inputs: the same contents are the same key, other contents another
    key = assemble_module._key
    assert key("image", {"A": "1", "B": "2"}, [1, 2]) == key("image", {"B": "2", "A": "1"}, [1, 2])
    assert key("image", {"A": "1", "B": "2"}, [1, 2]) != key("image", {"A": "1", "B": "3"}, [1, 2])
    assert key("image", [1, 2]) != key("image", [2, 1])  # a list's order is content


# -- the CA layer's key, the image's inputs ---------------------------------------------------------------


def _base_with(p: Project, monkeypatch: pytest.MonkeyPatch, *, key: str = "base-key",
               env: tuple[str, ...] = ("PATH=/usr/bin:/bin",), release: bytes = b"ID=test\n") -> None:
    """The project's base from now on: one layer holding ``release``, ``env``, and ``key``."""
    def base(spec: object, platform: str, layout: object, cache_dir: Path, log: Path, *,
             dry: bool = False) -> BaseLayers:
        writer = LayerWriter(p.assembler.layout.blobs, epoch=0)
        writer.add_bytes("etc/ssl/certs/ca-certificates.crt", b"BUNDLE\n")
        writer.add_bytes("etc/os-release", release)
        return BaseLayers((writer.close(),), env, "debian:test", key, "3.11")

    monkeypatch.setattr(assemble_module, "debian_base", base)


def test_the_ca_layers_key_changes_with_the_base_whose_bundle_it_extends_the_epoch_and_the_compression(
        full: Project, tmp_path: Path, index: tuple[str, dict[str, bytes]], monkeypatch: pytest.MonkeyPatch) -> None:
    before = _keys(full, full.cell)["ca"]
    _base_with(full, monkeypatch, key="another-base")  # its CA bundle may be another: the layer is made again
    assert _keys(full, full.cell)["ca"] != before
    _base_with(full, monkeypatch)
    assert _keys(full, full.cell)["ca"] == before
    later = dataclasses.replace(full.cell, base=dataclasses.replace(
        full.cell.base, source_date_epoch=(full.cell.base.source_date_epoch or 0) + 1))
    assert _keys(full, later)["ca"] != before
    level = Assembler(dataclasses.replace(full.settings, compression=LayerCompression("gzip", 6)))
    image, _ = level.plan(full.cell, full.lock(), full.log)
    assert image.layers[-1].name == "ca" and image.layers[-1].key != before


def test_the_images_inputs_change_with_its_labels_env_base_env_and_base_layers(
        project: Project, monkeypatch: pytest.MonkeyPatch) -> None:
    def inputs(lock: str | None = None) -> str:
        return project.assembler.plan(project.cell, lock or project.lock(), project.log)[0].inputs

    _base_with(project, monkeypatch)
    plain = inputs()
    # the lock's own bytes are a label (its sha256): a lock rewritten with the same pins is another image
    assert inputs(project.lock() + "# regenerated\n") != plain
    real_env = assemble_module.cell_env
    monkeypatch.setattr(assemble_module, "cell_env", lambda cell: {**real_env(cell), "EXTRA": "1"})
    assert inputs() != plain  # the config's Env
    monkeypatch.setattr(assemble_module, "cell_env", real_env)
    assert inputs() == plain
    _base_with(project, monkeypatch, env=("PATH=/usr/bin:/bin", "LANG=C.UTF-8"))
    assert inputs() != plain  # the base's env is merged into the config's
    _base_with(project, monkeypatch, release=b"ID=rebuilt\n")  # the same key, other layer bytes
    assert inputs() != plain  # the manifest names the base's layers by digest


def test_a_smoke_folder_given_in_the_settings_is_the_one_laid_out(project: Project, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere-smoke"
    elsewhere.mkdir()
    (elsewhere / "catalogue.toml").write_bytes(b"# the other smokes\n")
    assembler = Assembler(dataclasses.replace(project.settings, smoke_dir=elsewhere))
    assert assembler.smoke_dir == elsewhere
    image = project.assemble(assembler=assembler)
    files = project.layer_files(image.layers[-1].descriptor)  # type: ignore[arg-type]
    assert image.layers[-1].name == "smoke" and files["pinmatrix/smoke/catalogue.toml"] == b"# the other smokes\n"


def test_the_fetcher_trusts_the_extra_certificates(project: Project, tmp_path: Path) -> None:
    from certificates import ca_certificate

    cert = tmp_path / "private.crt"
    cert.write_text(ca_certificate())
    assembler = Assembler(dataclasses.replace(project.settings, extra_ca=(cert,)))
    trusted = assembler.fetcher.context.get_ca_certs(binary_form=True)
    assert ssl.PEM_cert_to_DER_cert(cert.read_text()) in trusted  # an index behind this CA is reachable


def test_a_debian_base_is_asked_for_the_cells_spec_platform_cache_and_log(project: Project,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[object, ...]] = []
    made = project._base

    def base(spec: object, platform: str, layout: object, cache_dir: Path, log: Path, *,
             dry: bool = False) -> BaseLayers:
        asked.append((spec, platform, layout, cache_dir, log, dry))
        return made(spec, platform, layout, cache_dir, log, dry=dry)  # type: ignore[arg-type]

    monkeypatch.setattr(assemble_module, "debian_base", base)
    aarch64 = dataclasses.replace(project.cell, platform="aarch64-manylinux_2_35")
    project.assembler.base(aarch64, project.log, dry=True)
    assert asked == [(aarch64.base, "aarch64-manylinux_2_35", project.assembler.layout, project.settings.cache_dir,
                      project.log, True)]


def test_a_cache_folder_whose_parents_do_not_exist_yet_is_made(project: Project) -> None:
    deep = project.tmp / "new" / "deeper" / "cache"
    assembler = Assembler(dataclasses.replace(project.settings, cache_dir=deep))
    image = project.assemble(assembler=assembler)  # made by the first write under it, before the disk check
    assert image.digest and (deep / "layers").is_dir()
