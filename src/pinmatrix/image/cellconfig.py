"""What a cell puts in its image's config: its environment and its labels (the config document itself is
oci/config.py's, which knows no cell).

Nothing here becomes an instruction or a shell word: values from the matrix are JSON strings in the config,
which engines hand to processes as environment entries and to users as labels."""

from __future__ import annotations

from collections.abc import Sequence

from pinmatrix.cell import Cell
from pinmatrix.oci.config import DEFAULT_PATH, iso_time
from pinmatrix.project.toolchains import for_cell as cell_toolchains

LOCK_LABEL = "io.pinmatrix.lock.sha256"  # the sha256 of the lock an image was built from

VENV_PATH = "/opt/venv"
CELL_CMD = (f"{VENV_PATH}/bin/python",)  # what a cell's image runs when given no command


def nvidia_require_cuda(cell: Cell) -> str | None:
    """NVIDIA_REQUIRE_CUDA for the container toolkit: the cell's CUDA and the minimum driver it needs."""
    cuda = cell.pins.get("cuda")
    if not cuda:
        return None
    parts = [f"cuda>={cuda}"]
    if cell.min_driver:
        parts.append(f"driver>={cell.min_driver}")
    return " ".join(parts)


def cell_env(cell: Cell) -> dict[str, str]:
    """The image's environment; the cell's env-flag variant is applied last and wins."""
    env = {"PATH": f"{VENV_PATH}/bin:{DEFAULT_PATH}", "VIRTUAL_ENV": VENV_PATH, "PINMATRIX_CELL": cell.id,
           "PYTHONDONTWRITEBYTECODE": "1"}
    require = nvidia_require_cuda(cell)
    if require:
        env["NVIDIA_REQUIRE_CUDA"] = require
    if cell.gpu_required:
        env["NVIDIA_VISIBLE_DEVICES"] = "all"
        env["NVIDIA_DRIVER_CAPABILITIES"] = "compute,utility"
    chains, _ = cell_toolchains(cell.smokes, cell.pins.get("cuda"))
    for chain in chains:  # the CUDA toolchain's wheels are in the cell's lock: nvcc, CUDA_HOME (data/toolchains.toml)
        if set(chain.wheels.requirements) <= set(cell.requirements):
            env.update(chain.env(f"{VENV_PATH}/lib/python{cell.python}/site-packages", env["PATH"]))
    env.update(cell.variables())
    return env


def cell_labels(cell: Cell, *, base: str, lock_sha: str, layers: Sequence[str], epoch: int) -> dict[str, str]:
    labels: dict[str, str] = {
        "org.opencontainers.image.title": cell.name,
        "org.opencontainers.image.description": f"pinmatrix cell {cell.id} of stack {cell.stack}",
        "org.opencontainers.image.version": cell.id,
        "org.opencontainers.image.ref.name": cell.id,
        "org.opencontainers.image.created": iso_time(epoch),
        "org.opencontainers.image.base.name": base,
        "io.pinmatrix.cell.id": cell.id,
        "io.pinmatrix.cell.stack": cell.stack,
        "io.pinmatrix.cell.name": cell.name,
        "io.pinmatrix.cell.python": cell.python,
        "io.pinmatrix.cell.platform": cell.platform,
        "io.pinmatrix.cell.gpu_required": str(cell.gpu_required).lower(),
        LOCK_LABEL: lock_sha,
        "io.pinmatrix.layers": ",".join(layers),
    }
    for axis, value in sorted(cell.pins.items()):
        labels[f"io.pinmatrix.pin.{axis}"] = str(value)
    for patch in cell.patches:
        if patch.status == "apply":
            labels[f"io.pinmatrix.patch.{patch.id}"] = f"sha256:{patch.sha256} {patch.kind} {patch.package}=={patch.version}"
        else:
            contained = f" (contained in {patch.contained_in})" if patch.contained_in else ""
            labels[f"io.pinmatrix.patch.{patch.id}"] = f"already-upstream{contained}"
    if cell.arch_flags:
        labels["io.pinmatrix.arch.flags"] = " ".join(cell.arch_flags)
    if cell.torch_cuda_arch_list:
        labels["io.pinmatrix.arch.torch_cuda_arch_list"] = cell.torch_cuda_arch_list
    if cell.flashinfer_cuda_arch_list:
        labels["io.pinmatrix.arch.flashinfer_cuda_arch_list"] = cell.flashinfer_cuda_arch_list
    if cell.compute_capability:
        labels["io.pinmatrix.compute_capability"] = cell.compute_capability
    if cell.min_driver:
        labels["io.pinmatrix.min_driver"] = cell.min_driver
    require = nvidia_require_cuda(cell)
    if require:
        labels["io.pinmatrix.nvidia_require_cuda"] = require
    return labels
