"""The input grammar: one definition of every kind of text matrix.toml may hold.

- **names** the matrix defines (stacks, labels, patch ids, known-issue ids, failure classes, index names):
  ASCII letters, digits, ``.``, ``_`` and ``-``, starting with a letter or digit, at most 80 characters;
- **smoke selectors**: a name, optionally ending in ``*`` (a prefix);
- **environment variable names**: ``[A-Za-z_][A-Za-z0-9_]*``, at most 128, minus the reserved ones (those
  pinmatrix sets itself and those that make a process load or run other code: ``LD_*``, ``PYTHONPATH``...);
- **package names** and **versions**: PEP 508 names and PEP 440 versions (packaging), ASCII, no spaces;
- **requirements** (``extra``): PEP 508 requirements only: never an option of pip/uv (``-r``, ``-e``,
  ``--index-url``), never a file path; a URL requirement only under a declared index (checked by the caller);
- **environment values** and **free text** (description, note): any printable text, but no control
  character (free text may hold newlines and tabs), no bidirectional-text control, no invisible character.

Every check raises ValueError with a message that names the offending character by code point, so a
pydantic field or a caller turns it into one located line. Nothing here prints the raw bad text: ``shown``
renders text with every unsafe character escaped.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Annotated

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import AfterValidator

MAX_NAME = 80
MAX_ENV_NAME = 128
MAX_ENV_VALUE = 4096
MAX_TEXT = 4096
MAX_REQUIREMENT = 1024

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PACKAGE = re.compile(r"[A-Za-z0-9]|[A-Za-z0-9][A-Za-z0-9._-]*[A-Za-z0-9]")  # PEP 508 / core metadata
_VERSION_CHARS = re.compile(r"[0-9][0-9A-Za-z.+!_-]*")

# Variables pinmatrix sets for a smoke itself, and variables that make a process load or run other code.
RESERVED_ENV_PREFIXES: tuple[str, ...] = ("PINMATRIX_", "LD_")
RESERVED_ENV_NAMES: frozenset[str] = frozenset({
    "PATH", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONEXECUTABLE", "PYTHONUSERBASE",
    "BASH_ENV", "ENV", "IFS", "PS4", "SHELLOPTS", "BASHOPTS", "GLIBC_TUNABLES", "NODE_OPTIONS", "PERL5OPT",
})

# Characters that render as nothing or as blank although they are not a space (outside category Cf).
_INVISIBLE_EXTRA = frozenset({
    0x034F,  # COMBINING GRAPHEME JOINER
    0x115F, 0x1160, 0x3164, 0xFFA0,  # HANGUL fillers
    0x2800,  # BRAILLE PATTERN BLANK
    0x17B4, 0x17B5,  # KHMER inherent vowels
    0x180B, 0x180C, 0x180D, 0x180F,  # MONGOLIAN free variation selectors
})
_BIDI_CLASSES = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})
_BIDI_MARKS = frozenset({0x200E, 0x200F, 0x061C})  # LRM, RLM, ARABIC LETTER MARK


_CONTROL_NAMES = {
    0x00: "NULL", 0x07: "BELL", 0x08: "BACKSPACE", 0x09: "CHARACTER TABULATION", 0x0A: "LINE FEED",
    0x0B: "LINE TABULATION", 0x0C: "FORM FEED", 0x0D: "CARRIAGE RETURN", 0x1B: "ESCAPE", 0x7F: "DELETE",
    0x85: "NEXT LINE", 0x9B: "CONTROL SEQUENCE INTRODUCER", 0x9D: "OPERATING SYSTEM COMMAND",
}


def char_name(ch: str) -> str:
    """``U+202E RIGHT-TO-LEFT OVERRIDE``; control characters by their Unicode alias (``U+001B ESCAPE``)."""
    name = unicodedata.name(ch, "") or _CONTROL_NAMES.get(ord(ch), "control")
    return f"U+{ord(ch):04X} {name}"


def char_kind(ch: str, *, newlines: bool = False) -> str | None:
    """What makes ``ch`` unsafe in matrix text ("a control character", ...), or None when it is fine.
    ``newlines`` lets ``\\n`` and ``\\t`` through (free text)."""
    cp = ord(ch)
    if ch in "\n\t" and newlines:
        return None
    if 0x20 <= cp < 0x7F:
        return None
    category = unicodedata.category(ch)
    if category == "Cc" or category in ("Zl", "Zp"):
        return "a control character"
    if unicodedata.bidirectional(ch) in _BIDI_CLASSES or cp in _BIDI_MARKS:
        return "a bidirectional-text control"
    if category in ("Cf", "Cs", "Co", "Cn") or cp in _INVISIBLE_EXTRA or 0xFE00 <= cp <= 0xFE0F \
            or 0xE0100 <= cp <= 0xE01EF:
        return "an invisible character"
    if category == "Zs":
        return "a space that is not U+0020"
    return None


def text_problem(text: str, *, newlines: bool = False) -> str | None:
    """The first unsafe character of ``text`` as a message, or None."""
    for i, ch in enumerate(text):
        kind = char_kind(ch, newlines=newlines)
        if kind is not None:
            return f"contains {kind} ({char_name(ch)}) at character {i + 1}"
    return None


def shown(text: str, limit: int = 80) -> str:
    """``text`` quoted for a message, with every unsafe or non-ASCII character escaped (``\\u202e``)."""
    out = []
    for ch in text[:limit]:
        if ch == "'" or ch == "\\":
            out.append("\\" + ch)
        elif 0x20 <= ord(ch) < 0x7F:
            out.append(ch)
        elif ord(ch) <= 0xFF:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "'" + "".join(out) + ("'..." if len(text) > limit else "'")


def _non_ascii(text: str) -> str | None:
    """For a name holding a non-ASCII character: which one, and the ASCII letter it can pass for."""
    for i, ch in enumerate(text):
        if ord(ch) < 0x80:
            continue
        kind = char_kind(ch)
        if kind is not None:
            return f"contains {kind} ({char_name(ch)}) at character {i + 1}"
        look = _looks_like(ch)
        like = f", which looks like {look!r}" if look else ""
        return f"contains the non-ASCII character {char_name(ch)} at character {i + 1}{like}"
    return None


def _looks_like(ch: str) -> str | None:
    try:
        from confusable_homoglyphs import confusables  # noqa: PLC0415 - its tables load only for a name outside ASCII
    except ImportError:  # pragma: no cover - a declared dependency
        return None
    found = confusables.is_confusable(ch, greedy=True, preferred_aliases=["latin", "common"]) or []
    for item in found:
        for glyph in item.get("homoglyphs", []):
            if str(glyph["c"]).isascii():
                return str(glyph["c"])
    folded = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode()
    return folded or None


def _check_plain(value: str, what: str) -> None:
    problem = _non_ascii(value) if not value.isascii() else text_problem(value)
    if problem:
        raise ValueError(f"{what} {shown(value)} {problem}")


# ---------------------------------------------------------------------------------------------- names
def check_name(value: str, what: str = "name") -> str:
    """A name the matrix defines: ASCII letters, digits, '.', '_', '-'; starts with a letter or digit."""
    _check_plain(value, what)
    if not value:
        raise ValueError(f"{what} is empty")
    if len(value) > MAX_NAME:
        raise ValueError(f"{what} {shown(value)} is longer than {MAX_NAME} characters")
    if not _NAME.fullmatch(value):
        bad = next((c for c in value if not (c.isalnum() or c in "._-")), None)
        detail = f"{bad!r} is not allowed" if bad is not None else "it must start with a letter or digit"
        raise ValueError(f"{what} {shown(value)}: {detail} (a name is ASCII letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit)")
    return value


def check_smoke_selector(value: str) -> str:
    """A smoke name, or a prefix of smoke names ending in '*'."""
    if value.endswith("*") and len(value) > 1:
        check_name(value[:-1], "smoke selector")
    else:
        check_name(value, "smoke name")
    return value


def check_env_name(value: str) -> str:
    _check_plain(value, "environment variable name")
    if not _ENV_NAME.fullmatch(value) or len(value) > MAX_ENV_NAME:
        raise ValueError(f"{shown(value)} is not a valid environment variable name")
    if value in RESERVED_ENV_NAMES or value.startswith(RESERVED_ENV_PREFIXES):
        raise ValueError(f"environment variable {value} is reserved: pinmatrix sets PINMATRIX_* itself, and "
                         "LD_*, PATH, PYTHONPATH and the like make a process load other code")
    return value


def check_env_value(value: str) -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(f"environment value {shown(value)} {problem}")
    if len(value) > MAX_ENV_VALUE:
        raise ValueError(f"environment value is longer than {MAX_ENV_VALUE} characters")
    return value


def check_free_text(value: str) -> str:
    problem = text_problem(value, newlines=True)
    if problem:
        raise ValueError(f"text {shown(value)} {problem}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"text is longer than {MAX_TEXT} characters")
    return value


def check_single_line(value: str) -> str:
    """Text without control, bidi or invisible characters, newlines included (URLs, paths, references)."""
    problem = text_problem(value)
    if problem:
        raise ValueError(f"{shown(value)} {problem}")
    if len(value) > MAX_TEXT:
        raise ValueError(f"text is longer than {MAX_TEXT} characters")
    return value


# ------------------------------------------------------------------------------------ packages, versions
def check_package_name(value: str) -> str:
    _check_plain(value, "package name")
    if not _PACKAGE.fullmatch(value) or len(value) > MAX_NAME:
        raise ValueError(f"{shown(value)} is not a PEP 508 package name (letters, digits, '.', '_', '-', "
                         "starting and ending with a letter or digit)")
    return value


def check_version(value: str) -> str:
    _check_plain(value, "version")
    if not _VERSION_CHARS.fullmatch(value):
        raise ValueError(f"{shown(value)} is not a valid version")
    try:
        Version(value)
    except InvalidVersion:
        raise ValueError(f"{shown(value)} is not a valid version") from None
    return value


def check_requirement(value: str) -> Requirement:
    """A PEP 508 requirement, as one line of a requirements file can never be misread as anything else.
    Returns the parsed requirement (its ``url`` must then be checked against the declared indexes)."""
    problem = text_problem(value)
    if problem:
        raise ValueError(f"requirement {shown(value)} {problem}")
    text = value.strip()
    if len(text) > MAX_REQUIREMENT:
        raise ValueError(f"requirement is longer than {MAX_REQUIREMENT} characters")
    if text.startswith("-"):
        raise ValueError(f"{shown(value)} is an option of pip/uv, not a PEP 508 requirement "
                         "(extra takes requirements only, e.g. 'numpy>=2')")
    try:
        req = Requirement(text)
    except InvalidRequirement as err:
        if text.startswith((".", "/", "~")) or re.search(r"\.(whl|zip|tar\.gz|tgz|txt)$", text):
            raise ValueError(f"{shown(value)} is a file, not a PEP 508 requirement") from None
        if "://" in text:
            raise ValueError(f"{shown(value)} is a bare URL, not a PEP 508 requirement (name @ URL)") from None
        first = str(err).splitlines()[0]
        raise ValueError(f"{shown(value)} is not a PEP 508 requirement: {first}") from None
    if req.url is not None and not req.url.lower().startswith(("https://", "http://")):
        raise ValueError(f"{shown(value)}: only http(s) URLs under a declared index may be named, "
                         f"not {shown(req.url)}")
    return req


def check_http_url(value: str, what: str = "url") -> str:
    problem = text_problem(value)
    if problem:
        raise ValueError(f"{what} {shown(value)} {problem}")
    if not re.fullmatch(r"https?://[^\s/]+(/[^\s]*)?", value) or not value.isascii():
        raise ValueError(f"{what} {shown(value)} must be an http(s) URL")
    return value


def check_repo_path_or_url(value: str) -> str:
    """A patch source: a relative path inside the project (no '..', not absolute), or an http(s) URL."""
    if "://" in value:
        return check_http_url(value, "source")
    check_single_line(value)
    parts = value.replace("\\", "/").split("/")
    if not value.isascii() or value.startswith(("/", "~", "-")) or ".." in parts or not all(parts):
        raise ValueError(f"source {shown(value)} must be a relative path inside the project (e.g. "
                         "patches/NAME.patch) or an http(s) URL")
    return value


def check_debian_name(value: str, what: str = "Debian package") -> str:
    """A Debian package or suite name (policy 5.6.1): lowercase letters, digits, '+', '-', '.'."""
    _check_plain(value, what)
    if not re.fullmatch(r"[a-z0-9][a-z0-9+.-]*", value) or len(value) > MAX_NAME:
        raise ValueError(f"{what} {shown(value)} must be lowercase letters, digits, '+', '-' or '.', "
                         "starting with a letter or digit")
    return value


def check_registry(value: str) -> str:
    """An image repository prefix: ``host[:port]/path``, as a distribution reference spells it."""
    _check_plain(value, "registry")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]{1,5})?(/[a-z0-9]+(?:[._-][a-z0-9]+)*)*", value):
        raise ValueError(f"registry {shown(value)} must look like host[:port]/path (e.g. 127.0.0.1:5000/pinmatrix)")
    return value


def check_cache_repository(value: str) -> str:
    """A build cache's repository: ``host[:port]/path`` with a path (entries are tagged by key, so no tag)."""
    check_registry(value)
    if "/" not in value:
        raise ValueError(f"build cache {shown(value)} must name a repository: host[:port]/path "
                         "(e.g. 127.0.0.1:5000/cache)")
    return value


# ------------------------------------------------------------------------------- pydantic field types
Name = Annotated[str, AfterValidator(check_name)]
SmokeSelector = Annotated[str, AfterValidator(check_smoke_selector)]
EnvValue = Annotated[str, AfterValidator(check_env_value)]
PackageName = Annotated[str, AfterValidator(check_package_name)]
VersionText = Annotated[str, AfterValidator(check_version)]
FreeText = Annotated[str, AfterValidator(check_free_text)]
OneLine = Annotated[str, AfterValidator(check_single_line)]
HttpUrl = Annotated[str, AfterValidator(check_http_url)]


def check_requirement_text(value: str) -> str:
    check_requirement(value)
    return value


RequirementText = Annotated[str, AfterValidator(check_requirement_text)]


def check_specifier(value: str, example: str = "'>=0.0.28,<=0.0.35'") -> str:
    """A PEP 440 version specifier on one ASCII line; the message shows ``example`` of a valid one."""
    check_single_line(value)
    try:
        if not value.isascii():
            raise InvalidSpecifier(value)
        SpecifierSet(value)
    except InvalidSpecifier:
        raise ValueError(f"{shown(value)} is not a valid version specifier (e.g. {example})") from None
    return value
