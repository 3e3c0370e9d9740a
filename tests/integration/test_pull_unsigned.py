"""pull refuses an image without signed evidence (a registry and podman)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from known_good_entries import entry, write_entries
from promotion import push_image  # noqa: F401 - the fixture

from pinmatrix.cli import main


def test_pull_refuses_an_image_without_signed_evidence(oci_registry: str, podman_env, tmp_path: Path,  # noqa: F811
                                                      capsys, monkeypatch) -> None:
    """An image pushed into a known-good repository and named by digest in known-good.toml, but never
    promoted (no attestation): pull refuses it with one line, exit 2, and podman pulls nothing. The signed
    path, tag moves and tampering are tests/integration/test_verified_pull.py."""
    from pinmatrix.release.signing import generate_keypair

    for key, value in podman_env.env.items():  # conftest's private podman storage
        monkeypatch.setenv(key, value)
    digest = push_image(oci_registry, "pulltest/known-good/demo", "known-good", "demo, never promoted")
    kg = tmp_path / "known-good.toml"
    e = entry("eeeeeeeeeeee", "2026-11-29T00:00:00Z", stack="demo", gpu=False, digest=digest)
    e["reference"] = f"{oci_registry}/pulltest/known-good/demo@{digest}"
    write_entries(kg, [e])
    pub = generate_keypair(tmp_path / "k")[1]
    rc = main(["pull", "--known-good", str(kg), "--stack", "demo", "--engine", "podman", "--key", str(pub)])
    out, err = capsys.readouterr()
    assert rc == 2 and out == ""
    assert err.strip().splitlines()[-1] == (
        f"pinmatrix: error: {kg}: cell eeeeeeeeeeee: will not pull {e['reference']}: no test-result attestation "
        "signed by a trusted key (0 attestation(s) found: none attached)")
    listed = subprocess.run(["podman", "images", "--digests", "--format", "{{.Digest}}"], capture_output=True,
                            text=True, check=True).stdout.split()
    assert digest not in listed
