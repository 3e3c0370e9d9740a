"""GitHub Actions: a job matrix with one entry per cell, for ``strategy.matrix: ${{ fromJSON(...) }}``.

Runner labels come from the cell: GPU cells need a self-hosted runner labelled with the cell's GPU
(``gpu-sm_90``) and, when the cell pins a driver, that driver (``nvidia-driver-580.159.04``); CPU-only
cells run on ``--cpu-runner`` (default ``ubuntu-latest``). See docs/ci.md for labelling runners. With a registry,
each entry names the tag ``pinmatrix build --push`` pushes the cell's image to (``image-tag``); with
``--digests`` (after the build) it names the image by digest (``image``), as ``ci k8s`` and ``ci slurm`` do, and
a cell whose image the registry lacks is left out (one summary line). With
``--dispatch FILE`` the command also writes the dispatch record (pinmatrix.ci.dispatch: per cell, the image
digest the registry has and the smokes), which ``pinmatrix results --import --dispatch`` binds uploaded
results to.

A workflow must hand these values to its steps through ``env:`` and never paste ``${{ matrix.* }}`` into a
``run:`` line (docs/workflows/pinmatrix.yml does so): the matrix grammar (names.py) already keeps shell
syntax out of names, but env values and cell names made from them are free text. Every value is checked
once more here for control, bidi and invisible characters.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pinmatrix.cell import Cell
from pinmatrix.ci.dispatch import Dispatch, DispatchJob, dispatch
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import image_ref
from pinmatrix.names import shown, text_problem
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.smoke.runner import plan_smokes

# GitHub Actions: "A matrix can generate a maximum of 256 jobs per workflow run."
MAX_JOBS = 256
_LABEL_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _label(text: str) -> str:
    return _LABEL_SAFE.sub("-", text).strip("-")


def arch_label(platform: str) -> str:
    """uv's target platform -> the runner's architecture label."""
    if platform.startswith(("aarch64", "arm64")):
        return "arm64"
    if platform.startswith(("x86_64", "amd64")):
        return "x64"
    return _label(platform.split("-", 1)[0])


def runner_labels(cell: Cell, *, cpu_runner: Sequence[str] = ("ubuntu-latest",)) -> list[str]:
    if not cell.gpu_required:
        return list(cpu_runner)
    labels = ["self-hosted", "linux", arch_label(cell.platform)]
    gpu = cell.pins.get("gpu")
    if gpu:
        labels.append(f"gpu-{_label(gpu)}")
    driver = cell.pins.get("driver")
    if driver:
        labels.append(f"nvidia-driver-{_label(driver)}")
    return labels


def github_matrix(cells: Sequence[Cell], *, cpu_runner: Sequence[str] = ("ubuntu-latest",),
                  registry: str | None = None, images: dict[str, str] | None = None) -> dict[str, Any]:
    """``registry``: the image prefix; each entry then names the cell's build tag as ``image-tag``. ``images``
    (cell id -> name@sha256:..., looked up in the registry): each entry names its image by digest as ``image``,
    and only the cells it holds are entries."""

    if not cells:
        raise PinmatrixError("ci github: no cells selected")
    if len(cells) > MAX_JOBS:
        raise PinmatrixError(f"ci github: {len(cells)} cells, but a GitHub Actions matrix holds at most {MAX_JOBS} "
                             "jobs: split with --stack or -k")
    if images is not None:
        cells = [c for c in cells if c.id in images]
        if not cells:
            raise PinmatrixError("ci github: no selected cell has an image in the registry (build and push first)")
    include = []
    for cell in cells:
        include.append({
            "cell": cell.id,
            "name": cell.name,
            "stack": cell.stack,
            "gpu": cell.pins.get("gpu", ""),
            "driver": cell.pins.get("driver", ""),
            "gpu-required": cell.gpu_required,
            "runs-on": runner_labels(cell, cpu_runner=cpu_runner),
            "smokes": " ".join(cell.smokes),
            **({"image-tag": image_ref(cell, registry)} if registry else {}),
            **({"image": images[cell.id]} if images is not None else {}),
        })
    for entry in include:
        for key, value in entry.items():
            for text in value if isinstance(value, list) else [value]:
                problem = text_problem(text) if isinstance(text, str) else None
                if problem:
                    raise PinmatrixError(f"ci github: cell {entry['cell']}: {key} {shown(str(text))} {problem}")
    return {"include": include}


def github_dispatch(cells: Sequence[Cell], images: dict[str, str], smoke_dir: Path, run_id: str) -> Dispatch:
    """The dispatch record of a matrix: per job (its cell id), the image by digest where the registry has one
    (``images``: cell id -> name@sha256:...; else the host runtime, no digest) and the smokes it will run."""
    catalogue = load_catalogue(smoke_dir)
    return dispatch("github", run_id, {cell.id: DispatchJob(
        cell_id=cell.id, image_digest=images[cell.id].split("@", 1)[1] if cell.id in images else None,
        smokes=tuple(s.name for s in plan_smokes(cell, catalogue, None))) for cell in cells})
