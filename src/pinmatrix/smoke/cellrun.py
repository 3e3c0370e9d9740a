"""A cell's smokes, run in order: each recorded smoke passed over (unless --rerun), the cell prepared by its runtime
(the host's overlay and lock comparison), what the host's GPU decides recorded without a process, the rest run alone
or in batches (``smoke.batch``) by the runtime, every record stored the moment it is known."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from pinmatrix.project.catalogue import Smoke, load_catalogue
from pinmatrix.results.store import HostFingerprint, ResultsStore, SmokeRecord
from pinmatrix.sanitize import file_slug, terminal_text
from pinmatrix.smoke.batch import run_batch
from pinmatrix.smoke.overlay import Overlay
from pinmatrix.smoke.runner import (
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
    echo(f"run {run_id} on {host.label()} (host {host.id}), runtime {options.runtime.name}")
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
    setup = options.runtime.prepare_cell(cell, options, echo)
    out.overlay = setup.overlay
    work = (options.logs_dir / run_id / file_slug(cell.id)).resolve()  # smokes run with cwd=work
    work.mkdir(parents=True, exist_ok=True)
    for group in process_groups(todo, host, batch=options.batch):
        unmet = decided_by_host(group[0], host)
        if unmet is not None:
            recs = [skipped_by_host(cell, group[0], unmet, host=host, run_id=run_id, work=work,
                                    image_digest=options.image_digest)]
        elif len(group) > 1:
            echo(f"  batch of {len(group)} in one process: {', '.join(s.name for s in group)}")
            with _named_on_interrupt(cell, group):
                recs = run_batch(cell, group, options, host=host, run_id=run_id, work=work, overlay=out.overlay)
        else:
            with _named_on_interrupt(cell, group):
                recs = [run_one(cell, group[0], options, host=host, run_id=run_id, work=work, overlay=out.overlay)]
        for rec in recs:
            if setup.host_vs_lock is not None:
                rec.environment["host_vs_lock"] = setup.host_vs_lock
            store.record(rec)
            out.records.append(rec)
            cls = f" [{rec.failure_class}]" if rec.failure_class else ""
            echo(terminal_text(f"  {rec.status.upper():9} {rec.smoke} {rec.duration_s:.1f}s{cls} {rec.reason}".rstrip()))
    return out


@contextmanager
def _named_on_interrupt(cell: SmokeTarget, group: Sequence[Smoke]) -> Iterator[None]:
    """Ctrl-C while the group runs: the interrupt names what it stopped (nothing of it is recorded)."""
    try:
        yield
    except KeyboardInterrupt:
        names = ", ".join(s.name for s in group)
        raise KeyboardInterrupt(f"cell {cell.id} smoke {names} interrupted, not recorded") from None


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
