"""smoke/session: one loop over the cells for both image runtimes; a cell whose image is absent is named once and
passed over, the others run with the options their image source gives."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pinmatrix.errors import PinmatrixError
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke import session
from pinmatrix.smoke.cellrun import CellRun
from pinmatrix.smoke.runner import HostCell, RunOptions
from pinmatrix.smoke.session import SmokeSettings, _LayoutRoots, _run_in, cell_image_ref

HOST = HostFingerprint.make(hostname="n", gpu_name=None, gpu_count=0, driver=None, capability=None)


class Source:
    where = "runtime fake"

    def __init__(self, present: dict[str, str]) -> None:
        self.present, self.asked = present, []

    def digest(self, ref: str) -> str | None:
        return self.present.get(ref)

    def absent(self, ref: str) -> tuple[str, str]:
        return f"{ref} missing", f"no {ref}"

    def options(self, cell: Any, ref: str, digest: str) -> RunOptions:
        self.asked.append((cell.id, ref, digest))
        return RunOptions(image_digest=digest)


def test_each_cell_runs_in_its_image_or_is_named_and_passed_over(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[tuple[str, str | None]] = []

    def run_cell(cell: Any, catalogue: Any, store: Any, opts: RunOptions, **kw: Any) -> CellRun:
        ran.append((cell.id, opts.image_digest))
        return CellRun(cell)

    monkeypatch.setattr(session, "run_cell", run_cell)
    cells = [HostCell(id="a", name="st a"), HostCell(id="b", name="st b"), HostCell(id="c", name="st c")]
    source = Source({"img:a": "sha256:" + "a" * 64, "img:c": "sha256:" + "c" * 64})
    settings = SmokeSettings(cells=cells, matrix=None, catalogue=[], options=RunOptions(), runtime="fake")
    monkeypatch.setattr(session, "cell_image_ref", lambda cell, s: f"img:{cell.id}")
    lines: list[str] = []
    out = _run_in(source, settings, ResultsStore(tmp_path / "r.sqlite"), HOST, "r1", lines.append)
    assert ran == [("a", "sha256:" + "a" * 64), ("c", "sha256:" + "c" * 64)]
    assert source.asked == [("a", "img:a", "sha256:" + "a" * 64), ("c", "img:c", "sha256:" + "c" * 64)]
    assert out.no_image == ["cell b st b: img:b missing"] and [r.cell.id for r in out.runs] == ["a", "c"]
    assert lines == [f"run r1 on {HOST.label()} (host {HOST.id}), runtime fake", "cell b st b: no img:b; passed over"]
    assert out.exit_code() == 1  # a cell without its image is not a clean run


def test_an_image_runtime_without_cells_of_a_matrix_needs_an_image() -> None:
    settings = SmokeSettings(cells=[HostCell()], matrix=None, catalogue=[], options=RunOptions(), runtime="podman")
    with pytest.raises(PinmatrixError, match=r"^--runtime podman without --cell/--stack/-k needs --image REF$"):
        cell_image_ref(HostCell(), settings)
    assert cell_image_ref(HostCell(), SmokeSettings(cells=[], matrix=None, catalogue=[], options=RunOptions(),
                                                    image="reg/x@sha256:" + "0" * 64)) == "reg/x@sha256:" + "0" * 64


def test_a_layout_without_the_image_says_how_to_get_it(tmp_path: Path) -> None:
    repo = Path(__file__).resolve().parents[3]
    settings = SmokeSettings(cells=[], matrix=None, catalogue=[], smoke_dir=repo / "smoke",
                             options=RunOptions(repo_root=tmp_path), runtime="sandbox")
    roots = _LayoutRoots(settings, "r1", print)
    assert roots.layout == tmp_path / ".pinmatrix" / "oci" and roots.roots == tmp_path / ".pinmatrix" / "roots"
    assert roots.where == f"runtime sandbox, layout {tmp_path / '.pinmatrix' / 'oci'}"
    roots.layout.mkdir(parents=True)
    (roots.layout / "index.json").write_text('{"schemaVersion": 2, "manifests": []}')
    assert roots.digest("reg/x:1") is None
    missing, progress = roots.absent("reg/x:1")
    assert missing == (f"reg/x:1 is not in the OCI layout {roots.layout} (build it with `pinmatrix build --engine "
                       "none`, or unpack its bundle there)") and progress == f"no image reg/x:1 in {roots.layout}"
