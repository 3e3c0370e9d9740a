"""The GPU host as ``nvidia-smi`` describes it: per GPU its name, driver, compute capability, MIG mode and
memory (a size, or none of its own: a unified-memory GPU such as the GB10 says ``[N/A]`` for ``memory.total``),
and the CUDA driver API version of the banner. ``HostFingerprint`` is the part a result is keyed by.

Everything nvidia-smi prints is data from outside. A driver version becomes a ``DriverVersion`` (digits and
dots, at most four parts of four digits) or nothing with the reason; it is never a path, a shell word or a
format string. A GPU name is kept to printable ASCII and cut to ``MAX_NAME`` characters.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from pinmatrix.errors import PinmatrixError
from pinmatrix.hashing import sha256_bytes

MAX_DRIVER = 24  # characters of a driver version ('580.159.04' is 10)
MAX_DRIVER_SPEC = 120  # characters of a driver range ('>=580.142,<590')
MAX_NAME = 96
QUERY_FIELDS = ("name", "driver_version", "compute_cap", "mig.mode.current", "memory.total")
QUERY_ARGS = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader")
_DRIVER = re.compile(r"[0-9]{1,4}(?:\.[0-9]{1,4}){0,3}")
_SPEC_CHARS = re.compile(r"[0-9.,<>=!~* ]+")
_CAPABILITY = re.compile(r"[0-9]{1,2}\.[0-9]{1,2}")
_CUDA = re.compile(r"[0-9]{1,3}\.[0-9]{1,2}")
_MIB = re.compile(r"([0-9]{1,9}) ?MiB")
_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9 ._()+/-]")


class DriverVersionError(PinmatrixError):
    """A driver version or driver range that is not one (exit status 2 where the user gave it)."""


@dataclass(frozen=True)
class DriverVersion:
    """An NVIDIA driver version: ``580.159.04`` (major 580, minor 159, patch 4), ``580.142``, ``580``. ``text``
    is the version as the driver wrote it (the leading zero of ``04`` kept: results are keyed by it)."""

    text: str
    major: int
    minor: int | None
    patch: int | None

    @classmethod
    def parse(cls, value: object, what: str = "driver version") -> DriverVersion:
        text = value.strip() if isinstance(value, str) else None
        if text is None or len(text) > MAX_DRIVER or not _DRIVER.fullmatch(text):
            shown = repr(value)[:MAX_DRIVER + 8] if isinstance(value, str) else type(value).__name__
            raise DriverVersionError(f"{what} {shown} is not a driver version (digits and dots: 580.159.04)")
        parts = [int(p) for p in text.split(".")]
        return cls(text, parts[0], parts[1] if len(parts) > 1 else None, parts[2] if len(parts) > 2 else None)

    @property
    def key(self) -> tuple[int, ...]:
        """What orders versions: 580.159.04 < 580.159.10 < 590.48.01; a missing part counts as 0."""
        return tuple(int(p) for p in self.text.split(".")) + (0,) * (4 - self.text.count(".") - 1)

    def matches(self, spec: str) -> bool:
        """Whether this version is in ``spec``: one version (equal parts: ``580.159.4`` is ``580.159.04``) or a
        PEP 440 specifier set over driver versions (``>=580,<590``, ``==595.*``). ``check_driver_spec`` first."""
        spec = check_driver_spec(spec)
        if spec[0] not in "<>=!~":
            return self.key == DriverVersion.parse(spec).key
        return SpecifierSet(spec).contains(Version(self.text), prereleases=True)

    def __str__(self) -> str:
        return self.text


def check_driver_spec(spec: object, what: str = "driver range") -> str:
    """``spec`` stripped, when it is a driver version or a specifier set of driver versions; else
    DriverVersionError naming it."""
    text = spec.strip() if isinstance(spec, str) else ""
    if not text or len(text) > MAX_DRIVER_SPEC or not _SPEC_CHARS.fullmatch(text):
        raise DriverVersionError(f"{what} {str(spec)[:MAX_DRIVER_SPEC]!r} is not a driver version or range "
                                 "(580.159.04, '>=580,<590', '==595.*')")
    if text[0] not in "<>=!~":
        DriverVersion.parse(text, what)
        return text
    try:
        SpecifierSet(text)
    except InvalidSpecifier:
        raise DriverVersionError(f"{what} {text!r} is not a driver range ('>=580,<590', '==595.*')") from None
    return text


def driver_text(value: object) -> str | None:
    """A driver field read back (a host JSON file, an imported result): None when empty, else checked."""
    if value is None or value == "":
        return None
    return DriverVersion.parse(value).text


@dataclass(frozen=True)
class Gpu:
    """One GPU row of ``nvidia-smi --query-gpu``. ``mig``: "Enabled" / "Disabled", None where the GPU has no
    MIG; ``memory_mib``: its own memory, None where it has none (``unified_memory``) or it was not read."""

    name: str
    driver: DriverVersion | None
    capability: str | None
    mig: str | None = None
    memory_mib: int | None = None
    unified_memory: bool = False

    @property
    def arch(self) -> str | None:
        """'9.0' -> 'sm_90', '12.1' -> 'sm_121'."""
        return f"sm_{self.capability.replace('.', '')}" if self.capability else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "driver": str(self.driver) if self.driver else None,
                "capability": self.capability, "arch": self.arch, "mig": self.mig, "memory_mib": self.memory_mib,
                "unified_memory": self.unified_memory}


def _not_available(field: str) -> bool:
    return not field or field.startswith("[") or "N/A" in field


def _gpu_row(parts: list[str], problems: list[str]) -> Gpu:
    name = _NAME_UNSAFE.sub("?", parts[0])[:MAX_NAME]
    try:
        driver: DriverVersion | None = DriverVersion.parse(parts[1], f"nvidia-smi: {name}: driver version")
    except DriverVersionError as err:
        problems.append(str(err))
        driver = None
    cap = parts[2] if len(parts) > 2 and _CAPABILITY.fullmatch(parts[2]) else None
    mig_field = parts[3] if len(parts) > 3 else ""
    mig = mig_field if mig_field in ("Enabled", "Disabled") else None
    memory = _MIB.fullmatch(parts[4]) if len(parts) > 4 else None
    unified = len(parts) > 4 and _not_available(parts[4])
    return Gpu(name, driver, cap, mig, int(memory.group(1)) if memory else None, unified)


def parse_gpu_query(text: str, problems: list[str] | None = None) -> list[Gpu]:
    """Rows of ``nvidia-smi --query-gpu=name,driver_version,compute_cap[,mig.mode.current,memory.total]
    --format=csv,noheader``: one Gpu each. Lines that are no such row (warnings, blank lines) are ignored; a
    field that is no value of its kind is None, and a refused driver version is said in ``problems``."""
    gpus = []
    seen = problems if problems is not None else []
    for line in text.splitlines()[:256]:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 3 and parts[0]:
            gpus.append(_gpu_row(parts, seen))
    return gpus


def parse_cuda_version(text: str) -> str | None:
    """The 'CUDA Version: 13.0' of plain ``nvidia-smi`` output's banner (what the driver supports)."""
    marker = "CUDA Version:"
    if marker in text:
        words = text.split(marker, 1)[1].split()
        value = words[0].strip("|").strip() if words else ""
        return value if _CUDA.fullmatch(value) else None
    return None


