"""`pinmatrix ci slurm` / `ci slurm-collect` on a real single-node Slurm cluster (slurmctld + slurmd +
munged, tests/support/slurm_cluster.py: its own munge key, slurm.conf, gres.conf and spool under a temp dir,
stopped by PID), and the rules that need no cluster: one pools file for k8s and Slurm, routing, and no
matrix text in an sbatch option or a shell word.

The node declares two GPUs as generic resources (links to /dev/null), so a CPU-only machine schedules a
task that asks for ``--gres=gpu:1`` and the smoke itself says "no GPU". The host runtime runs the smokes;
the demo cells' wheels are stand-ins built here (a module and its metadata under the pinned name and
version), so nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import subprocess
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from promotion import _matrix_for, push_image  # noqa: F401 - the fixture
from slurm_cluster import NODE, slurm_cluster

from conftest import require_binaries
from pinmatrix.ci.k8s import gfd_labels
from pinmatrix.ci.pools import load_pools
from pinmatrix.ci.slurm import ScriptSettings, plain_path, plan, render_script
from pinmatrix.ci.slurm_collect import parse_scontrol, state_from_output
from pinmatrix.cli import main
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import load
from pinmatrix.results.store import ResultsStore

ROOT = Path(__file__).resolve().parents[2]

POOLS = """
[[pool]]
name = "h200"
gpu_product = "NVIDIA-H200"
driver = "580.159.04"
capability = "9.0"
gpus = 2
node_selector = { "cloud.example.com/pool" = "h200" }
[pool.slurm]
partition = "gpu"

[[pool]]
name = "b200"
gpu_product = "NVIDIA-B200"
driver = "590.48.01"
capability = "10.0"
[pool.slurm]
partition = "gpu"
features = ["b200"]
gres_type = "b200"
"""

EXTRA_STACKS = """
[stacks.slurm-gpu]
description = "a GPU cell for the fake-GPU node: its GPU smoke must be skipped by the smoke, not refused by Slurm"
smokes = ["host-probe", "unified-memory-leak"]
[stacks.slurm-gpu.packages]
six = ["1.17.0"]
[stacks.slurm-gpu.axes]
driver = ["580.159.04"]
cuda = ["13.0"]
gpu = ["sm_90"]
arch = ["9.0"]

[stacks.slurm-gpu-slow]
description = "a GPU cell whose second smoke sleeps: its task is preempted by a job of a higher partition"
smokes = ["host-probe", "slurm-sleep"]
[stacks.slurm-gpu-slow.packages]
six = ["1.16.0"]
[stacks.slurm-gpu-slow.axes]
driver = ["580.159.04"]
cuda = ["13.0"]
gpu = ["sm_90"]
arch = ["9.0"]

[stacks.slurm-slow]
description = "a smoke that outlives its task: one task cancelled, one past its time limit"
gpu_required = false
smokes = ["host-probe", "slurm-sleep"]
[stacks.slurm-slow.packages]
six = ["1.16.0", "1.17.0"]
"""

SLEEP_SMOKE = '''"""A smoke that sleeps for minutes, to outlive a Slurm task (tests/integration/test_ci_slurm.py)."""
import time

from _smokelib import Context, main

SMOKES = {"slurm-sleep": {"func": "sleep", "description": "sleeps 300 s", "needs": {}, "timeout_s": 600}}


def sleep(ctx: Context) -> None:
    time.sleep(300)


if __name__ == "__main__":
    main(SMOKES, globals())
'''


def _demo_stack() -> str:
    text = (ROOT / "matrix.toml").read_text()
    m = re.search(r"^\[stacks\.demo\]\n.*?(?=^\[stacks\.(?!demo[.\]]))", text, re.S | re.M)
    assert m, "the shipped matrix has a demo stack"
    return m.group(0)


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A matrix of the shipped demo stack plus a GPU stack and a slow stack; the smoke catalogue plus the
    sleep smoke; stand-in wheels per cell; the pools file."""
    root = tmp_path_factory.mktemp("proj")
    header = '[matrix]\nname = "slurm-test"\npython = "3.13"\nplatform = "x86_64-manylinux_2_28"\n' \
             'registry = "127.0.0.1:5000/pinmatrix"\n\n'
    (root / "matrix.toml").write_text(header + _demo_stack() + EXTRA_STACKS)
    (root / "smoke").mkdir()
    for path in (ROOT / "smoke").glob("*.py"):
        (root / "smoke" / path.name).symlink_to(path)
    (root / "smoke" / "slurm_sleep.py").write_text(SLEEP_SMOKE)
    (root / "pools.toml").write_text(POOLS)
    _, expansion = load(root / "matrix.toml")
    (root / "locks").mkdir()
    for cell in expansion.cells:
        d = root / "wheels" / cell.id
        d.mkdir(parents=True)
        lock = ""
        for req in cell.requirements:
            name, version = req.split("==")
            _stand_in_wheel(d, name, version)
            digest = hashlib.sha256((d / f"{name}-{version}-py3-none-any.whl").read_bytes()).hexdigest()
            lock += f"{name}=={version} \\\n    --hash=sha256:{digest}\n"
        (root / "locks" / f"{cell.id}.txt").write_text(lock)  # `smoke --wheels` installs only the lock's wheels
    return root


