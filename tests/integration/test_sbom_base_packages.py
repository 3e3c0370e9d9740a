"""The SBOM's Debian packages read from a base in a registry (gzip, zstd and plain layers), and promote attaching an
SBOM with the base's packages and the wheels' graph."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
import zstandard
from helpers import components_of
from oci_layout import cell_labels
from promotion import CPU_CELL, _matrix_for, record  # noqa: F401 - the fixture
from sbom_inputs import STATUS, cached_wheel, validate_bom

from pinmatrix.cli import main
from pinmatrix.hashing import sha256_digest
from pinmatrix.imageref import ImageRef
from pinmatrix.oci.compression import MEDIA_TYPES
from pinmatrix.registry.client import OCI_MANIFEST, Manifest, Registry
from pinmatrix.release import attest, debian
from pinmatrix.release.debian import DebianError, base_packages, parse_status
from pinmatrix.results.store import HostFingerprint, ResultsStore


def _layer(files: dict[str, bytes], fmt: str = "gzip") -> tuple[bytes, str]:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    tar_bytes = raw.getvalue()
    blob = gzip.compress(tar_bytes, mtime=0) if fmt == "gzip" else zstandard.ZstdCompressor().compress(tar_bytes) \
        if fmt == "zstd" else tar_bytes
    return blob, sha256_digest(tar_bytes)


def push_with_base(reg: Registry, repository: str, tag: str, labels: dict[str, str],
                   layers: list[tuple[str, dict[str, bytes]]], fmt: str = "gzip") -> str:
    """An image whose layers are (history created_by, files), compressed as ``fmt`` (gzip, zstd, none) says;
    returns its digest."""
    blobs = [(what, *_layer(files, fmt)) for what, files in layers]
    config = json.dumps({
        "architecture": "amd64", "os": "linux", "config": {"Labels": labels},
        "rootfs": {"type": "layers", "diff_ids": [diff for _, _, diff in blobs]},
        "history": [{"created_by": what} for what, _, _ in blobs],
    }, sort_keys=True).encode()
    config_digest = reg.push_blob(repository, config)
    descs = [{"mediaType": MEDIA_TYPES[fmt], "digest": reg.push_blob(repository, data),  # type: ignore[index]
              "size": len(data)} for _, data, _ in blobs]
    body = json.dumps({"schemaVersion": 2, "mediaType": OCI_MANIFEST, "layers": descs,
                       "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest,
                                  "size": len(config)}}, sort_keys=True).encode()
    return reg.put_manifest(repository, tag, Manifest(body, OCI_MANIFEST, sha256_digest(body)))


NEWER = STATUS.replace("Version: 2.41-12", "Version: 2.41-13")


@pytest.mark.registry
def test_base_packages_from_the_registry(oci_registry: str) -> None:  # noqa: F811
    reg = Registry(oci_registry)
    base = "pinmatrix: base debian:trixie (amd64, k)"
    status = debian.STATUS_PATH
    digest = push_with_base(reg, "sbom/base", "t1", {}, [
        (base, {status: STATUS.encode(), "etc/debian_version": b"13.1\n"}),
        (base, {status: NEWER.encode()}),  # the top-most base layer's status wins
        ("pinmatrix: app", {status: b"Package: evil\nStatus: install ok installed\nArchitecture: amd64\nVersion: 6\n"}),
    ])
    found = base_packages(reg, ImageRef.parse(f"{oci_registry}/sbom/base@{digest}"))
    assert [p.purl().to_string() for p in found.packages if p.name == "libc6"] == \
        ["pkg:deb/debian/libc6@2.41-13?arch=amd64"]
    assert "evil" not in {p.name for p in found.packages}  # not a base layer
    assert found.note.startswith("4 Debian packages from var/lib/dpkg/status of 2 base layer(s)")
    # a later base layer's whiteout removes it
    gone = push_with_base(reg, "sbom/base", "t2", {}, [
        (base, {status: STATUS.encode()}), (base, {"var/lib/dpkg/.wh.status": b""})])
    assert base_packages(reg, ImageRef.parse(f"{oci_registry}/sbom/base@{gone}")).packages == ()
    # no base in the history: none, and why
    plain = push_with_base(reg, "sbom/base", "t3", {}, [("pinmatrix: app", {status: STATUS.encode()})])
    none = base_packages(reg, ImageRef.parse(f"{oci_registry}/sbom/base@{plain}"))
    assert none.packages == () and "its history names no base layer" in none.note
    # a malformed status in the base: one line, naming the image and the entry
    bad = push_with_base(reg, "sbom/base", "t4", {}, [(base, {status: b"Package: x y\nStatus: install ok installed\n"
                                                                     b"Architecture: amd64\nVersion: 1\n"})])
    with pytest.raises(DebianError, match=rf"^{oci_registry}/sbom/base@{bad}: var/lib/dpkg/status: entry 1 \('x y'\)"):
        base_packages(reg, ImageRef.parse(f"{oci_registry}/sbom/base@{bad}"))


@pytest.mark.registry
@pytest.mark.parametrize("fmt", ["zstd", "none"])
def test_base_packages_from_a_zstd_or_plain_base_layer(oci_registry: str, fmt: str) -> None:  # noqa: F811
    """A zstd cell's Debian base layer is zstd (rootfs.debian_base_as): its packages are read all the same."""
    reg = Registry(oci_registry)
    digest = push_with_base(reg, "sbom/base", f"fmt-{fmt}", {}, [
        ("pinmatrix: base debian:trixie (amd64, k)", {debian.STATUS_PATH: NEWER.encode()}),
        ("pinmatrix: app", {"opt/venv/x": b"x"})], fmt=fmt)
    found = base_packages(reg, ImageRef.parse(f"{oci_registry}/sbom/base@{digest}"))
    assert [p.purl().to_string() for p in found.packages if p.name == "libc6"] == \
        ["pkg:deb/debian/libc6@2.41-13?arch=amd64"]
    assert found.note.startswith("4 Debian packages from var/lib/dpkg/status of 1 base layer(s)")


