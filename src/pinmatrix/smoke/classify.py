"""Log classification: the signature table (``project/signatures``, data/signatures.toml) applied to a smoke's
log, and the rules that turn a process outcome (result JSON, exit status, timeout) into a status."""

from __future__ import annotations

import signal
from dataclasses import dataclass, field
from typing import Any

from pinmatrix.project.signatures import Signature, default_signatures
from pinmatrix.sanitize import strip_ansi, terminal_text

RESULT_STATUSES = ("pass", "fail", "skip", "degraded")  # what a smoke itself may record


@dataclass
class Match:
    signature: Signature
    line: str
    value: int | None = None


@dataclass
class Outcome:
    status: str
    failure_class: str | None
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)


def scan(log_text: str, signatures: tuple[Signature, ...] | None = None) -> list[Match]:
    """Every signature that matches, in table order, with the first matching line."""
    matches = []
    for sig in signatures if signatures is not None else default_signatures():
        m = sig.pattern.search(log_text)
        if not m:
            continue
        start = log_text.rfind("\n", 0, m.start()) + 1
        end = log_text.find("\n", m.end())
        line = log_text[start:end if end != -1 else len(log_text)].strip()[:300]
        value = None
        if sig.metric and m.groups():
            try:
                value = int(m.group(1))
            except (TypeError, ValueError):
                value = None
        matches.append(Match(sig, line, value))
    return matches


def signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def classify(
    *,
    result: dict[str, Any] | None,
    returncode: int | None,
    timed_out: bool,
    log_text: str,
    timeout_s: float,
    signatures: tuple[Signature, ...] | None = None,
    infra: str | None = None,
) -> Outcome:
    """Decide status, class and reason for one smoke run.

    - the runtime failed before the smoke ran (``infra``: why; no result JSON): error / infra, a class of its
      own that is no verdict on the cell (promotion does not count it, JUnit reports <error>);
    - timed out: fail / timeout (whatever was printed);
    - killed by a signal (negative return code): fail / crash, named by the signal;
    - no result JSON: fail, classed by the first failure signature in the log, else "error";
    - a result JSON: its status; a fail without a class takes the log's first failure signature;
      a pass whose log shows a degrading signature (AutoTuner skipped tactics) becomes degraded;
    - a result that is not a fail from a process that exited non-zero: fail / exit-status (the exit status
      and the recorded result must agree: a smoke that records pass and exits 1 did not pass).

    Terminal escape sequences are stripped from the log (and every other control character from the
    result's reason) before anything is matched or kept.
    """
    log_text = strip_ansi(log_text)
    matches = scan(log_text, signatures)
    metrics: dict[str, Any] = {}
    for m in matches:
        if m.signature.metric and m.value is not None:
            metrics[m.signature.metric] = m.value
    faults = [m for m in matches if m.signature.status is None]
    degrading = [m for m in matches if m.signature.status == "degraded"]
    if faults:
        metrics["log_signatures"] = ", ".join(m.signature.failure_class for m in faults)
    seen = f" (log: {faults[0].line})" if faults else ""

    if infra is not None and result is None and not timed_out:
        return Outcome("error", "infra", terminal_text(infra)[:500], metrics)
    if timed_out:
        return Outcome("fail", "timeout", f"timed out after {timeout_s:g} s{seen}", metrics)
    if returncode is not None and returncode < 0:
        return Outcome("fail", "crash", f"killed by {signal_name(returncode)}{seen}", metrics)
    cls: str | None
    if result is None:
        cls = faults[0].signature.failure_class if faults else "error"
        last = _last_line(log_text)
        return Outcome("fail", cls, f"exited with status {returncode} without a result{seen or f': {last}'}",
                       metrics)

    status = str(result.get("status", "fail"))
    reason = terminal_text(str(result.get("reason", "")))
    if status not in RESULT_STATUSES:
        return Outcome("fail", "error", f"recorded an unknown status {terminal_text(status)[:40]!r}", metrics)
    if returncode is not None and returncode != 0 and status != "fail":
        return Outcome("fail", "exit-status", f"recorded {status!r} but exited with status {returncode}"
                       + (f" ({reason})" if reason else ""), metrics)
    cls = terminal_text(str(result["failure_class"]))[:80] if result.get("failure_class") else None
    if status == "fail" and not cls:
        cls = faults[0].signature.failure_class if faults else "error"
    if status == "pass" and degrading:
        d = degrading[0]
        status, cls = "degraded", d.signature.failure_class
        reason = f"{d.line}" + (f"; {reason}" if reason else "")
    return Outcome(status, cls if status in ("fail", "degraded") else None, reason, metrics)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"
