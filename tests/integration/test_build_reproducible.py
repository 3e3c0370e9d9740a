"""The same demo cell assembled twice from clean gives one manifest digest, whatever the machine's state:
another hostname (a new UTS namespace), TMPDIR, umask, user-visible cache paths and engine (podman vs docker).
The engines' image ids are the config digest, and a registry serves the digest computed by the assembler."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from conftest import REPO, engine_for, require_binaries
from pinmatrix.imageref import ImageRef
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.oci.layout import OCILayout
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.registry.client import Registry

pytestmark = [pytest.mark.slow, pytest.mark.podman, pytest.mark.docker, pytest.mark.network]


def _build(tmp: Path, engine_env: dict[str, str], engine: str, hostname: str, umask: str, registry: str,
           cell_id: str, compression: str = "gzip", cpus: str | None = None) -> dict[str, object]:
    (tmp / "tmp").mkdir(parents=True)
    script = (f'hostname {hostname} && umask {umask} && exec "$@"')
    argv = [*(["taskset", "-c", cpus] if cpus else []), "unshare", "--uts", "sh", "-c", script, "build",
            sys.executable, "-m", "pinmatrix", "build", str(REPO / "matrix.toml"), "-k", cell_id,
            "--engine", engine, "--cache-dir", str(tmp / "cache"), "--layout", str(tmp / "oci"),
            "--logs-dir", str(tmp / "logs"), "--registry", registry, "--push",
            "--metadata-file", str(tmp / "built.json"), "--compression", compression]
    env = {**os.environ, **engine_env, "TMPDIR": str(tmp / "tmp")}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ((cell, entry),) = json.loads((tmp / "built.json").read_text()).items()
    assert cell == cell_id == entry["cell"]
    assert entry["status"] == "built", entry
    return entry


def test_two_clean_builds_on_different_hosts_give_one_digest(docker_registry, request, tmp_path: Path) -> None:  # noqa: ANN001
    require_binaries("unshare", "mmdebstrap", "skopeo")
    cell = select_cells(expand_matrix(load_matrix(REPO / "matrix.toml")).cells, stack="demo")[0]
    podman = engine_for("podman", request)
    docker = engine_for("docker", request)
    registry = f"{docker_registry.address}/repro"
    # gzip: the format Debian's Docker 20.10 loads, so both engines take the image
    a = _build(tmp_path / "a", podman.env, "podman", "builder-one", "0022", registry, cell.id)
    b = _build(tmp_path / "b", docker.env, "docker", "another-host", "0077", registry, cell.id)
    assert a["digest"] == b["digest"], "manifest digests differ between two clean builds"
    assert a["image_id"] == b["image_id"]
    # the engines name the image by its config digest; the registry serves the assembler's manifest digest
    assert podman.inspect(str(a["ref"])).id == a["image_id"]
    assert docker.inspect(str(b["ref"])).id == b["image_id"]
    ref = ImageRef.parse(str(a["ref"]))
    assert Registry(docker_registry.address).manifest_digest(ref.repository, ref.reference) == a["digest"]
    # no host state in the base layer
    layout = OCILayout(tmp_path / "a" / "oci")
    image = layout.image(str(a["ref"]))
    assert image is not None
    base = image.manifest["layers"][0]["digest"]
    with tarfile.open(layout.blob_path(base), "r|gz") as tar:
        names = {m.name for m in tar}
    assert "etc/hostname" not in names and "etc/resolv.conf" not in names and "etc/machine-id" not in names
    assert "usr/bin/python3.13" in names
    shutil.rmtree(tmp_path / "a" / "cache", ignore_errors=True)


def test_two_clean_zstd_builds_on_different_hosts_give_one_digest(docker_registry, request,  # noqa: ANN001
                                                                  tmp_path: Path) -> None:
    """zstd layers (what `auto` picks for podman): podman on one host, the layout alone on another with one CPU
    (zstd's workers, so its framing, must not depend on the host's cores), one digest."""
    require_binaries("unshare", "mmdebstrap", "skopeo", "taskset")
    cell = select_cells(expand_matrix(load_matrix(REPO / "matrix.toml")).cells, stack="demo")[0]
    podman = engine_for("podman", request)
    registry = f"{docker_registry.address}/repro-zstd"
    a = _build(tmp_path / "a", podman.env, "podman", "builder-one", "0022", registry, cell.id, "zstd")
    b = _build(tmp_path / "b", {}, "none", "another-host", "0077", registry, cell.id, "zstd", cpus="0")
    assert a["digest"] == b["digest"] and a["image_id"] == b["image_id"]
    assert podman.inspect(str(a["ref"])).id == a["image_id"]
    layout = OCILayout(tmp_path / "b" / "oci")
    image = layout.image(str(b["ref"]))
    assert image is not None
    media = [layer["mediaType"] for layer in image.manifest["layers"]]
    assert set(media) == {"application/vnd.oci.image.layer.v1.tar+zstd"}  # the Debian base too (debian_base_as)