@pytest.mark.registry
def test_promote_attaches_an_sbom_with_the_bases_packages_and_the_wheels_graph(  # noqa: F811
        oci_registry: str, tmp_path: Path, capsys) -> None:  # noqa: ANN001, F811
    from pinmatrix.matrix.selection import load

    prefix = f"{oci_registry}/sbomflow"
    matrix = _matrix_for(tmp_path, prefix)
    _, expansion = load(matrix)
    cell = next(c for c in expansion.cells if c.stack == "demo")
    cache = tmp_path / "cache"
    hashes = {"six": cached_wheel(cache / "wheels", "six", cell.pins["six"], []),
              "idna": cached_wheel(cache / "wheels", "idna", cell.pins["idna"], ['six; python_version >= "3"'])}
    lock = "".join(f"{n}=={cell.pins[n]} \\\n    --hash=sha256:{h}\n    # via -r requirements.in\n"
                   for n, h in sorted(hashes.items()))
    (tmp_path / "locks").mkdir()
    (tmp_path / "locks" / f"{cell.id}.txt").write_text(lock)
    labels = {**cell_labels(cell), "io.pinmatrix.lock.sha256": hashlib.sha256(lock.encode()).hexdigest()}
    digest = push_with_base(Registry(oci_registry), f"sbomflow/{cell.stack}", cell.id, labels, [
        ("pinmatrix: base debian:trixie (amd64, k)", {debian.STATUS_PATH: STATUS.encode()}),
        ("pinmatrix: six, idna", {"opt/venv/ok": b""})])
    store = ResultsStore(tmp_path / "results.sqlite")
    for smoke in cell.smokes:
        store.record(record(cell, smoke, "pass", digest, host=HostFingerprint.make(hostname="ci")))
    assert main(["keygen", "--out", str(tmp_path / "keys" / "signer")]) == 0
    rc = main(["promote", str(matrix), "--cell", cell.id, "--results", str(store.path), "--known-good",
               str(tmp_path / "known-good.toml"), "--signing-key", str(tmp_path / "keys" / "signer.key"),
               "--cache-dir", str(cache)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "note:" not in err  # the base's packages and every wheel were found
    promoted = ImageRef.parse(f"{prefix}/known-good/demo").with_digest(digest)
    [sbom] = [a for a in attest.attachments(Registry(oci_registry), promoted) if a.predicate_type == attest.SBOM_PREDICATE]
    bom = json.loads(base64.b64decode(json.loads(sbom.content)["payload"]))["predicate"]
    validate_bom(bom)
    comps = components_of(bom)
    assert {p for p in comps if p.startswith("pkg:deb/")} == {p.purl().to_string() for p in parse_status(STATUS, "s")}
    deps = {d["ref"]: sorted(d.get("dependsOn", [])) for d in bom["dependencies"]}
    assert deps[f"pkg:pypi/idna@{cell.pins['idna']}"] == [f"pkg:pypi/six@{cell.pins['six']}"]  # from its METADATA
    # without the wheels: promote says which are missing, and the via notes stand in
    rc = main(["promote", str(matrix), "--cell", cell.id, "--results", str(store.path), "--known-good",
               str(tmp_path / "known-good-2.toml"), "--signing-key", str(tmp_path / "keys" / "signer.key"),
               "--cache-dir", str(tmp_path / "empty"), "--force"])
    _, err = capsys.readouterr()
    assert rc == 0, err
    assert f"note: cell {cell.id}: 2 of 2 locked wheels are not in {tmp_path / 'empty' / 'wheels'} (idna, six)" in err
