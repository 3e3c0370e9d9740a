"""A bundle's signature: a DSSE envelope (``manifest.dsse.json``, the envelope format of promotion evidence, signed
with the project's signing key) over an in-toto statement whose subject is ``manifest.json`` by its sha256 and whose
predicate names what the bundle is: its kind, the cell, the sha256 of the cell's lock, the image digest, and the
sha256 of the unpack script it carries. The manifest names every part's, file's and the lock's sha256, so a
verified manifest binds every byte of the bundle.

``verify_bundle`` checks the envelope against trusted keys and the statement against the manifest that is there,
before anything is unpacked: an unsigned bundle, one signed by a key that is not trusted, a changed manifest or a
statement naming another cell, lock or image is refused in one line.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from securesystemslib.signer import CryptoSigner

from pinmatrix.bundle.model import MANIFEST_NAME, MAX_MANIFEST_BYTES, SCRIPT_NAME, BundleError, BundleManifest
from pinmatrix.release.signing import IN_TOTO_PAYLOAD_TYPE, TrustedKey, check_envelope, sign_envelope

SIGNATURE_NAME = "manifest.dsse.json"
BUNDLE_PREDICATE = "https://pinmatrix.dev/bundle/v1"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
MAX_SIGNATURE_BYTES = 1 << 20


def bundle_predicate(manifest: BundleManifest, script_sha256: str) -> dict[str, Any]:
    """What the signature says the bundle is."""
    return {"kind": manifest.kind, "cell_id": manifest.cell_id, "lock_sha256": manifest.lock_sha256,
            "image_digest": manifest.image.digest if manifest.image else None,
            "unbundle_sha256": script_sha256, "pinmatrix_version": manifest.pinmatrix_version}


def sign_bundle(manifest_body: bytes, manifest: BundleManifest, script_sha256: str,
                signer: CryptoSigner) -> bytes:
    """The envelope's bytes: ``manifest_body`` (the manifest.json written) by sha256, and the predicate."""
    statement = {"_type": STATEMENT_TYPE,
                 "subject": [{"name": MANIFEST_NAME, "digest": {"sha256": hashlib.sha256(manifest_body).hexdigest()}}],
                 "predicateType": BUNDLE_PREDICATE, "predicate": bundle_predicate(manifest, script_sha256)}
    payload = json.dumps(statement, sort_keys=True, separators=(",", ":")).encode()
    return (json.dumps(sign_envelope(payload, signer, IN_TOTO_PAYLOAD_TYPE), indent=1, sort_keys=True) + "\n").encode()


def read_bundle_file(path: Path, limit: int) -> bytes:
    """A bundle file: no link followed, never blocking (a FIFO is refused), a regular file of at most ``limit``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise BundleError(f"{path}: cannot read: {err.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise BundleError(f"{path}: not a regular file (a FIFO, device or folder): refused")
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise BundleError(f"{path}: larger than {limit} bytes: refused")
    return data


@dataclass(frozen=True)
class VerifiedBundle:
    manifest: BundleManifest
    manifest_sha256: str
    signer: TrustedKey
    predicate: dict[str, Any]


def verify_bundle(bundle: Path, keys: Sequence[TrustedKey]) -> VerifiedBundle:
    """The bundle's manifest, once its signature verifies with one of ``keys`` and its statement names this
    manifest (by sha256) and what the manifest says (cell, lock, image). BundleError (one line) otherwise."""
    if not keys:
        raise BundleError("no trusted key: pass --key PUB (the public half of the key the bundle was signed with)")
    where = bundle / SIGNATURE_NAME
    if not where.exists() and not where.is_symlink():
        raise BundleError(f"{where}: missing: the bundle is not signed (made without a signing key)")
    check = check_envelope(read_bundle_file(where, MAX_SIGNATURE_BYTES), keys)
    if check.verified_by is None:
        raise BundleError(f"{where}: {check.problem}")
    try:
        statement = json.loads(check.payload)
        subject = statement["subject"][0]["digest"]["sha256"]
        predicate = statement["predicate"]
        if statement.get("predicateType") != BUNDLE_PREDICATE or not isinstance(predicate, dict):
            raise ValueError("another predicate type")
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise BundleError(f"{where}: not a pinmatrix bundle statement: {err}") from None
    body = read_bundle_file(bundle / MANIFEST_NAME, MAX_MANIFEST_BYTES)
    found = hashlib.sha256(body).hexdigest()
    if found != subject:
        raise BundleError(f"{bundle / MANIFEST_NAME}: sha256 {found} is not the signed {subject}: another manifest")
    try:
        manifest = BundleManifest.model_validate_json(body)
    except ValueError as err:
        raise BundleError(f"{bundle / MANIFEST_NAME}: not a bundle manifest: {str(err).splitlines()[0]}") from None
    for key, value in bundle_predicate(manifest, str(predicate.get("unbundle_sha256"))).items():
        if predicate.get(key) != value:
            raise BundleError(f"{where}: the signed {key} {predicate.get(key)!r} is not the manifest's {value!r}")
    return VerifiedBundle(manifest, found, check.verified_by, predicate)


def bundle_digests(bundle: Path) -> dict[str, str]:
    """The sha256 of the files to compare out of band: the manifest, the unpack script, and the signature when
    there is one (what ``pinmatrix bundle`` prints)."""
    names = [MANIFEST_NAME, SCRIPT_NAME] + ([SIGNATURE_NAME] if (bundle / SIGNATURE_NAME).is_file() else [])
    return {name: hashlib.sha256(read_bundle_file(bundle / name, MAX_MANIFEST_BYTES)).hexdigest() for name in names}

