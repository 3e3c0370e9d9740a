"""``ci slurm --runtime sandbox``: each task smokes its cell's image by digest from an OCI layout through the sandbox
runtime, as whoever submitted it, after asking its node the sandbox runtime's own question
(``ci slurm-node-check``); a node that cannot start the sandbox leaves one line, and ``ci slurm-collect`` counts
that task's smokes as infrastructure errors, never as the cell's failures."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from k8s_pools import ROOT
from oci_layout import write_layout

from pinmatrix.ci import slurm
from pinmatrix.ci.slurm import SCHEMA, ArrayEntry, Submission, TaskEntry, owned_folder, write_submission
from pinmatrix.ci.slurm_collect import collect
from pinmatrix.cli import main
from pinmatrix.imageref import image_ref
from pinmatrix.matrix.selection import load
from pinmatrix.smoke import sandbox_tool

CELL = "a" * 12
DIGEST = "sha256:" + "1" * 64


@pytest.fixture
def demo_layout(tmp_path: Path) -> tuple[Path, str, str]:
    """An OCI layout holding an image under the first demo cell's build reference: (layout, cell id, digest)."""
    matrix, expansion = load(ROOT / "matrix.toml")
    cell = next(c for c in expansion.cells if c.stack == "demo")
    layout = tmp_path / "oci"
    digest = write_layout(layout, labels={}, content="x", tag=image_ref(cell, matrix.settings.registry))
    return layout, cell.id, digest


