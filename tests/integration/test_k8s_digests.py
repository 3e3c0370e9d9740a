"""`ci k8s` against a registry: the manifests name each cell's image by the digest the registry serves."""

from __future__ import annotations

from pathlib import Path

import yaml
from k8s_pools import POOLS_TOML, SMOKE_DIR
from promotion import _matrix_for, push_image  # noqa: F401 - the fixture

from pinmatrix.cli import main
from pinmatrix.matrix.selection import load


def test_k8s_command_resolves_images_by_digest(oci_registry: str, tmp_path: Path, capsys,  # noqa: F811
                                               monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    matrix_path = _matrix_for(tmp_path, f"{oci_registry}/citest")
    (tmp_path / "smoke").symlink_to(SMOKE_DIR)
    _, exp = load(matrix_path)
    h200 = [c for c in exp.cells if c.stack == "h200"]
    digest = push_image(oci_registry, "citest/h200", h200[0].id, "h200 image")
    (tmp_path / "pools.toml").write_text(POOLS_TOML)
    rc = main(["ci", "k8s", str(matrix_path), "--stack", "h200", "--pools", "pools.toml", "--run-id", "t1",
               "-o", "jobs.yaml", "--verbose"])  # a line per skipped cell x pool (without: one summary line)
    err = capsys.readouterr().err
    assert rc == 0, err
    docs = list(yaml.safe_load_all((tmp_path / "jobs.yaml").read_text()))
    jobs = [d for d in docs if d["kind"] == "Job"]
    assert len(jobs) == 1  # the second cell was never pushed
    assert jobs[0]["spec"]["template"]["spec"]["containers"][0]["image"] == \
        f"{oci_registry}/citest/h200@{digest}"
    assert f"skipped {h200[1].id}" in err and "no image by digest" in err
    rc = main(["ci", "k8s", str(matrix_path), "--stack", "demo", "--pools", "pools.toml"])
    assert rc == 2 and "no Job to emit" in capsys.readouterr().err
