"""pinmatrix.release.attest.sbom_inputs rule by rule, against an honest registry in memory: the lock is read first
(a bad one is refused naming its source, before the registry is asked anything), the base's Debian packages come
from the image's base layers (or a note says why there are none), the Requires-Dist of every locked wheel found
in the build's cache, and a note naming the locked wheels that are not there (the first five, sorted)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest
from memregistry import MemoryRegistry, serve_registry
from sbom_inputs import STATUS, cached_wheel
from test_sbom import REQUESTS

from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.registry.client import OCI_MANIFEST, Registry
from pinmatrix.release import attest

REPO = "promoted/demo"
GZIP_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"


def _status_layer() -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        data = STATUS.encode()
        info = tarfile.TarInfo("var/lib/dpkg/status")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _image(reg: MemoryRegistry, *, base: bool) -> ImageRef:
    layer = _status_layer()
    history = [{"created_by": "pinmatrix: base debian:trixie (amd64, k)" if base else "pinmatrix: torch"}]
    config = json.dumps({"config": {"Labels": {}}, "history": history}).encode()
    manifest = {"schemaVersion": 2, "mediaType": OCI_MANIFEST,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           "digest": reg.add_blob(REPO, config), "size": len(config)},
                "layers": [{"mediaType": GZIP_LAYER, "digest": reg.add_blob(REPO, layer), "size": len(layer)}]}
    return ImageRef(reg.address, REPO, None, reg.add_manifest(REPO, json.dumps(manifest).encode(), OCI_MANIFEST))


def _lock(names: list[str], hashes: dict[str, str]) -> str:
    lines = ["# pinmatrix lock"]
    for name in names:
        digest = hashes.get(name) or hashlib.sha256(name.encode()).hexdigest()
        lines += [f"{name}==1.0 \\", f"    --hash=sha256:{digest}", "    # via -r requirements.in"]
    return "\n".join(lines) + "\n"


def test_the_bases_packages_and_the_cached_wheels_requirements_with_no_note(tmp_path: Path) -> None:
    cache = tmp_path / "wheels"
    digest = cached_wheel(cache, "requests", "1.0", REQUESTS)
    with serve_registry() as reg:
        image = _image(reg, base=True)
        inputs = attest.sbom_inputs(Registry(reg.address, allowed_token_hosts=()), image,
                                    _lock(["requests"], {"requests": digest}), cache)
    assert sorted(p.name for p in inputs.debian) == ["base-files", "libc6", "libgcc-s1", "perl-base"]
    assert inputs.requires == {"requests": REQUESTS}
    assert inputs.notes == ()


def test_a_base_without_packages_and_wheels_not_in_the_cache_are_noted(tmp_path: Path) -> None:
    cache = tmp_path / "wheels"
    digest = cached_wheel(cache, "requests", "1.0", REQUESTS)
    names = ["requests", "zz", "b", "a", "d", "c", "e", "f"]  # 7 not in the cache
    with serve_registry() as reg:
        image = _image(reg, base=False)
        inputs = attest.sbom_inputs(Registry(reg.address, allowed_token_hosts=()), image,
                                    _lock(names, {"requests": digest}), cache)
    assert inputs.debian == () and inputs.requires == {"requests": REQUESTS}
    where = f"{reg.address}/{REPO}@{image.digest}"
    assert inputs.notes == (
        f"{where}: its history names no base layer: no Debian packages listed",
        f"7 of 8 locked wheels are not in {cache} (a, b, c, d, e, ...): their dependencies in the SBOM are the "
        "lock's via notes")


@pytest.mark.parametrize(("missing", "shown"), [(1, "(a)"), (5, "(a, b, c, d, e)"), (6, "(a, b, c, d, e, ...)")])
def test_the_note_names_at_most_five_missing_wheels(tmp_path: Path, missing: int, shown: str) -> None:
    with serve_registry() as reg:
        image = _image(reg, base=True)
        inputs = attest.sbom_inputs(Registry(reg.address, allowed_token_hosts=()), image,
                                    _lock(list("abcdefg")[:missing], {}), tmp_path / "none", lock_source="x.lock")
    assert len(inputs.debian) == 4
    assert inputs.notes == (f"{missing} of {missing} locked wheels are not in {tmp_path / 'none'} {shown}: their "
                            "dependencies in the SBOM are the lock's via notes",)


def test_a_bad_lock_is_refused_by_its_source_before_the_registry_is_asked(tmp_path: Path) -> None:
    with serve_registry() as reg:
        image = _image(reg, base=True)
        before = len(reg.requests)
        with pytest.raises(PinmatrixError, match=r"^lock of cell c1: cannot read requirement 'six>=1 "):
            attest.sbom_inputs(Registry(reg.address, allowed_token_hosts=()), image,
                               "six>=1 \\\n    --hash=sha256:" + "a" * 64 + "\n", tmp_path, lock_source="lock of cell c1")
        assert len(reg.requests) == before
