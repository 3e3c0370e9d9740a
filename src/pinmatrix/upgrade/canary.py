"""The canary's verdict: what a candidate cell would change against the stack's known-good cell, as a pure function
of typed facts of both sides (their pins, their latest smoke results per smoke x host, the known issues' expectations,
the arch coverage an arch scan found, image size and build time). ``canary_inputs`` gathers the facts from the
results store, the promotion record, the OCI layout and the arch-scan and build records; ``ci/canary`` runs it.

A smoke skipped on a side (a GPU smoke on a CPU machine: "no GPU") or an infrastructure error is never a failure of
that side; a smoke recorded on one side only is "not run" on the other. A newly failing smoke of a candidate that
moved exactly one axis carries the ``pinmatrix bisect version`` command that finds the first failing release."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, Literal

from packaging.version import InvalidVersion, Version

Outcome = Literal["ok", "bad", "skip", "error", "none"]
Change = Literal["newly failing", "newly passing", "still failing", "not run", "skipped", "infrastructure error"]
# A status's side of the verdict: xfail is a failure (a known issue explains it), xpass a pass.
_OUTCOME: dict[str, Outcome] = {"pass": "ok", "xpass": "ok", "fail": "bad", "degraded": "bad", "xfail": "bad",
                                "skip": "skip", "error": "error"}


@dataclass(frozen=True)
class RecordedSmoke:
    """One smoke's latest plain result on one host."""

    status: str
    reason: str = ""
    known_issue: str | None = None

    @property
    def outcome(self) -> Outcome:
        return _OUTCOME.get(self.status, "error")


@dataclass(frozen=True)
class CanarySide:
    """What is known of one cell. ``results``: (smoke, host) -> its latest result; ``expectations``: smoke -> the
    known issue that expects it not to pass ("xformers-1347: fail"); None where nothing says (a cell the matrix
    cannot make again); ``arch``: the SASS and PTX targets its binaries carry (None: not scanned)."""

    cell_id: str
    name: str
    pins: dict[str, str]
    results: dict[tuple[str, str], RecordedSmoke] = field(default_factory=dict)
    expectations: dict[str, str] | None = None
    arch: frozenset[str] | None = None
    image_bytes: int | None = None
    build_seconds: float | None = None


@dataclass(frozen=True)
class SmokeChange:
    smoke: str
    host: str
    change: Change
    before: str  # a status, or "no result"
    after: str
    reason: str = ""
    bisect: tuple[str, ...] = ()  # argv of the bisect that finds the first failing release; () when none


@dataclass
class CanaryDiff:
    stack: str
    candidate: CanarySide
    baseline: CanarySide
    baseline_source: str  # "known-good" or why the matrix's cell stands in for it
    moved: dict[str, tuple[str, str]]  # axis -> (old, new)
    smokes: list[SmokeChange]
    unchanged: int  # (smoke, host) pairs that pass on both sides
    expectations: list[str]
    arch: str
    size: str
    build_time: str
    unmatched: list[str] = field(default_factory=list)  # axes one side does not name (a candidate known by its lock)

    def of(self, change: Change) -> list[SmokeChange]:
        return [s for s in self.smokes if s.change == change]

    def to_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "candidate": {"id": self.candidate.cell_id, "name": self.candidate.name},
                "baseline": {"id": self.baseline.cell_id, "name": self.baseline.name, "source": self.baseline_source},
                "moved": {a: {"from": o, "to": n} for a, (o, n) in self.moved.items()},
                "smokes": [{"smoke": s.smoke, "host": s.host, "change": s.change, "before": s.before, "after": s.after,
                            "reason": s.reason, "bisect": shlex.join(s.bisect) if s.bisect else None}
                           for s in self.smokes],
                "unchanged_passing": self.unchanged, "expectations": self.expectations, "arch": self.arch,
                "image_size": self.size, "build_time": self.build_time, "axes_one_side_only": self.unmatched}


def moved_pins(old: dict[str, str], new: dict[str, str]) -> dict[str, tuple[str, str]]:
    """axis -> (old, new) for each axis both sides name with different values."""
    return {a: (v, new[a]) for a, v in old.items() if a in new and new[a] != v}


def one_sided(old: dict[str, str], new: dict[str, str]) -> list[str]:
    """The axes one side names and the other does not ("cuda (baseline only)")."""
    return ([f"{a} (baseline only)" for a in old if a not in new]
            + [f"{a} (candidate only)" for a in new if a not in old])


def bisect_argv(stack: str, smoke: str, axis: str, old: str, new: str, fixed: dict[str, str]) -> tuple[str, ...]:
    """``pinmatrix bisect version`` over ``axis`` from ``old`` to ``new`` with every other axis held at the
    candidate's value: the releases between two versions (``--range``), else the two values themselves."""
    try:
        low, high = sorted((Version(old), Version(new)))
        span = ("--range", f">={low},<={high}")
    except InvalidVersion:
        span = ("--values", f"{old},{new}")
    fixes = [x for a, v in fixed.items() if a != axis for x in ("--fix", f"{a}={v}")]
    return ("pinmatrix", "bisect", "version", smoke, "--stack", stack, "--axis", axis, *span, *fixes)


