"""The base image of the Containerfile path (source-patch cells): a Debian tree made by mmdebstrap with SOURCE_DATE_EPOCH (the same
inputs give a byte-identical tarball), cached under the cache dir by a hash of its inputs, and loaded into
the engine as a one-layer image whose config is fixed too, so the base image id is the same on every
engine and machine. Alternatively a pinned ``name@sha256:...`` image is pulled by digest."""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import platform
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from pinmatrix.cell import BaseSpec
from pinmatrix.engine import OCIEngine
from pinmatrix.hashing import sha256_file
from pinmatrix.image.rootfs import DEFAULT_SUITE, BaseImageError, host_debian_mirror

DEFAULT_SOURCE_DATE_EPOCH = 1_700_000_000
# What every image needs on top of Debian's minbase: Python (3.11 on bookworm) with venv and the pip wheel
# it bundles, CA certificates (extra ones are added per matrix), GNU patch for installed-tree patches.
REQUIRED_PACKAGES: tuple[str, ...] = ("python3", "python3-venv", "ca-certificates", "patch")
# Documentation and translations are dropped from the tree: smaller images, faster vfs copies.
PATH_EXCLUDES: tuple[str, ...] = (
    "/usr/share/doc/*",
    "/usr/share/man/*",
    "/usr/share/info/*",
    "/usr/share/locale/*",
    "/usr/share/lintian/*",
)
BASE_REPOSITORY = "localhost/pinmatrix-base"
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class RootfsInputs:
    """Everything that determines the mmdebstrap tarball. ``mirror=None``: the host's apt sources (left out
    of the key so the key is the same on every machine)."""

    suite: str
    packages: tuple[str, ...]
    source_date_epoch: int
    arch: str
    mirror: str | None = None
    variant: str = "minbase"
    excludes: tuple[str, ...] = PATH_EXCLUDES

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def debian_arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


def rootfs_inputs(spec: BaseSpec) -> RootfsInputs:
    packages = tuple(sorted(set(REQUIRED_PACKAGES) | set(spec.packages)))
    return RootfsInputs(
        suite=spec.suite or DEFAULT_SUITE,
        packages=packages,
        source_date_epoch=spec.source_date_epoch if spec.source_date_epoch is not None else DEFAULT_SOURCE_DATE_EPOCH,
        arch=debian_arch(),
        mirror=spec.mirror,
    )


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def build_rootfs(inputs: RootfsInputs, cache_dir: Path, *, log: io.TextIOBase | None = None) -> Path:
    """The mmdebstrap tarball for ``inputs``: from the cache, or made now (atomically) and cached."""
    target = cache_dir / "rootfs" / f"{inputs.key()}.tar"
    with _locked(cache_dir / "rootfs" / f"{inputs.key()}.lock"):
        if target.exists():
            return target
        if shutil.which("mmdebstrap") is None:
            raise BaseImageError("mmdebstrap is not installed; install it (apt-get install mmdebstrap) or pin base.image")
        mirror = inputs.mirror or host_debian_mirror()
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        argv = [
            "mmdebstrap",
            f"--variant={inputs.variant}",
            "--mode=root",
            "--format=tar",
            f"--architectures={inputs.arch}",
            f"--include={','.join(inputs.packages)}",
            *[f"--dpkgopt=path-exclude={pattern}" for pattern in inputs.excludes],
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--customize-hook=rm -f \"$1/etc/hostname\" \"$1/etc/resolv.conf\"",
            inputs.suite,
            str(tmp),
            mirror,
        ]
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(inputs.source_date_epoch)}
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        if log is not None:
            log.write(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            tmp.unlink(missing_ok=True)
            tail = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
            raise BaseImageError(f"mmdebstrap {inputs.suite} failed (exit {proc.returncode}): {tail[0]}")
        os.replace(tmp, target)
        return target




def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def base_config(inputs: RootfsInputs, diff_id: str) -> dict[str, object]:
    """The image config of the base: fixed creation time, labels naming its inputs (not the mirror)."""
    created = _iso(inputs.source_date_epoch)
    return {
        "architecture": inputs.arch,
        "os": "linux",
        "created": created,
        "config": {
            "Env": [DEFAULT_PATH],
            "Cmd": ["/bin/bash"],
            "Labels": {
                "org.opencontainers.image.title": f"pinmatrix base ({inputs.suite})",
                "org.opencontainers.image.created": created,
                "io.pinmatrix.base.inputs": inputs.key(),
                "io.pinmatrix.base.suite": inputs.suite,
                "io.pinmatrix.base.packages": ",".join(inputs.packages),
            },
        },
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{diff_id}"]},
        "history": [{"created": created, "created_by": f"mmdebstrap --variant={inputs.variant} {inputs.suite}"}],
    }


def write_docker_archive(rootfs: Path, inputs: RootfsInputs, ref: str, out: Path) -> str:
    """Write a ``docker load`` / ``podman load`` archive of the one-layer base image; return its image id."""
    diff_id = sha256_file(rootfs)
    config = json.dumps(base_config(inputs, diff_id), sort_keys=True, separators=(",", ":")).encode()
    config_id = hashlib.sha256(config).hexdigest()
    manifest = json.dumps([{"Config": f"{config_id}.json", "RepoTags": [ref], "Layers": [f"{diff_id}/layer.tar"]}])
    tmp = out.with_suffix(f".tmp{os.getpid()}")
    with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:

        def add_bytes(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mtime = inputs.source_date_epoch
            tar.addfile(info, io.BytesIO(data))

        add_bytes(f"{config_id}.json", config)
        layer = tar.gettarinfo(str(rootfs), arcname=f"{diff_id}/layer.tar")
        layer.mtime, layer.uid, layer.gid, layer.uname, layer.gname = inputs.source_date_epoch, 0, 0, "", ""
        with open(rootfs, "rb") as handle:
            tar.addfile(layer, handle)
        add_bytes("manifest.json", manifest.encode())
    os.replace(tmp, out)
    return f"sha256:{config_id}"


def ensure_base_image(spec: BaseSpec, engine: OCIEngine, cache_dir: Path) -> str:
    """Make sure the base image is in ``engine``'s store; return the reference a Containerfile's FROM uses."""
    if spec.kind == "image":
        if not spec.image or "@sha256:" not in spec.image:
            raise BaseImageError(f"base.image must be pinned by digest (name@sha256:...), got {spec.image!r}")
        if not engine.exists(spec.image):
            engine.pull(spec.image)
        return spec.image
    inputs = rootfs_inputs(spec)
    ref = f"{BASE_REPOSITORY}:{inputs.key()}"
    if engine.exists(ref):
        return ref
    rootfs = build_rootfs(inputs, cache_dir)
    with _locked(cache_dir / "rootfs" / f"{inputs.key()}.{engine.name}.lock"):
        if engine.exists(ref):
            return ref
        with tempfile.TemporaryDirectory(prefix="pinmatrix-base-", dir=cache_dir) as tmp:
            archive = Path(tmp) / "base.tar"
            write_docker_archive(rootfs, inputs, ref, archive)
            engine.load(archive)
    if not engine.exists(ref):
        raise BaseImageError(f"engine {engine.name}: loading the base image {ref} left no such image")
    return ref