def _run_smi(exe: str, args: tuple[str, ...], timeout: float, *, any_status: bool = False) -> str | None:
    """The program's output; None when it cannot run, times out, or fails (unless ``any_status``: the banner
    of a plain call counts whatever the exit status, as nvidia-smi prints it before a failing GPU's rows)."""
    try:
        out = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=False,
                             errors="replace")
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 or any_status else None


@dataclass(frozen=True)
class GpuProbe:
    """What nvidia-smi said about this host (nothing when it is missing or fails), and what was refused."""

    gpus: tuple[Gpu, ...]
    cuda_driver_api: str | None
    nvidia_smi: str | None  # the program's path; None: not installed
    problems: tuple[str, ...] = ()

    @property
    def driver(self) -> DriverVersion | None:
        return next((g.driver for g in self.gpus if g.driver), None)

    @property
    def capabilities(self) -> list[str]:
        return sorted({g.capability for g in self.gpus if g.capability})

    def fingerprint(self, hostname: str | None = None) -> HostFingerprint:
        if not self.gpus:
            return HostFingerprint.make(hostname=hostname)
        return HostFingerprint.make(
            hostname=hostname, gpu_name=" + ".join(sorted({g.name for g in self.gpus})), gpu_count=len(self.gpus),
            driver=str(self.driver) if self.driver else None, capability=",".join(self.capabilities) or None,
            cuda_driver_api=self.cuda_driver_api)

    def to_dict(self) -> dict[str, Any]:
        return {"nvidia_smi": self.nvidia_smi, "cuda_driver_api": self.cuda_driver_api,
                "gpus": [g.to_dict() for g in self.gpus], "problems": list(self.problems)}


