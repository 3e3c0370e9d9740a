"""``pinmatrix verify REF``: is the image REF names one that pinmatrix promoted, with evidence signed by a
key you trust?"""

from __future__ import annotations

import argparse
from collections import Counter

from pinmatrix.commands._common import examples, existing_file
from pinmatrix.commands._registry import verified_reference
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef
from pinmatrix.paths import PUBLIC_KEY, public_key
from pinmatrix.registry.client import Registry
from pinmatrix.release.attest import TEST_RESULT_PREDICATE
from pinmatrix.release.signing import trusted_keys
from pinmatrix.release.verify import HostReport, ProvenanceReport, verify_image


def host_line(host: HostReport) -> str:
    """One host-signed attestation: the host key, the host (GPU, driver) and each smoke's result."""
    h = host.host
    counts = Counter(status for _, status in host.smokes)
    smokes = ", ".join(f"{smoke} {status}" for smoke, status in host.smokes)
    return (f"  host-signed {host.attestation}: host key {host.keyid[:12]}, host {h.get('id')} "
            f"({h.get('gpu_count')}x {h.get('gpu_name')} sm_{str(h.get('capability') or '?').replace('.', '')}, "
            f"driver {h.get('driver')}), cell {host.cell_id}: "
            f"{', '.join(f'{n} {s}' for s, n in sorted(counts.items()))}: {smokes}")


def provenance_line(provenance: ProvenanceReport | None) -> str:
    """The signed SLSA provenance: its builder, its subject and how many inputs it names."""
    if provenance is None:
        return "  no SLSA provenance attached"
    return (f"  SLSA provenance {provenance.attestation}: builder {provenance.builder}, subject {provenance.subject}, "
            f"{provenance.inputs} inputs")


class NotVerified(PinmatrixError):
    """The image does not verify (exit status 1); the message is the first reason."""

    exit_code = 1


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "verify", help="check an image's signed evidence: signature, subject digest, repository, cell labels",
        description="Fetch the attestations attached to REF (registry/repository:tag or @sha256:...) and check: "
                    "a test-result attestation's DSSE signature verifies with a trusted public key; the signed "
                    "statement names the image's manifest digest and REF's repository; its cell equals the image's "
                    "io.pinmatrix.cell.* and io.pinmatrix.pin.* labels; no attestation signed by a trusted key was "
                    "tampered with; host-signed test results the promotion counted (trusted_hosts) verify with the "
                    "host keys its signed statement names, and are printed (host key, GPU, driver, smokes); a signed SBOM and SLSA provenance, when present, name the same image and cell (the provenance is printed: builder, subject, inputs). Exit status: 0 "
                    "verified, 1 does not verify (the reason on stderr), 2 bad input.",
        **examples('pinmatrix verify "$(pinmatrix pull --stack demo --print -q)"   # the image pull would choose',
                   "pinmatrix verify REGISTRY/pinmatrix/known-good/demo:known-good --json",
                   "pinmatrix verify REF --key ci/pinmatrix.pub   # trust this key instead of the project's own"),
    )
    p.add_argument("reference", metavar="REF",
                   help="the image, e.g. 127.0.0.1:5000/pinmatrix/known-good/demo:known-good")
    p.add_argument("--key", action="append", type=existing_file, default=[], metavar="FILE.pub",
                   help="a trusted public key (PEM; repeatable; default: the files in PINMATRIX_TRUSTED_KEYS, "
                   f"separated by ':', else the project's {PUBLIC_KEY} that `pinmatrix keygen` made)")
    p.add_argument("--json", action="store_true", help="print the verification as JSON on stdout")
    p.set_defaults(func=run, registry_need=verified_reference)


def run(args: argparse.Namespace) -> int:
    ref = ImageRef.parse(args.reference)
    keys = trusted_keys(args.key, public_key())
    if not keys:
        raise PinmatrixError("verify: no trusted public key: pass --key FILE.pub, set PINMATRIX_TRUSTED_KEYS or run "
                             "`pinmatrix keygen` (the project's own pair)")
    result = verify_image(Registry(ref.registry), ref, keys)
    if args.json:
        print(result.to_json())
    if not result.ok:
        raise NotVerified(f"{ref} does not verify: {result.reason}")
    if not args.json:
        sources = {e.keyid: e.key_source for e in result.evidence if e.keyid}
        signers = ", ".join(f"{k[:12]} ({sources.get(k)})" for k in result.keyids)
        sbom = (f"SBOM verified ({result.sbom_components} components)" if result.sbom == "verified"
                else "no SBOM attached")
        others = len([e for e in result.evidence if e.predicate_type == TEST_RESULT_PREDICATE and e.verified]) - 1
        used = (f"from attestation {result.attestation} signed at {result.signed_at}"
                + (f", the newest of {others + 1}" if others > 0 else ""))
        print(f"verified {ref.name}@{result.digest}: cell {result.cell_id} {result.cell_name or ''} "
              f"(stack {result.stack}), result {result.result} {used}, signed by {signers}; {sbom}")
        for host in result.hosts:
            print(host_line(host))
        print(provenance_line(result.provenance))
    return 0
