"""Expansion details the shipped matrix does not reach: declared indexes and the PyTorch index per CUDA
variant, stacks with only some of the axes the compatibility rules join, and a patch on the exact release
that contains it upstream."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from pinmatrix.cell import IndexSpec
from pinmatrix.errors import MatrixError
from pinmatrix.matrix.selection import expand_matrix
from pinmatrix.project.matrix_toml import load_matrix

MIRROR = IndexSpec(name="mirror", url="https://mirror.example.org/simple", default=True)
EXTRA = IndexSpec(name="extra", url="https://extra.example.org/simple", explicit=True, packages=("six",))


def expand(tmp_path: Path, text: str, *, name: str = "m.toml", max_combinations: int | None = None):
    (tmp_path / name).write_text(text)
    return expand_matrix(load_matrix(tmp_path / name), max_combinations=max_combinations)


def problems_of(tmp_path: Path, text: str, **kw) -> list[str]:
    """The located lines of a matrix that expansion refuses (fails the test if it is accepted)."""
    with pytest.raises(MatrixError) as err:
        expand(tmp_path, text, **kw)
    return err.value.problems


def test_declared_indexes_reach_every_cell_and_a_non_default_cuda_adds_the_pytorch_index(tmp_path: Path) -> None:
    result = expand(tmp_path, """[matrix]
python = "3.13"
torch_index = "https://example.org/whl/cu{cuda_nodot}"
[[matrix.indexes]]
name = "mirror"
url = "https://mirror.example.org/simple"
default = true
[[matrix.indexes]]
name = "extra"
url = "https://extra.example.org/simple"
explicit = true
packages = ["six"]
[stacks.cpu]
gpu_required = false
[stacks.cpu.axes]
torch = ["2.9.0"]
[stacks.cu]
gpu_required = false
[stacks.cu.axes]
cuda = ["12.8", "13.0"]
torch = ["2.9.0"]
[stacks.nocuda]
gpu_required = false
[stacks.nocuda.axes]
cuda = ["12.8"]
[stacks.nocuda.packages]
six = ["1.17.0"]
""")
    indexes = {cell.name: cell.indexes for cell in result.cells}
    pytorch = IndexSpec(name="pytorch-cu130", url="https://example.org/whl/cu130", explicit=True, packages=("torch",))
    assert indexes == {
        "cpu": (MIRROR, EXTRA),  # torch without a CUDA axis: the default index's build
        "cu[cuda=12.8]": (MIRROR, EXTRA),  # 12.8 is what the default index serves for torch 2.9
        "cu[cuda=13.0]": (MIRROR, EXTRA, pytorch),
        "nocuda": (MIRROR, EXTRA),  # CUDA without torch: nothing to fetch from the PyTorch index
    }
    notes = {cell.name: cell.notes for cell in result.cells}
    assert notes["cu[cuda=13.0]"] == (
        "torch 2.9.0 for CUDA 13.0 comes from the PyTorch index (the default index serves CUDA 12.8)",)
    assert notes["cpu"] == notes["cu[cuda=12.8]"] == notes["nocuda"] == ()


def test_a_patch_is_already_upstream_from_the_release_that_contains_it(tmp_path: Path) -> None:
    (tmp_path / "p.patch").write_text("x")
    sha = hashlib.sha256(b"x").hexdigest()
    result = expand(tmp_path, f"""[matrix]
python = "3.13"
[patches.up]
package = "flashinfer-python"
applies_to = ">=0.6.0"
upstream = "https://github.com/flashinfer-ai/flashinfer/pull/2520"
contained_in = "0.6.7"
note = "merged"
kind = "installed-tree"
source = "p.patch"
sha256 = "{sha}"
[stacks.s]
gpu_required = false
[stacks.s.axes]
flashinfer = [{{ version = "0.6.6", patches = ["up"] }}, {{ version = "0.6.7", patches = ["up"] }},
              {{ version = "0.6.8", patches = ["up"] }}]
