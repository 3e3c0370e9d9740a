"""Every branch of the key and envelope checks, pinned whole (what `nox -s mutation` found loose): key file
modes bit by bit, keygen's folder and creation modes, a file that grows past its bound after it was checked,
unsupported key types, an encrypted private key given as the trusted one, and each EnvelopeCheck field."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed448 import Ed448PrivateKey

from pinmatrix.release import signing
from pinmatrix.release.signing import (
    EnvelopeCheck,
    SigningKeyError,
    check_envelope,
    generate_keypair,
    load_public_key,
    load_signer,
    parse_envelope,
    sign_envelope,
    trusted_keys,
)


@pytest.fixture(autouse=True)
def _no_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PINMATRIX_KEY_PASSWORD", raising=False)
    monkeypatch.delenv("PINMATRIX_TRUSTED_KEYS", raising=False)


def test_keygen_makes_its_folder_0700_and_never_overwrites(tmp_path: Path) -> None:
    private, public, _ = generate_keypair(tmp_path / "a" / "b" / "k")
    assert stat.S_IMODE((tmp_path / "a" / "b").stat().st_mode) == 0o700
    with pytest.raises(SigningKeyError, match=r"k\.key: exists; pass --force to replace it"):
        generate_keypair(tmp_path / "a" / "b" / "k")
    generate_keypair(tmp_path / "a" / "b" / "k", force=True)


def test_keygen_creates_the_files_with_their_modes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The creation mode itself, not only the chmod after it (no moment when the key is readable)."""
    monkeypatch.setattr(os, "chmod", lambda *args, **kwargs: None)
    old = os.umask(0)
    try:
        private, public, _ = generate_keypair(tmp_path / "k")
    finally:
        os.umask(old)
    assert (stat.S_IMODE(private.stat().st_mode), stat.S_IMODE(public.stat().st_mode)) == (0o600, 0o644)


@pytest.mark.parametrize(("mode", "which", "line"), [
    (0o667, "public", "writable by group and others (mode 0667)"),
    (0o603, "public", "writable by others (mode 0603)"),
    (0o621, "public", "writable by group (mode 0621)"),
])
def test_who_can_write_is_named_by_the_bits(tmp_path: Path, mode: int, which: str, line: str) -> None:
    _, public, _ = generate_keypair(tmp_path / "k")
    public.chmod(mode)
    with pytest.raises(SigningKeyError) as err:
        load_public_key(public)
    assert str(err.value) == f"{public}: the public key is {line}; chmod go-w {public}"


def test_others_may_execute_a_private_key_but_not_read_it(tmp_path: Path) -> None:
    private, _, _ = generate_keypair(tmp_path / "k")
    private.chmod(0o601)
    load_signer(private)
    private.chmod(0o604)
    with pytest.raises(SigningKeyError, match=r"is readable by others \(mode 0604\); chmod 600"):
        load_signer(private)


