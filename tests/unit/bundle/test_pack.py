"""`pinmatrix bundle`: a cell's wheels or an image's blobs cut into parts with a manifest, and the host's unpack
script (standard library only, run here as `python -I -S` with an empty PYTHONPATH so neither pinmatrix nor any
third-party package is importable), which refuses a missing, tampered or extra part, a wheel whose bytes are not
the lock's and a malformed manifest before anything reaches DEST."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import io
import json
import os
import random
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from mutmut_children import package_script
from pep691 import serve_pages

from conftest import make_cell
from pinmatrix.bundle.image import ImageRequest, bundle_image, read_host_has
from pinmatrix.bundle.model import BundleManifest
from pinmatrix.bundle.pack import BundleError, parse_size
from pinmatrix.bundle.wheels import HostPackages, WheelsRequest, bundle_wheels, read_host_probe, read_pip_list
from pinmatrix.cell import Cell, IndexSpec
from pinmatrix.cli import main
from pinmatrix.index.wheel_index import WheelFetcher
from pinmatrix.oci.layout import MEDIA_TYPE_CONFIG, OCILayout
from pinmatrix.project.smoke_bundle import shipped_file

LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def quiet(_: str) -> None:
    pass


def unbundle_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unbundle_under_test", shipped_file("unbundle.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def host_python(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The unpack step as a bare host runs it: isolated mode, no site-packages, no PYTHONPATH
    (test_pack_host_python.py). Under mutmut a bundle's unbundle.py is a byte copy of the mutated
    shipped/unbundle.py; tests/support/mutmut_children.py starts such a child with site-packages and no mutant
    active, so it runs the original code (its mutants are killed by the in-process tests,
    test_pack_unbundle_*.py)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    env["PYTHONPATH"] = ""
    return subprocess.run([sys.executable, "-I", "-S", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120, check=False)


def unbundle(bundle: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return host_python(str(bundle / "unbundle.py"), str(bundle), *args)


def refusal(proc: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused unpack prints."""
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("unbundle: ")]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


# -- a local JSON simple index serving a few wheels -------------------------------------------------------------

def wheel_bytes(name: str, version: str, payload: bytes = b"", tag: str = "py3-none-any") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED) as zf:
        zf.writestr(f"{name}/__init__.py", f"VERSION = {version!r}\n")
        if payload:
            zf.writestr(f"{name}/data.bin", payload)
        info = f"{name}-{version}.dist-info"
        zf.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: {tag}\n")
        zf.writestr(f"{info}/RECORD", "")
    return buf.getvalue()


@dataclasses.dataclass
class Project:
    cell: Cell
    lock: str
    wheels: dict[str, bytes]  # filename -> bytes
    cache: Path


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    big = random.Random(1).randbytes(20_000)  # spans several parts of 4096 bytes
    files = {
        "alpha-1.0-py3-none-any.whl": wheel_bytes("alpha", "1.0", big),
        "beta-2.0-py3-none-any.whl": wheel_bytes("beta", "2.0"),
        "gamma-3.0-py3-none-any.whl": wheel_bytes("gamma", "3.0"),
        "nvidia_thing-1.0-py3-none-any.whl": wheel_bytes("nvidia_thing", "1.0"),
        "fast-1.0-cp312-cp312-manylinux_2_17_x86_64.whl": wheel_bytes("fast", "1.0", b"312", "cp312-cp312-linux"),
        "fast-1.0-cp313-cp313-manylinux_2_17_x86_64.whl": wheel_bytes("fast", "1.0", b"313", "cp313-cp313-linux"),
    }
    pages: dict[str, bytes] = {}
    by_project: dict[str, list[dict[str, object]]] = {}
    for filename, data in files.items():
        name = filename.split("-")[0].replace("_", "-")
        pages[f"/files/{filename}"] = data
        by_project.setdefault(name, []).append({"filename": filename, "url": f"/files/{filename}",
                                                "hashes": {"sha256": hashlib.sha256(data).hexdigest()}})
    for name, entries in by_project.items():
        pages[f"/simple/{name}/"] = json.dumps({"files": entries}).encode()
    pages["/simple/sdistonly/"] = json.dumps({"files": [{"filename": "sdistonly-1.0.tar.gz", "url": "/x",
                                                          "hashes": {"sha256": "a" * 64}}]}).encode()
    lines = []
    for name, entries in sorted(by_project.items()):
        version = str(entries[0]["filename"]).split("-")[1]
        hashes = " ".join(f"--hash=sha256:{e['hashes']['sha256']}" for e in entries)  # type: ignore[index]
        lines.append(f"{name}=={version} \\\n    {hashes}\n    # via -r requirements.in")
    lock = "# pinmatrix lock for cell 000000000000\n" + "\n".join(lines) + "\n"
    with serve_pages(pages) as base:
        cell = make_cell("demo", ("alpha",), python="3.13")
        cell = dataclasses.replace(cell, indexes=(IndexSpec(name="t", url=f"{base}/simple", default=True),))
        yield Project(cell, lock.replace("000000000000", cell.id), files, tmp_path / "cache")


