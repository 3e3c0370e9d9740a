"""``pinmatrix canary``: propose's LOCKED candidates (or one ``--set`` cell) built by the image builder, smoked where
this host can (a GPU smoke on a CPU host is skipped, "no GPU"), and each compared with its stack's known-good cell
(``upgrade.canary``). The baseline cell is built and smoked too where the matrix makes it, so both sides have
results on this host; smokes already recorded for an image are not run again. ``compare_only`` builds and runs
nothing: it compares what the results store holds (a GPU host's run, imported with ``pinmatrix results --import``).
It sits on the ci floor because it drives the steps below it: lock, image, smoke, bisect."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from pinmatrix.atomic import atomic_write_text
from pinmatrix.cell import Cell
from pinmatrix.engine.select import choose_engine
from pinmatrix.errors import PinmatrixError
from pinmatrix.hostprobe import HostFingerprint
from pinmatrix.image.build import build_all
from pinmatrix.image.settings import BuildSettings, CellBuildResult
from pinmatrix.lock.resolve import lock_cells
from pinmatrix.lock.settings import LockSettings
from pinmatrix.matrix.overrides import parse_set
from pinmatrix.oci.compression import choose
from pinmatrix.paths import BUILD_LOGS_DIR, CACHE_DIR, KNOWN_GOOD_FILE, LOGS_DIR, OCI_DIR, RESULTS_FILE
from pinmatrix.project.catalogue import load_catalogue
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.lockfile import lock_path
from pinmatrix.project.matrix_toml import Matrix, require_stack
from pinmatrix.results.store import ResultsStore
from pinmatrix.smoke.runner import RunOptions, new_run_id
from pinmatrix.smoke.session import SmokeSettings, run_smokes
from pinmatrix.upgrade.canary import CanaryDiff, compare
from pinmatrix.upgrade.canary_inputs import BUILD_RECORD, CanaryFacts, read_arch_scans, read_build_records
from pinmatrix.upgrade.canary_pick import baseline_side, candidate_side
from pinmatrix.upgrade.candidates import CandidateTarget, UpgradeCandidate, candidates
from pinmatrix.upgrade.outdated import package_axes
from pinmatrix.upgrade.propose import Proposal, candidate_cells, propose
from pinmatrix.upgrade.sources import UpgradeSources

Echo = Callable[[str], None]


@dataclass(frozen=True)
class CanarySettings:
    matrix: Matrix
    cells: list[Cell]  # the matrix's own cells: the baselines
    stack: str | None = None
    limit: int = 1  # candidates per stack, newest first
    sets: tuple[str, ...] = ()  # AXIS=VALUE: one candidate of --stack instead of propose's
    engine: str = "none"  # where images are loaded (none: the OCI layout only)
    runtime: str = "sandbox"  # where they are smoked, in their images (smoke --runtime, never host)
    results: Path = RESULTS_FILE
    known_good: Path | None = None  # default: the project's known-good.toml
    baseline: str | None = None  # --known-good CELL_ID
    arch_scans: tuple[Path, ...] = ()
    build_records: tuple[Path, ...] = ()
    lock_dirs: tuple[Path, ...] = ()  # compare-only: where a candidate's lock may be (DIR/locks/<id>.txt)
    index_timeout: float = 30.0
    smoke_timeout: float | None = None
    bisect: bool = False
    set_cells: tuple[Cell, ...] = ()  # compare-only: the cells --set makes, which a candidate id may name

    @property
    def root(self) -> Path:
        return Path(self.matrix.root)

    def facts(self) -> CanaryFacts:
        builds = read_build_records([self.root / BUILD_RECORD, *self.build_records])
        return CanaryFacts(ResultsStore(self.results), self.root / OCI_DIR, self.matrix.settings.registry or None,
                           read_arch_scans(list(self.arch_scans)), builds)

    def promoted(self) -> list[dict[str, object]]:
        return read_known_good(self.known_good or self.root / KNOWN_GOOD_FILE)


@dataclass
class CanaryRun:
    proposals: list[Proposal]
    diffs: list[CanaryDiff]
    builds: list[CellBuildResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def set_candidate(matrix: Matrix, stack: str, sets: Sequence[str]) -> UpgradeCandidate:
    """The candidate ``--set AXIS=VALUE`` lines make, as propose makes one: a package axis moves to a version and
    its patch variants follow it where their patches still apply (``propose.candidate_cells``)."""
    pins = dict(parse_set(s) for s in sets)
    packages = package_axes(require_stack(matrix, stack))
    for axis, value in pins.items():
        try:
            if axis in packages:
                Version(value)
        except InvalidVersion:
            raise PinmatrixError(f"--set {axis}={value}: not a version; a candidate moves {axis} to a version and "
                                 "its patch variants follow where the patch still applies") from None
    return UpgradeCandidate(stack, " ".join(f"--set {s}" for s in sets), pins)


def set_cells(matrix: Matrix, stack: str, sets: Sequence[str]) -> list[Cell]:
    """The cells of the ``--set`` candidate (none when the rules prune it)."""
    return candidate_cells(matrix, set_candidate(matrix, stack, sets))[0]


def _candidates(settings: CanarySettings, sources: UpgradeSources) -> list[UpgradeCandidate]:
    """The --set candidate, else propose's candidates of each chosen stack (at most ``limit``)."""
    matrix = settings.matrix
    if settings.sets:
        if settings.stack is None:
            raise PinmatrixError("--set needs --stack: the candidate is a cell of one stack")
        return [set_candidate(matrix, settings.stack, settings.sets)]
    out: list[UpgradeCandidate] = []
    for name, stack in matrix.stacks.items():
        if settings.stack in (None, name):
            platform = stack.platform or matrix.settings.platform
            target = CandidateTarget(name, platform.split("-", 1)[0], stack.python or matrix.settings.python)
            out += candidates(sources, target, stack, settings.limit)[:settings.limit]
    return out


