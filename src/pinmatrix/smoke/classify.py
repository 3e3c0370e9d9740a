"""Log classification: the signature table (``signatures.toml`` beside this module) applied to a smoke's
log, and the rules that turn a process outcome (result JSON, exit status, timeout) into a status."""

from __future__ import annotations

import re
import signal
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, StrictBool, ValidationError, ValidationInfo, field_validator
from pydantic_core import ErrorDetails, PydanticCustomError

from pinmatrix.datamodel import Strict, friendly_message
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import Name, OneLine, shown
from pinmatrix.sanitize import strip_ansi, terminal_text

SIGNATURES_PATH = Path(__file__).with_name("signatures.toml")
RESULT_STATUSES = ("pass", "fail", "skip", "degraded")  # what a smoke itself may record
_BAD_REGEX = "bad_regex"  # the error type of a pattern that is no regular expression


class SignatureError(PinmatrixError):
    """signatures.toml is malformed: one line that names the file, the row and the key."""


class Signature(Strict):
    """One ``[[signature]]`` row: a regular expression searched in a smoke's log, and the class it names."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    failure_class: Name = Field(alias="class")
    case: StrictBool = False  # true: the pattern is case-sensitive (read before ``pattern``, which it compiles)
    pattern: re.Pattern[str]
    status: Literal["degraded"] | None = None  # "degraded": a smoke that passed is degraded when this matches
    metric: Name | None = None  # a metric that takes the pattern's first group as an integer
    source: OneLine = ""

    @field_validator("pattern", mode="before")
    @classmethod
    def _compile(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str):
            return value  # a compiled pattern (built in memory), or a wrong type the field's own check names
        try:
            return re.compile(value, 0 if info.data.get("case") else re.IGNORECASE)
        except re.error as err:
            raise PydanticCustomError(_BAD_REGEX, "{error} in pattern {pattern}",
                                      {"error": str(err), "pattern": shown(value)}) from None


class SignatureTable(Strict):
    """signatures.toml: its ``[[signature]]`` rows, in file order (none: no log is classified by its text)."""

    signature: list[Signature] = Field(default_factory=list)


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


def load_signatures(path: Path = SIGNATURES_PATH) -> tuple[Signature, ...]:
    """The signature table of ``path``; SignatureError, one line naming the file, row and key, if malformed."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise SignatureError(f"{path}: cannot read log signatures: {err}") from None
    try:
        return tuple(SignatureTable.model_validate(data).signature)
    except ValidationError as exc:
        errors = exc.errors()
        first = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])  # a misspelt key first
        raise SignatureError(f"{path}: {_signature_problem(first)}") from None


def _signature_problem(err: ErrorDetails) -> str:
    """``signature #2: 'pattern': required key is missing``; a bad regex: ``signature #1: <re's words> in
    pattern '...'``."""
    loc = tuple(err["loc"])
    if len(loc) >= 2 and isinstance(loc[1], int):
        where, keys = [f"signature #{loc[1] + 1}"], loc[2:]
    else:
        where, keys = [str(p) for p in loc[:1]], loc[1:]
    if err["type"] == _BAD_REGEX:
        return ": ".join([*where, err["msg"]])
    if keys:
        where.append(repr(".".join(str(k) for k in keys)))
    return ": ".join([*where, friendly_message(err, SignatureTable)])


@lru_cache(maxsize=1)
def default_signatures() -> tuple[Signature, ...]:
    return load_signatures()


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
