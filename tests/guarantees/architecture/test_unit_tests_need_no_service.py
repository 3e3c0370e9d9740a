"""tests/unit needs no service: no unit test is marked as needing docker, podman, a registry, the network or
Slurm (pyproject's markers), takes a fixture that starts one (tests/conftest.py, tests/support/promotion.py) or
installs the CUDA tool wheels from the package index, or takes a fixture of its own file that does. Such tests
live in tests/integration."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
# The markers that name a service (pyproject's [tool.pytest.ini_options] markers); "slow" names none.
SERVICE_MARKS = frozenset(line.split(":", 1)[0] for line in tomllib.loads(
    (ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]["markers"]) - {"slow"}
# The shared fixtures that start a service, and the calls that start one in a fixture of a test's own file.
SERVICE_FIXTURES = frozenset({"dockerd", "podman_env", "docker_registry", "registry", "any_engine", "build_cache",
                              "oci_registry"})
SERVICE_STARTERS = frozenset({"start_dockerd", "podman_config", "start_registry", "start_docker_registry",
                              "engine_for", "getfixturevalue"})
# Calls that install the CUDA tool wheels from the package index (archscan/tools.py), as they are written.
INDEX_CALLS = frozenset({"tools.cuobjdump", "tools.install_wheels", "install_wheels", "nvcc_toolchain"})


def _calls(node: ast.AST) -> set[str]:
    """The service starters and index calls ``node`` makes."""
    called = {ast.unparse(c.func) for c in ast.walk(node) if isinstance(c, ast.Call)}
    return ({name.rpartition(".")[2] for name in called} & SERVICE_STARTERS) | (called & INDEX_CALLS)


def _marks(node: ast.AST) -> set[str]:
    text = ast.unparse(node)
    return {m for m in SERVICE_MARKS if f"pytest.mark.{m}" in text}


def service_tests(path: Path) -> list[str]:
    """``test_name: why`` for each test of ``path`` that needs a service."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module_marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets):
            module_marks |= _marks(node.value)
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    fixtures = {f.name: f for f in functions if any("fixture" in ast.unparse(d) for d in f.decorator_list)}
    starting = set(SERVICE_FIXTURES)
    grew = True
    while grew:  # a fixture of the file that takes a starting fixture, or starts a service itself
        grew = False
        for name, fixture in fixtures.items():
            if name not in starting and ({a.arg for a in fixture.args.args} & starting or _calls(fixture)):
                starting.add(name)
                grew = True
    found = []
    for function in functions:
        if not function.name.startswith("test"):
            continue
        why = sorted(module_marks | set().union(*(_marks(d) for d in function.decorator_list)))
        why += sorted({a.arg for a in function.args.args} & starting) + sorted(_calls(function))
        if why:
            found.append(f"{function.name}: {', '.join(why)}")
    return found


def test_the_check_finds_a_service_test(tmp_path: Path) -> None:
    path = tmp_path / "test_mixed.py"
    path.write_text(
        "import pytest\n"
        "@pytest.fixture\ndef pushed(docker_registry): return docker_registry.address\n"
        "@pytest.fixture\ndef engine(request): return engine_for('podman', request)\n"
        "@pytest.fixture\ndef folder(tmp_path): return tmp_path\n"
        "@pytest.fixture\ndef nvcc(): return nvcc_toolchain(cache_dir())\n"
        "def test_pure(folder): pass\n"
        "@pytest.mark.network\ndef test_index(): pass\n"
        "@pytest.mark.slow\ndef test_slow(): pass\n"
        "def test_pushes(pushed): pass\n"
        "def test_runs(engine): pass\n"
        "def test_dockerd(dockerd): pass\n"
        "def test_compiles(nvcc): pass\n"
        "def test_dumps(): tools.cuobjdump(root)\n"
        "def test_fake_dump(): binary.cuobjdump(path)\n")
    assert service_tests(path) == ["test_index: network", "test_pushes: pushed", "test_runs: engine",
                                   "test_dockerd: dockerd", "test_compiles: nvcc", "test_dumps: tools.cuobjdump"]
    path.write_text("import pytest\npytestmark = [pytest.mark.podman]\ndef test_any(): pass\n")
    assert service_tests(path) == ["test_any: podman"]


def test_no_unit_test_needs_a_service() -> None:
    assert {"docker", "podman", "registry", "network"} <= SERVICE_MARKS
    found = {str(path.relative_to(ROOT / "tests" / "unit")): tests
             for path in sorted((ROOT / "tests" / "unit").rglob("test_*.py")) if (tests := service_tests(path))}
    assert found == {}