def make_wheels_bundle(project: Project, out: Path, *, host: HostPackages | None = None, python: str | None = "3.12",
                       exclude: tuple[str, ...] = ("nvidia-*",), lock: str | None = None,
                       part_size: int = 4096, platform: str | None = None) -> BundleManifest:
    request = WheelsRequest(cell=project.cell, lock_text=lock or project.lock, lock_source="locks/x.txt",
                            python=python, platform=platform, host=host, exclude=exclude, part_size=part_size, out=out,
                            cache_dir=project.cache)
    return bundle_wheels(request, WheelFetcher(project.cache / "wheels"), quiet)


# -- wheels -------------------------------------------------------------------------------------------------------

def test_wheels_round_trip_for_the_hosts_python_less_what_the_host_has(project: Project, tmp_path: Path) -> None:
    host = HostPackages({"gamma": "3.0", "beta": "1.9"}, None, "pip-list.json")
    manifest = make_wheels_bundle(project, tmp_path / "b", host=host)
    shipped = [w.filename for w in manifest.wheels or []]
    assert shipped == ["alpha-1.0-py3-none-any.whl", "beta-2.0-py3-none-any.whl",
                       "fast-1.0-cp312-cp312-manylinux_2_17_x86_64.whl"]  # beta: the host's is another version
    assert {(x.name, x.why) for x in manifest.left_out or []} == {
        ("gamma", "the host has it (pip-list.json)"), ("nvidia-thing", "excluded (nvidia-*)")}
    assert manifest.python == "3.12" and manifest.cell_python == "3.13" and "host's CPython 3.12" in (manifest.note or "")
    assert all(w.sha256 == hashlib.sha256(project.wheels[w.filename]).hexdigest() for w in manifest.wheels or [])
    sizes = [p.size for p in manifest.parts]
    assert len(sizes) == -(-manifest.total_size // 4096) > 5 and max(sizes) == 4096 and sum(sizes) == manifest.total_size
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == sorted(
        ["lock.txt", "manifest.json", "unbundle.py", *(p.name for p in manifest.parts)])
    BundleManifest.model_validate_json((tmp_path / "b" / "manifest.json").read_text())

    done = unbundle(tmp_path / "b", "--out", str(tmp_path / "dest"), "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["files"] == 3
    assert "part 1/" in done.stderr and "sha256 ok" in done.stderr  # progress on stderr
    dest = tmp_path / "dest"
    assert sorted(p.name for p in dest.iterdir()) == shipped
    assert all((dest / name).read_bytes() == project.wheels[name] for name in shipped)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".dest")]  # no staging left behind


def test_the_unpacked_folder_is_what_smoke_wheels_installs(project: Project, tmp_path: Path) -> None:
    from pinmatrix.smoke.overlay import build_overlay

    make_wheels_bundle(project, tmp_path / "b", exclude=("fast", "nvidia-*"))
    assert unbundle(tmp_path / "b", "--out", str(tmp_path / "dest")).returncode == 0
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / f"{project.cell.id}.txt").write_text(project.lock)  # the overlay checks wheels against it
    overlay = build_overlay(project.cell, tmp_path / "overlay", wheels_dir=tmp_path / "dest", repo_root=tmp_path,
                            log=quiet)
    assert overlay is not None and sorted(overlay.wheels) == sorted(p.name for p in (tmp_path / "dest").iterdir())
    assert (overlay.site / "alpha" / "data.bin").stat().st_size == 20_000
    assert (overlay.site / "gamma" / "__init__.py").read_text() == "VERSION = '3.0'\n"


