"""The build cache's entries signed with the project's key and checked with the trusted keys (DSSE, signing.py):
what ``build --cache-to`` signs and ``build --cache-from`` believes (image/build_cache.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from pinmatrix.errors import PinmatrixError
from pinmatrix.image.build_cache import ENTRY_TYPE, CacheRefused, CacheTrust
from pinmatrix.release.signing import (
    SIGNING_KEY_ENV,
    TRUSTED_KEYS_ENV,
    TrustedKey,
    check_envelope,
    load_signer,
    sign_envelope,
    signing_key_path,
    trusted_keys,
)


class CacheKeyError(PinmatrixError):
    """A build cache asked for without the key it needs."""


def cache_trust(keys: Sequence[TrustedKey], signing_key: Path | None) -> CacheTrust:
    """Entries verified with ``keys`` (a cache read without one is refused: an unverified entry is never used) and,
    with ``signing_key``, signed with it."""
    trusted = list(keys)

    def verify(envelope: bytes) -> bytes:
        if not trusted:
            raise CacheRefused("no trusted key to verify it with")
        checked = check_envelope(envelope, trusted)
        if checked.verified_by is None:
            raise CacheRefused(checked.problem or "not signed by a trusted key")
        if checked.payload_type != ENTRY_TYPE:
            raise CacheRefused(f"the envelope holds {checked.payload_type[:80]!r}, not a build cache entry")
        return checked.payload

    if signing_key is None:
        return CacheTrust(verify=verify)
    signer = load_signer(signing_key)
    return CacheTrust(verify=verify,
                      sign=lambda payload: json.dumps(sign_envelope(payload, signer, ENTRY_TYPE)).encode())


def project_cache_trust(*, reading: bool, writing: bool, private: Path, public: Path) -> CacheTrust:
    """The trust of ``build --cache-from`` (``reading``) and ``--cache-to`` (``writing``): the project's key pair
    (``pinmatrix keygen``) unless PINMATRIX_SIGNING_KEY / PINMATRIX_TRUSTED_KEYS name others. A missing key is one
    line, before anything is built."""
    signing = signing_key_path(None, private) if writing else None
    if writing and signing is None:
        raise CacheKeyError(f"--cache-to signs each entry: no signing key at {private} (run `pinmatrix keygen`) "
                            f"and {SIGNING_KEY_ENV} is not set")
    keys = trusted_keys((), public)
    if reading and not keys:
        raise CacheKeyError(f"--cache-from uses only entries signed by a trusted key: none at {public} and "
                            f"{TRUSTED_KEYS_ENV} is not set")
    return cache_trust(keys, signing)
