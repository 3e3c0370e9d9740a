"""Keys the user holds, and DSSE envelopes signed and verified with them (securesystemslib, offline).

- ``pinmatrix keygen`` writes an ed25519 key pair: ``NAME.key`` (PKCS#8 PEM, mode 0600, encrypted when
  ``PINMATRIX_KEY_PASSWORD`` is set) and ``NAME.pub`` (SubjectPublicKeyInfo PEM, the file to hand to
  whoever verifies). ECDSA P-256 and RSA PEM keys made elsewhere (``openssl``, ``cosign generate-key-pair``
  after ``cosign`` export to PKCS#8) work too.
- The signing key comes from ``--signing-key`` or ``PINMATRIX_SIGNING_KEY``; trusted public keys from
  ``--key`` (repeatable) or ``PINMATRIX_TRUSTED_KEYS`` (paths separated by ``os.pathsep``).
- A key file must be a regular file (a FIFO, a device such as ``/dev/zero``, a folder is refused at once),
  at most ``MAX_KEY_FILE`` bytes, not writable by group or others; a private key also not readable by others
  (``keygen`` writes 0600, its ``.pub`` 0644).
- A key id is securesystemslib's default: the sha256 of the public key's canonical form, so signer and
  verifier agree without exchanging ids.

Keyless signing (sigstore: Fulcio certificates from a CI's OIDC token, Rekor transparency log) needs those
services, which these machines cannot reach: it is not implemented.
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from securesystemslib.dsse import Envelope
from securesystemslib.signer import CryptoSigner, Signature, SSlibKey

from pinmatrix.atomic import atomic_write_bytes
from pinmatrix.errors import PinmatrixError

SIGNING_KEY_ENV = "PINMATRIX_SIGNING_KEY"
TRUSTED_KEYS_ENV = "PINMATRIX_TRUSTED_KEYS"
PASSWORD_ENV = "PINMATRIX_KEY_PASSWORD"
IN_TOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_KEY_FILE = 64 << 10  # a PEM key: an RSA-8192 private key is under 7 KiB


class SigningKeyError(PinmatrixError):
    """A key file is missing, unreadable or not a key of a supported type."""


@dataclass(frozen=True)
class TrustedKey:
    key: SSlibKey
    source: str  # the file it came from

    @property
    def keyid(self) -> str:
        return self.key.keyid


def _password() -> bytes | None:
    value = os.environ.get(PASSWORD_ENV)
    return value.encode() if value else None


def generate_keypair(prefix: Path, *, force: bool = False) -> tuple[Path, Path, str]:
    """Write ``prefix.key`` and ``prefix.pub`` (ed25519). Returns (private path, public path, key id)."""
    private, public = prefix.with_name(prefix.name + ".key"), prefix.with_name(prefix.name + ".pub")
    private.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    for path in (private, public):
        if path.exists() and not force:
            raise SigningKeyError(f"{path}: exists; pass --force to replace it")
    key = Ed25519PrivateKey.generate()
    password = _password()
    encryption = (serialization.BestAvailableEncryption(password) if password
                  else serialization.NoEncryption())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    atomic_write_bytes(private, pem, perms=0o600)
    atomic_write_bytes(public, pub, perms=0o644)
    os.chmod(private, 0o600)  # whatever the umask
    os.chmod(public, 0o644)
    return private, public, SSlibKey.from_crypto(key.public_key()).keyid


def read_key_file(path: Path, what: str, *, private: bool) -> bytes:
    """The bytes of a key file, once it is known to be a regular file of at most ``MAX_KEY_FILE`` bytes that
    group and others cannot write (nor, for a private key, others read). Opened without blocking, so a FIFO
    is refused instead of waited on; checked on the open descriptor, so a swap after the check is no help."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as err:
        raise SigningKeyError(f"{path}: cannot read the {what}: {err.strerror or err}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise SigningKeyError(f"{path}: the {what} is not a regular file")
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > MAX_KEY_FILE:
            raise SigningKeyError(f"{path}: the {what} is {info.st_size} bytes, more than a key file's "
                                  f"{MAX_KEY_FILE}")
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022:
            who = "group and others" if mode & 0o022 == 0o022 else "group" if mode & 0o020 else "others"
            raise SigningKeyError(f"{path}: the {what} is writable by {who} (mode {mode:04o}); chmod go-w {path}")
        if private and mode & 0o004:
            raise SigningKeyError(f"{path}: the {what} is readable by others (mode {mode:04o}); chmod 600 {path}")
        data = handle.read(MAX_KEY_FILE + 1)
    if len(data) > MAX_KEY_FILE:
        raise SigningKeyError(f"{path}: the {what} is more than a key file's {MAX_KEY_FILE} bytes")
    return data


def load_signer(path: Path) -> CryptoSigner:
    """The signer for the PEM private key at ``path`` (decrypted with ``PINMATRIX_KEY_PASSWORD`` if set)."""
    data = read_key_file(path, "signing key", private=True)
    try:
        key = serialization.load_pem_private_key(data, _password())
    except TypeError:
        raise SigningKeyError(f"{path}: the key is encrypted: set {PASSWORD_ENV}") from None
    except ValueError as err:
        raise SigningKeyError(f"{path}: not a PEM private key (or a wrong {PASSWORD_ENV}): {err}") from None
    try:
        return CryptoSigner(key)  # type: ignore[arg-type]
    except ValueError as err:
        raise SigningKeyError(f"{path}: unsupported key type: {err}") from None


def signing_key_path(option: Path | None, default: Path | None = None) -> Path | None:
    """``--signing-key``, else ``PINMATRIX_SIGNING_KEY``, else ``default`` when that file exists (the key
    `pinmatrix keygen` made in the project), else None (unsigned)."""
    if option is not None:
        return option
    env = os.environ.get(SIGNING_KEY_ENV)
    if env:
        return Path(env)
    return default if default is not None and default.is_file() else None


def load_public_key(path: Path) -> TrustedKey:
    data = read_key_file(path, "public key", private=False)
    try:
        public = serialization.load_pem_public_key(data)
    except ValueError:
        try:  # a private key given where the public one is expected: use its public half
            public = serialization.load_pem_private_key(data, _password()).public_key()
        except (TypeError, ValueError):
            raise SigningKeyError(f"{path}: not a PEM public key") from None
    try:
        return TrustedKey(SSlibKey.from_crypto(public), str(path))  # type: ignore[arg-type]
    except ValueError as err:
        raise SigningKeyError(f"{path}: unsupported key type: {err}") from None


def trusted_keys(options: Sequence[Path] = (), default: Path | None = None) -> list[TrustedKey]:
    """``--key`` files, else the files in ``PINMATRIX_TRUSTED_KEYS``, else ``default`` when that file exists (the
    public half of the project's own key). Empty when none names one."""
    paths = list(options)
    if not paths:
        paths = [Path(p) for p in os.environ.get(TRUSTED_KEYS_ENV, "").split(os.pathsep) if p.strip()]
    if not paths and default is not None and default.is_file():
        paths = [default]
    return [load_public_key(p) for p in paths]


# ------------------------------------------------------------------------------------------------ DSSE


def sign_envelope(payload: bytes, signer: CryptoSigner, payload_type: str = IN_TOTO_PAYLOAD_TYPE) -> dict[str, Any]:
    """A DSSE envelope (JSON form) over ``payload``, signed by ``signer``."""
    envelope = Envelope(payload=payload, payload_type=payload_type, signatures={})
    envelope.sign(signer)
    return envelope.to_dict()


@dataclass(frozen=True)
class EnvelopeCheck:
    """What one envelope turned out to be. ``verified_by`` is the trusted key that verified it (None when no
    trusted key did); ``problem`` says why not; ``foreign`` is True when only keys that are not trusted signed it
    (another signer's evidence, not a tampered one)."""

    payload: bytes
    payload_type: str
    keyids: tuple[str, ...]
    verified_by: TrustedKey | None
    problem: str | None
    foreign: bool = False


def parse_envelope(data: bytes) -> tuple[bytes, str, list[dict[str, Any]]]:
    """(payload, payloadType, signatures) of a DSSE envelope's JSON; ValueError names what is wrong."""
    try:
        doc = json.loads(data)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("payload"), str) \
            or not isinstance(doc.get("payloadType"), str) or not isinstance(doc.get("signatures"), list):
        raise ValueError("not a DSSE envelope (payload, payloadType, signatures)")
    try:
        payload = base64.b64decode(doc["payload"], validate=True)
    except (binascii.Error, ValueError):
        raise ValueError("payload is not base64") from None
    return payload, doc["payloadType"], [s for s in doc["signatures"] if isinstance(s, dict)]


