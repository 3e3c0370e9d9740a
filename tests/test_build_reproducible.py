"""Two clean builds of a demo cell (fresh podman/buildah stores, nothing cached but the base rootfs
tarball) give the same image id and, pushed, the same manifest digest: buildah --timestamp clamps every
time, pip writes no bytecode, the base comes from a fixed archive."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO, host_ca_certificates, require_binaries
from pinmatrix.engine import get_engine
from pinmatrix.expand import expand_matrix, select_cells
from pinmatrix.imagebuild import BuildSettings, build_cell
from pinmatrix.lock import read_lock
from pinmatrix.matrix import load_matrix
from pinmatrix.registry import Registry
from pinmatrix.services import podman_config

pytestmark = [pytest.mark.slow, pytest.mark.podman, pytest.mark.network]


def test_two_clean_podman_builds_give_the_same_digest(build_cache, docker_registry, tmp_path: Path) -> None:  # noqa: ANN001
    require_binaries("podman", "buildah")
    matrix = load_matrix(REPO / "matrix.toml")
    cell = select_cells(expand_matrix(matrix).cells, stack="demo")[0]
    lock = read_lock(cell, REPO)
    registry = Registry(docker_registry.address)
    outcomes = []
    for run in ("a", "b"):
        store = podman_config(tmp_path / f"store-{run}")
        try:
            engine = get_engine("podman", store.env)
            settings = BuildSettings(root=REPO, cache_dir=build_cache, logs_dir=tmp_path / f"logs-{run}",
                                     registry=f"{docker_registry.address}/repro-{run}", ca_certificates=host_ca_certificates(),
                                     push=True, check_registry=False)
            result = build_cell(cell, lock, engine, settings, registry=registry)
            assert result.status == "built", result.reason
            outcomes.append((result.image_id, result.digest))
        finally:
            store.stop()
    assert outcomes[0][0] == outcomes[1][0], "image ids differ between two clean builds"
    assert outcomes[0][1] == outcomes[1][1], "pushed manifest digests differ between two clean builds"