""")
    patches = {cell.pins["flashinfer"]: cell.patches for cell in result.cells}
    assert [(p.status, p.note) for p in patches["0.6.6"]] == [("apply", "merged")]
    for version in ("0.6.7", "0.6.8"):
        (patch,) = patches[version]
        assert (patch.status, patch.note, patch.version) == (
            "already-upstream", f"already upstream: flashinfer-python 0.6.7 contains it; not applied to {version}",
            version)
        assert (patch.sha256, patch.source, patch.contained_in, patch.kind) == (sha, "p.patch", "0.6.7",
                                                                                "installed-tree")


CUDA_SRC = "NVIDIA CUDA Toolkit release notes, 'CUDA Toolkit and Minimum Required Driver Version'"
ARCH_SRC = ("NVIDIA CUDA Toolkit release notes and nvcc --list-gpu-arch: first toolkit that can build each target; "
            "family ('f') targets since CUDA 12.9")


def test_driver_cuda_gpu_arch_and_vllm_rules_prune_through_expansion(tmp_path: Path) -> None:
    """Each rule gets the cell's own values: the GPU decides between forward compatibility and pruning, a GPU
    without an arch axis builds for its own capability, the arch axis is checked against the CUDA and the GPU,
    and vLLM's flashinfer pin against the flashinfer axis."""
    result = expand(tmp_path, """[matrix]
python = "3.13"
[stacks.g.axes]
driver = ["560.35.03"]
cuda = ["12.4", "12.8"]
gpu = ["sm_90", "sm_121"]
[stacks.a.axes]
cuda = ["12.9"]
gpu = ["sm_90", "sm_121"]
arch = ["12.1a"]
[stacks.v]
gpu_required = false
[stacks.v.axes]
vllm = ["0.33.0"]
torch = ["2.14.0"]
flashinfer = ["0.7.2.post1", "0.6.8"]
""")
    old_driver = "driver 560.35.03 is older than CUDA 12.8's minimum 570.26"
    assert {c.name: (c.notes, c.arch_flags) for c in result.cells} == {
        "g[cuda=12.4,gpu=sm_90]": ((), ("9.0",)),
        "g[cuda=12.8,gpu=sm_90]": ((f"{old_driver}: needs the cuda-compat forward-compatibility package (sm_90 is a "
                                    "datacenter GPU)",), ("9.0",)),
        "a[gpu=sm_121]": ((), ("12.1a",)),
        "v[flashinfer=0.7.2.post1]": ((), ()),
        "v[flashinfer=0.6.8]": ((), ()),
    }
    # A wheel whose flashinfer pin contradicts the axis is kept, needing a source build: said once, not locked.
    assert {c.name: c.needs for c in result.cells if c.needs} == {
        "v[flashinfer=0.6.8]": ("a source build of vllm 0.33.0: its wheel pins torch==2.14.0 and "
                                "flashinfer-python==0.7.2.post1, not flashinfer 0.6.8 (vLLM requirements/cuda.txt "
                                "per release; flashinfer pins: PyPI wheels' Requires-Dist, 2026-12-01)",),
    }
    assert {p.name: p.reasons for p in result.pruned} == {
        "g[cuda=12.4,gpu=sm_121]": (f"arch 12.1 needs CUDA >= 12.9, the cell has CUDA 12.4 ({ARCH_SRC})",),
        "g[cuda=12.8,gpu=sm_121]": (f"{old_driver} ({CUDA_SRC})",
                                    f"arch 12.1 needs CUDA >= 12.9, the cell has CUDA 12.8 ({ARCH_SRC})"),
        "a[gpu=sm_90]": ("arch flags 12.1a build no code that runs on sm_90 (capability 9.0)",),
    }