def test_the_unpack_step_needs_no_third_party_package(project: Project, tmp_path: Path) -> None:
    for module in ("pinmatrix", "pydantic", "packaging"):
        assert host_python("-c", f"import {module}").returncode != 0, module  # nothing but the standard library
    make_wheels_bundle(project, tmp_path / "b")
    # the script as a copy, run from another folder: it needs nothing beside it
    proc = host_python(str(tmp_path / "b" / "unbundle.py"), "b", "--check", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wheels bundle checked: 4 file(s)")
    assert package_script(tmp_path / "b" / "unbundle.py")  # the package's own bytes (mutmut_children)
    source = shipped_file("unbundle.py").read_text()
    assert "pinmatrix" not in "".join(line for line in source.splitlines() if line.startswith(("import", "from")))


def test_the_host_probe_sets_the_python_and_what_the_host_has(project: Project, tmp_path: Path) -> None:
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"python": "3.13.5", "dists": {"Gamma": "3.0", "numpy": "2.5.2"}}))
    host = read_host_probe(probe)
    assert host.python == "3.13" and host.versions == {"gamma": "3.0", "numpy": "2.5.2"}
    manifest = make_wheels_bundle(project, tmp_path / "b", host=host, python=None)
    assert "fast-1.0-cp313-cp313-manylinux_2_17_x86_64.whl" in [w.filename for w in manifest.wheels or []]
    assert manifest.python == "3.13" and manifest.note == "wheels for the cell's CPython 3.13"
    pip_list = tmp_path / "pip.json"
    pip_list.write_text(json.dumps([{"name": "Beta", "version": "2.0"}, {"name": "x", "version": "1",
                                                                         "editable_project_location": "/src"}]))
    assert read_pip_list(pip_list).versions == {"beta": "2.0", "x": "1"}
    pip_list.write_text(json.dumps([{"name": "beta"}]))
    with pytest.raises(BundleError, match=r"pip.json: not a pip list --format json output: 0.version"):
        read_pip_list(pip_list)


def test_a_locked_package_without_a_wheel_is_one_line_naming_it(project: Project, tmp_path: Path) -> None:
    lock = project.lock + f"sdistonly==1.0 --hash=sha256:{'a' * 64}\n"
    with pytest.raises(BundleError, match=r"sdistonly==1.0: no wheel for cp312 x86_64-manylinux_2_28: no wheel "
                                          r"with a locked hash"):
        make_wheels_bundle(project, tmp_path / "b", lock=lock)
    assert not (tmp_path / "b").exists()
    cell_313_only = project.lock.replace(f"--hash=sha256:{hashlib.sha256(project.wheels['fast-1.0-cp312-cp312-manylinux_2_17_x86_64.whl']).hexdigest()}", "")
    with pytest.raises(BundleError, match=r"fast==1.0: no wheel for cp312 .*other platforms or Pythons"):
        make_wheels_bundle(project, tmp_path / "b", lock=cell_313_only)


def test_an_exclusion_that_matches_nothing_is_said(project: Project, tmp_path: Path) -> None:
    said: list[str] = []
    request = WheelsRequest(cell=project.cell, lock_text=project.lock, lock_source="locks/x.txt", python="3.12",
                            platform=None, host=None, exclude=("Nvidia_*", "tensorflow"), part_size=1 << 20,
                            out=tmp_path / "b", cache_dir=project.cache)
    manifest = bundle_wheels(request, WheelFetcher(project.cache / "wheels"), said.append)
    assert [x.name for x in manifest.left_out or []] == ["nvidia-thing"]  # names compare as canonical names
    assert [line for line in said if line.startswith("note:")] == [
        "note: --exclude tensorflow matches no package of locks/x.txt"]
    assert len(manifest.parts) == 1 and manifest.parts[0].size == manifest.total_size


def test_the_hosts_platform_picks_the_wheels(project: Project, tmp_path: Path) -> None:
    manifest = make_wheels_bundle(project, tmp_path / "b", platform="x86_64-manylinux_2_35")
    assert manifest.platform == "x86_64-manylinux_2_35" and "the cell's is x86_64-manylinux_2_28" in (manifest.note or "")
    with pytest.raises(BundleError, match=r"fast==1.0: no wheel for cp312 aarch64-manylinux_2_28"):
        make_wheels_bundle(project, tmp_path / "c", platform="aarch64-manylinux_2_28")
    with pytest.raises(BundleError, match=r"--platform 'linux_x86_64': expected ARCH-manylinux_2_N"):
        make_wheels_bundle(project, tmp_path / "c", platform="linux_x86_64")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("fault", ["tampered", "truncated", "missing", "extra", "symlink"])
