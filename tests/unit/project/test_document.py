"""load_document (project/document.py): every input file's bytes -> text -> TOML or JSON -> model, each failure one
located line ``FILE:LINE: key: message`` raised as the caller's own PinmatrixError subclass."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import Field
from pydantic_core import ErrorDetails

from pinmatrix.datamodel import Strict
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.project.document import MAX_NESTING, document_text, load_document


class MineError(PinmatrixError):
    """The caller's own error type."""


class Part(Strict):
    name: str
    size: int = 0


class Doc(Strict):
    title: str
    parts: list[Part] = Field(default_factory=list)
    extra: dict[str, Part] = Field(default_factory=dict)


GOOD = 'title = "t"\n\n[[parts]]\nname = "a"\n\n[[parts]]\nname = "b"\nsize = 3\n\n[extra.x]\nname = "c"\n'


def refusal(text: str | bytes, *, form: str = "toml", **kw) -> str:  # noqa: ANN003 - load_document's options
    path = Path("/nowhere/doc.toml")
    with pytest.raises(MineError) as err:
        load_document(path, Doc, what="a test document", content=text, error=MineError, form=form, **kw)
    assert "\n" not in str(err.value) and err.value.exit_code == 2
    return str(err.value)


def test_a_good_document_is_its_model(tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(GOOD)
    doc = load_document(path, Doc, what="a test document")
    assert (doc.title, [p.name for p in doc.parts], doc.parts[1].size, doc.extra["x"].name) == ("t", ["a", "b"], 3, "c")
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())  # a UTF-8 byte-order mark is dropped
    assert load_document(path, Doc, what="a test document") == doc
    assert load_document(path, Doc, what="x", content={"title": "t"}).parts == []  # data already parsed


def test_data_already_parsed_is_checked_alike_without_a_line() -> None:
    data = {"title": 1, "parts": [{"name": "a", "sise": 2}]}
    with pytest.raises(MineError, match=r"^d: parts\.0\.sise: unknown key \(did you mean 'size'\?\)$"):
        load_document(Path("d"), Doc, what="x", content=data, error=MineError)
    with pytest.raises(MatrixError) as err:
        load_document(Path("d"), Doc, what="x", content=data, problems=MatrixError)
    assert err.value.lines() == ["d: title: Input should be a valid string",
                                 "d: parts.0.sise: unknown key (did you mean 'size'?)"]


def test_bad_toml_is_one_line_with_its_line() -> None:
    assert refusal('title = "t"\n\n[[parts]\n') == "/nowhere/doc.toml:3: syntax error: Expected ']]' at the end " \
                                                    "of an array declaration"
    assert refusal('title = "t"\nx = [\n') == "/nowhere/doc.toml:2: syntax error: Invalid value (at end of document)"


def test_an_unknown_key_names_its_line_and_the_closest_key() -> None:
    text = GOOD.replace("size = 3", "sise = 3")
    assert refusal(text) == "/nowhere/doc.toml:8: parts.1.sise: unknown key (did you mean 'size'?)"
    assert refusal(text, name="doc.toml").startswith("doc.toml:8: ")  # the name a located line uses
    assert refusal(GOOD + "colour = 1\n") == \
        "/nowhere/doc.toml:12: extra.x.colour: unknown key (expected one of: name, size)"  # in the table above it


def test_an_unknown_key_comes_before_the_key_it_misspells() -> None:
    assert refusal(GOOD.replace('title = "t"', 'titel = "t"')) == \
        "/nowhere/doc.toml:1: titel: unknown key (did you mean 'title'?)"


def test_a_wrong_type_and_a_missing_key_name_their_line() -> None:
    assert refusal(GOOD.replace("size = 3", 'size = "three"')) == \
        "/nowhere/doc.toml:8: parts.1.size: Input should be a valid integer, unable to parse string as an integer"
    assert refusal(GOOD.replace('name = "b"\n', "")) == "/nowhere/doc.toml:6: parts.1.name: required key is missing"
    assert refusal(GOOD.replace('title = "t"\n', "")) == "/nowhere/doc.toml:1: title: required key is missing"
    assert refusal('title = "t"\nparts = "none"\n') == "/nowhere/doc.toml:2: parts: Input should be a valid list"


