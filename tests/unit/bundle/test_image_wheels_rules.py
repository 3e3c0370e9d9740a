"""The build side of image and wheels bundles (bundle/image.py, bundle/wheels.py), rule by rule: the host's blob
list and package files read bounded with one exact line per fault, which blobs an image needs (an index's
manifests, each blob once, at most MAX_BLOBS), the cell and lock its config labels name only when well formed,
the interpreter a wheels bundle is for, and the lines said while packing."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from test_pack import Project, images, make_wheels_bundle, project, quiet  # noqa: F401

import pinmatrix.bundle.image as image_module
from pinmatrix.bundle.image import ImageRequest, bundle_image, image_blobs, read_host_has
from pinmatrix.bundle.pack import BundleError
from pinmatrix.bundle.wheels import HostPackages, WheelsRequest, bundle_wheels, plan, read_host_probe, read_pip_list
from pinmatrix.index.wheel_index import WheelFetcher
from pinmatrix.oci.layout import MEDIA_TYPE_CONFIG, OCILayout
from pinmatrix.project.lockfile import parse_lock

LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX = "application/vnd.oci.image.index.v1+json"
HEX = "ab" * 32


def _bundle_error(call: Any, *args: Any) -> str:
    with pytest.raises(BundleError) as err:
        call(*args)
    return str(err.value)


def _layout(tmp_path: Path) -> OCILayout:
    return OCILayout(tmp_path / "oci").init()


def _config(layout: OCILayout, labels: dict[str, Any] | None = None) -> dict[str, Any]:
    body = json.dumps({"architecture": "amd64", "os": "linux", "config": {"Labels": labels or {}}}).encode()
    return {"mediaType": MEDIA_TYPE_CONFIG, "digest": layout.put_blob(body), "size": len(body)}


def _layers(layout: OCILayout, *data: bytes) -> list[dict[str, Any]]:
    return [{"mediaType": LAYER, "digest": layout.put_blob(d), "size": len(d)} for d in data]


def _doc(layout: OCILayout, doc: dict[str, Any]) -> dict[str, Any]:
    body = json.dumps(doc).encode()
    return {"mediaType": doc.get("mediaType", OCI_MANIFEST), "digest": layout.put_blob(body), "size": len(body)}


def _index_entry(layout: OCILayout, entry: dict[str, Any]) -> None:
    (layout.root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [entry]}))


# ------------------------------------------------------------------------------------------- host blob list


def test_the_hosts_blob_list_takes_a_comment_after_a_digest_and_names_a_bad_line(tmp_path: Path) -> None:
    path = tmp_path / "have.txt"
    path.write_text(f"sha256:{HEX}  # one # two\n{'cd' * 32}\n\n# only a comment\n")
    assert read_host_has(path) == {f"sha256:{HEX}", f"sha256:{'cd' * 32}"}
    path.write_bytes(b"x" * 100 + b"\n")
    assert _bundle_error(read_host_has, path) == f"{path}:1: not a sha256 digest: {'x' * 80!r}"
    path.write_bytes(f"sha256:{HEX}\nbad \xff\n".encode("latin-1"))
    replaced = "bad \ufffd"
    assert _bundle_error(read_host_has, path) == f"{path}:2: not a sha256 digest: {replaced!r}"
    path.write_bytes(b"\n" * ((16 << 20) + 1))
    assert _bundle_error(read_host_has, path) == f"{path}: larger than {16 << 20} bytes: not the host's blob list"


# ---------------------------------------------------------------------------------------- an image's blobs


def test_a_digest_must_be_sha256_and_a_missing_manifest_is_named(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    assert _bundle_error(image_blobs, layout, HEX) == f"--digest {HEX!r}: expected sha256:<64 hex digits>"
    assert _bundle_error(image_blobs, layout, f"sha256:{HEX}") == (
        f"{layout.root}: no blob sha256:{HEX} (the image's manifest digest, as `pinmatrix build --json` prints it)")


@pytest.mark.parametrize("bad", [{"digest": 1}, {"size": "1"}, {"mediaType": None}])
def test_a_descriptor_without_digest_size_or_media_type_is_named_by_its_document(tmp_path: Path,
                                                                                 bad: dict[str, Any]) -> None:
    layout = _layout(tmp_path)
    child = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _config(layout),
                          "layers": [{**_layers(layout, b"l1")[0], **bad}]})
    index = _doc(layout, {"schemaVersion": 2, "mediaType": INDEX, "manifests": [child]})
    assert _bundle_error(image_blobs, layout, index["digest"]) == (
        f"{child['digest']}: a descriptor without digest, size and mediaType")


def test_the_documents_read_are_named_as_what_they_are(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    listed = layout.put_blob(b"[1]")
    index = _doc(layout, {"schemaVersion": 2, "mediaType": INDEX,
                          "manifests": [{"mediaType": OCI_MANIFEST, "digest": listed, "size": 3}]})
    with pytest.raises(Exception, match=rf"image manifest or index {listed} is not a JSON object$"):
        image_blobs(layout, index["digest"])
    config = {"mediaType": MEDIA_TYPE_CONFIG, "digest": listed, "size": 3}
    manifest = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": []})
    with pytest.raises(Exception, match=rf": config {listed} is not a JSON object$"):
        image_blobs(layout, manifest["digest"])


def test_an_index_lists_every_manifests_blobs_once_whatever_else_it_names(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    config = _config(layout, {"io.pinmatrix.cell.id": "0123456789ab", "io.pinmatrix.lock.sha256": "c" * 64})
    l1, l2 = _layers(layout, b"one", b"two")
    first = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [l1, l1, l2]})
    other = {"mediaType": "application/vnd.example.other+json", "digest": layout.put_blob(b"{}"), "size": 2}
    second = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [l2]})
    index = _doc(layout, {"schemaVersion": 2, "mediaType": INDEX, "manifests": [other, first, second]})
    _index_entry(layout, {"digest": index["digest"], "size": index["size"],
                          "annotations": {"org.opencontainers.image.ref.name": 5}})
    image, blobs, labels = image_blobs(layout, index["digest"])
    assert (image.media_type, image.ref) == (INDEX, None)  # the index's own type when its entry names none
    assert [b[0] for b in blobs] == [index["digest"], other["digest"], first["digest"], second["digest"],
                                     config["digest"], l1["digest"], l2["digest"]]
    assert labels == ("0123456789ab", "c" * 64)


def test_the_index_entrys_media_type_wins_and_a_manifest_without_one_is_oci(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    manifest = _doc(layout, {"schemaVersion": 2, "config": _config(layout), "layers": _layers(layout, b"x")})
    _index_entry(layout, {"mediaType": DOCKER_MANIFEST, "digest": manifest["digest"], "size": manifest["size"]})
    assert image_blobs(layout, manifest["digest"])[0].media_type == DOCKER_MANIFEST
    _index_entry(layout, {"digest": manifest["digest"], "size": manifest["size"]})
    assert image_blobs(layout, manifest["digest"])[0].media_type == OCI_MANIFEST


@pytest.mark.parametrize("labels", [{}, {"io.pinmatrix.cell.id": "XYZ", "io.pinmatrix.lock.sha256": "short"},
                                    {"io.pinmatrix.cell.id": 5, "io.pinmatrix.lock.sha256": 7}])
def test_labels_that_name_no_cell_or_lock_are_none(tmp_path: Path, labels: dict[str, Any]) -> None:
    layout = _layout(tmp_path)
    manifest = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _config(layout, labels),
                             "layers": _layers(layout, b"not json", b"nor this")})
    assert image_blobs(layout, manifest["digest"])[2] == (None, None)


def test_at_most_max_blobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    layout = _layout(tmp_path)
    monkeypatch.setattr(image_module, "MAX_BLOBS", 3)
    fits = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _config(layout),
                         "layers": _layers(layout, b"a")})
    assert len(image_blobs(layout, fits["digest"])[1]) == 3
    over = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": _config(layout),
                         "layers": _layers(layout, b"a", b"b")})
    assert _bundle_error(image_blobs, layout, over["digest"]) == f"{over['digest']}: more than 3 blobs"


def test_bundle_image_says_what_it_ships_and_names_each_fault(tmp_path: Path) -> None:
    layout = _layout(tmp_path)
    l1, l2 = _layers(layout, b"1" * 100, b"2" * 50)
    config = _config(layout)
    manifest = _doc(layout, {"schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [l1, l2]})
    _index_entry(layout, {**manifest, "annotations": {"org.opencontainers.image.ref.name": "reg/x:1"}})
    lines: list[str] = []
    request = ImageRequest(layout=layout.root, digest=manifest["digest"], host_has=frozenset({l1["digest"]}),
                           part_size=4096, out=tmp_path / "b")
    bundle_image(request, lines.append)
    shipped = manifest["size"] + config["size"] + 50
    assert lines[0] == f"image {manifest['digest']}: 4 blob(s), 3 shipped ({shipped} bytes), 1 the host has"
    missing = dataclasses.replace(request, out=tmp_path / "c", host_has=frozenset())
    (layout.root / "blobs" / "sha256" / l1["digest"][7:]).unlink()
    assert _bundle_error(bundle_image, missing, quiet) == (
        f"{layout.root}: blob {l1['digest']} of image {manifest['digest']} is missing")
    listed = layout.put_blob(b"[1]")
    not_json = dataclasses.replace(missing, digest=listed, out=tmp_path / "d")
    assert _bundle_error(bundle_image, not_json, quiet) == (
        f"{layout.root}: image manifest or index {listed} is not a JSON object")
    (layout.root / "oci-layout").unlink()
    assert _bundle_error(bundle_image, dataclasses.replace(missing, out=tmp_path / "e"), quiet) == (
        f"{layout.root}: not an OCI layout (no oci-layout file)")


# ------------------------------------------------------------------------------------------------- wheels


def test_the_hosts_package_files_are_bounded_and_name_their_source(tmp_path: Path) -> None:
    pip = tmp_path / "pip.json"
    pip.write_text(json.dumps([{"name": "Foo_Bar", "version": "1.0"}]) + " " * (2 << 20))  # past 1 MiB: still read
    assert read_pip_list(pip) == HostPackages({"foo-bar": "1.0"}, None, "pip.json (pip list)")
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"python": "CPython", "dists": {"A.B": "2"}}) + " " * (2 << 20))
    assert read_host_probe(probe) == HostPackages({"a-b": "2"}, None, "probe.json (host probe)")
    for path, what in ((pip, "a pip list --format json output"), (probe, "a host probe")):
        path.write_bytes(b" " * ((16 << 20) + 1))
        assert _bundle_error(read_pip_list if path == pip else read_host_probe, path) == (
            f"{path}: {(16 << 20) + 1} bytes is more than {what} may have ({16 << 20} bytes)")


def test_the_host_has_a_package_at_the_same_version_however_written(tmp_path: Path) -> None:
    lock = parse_lock("alpha==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\nbeta==weird \\\n    --hash=sha256:"
                      + "b" * 64 + "\n", "locks/x.txt")
    keep, left = plan(lock.entries, (), HostPackages({"alpha": "1.0.0", "beta": "weird"}, None, "h"))
    assert (keep, [x.name for x in left]) == ([], ["alpha", "beta"])
    keep, left = plan(lock.entries, (), HostPackages({"alpha": "1.1", "beta": "other"}, None, "h"))
    assert ([e.name for e in keep], left) == (["alpha", "beta"], [])


def test_the_python_is_the_requests_else_the_hosts_else_the_cells(project: Project, tmp_path: Path) -> None:  # noqa: F811
    assert make_wheels_bundle(project, tmp_path / "a", python=None).python == "3.13"
    host = HostPackages({}, "3.12", "probe.json (host probe)")
    assert make_wheels_bundle(project, tmp_path / "b", python=None, host=host).python == "3.12"
    with pytest.raises(BundleError) as err:
        make_wheels_bundle(project, tmp_path / "c", python="2.7")
    assert str(err.value) == "--python '2.7': expected a CPython version such as 3.12"


def test_a_lock_of_another_cell_is_named(project: Project, tmp_path: Path) -> None:  # noqa: F811
    other = project.lock.replace(project.cell.id, "111111111111")
    with pytest.raises(BundleError) as err:
        make_wheels_bundle(project, tmp_path / "a", lock=other)
    assert str(err.value) == f"locks/x.txt: a lock for cell 111111111111, not {project.cell.id}"
    with pytest.raises(Exception, match="^locks/x.txt: cannot read requirement '@@@"):
        make_wheels_bundle(project, tmp_path / "b", lock="@@@ \\\n    --hash=sha256:" + "a" * 64 + "\n")


def test_every_wheel_problem_is_counted_and_the_first_three_more_named(project: Project, tmp_path: Path) -> None:  # noqa: F811
    names = ("alpha", "beta", "gamma", "fast", "nvidia-thing")
    lock = project.lock
    for name in names:  # each package's hashes replaced by one no wheel has
        start = lock.index(f"{name}==")
        end = lock.index("# via", start)
        lock = lock[:start] + f"{name}==1.0 \\\n    --hash=sha256:{'0' * 64}\n    " + lock[end:]
    with pytest.raises(BundleError) as err:
        make_wheels_bundle(project, tmp_path / "a", lock=lock, exclude=())
    line = str(err.value)
    assert line.startswith(f"cell {project.cell.id}: ") and " (and 4 more: " in line and line.endswith(")")
    assert line.count("; ") == 2  # three of the four more named
    lock_two = lock.replace(f"gamma==1.0 \\\n    --hash=sha256:{'0' * 64}", "gamma==3.0 \\\n    --hash=sha256:"
                            + hashlib.sha256(project.wheels["gamma-3.0-py3-none-any.whl"]).hexdigest())
    with pytest.raises(BundleError) as err:
        make_wheels_bundle(project, tmp_path / "b", lock=lock_two, exclude=("alpha", "beta", "fast"))
    one = str(err.value)
    assert " (and " not in one
    lock_three = lock_two.replace(f"beta==1.0 \\\n    --hash=sha256:{'0' * 64}", "beta==2.0 \\\n    --hash=sha256:"
                                  + hashlib.sha256(project.wheels["beta-2.0-py3-none-any.whl"]).hexdigest())
    with pytest.raises(BundleError) as err:
        make_wheels_bundle(project, tmp_path / "c", lock=lock_three, exclude=("beta", "fast"))
    two = str(err.value)
    first = two[len(f"cell {project.cell.id}: "):two.index(" (and 1 more: ")]
    assert first.startswith("alpha==1.0: ") and two.endswith(")") and "nvidia-thing==1.0: " in two
    with pytest.raises(BundleError) as err:
        make_wheels_bundle(project, tmp_path / "d", lock=lock_three, exclude=("beta", "fast", "nvidia-*"))
    assert str(err.value) == f"cell {project.cell.id}: {first}"  # the same first problem, alone: no "more"


def test_the_lines_said_count_each_wheel_chosen_then_fetched_or_cached(project: Project, tmp_path: Path) -> None:  # noqa: F811
    make_wheels_bundle(project, tmp_path / "a", exclude=("nvidia-*", "fast", "gamma"))  # alpha and beta cached
    lines: list[str] = []
    request = WheelsRequest(cell=project.cell, lock_text=project.lock, lock_source="locks/x.txt", python="3.12",
                            platform=None, host=None, exclude=("nvidia-*", "fast"), part_size=4096,
                            out=tmp_path / "b", cache_dir=project.cache)
    bundle_wheels(request, WheelFetcher(project.cache / "wheels"), lines.append)
    chosen = [line for line in lines if line.startswith("wheel ")]
    assert chosen == ["wheel 1/3 alpha-1.0-py3-none-any.whl", "wheel 2/3 beta-2.0-py3-none-any.whl",
                      "wheel 3/3 gamma-3.0-py3-none-any.whl"]
    said = [line.split(":")[0] for line in lines if line.startswith(("cached ", "fetched "))]
    assert said == ["cached 1/3 alpha-1.0-py3-none-any.whl", "cached 2/3 beta-2.0-py3-none-any.whl",
                    "fetched 3/3 gamma-3.0-py3-none-any.whl"]


def test_the_note_says_whose_python_and_platform_the_wheels_are_for(project: Project, tmp_path: Path) -> None:  # noqa: F811
    note = make_wheels_bundle(project, tmp_path / "a", platform="x86_64-manylinux_2_17").note
    assert note == ("wheels chosen for the host's CPython 3.12 (cp312); the cell's Python is 3.13; for the host's "
                    f"platform x86_64-manylinux_2_17, the cell's is {project.cell.platform}")


def test_a_bundle_that_fails_at_the_end_leaves_no_staging_folder(project: Project, images: Any,  # noqa: F811
                                                                 tmp_path: Path) -> None:
    class Broken:
        def sign(self, _payload: bytes) -> None:
            raise RuntimeError("no key")

    request = WheelsRequest(cell=project.cell, lock_text=project.lock, lock_source="locks/x.txt", python="3.12",
                            platform=None, host=None, exclude=("nvidia-*", "fast"), part_size=4096,
                            out=tmp_path / "w", cache_dir=project.cache, signer=Broken())  # type: ignore[arg-type]
    with pytest.raises(Exception):  # noqa: B017 - whatever the signer raises
        bundle_wheels(request, WheelFetcher(project.cache / "wheels"), quiet)
    layout, made = images
    with pytest.raises(Exception):  # noqa: B017
        bundle_image(ImageRequest(layout.root, made["plain"][0], frozenset(), 5000, tmp_path / "i",
                                  signer=Broken()), quiet)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_a_remembered_choice_whose_hash_the_lock_does_not_name_is_refused(project: Project, tmp_path: Path) -> None:  # noqa: F811
    make_wheels_bundle(project, tmp_path / "a")
    for choice in (project.cache / "wheel-choices").iterdir():  # the builder's cache, changed behind its back
        data = json.loads(choice.read_text())
        choice.write_text(json.dumps({**data, "sha256": "0" * 64}))
    with pytest.raises(BundleError) as err:
        make_wheels_bundle(project, tmp_path / "b")
    wheels = ["alpha-1.0-py3-none-any.whl", "beta-2.0-py3-none-any.whl",
              "fast-1.0-cp312-cp312-manylinux_2_17_x86_64.whl", "gamma-3.0-py3-none-any.whl"]
    problems = [f"{w.split('-')[0]}=={w.split('-')[1]}: chosen wheel {w} is not one of the lock's hashes" for w in wheels]
    assert str(err.value) == f"cell {project.cell.id}: {problems[0]} (and 3 more: {'; '.join(problems[1:])})"
