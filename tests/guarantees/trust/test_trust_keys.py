"""Key files: a regular file, bounded in size, not writable by group or others, a private key not readable by
others (keygen's 0600); /dev/zero, a FIFO and a folder are refused at once with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pinmatrix.release import signing
from pinmatrix.release.signing import SigningKeyError, generate_keypair, load_public_key, load_signer


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    private, public, _ = generate_keypair(tmp_path / "k")
    return private, public


def test_keygen_writes_0600_and_0644_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        private, public, _ = generate_keypair(tmp_path / "k")
    finally:
        os.umask(old)
    assert (private.stat().st_mode & 0o777, public.stat().st_mode & 0o777) == (0o600, 0o644)
    load_signer(private)
    load_public_key(public)


@pytest.mark.parametrize(("mode", "which", "line"), [
    (0o644, "private", r"the signing key is readable by others \(mode 0644\); chmod 600"),
    (0o604, "private", r"readable by others \(mode 0604\)"),
    (0o620, "private", r"the signing key is writable by group \(mode 0620\); chmod go-w"),
    (0o666, "public", r"the public key is writable by group and others \(mode 0666\)"),
    (0o646, "public", r"the public key is writable by others \(mode 0646\)"),
    (0o664, "public", r"writable by group \(mode 0664\)"),
])
def test_a_key_file_others_can_change_or_read_is_refused(pair: tuple[Path, Path], mode: int, which: str,
                                                         line: str) -> None:
    path = pair[0] if which == "private" else pair[1]
    path.chmod(mode)
    load = load_signer if which == "private" else load_public_key
    with pytest.raises(SigningKeyError, match=line) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: ")


def test_modes_that_are_fine(pair: tuple[Path, Path]) -> None:
    private, public = pair
    private.chmod(0o640)  # group-readable: not others
    load_signer(private)
    public.chmod(0o444)
    load_public_key(public)
    load_public_key(private)  # a private key given as the trusted one: its public half


@pytest.mark.parametrize("load", [load_signer, load_public_key])
def test_dev_zero_is_refused_at_once(load) -> None:  # noqa: ANN001
    start = time.monotonic()
    with pytest.raises(SigningKeyError, match=r"^/dev/zero: the (signing|public) key is not a regular file$"):
        load(Path("/dev/zero"))
    assert time.monotonic() - start < 1


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "k.key"
    os.mkfifo(fifo, 0o600)
    start = time.monotonic()
    with pytest.raises(SigningKeyError, match=r"the signing key is not a regular file"):
        load_signer(fifo)
    with pytest.raises(SigningKeyError, match=r"the public key is not a regular file"):
        load_public_key(fifo)
    assert time.monotonic() - start < 1


def test_a_folder_and_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SigningKeyError, match=r"not a regular file"):
        load_public_key(tmp_path)
    with pytest.raises(SigningKeyError, match=r"cannot read the signing key: No such file"):
        load_signer(tmp_path / "none.key")


def test_a_key_file_larger_than_its_bound_is_refused(pair: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    private, public = pair
    with public.open("ab") as handle:
        handle.write(b"\n" * (signing.MAX_KEY_FILE + 1 - public.stat().st_size))
    with pytest.raises(SigningKeyError, match=rf"the public key is {signing.MAX_KEY_FILE + 1} bytes, more than"):
        load_public_key(public)
    monkeypatch.setattr(signing, "MAX_KEY_FILE", private.stat().st_size)
    load_signer(private)  # exactly at the bound
    monkeypatch.setattr(signing, "MAX_KEY_FILE", private.stat().st_size - 1)
    with pytest.raises(SigningKeyError, match=r"more than a key file's"):
        load_signer(private)


def test_the_cli_refuses_dev_zero_in_one_line(tmp_path: Path) -> None:
    ref = "127.0.0.1:9/repo@sha256:" + "a" * 64
    proc = subprocess.run([sys.executable, "-m", "pinmatrix", "verify", ref, "--key", "/dev/zero"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert proc.returncode == 2 and "argument --key: /dev/zero: not a regular file" in proc.stderr
    env = {**os.environ, "PINMATRIX_TRUSTED_KEYS": "/dev/zero"}
    # not on loopback: a silent loopback address that is no matrix's registry is refused before the key is read
    remote = ref.replace("127.0.0.1:9", "registry.invalid")
    proc = subprocess.run([sys.executable, "-m", "pinmatrix", "verify", remote], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=env)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert errors == ["pinmatrix: error: /dev/zero: the public key is not a regular file"], proc.stderr
