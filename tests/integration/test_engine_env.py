"""pinmatrix owns podman's configuration in any shell: every PodmanEngine runs with the project's own
containers configuration unless the user or the system has one, and `pinmatrix engine-env` hands the same
variables to a plain shell, so `podman run` there sees pinmatrix's store."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from pinmatrix.engine import get_engine, services
from pinmatrix.engine.services import PODMAN_ULIMITS, project_podman_env

needs_podman = pytest.mark.skipif(shutil.which("podman") is None, reason="podman is not installed")


def _clean_env(tmp: Path) -> dict[str, str]:
    """A fresh login-like environment: no CONTAINERS_* variables carried over from anywhere."""
    return {"PATH": os.environ["PATH"], "HOME": str(tmp / "home"), "LANG": "C.UTF-8"}


def test_user_configuration_wins(tmp_path: Path) -> None:
    assert project_podman_env(tmp_path, {"CONTAINERS_STORAGE_CONF": "/mine.conf", "PATH": os.environ["PATH"]}) == {}
    assert not (tmp_path / "podman").exists()


def test_system_configuration_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    system = tmp_path / "storage.conf"
    system.write_text("[storage]\n")
    monkeypatch.setattr(services, "SYSTEM_STORAGE_CONF", system)
    assert project_podman_env(tmp_path / "state", {"PATH": os.environ["PATH"]}) == {}


@needs_podman
def test_project_configuration_written_once_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "SYSTEM_STORAGE_CONF", tmp_path / "absent.conf")
    env = project_podman_env(tmp_path, _clean_env(tmp_path))
    storage, containers = Path(env["CONTAINERS_STORAGE_CONF"]), Path(env["CONTAINERS_CONF"])
    assert storage.parent == containers.parent == (tmp_path / "podman").resolve()
    assert PODMAN_ULIMITS in containers.read_text() and 'cgroup_manager = "cgroupfs"' in containers.read_text()
    before = (storage.stat().st_mtime_ns, containers.stat().st_mtime_ns)
    assert project_podman_env(tmp_path, _clean_env(tmp_path)) == env
    assert (storage.stat().st_mtime_ns, containers.stat().st_mtime_ns) == before  # reused, not re-probed
    containers.write_text("[containers]\n")  # an older configuration without the ulimits is replaced
    assert PODMAN_ULIMITS in Path(project_podman_env(tmp_path, _clean_env(tmp_path))["CONTAINERS_CONF"]).read_text()


@needs_podman
def test_the_engine_applies_it_without_any_shell_setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services, "SYSTEM_STORAGE_CONF", tmp_path / "absent.conf")
    (tmp_path / "matrix.toml").write_text("")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")  # the project root is found above the working directory
    for key in ("CONTAINERS_STORAGE_CONF", "CONTAINERS_CONF"):
        monkeypatch.delenv(key, raising=False)
    engine = get_engine("podman")
    assert engine.env["CONTAINERS_STORAGE_CONF"] == str((tmp_path / ".pinmatrix/podman/storage.conf").resolve())
    assert get_engine("podman", {"CONTAINERS_STORAGE_CONF": "/x.conf"}).env["CONTAINERS_STORAGE_CONF"] == "/x.conf"


def _tiny_image_tar(path: Path) -> None:
    """A root filesystem of /bin/sh and the libraries it loads (no registry, no base image needed)."""
    out = subprocess.run(["ldd", "/bin/sh"], capture_output=True, text=True, check=True).stdout
    files = {"/bin/sh"} | {part for line in out.splitlines() for part in line.split() if part.startswith("/")}
    with tarfile.open(path, "w") as tar:
        for name in sorted(files):
            tar.add(os.path.realpath(name), arcname=name.lstrip("/"))


@pytest.mark.podman
@pytest.mark.slow
@needs_podman
def test_plain_podman_run_in_a_fresh_shell_after_engine_env(tmp_path: Path) -> None:
    """The issue's failure: in a new shell `podman run` died with a runc rlimit error. After
    `eval "$(pinmatrix engine-env)"` a plain `podman run` works and sees the image pinmatrix's store holds."""
    if Path("/etc/containers/storage.conf").exists():
        pytest.skip("the system configures podman here; pinmatrix adds nothing")
    project = tmp_path / "project"
    project.mkdir()
    (project / "matrix.toml").write_text("")
    _tiny_image_tar(tmp_path / "rootfs.tar")
    pinmatrix = f"{shlex_quote(sys.executable)} -m pinmatrix"
    script = (f'set -e; eval "$({pinmatrix} engine-env)"; podman import -q {tmp_path / "rootfs.tar"} tiny:1 >/dev/null; '
              "podman run --rm --network=none tiny:1 /bin/sh -c 'echo ran in podman'")
    proc = subprocess.run(["bash", "-c", script], cwd=project, env=_clean_env(tmp_path), capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "ran in podman"
    assert (project / ".pinmatrix/podman/storage.conf").is_file()
    # the engine pinmatrix uses from the same project sees the same store
    listed = subprocess.run([sys.executable, "-c", "from pinmatrix.engine import get_engine; "
                             "print(get_engine('podman').call(['images', '--format', '{{.Repository}}']).stdout.decode())"],
                            cwd=project, env=_clean_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert "localhost/tiny" in listed.stdout, listed.stderr
    subprocess.run(["bash", "-c", f'eval "$({pinmatrix} engine-env)"; podman rmi -f tiny:1'], cwd=project,
                   env=_clean_env(tmp_path), capture_output=True, timeout=120)


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)
