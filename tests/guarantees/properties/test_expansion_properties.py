"""Property tests for expansion: include/exclude/zip semantics, id stability, no cell lost."""

from __future__ import annotations

import itertools
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import load_matrix

PACKAGES = ["alpha", "bravo", "charlie", "delta"]
versions = st.lists(st.sampled_from(["1.0", "1.1", "2.0", "2.1.post1", "3.0"]), min_size=1, max_size=3, unique=True)


@st.composite
def stacks(draw):
    names = draw(st.lists(st.sampled_from(PACKAGES), min_size=1, max_size=4, unique=True))
    axes = {n: draw(versions) for n in names}
    zips: list[list[str]] = []
    if len(names) >= 2 and draw(st.booleans()):
        a, b = names[0], names[1]
        n = min(len(axes[a]), len(axes[b]))
        axes[a], axes[b] = axes[a][:n], axes[b][:n]
        zips.append([a, b])
    excludes = draw(st.lists(st.dictionaries(st.sampled_from(names), st.sampled_from(["1.0", "2.0", "3.0"]), min_size=1, max_size=2), max_size=2))
    includes = draw(st.lists(st.dictionaries(st.sampled_from(names), st.sampled_from(["9.0", "1.0"]), min_size=1, max_size=2), max_size=2))
    return axes, zips, excludes, includes


def _toml_value(v: str) -> str:
    return f'"{v}"'


def write_matrix(path: Path, axes, zips, excludes, includes, python: str = "3.13") -> Path:
    suite = {"3.11": "bookworm", "3.13": "trixie"}[python]  # a cell's Python comes from its base
    lines = ["[matrix]", f'python = "{python}"', "[matrix.base]", f'suite = "{suite}"', "[stacks.s]",
             "gpu_required = false"]
    if zips:
        lines.append("zip = [" + ", ".join("[" + ", ".join(_toml_value(a) for a in z) + "]" for z in zips) + "]")
    if excludes:
        lines.append("exclude = [" + ", ".join("{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in e.items()) + " }" for e in excludes) + "]")
    if includes:
        lines.append("include = [" + ", ".join("{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in i.items()) + " }" for i in includes) + "]")
    lines.append("[stacks.s.packages]")
    for name, vals in axes.items():
        lines.append(f"{name} = [" + ", ".join(_toml_value(v) for v in vals) + "]")
    path.write_text("\n".join(lines) + "\n")
    return path


def expected_assignments(axes, zips, excludes, includes) -> set[tuple[tuple[str, str], ...]]:
    names = list(axes)
    zipped = {a for z in zips for a in z}
    groups = [list(zip(*(axes[a] for a in z))) for z in zips] + [[(v,) for v in axes[a]] for a in names if a not in zipped]
    group_axes = list(zips) + [[a] for a in names if a not in zipped]
    out = set()
    for combo in itertools.product(*groups):
        assign = {}
        for ga, vals in zip(group_axes, combo):
            assign.update(zip(ga, vals))
        if any(all(assign[k] == v for k, v in ex.items()) for ex in excludes):
            continue
        out.add(tuple(sorted(assign.items())))
    for inc in includes:
        free_groups = [[a for a in ga if a not in inc] for ga in group_axes]
        free_groups = [g for g in free_groups if g]
        choices = [list(zip(*(axes[a] for a in g))) if len(g) > 1 else [(v,) for v in axes[g[0]]] for g in free_groups]
        for combo in itertools.product(*choices):
            assign = dict(inc)
            for g, vals in zip(free_groups, combo):
                assign.update(zip(g, vals))
            out.add(tuple(sorted(assign.items())))
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stacks())
def test_no_cell_lost_and_none_invented(tmp_path_factory, spec) -> None:
    axes, zips, excludes, includes = spec
    expected = expected_assignments(axes, zips, excludes, includes)
    path = write_matrix(tmp_path_factory.mktemp("m") / "matrix.toml", axes, zips, excludes, includes)
    if not expected:
        return  # a stack with no cells is a validation error, tested in the malformed corpus
    exp = expand_matrix(load_matrix(path))
    got = {tuple(sorted(c.pins.items())) for c in exp.cells}
    assert not exp.pruned  # plain packages break no compatibility rule
    assert got == expected
    assert len({c.id for c in exp.cells}) == len(exp.cells)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stacks(), st.randoms())
def test_ids_do_not_depend_on_declaration_order(tmp_path_factory, spec, rnd) -> None:
    axes, zips, _, _ = spec
    d = tmp_path_factory.mktemp("m")
    a = expand_matrix(load_matrix(write_matrix(d / "a.toml", axes, zips, [], [])))
    names = list(axes)
    rnd.shuffle(names)
    shuffled = {n: list(axes[n]) for n in names}
    if not zips:
        for n in shuffled:
            rnd.shuffle(shuffled[n])
    b = expand_matrix(load_matrix(write_matrix(d / "b.toml", shuffled, zips, [], [])))
    assert {c.id: tuple(sorted(c.pins.items())) for c in a.cells} == {c.id: tuple(sorted(c.pins.items())) for c in b.cells}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(stacks())
def test_changing_one_pin_changes_only_the_ids_it_touches(tmp_path_factory, spec) -> None:
    axes, zips, _, _ = spec
    d = tmp_path_factory.mktemp("m")
    before = expand_matrix(load_matrix(write_matrix(d / "a.toml", axes, zips, [], [])))
    name = next(iter(axes))
    old = axes[name][0]
    changed = {**axes, name: ["7.7", *axes[name][1:]]}
    after = expand_matrix(load_matrix(write_matrix(d / "b.toml", changed, zips, [], [])))
    untouched_before = {c.id for c in before.cells if c.pins[name] != old}
    untouched_after = {c.id for c in after.cells if c.pins[name] != "7.7"}
    assert untouched_before == untouched_after
    touched_after = {c.id for c in after.cells if c.pins[name] == "7.7"}
    assert touched_after.isdisjoint({c.id for c in before.cells})


def test_python_version_is_part_of_the_id(tmp_path: Path) -> None:
    axes = {"alpha": ["1.0"]}
    a = expand_matrix(load_matrix(write_matrix(tmp_path / "a.toml", axes, [], [], [], python="3.11")))
    b = expand_matrix(load_matrix(write_matrix(tmp_path / "b.toml", axes, [], [], [], python="3.13")))
    assert a.cells[0].id != b.cells[0].id
