"""GPU node pools, described once in one TOML file and read by every scheduler target (``ci k8s``,
``ci slurm``): what the machines are (GPU model, compute capability, driver, GPUs per node), and how each
scheduler names them (Kubernetes: GPU feature discovery labels plus extra node labels and tolerations;
Slurm: a partition, node features for ``--constraint`` and the GPU generic-resource type).

Which pools a cell's smokes go to is decided here too (``pool_fits``), so both targets route a cell alike.

```toml
[[pool]]
name = "h200"
gpu_product = "NVIDIA-H200"     # as GPU feature discovery labels it (nvidia.com/gpu.product)
driver = "580.159.04"
capability = "9.0"
gpus = 8                        # GPUs per node
node_selector = { "cloud.example.com/pool" = "h200" }   # Kubernetes only: extra node labels
[pool.slurm]                    # Slurm only; every key optional
partition = "gpu-h200"
features = ["h200", "drv580"]   # default: ["sm_90", "nvidia-driver-580.159.04"]
gres_type = "h200"              # --gres=gpu:h200:N instead of --gres=gpu:N
```
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator
from pydantic_core import ErrorDetails

from pinmatrix.cell import Cell
from pinmatrix.datamodel import Strict
from pinmatrix.names import Name
from pinmatrix.project.document import load_document
from pinmatrix.release.hostmatch import HostFacts, Requirements, host_matches_gpu, host_meets, version_tuple

MAX_POOLS_BYTES = 256 * 1024  # a pools file is a few tables; anything larger is not one


class SlurmRouting(Strict):
    """How a Slurm cluster names a pool's nodes. Every value is a name of the matrix grammar (ASCII
    letters, digits, '.', '_', '-'), so none can carry an sbatch option, a constraint operator or a shell
    word into the job script."""

    partition: Name | None = None
    features: tuple[Name, ...] | None = Field(default=None, min_length=1, max_length=16)
    gres_type: Name | None = None


class NodePool(Strict):
    """A set of identical GPU nodes."""

    name: str = Field(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=20)
    gpu_product: str = Field(min_length=1)  # the nvidia.com/gpu.product label, e.g. NVIDIA-H200
    driver: str = Field(pattern=r"^\d+\.\d+(\.\d+)?$")  # e.g. 580.159.04
    capability: str = Field(pattern=r"^\d+\.\d+$")  # e.g. 9.0
    gpus: int = Field(default=1, ge=1, le=64)  # GPUs per node: a job asks for as many as its smokes need, up to this
    node_selector: dict[str, str] = Field(default_factory=dict)  # Kubernetes: extra labels, e.g. a node pool label
    tolerations: list[dict[str, Any]] = Field(  # Kubernetes
        default_factory=lambda: [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}])
    slurm: SlurmRouting = Field(default_factory=SlurmRouting)

    @field_validator("gpu_product")
    @classmethod
    def _product(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", v) or len(v) > 63:
            raise ValueError(f"{v!r} is not a valid label value (GFD writes products like NVIDIA-H200)")
        return v

    def slurm_features(self) -> tuple[str, ...]:
        """The node features a Slurm job for this pool asks for (all of them: ``--constraint=a&b``):
        the pool's own list, else ``sm_<capability>`` and ``nvidia-driver-<driver>``."""
        if self.slurm.features is not None:
            return self.slurm.features
        return (f"sm_{self.capability.replace('.', '')}", f"nvidia-driver-{self.driver}")


class PoolsDoc(Strict):
    """A node pool file: one or more ``[[pool]]`` tables, each name once."""

    pool: list[NodePool] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> PoolsDoc:
        names = [p.name for p in self.pool]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup:
            raise ValueError(f"pool name {dup!r} appears twice")
        return self


def _pool_key(err: ErrorDetails) -> str:
    """``pool[0].slurm.features.0``: the pool by its index, then its key."""
    loc = tuple(err["loc"])
    if len(loc) >= 2 and loc[0] == "pool" and isinstance(loc[1], int):
        return f"pool[{loc[1]}]" + "".join(f".{p}" for p in loc[2:])
    return ".".join(str(p) for p in loc)


def load_pools(path: Path) -> list[NodePool]:
    """The pools of a node pool file; one located line (``FILE:LINE: pool[0].driver: message``) if malformed."""
    return load_document(path, PoolsDoc, what="a node pool file", max_bytes=MAX_POOLS_BYTES, key=_pool_key,
                         hint="the node pool file").pool


def pool_fits(cell: Cell, pool: NodePool) -> tuple[bool, str]:
    """Whether a cell's smokes belong on a pool: the cell's driver pin (when it has one) is the pool's
    driver, the cell's gpu pin names the pool's GPU, and the image runs there (driver floor, arch)."""
    driver = cell.pins.get("driver")
    if driver and version_tuple(driver) != version_tuple(pool.driver):
        return False, f"the cell pins driver {driver}, pool {pool.name} runs {pool.driver}"
    gpu = cell.pins.get("gpu")
    if gpu and not host_matches_gpu(gpu, pool.capability, pool.gpu_product):
        return False, f"the cell is for {gpu}, pool {pool.name} has capability {pool.capability}"
    ok, reasons = host_meets(
        Requirements(cell.gpu_required, cell.min_driver, cell.compute_capability, tuple(cell.arch_flags)),
        HostFacts(driver=pool.driver, capability=pool.capability, gpu_count=pool.gpus))
    return ok, "; ".join(reasons)


def pools_for(cell: Cell, pools: Sequence[NodePool], skipped: list[str]) -> list[NodePool | None]:
    """Where a cell's smokes go: anywhere (``[None]``) for a CPU cell, else every pool that fits it; each pool
    that does not, and a cell that fits none, gets a line in ``skipped``."""
    if not cell.gpu_required:
        return [None]
    targets: list[NodePool | None] = []
    for pool in pools:
        ok, why = pool_fits(cell, pool)
        if ok:
            targets.append(pool)
        else:
            skipped.append(f"{cell.id} {cell.name} x pool {pool.name}: {why}")
    if not targets:
        skipped.append(f"{cell.id} {cell.name}: no node pool fits" + ("" if pools else " (no --pools)"))
    return targets
