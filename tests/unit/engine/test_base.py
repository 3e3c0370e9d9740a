"""The engine interface: detection and one-line errors without a daemon. The base image on both real engines:
tests/integration/test_base_on_both_engines.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import TEST_BASE, skip_or_fail
from pinmatrix.engine import detect_engines, get_engine
from pinmatrix.engine.base import parse_step
from pinmatrix.errors import EngineError
from pinmatrix.image.assembly.rootfs import host_debian_mirror, rootfs_inputs


def test_unknown_engine_is_one_line() -> None:
    with pytest.raises(EngineError, match="unknown engine 'rkt': choose one of docker, podman"):
        get_engine("rkt")


def test_missing_binaries_are_named(tmp_path) -> None:  # noqa: ANN001
    for name, tool in (("docker", "docker"), ("podman", "podman")):
        engine = get_engine(name, {"PATH": str(tmp_path)})
        with pytest.raises(EngineError, match=f"`{tool}` is not installed"):
            engine.ensure_running()
    status = detect_engines({"PATH": str(tmp_path)})
    assert set(status) == {"docker", "podman"} and "not installed" in status["docker"]


def test_docker_daemon_not_running_is_said_clearly(tmp_path) -> None:  # noqa: ANN001
    engine = get_engine("docker", {"DOCKER_HOST": f"unix://{tmp_path}/nothing.sock"})
    if not engine.is_installed():
        skip_or_fail("docker client not installed")
    with pytest.raises(EngineError, match=r"the Docker daemon is not running at unix://.*nothing.sock"):
        engine.ensure_running()


def test_build_steps_are_parsed_for_both_engines() -> None:
    assert parse_step("Step 3/9 : RUN echo hi") == (3, 9, "RUN echo hi")
    assert parse_step("STEP 2/6: COPY smoke/ /pinmatrix/smoke/") == (2, 6, "COPY smoke/ /pinmatrix/smoke/")
    assert parse_step("Successfully built 1234") is None


def test_mirror_comes_from_the_hosts_apt_sources(tmp_path) -> None:  # noqa: ANN001
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.invalid/debian-security\nSuites: bookworm-security\nComponents: main\n"
    )
    assert host_debian_mirror(d, tmp_path / "none") == "http://mirror.invalid/debian"
    legacy = tmp_path / "sources.list"
    legacy.write_text("# comment\ndeb [arch=amd64] http://other.invalid/debian bookworm main\n")
    assert host_debian_mirror(tmp_path / "empty", legacy) == "http://other.invalid/debian"
    with pytest.raises(Exception, match="no Debian mirror"):
        host_debian_mirror(tmp_path / "empty", tmp_path / "none")


def test_an_ubuntu_hosts_archive_is_not_taken_for_a_debian_mirror(tmp_path) -> None:  # noqa: ANN001
    """An Ubuntu host names its own archive, which serves no Debian suite: taking it gave the base another key (and
    another digest) on an Ubuntu build host, and an mmdebstrap that cannot find trixie there."""
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "ubuntu.sources").write_text(
        "Types: deb\nURIs: http://archive.invalid/ubuntu/\nSuites: noble noble-updates noble-backports\n"
        "Components: main\n\nTypes: deb\nURIs: http://security.invalid/ubuntu/\nSuites: noble-security\n")
    legacy = tmp_path / "sources.list"
    legacy.write_text("deb http://archive.invalid/ubuntu jammy main\n")
    with pytest.raises(Exception, match="no Debian mirror.*set base.mirror"):
        host_debian_mirror(d, legacy)
    (d / "zz-debian.sources").write_text("Types: deb\nURIs: http://mirror.invalid/debian\nSuites: stable\n")
    assert host_debian_mirror(d, legacy) == "http://mirror.invalid/debian"
    (d / "zz-debian.sources").write_text("Types: deb\nURIs: http://mirror.invalid/debian\nSuites: trixie-backports\n")
    with pytest.raises(Exception, match="no Debian mirror"):
        host_debian_mirror(d, legacy)


def test_base_key_names_every_input_the_mirror_and_platform_included() -> None:
    platform = "x86_64-manylinux_2_28"
    a = rootfs_inputs(TEST_BASE, platform)
    assert a.key() == rootfs_inputs(TEST_BASE, platform).key()
    from dataclasses import replace

    assert rootfs_inputs(replace(TEST_BASE, packages=("git",)), platform).key() != a.key()
    assert rootfs_inputs(replace(TEST_BASE, source_date_epoch=1), platform).key() != a.key()
    assert rootfs_inputs(TEST_BASE, "aarch64-manylinux_2_28").key() != a.key()
    assert rootfs_inputs(replace(TEST_BASE, mirror="http://snapshot.invalid/debian"), platform).key() != a.key()


def test_tls_is_off_only_for_loopback_registries() -> None:
    from pinmatrix.engine.base import tls_for

    assert tls_for("127.0.0.1:5000/p/demo@sha256:" + "a" * 64, None) is False
    assert tls_for("localhost:5000/p/demo:1", None) is False
    assert tls_for("registry.example:443/p/demo:1", None) is True
    assert tls_for("127.0.0.1:5000/p/demo:1", True) is True


@pytest.mark.parametrize(("printed", "code", "reads"), [
    ("20.10.24+dfsg1\n", 0, False),  # Debian's docker.io: no zstd layers
    ("23.0.0\n", 0, True), ("27.3.1\n", 0, True),
    ("", 1, False),  # no daemon: not known, so not assumed
    ("garbage\n", 0, False), ("9" * 200 + "\n", 0, True),
])
def test_docker_reads_zstd_layers_from_23_on(tmp_path: Path, printed: str, code: int, reads: bool) -> None:
    from pinmatrix.engine.docker import DockerEngine

    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/sh\n[ \"$1 $2\" = 'version --format' ] || exit 9\nprintf '%s' '{printed}'\nexit {code}\n")
    fake.chmod(0o755)
    assert DockerEngine(env={"PATH": str(tmp_path)}).reads_zstd_layers() is reads


def test_podman_reads_zstd_layers() -> None:
    from pinmatrix.engine.podman import PodmanEngine

    assert PodmanEngine().reads_zstd_layers()


def test_docker_asks_the_daemon_its_version_once_and_again_only_after_no_answer(tmp_path: Path) -> None:
    from pinmatrix.engine.docker import DockerEngine

    asked = tmp_path / "asked"
    answer = tmp_path / "answer"
    fake = tmp_path / "docker"
    fake.write_text(f"#!/bin/sh\necho x >> '{asked}'\n[ -f '{answer}' ] || exit 1\nprintf '27.3.1\\n'\n")
    fake.chmod(0o755)
    engine = DockerEngine(env={"PATH": str(tmp_path)})
    assert engine.reads_zstd_layers() is False  # no daemon yet: not known, and not kept
    answer.write_text("")
    engine.ensure_running()
    assert engine.reads_zstd_layers() is True
    assert asked.read_text().count("x") == 2  # the answer is kept; only the failed ask was repeated
