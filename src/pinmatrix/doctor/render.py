"""The doctor's findings as text for a terminal: one section per question, the verdict last. Every value that
came from outside (nvidia-smi, known-good.toml, an arch scan, a manifest) is printed through ``terminal_text``."""

from __future__ import annotations

from pinmatrix.doctor.checkup import Checkup
from pinmatrix.doctor.known_issues import HITS, IssueMatch
from pinmatrix.sanitize import terminal_text


def _gpu_lines(up: Checkup) -> list[str]:
    g = up.gpus
    head = (f"{len(g.gpus)} GPU{'s' if len(g.gpus) != 1 else ''}, driver {g.driver or '?'}, CUDA driver API "
            f"{g.cuda_driver_api or '?'}")
    out = ["GPUs: " + head]
    for i, gpu in enumerate(g.gpus):
        memory = "unified memory (no memory of its own)" if gpu.unified_memory else (
            f"{gpu.memory_mib} MiB" if gpu.memory_mib is not None else "memory not read")
        out.append(f"  {i}  {gpu.name}  {gpu.arch or '?'} (compute capability {gpu.capability or '?'})  "
                   f"MIG {gpu.mig or 'n/a'}  {memory}")
    out += [f"  note: {p}" for p in g.problems]
    return out


def _issue_line(i: IssueMatch) -> list[str]:
    head = "HITS this host" if i.verdict == HITS else f"for cells with {', '.join(i.unless)}"
    out = [f"  {i.id}: {head}: {i.note}", f"      source: {i.source or 'not given'}; smokes: {', '.join(i.smokes)}"]
    if i.matched:
        out.append(f"      because: {'; '.join(i.matched)}")
    return out


def _issues_lines(up: Checkup) -> list[str]:
    out = [f"Known issues ({up.matrix}; packages of {up.python}):"]
    for issue in up.issues:
        out += _issue_line(issue)
    if not up.issues and up.matrix and not up.matrix.startswith("no "):
        out.append("  none matches this host")
    return out


def _image_lines(up: Checkup) -> list[str]:
    out = [f"Promoted images ({up.known_good}):"]
    for im in up.images:
        verdict = "fits" if im.fits else "does not fit: " + "; ".join(im.reasons)
        out.append(f"  {im.cell_id} {im.name} (promoted {im.promoted_at}): {verdict}")
        out.append(f"      {im.drivers.sentence()}")
    return out


def _cell_lines(up: Checkup) -> list[str]:
    out: list[str] = []
    for c in up.cells:
        out.append(f"Cell {c.id} {c.name}:")
        out += [line for issue in c.issues for line in _issue_line(issue)] or ["  no known issue hits it on this host"]
        out.append(f"  first use on this GPU: {c.first_use.words}")
        out += [f"    PTX JIT: {x}" for x in c.first_use.jit]
        out += [f"    compiles at run time: {x}" for x in c.first_use.runtime_compile]
        out += [f"    cannot run: {x}" for x in c.first_use.cannot]
    return out


def checkup_lines(up: Checkup) -> list[str]:
    """The report; a host without a GPU (and no --allow-no-gpu) is one line."""
    status = up.exit_status()
    findings = up.findings()
    if up.no_gpu and not up.allow_no_gpu:
        return [terminal_text(findings[0])]
    lines = _gpu_lines(up) + _issues_lines(up)
    if up.sandbox is not None:
        lines += ["Sandbox:"] + [f"  {line}" for line in up.sandbox.lines()]
    lines += _image_lines(up) + _cell_lines(up)
    if up.bundle is not None:
        lines.append(f"Bundle {up.bundle.folder} ({up.bundle.kind}, cell {up.bundle.cell_id or '?'}):")
        lines += [f"  {what}: {'ok' if ok else 'not decided' if ok is None else 'NO'}: {words}"
                  for what, ok, words in up.bundle.checks]
    if up.leak is not None:
        lines.append(f"Unified-memory leak check ({up.leak.verdict}):")
        lines += [f"  {line}" for line in up.leak.lines()]
    lines.append(f"doctor: exit status {status} ({'; '.join(findings) or 'nothing in the way'}), "
                 f"{up.elapsed_s:.2f} s")
    return [terminal_text(line) for line in lines]
