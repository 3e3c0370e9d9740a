"""What the vLLM smokes share (no SMOKES here: not a smoke module of its own). Standard library only at import
time: the runner, CI and vLLM's spawned engine core all import it without torch.

- The engine core process. vLLM 0.20.0 starts its engine core (and workers) with multiprocessing, by default
  by fork; a smoke process has initialised CUDA before (the needs check calls cuInit, ``ctx.torch()`` asks torch
  for the device), and a forked child of such a process dies with "Cannot re-initialize CUDA in forked
  subprocess". vLLM only switches to spawn by itself when *torch* reports CUDA initialised, so
  ``prepare_engine_env`` sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` before vllm is imported. A spawned child
  re-imports the smoke file as ``__mp_main__``: its top level must stay free of work (the smoke runs only under
  ``if __name__ == "__main__"``) and import nothing but these standard-library modules.
- vLLM's own log lines. vLLM logs which attention backend, which MoE backend and which linear kernels it chose
  (INFO, from the engine core process). ``OutputTee`` routes this process's fd 1 and 2, which the engine core
  inherits, through a pipe that is copied on to the runner's log and kept; ``chosen_backends`` parses the
  lines (formats of vLLM 0.20.0: vllm/platforms/cuda.py, fused_moe/oracle/*.py, kernels/linear/__init__.py,
  fused_moe/fused_moe.py).
- The reference comparison (``compare_generation``): vLLM's greedy tokens and top-k logprobs against a
  transformers model teacher-forced on vLLM's own tokens, in units of each reference row's standard deviation.
"""

from __future__ import annotations

import faulthandler
import math
import os
import re
import select
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

SPAWN_ENV = "VLLM_WORKER_MULTIPROC_METHOD"


def prepare_engine_env(environ: Any = None) -> dict[str, str]:
    """Set what vLLM must see before it is imported: spawn for its engine core and workers, INFO logging
    without colour codes (the backend lines are parsed from the log). Returns the values set. An explicit
    ``fork`` is overridden: it cannot work in a process that has initialised CUDA."""
    env = os.environ if environ is None else environ
    env[SPAWN_ENV] = "spawn"
    env.setdefault("VLLM_LOGGING_LEVEL", "INFO")
    env["VLLM_LOGGING_COLOR"] = "0"
    env.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    return {k: env[k] for k in (SPAWN_ENV, "VLLM_LOGGING_LEVEL", "VLLM_LOGGING_COLOR", "VLLM_CONFIGURE_LOGGING")}


# ---------------------------------------------------------------------------------------------- output tee
class OutputTee:
    """fd 1 and 2 of this process, and so of every process it starts from now on, go into one pipe; a thread
    copies what arrives to the original stdout (the runner's log) and keeps it (``text()``). ``stop()`` when the
    smoke's work is done."""

    def __init__(self, keep: int = 8 << 20) -> None:
        self.keep = keep
        self._chunks: list[bytes] = []
        self._size = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._saved: tuple[int, int] | None = None
        self._read = -1
        self._fault_file: Any = None

    def start(self) -> OutputTee:
        sys.stdout.flush()
        sys.stderr.flush()
        self._saved = (os.dup(1), os.dup(2))
        self._read, write = os.pipe()
        os.dup2(write, 1)
        os.dup2(write, 2)
        os.close(write)
        if faulthandler.is_enabled():  # a hang's stacks (the runner's SIGABRT) go straight to the log, not the pipe
            self._fault_file = os.fdopen(os.dup(self._saved[1]), "w")
            faulthandler.enable(file=self._fault_file, all_threads=True)
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()
        return self

    def _pump(self) -> None:
        assert self._saved is not None
        out = self._saved[0]
        while not self._stop.is_set():
            ready, _, _ = select.select([self._read], [], [], 0.1)
            if not ready:
                continue
            data = os.read(self._read, 1 << 16)
            if not data:
                return
            os.write(out, data)
            with self._lock:
                if self._size < self.keep:
                    self._chunks.append(data)
                    self._size += len(data)

    def text(self, settle_s: float = 0.3) -> str:
        """Everything captured so far (after ``settle_s`` for lines still in the pipe)."""
        sys.stdout.flush()
        sys.stderr.flush()
        threading.Event().wait(settle_s)
        with self._lock:
            return b"".join(self._chunks).decode(errors="replace")

    def stop(self) -> None:
        """Put fd 1 and 2 back: the smoke's own last lines (its status, the result line) then reach the log
        directly; a process that still holds the pipe (vLLM's engine core) gets EPIPE if it writes again."""
        if self._saved is None:
            return
        sys.stdout.flush()
        sys.stderr.flush()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        while select.select([self._read], [], [], 0)[0]:  # what the pump had not read yet
            data = os.read(self._read, 1 << 16)
            if not data:
                break
            os.write(self._saved[0], data)
        os.dup2(self._saved[0], 1)
        os.dup2(self._saved[1], 2)
        for fd in (*self._saved, self._read):
            os.close(fd)
        self._saved = None
        if self._fault_file is not None:
            faulthandler.enable(file=sys.stderr, all_threads=True)
            self._fault_file.close()
            self._fault_file = None


