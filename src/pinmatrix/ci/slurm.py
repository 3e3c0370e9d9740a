"""Slurm: the smokes of each stack as job arrays, one task per cell x GPU node pool, routed by the cell's needs.

A pool (pinmatrix.ci.pools, the file ``ci k8s`` reads) names its nodes to Slurm by partition, node features
(``--constraint=a&b``) and GPU generic-resource type; a task asks for as many GPUs as its smokes need (up to
the pool's) and for the sum of its smokes' timeouts plus a margin. A Slurm array's tasks share one partition,
constraint, gres and time limit, so a stack gets one array per pool it is routed to (one array when all its
cells fit the same pools, the usual case).

Each task runs ``pinmatrix smoke --cell ID`` (the host runtime with ``--wheels``, the cell's image by digest
through podman/docker, pulled first, or through the sandbox runtime from an OCI layout the nodes read) with a
store, logs and ``--json`` results of its own under the submission directory, which the submitting side reads
back (pinmatrix.ci.slurm_collect). A sandbox task runs as whoever submitted it (no sudo, no root in the script):
it first asks the node the sandbox runtime's own question (``ci slurm-node-check``: bubblewrap, user namespaces,
a roots folder this user owns, under folders only this user or root own); a node that says no leaves one line in
the task's ``refused`` file, and its smokes are infrastructure errors, never the cell's failures. Nothing from the
matrix becomes an sbatch option or a shell word unchecked: every ``#SBATCH`` value is a number or a name of
the matrix grammar (names.py), cell ids are checked hex, paths must be plain (letters, digits, ``._+/-``), and
every shell word is quoted with shlex.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import Field

from pinmatrix.atomic import atomic_write_text
from pinmatrix.cell import Cell
from pinmatrix.ci.dispatch import Dispatch, DispatchJob, dispatch, write_dispatch
from pinmatrix.ci.pools import NodePool, pools_for
from pinmatrix.ci.summary import skipped_summary
from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.imageref import ImageRef, image_ref
from pinmatrix.names import Name, check_name, shown, text_problem
from pinmatrix.oci.unpack import image_digest
from pinmatrix.project.catalogue import Smoke, load_catalogue
from pinmatrix.results.store import ResultsStore, SmokeRecord
from pinmatrix.smoke.runner import effective_timeout, plan_smokes
from pinmatrix.smoke.sandbox import check_host
from pinmatrix.smoke.sandbox_tool import find_bwrap

SCHEMA = "pinmatrix-slurm-submission/1"
MANIFEST = "submission.json"
DISPATCH = "dispatch.json"  # the dispatch record (pinmatrix.ci.dispatch): what each task was given
CPU_POOL = "cpu"
MARGIN_S = {"host": 300, "podman": 900, "docker": 900, "sandbox": 900}  # start-up, overlay / pull / unpack
REFUSED = "refused"  # a task's file: the one line of a node that cannot start the task's runtime
NODE_REFUSED = "sandbox-unavailable"  # the failure class of its smokes (status error: infrastructure)
CHECK_REFUSED = 3  # the exit status of `ci slurm-node-check` on a node that cannot start the runtime
MAX_TASKS = 1000  # Slurm's default MaxArraySize is 1001 (indexes 0-1000)
# Scheduler-caused ends that say nothing about the cell: a rerun submits those tasks again.
RESUBMIT_CLASSES = frozenset({"slurm-cancelled", "slurm-preempted", "slurm-node-fail", "slurm-boot-fail",
                              "slurm-lost", "slurm-no-result", NODE_REFUSED})
_CELL_ID = r"^[0-9a-f]{12}$"
_JOB_ID = r"^[0-9]+$"
_PLAIN_PATH = re.compile(r"/[A-Za-z0-9._+/-]*")
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]*@sha256:[0-9a-f]{64}")
Runtime = Literal["host", "podman", "docker", "sandbox"]


class TaskEntry(Strict):
    """One array task: one cell on one pool."""

    index: int = Field(ge=0, le=MAX_TASKS)
    cell_id: str = Field(pattern=_CELL_ID)
    stack: Name
    pool: Name
    smokes: tuple[Name, ...]
    gpus: int = Field(ge=0, le=64)
    image: str | None = Field(default=None, pattern=f"^{_IMAGE.pattern}$")
    image_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    wheels: str | None = None
    # What the pool declares (for the record of a task that died before it measured its host).
    gpu_product: str | None = None
    driver: str | None = None
    capability: str | None = None


class ArrayEntry(Strict):
    name: Name
    script: str
    directory: str
    job_id: str | None = Field(default=None, pattern=_JOB_ID)
    time_limit_min: int = Field(ge=1)
    options: tuple[str, ...]
    tasks: tuple[TaskEntry, ...]


class Submission(Strict):
    schema_: Literal["pinmatrix-slurm-submission/1"] = Field(alias="schema")
    id: Name
    matrix: str
    runtime: Runtime
    arrays: tuple[ArrayEntry, ...]


@dataclass
class SlurmPlan:
    arrays: list[ArrayEntry] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # cell x pool not submitted, with the reason
    recorded: list[str] = field(default_factory=list)  # cell x pool with every smoke recorded on this digest
    warnings: list[str] = field(default_factory=list)

    def said(self, verbose: bool) -> list[str]:
        """What was left out: a line per skipped and per recorded cell x pool with ``verbose``, else one summary
        line of each; every warning on its own line."""
        if verbose:
            lines = [f"skipped {line}" for line in self.skipped] + [f"recorded {line}" for line in self.recorded]
        else:
            lines = list(filter(None, [skipped_summary("ci slurm", self.skipped)]))
            if self.recorded:
                lines.append(f"ci slurm: {len(self.recorded)} cell x pool(s) not submitted, every smoke recorded on "
                             "the same image (--rerun submits them; --verbose lists each)")
        return lines + [f"warning: {line}" for line in self.warnings]


@dataclass(frozen=True)
class ScriptSettings:
    """What every task script of one submission shares."""

    matrix: Path
    submission_dir: Path
    runtime: Runtime = "host"
    pinmatrix: tuple[str, ...] = (sys.executable, "-m", "pinmatrix")
    smoke_dir: Path | None = None
    cpus_per_task: int = 2
    cpu_partition: str | None = None
    time_limit_min: int | None = None  # instead of the smokes' own sum (a partition's MaxTime, tests)
    keyword: str | None = None  # pinmatrix smoke --smoke: the smokes whose names match
    layout: Path | None = None  # sandbox: the OCI layout the nodes read the images from
    roots: Path | None = None  # sandbox: a node-local folder for per-user roots (None: each task's own folder)


def checked_name(value: str, what: str) -> str:
    """A name of the matrix grammar, or one error line naming ``what``."""
    try:
        return check_name(value, what)
    except ValueError as err:
        raise PinmatrixError(f"ci slurm: {err}") from None


def plain_path(path: Path, what: str) -> str:
    """``path`` made absolute; refused unless it is plain (it goes into #SBATCH lines and shell words)."""
    text = str(Path(path).resolve())
    if not _PLAIN_PATH.fullmatch(text) or "/-" in text:
        raise PinmatrixError(f"ci slurm: {what} {shown(text)} must be a plain path (letters, digits, '.', '_', "
                             "'+', '-' and '/', no part starting with '-') for job scripts")
    return text


def _smoke_needs(cell: Cell, catalogue: list[Smoke], keyword: str | None) -> tuple[tuple[str, ...], int, int]:
    """The cell's smokes, the most GPUs one of them needs, and the seconds they may take in all."""

    smokes = plan_smokes(cell, catalogue, keyword)
    gpus = max([int(s.needs.get("gpus", 1)) for s in smokes if s.gpu] or [0])
    seconds = sum(math.ceil(effective_timeout(s.timeout_s)) for s in smokes)
    return tuple(s.name for s in smokes), gpus, seconds


def _counts_for(rec: SmokeRecord, pool: NodePool | None) -> bool:
    """Whether a recorded result stands for ``pool``: routed there by Slurm, or measured on a host that is
    that pool's (driver and capability); any host for a CPU-only cell."""
    if rec.failure_class in RESUBMIT_CLASSES:
        return False
    if pool is None:
        return True
    slurm = rec.environment.get("slurm")
    if isinstance(slurm, dict) and slurm.get("pool") == pool.name:
        return True
    return rec.host.driver == pool.driver and rec.host.capability == pool.capability


def plan(cells: Sequence[Cell], pools: Sequence[NodePool], settings: ScriptSettings, *,
         images: dict[str, str] | None = None, wheels: Path | None = None, store: ResultsStore | None = None,
         rerun: bool = False) -> SlurmPlan:
    """The arrays to submit. ``images`` maps cell id -> reference by digest (image runtimes); ``store``:
    cell x pool tasks whose every smoke already has a result there for the same image digest are left out
    (unless ``rerun``), except results a scheduler caused (RESUBMIT_CLASSES)."""
    out = SlurmPlan()
    catalogue = load_catalogue(settings.smoke_dir)
    if not 1 <= settings.cpus_per_task <= 1024:
        raise PinmatrixError(f"ci slurm: --cpus-per-task {settings.cpus_per_task}: expected 1 to 1024")
    if settings.time_limit_min is not None and not 1 <= settings.time_limit_min <= 525600:
        raise PinmatrixError(f"ci slurm: --time-limit {settings.time_limit_min}: expected 1 to 525600 minutes")
    groups: dict[tuple[str, str, int, int], list[TaskEntry]] = {}
    for cell in cells:
        checked_name(cell.stack, "stack")
        image = digest = None
        if settings.runtime != "host":
            image = (images or {}).get(cell.id)
            if not image or not _IMAGE.fullmatch(image):
                where = ("the OCI layout (build it with --engine none --layout)" if settings.runtime == "sandbox"
                         else "the registry (build and push it)")
                out.skipped.append(f"{cell.id} {cell.name}: no image by digest in {where}")
                continue
            digest = image.split("@", 1)[1]
        targets = pools_for(cell, pools, out.skipped)
        smokes, gpus_needed, seconds = _smoke_needs(cell, catalogue, settings.keyword)
        done = store.query(cell_id=cell.id) if store is not None and not rerun else []
        cell_wheels = None
        if wheels is not None:
            per_cell = Path(wheels) / cell.id
            cell_wheels = plain_path(per_cell if per_cell.is_dir() else Path(wheels), "--wheels")
        for target in targets:
            pool_name = target.name if target else CPU_POOL
            mine = {r.smoke for r in done if r.image_digest == digest and _counts_for(r, target)}
            if smokes and set(smokes) <= mine:
                on = f"image {digest}" if digest else "the host runtime"
                out.recorded.append(f"{cell.id} {cell.name} x {pool_name}: every smoke recorded on {on}")
                continue
            gpus = min(target.gpus, max(1, gpus_needed)) if target else 0
            minutes = settings.time_limit_min or math.ceil((seconds + MARGIN_S[settings.runtime]) / 60)
            if settings.time_limit_min and settings.time_limit_min * 60 < seconds:
                out.warnings.append(f"{cell.id} x {pool_name}: time limit {settings.time_limit_min} min is "
                                    f"shorter than its smokes' timeouts ({math.ceil(seconds / 60)} min)")
            key = (cell.stack, pool_name, gpus, minutes)
            entries = groups.setdefault(key, [])
            entries.append(TaskEntry(
                index=len(entries), cell_id=cell.id, stack=cell.stack, pool=pool_name, smokes=smokes, gpus=gpus,
                image=image, image_digest=digest, wheels=cell_wheels,
                gpu_product=target.gpu_product if target else None, driver=target.driver if target else None,
                capability=target.capability if target else None))
    by_pool = {p.name: p for p in pools}
    names: set[str] = set()
    for (stack, pool_name, gpus, minutes), tasks in groups.items():
        if len(tasks) > MAX_TASKS:
            raise PinmatrixError(f"ci slurm: stack {stack} x pool {pool_name} has {len(tasks)} tasks, more than "
                                 f"one array's {MAX_TASKS}: select fewer cells with -k")
        name = f"{stack}-{pool_name}"
        n = 2
        while name in names:
            name, n = f"{stack}-{pool_name}-{n}", n + 1
        names.add(name)
        directory = plain_path(settings.submission_dir / name, "the submission directory")
        options = sbatch_options(by_pool.get(pool_name), gpus=gpus, minutes=minutes, settings=settings,
                                 name=name, tasks=len(tasks), directory=directory)
        out.arrays.append(ArrayEntry(name=name, script=f"{directory}.sbatch", directory=directory,
                                     time_limit_min=minutes, options=options, tasks=tuple(tasks)))
    return out


def sbatch_options(pool: NodePool | None, *, gpus: int, minutes: int, settings: ScriptSettings, name: str,
                   tasks: int, directory: str) -> tuple[str, ...]:
    """The #SBATCH options of one array: each value a number, a checked name, or a plain path."""
    checked_name(name, "array name")
    opts = [f"--job-name=pinmatrix-{name}", f"--array=0-{tasks - 1}", f"--time={minutes}",
            f"--cpus-per-task={settings.cpus_per_task}", "--nodes=1", "--ntasks=1", "--no-requeue",
            f"--output={directory}/%a/slurm.out"]
    if pool is None:
        if settings.cpu_partition:
            opts.append(f"--partition={checked_name(settings.cpu_partition, '--cpu-partition')}")
    else:
        if pool.slurm.partition:
            opts.append(f"--partition={pool.slurm.partition}")
        opts.append("--constraint=" + "&".join(pool.slurm_features()))
        gres = f"gpu:{pool.slurm.gres_type}:{gpus}" if pool.slurm.gres_type else f"gpu:{gpus}"
        opts.append(f"--gres={gres}")
    for opt in opts:
        if not re.fullmatch(r"--[a-z-]+(=[A-Za-z0-9._+/%&:-]+)?", opt):  # the last line of defence
            raise PinmatrixError(f"ci slurm: refusing the sbatch option {shown(opt)}")
    return tuple(opts)


def render_script(array: ArrayEntry, settings: ScriptSettings, runtime: Runtime) -> str:
    """The batch script of one array: a case on $SLURM_ARRAY_TASK_ID picks the task's cell (a checked id),
    image (a checked reference by digest) and wheels (a plain path); everything else is quoted."""
    q = shlex.quote
    matrix = plain_path(settings.matrix, "the matrix")
    lines = ["#!/bin/bash",
             f"# pinmatrix ci slurm: array {array.name}, {len(array.tasks)} task(s): one per cell x pool.",
             *[f"#SBATCH {opt}" for opt in array.options],
             "set -u",
             'case "${SLURM_ARRAY_TASK_ID:-}" in']
    for task in array.tasks:
        words = [f"CELL={q(task.cell_id)}"]
        if task.image:
            words.append(f"IMAGE={q(task.image)}")
        if runtime == "sandbox" and task.image_digest:
            words.append(f"DIGEST={q(task.image_digest)}")
        if task.wheels:
            words.append(f"WHEELS={q(plain_path(Path(task.wheels), '--wheels'))}")
        lines.append(f"  {task.index}) {' '.join(words)} ;;  # stack {task.stack}, pool {task.pool}")
    lines += ['  *) echo "pinmatrix: no task ${SLURM_ARRAY_TASK_ID:-} in this array" >&2; exit 2 ;;', "esac",
              f'TASK={q(array.directory)}/"$SLURM_ARRAY_TASK_ID"',
              'mkdir -p "$TASK"',
              'printf \'job=%s array=%s task=%s node=%s started=%s\\n\' "${SLURM_JOB_ID:-}" '
              '"${SLURM_ARRAY_JOB_ID:-}" "$SLURM_ARRAY_TASK_ID" "${SLURMD_NODENAME:-}" '
              '"$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$TASK/started"']
    pinmatrix = " ".join(map(q, settings.pinmatrix))
    smoke = [pinmatrix, "smoke", q(matrix), "--cell", '"$CELL"', "--runtime", runtime]
    if runtime == "sandbox":
        lines += _sandbox_lines(settings, pinmatrix)
        smoke += ["--image", '"$DIGEST"', "--layout", q(plain_path(_layout(settings), "--layout")), "--roots",
                  '"$ROOTS"']
    elif runtime != "host":
        lines.append(f'{q(runtime)} pull "$IMAGE" || echo "pinmatrix: pulling $IMAGE failed" >&2')
        smoke += ["--image", '"$IMAGE"']
    elif any(t.wheels for t in array.tasks):
        smoke += ["--wheels", '"$WHEELS"', "--overlay", '"$TASK/overlay"']
    if settings.smoke_dir is not None:
        smoke += ["--smoke-dir", q(plain_path(settings.smoke_dir, "--smoke-dir"))]
    if settings.keyword:
        problem = text_problem(settings.keyword)
        if problem:
            raise PinmatrixError(f"ci slurm: --smokes {shown(settings.keyword)} {problem}")
        smoke += ["--smoke", q(settings.keyword)]
    smoke += ["--results", '"$TASK/results.sqlite"', "--logs", '"$TASK/logs"', "--json", '"$TASK/results.json"']
    run = " ".join(smoke)
    lines += ([f'if [ "$rc" -eq 0 ]; then {run}; rc=$?; fi'] if runtime == "sandbox" else [run, "rc=$?"])
    lines += ['printf \'%s\\n\' "$rc" > "$TASK/finished"', 'exit "$rc"']
    return "\n".join(lines) + "\n"


def _layout(settings: ScriptSettings) -> Path:
    if settings.layout is None:
        raise PinmatrixError("ci slurm: --runtime sandbox needs --layout DIR (an OCI layout the nodes can read)")
    return settings.layout


def _sandbox_lines(settings: ScriptSettings, pinmatrix: str) -> list[str]:
    """Where the task's roots go (its own folder, or a per-user folder under the node-local --roots), and the
    node's answer to whether it can start the sandbox, as the submitting user: no sudo, no root."""
    if settings.roots is None:
        roots = ['ROOTS="$TASK/roots"']
    else:
        roots = [f'ROOTS={shlex.quote(plain_path(settings.roots, "--roots"))}/pinmatrix-roots-"$UID"']
    return [*roots, f'{pinmatrix} ci slurm-node-check --runtime sandbox --roots "$ROOTS" --refused "$TASK/{REFUSED}"',
            "rc=$?"]


def node_refusal(runtime: str, roots: Path | None) -> str | None:
    """Why this node cannot start ``runtime`` for this user (the sandbox runtime's own checks: bubblewrap, then
    the kernel's user namespaces; then the roots folder), or None."""
    if runtime != "sandbox":
        return None
    try:
        find_bwrap()
        check_host()
    except PinmatrixError as err:
        return str(err)
    return owned_folder(roots) if roots is not None else None


def owned_folder(folder: Path) -> str | None:
    """``folder`` made 0700 for this user, or why not: every folder on its way (as given and as resolved) must
    belong to this user or to root, and it must be a folder of this user's, not a link."""
    uid = os.geteuid()
    folder = Path(os.path.abspath(folder))
    for path in (folder, Path(os.path.realpath(folder))):
        for part in [*reversed(path.parents), path]:
            try:
                st = os.lstat(part)
            except FileNotFoundError:
                break
            except OSError as err:
                return f"--roots {folder}: {part}: {err.strerror}"
            if st.st_uid not in (0, uid):
                return (f"--roots {folder}: {part} belongs to uid {st.st_uid}, neither this user ({uid}) nor root: "
                        "name a folder on this node that only this user or root can change")
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid:
            return f"--roots {folder}: not a folder of this user's (uid {uid})"
        os.chmod(folder, 0o700)
    except OSError as err:
        return f"--roots {folder}: {err.strerror or err}"
    return None


def layout_images(cells: Sequence[Cell], layout: Path, registry: str) -> dict[str, str]:
    """cell id -> the cell's image by digest, as the OCI layout names it (the build's reference), for the cells the
    layout holds."""
    images = {}
    for cell in cells:
        ref = image_ref(cell, registry)
        digest = image_digest(Path(layout), ref)
        if digest:
            images[cell.id] = str(ImageRef.parse(ref).with_digest(digest))
    return images


def write_submission(submission: Submission, directory: Path) -> Path:
    path = Path(directory) / MANIFEST
    atomic_write_text(path, submission.model_dump_json(by_alias=True, indent=2) + "\n")
    return path


def prepare(plan_: SlurmPlan, settings: ScriptSettings, submission_id: str) -> Submission:
    """Write every array's script and task directories, and the manifest (no job ids yet)."""
    sub = Submission.model_validate({"schema": SCHEMA, "id": submission_id,
                                     "matrix": plain_path(settings.matrix, "the matrix"),
                                     "runtime": settings.runtime, "arrays": plan_.arrays})
    for array in sub.arrays:
        for task in array.tasks:
            (Path(array.directory) / str(task.index)).mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(array.script), render_script(array, settings, settings.runtime))
    write_dispatch(slurm_dispatch(sub), Path(settings.submission_dir) / DISPATCH)
    write_submission(sub, settings.submission_dir)
    return sub


