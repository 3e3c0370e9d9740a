"""The promotion policy: ``[matrix.promotion]`` and ``[stacks.<name>.promotion]`` of matrix.toml, one model,
checked before any cell is expanded (``matrix.validation``) and read by promotion."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from pinmatrix.errors import PinmatrixError
from pinmatrix.hostprobe import DriverVersionError, check_driver_spec
from pinmatrix.project.matrix_toml import Matrix, require_stack
from pinmatrix.statuses import INFRA_STATUSES, STATUSES

MAX_TRUSTED_HOSTS = 64
MAX_KEY_PATH = 4096


class PromotionPolicy(BaseModel):
    """``[matrix.promotion]`` (default for every stack) and ``[stacks.<name>.promotion]`` (per stack,
    overriding the default key by key)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    required_smokes: list[str] = Field(default_factory=lambda: ["*"], min_length=1)
    """Smokes that must be clean. "*" stands for every smoke selected for the cell."""
    hosts: Literal["every-gpu"] | list[str] = "every-gpu"
    """Where they must be clean: "every-gpu" = on a host of every GPU of the stack that the cell's arch
    covers (any host for CPU-only cells), or a list of gpu axis values ("sm_90", "sm_121") / product name
    fragments ("H200")."""
    min_clean_runs: int = Field(default=1, ge=1)
    """Distinct clean runs needed per required smoke and GPU."""
    repository: str = Field(default="known-good", pattern=r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
    """Promoted images go to <registry>/<repository>/<stack>."""
    tag: str = Field(default="known-good", pattern=r"^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}$")
    """The tag that moves to the newest promoted cell of the stack."""
    accept: list[str] = Field(default_factory=lambda: ["pass"], min_length=1)
    """Statuses that count as clean (add "xfail" to accept known, expected failures)."""
    drivers: list[str] = Field(default_factory=list, max_length=32)
    """NVIDIA driver ranges the evidence must cover: for each (a version, ``580.142``, or a range, ``>=590,<595``)
    every required smoke needs a clean run on a host whose driver is in it. Empty: any driver."""
    uncovered_driver: Literal["warn", "refuse"] = "warn"
    """What ``pull`` does on a host whose driver is not among the drivers the image's evidence was gathered on:
    say so and pull ("warn"), or pass the image over ("refuse")."""
    host_runs: Literal["refuse", "identical"] = "refuse"
    """Results measured in a host's own environment instead of the image (the host runtime): "refuse" (they
    never count), or "identical" (they count when the host's Python and every locked package were the cell's,
    as recorded in the result's environment.host_vs_lock)."""
    trusted_hosts: list[str] | None = Field(default=None, max_length=MAX_TRUSTED_HOSTS)
    """GPU hosts' public keys (``pinmatrix keygen --host``; paths relative to the matrix). When set, promotion
    counts only results carried by an envelope one of these keys signed for the image digest they ran on
    (``pinmatrix results --import-signed``). Unset: every recorded result counts."""

    @field_validator("accept")
    @classmethod
    def _statuses(cls, v: list[str]) -> list[str]:
        verdicts = [s for s in STATUSES if s not in INFRA_STATUSES]  # an infrastructure error is no verdict
        bad = [s for s in v if s not in verdicts]
        if bad:
            raise ValueError(f"unknown status {bad[0]!r} (statuses: {', '.join(verdicts)})")
        if "fail" in v:
            raise ValueError("'fail' can never count as clean")
        return v

    @field_validator("drivers")
    @classmethod
    def _drivers(cls, v: list[str]) -> list[str]:
        try:
            return [check_driver_spec(d) for d in v]
        except DriverVersionError as err:
            raise ValueError(str(err)) from None

    @field_validator("trusted_hosts")
    @classmethod
    def _trusted_hosts(cls, v: list[str] | None) -> list[str] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("trusted_hosts: list at least one host's public key file, or leave the key out")
        bad = [p for p in v if not p.strip() or len(p) > MAX_KEY_PATH or "\0" in p]
        if bad:
            raise ValueError(f"trusted_hosts: {bad[0][:40]!r} is not a key file's path")
        return v

    @field_validator("hosts")
    @classmethod
    def _hosts(cls, v: Any) -> Any:
        if isinstance(v, list) and not v:
            raise ValueError("hosts: list at least one gpu, or use \"every-gpu\"")
        return v


def policy_for(matrix: Matrix, stack: str) -> PromotionPolicy:
    """The stack's policy from matrix.toml: ``[matrix.promotion]`` updated by ``[stacks.<stack>.promotion]``.
    Errors name the file, line and key."""
    merged: dict[str, Any] = dict(matrix.settings.promotion or {})
    own = dict(require_stack(matrix, stack).promotion or {})
    merged.update(own)
    try:
        return PromotionPolicy.model_validate(merged)
    except ValidationError as err:
        first = err.errors()[0]  # the input is a table: every error is at one of its keys
        key = str(first["loc"][0])
        base = ("stacks", stack, "promotion") if key in own else ("matrix", "promotion")
        raise PinmatrixError(matrix.where((*base, key), first["msg"])) from None


def trusted_host_keys(matrix: Matrix, stack: str, policy: PromotionPolicy) -> list[Path]:
    """The files of the policy's ``trusted_hosts``, relative to the matrix's folder; a path that is not a file
    is one line naming the matrix key."""
    paths = [matrix.root / p for p in policy.trusted_hosts or []]
    missing = [str(p) for p in paths if not p.is_file()]
    if missing:
        own = "trusted_hosts" in (require_stack(matrix, stack).promotion or {})
        base = ("stacks", stack, "promotion") if own else ("matrix", "promotion")
        raise PinmatrixError(matrix.where((*base, "trusted_hosts"), f"{missing[0]}: no such host key file"))
    return paths
