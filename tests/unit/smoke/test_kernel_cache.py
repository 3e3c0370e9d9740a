"""The image runtimes' kernel cache folder (smoke/kernel_cache.py): one per image digest, kept, emptied or off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pinmatrix.smoke.kernel_cache import CACHE_MOUNT, KernelCache, KernelCacheError, prepare_cache

DIGEST = "sha256:" + "ab" * 32
REPO = Path(__file__).resolve().parents[3]


def test_keep_makes_a_private_folder_per_digest_and_keeps_what_is_in_it(tmp_path: Path) -> None:
    cache = prepare_cache(tmp_path, DIGEST, "keep")
    assert cache is not None and cache.folder == (tmp_path / ("ab" * 32)).resolve() and cache.mode == "keep"
    assert oct(os.stat(cache.folder).st_mode & 0o777) == oct(0o700)
    (cache.folder / "triton").mkdir()
    (cache.folder / "triton" / "k.bin").write_text("x")
    again = prepare_cache(tmp_path, DIGEST, "keep")
    assert again is not None and (again.folder / "triton" / "k.bin").read_text() == "x"
    other = prepare_cache(tmp_path, "sha256:" + "cd" * 32, "keep")
    assert other is not None and other.folder != cache.folder and not any(other.folder.iterdir())


def test_cold_empties_the_folder_even_of_read_only_folders(tmp_path: Path) -> None:
    cache = prepare_cache(tmp_path, DIGEST, "keep")
    assert cache is not None
    locked = cache.folder / "inductor" / "locked"
    locked.mkdir(parents=True)
    (locked / "k.bin").write_text("x")
    locked.chmod(0o500)
    cold = prepare_cache(tmp_path, DIGEST, "cold")
    assert cold is not None and cold.folder.is_dir() and not any(cold.folder.iterdir())


def test_off_is_no_folder(tmp_path: Path) -> None:
    assert prepare_cache(tmp_path, DIGEST, "off") is None
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("digest", ["sha256:" + "ab" * 31, "sha256:" + "AB" * 32, "sha256:../../" + "a" * 58,
                                    "sha512:" + "ab" * 32, "ab" * 32])
def test_only_an_image_digest_names_a_folder(tmp_path: Path, digest: str) -> None:
    with pytest.raises(KernelCacheError, match="not an image digest"):
        prepare_cache(tmp_path, digest, "keep")
    assert not any(tmp_path.iterdir())


def test_an_unknown_mode_is_refused(tmp_path: Path) -> None:
    with pytest.raises(KernelCacheError, match="one of keep, cold, off"):
        prepare_cache(tmp_path, DIGEST, "warm")


@pytest.mark.parametrize("mode", ["keep", "cold"])
def test_a_link_or_a_file_in_the_folders_place_is_refused(tmp_path: Path, mode: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("x")
    base = tmp_path / "base"
    base.mkdir()
    (base / ("ab" * 32)).symlink_to(elsewhere)
    with pytest.raises(KernelCacheError, match="not a folder"):
        prepare_cache(base, DIGEST, mode)
    assert (elsewhere / "precious").read_text() == "x"  # nothing removed through the link


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_the_folder_belongs_to_the_images_user_when_run_as_root(tmp_path: Path) -> None:
    cache = prepare_cache(tmp_path, DIGEST, "keep", uid=4242, gid=4343)
    assert cache is not None and (os.stat(cache.folder).st_uid, os.stat(cache.folder).st_gid) == (4242, 4343)


def test_the_variables_point_into_the_mount_unless_already_set() -> None:
    cache = KernelCache(Path("/x"), "keep")
    env = cache.environment({})
    assert env == {"TRITON_CACHE_DIR": f"{CACHE_MOUNT}/triton", "FLASHINFER_WORKSPACE_BASE": CACHE_MOUNT,
                   "TORCHINDUCTOR_CACHE_DIR": f"{CACHE_MOUNT}/inductor", "VLLM_CACHE_ROOT": f"{CACHE_MOUNT}/vllm",
                   "CUDA_CACHE_PATH": f"{CACHE_MOUNT}/nv", "PINMATRIX_AUTOTUNE_DIR": f"{CACHE_MOUNT}/autotune",
                   "TRITON_CACHE_AUTOTUNING": "1"}
    assert "TRITON_CACHE_DIR" not in cache.environment({"TRITON_CACHE_DIR": "/mine"})
    # a cell that switches the autotune cache off keeps it off
    assert "TRITON_CACHE_AUTOTUNING" not in cache.environment({"TRITON_CACHE_AUTOTUNING": "0"})


def test_the_host_runtime_refuses_the_option_in_one_line() -> None:
    done = subprocess.run([sys.executable, "-m", "pinmatrix", "smoke", "--kernel-cache", "cold"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith(
        "--kernel-cache needs --runtime docker, podman or sandbox (the host runtime uses the host user's own caches)")
    assert "Traceback" not in done.stderr