def _print(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["ci", "slurm", str(ROOT / "matrix.toml"), "--stack", "demo", "--out", str(tmp_path / "subs"), "--print",
            "--results", str(tmp_path / "none.sqlite"), *extra]
    return subprocess.run([sys.executable, "-m", "pinmatrix", *argv], capture_output=True, text=True, cwd=tmp_path,
                          check=False)


def test_sandbox_is_the_default_and_each_task_checks_its_node_then_smokes_the_digest(
        demo_layout: tuple[Path, str, str], tmp_path: Path) -> None:
    layout, cell, digest = demo_layout
    done = _print(tmp_path, "--layout", str(layout), "--verbose")
    assert done.returncode == 0, done.stderr
    script = done.stdout
    assert re.search(rf"^  0\) CELL={cell} IMAGE=\S+@{digest} DIGEST={digest} ;;", script, re.M), script
    assert len(re.findall(r"no image by digest in the OCI layout", done.stderr)) == 3  # the other demo cells
    check = next(ln for ln in script.splitlines() if "slurm-node-check" in ln)
    smoke = next(ln for ln in script.splitlines() if " smoke " in ln)
    assert script.index(check) < script.index(smoke)
    assert shlex.split(check)[-6:] == ["--runtime", "sandbox", "--roots", "$ROOTS", "--refused", "$TASK/refused"]
    assert smoke.startswith('if [ "$rc" -eq 0 ]; then ')  # a node that said no runs no smoke
    words = shlex.split(smoke.split("then ", 1)[1])
    for flag, value in (("--runtime", "sandbox"), ("--image", "$DIGEST"), ("--layout", str(layout)),
                        ("--roots", "$ROOTS")):
        assert words[words.index(flag) + 1] == value
    assert 'ROOTS="$TASK/roots"' in script  # by default under the task's own folder
    assert not re.search(r"\b(sudo|runuser|setpriv|su)\b", script)  # the job runs as whoever submitted it


def test_a_node_local_roots_folder_is_per_user(demo_layout: tuple[Path, str, str], tmp_path: Path) -> None:
    layout, _, _ = demo_layout
    done = _print(tmp_path, "--layout", str(layout), "--roots", str(tmp_path / "scratch"))
    assert done.returncode == 0, done.stderr
    assert f'ROOTS={tmp_path / "scratch"}/pinmatrix-roots-"$UID"\n' in done.stdout


def test_engine_and_host_runtimes_keep_their_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["ci", "slurm", str(ROOT / "matrix.toml"), "--stack", "demo", "--out", str(tmp_path), "--print"]
    assert main([*base, "--runtime", "podman", "--layout", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().endswith("--layout and --roots are for the sandbox runtime")
    assert main([*base, "--runtime", "host", "--results", str(tmp_path / "r.sqlite")]) == 0
    out = capsys.readouterr().out
    assert "slurm-node-check" not in out and "--runtime host" in out


def test_a_node_without_bwrap_says_why_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sandbox_tool, "_wheel_bwrap", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    refused = tmp_path / "task" / "refused"
    refused.parent.mkdir()
    rc = main(["ci", "slurm-node-check", "--roots", str(tmp_path / "roots"), "--refused", str(refused)])
    assert rc == slurm.CHECK_REFUSED
    line = refused.read_text()
    assert line.count("\n") == 1 and "the sandbox runtime needs bubblewrap >= 0.8.0 (bwrap): found none" in line
    assert capsys.readouterr().err == f"pinmatrix: {line}"
    monkeypatch.undo()
    if sandbox_tool.user_namespaces() is None:
        assert main(["ci", "slurm-node-check", "--roots", str(tmp_path / "roots")]) == 0


def test_roots_on_a_way_another_user_owns_are_refused(tmp_path: Path) -> None:
    assert owned_folder(tmp_path / "mine" / "roots") is None
    assert (tmp_path / "mine" / "roots").stat().st_mode & 0o777 == 0o700
    (tmp_path / "alias").symlink_to(tmp_path / "mine")  # a link in its place, though to a folder of mine
    assert "not a folder of this user's" in str(owned_folder(tmp_path / "alias"))
    if os.geteuid() != 0:
        pytest.skip("hands a folder to another user")
    other = tmp_path / "theirs"
    other.mkdir()
    os.chown(other, 4321, 4321)
    why = owned_folder(other / "roots")
    assert why == (f"--roots {other / 'roots'}: {other} belongs to uid 4321, neither this user (0) nor root: name a "
                   "folder on this node that only this user or root can change")
    assert not (other / "roots").exists()
    (tmp_path / "link").symlink_to(other)  # the resolved way is checked too
    assert "belongs to uid 4321" in str(owned_folder(tmp_path / "link" / "roots"))


def _refused_task(tmp_path: Path, refused: str | None) -> Path:
    directory = tmp_path / "sub"
    task = TaskEntry(index=0, cell_id=CELL, stack="demo", pool="cpu", smokes=("host-probe", "import"), gpus=0,
                     image=f"reg.example/demo@{DIGEST}", image_digest=DIGEST)
    array = ArrayEntry(name="demo-cpu", script=str(directory / "demo-cpu.sbatch"), directory=str(directory / "demo-cpu"),
                       job_id="5", time_limit_min=20, options=(), tasks=(task,))
    write_submission(Submission.model_validate({"schema": SCHEMA, "id": "s", "matrix": "/m.toml", "runtime": "sandbox",
                                                "arrays": (array,)}), directory)
    task_dir = directory / "demo-cpu" / "0"
    task_dir.mkdir(parents=True)
    (task_dir / "finished").write_text(f"{slurm.CHECK_REFUSED}\n")
    (task_dir / "slurm.out").write_text("pinmatrix: the sandbox runtime needs bubblewrap\n")
    if refused is not None:
        (task_dir / "refused").write_text(refused)
    return directory


def _no_scheduler(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(argv, 1, "", "")


def test_a_refused_node_is_an_infrastructure_error_never_the_cells_failure(tmp_path: Path) -> None:
    line = "the sandbox runtime needs bubblewrap >= 0.8.0 (bwrap): found none; install ..."
    got = collect(_refused_task(tmp_path, line + "\n"), _no_scheduler)
    assert [(r.smoke, r.status, r.failure_class) for r in got.records] == [
        ("host-probe", "error", "sandbox-unavailable"), ("import", "error", "sandbox-unavailable")]
    assert all(r.reason.endswith(f"could not start the sandbox: {line}") for r in got.records)
    assert slurm.NODE_REFUSED in slurm.RESUBMIT_CLASSES  # a rerun submits the task again
    # the same end without the node's line: the task failed, as before
    again = collect(_refused_task(tmp_path / "b", None), _no_scheduler)
    assert {(r.status, r.failure_class) for r in again.records} == {("fail", "slurm-task-failed")}