def locked_cells(settings: CanarySettings, echo: Echo) -> tuple[list[Proposal], list[Cell]]:
    """The candidates locked into the project's locks/ (as `build --set` locks a one-off cell), and their cells."""
    sources = UpgradeSources.of(settings.matrix, timeout=settings.index_timeout)
    proposals = propose(settings.matrix, _candidates(settings, sources), sources.now, settings.root)
    cells: list[Cell] = []
    for p in proposals:
        locked = {o.id for o in p.cells if o.locked}
        echo(f"{p.candidate.stack}: {p.candidate.label}: {p.status}" + "".join(f"; {r}" for r in p.reasons))
        cells += [c for c in candidate_cells(settings.matrix, p.candidate)[0] if c.id in locked]
    return proposals, cells


def build(cells: list[Cell], settings: CanarySettings) -> list[CellBuildResult]:
    """Each cell's image by the image builder, into the OCI layout (and the engine), its build recorded."""
    root = settings.root
    engine = choose_engine(settings.engine)
    compression = choose(None, engine.name if engine else None, engine.reads_zstd_layers() if engine else False)
    build_settings = BuildSettings(root=root, cache_dir=root / CACHE_DIR, logs_dir=root / BUILD_LOGS_DIR,
                                   registry=settings.matrix.settings.registry or None, layout_dir=root / OCI_DIR,
                                   ca_certificates=tuple(root / c for c in settings.matrix.settings.ca_certificates),
                                   load=engine is not None, compression=compression)
    missing = [c for c in cells if not lock_path(c, root).is_file()]  # a baseline cell not locked yet: as build does
    problems = {r.cell.id: f"cannot lock: {r.reason}" for r in lock_cells(missing, LockSettings.of(settings.matrix))
                if not r.ok}
    results = build_all(cells, engine, build_settings, None, 1, lock_problems=problems)
    record = root / BUILD_RECORD
    kept = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    kept.update({r.cell.id: r.to_json() for r in results if r.status == "built"})
    record.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(record, json.dumps(kept, indent=1) + "\n")
    return results


