"""matrix.toml: the typed schema (pydantic) and the loader that turns every problem into one located line
``matrix.toml:LINE: key.path: message``."""

from __future__ import annotations

import re
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from pinmatrix import names
from pinmatrix.archflag import ArchFlag, split_flags
from pinmatrix.datamodel import Strict, key_path
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.names import (
    EnvValue,
    FreeText,
    HttpUrl,
    Name,
    OneLine,
    PackageName,
    RequirementText,
    SmokeSelector,
    shown,
)
from pinmatrix.project.checkout import source_url
from pinmatrix.project.document import Where, document_text, load_document
from pinmatrix.project.tomlpos import TomlLocator

DEFAULT_MATRIX = Path("matrix.toml")
_GPU = re.compile(r"^sm_(\d+)(\d)$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _check_version(value: str) -> str:
    return names.check_version(value)


class AxisValue(Strict):
    """A version on a package axis, optionally with patches, a label and a source build."""

    version: str
    patches: tuple[Name, ...] = ()
    label: str | None = None
    source_build: bool = False

    _v = field_validator("version")(classmethod(lambda cls, v: _check_version(v)))

    @field_validator("label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        return None if v is None else names.check_name(v, "label")

    @property
    def display(self) -> str:
        if self.label:
            return f"{self.version}-{self.label}"
        if self.patches:
            return f"{self.version}-{'+'.join(self.patches)}"
        return self.version + ("-src" if self.source_build else "")


class EnvVariant(Strict):
    label: str | None = None
    vars: dict[str, EnvValue] = Field(default_factory=dict)

    @field_validator("label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        return None if v is None else names.check_name(v, "label")

    @field_validator("vars")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            names.check_env_name(name)
        return v

    @property
    def display(self) -> str:
        if self.label:
            return self.label
        if not self.vars:
            return "default"
        return ",".join(f"{k}={v}" for k, v in sorted(self.vars.items()))


def _as_axis_values(values: Any) -> Any:
    if isinstance(values, list):
        return [{"version": v} if isinstance(v, str) else v for v in values]
    return values


def _as_env_variants(values: Any) -> Any:
    if isinstance(values, list):
        out = []
        for v in values:
            if isinstance(v, dict) and not ({"vars", "label"} & set(v)):
                v = {"vars": v}
            out.append(v)
        return out
    return values


NonEmpty = typing.Annotated[list[AxisValue], Field(min_length=1)]


class Axes(Strict):
    driver: typing.Annotated[list[str], Field(min_length=1)] | None = None
    cuda: typing.Annotated[list[str], Field(min_length=1)] | None = None
    gpu: typing.Annotated[list[str], Field(min_length=1)] | None = None
    arch: typing.Annotated[list[str], Field(min_length=1)] | None = None
    torch: NonEmpty | None = None
    triton: NonEmpty | None = None
    xformers: NonEmpty | None = None
    flashinfer: NonEmpty | None = None
    vllm: NonEmpty | None = None
    env: typing.Annotated[list[EnvVariant], Field(min_length=1)] | None = None

    _pkg = field_validator("torch", "triton", "xformers", "flashinfer", "vllm", mode="before")(
        classmethod(lambda cls, v: _as_axis_values(v))
    )
    _env = field_validator("env", mode="before")(classmethod(lambda cls, v: _as_env_variants(v)))

    @field_validator("driver", "cuda")
    @classmethod
    def _versions(cls, v: list[str] | None) -> list[str] | None:
        for item in v or []:
            _check_version(item)
        return v

    @field_validator("gpu")
    @classmethod
    def _gpus(cls, v: list[str] | None) -> list[str] | None:
        for item in v or []:
            if not _GPU.match(item):
                raise ValueError(f"gpu {item!r} must look like sm_90, sm_100 or sm_121")
        return v

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: list[str] | None) -> list[str] | None:
        for item in v or []:
            for flag in split_flags(item):
                try:
                    ArchFlag.parse(flag)
                except ValueError:
                    raise ValueError(f"arch flag {flag!r} must look like 9.0, 9.0a, 12.0f or 9.0a+PTX") from None
        return v


class Stack(Strict):
    description: FreeText = ""
    python: str | None = None
    platform: str | None = None
    gpu_required: bool = True
    smokes: list[SmokeSelector] = Field(default_factory=list)
    extra: list[RequirementText] = Field(default_factory=list)  # fixed PEP 508 requirements in every cell
    axes: Axes = Field(default_factory=Axes)
    packages: dict[PackageName, NonEmpty] = Field(default_factory=dict)
    zip: list[list[Name]] = Field(default_factory=list)
    include: list[dict[str, Any]] = Field(default_factory=list)
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    promotion: dict[str, Any] | None = None
    base: Base | None = None  # replaces [matrix.base] for this stack (e.g. a pinned image with another Python)

    _pkgs = field_validator("packages", mode="before")(
        classmethod(lambda cls, v: {k: _as_axis_values(x) for k, x in v.items()} if isinstance(v, dict) else v)
    )
    _py = field_validator("python")(classmethod(lambda cls, v: v if v is None else _check_python(v)))
    _platform = field_validator("platform")(classmethod(lambda cls, v: v if v is None else _check_platform(v)))


def _check_python(value: str) -> str:
    if not re.fullmatch(r"3\.\d+", value):
        raise ValueError(f"python {shown(value)} must look like 3.12")
    return value


def _check_platform(value: str) -> str:
    return names.check_name(value, "platform")


class Patch(Strict):
    package: PackageName
    applies_to: str
    upstream: OneLine
    kind: Literal["installed-tree", "source"] = "installed-tree"
    source: str | None = None  # path under patches/ or an http(s) URL
    sha256: str | None = None
    contained_in: str | None = None  # first upstream release that contains it
    note: FreeText = ""

    @field_validator("source")
    @classmethod
    def _source(cls, v: str | None) -> str | None:
        return None if v is None else names.check_repo_path_or_url(v)

    _spec = field_validator("applies_to")(classmethod(lambda cls, v: names.check_specifier(v)))

    @field_validator("contained_in")
    @classmethod
    def _contained(cls, v: str | None) -> str | None:
        return None if v is None else _check_version(v)

    @field_validator("sha256")
    @classmethod
    def _sha(cls, v: str | None) -> str | None:
        if v is not None and not _SHA256.match(v):
            raise ValueError("sha256 must be 64 lowercase hex digits")
        return v

    @model_validator(mode="after")
    def _needs_source(self) -> Patch:
        if self.contained_in is None and (self.source is None or self.sha256 is None):
            raise ValueError("a patch not yet contained upstream needs both 'source' and 'sha256'")
        if (self.source is None) != (self.sha256 is None):
            raise ValueError("'source' and 'sha256' go together")
        return self


class Boundary(Strict):
    """Where a known issue starts along one parameter of a smoke (or one axis of its stack): the first failing
    value a bisect should find. ``pinmatrix bisect`` confirms it or flags it as moved."""

    param: Name  # a smoke parameter ("M") or a stack axis ("xformers")
    expect_first_fail: int | float | str
    smoke: SmokeSelector | None = None  # default: every smoke of the issue that has this parameter

    @field_validator("expect_first_fail", mode="before")
    @classmethod
    def _scalar(cls, v: Any) -> Any:
        """One line for a value of another type, not one per member of the union."""
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ValueError("must be a number or a string (a parameter value or a version)")
        return v


class KnownIssueSpec(Strict):
    id: Name
    when: dict[str, OneLine]  # axis -> exact value, or a version specifier ('>=0.0.28,<=0.0.35')
    without_patches: list[Name] = Field(default_factory=list)
    smokes: list[SmokeSelector] = Field(min_length=1)
    expect: Literal["fail", "degraded", "skip"] = "fail"
    failure_class: Name | None = Field(default=None, alias="class")
    note: FreeText
    source: OneLine = ""
    upstream: OneLine = ""  # the upstream PR or issue URL of its fix or report (`pinmatrix upstream` reads it)
    boundary: Boundary | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Base(Strict):
    kind: Literal["mmdebstrap", "image"] = "mmdebstrap"
    image: OneLine | None = None
    suite: str = "trixie"
    mirror: HttpUrl | None = None
    source_date_epoch: int = 1735689600
    packages: list[str] = Field(default_factory=list)
    variant: Literal["minbase", "extract"] = "minbase"  # extract: unpack only, no maintainer script runs

    _suite = field_validator("suite")(classmethod(lambda cls, v: names.check_debian_name(v, "suite")))
    _debs = field_validator("packages")(
        classmethod(lambda cls, v: [names.check_debian_name(p, "Debian package") for p in v])
    )

    @model_validator(mode="after")
    def _image_pinned(self) -> Base:
        if self.kind == "image":
            if not self.image or not re.search(r"@sha256:[0-9a-f]{64}$", self.image):
                raise ValueError("base.image must be pinned by digest: name@sha256:<64 hex>")
        return self


class Index(Strict):
    name: Name
    url: HttpUrl
    default: bool = False
    explicit: bool = False
    packages: list[PackageName] = Field(default_factory=list)


class Settings(Strict):
    name: Name = "pinmatrix"
    python: str = "3.13"
    platform: str = "x86_64-manylinux_2_28"
    registry: str = "127.0.0.1:5000/pinmatrix"
    source: str | None = None  # the repository URL images name (org.opencontainers.image.source: image/annotations.py)
    engine: Literal["auto", "docker", "podman"] = "auto"
    exclude_newer: OneLine | None = None  # ISO 8601; makes locks reproducible as the index grows
    torch_index: HttpUrl | None = None  # URL template with {cuda_nodot}, for non-default CUDA variants of torch
    ca_certificates: list[OneLine] = Field(default_factory=list)  # trusted by the builder's downloads
    ca_certificates_in_images: bool = False  # also installed in every image (their content joins the cell id)
    indexes: list[Index] = Field(default_factory=list)
    base: Base = Field(default_factory=Base)
    promotion: dict[str, Any] | None = None
    # Expansion refuses a matrix with more combinations than this before making any (docs/matrix.md).
    max_combinations: int = Field(default=100_000, ge=1)
    # The build cache in a registry (build --cache-from / --cache-to override them; --no-build-cache drops both).
    cache_from: str | None = None
    cache_to: str | None = None

    _platform = field_validator("platform")(classmethod(lambda cls, v: _check_platform(v)))
    _registry = field_validator("registry")(classmethod(lambda cls, v: names.check_registry(v)))
    _source = field_validator("source")(classmethod(lambda cls, v: None if v is None else source_url(v)))
    _cache = field_validator("cache_from", "cache_to")(
        classmethod(lambda cls, v: None if v is None else names.check_cache_repository(v)))

    @field_validator("python")
    @classmethod
    def _py(cls, v: str) -> str:
        return _check_python(v)


class MatrixDoc(Strict):
    matrix: Settings = Field(default_factory=Settings)
    stacks: dict[Name, Stack] = Field(min_length=1)
    patches: dict[Name, Patch] = Field(default_factory=dict)
    known_issues: list[KnownIssueSpec] = Field(default_factory=list)


class Matrix:
    """A loaded, schema-valid matrix.toml with the means to locate keys in its text."""

    def __init__(self, doc: MatrixDoc, path: Path, text: str) -> None:
        self.doc = doc
        self.path = path
        self.root = path.parent
        self.text = text
        self.locator = TomlLocator(text)

    @property
    def settings(self) -> Settings:
        return self.doc.matrix

    @property
    def stacks(self) -> dict[str, Stack]:
        return self.doc.stacks

    @property
    def patches(self) -> dict[str, Patch]:
        return self.doc.patches

    @property
    def known_issues(self) -> list[KnownIssueSpec]:
        return self.doc.known_issues

    def where(self, path: tuple[str | int, ...], message: str) -> str:
        return f"{self.path.name}:{self.locator.line_of(path)}: {key_path(path)}: {message}"


# ---------------------------------------------------------------------------------------------- loading


MAX_MATRIX_BYTES = 2 * 1024 * 1024  # a matrix is a few kB; this bounds what parsing may cost
FREE_TEXT_KEYS = frozenset({"description", "note"})  # the only values that may hold newlines and tabs


def _text_problems(data: Any, where: Where) -> list[str]:
    """Every key and string value holding a control, bidi or invisible character (newlines and tabs only in
    free text), as located lines. Runs before the schema, so no such text reaches any other check."""
    problems: list[str] = []
    stack: list[tuple[tuple[str | int, ...], Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                bad = names.text_problem(key)
                if bad:
                    problems.append(f"{where((*path, key))}: key {bad}")
                    continue
                stack.append(((*path, key), item))
        elif isinstance(value, list):
            stack.extend(((*path, i), item) for i, item in enumerate(value))
        elif isinstance(value, str):
            free = bool(path) and path[-1] in FREE_TEXT_KEYS
            bad = names.text_problem(value, newlines=free)
            if bad:
                problems.append(f"{where(path)}: {shown(value)} {bad}")
    return sorted(problems, key=lambda line: int(line.split(":")[1]))


def load_matrix(path: Path | None = None, text: str | None = None) -> Matrix:
    """Read and schema-check matrix.toml. Raises MatrixError with one located line per problem. With ``text``
    (a matrix read from stdin), ``path`` only names it in messages and its folder is the project root.

    Before TOML parsing: at most MAX_MATRIX_BYTES, UTF-8 (a byte-order mark is accepted), arrays and inline
    tables nested at most ``document.MAX_NESTING`` deep. Before the schema: no control, bidi or invisible
    character in any key or value (names.py has the grammar the schema then applies)."""
    path = Path(path) if path is not None else DEFAULT_MATRIX
    text = document_text(path, what="a matrix", content=text, name=path.name, problems=MatrixError,
                         max_bytes=MAX_MATRIX_BYTES, hint="pass the matrix path, or run where matrix.toml is")
    doc = load_document(path, MatrixDoc, what="a matrix", content=text, name=path.name, problems=MatrixError,
                        max_bytes=MAX_MATRIX_BYTES, screen=_text_problems)
    return Matrix(doc, path, text)


Stack.model_rebuild()  # Stack.base refers to Base, defined after it


def require_stack(matrix: Matrix, name: str) -> Stack:
    """The stack called ``name``; one line naming the file and the stacks there are when there is none."""
    stack = matrix.stacks.get(name)
    if stack is None:
        raise PinmatrixError(f"{matrix.path.name}: unknown stack {name!r} (stacks: {', '.join(matrix.stacks)})")
    return stack