def test_a_python_the_base_lacks_is_refused_where_it_is_set(tmp_path: Path) -> None:
    """The Debian suite decides the Python: each mismatch and unknown suite is a line naming the key that set
    it (the stack's or the matrix's); a base pinned by digest is the user's to match."""
    six = '[stacks.{0}]\ngpu_required = false\n{1}\n[stacks.{0}.packages]\nsix = ["1.17.0"]\n'
    image = "example.org/py@sha256:" + "0" * 64
    text = ('[matrix]\npython = "3.12"\n' + six.format("a", "") + six.format("b", 'python = "3.11"\nbase = { suite = "bookworm" }')
            + six.format("c", 'base = { suite = "sid2" }') + six.format("d", 'python = "3.11"')
            + six.format("e", 'base = { suite = "bookworm" }')
            + six.format("i", f'python = "3.9"\nbase = {{ kind = "image", image = "{image}" }}'))
    known = "bullseye (3.9), bookworm (3.11), trixie (3.13), forky (3.13)"
    assert problems_of(tmp_path, text) == [
        'm.toml:2: matrix.python: stack a wants Python 3.12 but its Debian trixie base has 3.13: set python = "3.13" '
        "or a base with 3.12 (another suite or a pinned image)",
        f"m.toml:16: stacks.c.base.suite: unknown Debian suite 'sid2' (known: {known})",
        'm.toml:21: stacks.d.python: stack d wants Python 3.11 but its Debian trixie base has 3.13: set python = '
        '"3.13" or a base with 3.11 (another suite or a pinned image)',
        'm.toml:2: matrix.python: stack e wants Python 3.12 but its Debian bookworm base has 3.11: set python = '
        '"3.11" or a base with 3.12 (another suite or a pinned image)',
    ]
    hamm = '[matrix]\npython = "3.13"\nbase = { suite = "hamm" }\n' + six.format("a", "")
    assert problems_of(tmp_path, hamm) == [f"m.toml:3: matrix.base.suite: unknown Debian suite 'hamm' (known: {known})"]


def test_the_cell_base_carries_the_mirror_and_an_image_base_has_no_suite(tmp_path: Path) -> None:
    from pinmatrix.cell import BaseSpec

    image = "example.org/py@sha256:" + "0" * 64
    result = expand(tmp_path, f"""[matrix]
python = "3.13"
base = {{ mirror = "https://mirror.example.org/debian", packages = ["curl"], source_date_epoch = 1 }}
[stacks.a]
gpu_required = false
[stacks.a.packages]
six = ["1.17.0"]
[stacks.i]
gpu_required = false
python = "3.9"
base = {{ kind = "image", image = "{image}", suite = "bookworm", variant = "extract" }}
[stacks.i.packages]
six = ["1.17.0"]
""")
    assert {c.stack: c.base for c in result.cells} == {
        "a": BaseSpec(kind="mmdebstrap", suite="trixie", mirror="https://mirror.example.org/debian",
                      source_date_epoch=1, packages=("curl",)),
        "i": BaseSpec(kind="image", image=image, suite=None, source_date_epoch=1735689600, variant="extract"),
    }


STACK = '[matrix]\npython = "3.13"\n{0}[stacks.s]\ngpu_required = false\n{1}\n[stacks.s.packages]\n' \
        'six = ["1.16.0", "1.17.0"]\nidna = ["3.7", "3.10"]\n'


def test_every_bad_include_and_exclude_entry_is_its_own_located_line(tmp_path: Path) -> None:
    excludes = 'exclude = [{ nope = "1", six = "1.16.0" }, {}, { six = { version = "x y" }, idna = "3.7" }]'
    assert problems_of(tmp_path, STACK.format("", excludes)) == [
        "m.toml:5: stacks.s.exclude.0.nope: not an axis of this stack (axes: six, idna)",
        "m.toml:5: stacks.s.exclude.1: an empty exclude matches every cell",
        "m.toml:5: stacks.s.exclude.2.six: bad value for axis 'six': 'x y' is not a valid version",
    ]
    includes = 'include = [{ zzz = "1", six = { version = "bad version" } }, { six = { version = "1 2" } }]'
    assert problems_of(tmp_path, STACK.format("", includes)) == [
        "m.toml:5: stacks.s.include.0.zzz: not an axis of this stack (axes: six, idna)",
        "m.toml:5: stacks.s.include.0.six: bad value for axis 'six': 'bad version' is not a valid version",
        "m.toml:5: stacks.s.include.1.six: bad value for axis 'six': '1 2' is not a valid version",
    ]


def test_exclude_values_written_as_tables_match_like_strings(tmp_path: Path) -> None:
    excludes = 'exclude = [{ six = { version = "1.16.0" }, idna = "3.7" }, { six = "1.17.0", idna = { version = "3.10" } }]'
    result = expand(tmp_path, STACK.format("", excludes))
    assert [c.name for c in result.cells] == ["s[six=1.16.0,idna=3.10]", "s[six=1.17.0,idna=3.7]"]


