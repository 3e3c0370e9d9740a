"""The Containerfile path's images carry the assembled images' manifest annotations (image/annotations.py):
render_cell computes them with the same function, build_cell hands them to the engine, and buildah's command
line carries each as ``--annotation=KEY=VALUE``; Docker's classic builder gets none. A real buildah build:
tests/integration/test_containerfile_annotations.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import make_cell, project_copy
from pinmatrix.engine.base import BuildResult, LineSink
from pinmatrix.engine.docker import DockerEngine
from pinmatrix.engine.podman import PodmanEngine
from pinmatrix.image import annotations
from pinmatrix.image.annotations import ImageOrigin, image_annotations
from pinmatrix.image.assembly.rootfs import DEFAULT_SOURCE_DATE_EPOCH
from pinmatrix.image.containerfile import render
from pinmatrix.image.containerfile.render import BuildSettings, build_cell, render_cell

LOCK = "# pinmatrix lock for cell x\nsix==1.17.0 \\\n    --hash=sha256:" + "a" * 64 + "\n"
ORIGIN = ImageOrigin(source="https://forge.invalid/team/stack", revision="c" * 40, epoch=1767225600)


def _cell() -> Any:
    return make_cell("t", ("six==1.17.0",), pins={"torch": "2.11.0", "cuda": "13.0"})


def test_render_gives_the_assembled_images_annotations_which_are_not_inputs(tmp_path: Path) -> None:
    root = project_copy(tmp_path)
    cell = _cell()
    settings = BuildSettings(root=root, cache_dir=tmp_path / "cache", origin=ORIGIN)
    rendered = render_cell(cell, LOCK, "localhost/pinmatrix-base:k", settings, tmp_path / "ctx")
    epoch = cell.base.source_date_epoch if cell.base.source_date_epoch is not None else DEFAULT_SOURCE_DATE_EPOCH
    assert rendered.annotations == image_annotations(cell, ORIGIN, epoch)
    assert rendered.annotations[annotations.SOURCE] == "https://forge.invalid/team/stack"
    assert rendered.annotations[annotations.REVISION] == "c" * 40
    assert rendered.annotations[annotations.CREATED] == "2026-01-01T00:00:00Z"  # SOURCE_DATE_EPOCH's, not the base's
    assert rendered.annotations["io.pinmatrix.cell.id"] == cell.id
    assert rendered.annotations["io.pinmatrix.pin.torch"] == "2.11.0"
    other = BuildSettings(root=root, cache_dir=tmp_path / "cache", origin=ImageOrigin(revision="d" * 40))
    again = render_cell(cell, LOCK, "localhost/pinmatrix-base:k", other, tmp_path / "ctx2")
    assert again.annotations[annotations.REVISION] == "d" * 40 and annotations.SOURCE not in again.annotations
    assert again.inputs == rendered.inputs  # another commit is another manifest, not another build


class _Recording:
    """An engine that records what ``build`` was handed."""

    name = "podman"

    def __init__(self) -> None:
        self.annotations: dict[str, str] | None = None

    def inspect(self, ref: str) -> None:
        return None

    def build(self, context: Path, tag: str, *, source_date_epoch: int | None = None,
              sink: LineSink = lambda line: None, annotations: dict[str, str] | None = None) -> BuildResult:
        self.annotations = annotations
        return BuildResult("sha256:" + "1" * 64, 0.1, 1)


def test_build_cell_hands_the_annotations_to_the_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(render, "ensure_base_image", lambda *args, **kwargs: "localhost/pinmatrix-base:k")
    engine = _Recording()
    cell = _cell()
    settings = BuildSettings(root=project_copy(tmp_path), cache_dir=tmp_path / "cache", origin=ORIGIN)
    result = build_cell(cell, LOCK, engine, settings)  # type: ignore[arg-type]
    assert result.status == "built", result.reason
    assert engine.annotations is not None
    assert engine.annotations[annotations.REVISION] == "c" * 40
    assert engine.annotations["io.pinmatrix.cell.stack"] == "t"


def _argv_of(engine: PodmanEngine | DockerEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
             given: dict[str, str]) -> list[str]:
    seen: list[list[str]] = []

    def stream(argv: list[str], sink: LineSink, extra_env: object = None) -> int:
        seen.append(argv)
        iid = next(a.removeprefix("--iidfile=") for a in argv if a.startswith("--iidfile="))
        Path(iid).write_text("sha256:" + "2" * 64)
        return 0

    monkeypatch.setattr(engine, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(engine, "stream", stream)
    engine.build(tmp_path, "127.0.0.1:5000/t:x", source_date_epoch=0, annotations=given)
    return seen[0]


def test_buildahs_command_line_carries_each_annotation_as_one_word(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    given = {annotations.SOURCE: "https://forge.invalid/a b", "io.pinmatrix.pin.torch": "2.11.0",
             annotations.CREATED: "2026-01-01T00:00:00Z"}
    argv = _argv_of(PodmanEngine({"PATH": str(tmp_path)}), tmp_path, monkeypatch, given)
    assert argv[0] == "/usr/bin/buildah" and argv[1] == "bud" and argv[-1] == str(tmp_path)
    carried = [a for a in argv if a.startswith("--annotation")]
    assert carried == [f"--annotation={key}={value}" for key, value in given.items()]


def test_dockers_classic_builder_gets_no_annotation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = _argv_of(DockerEngine({"PATH": str(tmp_path)}), tmp_path, monkeypatch, {annotations.REVISION: "c" * 40})
    assert not [a for a in argv if "annotation" in a]