def check_envelope(data: bytes, keys: Sequence[TrustedKey]) -> EnvelopeCheck:
    """Verify a DSSE envelope against ``keys``: EVERY signature by a trusted key id must verify over the
    envelope's PAE (one good and one bad by the same key id is refused). A signature by a trusted key id that
    does not verify is reported as such (tampering);
    signatures by other keys are not trusted, and say so."""
    try:
        payload, payload_type, signatures = parse_envelope(data)
    except ValueError as err:
        return EnvelopeCheck(b"", "", (), None, str(err))
    keyids = tuple(str(s.get("keyid", "")) for s in signatures)
    envelope = Envelope(payload=payload, payload_type=payload_type, signatures={})
    pae = envelope.pae()
    by_id = {k.keyid: k for k in keys}
    failed: list[str] = []
    verified: TrustedKey | None = None
    for sig in signatures:  # every signature by a trusted key id must verify, not just one of them
        trusted = by_id.get(str(sig.get("keyid", "")))
        if trusted is None:
            continue
        try:
            raw = base64.b64decode(str(sig.get("sig", "")), validate=True)
        except (binascii.Error, ValueError):
            failed.append(f"the signature by key {trusted.keyid[:12]} is not base64")
            continue
        try:
            trusted.key.verify_signature(Signature(keyid=trusted.keyid, sig=raw.hex()), pae)
        except Exception:  # securesystemslib raises UnverifiedSignatureError / VerificationError
            failed.append(f"the signature by trusted key {trusted.keyid[:12]} ({trusted.source}) does not verify")
            continue
        verified = verified or trusted
    if failed:
        return EnvelopeCheck(payload, payload_type, keyids, None, failed[0])
    if verified is not None:
        return EnvelopeCheck(payload, payload_type, keyids, verified, None)
    if not signatures:
        return EnvelopeCheck(payload, payload_type, keyids, None, "the envelope carries no signature")
    named = ", ".join(k[:12] or "(none)" for k in keyids)
    return EnvelopeCheck(payload, payload_type, keyids, None, f"signed only by untrusted key(s) {named}", foreign=True)
