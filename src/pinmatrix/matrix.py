"""matrix.toml: the typed schema (pydantic) and the loader that turns every problem into one located line
``matrix.toml:LINE: key.path: message``."""

from __future__ import annotations

import difflib
import hashlib
import re
import tomllib
import typing
from pathlib import Path
from typing import Any, Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pinmatrix.errors import MatrixError
from pinmatrix.tomlpos import TomlLocator

DEFAULT_MATRIX = Path("matrix.toml")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_GPU = re.compile(r"^sm_(\d+)(\d)$")
_ARCH_FLAG = re.compile(r"^(\d+)\.(\d)([af]?)(\+PTX)?$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_version(value: str) -> str:
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{value!r} is not a valid version") from None
    return value


def _check_specifier(value: str) -> str:
    try:
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{value!r} is not a valid version specifier (e.g. '>=0.0.28,<=0.0.35')") from None
    return value


class AxisValue(Strict):
    """A version on a package axis, optionally with patches, a label and a source build."""

    version: str
    patches: tuple[str, ...] = ()
    label: str | None = None
    source_build: bool = False

    _v = field_validator("version")(classmethod(lambda cls, v: _check_version(v)))

    @field_validator("label")
    @classmethod
    def _label(cls, v: str | None) -> str | None:
        if v is not None and not _NAME.match(v):
            raise ValueError(f"label {v!r} must be letters, digits, '.', '_' or '-'")
        return v

    @property
    def display(self) -> str:
        if self.label:
            return f"{self.version}-{self.label}"
        if self.patches:
            return f"{self.version}-{'+'.join(self.patches)}"
        return self.version + ("-src" if self.source_build else "")


class EnvVariant(Strict):
    label: str | None = None
    vars: dict[str, str] = Field(default_factory=dict)

    @field_validator("vars")
    @classmethod
    def _names(cls, v: dict[str, str]) -> dict[str, str]:
        for name in v:
            if not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not a valid environment variable name")
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
            for flag in split_arch(item):
                if not _ARCH_FLAG.match(flag):
                    raise ValueError(f"arch flag {flag!r} must look like 9.0, 9.0a, 12.0f or 9.0a+PTX")
        return v


def split_arch(value: str) -> list[str]:
    """'9.0a 12.1a' or '9.0a;12.1a' -> ['9.0a', '12.1a']; a lone '+PTX' attaches to the flag before it."""
    flags: list[str] = []
    for token in re.split(r"[\s;,]+", value.strip()):
        if not token:
            continue
        if token.upper() == "+PTX" and flags:
            flags[-1] += "+PTX"
        else:
            flags.append(token)
    return flags


class Stack(Strict):
    description: str = ""
    python: str | None = None
    platform: str | None = None
    gpu_required: bool = True
    smokes: list[str] = Field(default_factory=list)
    extra: list[str] = Field(default_factory=list)  # fixed PEP 508 requirements in every cell
    axes: Axes = Field(default_factory=Axes)
    packages: dict[str, NonEmpty] = Field(default_factory=dict)
    zip: list[list[str]] = Field(default_factory=list)
    include: list[dict[str, Any]] = Field(default_factory=list)
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    promotion: dict[str, Any] | None = None
    base: Base | None = None  # replaces [matrix.base] for this stack (e.g. a pinned image with another Python)

    _pkgs = field_validator("packages", mode="before")(
        classmethod(lambda cls, v: {k: _as_axis_values(x) for k, x in v.items()} if isinstance(v, dict) else v)
    )


class Patch(Strict):
    package: str
    applies_to: str
    upstream: str
    kind: Literal["installed-tree", "source"] = "installed-tree"
    source: str | None = None  # path under patches/ or an http(s) URL
    sha256: str | None = None
    contained_in: str | None = None  # first upstream release that contains it
    note: str = ""

    _spec = field_validator("applies_to")(classmethod(lambda cls, v: _check_specifier(v)))

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


class KnownIssueSpec(Strict):
    id: str
    when: dict[str, str]  # axis -> exact value, or a version specifier ('>=0.0.28,<=0.0.35')
    without_patches: list[str] = Field(default_factory=list)
    smokes: list[str] = Field(min_length=1)
    expect: Literal["fail", "degraded", "skip"] = "fail"
    failure_class: str | None = Field(default=None, alias="class")
    note: str
    source: str = ""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Base(Strict):
    kind: Literal["mmdebstrap", "image"] = "mmdebstrap"
    image: str | None = None
    suite: str = "bookworm"
    mirror: str | None = None
    source_date_epoch: int = 1735689600
    packages: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _image_pinned(self) -> Base:
        if self.kind == "image":
            if not self.image or not re.search(r"@sha256:[0-9a-f]{64}$", self.image):
                raise ValueError("base.image must be pinned by digest: name@sha256:<64 hex>")
        return self


class Index(Strict):
    name: str
    url: str
    default: bool = False
    explicit: bool = False
    packages: list[str] = Field(default_factory=list)


class Settings(Strict):
    name: str = "pinmatrix"
    python: str = "3.12"
    platform: str = "x86_64-manylinux_2_28"
    registry: str = "127.0.0.1:5000/pinmatrix"
    engine: Literal["auto", "docker", "podman"] = "auto"
    exclude_newer: str | None = None  # ISO 8601; makes locks reproducible as the index grows
    torch_index: str | None = None  # URL template with {cuda_nodot}, for non-default CUDA variants of torch
    ca_certificates: list[str] = Field(default_factory=list)
    indexes: list[Index] = Field(default_factory=list)
    base: Base = Field(default_factory=Base)
    promotion: dict[str, Any] | None = None

    @field_validator("python")
    @classmethod
    def _py(cls, v: str) -> str:
        if not re.match(r"^3\.\d+$", v):
            raise ValueError(f"python {v!r} must look like 3.12")
        return v


class MatrixDoc(Strict):
    matrix: Settings = Field(default_factory=Settings)
    stacks: dict[str, Stack] = Field(min_length=1)
    patches: dict[str, Patch] = Field(default_factory=dict)
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
        key = ".".join(str(p) for p in path)
        return f"{self.path.name}:{self.locator.line_of(path)}: {key}: {message}"


# ---------------------------------------------------------------------------------------------- loading


def _model_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> type[BaseModel] | None:
    """The pydantic model whose fields are the keys valid at ``loc``."""
    current: Any = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                alias = {f.alias: f for f in current.model_fields.values() if f.alias}
                field = alias.get(str(part))
            if field is None:
                return None
            current = field.annotation
        else:
            current = _element_type(current)
            if current is None:
                return None
        current = _unwrap(current)
    return current if isinstance(current, type) and issubclass(current, BaseModel) else None


def _unwrap(tp: Any) -> Any:
    while True:
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            tp = typing.get_args(tp)[0]
        elif origin in (typing.Union, getattr(__import__("types"), "UnionType")):
            args = [a for a in typing.get_args(tp) if a is not type(None)]
            tp = args[0] if len(args) == 1 else tp
            if len(args) != 1:
                return tp
        else:
            return tp


def _element_type(tp: Any) -> Any:
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin in (list, tuple) and args:
        return _unwrap(args[0])
    if origin is dict and len(args) == 2:
        return _unwrap(args[1])
    return None


def _friendly(err: dict[str, Any], model: type[BaseModel]) -> str:
    loc = tuple(err["loc"])
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(model, loc[:-1])
        msg = "unknown key"
        if parent is not None:
            names = [f.alias or n for n, f in parent.model_fields.items()]
            close = difflib.get_close_matches(str(loc[-1]), names, n=1, cutoff=0.6)
            if close:
                msg += f" (did you mean {close[0]!r}?)"
            else:
                msg += f" (expected one of: {', '.join(sorted(names))})"
        return msg
    if kind == "missing":
        return "required key is missing"
    msg = err["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, "):]
    return msg


