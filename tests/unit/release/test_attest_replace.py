"""A re-promotion replaces its own evidence: the earlier test-result and SBOM statements of the same signer are
taken off the image's referrers (the tag schema fallback rewritten; a registry with the referrers API deletes
them, or keeps them and says so), as `cosign attest --replace` does; another signer's evidence stays."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from attest_data import _image
from memregistry import MemoryRegistry, serve_registry
from promotion import CPU_CELL, record

from pinmatrix.registry.client import Registry
from pinmatrix.release import attest
from pinmatrix.release.signing import generate_keypair, load_signer

FIRST = datetime(2026, 12, 1, 15, 0, 0, tzinfo=timezone.utc)
LATER = datetime(2026, 12, 1, 16, 0, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize(("api", "deletes"), [(False, False), (True, True), (True, False)])
def test_a_second_publication_replaces_the_first_of_its_signer(tmp_path: Path, api: bool, deletes: bool) -> None:
    ours = load_signer(generate_keypair(tmp_path / "ours")[0])
    theirs = load_signer(generate_keypair(tmp_path / "theirs")[0])
    with serve_registry(MemoryRegistry(referrers_api=api, deletes=deletes)) as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        records = [record(CPU_CELL, "p", "pass", image.digest)]
        bom = {"bomFormat": "CycloneDX"}
        first = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records,
                                                                             signed_at=FIRST),
                               bom=bom, signer=ours, now=FIRST)
        other = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records,
                                                                             signed_at=FIRST),
                               signer=theirs, now=FIRST)
        bare = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records), now=FIRST)
        assert other.replaced == () and bare.replaced == ()  # nothing of theirs, nor bare, was there before
        second = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records,
                                                                              signed_at=LATER),
                                bom=bom, signer=ours, now=LATER)
        listed = {a.digest for a in attest.attachments(registry, image)}
        earlier = {first.attestation, first.sbom}
        if api and not deletes:  # the registry indexes referrers itself and will not delete: kept, and said so
            assert set(second.kept) == earlier and second.replaced == ()
            assert earlier <= listed
        else:
            assert set(second.replaced) == earlier and second.kept == ()
            assert not earlier & listed
        assert {second.attestation, second.sbom, other.attestation, bare.attestation} <= listed


def test_an_unsigned_publication_replaces_only_unsigned_ones(tmp_path: Path) -> None:
    ours = load_signer(generate_keypair(tmp_path / "ours")[0])
    with serve_registry() as reg:
        registry = Registry(reg.address, allowed_token_hosts=())
        image = _image(reg, {})
        records = [record(CPU_CELL, "p", "pass", image.digest)]
        signed = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records,
                                                                              signed_at=FIRST), signer=ours, now=FIRST)
        bare = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records,
                                                                            signed_at=FIRST), now=FIRST)
        again = attest.publish(registry, image, attest.test_result_statement(image, CPU_CELL, records,
                                                                             signed_at=LATER), now=LATER)
        assert again.replaced == (bare.attestation,)
        listed = {a.digest for a in attest.attachments(registry, image)}
        assert listed == {signed.attestation, again.attestation}
