"""The package's shape holds: no import cycles (function-level imports included), no import up a floor, tests
and benchmarks never reach into a command module, each shared piece is defined in one module only, the shipped
folder is standard library only, no function is over 80 lines, nothing is defined that nothing reads, and the
tests mirror the package."""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
PACKAGE = SRC / "pinmatrix"


SHIPPED = PACKAGE / "shipped"


def _modules() -> dict[str, Path]:
    """The package's modules; the in-cell runtime is package data, not part of the import graph."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        if SHIPPED in path.parents:
            continue
        name = ".".join(path.relative_to(SRC).with_suffix("").parts)
        found[name.removesuffix(".__init__")] = path
    return found


def _target(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, set[str]]:
    """module -> the pinmatrix modules it imports anywhere in its body (function-level imports too)."""
    modules = _modules()
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str | None] = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("pinmatrix"):
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.append(full if full in modules else _target(str(node.module), modules))
            elif isinstance(node, ast.Import):
                targets += [_target(a.name, modules) for a in node.names if a.name.startswith("pinmatrix")]
            graph[module] |= {t for t in targets if t and t != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "pinmatrix.matrix.expand" in graph and graph["pinmatrix.matrix.expand"]
    assert cycles(graph) == []


# The package's floors, lowest first: a module may import its own folder and any folder of a floor below,
# never one above. Shared pieces at the bottom; then the project's input files (one model each); then the
# pipeline steps in the order data flows through them; the commands and the CLI on top.
FLOORS: tuple[frozenset[str], ...] = (
    frozenset({"pinmatrix", "errors", "hashing", "atomic", "paths", "sanitize", "names", "archflag",
               "envdefaults", "datamodel", "cell", "imageref", "statuses", "sizes", "hostprobe", "interrupt",
               "transfer"}),
    frozenset({"project"}),
    frozenset({"oci"}),
    frozenset({"index"}),
    frozenset({"matrix"}),
    frozenset({"results"}),
    frozenset({"engine"}),
    frozenset({"registry"}),
    frozenset({"lock"}),
    frozenset({"upgrade"}),
    frozenset({"image"}),
    frozenset({"archscan"}),
    frozenset({"smoke"}),
    frozenset({"report"}),
    frozenset({"release"}),
    frozenset({"bisect"}),
    frozenset({"bundle"}),
    frozenset({"doctor"}),
    frozenset({"ci"}),
    frozenset({"cli"}),
    frozenset({"commands"}),
    frozenset({"__main__"}),
)


def folder_of(module: str) -> str:
    """``pinmatrix.oci.layout`` -> ``oci``; a top-level module is its own folder."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def floor_of(folder: str) -> int:
    for level, folders in enumerate(FLOORS):
        if folder in folders:
            return level
    raise AssertionError(f"{folder}: not on any floor of tests/guarantees/architecture/test_floors_and_sizes.py FLOORS; add it")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every import of a module on a higher floor, as "importer -> imported"."""
    return sorted(f"{m} -> {t}" for m, targets in graph.items() for t in targets
                  if folder_of(m) != folder_of(t) and floor_of(folder_of(t)) > floor_of(folder_of(m)))


def test_the_floor_check_finds_an_import_up_a_floor() -> None:
    assert upward_imports({"pinmatrix.matrix.expand": {"pinmatrix.smoke.runner"}}) == [
        "pinmatrix.matrix.expand -> pinmatrix.smoke.runner"]
    assert upward_imports({"pinmatrix.smoke.runner": {"pinmatrix.matrix.expand", "pinmatrix.smoke.guard"}}) == []


def test_no_import_runs_up_a_floor() -> None:
    """An AST walk over the package (function-level imports too): each folder only imports its own floor's
    pieces and the floors below."""
    graph = import_graph()
    assert {folder_of(m) for m in graph} <= set().union(*FLOORS)
    assert upward_imports(graph) == []


def test_engine_interface_imports_no_backend() -> None:
    graph = import_graph()
    assert not graph["pinmatrix.engine.base"] & {"pinmatrix.engine.docker", "pinmatrix.engine.podman"}


def test_tests_and_benchmarks_never_import_a_command_module() -> None:
    offenders = []
    for folder in ("tests", "benchmarks", "tools"):
        for path in (ROOT / folder).rglob("*.py"):
            if re.search(r"^\s*(from|import) pinmatrix\.commands\b", path.read_text(encoding="utf-8"), re.M):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


# Each shared piece and the one module that defines it. Checked by name over every module's top-level
# definitions (and class bodies): a second definition anywhere fails.
ONE_HOME = {
    "ImageRef": "pinmatrix.imageref", "Registry": "pinmatrix.registry.client",
    "is_loopback": "pinmatrix.imageref", "is_digest": "pinmatrix.imageref",
    "ArchFlag": "pinmatrix.archflag", "split_flags": "pinmatrix.archflag", "parse_flags": "pinmatrix.archflag",
    "parse_capability": "pinmatrix.archflag",
    "sha256_bytes": "pinmatrix.hashing", "sha256_file": "pinmatrix.hashing", "sha256_digest": "pinmatrix.hashing",
    "atomic_path": "pinmatrix.atomic", "atomic_write_text": "pinmatrix.atomic",
    "require_stack": "pinmatrix.project.matrix_toml", "load": "pinmatrix.matrix.selection",
    "Strict": "pinmatrix.datamodel", "friendly_message": "pinmatrix.datamodel", "key_path": "pinmatrix.datamodel",
    "cell_env": "pinmatrix.image.cellconfig", "file_slug": "pinmatrix.sanitize", "locked": "pinmatrix.atomic", "cell_smoke_env": "pinmatrix.smoke.runner",
}


def test_each_shared_piece_is_defined_once() -> None:
    homes: dict[str, list[str]] = {}
    classes: dict[str, list[str]] = {}
    for module, path in _modules().items():
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                homes.setdefault(node.name, []).append(module)
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append(module)
    for name, home in ONE_HOME.items():
        assert homes.get(name) == [home], (name, homes.get(name))
    assert {n: m for n, m in classes.items() if len(m) > 1} == {}, "one class name, one meaning"


def test_one_cell_environment_everywhere(monkeypatch) -> None:  # noqa: ANN001
    """The image and a smoke on a host (and a k8s Job, through the same ``cell_smoke_env``) give a cell the same variables, with the env-flag variant
    winning over the arch lists, and the cell winning over the host's environment."""
    import dataclasses

    from pinmatrix.image.cellconfig import cell_env
    from pinmatrix.matrix.selection import load
    from pinmatrix.smoke.runner import smoke_env

    _, expansion = load(ROOT / "matrix.toml")
    cell = next(c for c in expansion.cells if c.torch_cuda_arch_list)
    cell = dataclasses.replace(cell, env={**cell.env, "TORCH_CUDA_ARCH_LIST": "8.0"})
    monkeypatch.setenv("FLASHINFER_CUDA_ARCH_LIST", "host-value")
    on_host = smoke_env(cell, Path("/tmp/r.json"), None)
    in_image = cell_env(cell)
    assert on_host["TORCH_CUDA_ARCH_LIST"] == in_image["TORCH_CUDA_ARCH_LIST"] == "8.0"
    if cell.flashinfer_cuda_arch_list:
        assert on_host["FLASHINFER_CUDA_ARCH_LIST"] == in_image["FLASHINFER_CUDA_ARCH_LIST"] != "host-value"
    for key, value in cell.variables().items():
        assert on_host[key] == in_image[key] == value