# ------------------------------------------------------------------------------------------- log parsing
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# vllm/platforms/cuda.py: logger.info_once("Using %s attention backend out of potential backends: %s.", ...)
_ATTENTION = re.compile(r"Using (\w+) attention backend out of potential backends: \[([^\]]*)\]")
# vllm/platforms/cuda.py, a backend asked for by name: logger.info("Using %s backend.", selected_backend)
_ATTENTION_ASKED = re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) backend\.\s*$")
# fused_moe/oracle/{unquantized,fp8,nvfp4,...}.py: f"Using {backend.value} Fp8 MoE backend out of potential
# backends: {available}." (nvfp4 quotes the value: "Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend ..."); mxfp8:
# "Using '%s' MxFp8 MoE backend."
_MOE = re.compile(r"Using '?([A-Za-z0-9_ ]+?)'? (Unquantized|Fp8|NvFp4|MxFp8|MxFp4|Mxfp4|Int8|Wna16|W4A8) MoE "
                  r"backend(?: out of potential backends: \[([^\]]*)\])?\.")
# fused_moe/oracle/*.py: logger.info_once("Using %s", prepare_finalize.__class__.__name__)
_PREPARE_FINALIZE = re.compile(r"Using (\w*PrepareAndFinalize\w*)\s*$")
# kernels/linear/__init__.py: logger.info_once("Selected %s for %s", kernel_type.__name__, module_name)
_LINEAR = re.compile(r"Selected (\w+) for (\w+)")
# fused_moe/fused_moe.py: the Triton MoE kernel's tuning file, or the default config
_MOE_CONFIG = re.compile(r"Using configuration from (\S+) for MoE layer|Using default MoE config\.")
# FlashInfer's autotuner on a GPU its kernels do not cover (the GB10 slow path, REFERENCE.md)
_SKIPPED_TACTICS = re.compile(r"\[AutoTuner\]: Skipped (\d+) unsupported tactic")


def _options(text: str | None) -> list[str]:
    return [o.strip().strip("'\"") for o in (text or "").split(",") if o.strip()]


def chosen_backends(log: str) -> dict[str, str]:
    """What vLLM said it chose, from its log: ``attention_backend`` (+ ``attention_candidates``),
    ``moe_backend.<kind>`` (+ ``.candidates``), ``moe_prepare_finalize``, ``linear_kernel.<method>``,
    ``moe_kernel_config`` and ``autotuner_skipped_tactics``. A line vLLM repeats (``info_once`` per process) is
    read once; the first choice of each kind is kept."""
    found: dict[str, str] = {}

    def put(key: str, value: str) -> None:
        found.setdefault(key, value)

    for raw in log.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if m := _ATTENTION.search(line):
            put("attention_backend", m.group(1))
            put("attention_candidates", " ".join(_options(m.group(2))))
        elif m := _ATTENTION_ASKED.search(line):
            put("attention_backend", m.group(1))
        if m := _MOE.search(line):
            kind = m.group(2).lower()
            put(f"moe_backend.{kind}", m.group(1).strip())
            if m.group(3) is not None:
                put(f"moe_backend.{kind}.candidates", " | ".join(_options(m.group(3))))
        if m := _PREPARE_FINALIZE.search(line):
            put("moe_prepare_finalize", m.group(1))
        if m := _LINEAR.search(line):
            put(f"linear_kernel.{m.group(2)}", m.group(1))
        if m := _MOE_CONFIG.search(line):
            put("moe_kernel_config", m.group(1) or "default")
        if m := _SKIPPED_TACTICS.search(line):
            put("autotuner_skipped_tactics", m.group(1))
    return found


# vLLM refusing a configuration while its engine core starts (the parent only sees "Engine core initialization
# failed"): e.g. fused_moe/oracle/fp8.py "Found VLLM_USE_FLASHINFER_MOE_FP8=1, but no FlashInfer FP8 MoE backend
# supports the configuration." or "No FP8 MoE backend supports the deployment configuration."
_REFUSED = re.compile(r"\b(NotImplementedError|ValueError): (.*(?:backend supports|does not support|not supported|"
                      r"No valid attention backend|is not valid for this configuration).*)$")