def test_an_oversize_file_is_named_with_its_size_unread(tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(GOOD + "#" * 1000 + "\n")
    size = path.stat().st_size
    with pytest.raises(MineError) as err:
        load_document(path, Doc, what="a test document", error=MineError, max_bytes=100)
    assert str(err.value) == f"{path}: {size} bytes is more than a test document may have (100 bytes)"
    assert load_document(path, Doc, what="a test document", max_bytes=size).title == "t"  # the bound itself is fine
    assert refusal("#" * 101, max_bytes=100) == "/nowhere/doc.toml: 101 bytes is more than a test document may have " \
                                                "(100 bytes)"


def test_a_file_that_is_not_there_or_not_readable(tmp_path: Path) -> None:
    with pytest.raises(MineError, match=rf"^{tmp_path}/absent.toml: no such file$"):
        load_document(tmp_path / "absent.toml", Doc, what="x", error=MineError)
    with pytest.raises(MineError, match=rf"^{tmp_path}/absent.toml: no such file \(pass another path\)$"):
        load_document(tmp_path / "absent.toml", Doc, what="x", error=MineError, hint="pass another path")
    with pytest.raises(MineError, match=rf"^{tmp_path}: cannot read: \[Errno 21\] Is a directory"):
        load_document(tmp_path, Doc, what="x", error=MineError)


def test_text_that_is_not_utf8_names_its_line() -> None:
    assert refusal(b'title = "t"\n# \xff\n') == "/nowhere/doc.toml:2: not UTF-8: byte 0xff at offset 14"
    assert refusal(b"\xff\xfet\x00") == "/nowhere/doc.toml: starts with a UTF-16 byte-order mark: save it as UTF-8"
    assert refusal('title = "\udcff"\n') == "/nowhere/doc.toml:1: not UTF-8: byte 0xed at offset 9"


def test_nesting_is_bounded_before_the_parser() -> None:
    deep = 'title = "t"\nx = ' + "[" * (MAX_NESTING + 1) + "]" * (MAX_NESTING + 1) + "\n"
    assert refusal(deep) == f"/nowhere/doc.toml:2: arrays and inline tables nest more than {MAX_NESTING} deep"
    assert refusal('{"title": ' + "[" * (MAX_NESTING + 1), form="json").startswith("/nowhere/doc.toml:1: arrays")


def test_json_documents() -> None:
    assert refusal('{"title": "t",\n "parts": [}', form="json") == \
        "/nowhere/doc.toml:2: syntax error: Expecting value (column 12)"
    assert refusal('{"title": "t", "parts": [{"nam": "a"}]}', form="json") == \
        "/nowhere/doc.toml: parts.0.nam: unknown key (did you mean 'name'?)"  # JSON gives no line of a key
    assert refusal('["title"]', form="json").startswith("/nowhere/doc.toml: Input should be a valid dictionary")
    doc = load_document(Path("d.json"), Doc, what="x", content='{"title": "t", "parts": [{"name": "a"}]}', form="json")
    assert doc.parts[0].name == "a"


def test_a_bad_dict_key_is_named_and_located_by_itself() -> None:
    class Keyed(Strict):
        table: dict[int, int]

    with pytest.raises(MineError) as err:
        load_document(Path("k.toml"), Keyed, what="x", content='[table]\n1 = 2\nb = 3\n', error=MineError)
    assert str(err.value).startswith("k.toml:3: table.b: Input should be a valid integer")


def test_every_problem_through_the_callers_error_and_a_screen_first() -> None:
    text = GOOD.replace("size = 3", 'size = "x"').replace('name = "c"', "name = 1")
    with pytest.raises(MatrixError) as err:
        load_document(Path("m.toml"), Doc, what="x", content=text, problems=MatrixError)
    assert err.value.lines() == ["m.toml:8: parts.1.size: Input should be a valid integer, unable to parse string as "
                                 "an integer", "m.toml:11: extra.x.name: Input should be a valid string"]

    def no_c(data: dict, where) -> list[str]:  # noqa: ANN001 - the located head of a key path
        return [f"{where(('extra', 'x', 'name'))}: no c here"] if data["extra"]["x"]["name"] == "c" else []

    with pytest.raises(MatrixError) as err:
        load_document(Path("m.toml"), Doc, what="x", content=GOOD, problems=MatrixError, screen=no_c)
    assert err.value.lines() == ["m.toml:11: extra.x.name: no c here"]
    with pytest.raises(MatrixError) as err:  # a refusal before the model, too, through the caller's error
        load_document(Path("m.toml"), Doc, what="x", content="[", problems=MatrixError)
    assert err.value.lines()[0].startswith("m.toml:1: syntax error: ")


def test_the_caller_words_the_key() -> None:
    def bracketed(err: ErrorDetails) -> str:
        return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err["loc"]).lstrip(".")

    assert refusal(GOOD.replace("size = 3", "size = []"), key=bracketed).startswith(
        "/nowhere/doc.toml:8: parts[1].size: Input should be a valid integer")
    assert refusal(GOOD, key=lambda err: "", max_bytes=10).endswith("(10 bytes)")


def test_a_file_is_read_no_further_than_its_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "doc.toml"
    path.write_text(GOOD + "#" * 100 + "\n")
    asked: list[int | None] = []
    real_open = Path.open

    def recording_open(self: Path, *args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - Path.open's own
        handle = real_open(self, *args, **kwargs)
        real_read = handle.read
        handle.read = lambda size=-1: asked.append(size) or real_read(size)  # type: ignore[method-assign]
        return handle

    monkeypatch.setattr(Path, "open", recording_open)
    with pytest.raises(MineError, match=r"bytes is more than x may have \(50 bytes\)$"):
        load_document(path, Doc, what="x", error=MineError, max_bytes=50)
    assert asked == [51]  # one byte past the bound says it is too large; the rest is never read


def test_document_text_is_the_text_load_document_reads(tmp_path: Path) -> None:
    path = tmp_path / "doc.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.encode())
    assert document_text(path, what="x") == GOOD
    with pytest.raises(MatrixError) as err:
        document_text(path, what="a test document", max_bytes=10, problems=MatrixError)
    assert err.value.lines() == [f"{path}: {len(GOOD) + 3} bytes is more than a test document may have (10 bytes)"]
    with pytest.raises(MineError, match=rf"^{tmp_path}/absent.toml: no such file$"):
        document_text(tmp_path / "absent.toml", what="x", error=MineError)
    path.write_bytes(b'title = "t"\n\xff\n')
    with pytest.raises(MineError, match=rf"^{path}:2: not UTF-8: byte 0xff at offset 12$"):
        document_text(path, what="x", error=MineError)


def test_a_table_inside_an_array_of_tables_is_located() -> None:
    text = 'title = "t"\n[[parts]]\nname = "a"\n[[parts]]\nname = "b"\n[parts.more]\nsize = 1\n'

    class More(Strict):
        name: str
        more: dict[str, str] = Field(default_factory=dict)

    class Deep(Strict):
        title: str
        parts: list[More]

    with pytest.raises(MineError) as err:
        load_document(Path("d.toml"), Deep, what="x", content=text, error=MineError)
    assert str(err.value).startswith("d.toml:7: parts.1.more.size: ")
