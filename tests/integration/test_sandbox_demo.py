"""The demo cells' smokes inside their own images through the sandbox runtime (``smoke --runtime sandbox``), no
GPU, run by root and by an ordinary user (65534): every smoke passes, each record is an image run by digest that
``promote`` counts under ``host_runs = "refuse"``, and the root is unpacked once per digest. A relative --roots
works."""

from __future__ import annotations

import json
import os
import shutil
import stat
from typing import Any

import pytest
from sandbox_runs import REPO, build_demo, bwrap_usable, open_folder, outside_uid, pinmatrix_as, readable, who_runs

from pinmatrix.matrix.selection import load
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.project.policy import PromotionPolicy
from pinmatrix.release.promote import check_policy
from pinmatrix.results.store import ResultsStore

pytestmark = [pytest.mark.slow, pytest.mark.skipif(bwrap_usable() is not None, reason=str(bwrap_usable()))]


@pytest.fixture(scope="module")
def demo() -> Any:
    with open_folder() as folder:
        built = build_demo(folder)
        readable(folder)
        yield {**built, "folder": folder}


@pytest.mark.parametrize("who", ["root", "user"])
def test_the_demo_cells_smokes_run_in_the_sandbox_and_count_as_image_runs(demo: dict[str, Any], who: str) -> None:
    work = demo["folder"] / f"run-{who}"
    work.mkdir()
    os.chmod(work, 0o777)
    args = ["smoke", str(REPO / "matrix.toml"), "--stack", "demo", "--runtime", "sandbox", "--layout",
            str(demo["layout"]), "--roots", "roots", "--results", str(work / "r.sqlite"),  # a relative --roots
            "--logs", str(work / "logs"), "--smoke-dir", str(REPO / "smoke"), "--json", str(work / "run.json")]
    done = pinmatrix_as(who_runs(who), args, cwd=work)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outside = outside_uid(who)  # root's sandboxes run as nobody outside, an ordinary user's as that user
    assert f"uid 0 inside = {outside} outside" in done.stdout
    records = json.loads((work / "run.json").read_text())
    assert len(records) == 8 and {r["status"] for r in records} == {"pass"}
    for r in records:
        assert r["image_digest"] == demo["digests"][r["cell_id"]]
        env = r["environment"]
        assert env["runtime"] == "sandbox" and "host_vs_lock" not in env
        assert env["sandbox"] == {"gpu": "none", "driver": "none", "uid_outside": outside}
        if r["smoke"] == "host-probe":
            assert env["python"].startswith("3.13.")  # the image's own interpreter
    roots = work / "roots"
    assert stat.S_IMODE(roots.stat().st_mode) == 0o700
    assert stat.S_IMODE((roots / "kernel-cache").stat().st_mode) == 0o700
    for digest in demo["digests"].values():
        cache = roots / "kernel-cache" / digest[7:]
        assert stat.S_IMODE(cache.stat().st_mode) == 0o700 and cache.stat().st_uid == outside

    _, expansion = load(REPO / "matrix.toml")
    store = ResultsStore(work / "r.sqlite")
    for cell in [c for c in expansion.cells if c.stack == "demo"]:
        check = check_policy(cell, PromotionPolicy(host_runs="refuse"), store.query(cell_id=cell.id),
                             catalogue=[s.name for s in load_catalogue(REPO / "smoke")])
        assert check.ok, check.problems
        assert check.digest == demo["digests"][cell.id]

    first = sorted(demo["digests"])[0]
    again = pinmatrix_as(who_runs(who), [*args[:-2], "--rerun", "--cell", first], cwd=work)
    assert again.returncode == 0 and "(reused)" in again.stdout  # unpacked once per digest
    shutil.rmtree(work, ignore_errors=True)


def test_a_roots_folder_the_user_cannot_write_is_one_line(demo: dict[str, Any]) -> None:
    if os.geteuid() != 0:
        pytest.skip("makes a folder of root's for the ordinary user")
    work = demo["folder"] / "run-foreign-roots"
    work.mkdir()
    os.chmod(work, 0o777)
    (work / "roots").mkdir(mode=0o755)  # root's
    os.chmod(work / "roots", 0o755)
    first = sorted(demo["digests"].values())[0]
    done = pinmatrix_as(who_runs("user"), ["smoke", "--runtime", "sandbox", "--image", first, "--layout",
                                     str(demo["layout"]), "--roots", "roots", "--smoke-dir", str(REPO / "smoke"),
                                     "--results", str(work / "r.sqlite"), "--logs", str(work / "logs")], cwd=work)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1] == f"pinmatrix: error: --roots {work / 'roots'}: Permission denied"