def test_in_cell_runtime_is_one_standard_library_folder() -> None:
    """Everything that runs in a cell's Python without pinmatrix is in src/pinmatrix/shipped, imports only the
    standard library and its neighbours at module level (numpy/torch only inside functions), and is shipped as
    package data."""
    names = sorted(p.name for p in SHIPPED.glob("*.py"))
    assert names == ["_oracles.py", "_smokelib.py", "apply_patches.py", "flashinfer_aot.py", "pod_runner.py", "unbundle.py"]
    for path in SHIPPED.glob("*.py"):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            imported: list[str] = []
            if isinstance(node, ast.Import):
                imported = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                imported = [node.module.split(".")[0]]
            for name in imported:
                assert name in sys.stdlib_module_names or name in {"_smokelib", "_oracles"}, (path.name, name)
    for module, path in _modules().items():
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"^\s*(from|import) (_smokelib|_oracles|pinmatrix\.shipped)\b", text, re.M), module
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert '"shipped/*.py"' in pyproject
    assert not (ROOT / "smoke" / "_smokelib.py").exists() and not (ROOT / "images" / "apply_patches.py").exists()


def test_a_catalogue_cannot_shadow_the_runtime(tmp_path: Path) -> None:
    import pytest

    from pinmatrix.project.catalogue import SmokeError
    from pinmatrix.project.smoke_bundle import smoke_bundle

    (tmp_path / "mine.py").write_text("SMOKES = {}\n")
    assert [name for name, _ in smoke_bundle(tmp_path)] == ["_oracles.py", "_smokelib.py", "mine.py"]
    (tmp_path / "_smokelib.py").write_text("# an old copy\n")
    with pytest.raises(SmokeError, match="_smokelib.py ships with pinmatrix"):
        smoke_bundle(tmp_path)


MAX_FUNCTION_LINES = 80
MAX_COMMAND_LINES = 40  # a command's handler parses, calls its step's library function, prints


