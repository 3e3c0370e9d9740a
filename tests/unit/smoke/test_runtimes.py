"""smoke/runtimes: the runner asks a runtime only what ``SmokeRuntime`` names (its name, a cell's preparation, one
process started per smoke or per batch) and records the name; a runtime module never reaches back into the
runner's own steps (running a cell, a smoke, a batch, recording)."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from pinmatrix.project.catalogue import Smoke
from pinmatrix.results.store import HostFingerprint, ResultsStore
from pinmatrix.smoke.batch import BATCH_ARG, BATCH_ENV
from pinmatrix.smoke.cellrun import run_cells
from pinmatrix.smoke.runner import HostCell, HostProcesses, RunOptions
from pinmatrix.smoke.runtimes import CellSetup, ProcessResult

HOST = HostFingerprint.make(hostname="n", gpu_name=None, gpu_count=0, driver=None, capability=None)
SMOKE_DIR = Path(__file__).resolve().parents[3] / "src" / "pinmatrix" / "smoke"
CATALOGUE = '''
SMOKES = {
    "alone": {"func": "f"},
    "first": {"func": "f", "batch": "g"},
    "second": {"func": "f", "batch": "g"},
}
'''


class Recording:
    """A runtime with the interface's members and nothing else: any other question from the runner fails."""

    name = "recording"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def __getattr__(self, attribute: str) -> Any:
        raise AssertionError(f"the runner asked the runtime for {attribute!r}, which SmokeRuntime does not name")

    def prepare_cell(self, cell: Any, options: RunOptions, echo: Any) -> CellSetup:
        self.calls.append(("prepare", cell.id))
        return CellSetup(host_vs_lock={"identical": False, "said_by": "recording"})

    def start(self, cell: Any, smoke: Smoke, options: RunOptions, env: dict[str, str], log_path: Path,
              result_path: Path, timeout: float, work: Path) -> ProcessResult:
        self.calls.append(("start", smoke.name))
        log_path.write_text("ran\n")
        if smoke.name == BATCH_ARG:  # a batch: each smoke of the plan writes its own result, as _smokelib does
            for entry in json.loads(env[BATCH_ENV])["smokes"]:
                (work / entry["result"]).write_text(json.dumps({"smoke": entry["name"], "status": "pass"}))
                (work / entry["log"]).write_text("ran\n")
            return ProcessResult(0, False, None, 0.2)
        return ProcessResult(0, False, {"status": "pass"}, 0.1)


def test_the_runner_calls_the_runtime_only_through_its_interface(tmp_path: Path) -> None:
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "fake.py").write_text(CATALOGUE)
    runtime = Recording()
    lines: list[str] = []
    options = RunOptions(smoke_dir=tmp_path / "smoke", logs_dir=tmp_path / "logs", runtime=runtime)
    (run,) = run_cells([HostCell()], ResultsStore(tmp_path / "r.sqlite"), options, host=HOST, echo=lines.append)
    assert runtime.calls == [("prepare", "host"), ("start", "alone"), ("start", BATCH_ARG)]
    assert [r.smoke for r in run.records] == ["alone", "first", "second"]
    assert {r.environment["runtime"] for r in run.records} == {"recording"}  # its name, in every record
    assert all(r.environment["host_vs_lock"]["said_by"] == "recording" for r in run.records)
    assert lines[0].endswith(", runtime recording")


def test_the_host_runtime_is_the_default_and_is_named_host() -> None:
    assert RunOptions().runtime == HostProcesses() and RunOptions().runtime.name == "host"
    assert HostProcesses(name="venv").name == "venv"


def _runtime_modules() -> list[Path]:
    """The modules of smoke/ that define a runtime (a class with prepare_cell and start, or one of the image-root
    runtimes built on image_root.ImageRootSmokes), the runner's own aside."""
    found = []
    for path in sorted(SMOKE_DIR.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        defines = any({"prepare_cell", "start"} <= {f.name for f in c.body if isinstance(f, ast.FunctionDef)}
                      for c in classes)
        inherits = any(isinstance(b, ast.Name) and b.id == "ImageRootSmokes" for c in classes for b in c.bases)
        if path.name != "runner.py" and (defines or inherits):
            found.append(path)
    return found


RUNNER_STEPS = {"pinmatrix.smoke.cellrun", "pinmatrix.smoke.batch", "pinmatrix.smoke.session"}
RUNNER_FUNCTIONS = {"run_one", "run_cell", "run_cells", "run_batch", "smoke_record", "skipped_by_host", "plan_smokes",
                    "run_smokes"}


def back_calls(path: Path) -> list[str]:
    """What a runtime module imports of the runner's steps: its modules of cells, batches and sessions, or one of
    its functions that run or record smokes."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module in RUNNER_STEPS:
                out.append(node.module)
            out += [f"{node.module}.{a.name}" for a in node.names if a.name in RUNNER_FUNCTIONS]
        elif isinstance(node, ast.Import):
            out += [a.name for a in node.names if a.name in RUNNER_STEPS]
    return out


def test_no_runtime_calls_back_into_the_runner(tmp_path: Path) -> None:
    modules = _runtime_modules()
    assert {p.name for p in modules} >= {"container.py", "image_root.py", "chroot.py", "sandbox.py"}
    assert {p.name: back_calls(p) for p in modules} == {p.name: [] for p in modules}
    planted = tmp_path / "planted.py"  # the check itself: a runtime that runs a smoke through the runner
    planted.write_text("from pinmatrix.smoke.runner import ProcessResult, run_one\nimport pinmatrix.smoke.batch\n")
    assert back_calls(planted) == ["pinmatrix.smoke.runner.run_one", "pinmatrix.smoke.batch"]


@pytest.mark.parametrize("missing", ["name", "prepare_cell", "start"])
def test_a_runtime_without_a_member_of_the_interface_fails_where_the_runner_asks(tmp_path: Path,
                                                                                 missing: str) -> None:
    """The three members are what a new runtime (a sandbox) has to give: each is used by a run."""
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "fake.py").write_text(CATALOGUE)
    class Without(Recording):
        def __getattribute__(self, attribute: str) -> Any:
            if attribute == missing:
                raise AttributeError(attribute)
            return super().__getattribute__(attribute)

    options = RunOptions(smoke_dir=tmp_path / "smoke", logs_dir=tmp_path / "logs", runtime=Without())
    with pytest.raises(AssertionError, match=f"asked the runtime for '{missing}'"):
        run_cells([HostCell()], ResultsStore(tmp_path / "r.sqlite"), options, host=HOST, echo=lambda _l: None)