def _stand_in_wheel(directory: Path, name: str, version: str) -> None:
    dist = f"{name}-{version}.dist-info"
    with zipfile.ZipFile(directory / f"{name}-{version}-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{name}.py", f"__version__ = {version!r}\n")
        zf.writestr(f"{dist}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        zf.writestr(f"{dist}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        zf.writestr(f"{dist}/top_level.txt", f"{name}\n")
        zf.writestr(f"{dist}/RECORD", "")


# ------------------------------------------------------------------------------------------- the cluster


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The one-node cluster of tests/support/slurm_cluster.py under a temp dir; the env that reaches it."""
    require_binaries("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel")
    with slurm_cluster(tmp_path_factory.mktemp("slurm") / "cluster") as env:
        yield env


def _squeue_states(job_id: str) -> dict[str, str]:
    proc = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%i %T"], capture_output=True, text=True)
    return dict(line.split() for line in proc.stdout.splitlines() if line.strip())


def _job_id(out: str, array: str) -> str:
    m = re.search(rf"submitted {re.escape(array)}: job (\d+)", out)
    assert m, out
    return m.group(1)


def _sleeping(task_dir: Path) -> bool:
    """The task recorded its first smoke and started the sleep."""
    db = task_dir / "results.sqlite"
    return db.exists() and bool(ResultsStore(db).query(smoke="host-probe")) and \
        bool(list((task_dir / "logs").rglob("slurm-sleep.log")))


def _until(what: str, check, timeout: float = 60) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {timeout:g} s")
        time.sleep(0.5)


@pytest.mark.slurm
@pytest.mark.slow
def test_demo_and_gpu_smokes_through_slurm_arrays(slurm: dict[str, str], project: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SLURM_CONF", slurm["SLURM_CONF"])
    monkeypatch.chdir(tmp_path)
    matrix, out, store = project / "matrix.toml", tmp_path / "subs", tmp_path / "r.sqlite"
    common = [str(matrix), "--pools", str(project / "pools.toml"), "--wheels", str(project / "wheels"),
              "--out", str(out), "--results", str(store), "--cpus-per-task", "1"]

    # The slow stacks first: three tasks whose second smoke sleeps past the 1-minute limit.
    assert main(["ci", "slurm", *common, "-k", "slow", "--time-limit", "1", "--submission-id", "slow"]) == 0
    captured = capsys.readouterr()
    slow_job, gpu_slow_job = _job_id(captured.out, "slurm-slow-cpu"), _job_id(captured.out, "slurm-gpu-slow-h200")
    assert "time limit 1 min is shorter than its smokes' timeouts" in captured.err

    assert main(["ci", "slurm", *common, "-k", "demo or slurm-gpu and not slow", "--submission-id", "fast",
                 "--verbose"]) == 0
    captured = capsys.readouterr()
    demo_job, gpu_job = _job_id(captured.out, "demo-cpu"), _job_id(captured.out, "slurm-gpu-h200")
    # the b200 pool does not fit the sm_90 cell: named, not submitted
    assert re.search(r"skipped \w+ slurm-gpu x pool b200: the cell pins driver 580.159.04", captured.err)
    gpu_script = (out / "fast" / "slurm-gpu-h200.sbatch").read_text()
    for option in ("--partition=gpu", "--constraint=sm_90&nvidia-driver-580.159.04", "--gres=gpu:1",
                   "--array=0-0", "--time=12"):  # 120 s + 300 s smokes, plus the 300 s margin
        assert f"#SBATCH {option}\n" in gpu_script
    assert "#SBATCH --gres" not in (out / "fast" / "demo-cpu.sbatch").read_text()

    # Cancel slow task 0 once its first smoke is recorded and the sleep is running.
    slow_dir, gpu_slow_dir = out / "slow" / "slurm-slow-cpu", out / "slow" / "slurm-gpu-slow-h200"
    _until("slow task 0 reaching its sleep", lambda: _sleeping(slow_dir / "0"))
    assert _squeue_states(slow_job).get(f"{slow_job}_0") == "RUNNING"
    # Still running: collect names it and records nothing for it.
    assert main(["ci", "slurm-collect", str(out / "slow"), "--json", str(tmp_path / "early.json")]) == 1
    assert "not finished: slurm-slow-cpu task 0" in capsys.readouterr().err
    subprocess.run(["scancel", f"{slow_job}_0"], check=True)

    assert main(["ci", "slurm-collect", str(out / "fast"), "--wait", "--wait-timeout", "90",
                 "--json", str(tmp_path / "fast.json")]) == 0
    assert "collected 10 result(s) from 5 of 5 task(s)" in capsys.readouterr().out
    fast = json.loads((tmp_path / "fast.json").read_text())
    demo = [r for r in fast if r["stack"] == "demo"]
    assert len(demo) == 8 and all(r["status"] == "pass" for r in demo), [(r["smoke"], r["reason"]) for r in demo]
    gpu = {r["smoke"]: r for r in fast if r["stack"] == "slurm-gpu"}
    assert gpu["host-probe"]["status"] == "pass"
    # scheduled on the fake GPUs, and skipped by the smoke itself
    assert (gpu["unified-memory-leak"]["status"], gpu["unified-memory-leak"]["reason"]) == ("skip", "no GPU")
    for r in fast:
        s = r["environment"]["slurm"]
        assert r["host"]["hostname"] == NODE and s["node"] == NODE and s["state"] == "COMPLETED"
        assert s["array_job_id"] in (demo_job, gpu_job) and r["run_id"] == f"slurm-{s['array_job_id']}_{s['array_task_id']}"
        assert s["job_id"] and s["pool"] == ("h200" if r["stack"] == "slurm-gpu" else "cpu")
    assert len({(r["cell_id"], r["smoke"]) for r in fast}) == 10

    # A job of the higher partition that needs both GPUs preempts the sleeping GPU task.
    _until("the slow GPU task reaching its sleep", lambda: _sleeping(gpu_slow_dir / "0"))
    subprocess.run(["sbatch", "--parsable", "--partition=urgent", "--gres=gpu:2", "--output=/dev/null",
                    "--wrap=true"], check=True, capture_output=True)

    assert main(["ci", "slurm-collect", str(out / "slow"), "--wait", "--wait-timeout", "110",
                 "--json", str(tmp_path / "slow.json")]) == 0
    summary = capsys.readouterr().out
    assert "collected 6 result(s) from 3 of 3 task(s)" in summary, summary
    for cls in ("slurm-cancelled", "slurm-timeout", "slurm-preempted"):
        assert f"1 fail [{cls}]" in summary
    slow = json.loads((tmp_path / "slow.json").read_text())
    tasks: dict[tuple[str, int], dict[str, dict]] = {}
    for r in slow:
        s = r["environment"]["slurm"]
        tasks.setdefault((s["array"], s["array_task_id"]), {})[r["smoke"]] = r
    assert all(t["host-probe"]["status"] == "pass" for t in tasks.values())  # measured before each end
    cancelled = tasks[("slurm-slow-cpu", 0)]["slurm-sleep"]
    timed_out = tasks[("slurm-slow-cpu", 1)]["slurm-sleep"]
    preempted = tasks[("slurm-gpu-slow-h200", 0)]["slurm-sleep"]
    assert (cancelled["status"], cancelled["failure_class"]) == ("fail", "slurm-cancelled")
    assert cancelled["environment"]["slurm"]["state"] == "CANCELLED"
    assert (timed_out["status"], timed_out["failure_class"]) == ("fail", "slurm-timeout")
    assert "ended TIMEOUT at its time limit (1 min)" in timed_out["reason"] and f"on {NODE}" in timed_out["reason"]
    assert (preempted["status"], preempted["failure_class"]) == ("fail", "slurm-preempted")
    assert preempted["environment"]["slurm"]["array_job_id"] == gpu_slow_job
    assert cancelled["host"]["hostname"] == NODE  # the measured host of the task's first smoke
    # slurmstepd's own line in each task's output says the same, for when the controller has forgotten
    stepd = {name: state_from_output((d / "slurm.out").read_text())
             for name, d in (("cancelled", slow_dir / "0"), ("timeout", slow_dir / "1"),
                             ("preempted", gpu_slow_dir / "0"))}
    assert stepd["cancelled"] is not None and stepd["cancelled"].state == "CANCELLED" and stepd["cancelled"].node == NODE
    assert stepd["timeout"] is not None and stepd["timeout"].state == "TIMEOUT"
    assert stepd["preempted"] is not None and stepd["preempted"].state == "PREEMPTED"

    # Import and report.
    assert main(["results", "--results", str(store), "--import", str(tmp_path / "fast.json"),
                 str(tmp_path / "slow.json")]) == 0
    assert "imported 16 record(s)" in capsys.readouterr().out
    assert main(["report", str(matrix), "--results", str(store), "--out", str(tmp_path / "report"), "-f", "md"]) in (0, 1)
    capsys.readouterr()
    md = next((tmp_path / "report").glob("*.md")).read_text()
    assert all(cls in md for cls in ("slurm-timeout", "slurm-cancelled", "slurm-preempted"))

    # A rerun submits only what has no result on the digest: nothing of the fast submission; of the slow one,
    # the cancelled and the preempted task (the scheduler ended them), not the one that ran out of time.
    assert main(["ci", "slurm", *common, "-k", "demo or slurm-gpu and not slow", "--submission-id", "fast2"]) == 0
    assert "nothing to submit: every task is recorded" in capsys.readouterr().err
    assert main(["ci", "slurm", *common, "-k", "slow", "--submission-id", "slow2", "--print", "--verbose"]) == 0
    printed = capsys.readouterr()
    assert not (out / "slow2").exists()  # --print writes nothing
    again = dict(re.findall(r"# pinmatrix ci slurm: array (\S+), 1 task\(s\).*?\n  0\) CELL=(\w+) ", printed.out,
                            re.S))
    assert again == {"slurm-slow-cpu": cancelled["cell_id"], "slurm-gpu-slow-h200": preempted["cell_id"]}
    assert "nothing written, nothing submitted" in printed.err
    assert printed.out.count("#SBATCH --array=0-0") == 2
    assert re.search(rf"recorded {timed_out['cell_id']} .* every smoke recorded on the host runtime", printed.err)


# ------------------------------------------------------------------------------------------- no cluster


def test_one_pools_file_for_k8s_and_slurm(tmp_path: Path) -> None:
    path = tmp_path / "pools.toml"
    path.write_text(POOLS)
    h200, b200 = load_pools(path)
    assert gfd_labels(h200)["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert gfd_labels(h200)["cloud.example.com/pool"] == "h200"
    assert h200.slurm_features() == ("sm_90", "nvidia-driver-580.159.04")
    assert b200.slurm_features() == ("b200",) and b200.slurm.gres_type == "b200"
    for bad, key in (('features = ["sm_90&gpu"]', "pool[0].slurm.features.0"),
                     ('partition = "gpu --wrap=id"', "pool[0].slurm.partition"),
                     ('partion = "gpu"', "pool[0].slurm.partion")):
        path.write_text(POOLS.replace('partition = "gpu"', bad, 1))
        with pytest.raises(PinmatrixError) as err:
            load_pools(path)
        assert re.match(rf"{re.escape(str(path))}:\d+: {re.escape(key)}: ", str(err.value)), err.value
    path.write_text(POOLS + "\n[slurm]\nx = 1\n")
    with pytest.raises(PinmatrixError, match="slurm: unknown key"):
        load_pools(path)


@pytest.fixture(scope="module")
def shipped():  # noqa: ANN201 - the shipped matrix's expansion, loaded once
    return load(ROOT / "matrix.toml")[1]


def test_routing_gres_and_time_limits_from_the_smokes(shipped, tmp_path: Path) -> None:  # noqa: ANN001
    """The shipped matrix's GPU stacks on one pool: GPUs from the smokes' needs (xformers-seqpar-2gpu
    wants 2), time limits from the sum of their timeouts plus the margin, cells the pool cannot run left out."""
    from pinmatrix.project.catalogue import load_catalogue
    from pinmatrix.smoke.runner import plan_smokes

    expansion = shipped
    path = tmp_path / "pools.toml"
    path.write_text(POOLS.replace("gpus = 2", "gpus = 8"))
    pools = load_pools(path)
    settings = ScriptSettings(matrix=ROOT / "matrix.toml", submission_dir=tmp_path / "sub", smoke_dir=ROOT / "smoke")
    cells = [c for c in expansion.cells if c.stack in ("h200", "xformers-tiled-matmul", "demo")]
    planned = plan(cells, pools, settings)
    arrays = {a.name: a for a in planned.arrays}
    assert set(arrays) == {"h200-h200", "xformers-tiled-matmul-h200", "demo-cpu"}
    assert "--gres=gpu:1" in arrays["h200-h200"].options
    assert "--gres=gpu:2" in arrays["xformers-tiled-matmul-h200"].options
    catalogue = load_catalogue(ROOT / "smoke")
    h200 = next(c for c in cells if c.stack == "h200")
    total = sum(s.timeout_s for s in plan_smokes(h200, catalogue, None))
    assert arrays["h200-h200"].time_limit_min == -(-(total + 300) // 60)
    assert f"--time={arrays['h200-h200'].time_limit_min}" in arrays["h200-h200"].options
    assert len(arrays["demo-cpu"].tasks) == 4 and not any(o.startswith("--gres") for o in arrays["demo-cpu"].options)
    assert any("x pool b200" in s for s in planned.skipped)
    # --print for an image runtime: the image by digest, pulled first; no image, no task
    digest = "sha256:" + "ab" * 32
    images = {c.id: f"127.0.0.1:5000/pinmatrix/h200@{digest}" for c in cells if c.stack == "h200"}
    img = plan(cells, pools, ScriptSettings(matrix=ROOT / "matrix.toml", submission_dir=tmp_path / "s2",
                                            runtime="podman", smoke_dir=ROOT / "smoke"), images=images)
    assert [a.name for a in img.arrays] == ["h200-h200"]
    script = render_script(img.arrays[0], settings, "podman")
    assert f"IMAGE=127.0.0.1:5000/pinmatrix/h200@{digest}" in script
    assert 'podman pull "$IMAGE"' in script and '--runtime podman --image "$IMAGE"' in script
    assert any("no image by digest" in s for s in img.skipped)


def test_matrix_text_never_becomes_an_option_or_a_shell_word(shipped, tmp_path: Path,  # noqa: ANN001
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    expansion = shipped
    demo = [c for c in expansion.cells if c.stack == "demo"]
    odd = tmp_path / "with space"
    odd.mkdir()
    with pytest.raises(PinmatrixError, match="must be a plain path"):
        plain_path(odd, "--wheels")
    with pytest.raises(PinmatrixError, match="must be a plain path"):
        plan(demo, [], ScriptSettings(matrix=ROOT / "matrix.toml", submission_dir=odd, smoke_dir=ROOT / "smoke"))
    settings = ScriptSettings(matrix=ROOT / "matrix.toml", submission_dir=tmp_path / "s", smoke_dir=ROOT / "smoke",
                              keyword="host-probe or x';id;`id`'")
    (array,) = plan(demo, [], settings).arrays
    script = render_script(array, settings, "host")
    smoke_line = next(ln for ln in script.splitlines() if " smoke " in ln)
    words = shlex.split(smoke_line)
    assert words[words.index("--smoke") + 1] == "host-probe or x';id;`id`'"  # one quoted shell word
    assert "-k" not in words  # smoke's -k chooses cells; --smoke the smokes
    sbatch = [ln for ln in script.splitlines() if ln.startswith("#SBATCH")]
    assert all(re.fullmatch(r"#SBATCH --[a-z-]+(=[A-Za-z0-9._+/%&:-]+)?", ln) for ln in sbatch), sbatch
    for cell in demo:  # names (brackets, commas, '=') stay out of the script; ids go in
        assert cell.name not in script and f"CELL={cell.id} " in script
    bad = ScriptSettings(matrix=ROOT / "matrix.toml", submission_dir=tmp_path / "s3", smoke_dir=ROOT / "smoke",
                         keyword="host-probe or a\x1b]0;x")
    (array,) = plan(demo, [], bad).arrays
    with pytest.raises(PinmatrixError, match="U\\+001B ESCAPE"):
        render_script(array, bad, "host")
    base = ["ci", "slurm", str(ROOT / "matrix.toml"), "--stack", "demo", "--runtime", "host", "--out", str(tmp_path),
            "--print"]
    for extra, message in ((["--submission-id", "a b"], "--submission-id 'a b': ' ' is not allowed"),
                           (["--cpu-partition", "cpu --wrap=id"], "--cpu-partition 'cpu --wrap=id'"),
                           (["--cpus-per-task", "0"], "--cpus-per-task 0: expected 1 to 1024")):
        assert main([*base, *extra]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "submission.json").write_text('{"schema": "pinmatrix-slurm-submission/1", "id": "x;id"}')
    assert main(["ci", "slurm-collect", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "submission.json: id: " in err[0], err


def test_scheduler_answers_parsed() -> None:
    """`scontrol show job -o` lines as Slurm 22.05 prints them (a pending range, a timed-out and a cancelled
    task), and slurmstepd's lines."""
    text = ("JobId=7 ArrayJobId=7 ArrayTaskId=3-5%2 JobName=x JobState=PENDING Reason=Resources "
            "NodeList=(null) ExitCode=0:0 TimeLimit=00:01:00\n"
            "JobId=9 ArrayJobId=7 ArrayTaskId=1 JobName=x JobState=TIMEOUT Reason=TimeLimit NodeList=n1 "
            "ExitCode=0:15 TimeLimit=00:01:00\n"
            "JobId=8 ArrayJobId=7 ArrayTaskId=0 JobState=CANCELLED NodeList=n1 ExitCode=0:15\n"
            "JobId=12 ArrayJobId=11 ArrayTaskId=0 JobState=COMPLETED NodeList=n2\n")
    states = parse_scontrol(text, "7")
    assert sorted(states) == [0, 1, 3, 4, 5]
    assert states[4].state == "PENDING" and states[4].node is None
    assert (states[1].state, states[1].job_id, states[1].node) == ("TIMEOUT", "9", "n1")
    assert states[0].state == "CANCELLED"
    line = "slurmstepd-n1: error: *** JOB 44 ON n1 CANCELLED AT 2026-12-01T14:00:42 DUE TO {} ***"
    assert state_from_output(line.format("PREEMPTION")).state == "PREEMPTED"  # type: ignore[union-attr]
    assert state_from_output(line.format("NODE FAILURE")).state == "NODE_FAIL"  # type: ignore[union-attr]
    assert state_from_output(line.replace(" DUE TO {}", "")).state == "CANCELLED"  # type: ignore[union-attr]
    assert state_from_output("all fine\n") is None


@pytest.mark.registry
def test_image_runtime_tasks_pull_the_pushed_digest(oci_registry: str, tmp_path: Path,  # noqa: F811
                                                    capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """--runtime podman: each task's image is the registry's digest for the cell's build tag, pulled by
    digest; a cell never pushed is named and not submitted."""
    monkeypatch.chdir(tmp_path)
    matrix_path = _matrix_for(tmp_path, f"{oci_registry}/slurmtest")
    (tmp_path / "smoke").symlink_to(ROOT / "smoke")
    _, expansion = load(matrix_path)
    h200 = [c for c in expansion.cells if c.stack == "h200"]
    digest = push_image(oci_registry, "slurmtest/h200", h200[0].id, "h200 image for slurm")
    (tmp_path / "pools.toml").write_text(POOLS)
    rc = main(["ci", "slurm", str(matrix_path), "--stack", "h200", "--pools", "pools.toml", "--runtime", "podman",
               "--out", "subs", "--submission-id", "img", "--print", "--verbose"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    image = f"{oci_registry}/slurmtest/h200@{digest}"
    assert f"IMAGE={image} " in captured.out and 'podman pull "$IMAGE"' in captured.out
    assert f"skipped {h200[1].id}" in captured.err and "no image by digest" in captured.err
    assert re.findall(r"^  (\d+)\) CELL=(\w+) IMAGE=(\S+) ", captured.out, re.M) == [("0", h200[0].id, image)]
    assert not (tmp_path / "subs").exists()  # --print writes nothing