def _functions(path: Path) -> list[tuple[str, int]]:
    """(qualified name, lines) of every function and method of a module."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, (child.end_lineno or child.lineno) - child.lineno + 1))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(ast.parse(path.read_text(encoding="utf-8")), "")
    return found


def test_no_function_is_over_80_lines() -> None:
    long = [f"{module}.{name}: {n} lines" for module, path in _modules().items()
            for name, n in _functions(path) if n > MAX_FUNCTION_LINES]
    assert long == []


def test_each_command_handler_is_thin() -> None:
    """``run`` and ``run_<sub>`` of commands/: at most 40 lines."""
    long = [f"{module}.{name}: {n} lines" for module, path in _modules().items() if ".commands." in module
            for name, n in _functions(path) if (name == "run" or name.startswith("run_")) and n > MAX_COMMAND_LINES]
    assert long == []


def _top_level_names(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, ast.Assign):
            names += [t.id for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.append(node.target.id)
    return [n for n in names if not (n.startswith("__") and n.endswith("__"))]


def names_used(paths: list[Path]) -> set[str]:
    """Every name a module reads: names and attributes loaded (an assignment, a deletion or a definition is
    no use), and the original name of what it imports under an alias. A template (``*.j2``) uses every word in
    it: Jinja reads attributes by name."""
    used: set[str] = set()
    for path in paths:
        text = path.read_text(encoding="utf-8")
        if path.suffix != ".py":
            used |= set(re.findall(r"[A-Za-z_]\w*", text))
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                used.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                used.add(node.attr)
            elif isinstance(node, ast.alias) and node.asname:
                used.add(node.name.rpartition(".")[2])
    return used


# Classes whose public methods someone else calls: the base class (as written) and who calls them.
CALLED_BY_FRAMEWORK = {
    "Protocol": "an interface: its members are what the implementations provide",
    "InstallerWheel": "pypa installer's wheel source: installer.install reads it",
    "WheelDestination": "pypa installer's destination: installer.install writes through it",
    "io.RawIOBase": "the io module's raw stream: io.BufferedReader calls readinto, readable, seekable",
    "argparse.Action": "argparse calls it while it reads the command line",
    "ast.NodeVisitor": "ast.NodeVisitor.visit dispatches to visit_<node>",
}
# Decorators whose methods a framework calls: pydantic runs validators and serializers itself.
CALLED_BY_DECORATOR = ("validator", "serializer")


def public_methods(path: Path) -> list[str]:
    """``Class.method`` of each public method of the module's classes that pinmatrix itself must call: dunders,
    framework hooks (CALLED_BY_FRAMEWORK, CALLED_BY_DECORATOR) and private methods aside."""
    found: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ClassDef) or {ast.unparse(b) for b in node.bases} & set(CALLED_BY_FRAMEWORK):
            continue
        for item in node.body:
            if (isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and not item.name.startswith("_")
                    and not any(word in ast.unparse(d) for d in item.decorator_list for word in CALLED_BY_DECORATOR)):
                found.append(f"{node.name}.{item.name}")
    return found


def unused_definitions(modules: dict[str, Path], users: list[Path]) -> list[str]:
    """Top-level functions, classes and constants, and public methods, that no user reads."""
    used = names_used(users)
    unused = [f"{module}.{name}" for module, path in modules.items() for name in _top_level_names(path)
              if name not in used]
    unused += [f"{module}.{method}" for module, path in modules.items() for method in public_methods(path)
               if method.rpartition(".")[2] not in used]
    return unused


def test_the_unused_check_sees_an_alias_and_misses_nothing(tmp_path: Path) -> None:
    user = tmp_path / "user.py"
    user.write_text("from m import build as b\nimport os\nb()\nos.path.join\n")
    assert {"build", "b", "os", "path", "join"} <= names_used([user])
    assert "unused_helper" not in names_used([user])


def test_the_unused_check_counts_only_reads(tmp_path: Path) -> None:
    """An assigned-but-never-read constant, a public method nobody calls and a name only stored or deleted
    are caught; a dunder, a Protocol member, a pydantic validator, a framework hook and a name a template reads
    are not."""
    module = tmp_path / "mod.py"
    module.write_text(
        "DEAD = 1\nLIVE = 2\nDEAD_TOO = 3\n"
        "class Store:\n    def __init__(self): self.x = LIVE\n    def called(self): pass\n"
        "    def never(self): pass\n    @field_validator('x')\n    def check_x(cls, v): return v\n"
        "    def shown(self): pass\n"
        "class Runtime(Protocol):\n    def start(self): ...\n"
        "class Reader(io.RawIOBase):\n    def readinto(self, b): return 0\n")
    user = tmp_path / "user.py"
    user.write_text("from mod import Store, Runtime, Reader\nDEAD = 5\nDEAD_TOO += 1\ndel DEAD_TOO\n"
                    "Store().called()\nRuntime, Reader\n")
    template = tmp_path / "page.html.j2"
    template.write_text("{{ store.shown() }}")
    assert unused_definitions({"mod": module}, [module, user]) == ["mod.DEAD", "mod.DEAD_TOO", "mod.Store.never",
                                                                   "mod.Store.shown"]
    assert unused_definitions({"mod": module}, [module, user, template]) == ["mod.DEAD", "mod.DEAD_TOO",
                                                                             "mod.Store.never"]


def test_no_definition_is_unused_outside_the_tests() -> None:
    """Each top-level function, class and constant of the package, and each public method, is read by the
    package itself (its templates included), the benchmarks, tools/ or noxfile.py; a piece only the tests use
    lives in tests/."""
    users = [*SRC.rglob("*.py"), *PACKAGE.rglob("*.j2"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "tools").rglob("*.py"), ROOT / "noxfile.py"]
    assert unused_definitions(_modules(), users) == []


TEST_FOLDERS = {"unit", "integration", "guarantees", "catalogue", "support", "data"}


def misplaced_tests(tests: Path, package: Path) -> list[str]:
    """Test files that do not say where their code is: tests/unit/<package path>/test_<module>[_<aspect>].py for
    a module that exists; everything else in one of the named folders."""
    wrong = [p.name for p in tests.iterdir() if p.name not in {*TEST_FOLDERS, "conftest.py", "__pycache__"}]
    for path in sorted((tests / "unit").rglob("test_*.py")):
        folder = package.joinpath(*path.relative_to(tests / "unit").parts[:-1])
        modules = [m.stem.lstrip("_") for m in folder.glob("*.py")] if folder.is_dir() else []
        name = path.stem.removeprefix("test_")
        if not any(name == m or name.startswith(m + "_") for m in modules if m):
            wrong.append(str(path.relative_to(tests)))
    return wrong


def test_the_layout_check_finds_a_misplaced_test(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "image").mkdir(parents=True)
    (tmp_path / "pkg" / "image" / "oci.py").write_text("")
    (tmp_path / "tests" / "unit" / "image").mkdir(parents=True)
    for name in ("test_oci.py", "test_oci_layout.py", "test_layer.py"):
        (tmp_path / "tests" / "unit" / "image" / name).write_text("")
    (tmp_path / "tests" / "test_stray.py").write_text("")
    assert misplaced_tests(tmp_path / "tests", tmp_path / "pkg") == ["test_stray.py", "unit/image/test_layer.py"]


def test_tests_mirror_the_package() -> None:
    """Unit tests sit at tests/unit/<package>/test_<module>.py; tests that need a service in tests/integration,
    the suites that defend a quality (architecture, golden, hostile, honesty, mutation, pins, properties, trust, ci)
    in tests/guarantees/<quality>, the smoke catalogue's own tests in tests/catalogue, shared pieces in
    tests/support."""
    assert misplaced_tests(ROOT / "tests", PACKAGE) == []


IMAGE_FORMAT_MODULES = ("pinmatrix.image.cellconfig", "pinmatrix.image.load_push", "pinmatrix.image.blobsahead")
IMAGE_MAKERS = ("pinmatrix.image.assembly", "pinmatrix.image.containerfile", "pinmatrix.image.build",
                "pinmatrix.image.settings")


def test_what_an_image_is_knows_nothing_of_how_it_is_made() -> None:
    """What every image path shares (a cell's config and labels, loading and pushing a layout's image, blobs
    pushed ahead) imports neither the data path that assembles an image (image/assembly) nor the Containerfile
    path (image/containerfile) nor the build that chooses between them. (oci/, the image format itself, sits
    floors below image/.)"""
    graph = import_graph()
    assert set(IMAGE_FORMAT_MODULES) <= set(graph)
    reaching = sorted(f"{m} -> {t}" for m in IMAGE_FORMAT_MODULES for t in graph[m] if t.startswith(IMAGE_MAKERS))
    assert reaching == []


def shared_basenames(tests: Path) -> list[str]:
    """Test modules that share a file name: pytest imports test files by basename (rootdir-relative, no packages),
    so the second of a name is refused at collection and the whole run stops."""
    seen: dict[str, list[str]] = {}
    for path in sorted(tests.rglob("test_*.py")):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    return sorted(f"{name}: {', '.join(where)}" for name, where in seen.items() if len(where) > 1)


def test_the_basename_check_finds_a_second_module_of_a_name(tmp_path: Path) -> None:
    for folder in ("unit/report", "unit/bundle"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "test_model.py").write_text("")
    (tmp_path / "unit" / "bundle" / "test_pack.py").write_text("")
    assert shared_basenames(tmp_path) == ["test_model.py: unit/bundle/test_model.py, unit/report/test_model.py"]


def test_no_two_test_modules_share_a_name() -> None:
    assert shared_basenames(ROOT / "tests") == []