def test_a_file_that_is_longer_than_its_size_said_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A /proc file says 0 bytes and holds more: the bound is kept on what is read, too."""
    monkeypatch.setattr(signing, "MAX_KEY_FILE", 10)
    with pytest.raises(SigningKeyError) as err:
        load_public_key(Path("/proc/self/maps"))
    assert str(err.value) == "/proc/self/maps: the public key is more than a key file's 10 bytes"


def test_a_key_of_exactly_the_bound_is_read_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    private, public, keyid = generate_keypair(tmp_path / "k")
    monkeypatch.setattr(signing, "MAX_KEY_FILE", private.stat().st_size)
    assert load_signer(private).public_key.keyid == keyid
    monkeypatch.setattr(signing, "MAX_KEY_FILE", public.stat().st_size)
    assert load_public_key(public).keyid == keyid


def test_an_unsupported_key_type_is_one_line(tmp_path: Path) -> None:
    key = Ed448PrivateKey.generate()
    private, public = tmp_path / "ed448.key", tmp_path / "ed448.pub"
    private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                          serialization.NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(serialization.Encoding.PEM,
                                                     serialization.PublicFormat.SubjectPublicKeyInfo))
    private.chmod(0o600)
    public.chmod(0o644)
    with pytest.raises(SigningKeyError, match=rf"^{private}: unsupported key type: "):
        load_signer(private)
    with pytest.raises(SigningKeyError, match=rf"^{public}: unsupported key type: "):
        load_public_key(public)


def test_an_encrypted_private_key_trusted_in_place_of_its_public_half(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PINMATRIX_KEY_PASSWORD", "s3cret")
    private, public, keyid = generate_keypair(tmp_path / "k")
    trusted = load_public_key(private)
    assert (trusted.keyid, trusted.source) == (keyid, str(private))


def test_the_default_trusted_key_only_when_none_is_named(tmp_path: Path) -> None:
    _, a, a_id = generate_keypair(tmp_path / "a")
    _, b, b_id = generate_keypair(tmp_path / "b")
    assert [k.keyid for k in trusted_keys((), default=a)] == [a_id]
    assert [k.keyid for k in trusted_keys([b], default=a)] == [b_id]
    assert trusted_keys((), default=tmp_path / "missing.pub") == []
    assert [k.source for k in trusted_keys([b])] == [str(b)]


@pytest.mark.parametrize("doc", [
    [], "x", {"payload": 1, "payloadType": "t", "signatures": []}, {"payload": "eA==", "payloadType": 1, "signatures": []},
    {"payload": "eA==", "payloadType": "t", "signatures": {}}, {"payloadType": "t", "signatures": []},
])
def test_each_envelope_field_is_required(doc: object) -> None:
    with pytest.raises(ValueError, match=r"^not a DSSE envelope \(payload, payloadType, signatures\)$"):
        parse_envelope(json.dumps(doc).encode())
    check = check_envelope(json.dumps(doc).encode(), [])
    assert check == EnvelopeCheck(b"", "", (), None, "not a DSSE envelope (payload, payloadType, signatures)")


def test_every_branch_of_check_envelope_returns_what_it_saw(tmp_path: Path) -> None:
    signer = load_signer(generate_keypair(tmp_path / "s")[0])
    trusted = load_public_key(tmp_path / "s.pub")
    payload = b'{"a": 1}'
    env = sign_envelope(payload, signer, payload_type="application/x-test")
    good = env["signatures"][0]
    assert check_envelope(b"{", [trusted]) == EnvelopeCheck(b"", "", (), None, "not JSON")

    ok = check_envelope(json.dumps(env).encode(), [trusted])
    assert ok == EnvelopeCheck(payload, "application/x-test", (trusted.keyid,), trusted, None)

    not_b64 = dict(env, signatures=[{"keyid": trusted.keyid, "sig": "@@@@"}])
    assert check_envelope(json.dumps(not_b64).encode(), [trusted]) == EnvelopeCheck(
        payload, "application/x-test", (trusted.keyid,), None,
        f"the signature by key {trusted.keyid[:12]} is not base64")
    wrong = dict(env, signatures=[{"keyid": trusted.keyid, "sig": base64.b64encode(b"x" * 64).decode()}])
    assert check_envelope(json.dumps(wrong).encode(), [trusted]) == EnvelopeCheck(
        payload, "application/x-test", (trusted.keyid,), None,
        f"the signature by trusted key {trusted.keyid[:12]} ({trusted.source}) does not verify")

    unsigned = dict(env, signatures=[])
    assert check_envelope(json.dumps(unsigned).encode(), [trusted]) == EnvelopeCheck(
        payload, "application/x-test", (), None, "the envelope carries no signature")

    foreign = dict(env, signatures=[{"keyid": "ab" * 32, "sig": good["sig"]}, {"sig": good["sig"]}])
    assert check_envelope(json.dumps(foreign).encode(), [trusted]) == EnvelopeCheck(
        payload, "application/x-test", ("ab" * 32, ""), None, f"signed only by untrusted key(s) {'ab' * 6}, (none)",
        foreign=True)


def test_which_signing_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pinmatrix.release.signing import signing_key_path

    monkeypatch.delenv("PINMATRIX_SIGNING_KEY", raising=False)
    default = tmp_path / "signing.key"
    assert signing_key_path(None, default) is None  # no key yet
    assert signing_key_path(None, None) is None
    default.write_text("k")
    assert signing_key_path(None, default) == default
    assert signing_key_path(tmp_path / "mine.key", default) == tmp_path / "mine.key"
    monkeypatch.setenv("PINMATRIX_SIGNING_KEY", str(tmp_path / "ci.key"))
    assert signing_key_path(None, default) == tmp_path / "ci.key"
    assert signing_key_path(tmp_path / "mine.key", default) == tmp_path / "mine.key"
