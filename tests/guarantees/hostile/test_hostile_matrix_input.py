"""Hostile input, case by case: each one is refused with its exact located line (``FILE:LINE: key: message``,
exit 2, no traceback) before anything runs, or shown to stay inert (a log outside the run's own folder is
not read into a report, HTML and terminal escapes from smoke output do not survive into summary.md or the
terminal, a workflow never pastes a matrix value into a shell line).

Classes: names and keys (bidi, zero-width, homoglyph, shell syntax), environment names and values, extra
requirements (options, files, URLs), package names and versions, patch sources, free text, expansion size and
nesting, encoding, report log paths, Markdown and terminal output, the example workflow, the store's file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pinmatrix.cli import main

ROOT = Path(__file__).resolve().parents[3]
BASE = """\
[stacks.demo]
gpu_required = false
[stacks.demo.packages]
six = ["1.16.0", "1.17.0"]
"""
INDEX = """\
[[matrix.indexes]]
name = "mirror"
url = "https://pypi.example.org/simple"
default = true
"""


def validate(tmp_path: Path, data: str | bytes, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    path = tmp_path / "m.toml"
    path.write_bytes(data if isinstance(data, bytes) else data.encode("utf-8"))
    code = main(["validate", str(path)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, out.err.splitlines()


# (id, matrix text, the first line printed) -- every refusal is exit 2 and names file, line and key.
REFUSED: list[tuple[str, str | bytes, str]] = [
    # -- names the matrix defines ------------------------------------------------------------------------
    ("stack-bidi-override", BASE.replace("demo", '"de\u202emo"'),
     "m.toml:1: stacks.'de\\u202emo': key contains a bidirectional-text control (U+202E RIGHT-TO-LEFT OVERRIDE) "
     "at character 3"),
    ("stack-zero-width-space", '[stacks."de\u200bmo"]\ngpu_required = false\n',
     "m.toml:1: stacks.'de\\u200bmo': key contains an invisible character (U+200B ZERO WIDTH SPACE) at character 3"),
    ("stack-homoglyph-cyrillic-e", '[stacks."d\u0435mo"]\ngpu_required = false\n[stacks."d\u0435mo".packages]\n'
     'six = ["1.16.0"]\n',
     "m.toml:1: stacks.'d\\u0435mo': name 'd\\u0435mo' contains the non-ASCII character U+0435 CYRILLIC SMALL "
     "LETTER IE at character 2, which looks like 'e'"),
    ("stack-fullwidth-letters", '[stacks."\uff44emo"]\ngpu_required = false\n',
     "m.toml:1: stacks.'\\uff44emo': name '\\uff44emo' contains the non-ASCII character U+FF44 FULLWIDTH LATIN "
     "SMALL LETTER D at character 1, which looks like 'd'"),
    ("stack-shell-command-substitution", '[stacks."$(id)"]\ngpu_required = false\n',
     "m.toml:1: stacks.$(id): name '$(id)': '$' is not allowed (a name is ASCII letters, digits, '.', '_' or '-', "
     "starting with a letter or digit)"),
    ("stack-semicolon", '[stacks."demo;reboot"]\ngpu_required = false\n',
     "m.toml:1: stacks.demo;reboot: name 'demo;reboot': ';' is not allowed (a name is ASCII letters, digits, "
     "'.', '_' or '-', starting with a letter or digit)"),
    ("stack-leading-dash-option", '[stacks."-rf"]\ngpu_required = false\n',
     "m.toml:1: stacks.-rf: name '-rf': it must start with a letter or digit (a name is ASCII letters, digits, "
     "'.', '_' or '-', starting with a letter or digit)"),
    ("stack-nul-escape", '[stacks."de\\u0000mo"]\ngpu_required = false\n',
     "m.toml:1: stacks.'de\\x00mo': key contains a control character (U+0000 NULL) at character 3"),
    ("label-backtick", BASE + 'idna = [{ version = "3.7", label = "`id`" }]\n',
     "m.toml:5: stacks.demo.packages.idna.0.label: name '`id`': '`' is not allowed (a name is ASCII letters, "
     "digits, '.', '_' or '-', starting with a letter or digit)".replace("name '`id`'", "label '`id`'")),
    ("patch-id-path-traversal", BASE + '[patches."../../x"]\npackage = "six"\napplies_to = ">=1"\nupstream = "u"\n'
     'contained_in = "1.0"\n',
     "m.toml:5: patches.../../x: name '../../x': '/' is not allowed (a name is ASCII letters, digits, '.', '_' or "
     "'-', starting with a letter or digit)"),
    ("known-issue-id-bidi-isolate", BASE + '[[known_issues]]\nid = "leak\u2067x"\nwhen = { six = "1.16.0" }\n'
     'smokes = ["host-probe"]\nnote = "n"\n',
     "m.toml:6: known_issues.0.id: 'leak\\u2067x' contains a bidirectional-text control (U+2067 RIGHT-TO-LEFT "
     "ISOLATE) at character 5"),
    ("smoke-name-shell", BASE.replace("gpu_required = false\n", 'gpu_required = false\nsmokes = ["host-probe;id"]\n'),
     "m.toml:3: stacks.demo.smokes.0: smoke name 'host-probe;id': ';' is not allowed (a name is ASCII letters, "
     "digits, '.', '_' or '-', starting with a letter or digit)"),
    ("failure-class-space", BASE + '[[known_issues]]\nid = "k"\nwhen = { six = "1.16.0" }\nsmokes = ["host-probe"]\n'
     'note = "n"\nclass = "a b"\n',
     "m.toml:10: known_issues.0.class: name 'a b': ' ' is not allowed (a name is ASCII letters, digits, '.', '_' "
     "or '-', starting with a letter or digit)"),
    # -- environment ---------------------------------------------------------------------------------------
    ("env-name-ld-preload", BASE + '[stacks.demo.axes]\nenv = [{ LD_PRELOAD = "/tmp/x.so" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.vars: environment variable LD_PRELOAD is reserved: pinmatrix sets "
     "PINMATRIX_* itself, and LD_*, PATH, PYTHONPATH and the like make a process load other code"),
    ("env-name-pinmatrix-reserved", BASE + '[stacks.demo.axes]\nenv = [{ PINMATRIX_SMOKE_RESULT = "/etc/passwd" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.vars: environment variable PINMATRIX_SMOKE_RESULT is reserved: pinmatrix "
     "sets PINMATRIX_* itself, and LD_*, PATH, PYTHONPATH and the like make a process load other code"),
    ("env-name-pythonpath", BASE + '[stacks.demo.axes]\nenv = [{ PYTHONPATH = "/tmp" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.vars: environment variable PYTHONPATH is reserved: pinmatrix sets "
     "PINMATRIX_* itself, and LD_*, PATH, PYTHONPATH and the like make a process load other code"),
    ("env-name-with-equals", BASE + '[stacks.demo.axes]\nenv = [{ "A=B" = "1" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.vars: 'A=B' is not a valid environment variable name"),
    ("env-value-newline", BASE + '[stacks.demo.axes]\nenv = [{ FLAG = "1\\nRUN curl x | sh" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.FLAG: '1\\x0aRUN curl x | sh' contains a control character (U+000A LINE "
     "FEED) at character 2"),
    ("env-value-bidi", BASE + '[stacks.demo.axes]\nenv = [{ FLAG = "on\u202eff" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.FLAG: 'on\\u202eff' contains a bidirectional-text control (U+202E "
     "RIGHT-TO-LEFT OVERRIDE) at character 3"),
    ("env-value-zero-width-joiner", BASE + '[stacks.demo.axes]\nenv = [{ FLAG = "1\u200d" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.FLAG: '1\\u200d' contains an invisible character (U+200D ZERO WIDTH JOINER) "
     "at character 2"),
    ("env-value-hangul-filler", BASE + '[stacks.demo.axes]\nenv = [{ FLAG = "\u3164" }]\n',
     "m.toml:6: stacks.demo.axes.env.0.FLAG: '\\u3164' contains an invisible character (U+3164 HANGUL FILLER) at "
     "character 1"),
    # -- extra requirements --------------------------------------------------------------------------------
    ("extra-read-host-file", BASE.replace("gpu_required = false\n", 'gpu_required = false\nextra = ["-r /etc/hostname"]\n'),
     "m.toml:3: stacks.demo.extra.0: '-r /etc/hostname' is an option of pip/uv, not a PEP 508 requirement (extra "
     "takes requirements only, e.g. 'numpy>=2')"),
    ("extra-index-url", BASE.replace("gpu_required = false\n",
                                     'gpu_required = false\nextra = ["--index-url https://evil.example/simple"]\n'),
     "m.toml:3: stacks.demo.extra.0: '--index-url https://evil.example/simple' is an option of pip/uv, not a PEP 508 "
     "requirement (extra takes requirements only, e.g. 'numpy>=2')"),
    ("extra-editable", BASE.replace("gpu_required = false\n", 'gpu_required = false\nextra = ["-e ."]\n'),
     "m.toml:3: stacks.demo.extra.0: '-e .' is an option of pip/uv, not a PEP 508 requirement (extra takes "
     "requirements only, e.g. 'numpy>=2')"),
    ("extra-local-wheel", BASE.replace("gpu_required = false\n", 'gpu_required = false\nextra = ["./evil-1.0-py3-none-any.whl"]\n'),
     "m.toml:3: stacks.demo.extra.0: './evil-1.0-py3-none-any.whl' is a file, not a PEP 508 requirement"),
    ("extra-absolute-file", BASE.replace("gpu_required = false\n", 'gpu_required = false\nextra = ["/etc/passwd"]\n'),
     "m.toml:3: stacks.demo.extra.0: '/etc/passwd' is a file, not a PEP 508 requirement"),
    ("extra-undeclared-url", INDEX + BASE.replace("gpu_required = false\n",
                                                  'gpu_required = false\nextra = ["six @ https://evil.example/six.whl"]\n'),
     "m.toml:7: stacks.demo.extra.0: 'six @ https://evil.example/six.whl' names the URL "
     "'https://evil.example/six.whl', which is under no declared index ([[matrix.indexes]] url)"),
    ("extra-lookalike-index-host", INDEX + BASE.replace(
        "gpu_required = false\n", 'gpu_required = false\nextra = ["six @ https://pypi.example.org.evil.example/simple/six.whl"]\n'),
     "m.toml:7: stacks.demo.extra.0: 'six @ https://pypi.example.org.evil.example/simple/six.whl' names the URL "
     "'https://pypi.example.org.evil.example/simple/six.whl', which is under no declared index ([[matrix.indexes]] url)"),
    ("extra-file-url", BASE.replace("gpu_required = false\n", 'gpu_required = false\nextra = ["six @ file:///etc/passwd"]\n'),
     "m.toml:3: stacks.demo.extra.0: 'six @ file:///etc/passwd': only http(s) URLs under a declared index may be "
     "named, not 'file:///etc/passwd'"),
    ("extra-second-line", BASE.replace("gpu_required = false\n", 'gpu_required = false\nextra = ["six\\n-r /etc/hostname"]\n'),
     "m.toml:3: stacks.demo.extra.0: 'six\\x0a-r /etc/hostname' contains a control character (U+000A LINE FEED) "
     "at character 4"),
    ("extra-trailing-option", BASE.replace("gpu_required = false\n", 'gpu_required = false\nextra = ["six --hash=sha256:00"]\n'),
     "m.toml:3: stacks.demo.extra.0: 'six --hash=sha256:00' is not a PEP 508 requirement: Expected semicolon (after "
     "name with no version specifier) or end"),
    # -- packages and versions -----------------------------------------------------------------------------
    ("package-name-shell", BASE + '"six;rm" = ["1.0"]\n',
     "m.toml:5: stacks.demo.packages.six;rm: 'six;rm' is not a PEP 508 package name (letters, digits, '.', '_', '-', "
     "starting and ending with a letter or digit)"),
    ("package-name-homoglyph", BASE + '"s\u0456x" = ["1.0"]\n',
     "m.toml:5: stacks.demo.packages.'s\\u0456x': package name 's\\u0456x' contains the non-ASCII character U+0456 "
     "CYRILLIC SMALL LETTER BYELORUSSIAN-UKRAINIAN I at character 2, which looks like 'i'"),
    ("version-with-marker", BASE.replace('"1.17.0"]', '"1.17.0; os_name == \'nt\'"]'),
     "m.toml:4: stacks.demo.packages.six.1.version: '1.17.0; os_name == \\'nt\\'' is not a valid version"),
    ("version-fullwidth-digit", BASE.replace('"1.17.0"]', '"\uff11.17.0"]'),
     "m.toml:4: stacks.demo.packages.six.1.version: version '\\uff117.0' contains the non-ASCII character U+FF11 "
     "FULLWIDTH DIGIT ONE at character 1, which looks like '1'".replace("'\\uff117.0'", "'\\uff11.17.0'")),
    ("include-driver-command", BASE.replace("gpu_required = false\n", 'gpu_required = false\ninclude = [{ driver = "$(reboot)" }]\n')
     + '[stacks.demo.axes]\ndriver = ["580.65.06"]\n',
     "m.toml:3: stacks.demo.include.0.driver: bad value for axis 'driver': '$(reboot)' is not a valid version"),
    # -- paths, URLs and tools' arguments ------------------------------------------------------------------
    ("patch-source-traversal", BASE + '[patches.p1]\npackage = "six"\napplies_to = ">=1"\nupstream = "u"\n'
     'source = "../../etc/passwd"\nsha256 = "' + "0" * 64 + '"\n',
     "m.toml:9: patches.p1.source: source '../../etc/passwd' must be a relative path inside the project (e.g. "
     "patches/NAME.patch) or an http(s) URL"),
    ("patch-source-absolute", BASE + '[patches.p1]\npackage = "six"\napplies_to = ">=1"\nupstream = "u"\n'
     'source = "/etc/passwd"\nsha256 = "' + "0" * 64 + '"\n',
     "m.toml:9: patches.p1.source: source '/etc/passwd' must be a relative path inside the project (e.g. "
     "patches/NAME.patch) or an http(s) URL"),
    ("index-file-url", '[[matrix.indexes]]\nname = "local"\nurl = "file:///etc"\n' + BASE,
     "m.toml:3: matrix.indexes.0.url: url 'file:///etc' must be an http(s) URL"),
    ("platform-as-option", '[matrix]\nplatform = "--python-platform=linux"\n' + BASE,
     "m.toml:2: matrix.platform: platform '--python-platform=linux': '=' is not allowed (a name is ASCII letters, "
     "digits, '.', '_' or '-', starting with a letter or digit)"),
    ("debian-package-as-option", '[matrix.base]\npackages = ["-oAPT::Get::AllowUnauthenticated=1"]\n' + BASE,
     "m.toml:2: matrix.base.packages: Debian package '-oAPT::Get::AllowUnauthenticated=1' must be lowercase "
     "letters, digits, '+', '-' or '.', starting with a letter or digit"),
    ("registry-with-space", '[matrix]\nregistry = "evil registry/x"\n' + BASE,
     "m.toml:2: matrix.registry: registry 'evil registry/x' must look like host[:port]/path (e.g. "
     "127.0.0.1:5000/pinmatrix)"),
    # -- free text -----------------------------------------------------------------------------------------
    ("description-ansi-escape", BASE.replace("gpu_required = false\n",
                                             'gpu_required = false\ndescription = "\\u001b[2J\\u001b]0;pwned\\u0007"\n'),
     "m.toml:3: stacks.demo.description: '\\x1b[2J\\x1b]0;pwned\\x07' contains a control character (U+001B ESCAPE) "
     "at character 1"),
    ("note-bidi", BASE + '[[known_issues]]\nid = "k"\nwhen = { six = "1.16.0" }\nsmokes = ["host-probe"]\n'
     'note = "fixed \u2066in 1.17\u2069"\n',
     "m.toml:9: known_issues.0.note: 'fixed \\u2066in 1.17\\u2069' contains a bidirectional-text control (U+2066 "
     "LEFT-TO-RIGHT ISOLATE) at character 7"),
    # -- size, nesting, encoding ---------------------------------------------------------------------------
    ("include-nested-500-deep", BASE.replace("gpu_required = false\n",
                                             "gpu_required = false\ninclude = [" + "{a = " * 500 + "1" + "}" * 500 + "]\n"),
     "m.toml:3: arrays and inline tables nest more than 32 deep"),
    ("arrays-nested-500-deep", "x = " + "[" * 500 + "]" * 500 + "\n" + BASE,
     "m.toml:1: arrays and inline tables nest more than 32 deep"),
    ("ten-to-the-ten-combinations", "[stacks.big]\ngpu_required = false\n[stacks.big.packages]\n" + "".join(
        f'p{i} = [{", ".join(chr(34) + str(v) + chr(34) for v in range(1, 11))}]\n' for i in range(10)),
     "m.toml:1: stacks.big: 10000000000 combinations (p0 10 x p1 10 x p2 10 x p3 10 x p4 10 x p5 10 x p6 10 x p7 10 "
     "x p8 10 x p9 10) are more than the limit of 100000; raise it with [matrix] max_combinations or "
     "--max-combinations"),
    ("too-many-rules", BASE.replace("gpu_required = false\n", "gpu_required = false\nexclude = ["
                                    + ", ".join('{ six = "1.16.0" }' for _ in range(1001)) + "]\n"),
     "m.toml:1: stacks.demo: 1001 include/exclude entries are more than the 1000 a stack may have"),
    ("utf16-file", "\ufeff".encode("utf-16-le") + BASE.encode("utf-16-le"),
     "{path}: starts with a UTF-16 byte-order mark: save it as UTF-8"),
    ("invalid-utf8", BASE.encode() + b"# caf\xe9\n",
     f"m.toml:5: not UTF-8: byte 0xe9 at offset {len(BASE) + 5}"),
    ("oversized-file", BASE + "# " + "x" * (2 * 1024 * 1024) + "\n",
     "{path}: " + str(len(BASE) + 3 + 2 * 1024 * 1024) + " bytes is more than a matrix may have (2097152 bytes)"),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED])
def test_hostile_matrix_is_refused_with_a_located_line(tmp_path: Path, capsys, text, expected) -> None:
    code, lines = validate(tmp_path, text, capsys)
    assert code == 2
    assert lines, "no message"
    assert lines[0] == expected.format(path=tmp_path / "m.toml")
    assert all(line.isascii() and "\x1b" not in line for line in lines)  # the messages themselves are inert


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path, capsys) -> None:
    code, _ = validate(tmp_path, b"\xef\xbb\xbf" + BASE.encode(), capsys)
    assert code == 0


def test_declared_index_url_and_free_text_newlines_stay_accepted(tmp_path: Path, capsys) -> None:
    text = INDEX + BASE.replace("gpu_required = false\n", 'gpu_required = false\ndescription = """two\nlines"""\n'
                                'extra = ["six @ https://pypi.example.org/simple/six/six-1.17.0-py2.py3-none-any.whl"]\n')
    code, lines = validate(tmp_path, text, capsys)
    assert code == 0, lines


def test_the_combination_limit_can_be_raised(tmp_path: Path, capsys) -> None:
    text = "[matrix]\nmax_combinations = 3\n" + BASE.replace('"1.17.0"]', '"1.17.0", "1.15.0", "1.14.0"]')
    code, lines = validate(tmp_path, text, capsys)
    assert lines[0] == ("m.toml:3: stacks.demo: 4 combinations (six 4) are more than the limit of 3; raise it with "
                        "[matrix] max_combinations or --max-combinations")
    assert main(["validate", str(tmp_path / "m.toml"), "--max-combinations", "4"]) == 0


# -------------------------------------------------------------------------------- reports read no stray file
def _row(log_path: str, run_id: str = "r1", reason: str = "boom", cell: str = "c0ffee000001",
         smoke: str = "s1") -> dict:
    return {"cell_id": cell, "stack": "st", "smoke": smoke, "run_id": run_id, "status": "fail",
            "failure_class": "error", "reason": reason, "metrics": {}, "log_path": log_path,
            "started_at": "2026-01-01T00:00:00+00:00", "finished_at": "2026-01-01T00:00:01+00:00", "duration_s": 1.0,
            "known_issue": None, "image_digest": None,
            "host": {"id": "h1", "hostname": "x", "gpu_name": None, "gpu_count": 0, "driver": None,
                     "capability": None, "cuda_driver_api": None}}


SECRET = "root-secret-7f3a9c"


def _logs_case(tmp_path: Path, name: str) -> tuple[str, str]:
    """(log_path recorded, run id) for each way a row may point at a file it must not read."""
    secret = tmp_path / "secret.txt"
    secret.write_text(f"{SECRET}\n")
    logs = tmp_path / "logs"
    (logs / "r1").mkdir(parents=True, exist_ok=True)
    if name == "etc-passwd":
        return "/etc/passwd", "r1"
    if name == "absolute-outside":
        return str(secret), "r1"
    if name == "dotdot-from-the-run":
        return str(logs / "r1" / ".." / ".." / "secret.txt"), "r1"
    if name == "relative-dotdot":
        return "../../secret.txt", "r1"
    if name == "run-id-dotdot":
        return str(tmp_path / "secret.txt"), ".."
    if name == "symlink-out-of-the-run":
        (logs / "r1" / "link.log").symlink_to(secret)
        return str(logs / "r1" / "link.log"), "r1"
    if name == "another-runs-log":
        (logs / "r2").mkdir()
        (logs / "r2" / "s1.log").write_text(f"{SECRET}\n")
        return str(logs / "r2" / "s1.log"), "r1"
    raise AssertionError(name)


@pytest.mark.parametrize("case", ["etc-passwd", "absolute-outside", "dotdot-from-the-run", "relative-dotdot",
                                  "run-id-dotdot", "symlink-out-of-the-run", "another-runs-log"])
def test_report_reads_no_log_outside_the_runs_own_folder(tmp_path: Path, capsys, monkeypatch, case: str) -> None:
    monkeypatch.chdir(tmp_path)
    log_path, run_id = _logs_case(tmp_path, case)
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([_row(log_path, run_id)]))
    out = tmp_path / "report"
    assert main(["report", "--results", str(tmp_path / "none.sqlite"), "--from-json", str(rows), "--out", str(out),
                 "--logs", str(tmp_path / "logs")]) == 0
    capsys.readouterr()
    for name in ("index.html", "report.json", "summary.md", "junit.xml"):
        text = (out / name).read_text()
        assert SECRET not in text and "root:x:0:0" not in text, name


def test_report_reads_the_log_of_its_own_run(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    log = tmp_path / "logs" / "r1" / "c0ffee000001" / "s1.log"
    log.parent.mkdir(parents=True)
    log.write_text("starting\n\x1b[31mRuntimeError: it broke\x1b[0m\n")
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([_row(str(log))]))
    assert main(["report", "--results", str(tmp_path / "none.sqlite"), "--from-json", str(rows), "--out",
                 str(tmp_path / "report")]) == 0  # logs/ beside the rows file is a root
    html = (tmp_path / "report" / "index.html").read_text()
    assert "RuntimeError: it broke" in html and "\x1b" not in html


# ------------------------------------------------------------------------- Markdown and terminal stay inert
MARKUP = [
    ("html-tag", "<img src=x onerror=alert(1)>", "&lt;img src=x onerror=alert(1)&gt;"),
    ("script", "</details><script>alert(1)</script>", "&lt;/details&gt;&lt;script&gt;alert(1)&lt;/script&gt;"),
    ("markdown-link", "[click](javascript:alert(1))", "\\[click\\](javascript:alert(1))"),
    ("markdown-image", "![x](https://tracker.example/p.png)", "\\!\\[x\\](https://tracker.example/p.png)"),
    ("table-break", "a | b\n| --- |", "a \\| b \\| --- \\|"),
    ("ansi-colour", "\x1b[31mred\x1b[0m", "red"),
    ("osc-title", "\x1b]0;pwned\x07title", "title"),
    ("bidi", "ok\u202eliaf", "ok\\\\u202eliaf"),  # shown as the text \u202e, its backslash escaped
]


@pytest.mark.parametrize(("reason", "expected"), [m[1:] for m in MARKUP], ids=[m[0] for m in MARKUP])
def test_summary_md_neutralises_html_and_escapes(tmp_path: Path, capsys, monkeypatch, reason: str,
                                                expected: str) -> None:
    monkeypatch.chdir(tmp_path)  # no matrix.toml here: cells are named by id
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([_row("", reason=reason, smoke="s`1<b>")]))
    assert main(["report", "--results", str(tmp_path / "none.sqlite"), "--from-json", str(rows), "--out",
                 str(tmp_path / "r"), "--format", "md"]) == 0
    capsys.readouterr()
    md = (tmp_path / "r" / "summary.md").read_text()
    # every list line naming the result: "What broke" (the reason, then since when) and the cell's own line
    lines = [ln for ln in md.splitlines() if ln.startswith("- ") and "**s\\`1&lt;b&gt;**" in ln]
    assert lines, md  # the smoke's name, from the rows file, is inert too
    for line in lines:
        assert f" {expected} " in f"{line} ", line
    assert reason not in md
    assert "\x1b" not in md and "\u202e" not in md


def test_terminal_output_carries_no_escape_sequence(tmp_path: Path) -> None:
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([_row("", reason="\x1b]0;pwned\x07\x1b[2Jwiped \u202eevil", smoke="s\x1b[1m")]))
    store = tmp_path / "r.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "pinmatrix", *a], capture_output=True,  # noqa: E731
                                    text=True, env=env, cwd=tmp_path, timeout=120)
    assert run("results", "--results", str(store), "--import", str(rows)).returncode == 0
    shown = run("results", "--results", str(store))
    assert shown.returncode == 0
    assert "\x1b" not in shown.stdout and "\u202e" not in shown.stdout and "\x07" not in shown.stdout
    assert "wiped \\u202eevil" in shown.stdout


# --------------------------------------------------------------------------------- the example workflow
def _runs(node: object) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "run" and isinstance(v, str)] + \
            [r for v in node.values() for r in _runs(v)]
    if isinstance(node, list):
        return [r for v in node for r in _runs(v)]
    return []


def test_the_example_workflow_pastes_no_expression_into_a_shell_line() -> None:
    flow = yaml.safe_load((ROOT / "docs" / "workflows" / "pinmatrix.yml").read_text())
    runs = _runs(flow)
    assert len(runs) >= 10
    assert not [r for r in runs if "${{" in r]
    jobs = flow["jobs"]
    assert flow["permissions"] == {"contents": "read"}
    assert "group" in flow["concurrency"]
    assert all(job.get("name") for job in jobs.values())
    assert jobs["smoke"]["if"].startswith("${{ !cancelled()")
    assert jobs["report"]["if"].startswith("${{ !cancelled()")
    assert {"CELL", "IMAGE"} <= set(jobs["smoke"]["env"])
    assert all(step.get("with", {}).get("persist-credentials") is False
               for job in jobs.values() for step in job["steps"] if step.get("uses", "").startswith("actions/checkout"))


# ------------------------------------------------------------------------------------ the store's file
@pytest.mark.parametrize(("content", "expected"), [
    (b"", "{path}: is an empty file, not a results store; left as it is (remove it, or pass another --results)"),
    (b"id,status\n1,pass\n", "{path}: is not an SQLite database (it starts with b'id,statu'), so not a results "
                             "store; left as it is"),
], ids=["empty-file", "csv-file"])
def test_an_empty_or_foreign_store_is_named_and_left_alone(tmp_path: Path, capsys, content: bytes, expected: str) -> None:
    path = tmp_path / "results.sqlite"
    path.write_bytes(content)
    for argv in (["results", "--results", str(path)], ["smoke", "--results", str(path), "--smoke", "host-probe"]):
        assert main(argv) == 2
        assert capsys.readouterr().err.strip() == "pinmatrix: error: " + expected.format(path=path)
    assert path.read_bytes() == content
    assert not re.search(r"results\.sqlite-(wal|shm)$", " ".join(p.name for p in tmp_path.iterdir()))