def slurm_dispatch(sub: Submission) -> Dispatch:
    """The dispatch record of a submission: per array task (``<array>/<index>``), its cell, digest and smokes."""
    return dispatch("slurm", sub.id, {f"{a.name}/{t.index}": task_dispatch(t) for a in sub.arrays for t in a.tasks})


def task_dispatch(task: TaskEntry) -> DispatchJob:
    """What ``ci slurm`` gave one task (its line of the dispatch record)."""
    return DispatchJob(cell_id=task.cell_id, image_digest=task.image_digest, smokes=task.smokes)


def parse_job_id(stdout: str) -> str:
    """``sbatch --parsable`` prints ``<job id>`` or ``<job id>;<cluster>``."""
    first = stdout.strip().split(";", 1)[0]
    if not re.fullmatch(r"[0-9]+", first):
        raise PinmatrixError(f"sbatch answered {shown(stdout.strip())}, not a job id")
    return first


def submit(sub: Submission, settings: ScriptSettings, *, sbatch: str = "sbatch") -> Submission:
    """Submit each array with ``sbatch --parsable``; the manifest is rewritten after each one, so it always
    names exactly what was submitted."""
    arrays = list(sub.arrays)
    for i, array in enumerate(arrays):
        try:
            proc = subprocess.run([sbatch, "--parsable", array.script], capture_output=True, text=True,
                                  timeout=120, cwd=settings.submission_dir)
        except FileNotFoundError:
            raise PinmatrixError(f"ci slurm: {sbatch} not found (is this a Slurm submit host?)") from None
        except subprocess.TimeoutExpired:
            raise PinmatrixError(f"ci slurm: {sbatch} {array.script} did not answer within 120 s") from None
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no message"])[-1]
            raise PinmatrixError(f"ci slurm: sbatch refused {array.script}: {shown(last, 300)}")
        arrays[i] = array.model_copy(update={"job_id": parse_job_id(proc.stdout)})
        sub = sub.model_copy(update={"arrays": tuple(arrays)})
        write_submission(sub, settings.submission_dir)
    return sub