def test_the_combination_count_names_its_arithmetic(tmp_path: Path) -> None:
    """Zipped axes count once; each include adds the product of the axes it leaves free."""
    text = ('[matrix]\npython = "3.13"\nmax_combinations = 3\n[stacks.s]\ngpu_required = false\n'
            'zip = [["torch", "triton"]]\ninclude = [{ six = "1.15.0" }, { six = "1.14.0", idna = "3.6" }]\n'
            '[stacks.s.axes]\ntorch = ["2.8.0", "2.9.0", "2.10.0"]\ntriton = ["3.4.0", "3.5.0", "3.6.0"]\n'
            '[stacks.s.packages]\nsix = ["1.16.0", "1.17.0"]\nidna = ["3.7", "3.10"]\n')
    assert problems_of(tmp_path, text) == [  # includes: torch+triton 3 x idna 2, then torch+triton 3
        "m.toml:4: stacks.s: 21 combinations (torch+triton 3 x six 2 x idna 2 + 9 from include) are more than the "
        "limit of 3; raise it with [matrix] max_combinations or --max-combinations"]


def test_a_source_build_leaves_the_lock_and_the_arch_lists_follow_each_tool(tmp_path: Path) -> None:
    """A source-built axis is noted and left out of the requirements, the axes after it are not; PyTorch's
    list keeps +PTX and joins with ';', FlashInfer's drops +PTX and joins with spaces."""
    result = expand(tmp_path, """[matrix]
python = "3.13"
[stacks.s.axes]
cuda = ["13.0"]
gpu = ["sm_121"]
arch = ["9.0a+PTX 12.1a"]
torch = ["2.14.0"]
vllm = [{ version = "0.33.0", source_build = true }]
[stacks.s.packages]
six = ["1.17.0"]
""")
    (cell,) = result.cells
    assert cell.requirements == ("torch==2.14.0", "six==1.17.0")
    assert cell.notes == ("vllm 0.33.0 is built from source, not installed from the lock",)
    assert (cell.arch_flags, cell.torch_cuda_arch_list, cell.flashinfer_cuda_arch_list) == (
        ("9.0a+PTX", "12.1a"), "9.0a+PTX;12.1a", "9.0a 12.1a")
    assert (cell.min_driver, cell.compute_capability) == ("580.65.06", "12.1")


def test_zip_groups_are_checked_axis_by_axis(tmp_path: Path) -> None:
    text = ('[matrix]\npython = "3.13"\n[stacks.s]\ngpu_required = false\n'
            'zip = [["six", "nope", "also"], ["six", "idna"], ["idna", "attrs"]]\n'
            '[stacks.s.packages]\nsix = ["1.16.0", "1.17.0"]\nidna = ["3.7", "3.10"]\nattrs = ["24.1.0"]\n')
    assert problems_of(tmp_path, text) == [
        "m.toml:5: stacks.s.zip.0: 'nope' is not an axis of this stack (axes: six, idna, attrs)",
        "m.toml:5: stacks.s.zip.0: 'also' is not an axis of this stack (axes: six, idna, attrs)",
        "m.toml:5: stacks.s.zip.1: axis 'six' is in more than one zip group",
        "m.toml:5: stacks.s.zip.2: axis 'idna' is in more than one zip group",
        "m.toml:5: stacks.s.zip.2: zipped axes must have the same number of values (idna=2, attrs=1)",
    ]


def test_the_limit_holds_for_the_whole_matrix_and_rules_per_stack_are_bounded(tmp_path: Path) -> None:
    from pinmatrix.matrix.expand import MAX_RULES

    two = '[stacks.{0}]\ngpu_required = false\n{1}\n[stacks.{0}.packages]\nsix = ["1.16.0", "1.17.0"]\n'
    text = '[matrix]\npython = "3.13"\nmax_combinations = 3\n' + two.format("a", "") + two.format("b", "")
    assert problems_of(tmp_path, text) == [
        "m.toml:1: stacks: 4 combinations in all (a 2, b 2) are more than the limit of 3; raise it with [matrix] "
        "max_combinations or --max-combinations"]

    def rules(n: int) -> str:
        return "exclude = [" + ", ".join(['{ six = "9.9" }'] * n) + "]"

    at_limit = '[matrix]\npython = "3.13"\n' + two.format("a", rules(MAX_RULES))
    assert len(expand(tmp_path, at_limit).cells) == 2
    over = ('[matrix]\npython = "3.13"\n' + two.format("a", rules(MAX_RULES + 1)) + two.format("b", "")
            + two.format("c", rules(MAX_RULES + 2)))
    assert problems_of(tmp_path, over) == [
        f"m.toml:3: stacks.a: {MAX_RULES + 1} include/exclude entries are more than the {MAX_RULES} a stack may have",
        f"m.toml:13: stacks.c: {MAX_RULES + 2} include/exclude entries are more than the {MAX_RULES} a stack may have",
    ]