def test_a_bad_part_is_refused_with_one_line_naming_it(project: Project, tmp_path: Path, fault: str) -> None:
    manifest = make_wheels_bundle(project, tmp_path / "b")
    bundle = tmp_path / "b"
    part = bundle / manifest.parts[1].name
    if fault == "tampered":
        data = bytearray(part.read_bytes())
        data[100] ^= 1
        part.write_bytes(bytes(data))
    elif fault == "truncated":
        part.write_bytes(part.read_bytes()[:-1])
    elif fault == "missing":
        part.unlink()
    elif fault == "symlink":
        (tmp_path / "elsewhere.bin").write_bytes(part.read_bytes())
        part.unlink()
        part.symlink_to(tmp_path / "elsewhere.bin")
    else:
        part = bundle / f"part-{len(manifest.parts) + 1:03d}-of-{len(manifest.parts):03d}.bin"
        part.write_bytes(b"more")
    line = refusal(unbundle(bundle, "--out", str(tmp_path / "dest")))
    assert str(part) in line and {"tampered": "tampered part", "truncated": "truncated part", "missing": "missing part",
                                  "extra": "extra part", "symlink": "not a regular file"}[fault] in line, line
    assert not (tmp_path / "dest").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _rewrite_stream(bundle: Path, change) -> None:  # noqa: ANN001
    """Change the reassembled stream and write new parts whose sizes and sha256 the manifest then names: a
    bundle consistent in itself whose files are not the lock's."""
    manifest = json.loads((bundle / "manifest.json").read_text())
    stream = b"".join((bundle / p["name"]).read_bytes() for p in manifest["parts"])
    stream = change(stream, manifest)
    size = manifest["part_size"]
    for p in manifest["parts"]:
        (bundle / p["name"]).unlink()
    chunks = [stream[i:i + size] for i in range(0, len(stream), size)]
    manifest["parts"] = []
    for i, chunk in enumerate(chunks):
        name = f"part-{i + 1:03d}-of-{len(chunks):03d}.bin"
        (bundle / name).write_bytes(chunk)
        manifest["parts"].append({"name": name, "size": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_a_wheel_whose_bytes_differ_from_the_lock_is_refused_before_install(project: Project, tmp_path: Path) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "notes.txt").write_bytes(b"kept as it was")

    def flip(stream: bytes, manifest: dict) -> bytes:  # type: ignore[type-arg]
        wheel = manifest["wheels"][1]
        at = wheel["offset"] + wheel["size"] // 2
        return stream[:at] + bytes([stream[at] ^ 1]) + stream[at + 1:]

    _rewrite_stream(tmp_path / "b", flip)
    line = refusal(unbundle(tmp_path / "b", "--out", str(dest)))
    assert "beta-2.0-py3-none-any.whl: sha256" in line and "nothing installed" in line
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]
    assert (dest / "notes.txt").read_bytes() == b"kept as it was"

    # the manifest made to name the new bytes' sha256: the lock that travels with it still says otherwise
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    stream = b"".join((tmp_path / "b" / p["name"]).read_bytes() for p in manifest["parts"])
    wheel = manifest["wheels"][1]
    wheel["sha256"] = hashlib.sha256(stream[wheel["offset"]:wheel["offset"] + wheel["size"]]).hexdigest()
    (tmp_path / "b" / "manifest.json").write_text(json.dumps(manifest))
    assert "beta-2.0-py3-none-any.whl: not in lock.txt" in refusal(unbundle(tmp_path / "b", "--out", str(dest)))
    (tmp_path / "b" / "lock.txt").write_text(project.lock + "# edited\n")
    assert "lock.txt: sha256" in refusal(unbundle(tmp_path / "b", "--out", str(dest)))
    assert [p.name for p in dest.iterdir()] == ["notes.txt"]


def test_wheels_go_into_a_folder_without_other_wheels(project: Project, tmp_path: Path) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    dest = tmp_path / "dest"
    assert unbundle(tmp_path / "b", "--out", str(dest)).returncode == 0
    assert unbundle(tmp_path / "b", "--out", str(dest)).returncode == 0  # the same bundle again: replaced
    (dest / "old-0.1-py3-none-any.whl").write_bytes(b"an earlier cell's")
    line = refusal(unbundle(tmp_path / "b", "--out", str(dest)))
    assert "holds 1 wheel(s) this bundle does not (old-0.1-py3-none-any.whl)" in line


