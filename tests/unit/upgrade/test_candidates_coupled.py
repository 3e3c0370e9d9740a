"""Candidates read from the packages' own metadata on a fake index (PEP 658 files): vLLM's exact pins with a
FlashInfer the index does not serve named before anything is locked; torch's triton and CUDA; xFormers' newest
release whose torch requirement accepts the torch; a patch variant kept where its patch still applies; and
``--write`` adds the locked candidates as include entries: every existing cell stays, the comments too."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fake_index import FakeIndex, serve_index
from upgrade_matrix import head

from pinmatrix.index.answers import BoundedHttp
from pinmatrix.index.releases import ReleaseSource
from pinmatrix.index.wheel_metadata import MetadataCache
from pinmatrix.matrix.compat import METADATA_DIR
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import Matrix, load_matrix
from pinmatrix.upgrade.candidates import CandidateTarget, UpgradeCandidate, candidates
from pinmatrix.upgrade.matrix_edit import ProposalRefused, write_proposals
from pinmatrix.upgrade.propose import Proposal, candidate_cells
from pinmatrix.upgrade.sources import UpgradeSources

NOW = datetime(2026, 12, 4, tzinfo=UTC)
T = "2026-09-01T00:00:00Z"
PROJECTS = {
    "vllm": {"0.20.0": (T, ["torch==2.11.0"]), "0.34.0": (T, ["torch==2.14.0", "flashinfer-python==0.7.3"])},
    "torch": {"2.11.0": (T, ["triton==3.6.0", "cuda-toolkit==13.0.2"]),
              "2.14.0": (T, ["triton~=3.8.0; platform_system == 'Linux'", "cuda-toolkit[cublas]==13.0.3"]),
              "2.15.0": (T, ["triton~=3.9.0", "cuda-toolkit[cublas]==13.0.3"])},
    "triton": {"3.6.0": (T, []), "3.8.0": (T, []), "3.9.0": (T, []), "3.9.1rc1": (T, [])},
    "flashinfer-python": {"0.6.8.post1": (T, []), "0.7.2.post1": (T, [])},
    "xformers": {"0.0.34": (T, ["torch==2.10.0"]), "0.0.35": (T, ["torch>=2.10"]), "0.0.36": (T, ["torch==2.16.0"])},
}
MATRIX = """# a comment that --write keeps
""" + head("x86_64-manylinux_2_28") + """
[patches.int64]
package = "xformers"
applies_to = ">=0.0.28,<=0.0.35"
upstream = "https://example.invalid/pr/1"
source = "p.patch"
sha256 = "SHA"

[stacks.v]
smokes = ["host-probe"]
[stacks.v.axes]
cuda = ["13.0"]
torch = ["2.11.0"]
triton = ["3.6.0"]
flashinfer = ["0.6.8.post1"]
vllm = ["0.20.0"]

