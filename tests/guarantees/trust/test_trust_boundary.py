"""A known issue with a boundary expects failure only past it, in the boundary's quantity: M=33289 is where
the output's M*N elements pass 2^31 for N=64512, so with N=50257 the expected first failure is M=42731, the
probes below it are plain passes (not XPASS) and the result is "confirmed", not "the matrix expects 33289".
Here on the xformers shape smoke's own declaration, and end to end with a CPU smoke whose failure depends
on a product of two dimensions."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from pinmatrix.bisect import boundary as bnd
from pinmatrix.cli import main
from pinmatrix.project.smoke_params import parse_params
from pinmatrix.smoke.runner import HostCell

ROOT = Path(__file__).resolve().parents[3]
SHAPE = parse_params({
    "params": {"M": {"type": "int", "range": [1, 131072], "default": 33280}},
    "fixed": {"K": 2048, "N": 64512, "dtype": "bfloat16"},
    "quantities": {"output elements M*N": ["M", "N"], "operand a elements M*K": ["M", "K"],
                   "operand b elements K*N": ["K", "N"]},
})
SPEC = bnd.BoundarySpec("xformers-tiled-matmul-int32-offsets", "M", 33289, "xformers-tiled-matmul-shape",
                        "illegal-memory-access")


@dataclass(frozen=True)
class _Issue:
    id: str


def _Cell(cell_id: str, known_issues: tuple[_Issue, ...]) -> HostCell:  # a cell as the tests make one
    return HostCell(id=cell_id, known_issues=known_issues)


def test_the_declared_boundary_is_read_in_its_quantity() -> None:
    b = bnd.in_quantity(SPEC, SHAPE)
    assert (b.quantity, b.limit, b.limit_name, b.inclusive) == ("output elements M*N", 2.0**31, "2^31", False)
    assert b.declared_at == {"K": 2048, "N": 64512, "dtype": "bfloat16"}
    dims = SHAPE.values({})
    assert not bnd.past(b, 33288, dims, SHAPE) and bnd.past(b, 33289, dims, SHAPE)
    values = list(range(1, 131073))
    assert bnd.expected_in(b, values, dims, SHAPE) == 33289
    other = SHAPE.values({"N": 50257})
    assert bnd.expected_in(b, values, other, SHAPE) == 42731  # 42730*50257 < 2^31 < 42731*50257
    assert 42730 * 50257 <= 2**31 < 42731 * 50257
    assert not bnd.past(b, 42730, other, SHAPE) and bnd.past(b, 42731, other, SHAPE)
    assert bnd.expected_in(b, list(range(1, 100)), other, SHAPE) == 33289  # none past: the declared value


def test_probes_below_the_scoped_boundary_are_outside_the_issue() -> None:
    b = bnd.in_quantity(SPEC, SHAPE)
    cell = _Cell("plain", (_Issue(SPEC.issue), _Issue("other")))
    other = SHAPE.values({"N": 50257})
    below = bnd.cell_at(cell, 40000, [b], {**other, "M": 40000}, SHAPE)  # past 33289, not past 2^31 at N=50257
    assert [i.id for i in below.known_issues] == ["other"]
    above = bnd.cell_at(cell, 42731, [b], {**other, "M": 42731}, SHAPE)
    assert above is cell
    # read by the parameter alone (no declaration), 40000 would have been past the boundary
    assert bnd.cell_at(cell, 40000, [SPEC]) is cell


def test_the_check_says_confirmed_for_the_scoped_value_and_shows_the_declared_one() -> None:
    b = bnd.in_quantity(SPEC, SHAPE)
    (c,) = bnd.check([b], 42731, "illegal-memory-access", exact=True, where="in [1, 131072]",
                     expected={b.issue: 42731})
    assert c.status == "confirmed" and c.expected_first_fail == 42731
    assert c.message == ("known issue xformers-tiled-matmul-int32-offsets: boundary confirmed, first failure at "
                         "M=42731 (output elements M*N pass 2^31; the matrix declares M=33289 for K=2048, N=64512)")
    (m,) = bnd.check([b], 40000, None, exact=True, where="", expected={b.issue: 42731})
    assert m.status == "moved" and m.message.endswith("the matrix expects 42731 (output elements M*N pass 2^31; "
                                                      "the matrix declares M=33289 for K=2048, N=64512)")
    (same,) = bnd.check([b], 33289, None, exact=True, where="", expected={b.issue: 33289})
    assert same.message.endswith("first failure at M=33289")  # at the declared dimensions: nothing to add


def test_a_boundary_that_is_no_quantitys_stays_the_parameters() -> None:
    flat = parse_params({"params": {"n": {"type": "int", "range": [0, 10]}}})
    spec = bnd.BoundarySpec("i", "n", 5, None, None)
    assert bnd.in_quantity(spec, flat) == spec
    assert bnd.in_quantity(spec, None) == spec
    assert bnd.in_quantity(bnd.BoundarySpec("i", "n", "5", None, None), flat).quantity is None
    two = parse_params({"params": {"n": {"type": "int", "range": [0, 10]}}, "fixed": {"w": 64},
                        "quantities": {"a n*w": ["n", "w"], "b n": ["n"]}})
    assert bnd.in_quantity(bnd.BoundarySpec("i", "n", 65, None, None), two).quantity == "a n*w"  # only a crosses
    both = parse_params({"params": {"n": {"type": "int", "range": [0, 10]}}, "fixed": {"w": 64},
                         "quantities": {"a n*w": ["n", "w"], "b n*w": ["w", "n"]}})
    assert bnd.in_quantity(bnd.BoundarySpec("i", "n", 65, None, None), both).quantity is None  # ambiguous


# -- end to end: a CPU smoke that fails once n*w passes 2^12 ---------------------------------------------

PRODUCT_SMOKE = '''"""cpu-product: fails once n*w items pass 2^12 (a stand-in for an int32 offset past 2^31)."""

from _smokelib import Context, Fail, main

SMOKES = {
    "cpu-product": {
        "func": "product",
        "description": "n rows of w items: fails once n*w passes 4096",
        "params": {"n": {"type": "int", "range": [1, 200], "default": 10}},
        "fixed": {"w": 64},
        "quantities": {"items n*w": ["n", "w"]},
        "timeout_s": 60,
    },
}


def product(ctx: Context) -> None:
    n, w = int(ctx.params["n"]), int(ctx.params["w"])
    if n * w > 4096:
        raise Fail(f"{n * w} items overflow", "over-capacity")
    ctx.summary = f"{n * w} items"


if __name__ == "__main__":
    main(SMOKES, globals())
'''

MATRIX = """
[matrix]
exclude_newer = "2026-11-01T00:00:00Z"