# -- the manifest, checked on the host ----------------------------------------------------------------------------

@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m["wheels"][0].update(filename="../alpha-1.0-py3-none-any.whl"), "is not a safe file name"),
    (lambda m: m["wheels"][0].update(filename="sub/alpha-1.0-py3-none-any.whl"), "is not a safe file name"),
    (lambda m: m["wheels"][0].update(filename="beta-2.0-py3-none-any.whl"), "is not a wheel of alpha 1.0"),
    (lambda m: m["parts"][0].update(name="../part-001-of-009.bin"), "parts[0].name"),
    (lambda m: m["parts"][0].update(size=True), "expected an integer"),
    (lambda m: m["wheels"][0].update(size=-1), "expected an integer"),
    (lambda m: m.update(surprise=1), "(top).surprise: unknown key"),
    (lambda m: m.pop("lock_sha256"), "a wheels bundle has wheels and lock_sha256"),
    (lambda m: m["wheels"][1].update(offset=0), "offset 0, expected"),
    (lambda m: m.update(format_version=2), "format_version 2"),
    (lambda m: m["wheels"].append(dict(m["wheels"][0])), "is listed twice"),
])
def test_a_malformed_manifest_is_refused(project: Project, tmp_path: Path, edit, message: str) -> None:  # noqa: ANN001
    make_wheels_bundle(project, tmp_path / "b")
    path = tmp_path / "b" / "manifest.json"
    manifest = json.loads(path.read_text())
    edit(manifest)
    path.write_text(json.dumps(manifest))
    line = refusal(unbundle(tmp_path / "b", "--out", str(tmp_path / "dest")))
    assert message in line and "manifest.json" in line, line
    assert not (tmp_path / "dest").exists()


def test_a_huge_or_duplicated_manifest_is_refused(project: Project, tmp_path: Path) -> None:
    make_wheels_bundle(project, tmp_path / "b")
    path = tmp_path / "b" / "manifest.json"
    text = path.read_text()
    path.write_text(text[:-2] + " " * (4 << 20) + "}\n")
    assert "larger than 4194304 bytes" in refusal(unbundle(tmp_path / "b", "--check"))
    path.write_text('{"kind": "wheels", "kind": "image"}')
    assert "key 'kind' appears twice" in refusal(unbundle(tmp_path / "b", "--check"))
    path.write_text('{"total_size": NaN}')
    assert "NaN is not a JSON number" in refusal(unbundle(tmp_path / "b", "--check"))


def test_the_model_and_the_host_check_agree(project: Project, tmp_path: Path) -> None:
    """What pinmatrix writes, the host accepts; the keys either side knows are the same."""
    module = unbundle_module()
    manifest = make_wheels_bundle(project, tmp_path / "b")
    checked = module.check_manifest(json.loads((tmp_path / "b" / "manifest.json").read_text()))
    assert set(checked) == set(BundleManifest.model_fields)
    assert checked["wheels"][0]["sha256"] == (manifest.wheels or [])[0].sha256
    with pytest.raises(module.Refused, match="not a safe file name"):
        module.check_manifest({**json.loads(manifest.model_dump_json()),
                               "wheels": [{**(manifest.wheels or [])[0].model_dump(), "filename": "a/../b.whl"}]})


# -- images -------------------------------------------------------------------------------------------------------

def make_image(layout: OCILayout, ref: str, layers: list[bytes]) -> tuple[str, list[str]]:
    descriptors = [{"mediaType": LAYER, "digest": layout.put_blob(data), "size": len(data)} for data in layers]
    config = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": {
        "io.pinmatrix.cell.id": "0123456789ab"}}, "rootfs": {"type": "layers", "diff_ids": []}}).encode()
    config_digest = layout.put_blob(config)
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": MEDIA_TYPE_CONFIG, "digest": config_digest, "size": len(config)},
                "layers": descriptors}
    digest = layout.put_image(ref, manifest)
    return digest, [digest, config_digest, *(d["digest"] for d in descriptors)]


@pytest.fixture
def images(tmp_path: Path) -> tuple[OCILayout, dict[str, tuple[str, list[str]]]]:
    layout = OCILayout(tmp_path / "oci").init()
    rng = random.Random(2)
    shared = [rng.randbytes(n) for n in (9000, 3000, 12000)]
    plain = make_image(layout, "reg/h200:plain", shared)
    int64 = make_image(layout, "reg/h200:int64", [*shared, rng.randbytes(5000)])
    return layout, {"plain": plain, "int64": int64}