def test_an_unknown_patch_is_located_under_axes_or_packages(tmp_path: Path) -> None:
    text = ('[matrix]\npython = "3.13"\n[stacks.s]\ngpu_required = false\n[stacks.s.axes]\n'
            'xformers = [{ version = "0.0.35", patches = ["nope"] }]\n[stacks.s.packages]\n'
            'six = [{ version = "1.17.0", patches = ["nope"] }]\n')
    assert problems_of(tmp_path, text) == [
        "m.toml:6: stacks.s.axes.xformers.0: unknown patch id 'nope' (patches: none declared)",
        "m.toml:8: stacks.s.packages.six.0: unknown patch id 'nope' (patches: none declared)",
    ]


def test_static_checks_report_every_problem_in_place(tmp_path: Path) -> None:
    """Unknown CUDA/arch values anywhere in an axis, every patch of a value (unknown, for another package,
    sourceless before its upstream release), local patch files after remote ones, known issues' patches."""
    text = (Path(__file__).resolve().parents[2] / "data" / "static-problems.toml").read_text()
    assert problems_of(tmp_path, text) == [
        "m.toml:34: stacks.s.axes.cuda.1: unknown CUDA version '99.9' (known: 11.8, 12.0, 12.1, 12.2, 12.4, 12.6, 12.8, "
        "12.9, 13.0, 13.1, 13.2, 13.3)",
        "m.toml:35: stacks.s.axes.arch.1: unknown arch 13.5a (known: 7.5, 8.0, 8.6, 8.9, 9.0, 9.0a, 10.0, 10.0a, 10.3, "
        "10.3a, 12.0, 12.0a, 12.1, 12.1a)",
        "m.toml:37: stacks.s.packages.six.0: unknown patch id 'nope' (patches: remote, missing, merged)",
        "m.toml:37: stacks.s.packages.six.0: patch 'merged' is for idna, not six",
        "m.toml:38: stacks.s.packages.idna.0: patch 'merged' has no source and 3.6 predates 3.7",
        "m.toml:15: patches.missing.source: patch file patches/missing.patch does not exist",
        "m.toml:27: known_issues.0.without_patches: unknown patch id 'ghost'",
    ]


SMOKE_MATRIX = """[matrix]
python = "3.13"
promotion = { required_smokes = ["nope-smoke", "*", 5] }

[[known_issues]]
id = "k"
when = { six = "1.17.0" }
smokes = ["my-smoke", "my-smok"]
note = "n"

[stacks.s]
gpu_required = false
smokes = ["my-smoke"]
promotion = { required_smokes = ["other"] }
[stacks.s.packages]
six = ["1.17.0"]
"""


def test_smoke_names_are_checked_against_the_catalogue_beside_the_matrix(tmp_path: Path, monkeypatch) -> None:
    """A smoke/ folder next to matrix.toml is the catalogue; without one, the project's ./smoke. Stacks, known
    issues and both promotion tables name smokes ('*' is every smoke)."""
    monkeypatch.delenv("PINMATRIX_SMOKE_DIR", raising=False)
    monkeypatch.chdir(Path(__file__).resolve().parents[3])  # the project's ./smoke
    (tmp_path / "smoke").mkdir()
    (tmp_path / "smoke" / "mine.py").write_text('SMOKES = {"my-smoke": {"func": "f"}}\n\n\ndef f(ctx):\n    pass\n')
    assert problems_of(tmp_path, SMOKE_MATRIX) == [
        "m.toml:8: known_issues.0.smokes: unknown smoke 'my-smok' (did you mean 'my-smoke'?)",
        "m.toml:3: matrix.promotion.required_smokes: unknown smoke 'nope-smoke' (did you mean 'my-smoke'?)",
        "m.toml:14: stacks.s.promotion.required_smokes: unknown smoke 'other'",
    ]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    project = (SMOKE_MATRIX.replace('"nope-smoke", ', "").replace(", 5]", "]").replace('"my-smoke", "my-smok"', '"six-assert-not-regex"')
               .replace('["other"]', '["my-smoke"]'))
    assert problems_of(elsewhere, project) == [
        "m.toml:13: stacks.s.smokes: unknown smoke 'my-smoke'",
        "m.toml:14: stacks.s.promotion.required_smokes: unknown smoke 'my-smoke'",
    ]


