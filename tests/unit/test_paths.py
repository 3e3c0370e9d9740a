"""One place for the promotion record and the key (pinmatrix.paths), read by every command's default; file
options checked when the command line is read, before any setup; engine hints in each command's words."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pinmatrix import paths
from pinmatrix.cli import main
from pinmatrix.engine import get_engine
from pinmatrix.errors import EngineError
from pinmatrix.release.signing import signing_key_path, trusted_keys

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "matrix.toml").write_text("")
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for name in ("PINMATRIX_SIGNING_KEY", "PINMATRIX_TRUSTED_KEYS", "PINMATRIX_KEY_PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def test_the_project_root_is_the_folder_of_matrix_toml(project: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert paths.project_root() == project.resolve()
    assert paths.known_good_file() == project.resolve() / "known-good.toml"
    assert paths.public_key() == project.resolve() / ".pinmatrix/keys/signing.pub"
    elsewhere = tmp_path_factory.mktemp("no-matrix")
    assert paths.project_root(elsewhere) == elsewhere.resolve()


def test_keygen_writes_the_pair_promote_and_pull_use_by_default(project: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert signing_key_path(None, paths.signing_key()) is None  # no key yet: unsigned, said by promote
    assert trusted_keys((), paths.public_key()) == []
    assert main(["keygen"]) == 0
    private, public = project / ".pinmatrix/keys/signing.key", project / ".pinmatrix/keys/signing.pub"
    assert private.stat().st_mode & 0o777 == 0o600 and public.is_file()
    assert (private.parent.stat().st_mode & 0o777) == 0o700
    assert signing_key_path(None, paths.signing_key()) == private.resolve()
    assert [k.source for k in trusted_keys((), paths.public_key())] == [str(public.resolve())]
    # an explicit key, then the environment, win over the project's own
    other = project / "other.pub"
    other.write_bytes(public.read_bytes())
    assert [k.source for k in trusted_keys([other], paths.public_key())] == [str(other)]
    monkeypatch.setenv("PINMATRIX_TRUSTED_KEYS", str(other))
    assert [k.source for k in trusted_keys((), paths.public_key())] == [str(other)]
    monkeypatch.setenv("PINMATRIX_SIGNING_KEY", "/ci/secret.key")
    assert signing_key_path(None, paths.signing_key()) == Path("/ci/secret.key")
    assert signing_key_path(Path("mine.key"), paths.signing_key()) == Path("mine.key")
    assert main(["keygen"]) == 2  # never overwritten without --force
    assert "exists; pass --force" in capsys.readouterr().err


def _cli(*argv: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pinmatrix", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PINMATRIX_TRUSTED_KEYS": ""})
    return proc, time.monotonic() - start


@pytest.mark.parametrize("argv", [
    ("pull", "--key", "missing.pub"),
    ("verify", "127.0.0.1:5000/pinmatrix/known-good/demo:known-good", "--key", "missing.pub"),
    ("promote", "--stack", "demo", "--signing-key", "missing.key"),
])
def test_a_missing_file_option_is_refused_before_any_setup(argv: tuple[str, ...], tmp_path: Path) -> None:
    """No registry started, no matrix read: one line naming the option and the file, exit 2, at once."""
    proc, seconds = _cli(*argv, cwd=tmp_path)
    assert proc.returncode == 2
    assert f"{argv[-1]}: no such file" in proc.stderr and argv[-2] in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / ".pinmatrix").exists()
    assert seconds < 10


def test_pull_without_a_record_says_so_at_once(tmp_path: Path) -> None:
    proc, seconds = _cli("pull", "--known-good", "missing.toml", cwd=tmp_path)
    assert proc.returncode == 2 and "missing.toml: no such file (run `pinmatrix promote` first)" in proc.stderr
    assert seconds < 10


def test_smoke_wheels_directory_is_checked_first(tmp_path: Path) -> None:
    proc, _ = _cli("smoke", str(ROOT / "matrix.toml"), "--stack", "demo", "--wheels", "nowhere", cwd=tmp_path)
    assert proc.returncode == 2 and "nowhere: no such directory" in proc.stderr


def test_engine_hints_name_the_option_of_each_command(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(EngineError) as err:
        get_engine("docker", {"PATH": "/nonexistent"}).ensure_running()
    assert "`--engine podman` for build and pull, `--runtime podman` for smoke and bisect" in str(err.value)
    with pytest.raises(EngineError) as err:
        get_engine("podman", {"PATH": "/nonexistent", "CONTAINERS_STORAGE_CONF": "/x"}).ensure_running()
    assert "`--runtime docker` for smoke" in str(err.value)


def test_readme_and_dev_name_the_defaults() -> None:
    """The README and ./dev point at the same files the defaults are (no second spelling of either)."""
    readme, dev = (ROOT / "README.md").read_text(), (ROOT / "dev").read_text()
    for text in (readme, dev):
        assert "pinmatrix.pub" not in text and ".pinmatrix/known-good.toml" not in text
    assert str(paths.PUBLIC_KEY) in readme and str(paths.KNOWN_GOOD_FILE) in readme
    assert f"key={paths.KEY_PREFIX}" in dev and f"known_good={paths.KNOWN_GOOD_FILE}" in dev


PACKAGE = ROOT / "src" / "pinmatrix"
# ".pinmatrix" as a folder name: not a label (io.pinmatrix.cell.id), an attribute (settings.pinmatrix), a
# staging name (.pinmatrix.1234) or a stamp file (.pinmatrix-lock-sha256).
STATE_SPELLING = re.compile(r"(?<![\w.])\.pinmatrix(?![\w.-])")


def state_folder_spellings(package: Path) -> list[str]:
    """``module:line`` of each line of the package, paths.py aside, that spells the state folder itself."""
    return [f"{path.relative_to(package)}:{number}" for path in sorted(package.rglob("*.py"))
            if path != package / "paths.py"
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if STATE_SPELLING.search(line)]


def test_the_spelling_check_finds_a_second_spelling(tmp_path: Path) -> None:
    (tmp_path / "paths.py").write_text('STATE_DIR = Path(".pinmatrix")\n')
    (tmp_path / "step").mkdir()
    (tmp_path / "step" / "a.py").write_text('LABEL = "io.pinmatrix.cell.id"\nSTAMP = ".pinmatrix-lock-sha256"\n'
                                            'x = settings.pinmatrix\nstaging = f".pinmatrix.{pid}"\n'
                                            'cache = root / ".pinmatrix" / "cache"\n')
    (tmp_path / "step" / "b.py").write_text('"""Logs go to .pinmatrix/logs by default."""\n')
    assert state_folder_spellings(tmp_path) == ["step/a.py:5", "step/b.py:1"]


def test_only_paths_py_spells_the_state_folder() -> None:
    """Every default under the state folder is named in pinmatrix/paths.py and imported from there: code,
    --help texts, comments and docstrings alike."""
    assert state_folder_spellings(PACKAGE) == []


def test_every_default_folder_lies_in_the_state_folder() -> None:
    named = {name: value for name, value in vars(paths).items() if name.endswith(("_DIR", "_FILE", "_KEY"))}
    inside = {name for name, value in named.items() if isinstance(value, Path) and paths.STATE_DIR in value.parents}
    assert set(named) - inside == {"STATE_DIR", "MATRIX_FILE", "KNOWN_GOOD_FILE"}
    assert len({str(v) for v in named.values()}) == len(named)  # no two names for one place