def smoke(cells: list[Cell], settings: CanarySettings, echo: Echo) -> None:
    smoke_dir = settings.root / "smoke" if (settings.root / "smoke").is_dir() else None  # the project's, else ./smoke
    options = RunOptions(smoke_dir=smoke_dir, timeout_s=settings.smoke_timeout, logs_dir=settings.root / LOGS_DIR,
                         repo_root=settings.root, kernel_cache="keep")
    smoke_settings = SmokeSettings(cells=cells, matrix=settings.matrix, catalogue=load_catalogue(smoke_dir),
                                   options=options, runtime=settings.runtime, smoke_dir=smoke_dir)
    store = ResultsStore(settings.results)
    store.prepare_write()
    session = run_smokes(smoke_settings, store, HostFingerprint.detect(), new_run_id(), echo)
    for line in session.notes():
        echo(line)


def _pairs(settings: CanarySettings, cands: list[Cell]) -> list[tuple[Cell, Cell | None]]:
    """Each candidate with the matrix's cell its baseline is, where the matrix makes it (None: it does not)."""
    facts, promoted = settings.facts(), settings.promoted()
    by_id = {c.id: c for c in settings.cells}
    pairs = []
    for cand in cands:
        base, _ = baseline_side(facts, facts.of_cell(cand), cand.stack, promoted, settings.cells, settings.baseline,
                                candidate_cell=cand)
        pairs.append((cand, by_id.get(base.cell_id)))
    return pairs


def compared(settings: CanarySettings, cands: list[Cell]) -> list[CanaryDiff]:
    facts, promoted = settings.facts(), settings.promoted()
    diffs = []
    for cand in cands:
        side = facts.of_cell(cand)
        base, source = baseline_side(facts, side, cand.stack, promoted, settings.cells, settings.baseline,
                                     candidate_cell=cand)
        diffs.append(compare(cand.stack, side, base, source))
    return diffs


def run_canary(settings: CanarySettings, echo: Echo) -> CanaryRun:
    proposals, cands = locked_cells(settings, echo)
    if not cands:
        return CanaryRun(proposals, [], notes=["no candidate was locked: nothing to build"])
    pairs = _pairs(settings, cands)
    cells = list({c.id: c for cand, base in pairs for c in (cand, base) if c is not None}.values())
    builds = build(cells, settings)
    failed = {r.cell.id for r in builds if not r.ok}
    notes = [f"build failed: {r.cell.id} {r.cell.name}: {r.reason}" for r in builds if not r.ok]
    smoke([c for c in cells if c.id not in failed], settings, echo)
    diffs = compared(settings, cands)
    if settings.bisect:
        notes += run_bisects(diffs, settings, echo)
    return CanaryRun(proposals, diffs, builds, notes)


def compare_only(settings: CanarySettings, candidate: str) -> CanaryDiff:
    """The candidate's recorded results against its baseline's, building and running nothing."""
    if not settings.results.is_file():
        raise PinmatrixError(f"{settings.results}: no results store (import the candidate's with `pinmatrix results "
                             "--import`)")
    facts = settings.facts()
    axes = {name: package_axes(stack) for name, stack in settings.matrix.stacks.items()}
    dirs = [*settings.lock_dirs, settings.root]
    stack, side, cell = candidate_side(facts, candidate, [*settings.set_cells, *settings.cells], dirs, axes)
    base, source = baseline_side(facts, side, stack, settings.promoted(), settings.cells, settings.baseline,
                                 candidate_cell=cell)
    return compare(stack, side, base, source)


def run_bisects(diffs: list[CanaryDiff], settings: CanarySettings, echo: Echo) -> list[str]:
    """Each newly failing smoke's bisect, run as `pinmatrix bisect version` runs it (argv, no shell)."""
    notes = []
    for diff in diffs:
        for change in diff.of("newly failing"):
            if not change.bisect:
                continue
            echo("bisect: " + " ".join(change.bisect))
            argv = [sys.executable, "-m", "pinmatrix", *change.bisect[1:4], str(settings.matrix.path.resolve()),
                    *change.bisect[4:], "--results", str(settings.results.resolve())]  # the matrix after the smoke
            done = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=settings.root)
            lines = [ln for ln in done.stdout.splitlines() if ln.startswith("report:")] or done.stderr.splitlines()[-1:]
            notes += [f"bisect of {change.smoke} ({diff.candidate.cell_id}): {ln}" for ln in lines]
    return notes
