"""`build --push` sends the images to the registry from the OCI layout and loads nothing into an engine unless
asked (--load, --engine, or a matrix.engine other than 'auto'): the GPU hosts pull from the registry."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import REPO
from pinmatrix.cli import main
from pinmatrix.engine.services import Service
from pinmatrix.matrix.selection import load, select
from pinmatrix.registry.client import Registry

pytestmark = [pytest.mark.slow, pytest.mark.registry, pytest.mark.network]


def _first_demo_cell() -> str:
    matrix, expansion = load(REPO / "matrix.toml")
    return select(matrix, expansion, stack="demo")[0].id


def _in_store(env: dict[str, str], ref: str) -> bool:
    return subprocess.run(["podman", "image", "exists", ref], env=env, check=False, timeout=120).returncode == 0


def test_push_loads_nothing_unless_asked(docker_registry: Service, podman_env: Service, build_cache: Path,
                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    for key, value in podman_env.env.items():
        monkeypatch.setenv(key, value)
    env = {**os.environ, **podman_env.env}
    cell = _first_demo_cell()
    prefix = f"{docker_registry.address}/noload"
    common = ["build", str(REPO / "matrix.toml"), "--stack", "demo", "-k", cell, "--registry", prefix,
              "--cache-dir", str(build_cache), "--layout", str(tmp_path / "oci"), "--logs-dir", str(tmp_path / "l")]

    rc = main([*common, "--push", "--metadata-file", str(tmp_path / "pushed.json")])
    err = capsys.readouterr().err
    assert rc == 0, err[-3000:]
    said = " ".join(err.split())  # the console wraps its lines
    assert "--push: images go to the registry from the OCI layout; nothing is loaded into an engine" in said
    assert "into the OCI layout only" in said
    (entry,) = json.loads((tmp_path / "pushed.json").read_text()).values()
    assert entry["cell"] == cell
    ref = entry["ref"]
    repository = ref.split("/", 1)[1].rsplit(":", 1)[0]
    assert Registry(docker_registry.address).manifest_digest(repository, entry["digest"]) == entry["digest"]
    assert not _in_store(env, ref)  # the build host's podman store got nothing
    # every layer went to the registry while the image was being built; the push sent the config and manifest
    log = (tmp_path / "l" / f"{cell}.log").read_text()
    sent = re.search(r"# push: (\d+) blob\(s\) sent ahead \([0-9.]+ MB\), 0 already there\n", log)
    assert sent is not None, log[-2000:]
    assert int(sent.group(1)) == len(entry["layers"]) and log.index(sent.group(0)) < log.index("# push\n")

    rc = main([*common, "--push", "--load"])
    err = capsys.readouterr().err
    assert rc == 0, err[-3000:]
    assert "nothing is loaded" not in err and _in_store(env, ref)
