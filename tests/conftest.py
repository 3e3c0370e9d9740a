"""Shared fixtures: each test away from the checkout's own state (its own working directory, a stand-in for the
checkout without ``.pinmatrix/`` and ``known-good.toml``, and no ``PINMATRIX_*`` setting of the caller's shell:
tests/support/checkout_state.py), private container services (dockerd, podman/buildah storage, docker-registry) started by
the tests themselves and stopped by PID, a shared cache for the base root filesystem, and a Cell factory.

A missing binary skips the tests that need it with the reason, except in CI (CI=true), where it fails them:
CI installs every package these tests need (.ci/run)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from checkout_state import foreign_settings, stand_in_root
from helpers import start_dockerd
from mutmut_children import install as install_mutmut_children
from promotion import oci_registry  # noqa: F401 - the fixture, for every test folder

from pinmatrix.cell import BaseSpec, Cell, CellPatch, cell_identity
from pinmatrix.engine import OCIEngine, get_engine
from pinmatrix.engine.services import Service, podman_config, start_registry
from pinmatrix.errors import EngineError
from pinmatrix.registry.client import Registry

REPO = Path(__file__).resolve().parent.parent
install_mutmut_children()  # under mutmut only: the package's isolated script children can import its trampoline


@pytest.fixture(autouse=True)
def away_from_checkout_state(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in a stand-in root of its own (the checkout's inputs linked in, none of its state) with no
    PINMATRIX_* setting of the shell that started pytest: what ./dev left in the checkout cannot reach a test."""
    root = stand_in_root(REPO, tmp_path_factory.mktemp("checkout"))
    monkeypatch.chdir(root)
    for name in foreign_settings(os.environ):
        monkeypatch.delenv(name)
    return root


def ci_enabled(value: str | None = None) -> bool:
    """Whether this is a CI run: $CI set to anything but "", "false" or "0" (case and blanks ignored).
    Under CI a missing tool or an unreachable index FAILS the tests that need it instead of skipping them."""
    value = os.environ.get("CI", "") if value is None else value
    return value.strip().lower() not in {"", "false", "0"}


IN_CI = ci_enabled()


def skip_or_fail(message: str) -> None:
    """Skip with ``message`` outside CI; under CI fail with it (CI provides every tool and the index)."""
    if ci_enabled():
        pytest.fail(f"CI: {message}", pytrace=False)
    pytest.skip(message)
# The same epoch as matrix.toml's base, so the tests share the base the demo stack uses.
TEST_EPOCH = 1735689600
TEST_BASE = BaseSpec(kind="mmdebstrap", suite="bookworm", source_date_epoch=TEST_EPOCH,
                     packages=("python3", "python3-venv", "ca-certificates", "patch"))


def host_ca_certificates() -> tuple[Path, ...]:
    """The host's extra CA certificates (a TLS-intercepting proxy's), for pip inside images."""
    extra = Path("/usr/local/share/ca-certificates")
    return (extra,) if extra.is_dir() and any(extra.glob("*.crt")) else ()


def require_binaries(*names: str) -> None:
    """Skip (or, in CI, fail) when one of ``names`` is not installed."""
    missing = [n for n in names if shutil.which(n) is None]
    if not missing:
        return
    skip_or_fail(f"{', '.join(missing)} not installed (apt-get install: see .ci/apt-packages.txt)")


def _start(factory, *args):  # noqa: ANN001, ANN202
    try:
        return factory(*args)
    except EngineError as err:
        if ci_enabled():
            pytest.fail(str(err))
        raise


@pytest.fixture(scope="session")
def dockerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """A private dockerd (vfs, no iptables, no bridge) on a socket of its own; ``.env`` has DOCKER_HOST."""
    require_binaries("dockerd", "docker")
    service = _start(start_dockerd, tmp_path_factory.mktemp("dockerd"))
    yield service
    service.stop()


@pytest.fixture(scope="session")
def podman_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Private podman/buildah storage (vfs) and containers.conf (runc, cgroupfs), through
    CONTAINERS_STORAGE_CONF / CONTAINERS_CONF in ``.env``."""
    require_binaries("podman", "buildah")
    service = _start(podman_config, tmp_path_factory.mktemp("podman"))
    yield service
    service.stop()


@pytest.fixture(scope="session")
def docker_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """Debian's docker-registry on a free port of 127.0.0.1; ``.address`` is host:port. Never 5000: that is the
    shipped matrix's registry, which pinmatrix's embedded registry serves for ./dev (pinmatrix.registry.local)."""
    require_binaries("docker-registry")
    service = _start(start_registry, tmp_path_factory.mktemp("registry"), None)
    yield service
    service.stop()


@pytest.fixture(scope="session")
def registry(docker_registry: Service) -> Registry:
    return Registry(docker_registry.address)


@pytest.fixture(scope="session")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The cache shared by every build test: the base rootfs tarball is made once per session (mmdebstrap
    ~30 s). PINMATRIX_TEST_CACHE points it at a directory that outlives the session."""
    require_binaries("mmdebstrap")
    keep = os.environ.get("PINMATRIX_TEST_CACHE")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep)
    return tmp_path_factory.mktemp("build-cache")


def engine_for(name: str, request: pytest.FixtureRequest) -> OCIEngine:
    """The engine ``name`` wired to its private service (starts it on first use)."""
    service: Service = request.getfixturevalue("dockerd" if name == "docker" else "podman_env")
    engine = get_engine(name, service.env)
    engine.ensure_running()
    return engine


@pytest.fixture(params=["docker", "podman"])
def any_engine(request: pytest.FixtureRequest) -> OCIEngine:
    return engine_for(request.param, request)


def make_cell(
    stack: str,
    requirements: tuple[str, ...],
    *,
    pins: dict[str, str] | None = None,
    patches: tuple[CellPatch, ...] = (),
    python: str = "3.11",
    base: BaseSpec = TEST_BASE,
    env: dict[str, str] | None = None,
    cuda: str | None = None,
    min_driver: str | None = None,
    arch_flags: tuple[str, ...] = (),
) -> Cell:
    """A Cell built directly (as the expansion would), with a content id over what defines it."""
    pins = dict(pins or {})
    if cuda:
        pins["cuda"] = cuda
    payload = {"stack": stack, "requirements": list(requirements), "pins": pins,
               "patches": [p.id + (p.sha256 or "") + (p.source or "") for p in patches], "python": python, "env": env or {}}
    name = f"{stack}[{','.join(f'{k}={v}' for k, v in pins.items())}]"
    return Cell(
        id=cell_identity(payload), stack=stack, name=name, python=python, platform="x86_64-manylinux_2_28",
        pins=pins, requirements=requirements, arch_flags=arch_flags,
        torch_cuda_arch_list=";".join(arch_flags) or None, flashinfer_cuda_arch_list=" ".join(arch_flags) or None,
        env=env or {}, patches=patches, smokes=("host-probe",), known_issues=(), base=base, indexes=(),
        min_driver=min_driver, compute_capability=None, gpu_required=False,
    )


def project_copy(tmp_path: Path, *, smoke: bool = False) -> Path:
    """A project root with the repository's images/ and patches/ (and smoke/ if asked)."""
    root = tmp_path / "project"
    root.mkdir(parents=True, exist_ok=True)
    shutil.copytree(REPO / "images", root / "images")
    shutil.copytree(REPO / "patches", root / "patches")
    if smoke:
        shutil.copytree(REPO / "smoke", root / "smoke", ignore=shutil.ignore_patterns("__pycache__"))
    return root
