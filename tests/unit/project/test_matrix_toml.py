"""load_matrix's own lines: where the text comes from, bytes and encodings, syntax errors, text problems in
order, and one line per schema problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from pinmatrix.errors import MatrixError
from pinmatrix.project.matrix_toml import MAX_MATRIX_BYTES, load_matrix

MINIMAL = '[matrix]\npython = "3.13"\n[stacks.s]\ngpu_required = false\n[stacks.s.packages]\nsix = ["1.17.0"]\n'


def problems(path: Path, text: str | None = None) -> list[str]:
    with pytest.raises(MatrixError) as err:
        load_matrix(path, text=text)
    return err.value.problems


def test_the_matrix_comes_from_the_path_the_text_or_the_current_folder(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "matrix.toml").write_text(MINIMAL)
    monkeypatch.chdir(tmp_path)
    default = load_matrix()
    assert default.text == MINIMAL and default.path == Path("matrix.toml") and list(default.stacks) == ["s"]
    given = load_matrix(tmp_path / "absent.toml", text=MINIMAL.replace('"s"', '"t"').replace("stacks.s", "stacks.t"))
    assert list(given.stacks) == ["t"] and given.root == tmp_path  # text wins; the path names it and its root
    assert problems(tmp_path / "x.toml", text='[matrix]\nname = "\udcff"\n') == [
        "x.toml:2: not UTF-8: byte 0xed at offset 17"]  # a lone surrogate from stdin is named, not a traceback
    assert problems(tmp_path) == [f"{tmp_path}: cannot read: [Errno 21] Is a directory: '{tmp_path}'"]
    assert problems(tmp_path / "none.toml") == [
        f"{tmp_path / 'none.toml'}: no such file (pass the matrix path, or run where matrix.toml is)"]


def test_bytes_encodings_and_syntax(tmp_path: Path) -> None:
    path = tmp_path / "m.toml"
    at_limit = MINIMAL.encode() + b"#" * (MAX_MATRIX_BYTES - len(MINIMAL.encode()) - 1) + b"\n"
    path.write_bytes(at_limit)
    assert len(at_limit) == MAX_MATRIX_BYTES and list(load_matrix(path).stacks) == ["s"]
    path.write_bytes(at_limit + b"\n")
    assert problems(path) == [f"{path}: {MAX_MATRIX_BYTES + 1} bytes is more than a matrix may have "
                              f"({MAX_MATRIX_BYTES} bytes)"]
    for bom in (b"\xff\xfe", b"\xfe\xff"):
        path.write_bytes(bom + MINIMAL.encode("utf-16-le"))
        assert problems(path) == [f"{path}: starts with a UTF-16 byte-order mark: save it as UTF-8"]
    path.write_bytes(b"\xef\xbb\xbf" + MINIMAL.encode())
    assert load_matrix(path).text == MINIMAL  # a UTF-8 byte-order mark is dropped
    assert problems(path, text="[matrix]\npython 3.13\n\n[stacks]\n") == [
        "m.toml:2: syntax error: Expected '=' after a key in a key/value pair"]
    assert problems(path, text="[matrix]\nx = [\n") == ["m.toml:2: syntax error: Invalid value (at end of document)"]


def test_text_problems_are_every_key_and_value_in_line_order(tmp_path: Path) -> None:
    text = ('[matrix]\n"a\u200bb" = 1\n"c\u202e" = 2\npython = "3.1\u200b3"\n'
            '[stacks.s]\nnote = "fine"\n"d\u200b" = { "e\u200b" = 1 }\n\n\n"f\u200b" = 1\n')
    assert problems(tmp_path / "m.toml", text=text) == [
        "m.toml:2: matrix.'a\\u200bb': key contains an invisible character (U+200B ZERO WIDTH SPACE) at character 2",
        "m.toml:3: matrix.'c\\u202e': key contains a bidirectional-text control (U+202E RIGHT-TO-LEFT OVERRIDE) at "
        "character 2",
        "m.toml:4: matrix.python: '3.1\\u200b3' contains an invisible character (U+200B ZERO WIDTH SPACE) at character 4",
        "m.toml:7: stacks.s.'d\\u200b': key contains an invisible character (U+200B ZERO WIDTH SPACE) at character 2",
        "m.toml:10: stacks.s.'f\\u200b': key contains an invisible character (U+200B ZERO WIDTH SPACE) at character 2",
    ]  # the key's own value is not looked into; sorted by line although the walk is depth-first


def test_each_schema_problem_is_one_located_line(tmp_path: Path) -> None:
    text = ('[[known_issues]]\nid = "k"\nwhen = { six = "1" }\nsmokes = ["x"]\nnote = "n"\n'
            'boundary = { param = "M", expect_first_fail = [1] }\n[stacks.s.packages]\n"bad name!" = ["1"]\n')
    assert problems(tmp_path / "m.toml", text=text) == [
        "m.toml:8: stacks.s.packages.bad name!: 'bad name!' is not a PEP 508 package name (letters, digits, '.', '_', "
        "'-', starting and ending with a letter or digit)",
        "m.toml:6: known_issues.0.boundary.expect_first_fail: must be a number or a string (a parameter value or a "
        "version)",
    ]


def test_an_unknown_key_inside_an_optional_table_names_that_tables_keys(tmp_path: Path) -> None:
    """stacks.<name>.base is Optional[Base]: the message looks inside Base for the closest key or lists them."""
    table = '[stacks.s]\ngpu_required = false\nbase = {{ suite = "trixie", {0} }}\n[stacks.s.packages]\nsix = ["1"]\n'
    assert problems(tmp_path / "m.toml", text=table.format('mirorr = "https://x.org"')) == [
        "m.toml:3: stacks.s.base.mirorr: unknown key (did you mean 'mirror'?)"]
    assert problems(tmp_path / "m.toml", text=table.format("zzzz = 1")) == [
        "m.toml:3: stacks.s.base.zzzz: unknown key (expected one of: image, kind, mirror, packages, source_date_epoch, "
        "suite, variant)"]


def test_the_build_cache_settings_name_a_repository_and_nothing_else(tmp_path: Path) -> None:
    good = load_matrix(tmp_path / "m.toml", text=MINIMAL.replace(
        '[matrix]\n', '[matrix]\ncache_from = "127.0.0.1:5000/cache"\ncache_to = "registry.example:443/ci/cache"\n'))
    assert (good.settings.cache_from, good.settings.cache_to) == ("127.0.0.1:5000/cache", "registry.example:443/ci/cache")
    assert load_matrix(tmp_path / "m.toml", text=MINIMAL).settings.cache_from is None
    for key, value, said in [
        ("cache_from", "127.0.0.1:5000", "must name a repository"),
        ("cache_to", "../../etc/cache", "must look like host[:port]/path"),
        ("cache_from", "http://127.0.0.1:5000/cache", "must look like host[:port]/path"),
        ("cache_to", "127.0.0.1:5000/cache:latest", "must look like host[:port]/path"),
        ("cache_from", "-oProxyCommand=x/c", "must look like host[:port]/path"),
        ("cache_from", "127.0.0.1:5000/Cache", "must look like host[:port]/path"),
    ]:
        text = MINIMAL.replace("[matrix]\n", f'[matrix]\n{key} = "{value}"\n')
        found = problems(tmp_path / "m.toml", text=text)
        assert len(found) == 1 and found[0].startswith(f"m.toml:2: matrix.{key}: ") and said in found[0], found
