"""Shared by tests in several folders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from oci_layout import hello_image
from report_data import H200, make_cell

from pinmatrix.hashing import sha256_digest
from pinmatrix.registry.client import OCI_MANIFEST, Manifest, Registry
from pinmatrix.results.store import HostFingerprint, SmokeRecord


@pytest.fixture()
def oci_registry(docker_registry) -> str:  # noqa: ANN001 - conftest's Service
    """The session's docker-registry (conftest: Debian's docker-registry, distribution 2.8), as host:port."""
    return str(docker_registry.address)

def push_image(host: str, repository: str, tag: str, content: str) -> str:
    """Push a minimal valid OCI image (one gzip layer with /hello.txt) and return its manifest digest."""
    reg = Registry(host)
    layer, config = hello_image(content, {"config": {"Cmd": ["/bin/true"]}})
    layer_digest = reg.push_blob(repository, layer)
    config_digest = reg.push_blob(repository, config)
    body = json.dumps({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_digest, "size": len(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer_digest, "size": len(layer)}],
    }, sort_keys=True).encode()
    return reg.put_manifest(repository, tag, Manifest(body, OCI_MANIFEST, sha256_digest(body)))

def record(cell, smoke: str, status: str, digest: str | None, *, host: HostFingerprint = H200, run: str = "r1",
           failure_class: str | None = None, reason: str = "") -> SmokeRecord:
    return SmokeRecord(
        cell_id=cell.id, stack=cell.stack, host=host, smoke=smoke, run_id=run, status=status,
        failure_class=failure_class, reason=reason, metrics={}, log_path=None,
        started_at="2026-11-29T20:00:00Z", finished_at="2026-11-29T20:00:01Z", duration_s=1.0,
        known_issue=None, image_digest=digest,
    )

DIGEST = "sha256:" + "1" * 64

GPU_CELL = make_cell("a1a1a1a1a1a1", "xf", {"driver": "580.159.04", "gpu": "sm_90", "xformers": "0.0.35"},
                     smokes=("host-probe", "boundary", "fwd-bwd"))

CPU_CELL = make_cell("c0c0c0c0c0c0", "demo", {"six": "1.17.0"}, smokes=("host-probe", "python-imports"),
                     gpu_required=False, arch_flags=(), min_driver=None, compute_capability=None)

def _matrix_for(tmp_path: Path, prefix: str, promotion: str = "") -> Path:
    """A copy of the shipped matrix whose registry is ``prefix`` (host:port/path)."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "matrix.toml").read_text()
    text = text.replace('registry = "127.0.0.1:5000/pinmatrix"', f'registry = "{prefix}"', 1)
    if promotion:
        text = text.replace("[stacks.demo.packages]", promotion + "\n[stacks.demo.packages]", 1)
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    if not (tmp_path / "patches").exists():
        (tmp_path / "patches").symlink_to(root / "patches")
    return path
