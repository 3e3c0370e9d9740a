"""The per-host, per-image kernel cache of the image runtimes (chroot, docker, podman).

Inside an image every smoke starts from the image's own files: whatever Triton, FlashInfer, TorchInductor, vLLM
or the driver's PTX JIT compiled for the previous smoke died with that smoke's writable layer, so every run paid
every compile again (the host runtime keeps them in the host user's home). This module names one host folder per
image digest, mounted read-write at ``CACHE_MOUNT`` in each smoke of that image, and points those tools' cache
variables at it (where the cell's own environment does not set them). Images never share a folder, so one cell's
kernels never reach another's; the smokes of one image share theirs, as a user's jobs share ``~/.triton``.

Modes (``pinmatrix smoke --kernel-cache``):

- ``keep`` (default): the folder persists across smokes and runs;
- ``cold``: emptied once before the image's first smoke of this run, then shared by its smokes (a cold-cache
  measurement that still lets arch-coverage read what the kernels compiled);
- ``off``: no folder; every smoke compiles from nothing (the behaviour before this cache).

Triton keeps the configuration its autotuner chose only when asked (``TRITON_CACHE_AUTOTUNING=1``, read by Triton
3.4 and later; earlier ones ignore it): with the cache on, it is asked, so a warm run (and every smoke after the
first in a cold one) reuses the choice for the same kernel, configurations and key instead of benchmarking every
configuration on the GPU again. Triton keeps nothing for a kernel whose configurations have a ``pre_hook``
(xformers' tiled matmul: ~50 s of autotuning in the h200 suite, results/h200/autotune); for those the in-cell
runtime keeps the chosen configuration's index in ``$PINMATRIX_AUTOTUNE_DIR`` (``shipped/_smokelib.py``), so the
live configuration, pre_hook and all, is reused. The choice only picks which of the kernel's configurations runs;
each computes the same product, and the oracles check the output either way.

The mode is written into each record's environment (``kernel_cache``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.errors import PinmatrixError
from pinmatrix.oci.unpack import force_remove

CACHE_MOUNT = "/var/cache/pinmatrix"
MODES = ("keep", "cold", "off")
# The variable each tool reads for its cache, relative to the mount (FlashInfer appends .cache/flashinfer).
CACHE_VARIABLES = {
    "TRITON_CACHE_DIR": "triton",
    "FLASHINFER_WORKSPACE_BASE": "",
    "TORCHINDUCTOR_CACHE_DIR": "inductor",
    "VLLM_CACHE_ROOT": "vllm",
    "CUDA_CACHE_PATH": "nv",
    "PINMATRIX_AUTOTUNE_DIR": "autotune",  # shipped/_smokelib.py: autotune choices Triton does not keep
}
# Switches set with the folders (where the cell or the image does not set them).
CACHE_SWITCHES = {"TRITON_CACHE_AUTOTUNING": "1"}


class KernelCacheError(PinmatrixError):
    """The cache folder cannot be made or emptied; the message names it."""


@dataclass(frozen=True)
class KernelCache:
    """One image's cache folder on the host, and the mode it is used in."""

    folder: Path
    mode: str

    def environment(self, image_env: dict[str, str]) -> dict[str, str]:
        """The cache variables and switches for a smoke, leaving out each one the cell or the image already
        sets."""
        folders = {name: f"{CACHE_MOUNT}/{sub}".rstrip("/") for name, sub in CACHE_VARIABLES.items()}
        return {name: value for name, value in {**folders, **CACHE_SWITCHES}.items() if name not in image_env}


def prepare_cache(base: Path, digest: str, mode: str, *, uid: int = 0, gid: int = 0) -> KernelCache | None:
    """The cache folder of the image ``digest`` under ``base`` (made 0700, owned by the image's user when run as
    root), emptied first in ``cold`` mode; None in ``off`` mode."""
    if mode not in MODES:
        raise KernelCacheError(f"--kernel-cache {mode!r}: one of {', '.join(MODES)}")
    if mode == "off":
        return None
    if not digest.startswith("sha256:") or len(digest) != 71 or not all(c in "0123456789abcdef" for c in digest[7:]):
        raise KernelCacheError(f"kernel cache: {digest!r} is not an image digest (sha256:<64 hex>)")
    folder = base / digest[7:]
    try:
        if mode == "cold" and folder.exists():
            if folder.is_symlink() or not folder.is_dir():
                raise KernelCacheError(f"kernel cache {folder}: not a folder; remove it")
            force_remove(folder)  # whatever modes the smokes gave what they wrote
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if folder.is_symlink() or not folder.is_dir():
            raise KernelCacheError(f"kernel cache {folder}: not a folder; remove it")
        if os.geteuid() == 0 and (uid, gid) != (0, 0):
            os.chown(folder, uid, gid)
    except OSError as err:
        raise KernelCacheError(f"kernel cache {folder}: {err.strerror or err}") from None
    return KernelCache(folder.resolve(), mode)
