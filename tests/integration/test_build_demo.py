"""The demo stack built for real with docker and with podman/buildah: pushed to a local docker-registry,
pulled back by digest, a command run in it; rebuilding builds nothing; changing one pin rebuilds only the
cells it touches."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from conftest import REPO, engine_for
from pinmatrix.image.build import build_all
from pinmatrix.image.settings import BuildSettings
from pinmatrix.imageref import ImageRef
from pinmatrix.matrix.expand import select_cells
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.registry.client import Registry

pytestmark = [pytest.mark.slow, pytest.mark.registry, pytest.mark.network]


def demo_project(tmp: Path) -> Path:
    """A copy of the project with the shipped matrix, images/, patches/, smoke/ and the demo locks."""
    root = tmp / "project"
    root.mkdir()
    for name in ("images", "patches", "smoke"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "matrix.toml", root / "matrix.toml")
    matrix = load_matrix(root / "matrix.toml")
    (root / "locks").mkdir()
    for cell in select_cells(expand_matrix(matrix).cells, stack="demo"):
        shutil.copy(lock_path(cell, REPO), lock_path(cell, root))
    return root


@pytest.fixture(scope="module", params=["docker", "podman"])
def demo(request, docker_registry, build_cache, tmp_path_factory):  # noqa: ANN001, ANN201
    engine = engine_for(request.param, request)
    root = demo_project(tmp_path_factory.mktemp(f"demo-{engine.name}"))
    matrix = load_matrix(root / "matrix.toml")
    cells = select_cells(expand_matrix(matrix).cells, stack="demo")
    assert len(cells) >= 4
    registry = Registry(docker_registry.address)
    settings = BuildSettings(
        root=root, cache_dir=build_cache, logs_dir=root / "logs", registry=f"{docker_registry.address}/{engine.name}",
        ca_certificates=tuple(Path(p) for p in matrix.settings.ca_certificates if Path(p).exists()), push=True,
    )
    results = build_all(cells, engine, settings, registry, jobs=2, console=Console(stderr=True))
    return engine, root, settings, registry, cells, results


def test_demo_stack_builds_and_is_pushed_by_digest(demo) -> None:  # noqa: ANN001
    engine, _, _, registry, cells, results = demo
    assert [r.status for r in results] == ["built"] * len(cells), [r.reason for r in results]
    layers = []
    for cell, res in zip(cells, results):
        assert res.ref.endswith(f"/demo:{cell.id}")  # tag = cell id
        assert res.digest and res.digest.startswith("sha256:")
        ref = ImageRef.parse(res.ref)
        assert registry.manifest_digest(ref.repository, ref.reference) == res.digest
        info = engine.inspect(res.ref)
        assert info is not None
        assert info.labels["io.pinmatrix.cell.id"] == cell.id
        assert info.labels["org.opencontainers.image.title"] == cell.name
        for axis, value in cell.pins.items():
            assert info.labels[f"io.pinmatrix.pin.{axis}"] == value
        assert registry.labels(ref.repository, res.digest)["io.pinmatrix.inputs"] == info.labels["io.pinmatrix.inputs"]
        assert f"PINMATRIX_CELL={cell.id}" in info.env
        layers.append(info.layers)
    # every cell shares the base and the venv layer, and each wheel's layer with every cell that holds it
    assert len({layer[:2] for layer in layers}) == 1
    by_pin = {}
    for res in results:
        assert res.layers[:2] == ["base", "venv"]
        for name, diff in zip(res.layers, engine.inspect(res.ref).layers):
            by_pin.setdefault(name, set()).add(diff)
    assert all(len(diffs) == 1 for diffs in by_pin.values()), by_pin
    assert len({layer for layer in layers}) == len(cells)


def test_pull_back_by_digest_and_run(demo) -> None:  # noqa: ANN001
    engine, _, _, _, cells, results = demo
    cell, res = cells[0], results[0]
    engine.remove(res.ref)
    assert not engine.exists(res.ref)
    by_digest = str(ImageRef.parse(res.ref).with_digest(res.digest))
    engine.pull(by_digest)  # loopback registry: plain HTTP without being told
    proc = engine.run(by_digest, ["python", "-c", "import six, idna; print(six.__version__, idna.__version__)"])
    assert proc.stdout.decode().split() == [cell.pins["six"], cell.pins["idna"]]


def test_rebuilding_unchanged_cells_builds_nothing(demo) -> None:  # noqa: ANN001
    engine, _, settings, registry, cells, _ = demo
    again = build_all(cells, engine, settings, registry, jobs=2, console=Console(stderr=True))
    assert [r.status for r in again] == ["cached"] * len(cells)
    # the first cell was removed locally by the pull test (if it ran): the registry counts as built
    assert {r.cached_in for r in again} == {"layout"}


def _cli(args: list[str], env: dict[str, str], interrupt_after_built: bool = False) -> tuple[int, str]:
    """Run `pinmatrix build` in its own process group; optionally Ctrl-C it (SIGINT to the group, as a
    terminal does) once the first cell reports "built"."""
    # SIGINT's default action in the child even where this run inherited it ignored (a background job of a
    # non-interactive shell ignores SIGINT, and Python then installs no KeyboardInterrupt handler)
    proc = subprocess.Popen([sys.executable, "-m", "pinmatrix.cli", "build", *args], env=env, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    lines = []
    for line in proc.stderr:
        lines.append(line)
        if interrupt_after_built and re.match(r"^built\s", line):
            os.killpg(proc.pid, signal.SIGINT)
            interrupt_after_built = False
    return proc.wait(timeout=600), "".join(lines)


def test_changing_one_pin_rebuilds_only_the_cells_it_touches_and_an_interrupted_run_resumes(demo) -> None:  # noqa: ANN001
    engine, root, settings, _, cells, _ = demo
    env = {**os.environ, **engine.env}
    text = (root / "matrix.toml").read_text()
    changed = text.replace('idna = ["3.7", "3.10"]', 'idna = ["3.7", "3.9"]')
    assert changed != text
    (root / "matrix.toml").write_text(changed)
    args = [str(root / "matrix.toml"), "--stack", "demo", "--engine", engine.name, "--jobs", "1",
            "--registry", settings.registry, "--cache-dir", str(settings.cache_dir), "--layout", str(settings.layout),
            "--compression", str(settings.compression)]  # as the fixture built them (auto would pick zstd for podman)
    untouched = {c.id for c in cells if c.pins["idna"] == "3.7"}

    rc, first = _cli(args, env, interrupt_after_built=True)
    assert rc == 130, first
    assert "pinmatrix: interrupted" in first
    built_first = set(re.findall(r"^built\s+([0-9a-f]{12}) ", first, re.M))
    assert len(built_first) == 1 and not built_first & {c.id for c in cells}

    rc, second = _cli(args, env)
    assert rc == 0, second
    built_second = set(re.findall(r"^built\s+([0-9a-f]{12}) ", second, re.M))
    cached_second = set(re.findall(r"^cached\s+([0-9a-f]{12}) ", second, re.M))
    assert "1 built, 3 cached, 0 failed" in second
    assert cached_second == untouched | built_first  # the interrupted run's finished cell is not rebuilt
    assert len(built_second) == 1 and not built_second & (built_first | {c.id for c in cells})