def probe(timeout: float = 30.0) -> GpuProbe:
    """Ask ``nvidia-smi`` (no CUDA library needed): the GPU query and the banner, at once. A host without it,
    or where the query fails, has no GPU; the banner's CUDA version counts even then."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return GpuProbe((), None, None)
    with ThreadPoolExecutor(max_workers=2) as pool:
        query = pool.submit(_run_smi, exe, QUERY_ARGS, timeout)
        banner = pool.submit(_run_smi, exe, (), timeout, any_status=True)
        rows, text = query.result(), banner.result()
    problems: list[str] = []
    gpus = parse_gpu_query(rows, problems) if rows is not None else []
    if rows is None:
        problems.append(f"{exe} {' '.join(QUERY_ARGS)} failed or timed out")
    return GpuProbe(tuple(gpus), parse_cuda_version(text) if text else None, exe, tuple(problems))


@dataclass(frozen=True)
class HostFingerprint:
    """The GPU host a result was measured on. ``id`` hashes what changes kernel behaviour (GPU model,
    driver, compute capability, GPU count), not the hostname: two identical machines share an id."""

    id: str
    hostname: str
    gpu_name: str | None
    gpu_count: int
    driver: str | None
    capability: str | None
    cuda_driver_api: str | None

    @staticmethod
    def compute_id(gpu_name: str | None, driver: str | None, capability: str | None, gpu_count: int) -> str:
        blob = json.dumps([gpu_name, driver, capability, int(gpu_count)], separators=(",", ":"))
        return sha256_bytes(blob.encode())[:12]

    @classmethod
    def make(
        cls,
        *,
        hostname: str | None = None,
        gpu_name: str | None = None,
        gpu_count: int = 0,
        driver: str | None = None,
        capability: str | None = None,
        cuda_driver_api: str | None = None,
    ) -> HostFingerprint:
        """``driver`` is checked (DriverVersionError when it is no driver version)."""
        driver = driver_text(driver)
        return cls(
            id=cls.compute_id(gpu_name, driver, capability, gpu_count),
            hostname=hostname or socket.gethostname(),
            gpu_name=gpu_name,
            gpu_count=gpu_count,
            driver=driver,
            capability=capability,
            cuda_driver_api=cuda_driver_api,
        )

    @classmethod
    def detect(cls) -> HostFingerprint:
        """This host, through ``probe``; a host without nvidia-smi is ``cpu-only`` with ``gpu_count == 0``."""
        return probe().fingerprint()

    @property
    def is_cpu_only(self) -> bool:
        return self.gpu_count == 0

    @property
    def driver_version(self) -> DriverVersion | None:
        """The driver as a version; None when there is none or the stored text is no driver version."""
        try:
            return DriverVersion.parse(self.driver) if self.driver else None
        except DriverVersionError:
            return None

    def label(self) -> str:
        if self.is_cpu_only:
            return f"{self.hostname} (cpu-only)"
        return f"{self.gpu_count}x {self.gpu_name} sm_{(self.capability or '?').replace('.', '')} driver {self.driver}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HostFingerprint:
        """A fingerprint read back (``pull --host-json``, imported results): the driver is checked."""
        return cls(
            id=str(data["id"]),
            hostname=str(data.get("hostname") or ""),
            gpu_name=data.get("gpu_name"),
            gpu_count=int(data.get("gpu_count") or 0),
            driver=driver_text(data.get("driver")),
            capability=data.get("capability"),
            cuda_driver_api=data.get("cuda_driver_api"),
        )
