"""The one loader of every file pinmatrix reads as a document (a project's TOML files, the TOML data it ships, the
JSON manifests it reads back): bytes, at most a bound, then UTF-8 text, then TOML (or JSON), then the file's
strict model. Whatever fails is one located line, ``FILE:LINE: key: message`` (the line where the parser stopped
or where the text spells the key), raised as the caller's own PinmatrixError subclass."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from pinmatrix.datamodel import friendly_message, key_path
from pinmatrix.errors import PinmatrixError
from pinmatrix.project.tomlpos import TomlLocator, nesting_problem

M = TypeVar("M", bound=BaseModel)
Loc = tuple[str | int, ...]
KeyText = Callable[[ErrorDetails], str]  # an error's key as its file's message names it ("" names none)
Where = Callable[[Loc], str]  # "FILE:LINE: key" of a key path
Screen = Callable[[Any, Where], list[str]]  # problems of the parsed data, before the model sees it
Problems = Callable[[list[str]], PinmatrixError]  # an error type that carries every problem found

MAX_DOCUMENT_BYTES = 1 << 20  # the shipped data files are a few kB; a caller whose file may grow says its own
MAX_NESTING = 32  # arrays and inline tables inside each other; no shipped file needs more than 4
_AT = re.compile(r"\s*\(at line (\d+), column \d+\)")


class _Refused(Exception):
    """The problems found so far (one line each); load_document raises them as the caller's error."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines


def dotted_key(err: ErrorDetails) -> str:
    """``stacks.demo.packages.six`` (escaped where a key holds an unsafe character); a model-wide problem
    names no key."""
    return key_path(tuple(err["loc"])) if err["loc"] else ""


def load_document(path: Path, model: type[M], *, what: str, content: str | bytes | Mapping[str, Any] | None = None,
                  name: str | None = None, error: type[PinmatrixError] = PinmatrixError,
                  problems: Problems | None = None, max_bytes: int = MAX_DOCUMENT_BYTES,
                  form: Literal["toml", "json"] = "toml", key: KeyText = dotted_key, hint: str = "",
                  screen: Screen | None = None) -> M:
    """``path`` read as ``form`` and checked by ``model``. ``content`` (text, bytes, or data already parsed) is
    read instead of the file; ``path`` then only names it. A problem of the whole file names ``path`` (no such
    file, with ``hint``; more than ``max_bytes``, said of ``what``: "a matrix"); a located one names ``name``
    (default: ``path``) and the line. The first validation problem is raised as ``error`` (an unknown key first:
    a misspelt key is also a missing one); with ``problems``, every one, in the model's order, through it.
    ``key`` words an error's key; ``screen`` may refuse the parsed data before the model sees it."""
    label = str(path) if name is None else name
    with _refusing(error, problems):
        if isinstance(content, Mapping):
            return _validate(dict(content), model, label, None, key, every=problems is not None)
        text = _text(path, label, content, max_bytes, what, hint)
        data = _parsed(text, label, form)
        locator = TomlLocator(text) if form == "toml" else None
        if screen is not None:
            found = screen(data, lambda loc: _where(label, locator, loc, key_path(loc)))
            if found:
                raise _Refused(found)
        return _validate(data, model, label, locator, key, every=problems is not None)


def document_text(path: Path, *, what: str, content: str | bytes | None = None, name: str | None = None,
                  error: type[PinmatrixError] = PinmatrixError, problems: Problems | None = None,
                  max_bytes: int = MAX_DOCUMENT_BYTES, hint: str = "") -> str:
    """The text load_document reads, for a caller that keeps it (matrix.toml locates keys in it later); the
    same bound, decoding and lines as load_document."""
    with _refusing(error, problems):
        return _text(path, str(path) if name is None else name, content, max_bytes, what, hint)


@contextmanager
def _refusing(error: type[PinmatrixError], problems: Problems | None) -> Iterator[None]:
    """The problems found, raised as the caller's error: every one through ``problems``, else the first."""
    try:
        yield
    except _Refused as refused:
        raise (problems(refused.lines) if problems is not None else error(refused.lines[0])) from None


def _text(path: Path, label: str, content: str | bytes | None, max_bytes: int, what: str, hint: str) -> str:
    raw = _read(path, max_bytes, hint) if content is None else _encoded(content)
    if len(raw) > max_bytes:
        size = len(raw) if content is not None else max(len(raw), path.stat().st_size)  # the file's, read no further
        raise _Refused([f"{path}: {size} bytes is more than {what} may have ({max_bytes} bytes)"])
    return _decoded(path, label, raw)


def _read(path: Path, limit: int, hint: str) -> bytes:
    """At most ``limit`` + 1 bytes of ``path``: enough to say it is too large without reading it all."""
    try:
        with path.open("rb") as handle:
            return handle.read(limit + 1)
    except FileNotFoundError:
        raise _Refused([f"{path}: no such file" + (f" ({hint})" if hint else "")]) from None
    except OSError as exc:
        raise _Refused([f"{path}: cannot read: {exc}"]) from None


def _encoded(content: str | bytes) -> bytes:
    """Text given in memory (from stdin, say) as bytes; a lone surrogate stays, to be named as not UTF-8."""
    return content if isinstance(content, bytes) else content.encode("utf-8", "surrogatepass")


def _decoded(path: Path, label: str, raw: bytes) -> str:
    """UTF-8 text; a UTF-8 byte-order mark is accepted and dropped, anything else that is not UTF-8 is named."""
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise _Refused([f"{path}: starts with a UTF-16 byte-order mark: save it as UTF-8"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise _Refused([f"{label}:{line}: not UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}"]) from None
    return text.removeprefix("\ufeff")


def _parsed(text: str, label: str, form: str) -> Any:
    """The parsed document; nesting deeper than MAX_NESTING is refused before a recursive parser sees it."""
    deep = nesting_problem(text, MAX_NESTING)
    if deep is not None:
        raise _Refused([f"{label}:{deep}: arrays and inline tables nest more than {MAX_NESTING} deep"])
    if form == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise _Refused([f"{label}:{exc.lineno}: syntax error: {exc.msg} (column {exc.colno})"]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = _AT.search(str(exc))
        line = m.group(1) if m else str(max(1, len(text.splitlines())))  # "(at end of document)"
        raise _Refused([f"{label}:{line}: syntax error: {_AT.sub('', str(exc))}"]) from None


def _where(label: str, locator: TomlLocator | None, loc: Loc, shown: str) -> str:
    """``FILE:LINE: key`` (no line where the text is not at hand, no key where ``shown`` is empty)."""
    head = label if locator is None else f"{label}:{locator.line_of(loc)}"
    return f"{head}: {shown}" if shown else head


def _validate(data: Any, model: type[M], label: str, locator: TomlLocator | None, key: KeyText, *,
              every: bool) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        if not every:
            errors = [next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])]
        lines = []
        for err in errors:
            loc = tuple(p for p in err["loc"] if p != "[key]")  # a bad dict key is named (and located) by itself
            err = err.copy()
            err["loc"] = loc
            lines.append(f"{_where(label, locator, loc, key(err))}: {friendly_message(err, model)}")
        raise _Refused(lines) from None