def test_a_known_issues_boundary_names_its_own_smoke_and_a_parameter_or_axis(tmp_path: Path) -> None:
    """tests/data/boundaries: one issue per rule, a correct one between each (an axis named in another case,
    a package axis, torch); every issue is checked, not only those before the first problem."""
    import shutil

    shutil.copytree(Path(__file__).resolve().parents[2] / "data" / "boundaries", tmp_path, dirs_exist_ok=True)
    text = (tmp_path / "matrix.toml").read_text()
    assert problems_of(tmp_path, text, name="matrix.toml") == [
        "matrix.toml:15: known_issues.1.boundary.smoke: 'q-smoke' is not a smoke of this issue",
        "matrix.toml:22: known_issues.2.boundary.expect_first_fail: parameter 'M' is numeric",
        "matrix.toml:29: known_issues.3.boundary.param: 'K' is neither a parameter of the issue's smokes (M) nor an axis",
        "matrix.toml:50: known_issues.6.boundary.param: 'Q' is neither a parameter of the issue's smokes (none "
        "declared) nor an axis",
        "matrix.toml:57: known_issues.7.boundary.param: 'Z' is neither a parameter of the issue's smokes (K, M) nor "
        "an axis",
    ]


def test_every_stack_is_expanded_and_repeated_combinations_count_once(tmp_path: Path) -> None:
    empty = ('[stacks.{0}]\ngpu_required = false\nexclude = [{{ six = "1.16.0" }}]\n[stacks.{0}.packages]\n'
             'six = ["1.16.0"]\n')
    bad = '[stacks.{0}]\ngpu_required = false\nexclude = [{{ nope = "1" }}]\n[stacks.{0}.packages]\nsix = ["1.16.0"]\n'
    head = '[matrix]\npython = "3.13"\n'
    assert problems_of(tmp_path, head + empty.format("a") + empty.format("b")) == [
        "m.toml:3: stacks.a: the stack has no cells (every combination is excluded)",
        "m.toml:8: stacks.b: the stack has no cells (every combination is excluded)"]
    assert problems_of(tmp_path, head + bad.format("a") + bad.format("b")) == [
        "m.toml:5: stacks.a.exclude.0.nope: not an axis of this stack (axes: six)",
        "m.toml:10: stacks.b.exclude.0.nope: not an axis of this stack (axes: six)"]
    pruned_only = '[stacks.{0}]\ngpu_required = false\n[stacks.{0}.axes]\ntorch = ["2.7.0"]\ntriton = ["3.2.0"]\n'
    assert problems_of(tmp_path, head + pruned_only.format("a") + pruned_only.format("b")) == [
        f"m.toml:{line}: stacks.{s}: every cell is pruned, e.g. {s}: torch 2.7.0 pins triton==3.3.0, not 3.2.0 "
        "(PyTorch RELEASE.md, release compatibility matrix)" for s, line in (("a", 3), ("b", 8))]

    text = head + ('[stacks.c]\ngpu_required = false\ninclude = [{ six = "1.17.0" }, { torch = "2.7.0", triton = "3.2.0" }]\n'
                   '[stacks.c.axes]\ntorch = ["2.7.0"]\ntriton = ["3.2.0", "3.3.0"]\n[stacks.c.packages]\nsix = ["1.17.0"]\n')
    result = expand(tmp_path, text)  # each include repeats a combination the product already has
    assert [c.name for c in result.cells] == ["c[triton=3.3.0]"] and [p.name for p in result.pruned] == ["c[triton=3.2.0]"]
    assert problems_of(tmp_path, text, max_combinations=4) == [
        "m.toml:3: stacks.c: 5 combinations (torch 1 x triton 2 x six 1 + 3 from include) are more than the limit of "
        "4; raise it with [matrix] max_combinations or --max-combinations"]