def _change(before: RecordedSmoke | None, after: RecordedSmoke | None) -> Change | None:
    """The (smoke, host) pair's change; None when it passes on both sides."""
    b, a = before.outcome if before else "none", after.outcome if after else "none"
    if "none" in (a, b):
        return "not run"
    if "error" in (a, b):
        return "infrastructure error"
    if "skip" in (a, b):
        return "skipped"
    if a == "bad":
        return "newly failing" if b == "ok" else "still failing"
    return "newly passing" if b == "bad" else None


def smoke_changes(stack: str, cand: CanarySide, base: CanarySide,
                  moved: dict[str, tuple[str, str]]) -> tuple[list[SmokeChange], int]:
    """Each (smoke, host) pair either side recorded, with its change; and how many pass on both sides."""
    changes, unchanged = [], 0
    for key in sorted(set(cand.results) | set(base.results)):
        before, after = base.results.get(key), cand.results.get(key)
        change = _change(before, after)
        if change is None:
            unchanged += 1
            continue
        reason = next((r.reason for r in (after, before) if r is not None and r.outcome != "ok" and r.reason), "")
        argv: tuple[str, ...] = ()
        if change == "newly failing" and len(moved) == 1:
            [(axis, (old, new))] = moved.items()
            argv = bisect_argv(stack, key[0], axis, old, new, cand.pins)
        changes.append(SmokeChange(key[0], key[1], change, before.status if before else "no result",
                                   after.status if after else "no result", reason, argv))
    return changes, unchanged


def expectation_flips(cand: CanarySide, base: CanarySide) -> list[str]:
    """Known issues that start or stop expecting a smoke to fail, and expected failures that now pass."""
    lines: list[str] = []
    if cand.expectations is not None and base.expectations is not None:
        for smoke in sorted(set(cand.expectations) | set(base.expectations)):
            old, new = base.expectations.get(smoke), cand.expectations.get(smoke)
            if old != new:
                lines.append(f"{smoke}: expected {old or 'to pass'} -> expected {new or 'to pass'}")
    else:
        lines.append("expectations: not known for the " + ("candidate" if cand.expectations is None else "baseline")
                     + " (no cell of the matrix has its id)")
    for key, after in sorted(cand.results.items()):
        before = base.results.get(key)
        if before is not None and before.status == "xfail" and after.status in ("xpass", "pass"):
            lines.append(f"{key[0]} on {key[1]}: failed as known issue {before.known_issue or '?'} expects, now "
                         f"{after.status}: the issue may be fixed in the candidate")
    return lines


def arch_words(cand: CanarySide, base: CanarySide) -> str:
    if cand.arch is None or base.arch is None:
        sides = [n for n, s in (("candidate", cand), ("baseline", base)) if s.arch is None]
        return f"arch coverage: not scanned ({' and '.join(sides)}; `pinmatrix arch-scan --out DIR`)"
    gained, lost = sorted(cand.arch - base.arch), sorted(base.arch - cand.arch)
    if not gained and not lost:
        return f"arch coverage: the same ({len(cand.arch)} targets)"
    return f"arch coverage: gained {' '.join(gained) or 'nothing'}; lost {' '.join(lost) or 'nothing'}"


def _delta(what: str, old: float | None, new: float | None, unit: str, scale: float) -> str:
    if old is None or new is None:
        sides = [n for n, v in (("candidate", new), ("baseline", old)) if v is None]
        return f"{what}: not recorded ({' and '.join(sides)})"
    pct = f" ({(new - old) / old * 100:+.1f}%)" if old else ""
    return f"{what}: {old / scale:.1f} -> {new / scale:.1f} {unit}, {(new - old) / scale:+.1f} {unit}{pct}"


def compare(stack: str, cand: CanarySide, base: CanarySide, baseline_source: str) -> CanaryDiff:
    moved = moved_pins(base.pins, cand.pins)
    smokes, unchanged = smoke_changes(stack, cand, base, moved)
    return CanaryDiff(stack, cand, base, baseline_source, moved, smokes, unchanged, expectation_flips(cand, base),
                      arch_words(cand, base), _delta("image size", base.image_bytes, cand.image_bytes, "MB", 1e6),
                      _delta("build time", base.build_seconds, cand.build_seconds, "s", 1.0),
                      one_sided(base.pins, cand.pins))


def diff_lines(diff: CanaryDiff) -> list[str]:
    c, b = diff.candidate, diff.baseline
    lines = [f"{diff.stack}: candidate {c.cell_id} {c.name} against {b.cell_id} {b.name} ({diff.baseline_source})",
             "    moved: " + (", ".join(f"{a} {o} -> {n}" for a, (o, n) in diff.moved.items()) or "nothing")]
    if diff.unmatched:
        lines.append(f"    not compared (one side does not name them): {', '.join(diff.unmatched)}")
    for change in ("newly failing", "newly passing", "still failing", "skipped", "infrastructure error", "not run"):
        for s in diff.of(change):  # type: ignore[arg-type]
            lines.append(f"    {change}: {s.smoke} on {s.host}: {s.before} -> {s.after}"
                         + (f" ({s.reason})" if s.reason else ""))
            if s.bisect:
                lines.append(f"        the release where it changes: {shlex.join(s.bisect)}")
    lines.append(f"    passing on both: {diff.unchanged}")
    lines += [f"    expectation: {line}" for line in diff.expectations]
    lines += [f"    {diff.arch}", f"    {diff.size}", f"    {diff.build_time}"]
    return lines
