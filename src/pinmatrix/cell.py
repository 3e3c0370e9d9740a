"""The expanded unit of work: one cell of the matrix, fully pinned. Everything downstream (lock, build,
smoke, report, promote) reads cells, never matrix.toml directly."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from pinmatrix.hashing import sha256_bytes

# Axes that are not pip packages. Every other axis of a cell names a distribution.
NON_PACKAGE_AXES: tuple[str, ...] = ("driver", "cuda", "gpu", "arch", "env")
# Axis name -> the distribution it pins, where they differ.
AXIS_DISTRIBUTION: dict[str, str] = {"flashinfer": "flashinfer-python"}
# Known axes in the order they are shown and layered (most shared first).
KNOWN_AXES: tuple[str, ...] = (
    "driver", "cuda", "gpu", "arch", "torch", "triton", "xformers", "flashinfer", "vllm", "env",
)

PatchStatus = Literal["apply", "already-upstream"]
PatchKind = Literal["installed-tree", "source"]


@dataclass(frozen=True)
class CellPatch:
    """A patch as it applies to one cell."""

    id: str
    package: str  # the distribution it patches, e.g. "xformers"
    version: str  # the version of that package in this cell
    kind: PatchKind
    status: PatchStatus  # "already-upstream": the cell's version contains it; nothing is applied
    upstream: str  # the upstream reference it stands for (PR URL)
    sha256: str | None  # None only when status is already-upstream and no source was given
    source: str | None  # repo-relative path under patches/, or a URL
    contained_in: str | None = None  # the release that contains it upstream, if any
    note: str = ""


@dataclass(frozen=True)
class KnownIssue:
    """A known issue that matches this cell: the smokes it affects turn an expected failure into xfail."""

    id: str
    smokes: tuple[str, ...]  # smoke names (or prefixes ending in '*') it affects
    expect: Literal["fail", "degraded", "skip"]
    failure_class: str | None  # e.g. "illegal-memory-access"
    note: str
    source: str = ""


@dataclass(frozen=True)
class BaseSpec:
    """Where the image's root filesystem comes from."""

    kind: Literal["mmdebstrap", "image"]
    image: str | None = None  # name@sha256:... when kind == "image"
    suite: str | None = None  # Debian suite when kind == "mmdebstrap"
    mirror: str | None = None  # Debian mirror URL; None = the host's apt sources
    source_date_epoch: int | None = None
    packages: tuple[str, ...] = ()  # extra Debian packages in the rootfs
    variant: Literal["minbase", "extract"] = "minbase"  # mmdebstrap variant; extract runs no maintainer script


@dataclass(frozen=True)
class IndexSpec:
    """A package index. The default index (PyPI or its mirror) has ``default=True``."""

    name: str
    url: str
    default: bool = False
    explicit: bool = False  # only used by packages that name it (like uv's explicit indexes)
    packages: tuple[str, ...] = ()  # distributions that must come from this index


@dataclass(frozen=True)
class Cell:
    id: str  # short content hash of everything that defines the cell
    stack: str
    name: str  # readable: stack plus the varying axis values
    python: str  # "3.12"
    platform: str  # uv's target platform, e.g. "x86_64-manylinux_2_28"
    pins: dict[str, str]  # axis -> value: driver, cuda, gpu, torch, ..., extra package axes
    requirements: tuple[str, ...]  # PEP 508 lines fed to the lock: "torch==2.11.0", ...
    arch_flags: tuple[str, ...]  # ("12.1a",) or ("9.0a", "+PTX")
    torch_cuda_arch_list: str | None  # "9.0a+PTX;12.1a" as TORCH_CUDA_ARCH_LIST expects
    flashinfer_cuda_arch_list: str | None  # "9.0a 12.1a" as FLASHINFER_CUDA_ARCH_LIST expects
    env: dict[str, str]  # env-flag variant of this cell
    patches: tuple[CellPatch, ...]
    smokes: tuple[str, ...]  # smoke names selected for the stack
    known_issues: tuple[KnownIssue, ...]
    base: BaseSpec
    indexes: tuple[IndexSpec, ...]
    min_driver: str | None  # minimum driver for the cell's CUDA (NVIDIA_REQUIRE_CUDA)
    compute_capability: str | None  # "12.1" for gpu sm_121
    notes: tuple[str, ...] = field(default=())  # rule notes that did not prune (forward compat, source build)
    gpu_required: bool = True
    # What the cell needs beyond a lock from the default index (another index, a source build), one line each
    # (compat.toml's words); ``lock`` leaves such cells out unless asked (--with-needs) and says why once.
    needs: tuple[str, ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def patches_to_apply(self) -> tuple[CellPatch, ...]:
        return tuple(p for p in self.patches if p.status == "apply")

    def without_known_issues(self, ids: frozenset[str]) -> Cell:
        """This cell as a probe sees it where the known issues ``ids`` do not apply."""
        return replace(self, known_issues=tuple(ki for ki in self.known_issues if ki.id not in ids))

    def variables(self) -> dict[str, str]:
        """The environment variables the cell defines, wherever it runs (its image, a smoke on a host, a k8s
        Job): the arch lists, then its env-flag variant, which wins. The one place this is computed."""
        env: dict[str, str] = {}
        if self.torch_cuda_arch_list:
            env["TORCH_CUDA_ARCH_LIST"] = self.torch_cuda_arch_list
        if self.flashinfer_cuda_arch_list:
            env["FLASHINFER_CUDA_ARCH_LIST"] = self.flashinfer_cuda_arch_list
        env.update({str(k): str(v) for k, v in sorted(self.env.items())})  # one order, whatever matrix.toml's
        return env


def cell_identity(payload: dict[str, Any]) -> str:
    """12 hex digits of sha256 over canonical JSON: the same inputs give the same id on every machine."""
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return sha256_bytes(blob.encode())[:12]