[stacks.x]
smokes = ["host-probe"]
[stacks.x.axes]
cuda = ["13.0"]  # the CUDA of the default index's torch
torch = ["2.10.0"]
triton = ["3.6.0"]
xformers = ["0.0.34", { version = "0.0.34", patches = ["int64"], label = "int64" }]
"""


def _matrix(tmp_path: Path) -> Matrix:
    (tmp_path / "p.patch").write_text("--- a\n+++ b\n", encoding="utf-8")
    sha = hashlib.sha256((tmp_path / "p.patch").read_bytes()).hexdigest()
    (tmp_path / "matrix.toml").write_text(MATRIX.replace("SHA", sha), encoding="utf-8")
    return load_matrix(tmp_path / "matrix.toml")


def _candidates(tmp_path: Path, url: str, stack: str) -> list[UpgradeCandidate]:
    sources = UpgradeSources(ReleaseSource(tmp_path / "pages", BoundedHttp(timeout=5)),
                             MetadataCache(tmp_path / METADATA_DIR), url, NOW)
    matrix = _matrix(tmp_path)
    return candidates(sources, CandidateTarget(stack, "x86_64", "3.13"), matrix.stacks[stack], limit=3)


def test_vllm_brings_its_exact_pins_and_a_flashinfer_the_index_lacks_is_named(tmp_path: Path) -> None:
    with serve_index(FakeIndex(PROJECTS, pep658=True)) as url:
        vllm, naive = _candidates(tmp_path, url, "v")
    assert vllm.pins == {"vllm": "0.34.0", "torch": "2.14.0", "flashinfer": "0.7.3", "triton": "3.8.0", "cuda": "13.0"}
    assert vllm.problems == ["vllm 0.34.0 requires flashinfer-python==0.7.3, which the index does not serve"]
    assert candidate_cells(_matrix(tmp_path), vllm) == ([], vllm.problems)
    assert naive.label == "newest of each" and naive.pins["torch"] == "2.15.0"
    cells, reasons = candidate_cells(_matrix(tmp_path), naive)
    assert cells == [] and any(r.startswith("vllm 0.34.0 pins torch==2.14.0, not 2.15.0 (vllm 0.34.0's own") for r in reasons)


def test_torch_brings_triton_cuda_and_the_newest_xformers_that_accepts_it(tmp_path: Path) -> None:
    with serve_index(FakeIndex(PROJECTS, pep658=True)) as url:
        cands = _candidates(tmp_path, url, "x")
    top = cands[0]
    assert top.pins == {"torch": "2.15.0", "triton": "3.9.0", "cuda": "13.0", "xformers": "0.0.35"}  # not 0.0.36
    cells, reasons = candidate_cells(_matrix(tmp_path), top)
    assert reasons == []
    assert sorted(c.name for c in cells) == ["x[xformers=0.0.35-int64]", "x[xformers=0.0.35]"]
    patched = next(c for c in cells if c.patches)
    assert patched.patches[0].status == "apply"  # 0.0.35 is still in the patch's applies_to


def test_write_adds_include_entries_and_keeps_every_existing_cell(tmp_path: Path) -> None:
    with serve_index(FakeIndex(PROJECTS, pep658=True)) as url:
        top = _candidates(tmp_path, url, "x")[0]
    matrix = _matrix(tmp_path)
    before = {c.id for c in expand_matrix(matrix).cells}
    text = write_proposals(matrix, [Proposal(top, "locked")])
    assert text.startswith("# a comment that --write keeps") and '# the CUDA of the default index\'s torch' in text
    after = expand_matrix(load_matrix(tmp_path / "matrix.toml"))
    assert before < {c.id for c in after.cells}
    assert {"x[torch=2.15.0,triton=3.9.0,xformers=0.0.35-int64]", "x[torch=2.15.0,triton=3.9.0,xformers=0.0.35]"} <= {
        c.name for c in after.cells}


def test_write_refuses_an_edit_that_breaks_the_matrix_and_writes_nothing(tmp_path: Path) -> None:
    matrix = _matrix(tmp_path)
    text = (tmp_path / "matrix.toml").read_text(encoding="utf-8")
    bad = UpgradeCandidate("x", "torch bad", {"torch": "2.15.0", "xformers": "0.0.36"})  # int64 does not apply: plain only
    bad.pins["triton"] = "not a version"
    with pytest.raises(ProposalRefused, match="would make the matrix invalid"):
        write_proposals(matrix, [Proposal(bad, "locked")])
    assert (tmp_path / "matrix.toml").read_text(encoding="utf-8") == text


def test_write_refuses_an_edit_that_would_drop_an_existing_cell(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import pinmatrix.upgrade.matrix_edit as edit

    matrix = _matrix(tmp_path)
    text = (tmp_path / "matrix.toml").read_text(encoding="utf-8")
    dropped = text.replace('xformers = ["0.0.34", ', 'xformers = [')  # as an edit that replaced a value would
    monkeypatch.setattr(edit, "edited_text", lambda m, p: dropped)
    with pytest.raises(ProposalRefused, match="would drop 1 existing cells"):
        write_proposals(matrix, [])
    assert (tmp_path / "matrix.toml").read_text(encoding="utf-8") == text
