"""data/arch_rules.toml: what code built for a GPU target runs on which GPU (per form and suffix, each rule with its
source), the notes shown beside a verdict, the known issues the binaries can confirm, and which packages are a
stack's own; one strict model, read by ``archscan/scan``.

``archflag`` and ``archscan/verdict`` read the same file with the standard library only, as they also run inside
a cell's own Python where pydantic may be absent; the model is the check that the file holds what they expect."""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Literal

from pydantic import Field

from pinmatrix.datamodel import Strict
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import Name, OneLine, PackageName
from pinmatrix.project.document import load_document

RULES_FILE = "data/arch_rules.toml"
_TARGET = r"^(sm|compute)_\d+[af]?$"  # as cuobjdump names a binary's target


class ArchRulesError(PinmatrixError):
    """arch_rules.toml is malformed: one line naming the file, the line and the key."""


class TargetRule(Strict):
    """Where code of one form and suffix runs: ``on`` which capabilities, ``runs`` natively or by the PTX JIT."""

    on: Literal["same-major-newer-minor", "exact", "newer"]
    runs: Literal["native", "jit"]
    source: OneLine


class FormRules(Strict):
    """The rules of one form (SASS or PTX), per suffix: plain, arch-specific ('a'), family ('f')."""

    plain: TargetRule
    a: TargetRule
    f: TargetRule


class VerdictNotes(Strict):
    """Words shown beside a verdict; nothing here decides one."""

    jit: OneLine
    older_minor: OneLine
    family: OneLine
    other_gpus: OneLine
    fallback: OneLine


class IssueEvidence(Strict):
    """A known issue the binaries can confirm: on ``gpu``, FP4 kernel groups (``fp4_targets``) without
    ``native_target`` code are its mechanism."""

    known_issue: Name
    gpu: str = Field(pattern=r"^sm_\d+$")
    native_target: str = Field(pattern=_TARGET)
    fp4_targets: tuple[str, ...] = Field(min_length=1)
    aot_fp4_modules: tuple[Name, ...] | None = None  # the AOT layer's modules that hold FP4 kernels; None: all
    source: OneLine
    mechanism: OneLine


class OwnPackages(Strict):
    """A stack's own packages: its pins but ``not_own``, plus ``also``."""

    not_own: tuple[PackageName, ...] = ()
    also: tuple[PackageName, ...] = ()
    why: OneLine


class ArchRulesDoc(Strict):
    """data/arch_rules.toml."""

    sass: FormRules
    ptx: FormRules
    notes: VerdictNotes
    evidence: tuple[IssueEvidence, ...] = ()
    own_packages: OwnPackages
    jit_packages: dict[PackageName, OneLine] = Field(default_factory=dict)  # compile at run time: said beside


def parse_arch_rules(text: str, name: str = RULES_FILE) -> ArchRulesDoc:
    """The rules' text -> ArchRulesDoc; ArchRulesError, one line ``NAME:LINE: key: message``."""
    return load_document(Path(name), ArchRulesDoc, what="an arch rule table", content=text, error=ArchRulesError)


@cache
def shipped_arch_rules() -> ArchRulesDoc:
    """The rules pinmatrix ships."""
    return parse_arch_rules(resources.files("pinmatrix").joinpath(RULES_FILE).read_text(encoding="utf-8"))
