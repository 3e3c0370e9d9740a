"""The toolchain is pinned: uv exactly (and named in every lock's header), pinmatrix's own dependencies locked
with hashes in requirements/dev.lock (what ./dev and the nox sessions install), PEP 639 licence metadata."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from pinmatrix.lock.resolve import header, uv_version

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
DEV_LOCK = ROOT / "requirements" / "dev.lock"


def locked() -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of requirements/dev.lock."""
    out: dict[str, tuple[str, list[str]]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", DEV_LOCK.read_text()):
        m = re.match(r"([A-Za-z0-9._-]+)==([^\s;\\]+)", block)
        if m:
            out[canonicalize_name(m.group(1))] = (m.group(2), re.findall(r"--hash=sha256:([0-9a-f]{64})", block))
    return out


def test_uv_is_pinned_exactly_and_is_the_one_installed() -> None:
    (uv,) = [Requirement(r) for r in PYPROJECT["project"]["dependencies"] if Requirement(r).name == "uv"]
    (spec,) = list(uv.specifier)
    assert spec.operator == "==", "uv must be pinned to one version: locks record it"
    assert uv_version() == spec.version
    assert locked()["uv"][0] == spec.version


def test_lock_header_names_the_uv_that_resolved_it() -> None:
    from conftest import make_cell

    cell = make_cell("demo", ("six==1.17.0",))
    text = header(cell, "0.13.9")
    assert text.splitlines()[-1] == "# resolved by uv 0.13.9"
    assert header(cell, "0.13.9") == text  # same uv, same bytes


def test_dev_lock_pins_every_dependency_with_hashes() -> None:
    """requirements/dev.lock covers pyproject.toml (dependencies and the test extra): a dependency added to
    pyproject.toml without `./dev lock-deps` fails here."""
    pins = locked()
    wanted = [Requirement(r) for r in PYPROJECT["project"]["dependencies"]
              + PYPROJECT["project"]["optional-dependencies"]["test"]]
    for req in wanted:
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is not in requirements/dev.lock: run ./dev lock-deps"
        version, hashes = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"dev.lock pins {name}=={version}, not {req}"
        assert hashes, f"{name} has no hash in requirements/dev.lock"
    assert all(h for _, h in pins.values())


def test_dev_and_nox_install_from_the_lock_with_hashes() -> None:
    dev = (ROOT / "dev").read_text()
    assert "--require-hashes -r requirements/dev.lock" in dev
    nox = (ROOT / "noxfile.py").read_text()
    assert 'DEV_LOCK = "requirements/dev.lock"' in nox and '"--require-hashes", "-r", DEV_LOCK' in nox


def test_pep_639_license() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    (setuptools,) = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]
                     if Requirement(r).name == "setuptools"]
    assert setuptools.specifier.contains("77.0.0") and not setuptools.specifier.contains("76.9")