def engine_refusal(log: str) -> str | None:
    """The first configuration refusal in vLLM's log (exception type and message), or None."""
    for raw in log.splitlines():
        if m := _REFUSED.search(_ANSI.sub("", raw).rstrip()):
            return f"{m.group(1)}: {m.group(2)}"
    return None


# ------------------------------------------------------------------------------------ reference comparison
@dataclass(frozen=True)
class GenerationCheck:
    """vLLM's greedy tokens and logprobs against reference rows (row t: the reference's logprobs after the
    prompt and vLLM's tokens[:t]); deficits and deviations in units of the row's standard deviation."""

    token_tol: float
    logprob_tol: float
    exact: int  # tokens equal to the reference row's argmax
    worst_token: float  # max over t of (row max - row[token]) / sd
    worst_token_at: int
    worst_logprob: float  # max over t and vLLM's top-k of |vLLM logprob - reference logprob| / sd
    worst_logprob_at: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _sd(row: list[float]) -> float:
    mean = math.fsum(row) / len(row)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in row) / len(row))


def compare_generation(tokens: list[int], logprobs: list[dict[int, float]], reference: list[list[float]],
                       token_tol: float, logprob_tol: float) -> GenerationCheck:
    """Token t must be the reference's greedy choice, or within ``token_tol`` sd of the row's maximum (two
    implementations may break a near-tie differently); each logprob vLLM reported for step t (its top-k and
    its token) must be within ``logprob_tol`` sd of the reference's logprob of that token. Logprobs and logits
    of a row differ by one constant, so their sd is the same."""
    problems: list[str] = []
    if len(tokens) != len(reference):
        problems.append(f"{len(tokens)} tokens but {len(reference)} reference rows")
    if logprobs and len(logprobs) != len(tokens):
        problems.append(f"{len(tokens)} tokens but logprobs for {len(logprobs)} steps")
    exact, worst_tok, worst_tok_at, worst_lp, worst_lp_at = 0, 0.0, -1, 0.0, -1
    for t, (tok, row) in enumerate(zip(tokens, reference)):
        sd = _sd(row)
        if not sd > 0 or not all(math.isfinite(v) for v in row):
            problems.append(f"reference row {t} is degenerate (sd {sd:g})")
            continue
        if not 0 <= tok < len(row):
            problems.append(f"token {t} = {tok} is outside the vocabulary of {len(row)}")
            worst_tok, worst_tok_at = math.inf, t
            continue
        best = max(range(len(row)), key=lambda i: row[i])
        exact += tok == best
        deficit = (row[best] - row[tok]) / sd
        if deficit > worst_tok:
            worst_tok, worst_tok_at = deficit, t
        if deficit > token_tol:
            problems.append(f"token {t} = {tok} (reference {row[tok]:.4g}) but the reference's greedy choice is "
                            f"{best} ({row[best]:.4g}): {deficit:.3g} sd below it, beyond {token_tol:g} sd")
        if t < len(logprobs):
            for tid, lp in sorted(logprobs[t].items()):
                if not 0 <= tid < len(row):
                    problems.append(f"step {t}: logprob for token {tid}, outside the vocabulary")
                    continue
                dev = abs(lp - row[tid]) / sd if math.isfinite(lp) else math.inf
                if dev > worst_lp:
                    worst_lp, worst_lp_at = dev, t
                if dev > logprob_tol:
                    problems.append(f"step {t}: vLLM's logprob of token {tid} is {lp:.5g}, the reference's "
                                    f"{row[tid]:.5g}: {dev:.3g} sd apart, beyond {logprob_tol:g} sd")
    return GenerationCheck(token_tol, logprob_tol, exact, worst_tok, worst_tok_at, worst_lp, worst_lp_at, problems)


def least_likely(row: list[float]) -> int:
    """The token a forced-wrong-token fault puts in: the reference row's minimum."""
    return min(range(len(row)), key=lambda i: row[i])


def force_wrong_token(tokens: list[int], reference: list[list[float]], step: int = 3) -> list[int]:
    """A copy of ``tokens`` with token ``step`` replaced by the least likely token of its reference row (rows up
    to ``step`` depend only on earlier tokens, so they stay valid)."""
    if not 0 <= step < len(tokens):
        raise ValueError(f"step {step} is outside {len(tokens)} tokens")
    out = list(tokens)
    out[step] = least_likely(reference[step])
    return out


def logprob_dicts(steps: Any) -> list[dict[int, float]]:
    """vLLM's ``CompletionOutput.logprobs`` (one {token id: Logprob} per step) as plain {id: float}."""
    return [{int(tid): float(getattr(lp, "logprob", lp)) for tid, lp in (step or {}).items()} for step in steps or []]
