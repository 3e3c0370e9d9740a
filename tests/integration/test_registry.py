"""The registry seen through its HTTP API (Debian's docker-registry on 127.0.0.1): references, digests,
labels, stored bytes against image sizes (layer sharing), and retagging by digest with skopeo."""

from __future__ import annotations

import pytest
from helpers import skopeo_copy

from conftest import TEST_BASE, engine_for, require_binaries
from pinmatrix.image.containerfile.base_image import ensure_base_image
from pinmatrix.imageref import ImageRef, RegistryError, is_loopback
from pinmatrix.registry.catalog import storage_stats
from pinmatrix.registry.client import Registry


def _parts(ref: str) -> tuple[str, str, str]:
    parsed = ImageRef.parse(ref)
    return parsed.registry, parsed.repository, parsed.reference


def test_image_references_and_loopback_hosts() -> None:
    assert _parts("127.0.0.1:5000/pinmatrix/demo:abc") == ("127.0.0.1:5000", "pinmatrix/demo", "abc")
    assert _parts("127.0.0.1:5000/p/demo@sha256:" + "a" * 64) == ("127.0.0.1:5000", "p/demo", "sha256:" + "a" * 64)
    assert _parts("localhost/pinmatrix-base") == ("localhost", "pinmatrix-base", "latest")
    with pytest.raises(RegistryError, match="expected registry/repository"):
        ImageRef.parse("demo:1")
    assert is_loopback("127.0.0.1:5000") and is_loopback("localhost:5000") and is_loopback("[::1]:5000")
    assert not is_loopback("reg.example:443") and not is_loopback("127.evil.example:5000")
    assert Registry("127.0.0.1:5000").base == "http://127.0.0.1:5000"
    assert Registry("reg.example").base == "https://reg.example"


def test_unreachable_registry_is_one_line() -> None:
    reg = Registry("127.0.0.1:9")
    assert not reg.ping()
    with pytest.raises(RegistryError, match="registry 127.0.0.1:9 unreachable"):
        reg.manifest_digest("x", "y")


@pytest.mark.slow
@pytest.mark.registry
def test_push_digest_labels_sharing_and_skopeo_retag(request, registry: Registry, build_cache, tmp_path) -> None:  # noqa: ANN001
    engine = engine_for("podman", request)
    base = ensure_base_image(TEST_BASE, engine, build_cache)
    host = registry.host
    first = f"{host}/regtest/base:1"
    engine.tag(base, first)
    digest = engine.push(first, tls_verify=registry.tls_verify)
    assert registry.manifest_digest("regtest/base", "1") == digest
    assert registry.labels("regtest/base", digest)["io.pinmatrix.base.suite"] == "bookworm"
    # a small image on top of the base: its base layer is stored once
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Containerfile").write_text(f"FROM {base}\nRUN echo derived > /derived.txt\n")
    derived = f"{host}/regtest/derived:1"
    engine.build(ctx, derived, source_date_epoch=0)
    engine.push(derived, tls_verify=registry.tls_verify)
    stats = storage_stats(registry, ["regtest/base", "regtest/derived"])
    assert stats.images == 2
    assert stats.stored_bytes < stats.image_bytes
    assert 1.9 < stats.sharing_ratio < 2.0  # two images, one big shared base layer
    assert registry.tags("regtest/base") == ["1"]
    # retag by digest with skopeo: the same manifest, the same digest
    require_binaries("skopeo")
    assert skopeo_copy(registry, f"{host}/regtest/base@{digest}", f"{host}/regtest/base:known-good") == digest
    assert registry.tags("regtest/base") == ["1", "known-good"]
    assert "regtest/base" in registry.repositories()