[[known_issues]]
id = "product-overflow"
when = { six = "1.17.0" }
smokes = ["cpu-product"]
expect = "fail"
class = "over-capacity"
note = "n*w items pass 2^12"
# with w=64, n*w passes 2^12 at n=65
boundary = { param = "n", expect_first_fail = 65 }

[stacks.cpu]
description = "a CPU cell with a known issue on a product of two dimensions"
gpu_required = false
smokes = ["cpu-product"]
[stacks.cpu.packages]
six = ["1.17.0"]
"""


def test_another_fixed_dimension_moves_the_expected_parameter_not_the_verdict(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    root = tmp_path / "project"
    shutil.copytree(ROOT / "smoke", root / "smoke", ignore=shutil.ignore_patterns("__pycache__"))
    (root / "smoke" / "cpu_product.py").write_text(PRODUCT_SMOKE)
    (root / "matrix.toml").write_text(MATRIX)
    base = ["bisect", "param", "cpu-product", str(root / "matrix.toml"), "--cell", "cpu", "--param", "n",
            "--smoke-dir", str(root / "smoke"), "--results", str(tmp_path / "r.sqlite"), "--logs", str(tmp_path / "l"),
            "--json"]

    def run(*extra: str, code: int = 0) -> dict:
        capsys.readouterr()
        assert main([*base, *extra]) == code, capsys.readouterr()
        return json.loads(capsys.readouterr().out)

    rep = run()
    (check,) = rep["boundary"]
    assert (check["status"], check["found_first_fail"], check["expected_first_fail"]) == ("confirmed", 65, 65)

    rep = run("--fix", "w=50")  # n*w passes 4096 at n=82 now: 81*50 = 4050, 82*50 = 4100
    (check,) = rep["boundary"]
    assert (check["status"], check["found_first_fail"], check["expected_first_fail"]) == ("confirmed", 82, 82)
    assert check["message"].endswith("first failure at n=82 (items n*w pass 2^12; the matrix declares n=65 for "
                                     "w=64)")
    statuses = {p["value"]: p["status"] for p in rep["probes"]}
    assert statuses and all(s == "pass" for v, s in statuses.items() if v < 82)  # plain passes, no XPASS
    assert all(s == "xfail" for v, s in statuses.items() if v >= 82)
    assert any(65 <= v < 82 for v in statuses), statuses  # the probes did go between the two boundaries



# -- every branch of boundary.py, pinned (from mutation testing) ------------------------------------------

@dataclass(frozen=True)
class _B:
    param: str
    expect_first_fail: object
    smoke: str | None = None


@dataclass(frozen=True)
class _KI:
    id: str
    smokes: tuple[str, ...]
    boundary: _B | None
    failure_class: str | None = "over-capacity"


@dataclass(frozen=True)
class _Matrix:
    known_issues: tuple[_KI, ...]


def test_boundaries_for_keeps_only_the_issues_of_this_cell_smoke_and_parameter() -> None:
    issues = (
        _KI("a", ("s-*",), _B("n", 5)),
        _KI("b", ("s-one",), _B("n", 6, smoke="s-one")),
        _KI("c", ("s-one",), _B("m", 7)),  # another parameter
        _KI("d", ("s-one",), None),  # no boundary
        _KI("e", ("other",), _B("n", 8)),  # another smoke
        _KI("f", ("s-*",), _B("n", 9, smoke="s-two")),  # its boundary is another smoke's
        _KI("g", ("s-one",), _B("n", 10)),  # does not apply to the cell
    )
    cell = _Cell("c1", tuple(_Issue(i) for i in "abcdef"))
    by_id = {i.id: i for i in issues}
    issues = tuple(by_id[k] for k in "daefbcg")  # each kind of skipped issue before a kept one
    found = bnd.boundaries_for(_Matrix(issues), cell, "s-one", "n")
    assert found == [bnd.BoundarySpec("a", "n", 5, None, "over-capacity"),
                     bnd.BoundarySpec("b", "n", 6, "s-one", "over-capacity")]
    assert bnd.boundaries_for(None, cell, "s-one", "n") == []
    assert bnd.boundaries_for(_Matrix(issues), _Cell("c2", ()), "s-one", "n") == []


def test_versions_and_numbers_on_the_parameter() -> None:
    cell = _Cell("c", (_Issue("v"),))
    spec = bnd.BoundarySpec("v", "torch", "2.5.0", None, None)
    assert bnd.cell_at(cell, "2.4.1", [spec]).known_issues == ()
    assert bnd.cell_at(cell, "2.5.0", [spec]) is cell and bnd.cell_at(cell, "2.10", [spec]) is cell
    assert bnd.cell_at(cell, "not a version", [spec]) is cell  # unreadable: not before, so inside
    num = bnd.BoundarySpec("v", "n", 5, None, None)
    assert bnd.cell_at(cell, 4, [num]).known_issues == () and bnd.cell_at(cell, 5, [num]) is cell
    assert bnd.past(num, 5) and not bnd.past(num, 4)
    assert bnd.cell_at(cell, "4", [num]).known_issues == ()  # a number given as text compares as a version


def test_every_outcome_of_the_check_is_its_exact_line() -> None:
    b = bnd.BoundarySpec("i", "n", 613, None, "over-capacity")
    (nf,) = bnd.check([b], None, None, exact=True, where="in [0, 500]")
    assert nf.to_dict() == {"issue": "i", "param": "n", "expected_first_fail": 613, "found_first_fail": None,
                            "status": "not-found", "message": "known issue i: expected the first failure at n=613, "
                            "but nothing failed in [0, 500]", "class_expected": "over-capacity", "class_found": None}
    (un,) = bnd.check([b], 600, "x", exact=False, where="")
    assert (un.status, un.message) == ("unknown", "known issue i: the search did not narrow the boundary to one point")
    (ok,) = bnd.check([b], 613, "over-capacity", exact=True, where="")
    assert (ok.status, ok.message) == ("confirmed", "known issue i: boundary confirmed, first failure at n=613")
    (cls,) = bnd.check([b], 613, "crash", exact=True, where="")
    assert cls.message == ("known issue i: boundary confirmed, first failure at n=613 (but the class is crash, the "
                           "issue expects over-capacity)") and cls.class_found == "crash"
    (nocls,) = bnd.check([bnd.BoundarySpec("i", "n", 613, None, None)], 613, "crash", exact=True, where="")
    assert nocls.message.endswith("first failure at n=613")
    (noclass_found,) = bnd.check([b], 613, None, exact=True, where="")
    assert noclass_found.message.endswith("first failure at n=613")
    (mv,) = bnd.check([b], 600, "over-capacity", exact=True, where="")
    assert (mv.found_first_fail, mv.expected_first_fail) == (600, 613)
    assert (mv.status, mv.message) == ("moved", "known issue i: boundary moved: first failure at n=600, the matrix "
                                                "expects 613")
    (text,) = bnd.check([bnd.BoundarySpec("i", "torch", "2.5", None, None)], "2.5", None, exact=True, where="")
    assert text.status == "confirmed"


def test_in_quantity_needs_a_declared_integer_parameter() -> None:
    for spec in (bnd.BoundarySpec("i", "K", 33289, None, None),  # not a parameter of the smoke
                 bnd.BoundarySpec("i", "M", True, None, None), bnd.BoundarySpec("i", "M", 33289.0, None, None)):
        assert bnd.in_quantity(spec, SHAPE) == spec
    limited = parse_params({"params": {"n": {"type": "int", "range": [0, 1000], "default": 10}},
                            "fixed": {"capacity": 613}, "quantities": {"items n": ["n"]},
                            "limits": {"capacity": "capacity"}})
    b = bnd.in_quantity(bnd.BoundarySpec("i", "n", 613, None, None), limited)
    assert (b.quantity, b.limit, b.limit_name, b.inclusive) == ("items n", 613.0, "capacity", True)
    assert b.declared_at == {"capacity": 613}
    assert bnd.past(b, 613, {"n": 613, "capacity": 613}, limited) and not bnd.past(b, 612, {"capacity": 613}, limited)
    (c,) = bnd.check([b], 600, None, exact=True, where="", expected={"i": bnd.expected_in(b, list(range(1001)),
                                                                                          {"capacity": 600}, limited)})
    assert c.message == "known issue i: boundary moved: first failure at n=600, the matrix expects 613"
    # the quantity read, but no dimensions given: the parameter alone decides
    assert bnd.past(b, 613) and not bnd.past(b, 612)
    assert bnd.expected_in(b, [1, 2, 3], {"capacity": 613}, limited) == 613


def test_a_declared_limit_is_preferred_and_reaching_it_is_said_so() -> None:
    decl = parse_params({"params": {"n": {"type": "int", "range": [1, 1000], "default": 10}},
                         "fixed": {"w": 64, "cap": 4096}, "quantities": {"items n*w": ["n", "w"]},
                         "limits": {"cap": "cap"}})
    b = bnd.in_quantity(bnd.BoundarySpec("i", "n", 64, None, None), decl)  # 64*64 reaches 4096 = 2^12 = cap
    assert (b.limit_name, b.limit, b.inclusive) == ("cap", 4096.0, True)
    dims = decl.values({"w": 32})
    want = bnd.expected_in(b, list(range(1, 1001)), dims, decl)
    assert want == 128
    (c,) = bnd.check([b], 128, None, exact=True, where="", expected={"i": want})
    assert c.message == ("known issue i: boundary confirmed, first failure at n=128 (items n*w reach cap; the "
                         "matrix declares n=64 for cap=4096, w=64)")


def test_past_in_the_quantity_edges() -> None:
    b = bnd.in_quantity(SPEC, SHAPE)
    exact = SHAPE.values({"N": 65536})
    assert not bnd.past(b, 32768, exact, SHAPE)  # M*N == 2^31 is not past it (it passes 2^31 from 32769)
    assert bnd.past(b, 32769, exact, SHAPE)
    assert bnd.past(b, 33289, exact, None) and not bnd.past(b, 33288, exact, None)  # no declaration: the parameter
    assert bnd.expected_in(b, [40000, 50000], SHAPE.values({}), SHAPE) == 40000  # the first value already past
    bare = bnd.BoundarySpec("i", "M", 33289, None, None, quantity="output elements M*N", limit=2.0**31)
    (c,) = bnd.check([bare], 42731, None, exact=True, where="", expected={"i": 42731})
    assert c.message == "known issue i: boundary confirmed, first failure at M=42731"  # nothing declared to name