def test_image_round_trip_and_a_second_image_ships_only_what_the_host_lacks(images, tmp_path: Path) -> None:  # noqa: ANN001
    layout, made = images
    plain, plain_blobs = made["plain"]
    manifest = bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b1"), quiet)
    assert [b.digest for b in manifest.blobs or []] == plain_blobs and manifest.cell_id == "0123456789ab"
    assert manifest.image and manifest.image.ref == "reg/h200:plain"
    assert len(manifest.parts) == -(-manifest.total_size // 5000)
    host = tmp_path / "host-oci"
    done = unbundle(tmp_path / "b1", "--out", str(host))
    assert done.returncode == 0, done.stderr
    back = OCILayout(host)
    stored = back.image("reg/h200:plain")
    assert stored is not None and stored.digest == plain
    assert all(back.read_blob(d) == layout.read_blob(d) for d in plain_blobs)

    # the host lists what it has (`ls blobs/sha256`); the int64 image then ships only its own blobs
    listing = tmp_path / "have.txt"
    listing.write_text("\n".join(sorted(p.name for p in (host / "blobs" / "sha256").iterdir())) + "\n")
    int64, int64_blobs = made["int64"]
    second = bundle_image(ImageRequest(layout.root, int64, frozenset(read_host_has(listing)), 5000, tmp_path / "b2"),
                          quiet)
    shipped = [b.digest for b in second.blobs or [] if b.offset is not None]
    assert int64_blobs[1] == plain_blobs[1]  # the same config (labels) in this test
    assert shipped == [int64_blobs[0], int64_blobs[-1]]  # its manifest and its new layer
    assert second.total_size == sum(layout.blob_path(d).stat().st_size for d in shipped)

    line = refusal(unbundle(tmp_path / "b2", "--out", str(tmp_path / "elsewhere")))
    assert f"blob {int64_blobs[1]}" in line and "pass --have" in line
    assert not (tmp_path / "elsewhere").exists()
    done = unbundle(tmp_path / "b2", "--out", str(tmp_path / "elsewhere"), "--have", str(host))
    assert done.returncode == 0, done.stderr
    assert OCILayout(tmp_path / "elsewhere").missing_blobs(OCILayout(tmp_path / "elsewhere").image("reg/h200:int64"))\
        == []
    done = unbundle(tmp_path / "b2", "--out", str(host), "--have", str(host))  # update the host's layout in place
    assert done.returncode == 0 and "4 blob(s) already present" in done.stdout, done.stderr
    assert sorted(i.ref for i in OCILayout(host).images()) == ["reg/h200:int64", "reg/h200:plain"]


def test_a_tampered_blob_is_refused_before_the_layout_changes(images, tmp_path: Path) -> None:  # noqa: ANN001
    layout, made = images
    plain, blobs = made["plain"]
    bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b"), quiet)

    def flip(stream: bytes, manifest: dict) -> bytes:  # type: ignore[type-arg]
        at = manifest["blobs"][-1]["offset"] + 10
        return stream[:at] + bytes([stream[at] ^ 1]) + stream[at + 1:]

    _rewrite_stream(tmp_path / "b", flip)
    line = refusal(unbundle(tmp_path / "b", "--out", str(tmp_path / "host")))
    assert f"blob {blobs[-1]}: sha256" in line
    assert not (tmp_path / "host").exists()
    # a layer of the layout that no longer matches its digest is not shipped either
    path = layout.blob_path(blobs[-1])
    path.write_bytes(b"x" + path.read_bytes()[1:])
    with pytest.raises(BundleError, match=f"blob {blobs[-1]} does not match its digest"):
        bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b"), quiet)


def test_a_layout_whose_index_cannot_be_updated_is_left_as_it_was(images, tmp_path: Path) -> None:  # noqa: ANN001
    layout, made = images
    plain, _ = made["plain"]
    bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b"), quiet)
    host = tmp_path / "host"
    (host / "blobs" / "sha256").mkdir(parents=True)
    (host / "index.json").write_text("{not json")
    assert "index.json: not a readable OCI index" in refusal(unbundle(tmp_path / "b", "--out", str(host)))
    assert list((host / "blobs" / "sha256").iterdir()) == [] and (host / "index.json").read_text() == "{not json"


def test_bundle_image_cli_json_and_one_line_errors(images, tmp_path: Path, capsys) -> None:  # noqa: ANN001
    layout, made = images
    plain, _ = made["plain"]
    out = tmp_path / "b"
    assert main(["bundle", "image", "--layout", str(layout.root), "--digest", plain, "--part-size", "10KB",
                 "--out", str(out), "--json"]) == 0
    captured = capsys.readouterr()
    answer = json.loads(captured.out)
    assert answer["kind"] == "image" and [p["size"] for p in answer["parts"]] == [10_000, 10_000, answer["total_size"]
                                                                                   - 20_000]
    assert "part 1/3" in captured.err
    (out / "stray.txt").unlink(missing_ok=True)
    other = tmp_path / "notabundle"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    for argv, message in [
        (["--part-size", "56 parsecs", "--out", str(out)], "--part-size '56 parsecs'"),
        (["--part-size", "1MB", "--out", str(other)], "is not a bundle folder"),
    ]:
        assert main(["bundle", "image", "--layout", str(layout.root), "--digest", plain, *argv]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    assert (other / "keep.txt").read_text() == "mine"
    assert main(["bundle", "image", "--layout", str(layout.root), "--digest", "sha256:" + "0" * 64,
                 "--part-size", "1MB", "--out", str(out)]) == 2
    assert "no blob sha256:000" in capsys.readouterr().err


def test_part_sizes_and_host_lists() -> None:
    assert parse_size("56MB") == 56_000_000 and parse_size("60MiB") == 60 << 20 and parse_size("4096") == 4096
    for bad in ("0", "-1MB", "1 XB", ""):
        with pytest.raises(BundleError):
            parse_size(bad)


def test_a_host_blob_list_is_digests_only(tmp_path: Path) -> None:
    path = tmp_path / "have.txt"
    path.write_text(f"# from ls\n{'a' * 64}\nsha256:{'b' * 64}\n\n")
    assert read_host_has(path) == {f"sha256:{'a' * 64}", f"sha256:{'b' * 64}"}
    path.write_text(f"{'a' * 64}\n../etc/passwd\n")
    with pytest.raises(BundleError, match=r"have.txt:2: not a sha256 digest"):
        read_host_has(path)


def test_the_host_checks_that_the_blobs_are_the_images_own(images, tmp_path: Path) -> None:  # noqa: ANN001
    layout, made = images
    plain, blobs = made["plain"]
    manifest = bundle_image(ImageRequest(layout.root, plain, frozenset(), 5000, tmp_path / "b"), quiet)
    module = unbundle_module()
    checked = module.check_manifest(json.loads((tmp_path / "b" / "manifest.json").read_text()))
    module.check_image_closure(checked, layout.read_blob)
    short = {**checked, "blobs": [b for b in checked["blobs"] if b["digest"] != blobs[-1]]}
    with pytest.raises(module.Refused, match=f"refers to {blobs[-1]}"):
        module.check_image_closure(short, layout.read_blob)
    stray = {"digest": "sha256:" + "c" * 64, "media_type": LAYER, "size": 1, "offset": None}
    with pytest.raises(module.Refused, match=f"blob sha256:{'c' * 64} is not part of image"):
        module.check_image_closure({**checked, "blobs": [*checked["blobs"], stray]}, layout.read_blob)
    assert manifest.image and manifest.image.digest == plain


def test_bundle_wheels_cli_names_the_cell_or_its_missing_lock(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    import shutil

    from conftest import REPO

    shutil.copy(REPO / "matrix.toml", tmp_path / "matrix.toml")
    for folder in ("patches", "smoke"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__"))
    from pinmatrix.matrix.selection import load

    cell = load(tmp_path / "matrix.toml")[1].cells[0]
    base = ["bundle", "wheels", str(tmp_path / "matrix.toml"), "--part-size", "56MB", "--out", str(tmp_path / "b")]
    assert main([*base, "--cell", "nosuchcell"]) == 2
    assert capsys.readouterr().err.strip() == ("pinmatrix: error: no cell with id or name 'nosuchcell' in "
                                               "matrix.toml (see `pinmatrix cells`)")  # matrix.selection.choose_cells
    assert main([*base, "--cell", cell.id]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"no lock for cell {cell.id} (run `pinmatrix lock -k {cell.id}`)" in err[0], err
    assert not (tmp_path / "b").exists()
