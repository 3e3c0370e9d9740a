"""The build cache's trust (pinmatrix.release.cache_signing): an entry is believed only when a trusted key signed it
as a build cache entry; --cache-from without a trusted key and --cache-to without a signing key are one line each,
before anything is built."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pinmatrix.image.build_cache import ENTRY_TYPE, CacheRefused
from pinmatrix.release.cache_signing import CacheKeyError, cache_trust, project_cache_trust
from pinmatrix.release.signing import generate_keypair, load_public_key, load_signer, sign_envelope


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    private, public, _ = generate_keypair(tmp_path / "keys" / "signing")
    return private, public


def test_what_it_signs_it_verifies_and_nothing_else(pair: tuple[Path, Path], tmp_path: Path) -> None:
    private, public = pair
    trust = cache_trust([load_public_key(public)], private)
    assert trust.sign is not None
    assert trust.verify(trust.sign(b'{"key": "k"}')) == b'{"key": "k"}'
    other, _, _ = generate_keypair(tmp_path / "other" / "signing")
    with pytest.raises(CacheRefused, match="untrusted"):
        trust.verify(json.dumps(sign_envelope(b"{}", load_signer(other), ENTRY_TYPE)).encode())
    with pytest.raises(CacheRefused, match="not a build cache entry"):  # an attestation of ours is not an entry
        trust.verify(json.dumps(sign_envelope(b"{}", load_signer(private))).encode())
    with pytest.raises(CacheRefused, match="no trusted key"):
        cache_trust([], None).verify(trust.sign(b"{}"))
    assert cache_trust([load_public_key(public)], None).sign is None


def test_a_cache_without_its_key_is_one_line_before_anything_is_built(pair: tuple[Path, Path], tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    private, public = pair
    missing = tmp_path / "none"
    with pytest.raises(CacheKeyError, match=r"--cache-to signs each entry: no signing key at .*none\.key"):
        project_cache_trust(reading=False, writing=True, private=missing / "none.key", public=public)
    with pytest.raises(CacheKeyError, match=r"--cache-from uses only entries signed by a trusted key"):
        project_cache_trust(reading=True, writing=False, private=private, public=missing / "none.pub")
    monkeypatch.setenv("PINMATRIX_TRUSTED_KEYS", str(public))  # the environment names the key instead
    assert project_cache_trust(reading=True, writing=False, private=missing, public=missing / "none.pub").sign is None
    written = project_cache_trust(reading=True, writing=True, private=private, public=public)
    assert written.sign is not None and written.verify(written.sign(b"x")) == b"x"


def test_each_refusal_says_why_in_its_own_words(pair: tuple[Path, Path]) -> None:
    private, public = pair
    trust = cache_trust([load_public_key(public)], private)
    with pytest.raises(CacheRefused) as err:
        cache_trust([], None).verify(b"{}")
    assert str(err.value) == "no trusted key to verify it with"
    long_type = "application/" + "x" * 100
    with pytest.raises(CacheRefused) as err:
        trust.verify(json.dumps(sign_envelope(b"{}", load_signer(private), long_type)).encode())
    assert str(err.value) == f"the envelope holds {long_type[:80]!r}, not a build cache entry"


def test_reading_trusts_the_projects_public_key_and_signs_nothing(pair: tuple[Path, Path],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    private, public = pair
    monkeypatch.delenv("PINMATRIX_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("PINMATRIX_SIGNING_KEY", raising=False)
    reading = project_cache_trust(reading=True, writing=False, private=private, public=public)
    assert reading.sign is None  # the private key is there, but a read-only cache signs nothing
    signed = json.dumps(sign_envelope(b'{"key": "k"}', load_signer(private), ENTRY_TYPE)).encode()
    assert reading.verify(signed) == b'{"key": "k"}'
