"""matrix.selection.choose_cells: what --stack, --cell and -k mean in every command, on the shipped matrix."""

from __future__ import annotations

import pytest

from conftest import REPO
from pinmatrix.errors import PinmatrixError
from pinmatrix.matrix.selection import choose_cells, load

MATRIX, EXPANSION = load(REPO / "matrix.toml")
DEMO = {c.name: c for c in EXPANSION.cells if c.stack == "demo"}
NEW = DEMO["demo[six=1.17.0,idna=3.10]"]
OLD = DEMO["demo[six=1.16.0,idna=3.7]"]


def choose(**kw: object) -> list[str]:
    return [c.id for c in choose_cells(MATRIX, EXPANSION, **kw)]  # type: ignore[arg-type]


def test_no_selection_is_every_cell_and_a_stack_its_cells() -> None:
    assert choose() == [c.id for c in EXPANSION.cells]
    assert choose(stack="demo") == [c.id for c in DEMO.values()]


def test_cells_by_id_or_name_in_the_order_asked_each_once() -> None:
    assert choose(cells=[NEW.name, OLD.id]) == [NEW.id, OLD.id]
    assert choose(cells=[OLD.id, NEW.name, OLD.name, OLD.id]) == [OLD.id, NEW.id]
    assert choose(stack="demo", cells=[NEW.id]) == [NEW.id]


def test_k_matches_names_and_ids_and_narrows_the_cells_named() -> None:
    assert choose(stack="demo", keyword="six=1.17.0 and idna=3.10") == [NEW.id]
    assert choose(keyword=NEW.id) == [NEW.id]
    assert choose(cells=[NEW.id, OLD.id], keyword="idna=3.7") == [OLD.id]


@pytest.mark.parametrize(("kw", "message"), [
    ({"keyword": "h300"}, "no cell matches -k 'h300' in matrix.toml"),
    ({"stack": "demo", "keyword": "h300"}, "no cell matches -k 'h300' in stack demo"),
    ({"cells": ["nope"]}, "no cell with id or name 'nope' in matrix.toml (see `pinmatrix cells`)"),
    ({"stack": "h200", "cells": [NEW.id]}, f"no cell with id or name '{NEW.id}' in stack h200 (see `pinmatrix cells`)"),
    ({"cells": [NEW.id], "keyword": "idna=3.7"}, f"no cell matches --cell {NEW.id} and -k 'idna=3.7' in matrix.toml"),
    ({"stack": "nope"}, "unknown stack 'nope'"),
])
def test_a_selection_of_nothing_is_one_line_naming_what_was_asked(kw: dict[str, object], message: str) -> None:
    with pytest.raises(PinmatrixError) as err:
        choose(**kw)
    assert message in str(err.value) and "\n" not in str(err.value)
