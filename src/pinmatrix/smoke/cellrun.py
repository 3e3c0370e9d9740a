"""A cell's smokes, run in order: each recorded smoke passed over (unless --rerun), the host runtime's overlay made,
what the host's GPU decides recorded without a process, the rest run alone or in batches (``smoke.batch``), every
record stored the moment it is known."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pinmatrix.paths import OVERLAY_DIR
from pinmatrix.project.catalogue import Smoke, load_catalogue
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord
from pinmatrix.sanitize import file_slug, terminal_text
from pinmatrix.smoke.batch import run_batch
from pinmatrix.smoke.hostdiff import differences, environment_of
from pinmatrix.smoke.overlay import Overlay, build_overlay
from pinmatrix.smoke.runner import (
    HOST_CELL_ID,
    RunOptions,
    decided_by_host,
    new_run_id,
    plan_smokes,
    run_one,
    skipped_by_host,
)
from pinmatrix.smoke.target import SmokeTarget


@dataclass
class CellRun:
    cell: SmokeTarget
    records: list[SmokeRecord] = field(default_factory=list)
    skipped_recorded: list[str] = field(default_factory=list)
    overlay: Overlay | None = None


def run_cells(
    cells: Sequence[SmokeTarget],
    store: ResultsStore,
    options: RunOptions,
    *,
    host: HostFingerprint | None = None,
    run_id: str | None = None,
    echo: Callable[[str], None] = print,
) -> list[CellRun]:
    store.prepare_write()  # checked (quick_check, schema) before any smoke runs, not after
    catalogue = load_catalogue(options.smoke_dir)
    host = host or HostFingerprint.detect()
    run_id = run_id or new_run_id()
    echo(f"run {run_id} on {host.label()} (host {host.id}), runtime {options.runtime}")
    runs = []
    for cell in cells:
        runs.append(run_cell(cell, catalogue, store, options, host=host, run_id=run_id, echo=echo))
    return runs


def run_cell(cell: SmokeTarget, catalogue: list[Smoke], store: ResultsStore, options: RunOptions, *,
             host: HostFingerprint, run_id: str, echo: Callable[[str], None] = print) -> CellRun:
    smokes = plan_smokes(cell, catalogue, options.keyword)
    out = CellRun(cell)
    echo(f"cell {cell.id} {cell.name}: {len(smokes)} smoke(s)")
    todo = []
    for smoke in smokes:
        if not options.rerun and store.has_result(cell.id, host.id, smoke.name, options.image_digest):
            out.skipped_recorded.append(smoke.name)
            on = f"image {options.image_digest}" if options.image_digest else "the host environment"
            echo(f"  {'recorded':9} {smoke.name} (already recorded for this cell and host on {on}; "
                 "--rerun runs it again)")
        else:
            todo.append(smoke)
    if not todo:
        return out
    if options.runtime == "host" and (options.wheels_dir or cell.patches):
        overlay_root = options.overlay_dir or OVERLAY_DIR
        out.overlay = build_overlay(cell, overlay_root, wheels_dir=options.wheels_dir,
                                    repo_root=options.repo_root, python=options.python, log=echo)
    work = (options.logs_dir / run_id / file_slug(cell.id)).resolve()  # smokes run with cwd=work
    work.mkdir(parents=True, exist_ok=True)
    host_vs_lock = None
    if options.runtime == "host" and cell.id != HOST_CELL_ID:
        lock_file = options.repo_root / "locks" / f"{cell.id}.txt"
        seen = environment_of(options.python, out.overlay.site if out.overlay else None)
        host_vs_lock = differences(cell, lock_file.read_text(encoding="utf-8") if lock_file.is_file() else None, seen)
        if not host_vs_lock["identical"]:
            n = len(host_vs_lock["packages"])
            echo(f"  host runtime differs from the cell: python {host_vs_lock['host_python']} (cell "
                 f"{host_vs_lock['cell_python']}), {n} locked package(s) at another version or absent")
    for group in process_groups(todo, host, batch=options.batch):
        unmet = decided_by_host(group[0], host)
        if unmet is not None:
            recs = [skipped_by_host(cell, group[0], unmet, host=host, run_id=run_id, work=work,
                                    image_digest=options.image_digest)]
        elif len(group) > 1:
            echo(f"  batch of {len(group)} in one process: {', '.join(s.name for s in group)}")
            recs = run_batch(cell, group, options, host=host, run_id=run_id, work=work, overlay=out.overlay)
        else:
            recs = [run_one(cell, group[0], options, host=host, run_id=run_id, work=work, overlay=out.overlay)]
        for rec in recs:
            if host_vs_lock is not None:
                rec.environment["host_vs_lock"] = host_vs_lock
            store.record(rec)
            out.records.append(rec)
            cls = f" [{rec.failure_class}]" if rec.failure_class else ""
            echo(terminal_text(f"  {rec.status.upper():9} {rec.smoke} {rec.duration_s:.1f}s{cls} {rec.reason}".rstrip()))
    return out


def process_groups(todo: Sequence[Smoke], host: HostFingerprint, *, batch: bool) -> list[list[Smoke]]:
    """``todo`` cut into what each process runs: a maximal run of consecutive smokes of one batch group that this
    host's GPU does not decide, or one smoke alone (``batch=False``: every smoke alone)."""
    groups: list[list[Smoke]] = []
    for smoke in todo:
        last = groups[-1] if groups else None
        if (batch and last is not None and smoke.batch is not None and last[-1].batch == smoke.batch
                and decided_by_host(smoke, host) is None and decided_by_host(last[-1], host) is None):
            last.append(smoke)
        else:
            groups.append([smoke])
    return groups
