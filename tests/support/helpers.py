"""Helpers only the tests use: ways to look into what pinmatrix made (a BOM's components, an ELF in memory,
a lock's text, a rule's cited source, a wheel's unpacked size), to run a program in an image, and to start the
services the tests need (dockerd; skopeo to retag). The package itself never needs them."""

from __future__ import annotations

import base64
import binascii
import json
import os
import shutil
import subprocess
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emulation import BINFMT, MAX_OUTPUT, EmulationError, emulation_problem

from pinmatrix.archflag import arch_rules
from pinmatrix.archscan.binary import _scan
from pinmatrix.archscan.tools import ToolError, _cuda_root, install_wheels
from pinmatrix.cell import Cell
from pinmatrix.engine.base import OCIEngine
from pinmatrix.engine.services import Service, _stop, _wait_for
from pinmatrix.errors import EngineError, LockError
from pinmatrix.image.assembly.elf import ElfInfo, read_elf
from pinmatrix.imageref import ImageRef, RegistryError
from pinmatrix.index.install import InstallError
from pinmatrix.project.lockfile import lock_path
from pinmatrix.registry.client import Registry
from pinmatrix.release.attest import DSSE_MEDIA_TYPE, TEST_RESULT_PREDICATE, Attachment, attachments


def components_of(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """purl -> component of a CycloneDX JSON document."""
    return {c["purl"]: c for c in document.get("components", []) if "purl" in c}


def read_elf_bytes(data: bytes) -> ElfInfo:
    """``read_elf`` over bytes in memory."""
    return read_elf(lambda offset, size: data[offset:offset + size], len(data))


def read_lock(cell: Cell, root: Path = Path(".")) -> str:
    path = lock_path(cell, root)
    if not path.is_file():
        raise LockError(f"cell {cell.id} ({cell.name}) has no lock at {path}: run `pinmatrix lock -k {cell.id}`")
    return path.read_text(encoding="utf-8")


def rule_source(form: str, suffix: str) -> str:
    """The cited source of the rule for ``form`` ('sass'/'ptx') and ``suffix`` ('', 'a', 'f')."""
    return str(arch_rules()[form][suffix or "plain"]["source"])


def unpacked_size(wheel: Path) -> int:
    """The sum of the sizes of the wheel's members (what laying it out writes, before compression)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            return sum(i.file_size for i in archive.infolist())
    except (OSError, zipfile.BadZipFile) as err:
        raise InstallError(f"{wheel.name}: not a zip file: {err}") from None


@dataclass(frozen=True)
class ImportSmoke:
    ref: str
    modules: tuple[str, ...]
    ok: bool
    seconds: float
    output: str  # the tail of the container's output

    def line(self) -> str:
        state = "ok" if self.ok else "FAILED"
        return f"import {', '.join(self.modules)} in {self.ref}: {state} in {self.seconds:.0f} s"


def import_smoke(engine: OCIEngine, ref: str, arch: str, modules: tuple[str, ...], *, timeout: float = 1800,
                 binfmt: Path = BINFMT) -> ImportSmoke:
    """``python -c "import M1, M2"`` in a container of ``ref`` (no network, no GPU), under emulation where the
    image is of another architecture. EmulationError when that architecture cannot run here."""
    problem = emulation_problem(arch, binfmt)
    if problem is not None:
        raise EmulationError(f"{ref}: cannot run {arch} programs here: {problem}")
    if not modules or not all(m.isidentifier() for m in modules):
        raise EmulationError(f"{ref}: nothing importable to import ({modules!r})")
    start = time.monotonic()
    try:
        proc = engine.run(ref, ["python", "-c", f"import {', '.join(modules)}; print('imported', {modules!r})"],
                          network="none", gpus=False, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return ImportSmoke(ref, modules, False, time.monotonic() - start, f"timed out after {timeout:.0f} s")
    output = (proc.stdout or b"").decode("utf-8", "replace") + (proc.stderr or b"").decode("utf-8", "replace")
    return ImportSmoke(ref, modules, proc.returncode == 0, time.monotonic() - start, output[-MAX_OUTPUT:])


def nvcc_toolchain(root: Path | None = None) -> NvccToolchain:
    return NvccToolchain(_cuda_root(install_wheels(NVCC_PINS, root)))


def skopeo_copy(registry: Registry, source: str, target: str) -> str:
    """``skopeo copy`` between two references of one registry (e.g. retag a digest as known-good); returns the
    digest of the copy, which equals the source's when the manifest is carried over unchanged."""
    skopeo = shutil.which("skopeo")
    if skopeo is None:
        raise RegistryError("skopeo is not installed (apt-get install skopeo)")
    tls = str(registry.tls_verify).lower()
    dest = ImageRef.parse(target)
    creds = registry.credentials(dest.repository)
    # credentials reach skopeo through the file they came from (--authfile), never as a command-line password
    auth = ["--authfile", str(creds.source)] if creds is not None else []
    proc = subprocess.run(
        [skopeo, "copy", *auth, "--preserve-digests", f"--src-tls-verify={tls}", f"--dest-tls-verify={tls}",
         f"docker://{source}", f"docker://{target}"],
        capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0:
        last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1:] or ["no output"]
        raise RegistryError(f"skopeo copy {source} -> {target} failed: {last[0]}")
    digest = registry.manifest_digest(dest.repository, dest.reference)
    if digest is None:
        raise RegistryError(f"skopeo copy left no {target}")
    return digest


def start_dockerd(directory: Path, timeout: float = 60) -> Service:
    """dockerd with vfs storage, no iptables and no bridge, listening on a socket in ``directory``."""
    exe = shutil.which("dockerd")
    if exe is None:
        raise EngineError("dockerd is not installed (apt-get install docker.io)")
    directory.mkdir(parents=True, exist_ok=True)
    sock = directory / "docker.sock"
    log = directory / "dockerd.log"
    argv = [
        exe, "--storage-driver=vfs", "--iptables=false", "--ip6tables=false", "--bridge=none",
        f"--data-root={directory / 'data'}", f"--exec-root={directory / 'exec'}",
        f"--pidfile={directory / 'docker.pid'}", f"--host=unix://{sock}",
    ]
    with open(log, "wb") as handle:
        proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    env = {"DOCKER_HOST": f"unix://{sock}"}
    docker = shutil.which("docker")

    def ready() -> bool:
        if proc.poll() is not None:
            raise EngineError(f"dockerd exited with {proc.returncode}; see {log}")
        if docker is None or not sock.exists():
            return False
        return subprocess.run([docker, "version"], env={**os.environ, **env}, capture_output=True).returncode == 0

    try:
        _wait_for(ready, timeout, "dockerd", log)
    except EngineError:
        _stop(proc.pid)
        raise
    return Service("dockerd", proc.pid, directory, env, str(sock))


NVCC_PINS: tuple[str, ...] = (
    "nvidia-cuda-nvcc==13.0.88", "nvidia-nvvm==13.0.88", "nvidia-cuda-crt==13.0.88",
    "nvidia-cuda-runtime==13.0.96", "nvidia-cuda-cccl==13.0.85",
)

@dataclass(frozen=True)
class NvccToolchain:
    """nvcc from PyPI wheels. ``compile`` runs it with the library folder the wheels' nvcc.profile misses."""

    root: Path  # .../nvidia/cu13

    @property
    def nvcc(self) -> Path:
        return self.root / "bin" / "nvcc"

    @property
    def cuobjdump(self) -> Path:
        return self.root / "bin" / "cuobjdump"

    def compile(self, source: Path, output: Path, args: Sequence[str], *, timeout_s: float = 300) -> None:
        """``nvcc ARGS -o OUTPUT SOURCE`` (add '-shared -Xcompiler -fPIC' to ARGS for a shared library)."""
        cmd = [str(self.nvcc), *args, f"-L{self.root / 'lib'}", "-o", str(output), str(source)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout_s)
        if proc.returncode != 0:
            raise ToolError(f"nvcc {' '.join(args)} failed: {' '.join((proc.stderr or proc.stdout).split())[:500]}")


def fatbin_containers(data: bytes) -> list[list[tuple[str, int]]]:
    """Every fatbin container in ``data``: per container, its entries as ('sass' | 'ptx', arch number), as the
    arch-scan reader finds them (headers only)."""
    return [entries for _, _, entries in _scan(data)[0]]


def fetch_statements(registry: Registry, image: ImageRef,
                     predicate_type: str | None = TEST_RESULT_PREDICATE) -> list[dict[str, Any]]:
    """Every in-toto statement attached to ``image`` (by digest) that names that digest, signed or not and
    NOT verified: for reading. ``pinmatrix.release.verify`` is what decides whether to trust one."""
    if not image.digest:
        raise RegistryError(f"{image}: looking up attestations needs a digest")
    statements = []
    for att in attachments(registry, image):
        statement = statement_of(att)
        if statement is None:
            continue
        if predicate_type and statement.get("predicateType") != predicate_type:
            continue
        names = {s.get("digest", {}).get("sha256") for s in statement.get("subject", []) if isinstance(s, dict)}
        if image.digest.split(":", 1)[1] in names:
            statements.append(statement)
    return statements


def statement_of(att: Attachment) -> dict[str, Any] | None:
    """The statement an attachment carries, NOT verified (DSSE payload decoded, or the bare statement)."""
    try:
        if att.media_type == DSSE_MEDIA_TYPE:
            return dict(json.loads(base64.b64decode(json.loads(att.content)["payload"], validate=True)))
        return dict(json.loads(att.content))
    except (ValueError, KeyError, TypeError, binascii.Error):
        return None