def load_matrix(path: Path | None = None, text: str | None = None) -> Matrix:
    """Read and schema-check matrix.toml. Raises MatrixError with one located line per problem. With ``text``
    (a matrix read from stdin), ``path`` only names it in messages and its folder is the project root."""
    path = Path(path) if path is not None else DEFAULT_MATRIX
    name = path.name
    try:
        text = path.read_text(encoding="utf-8") if text is None else text
    except FileNotFoundError:
        raise MatrixError([f"{path}: no such file (pass the matrix path, or run where matrix.toml is)"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MatrixError([f"{path}: cannot read: {exc}"]) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line = m.group(1) if m else "1"
        detail = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(exc))
        raise MatrixError([f"{name}:{line}: syntax error: {detail}"]) from None
    locator = TomlLocator(text)
    try:
        doc = MatrixDoc.model_validate(data)
    except ValidationError as exc:
        problems = []
        seen: set[str] = set()
        for err in exc.errors():
            loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
            line = f"{name}:{locator.line_of(loc)}: {'.'.join(map(str, loc)) or '(top)'}: {_friendly(err, MatrixDoc)}"
            if line not in seen:
                seen.add(line)
                problems.append(line)
        raise MatrixError(problems) from None
    return Matrix(doc, path, text)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


Stack.model_rebuild()  # Stack.base refers to Base, defined after it
