"""nox sessions for pinmatrix. `nox -l --json` lists them for CI job generation.

Sessions are plain decorated functions; arguments after `--` go to the pinmatrix command they wrap,
e.g. `nox -s cells -- --stack demo --json`.
"""

from __future__ import annotations

import sys

import nox

nox.options.default_venv_backend = "uv|virtualenv"
# Plain `nox` runs the front door, build-matrix, the only session without `default=False`.
nox.options.reuse_existing_virtualenvs = True

PYTHON = None  # the interpreter nox runs under (>= 3.11)


DEV_LOCK = "requirements/dev.lock"  # pinmatrix's own dependencies, test and lint extras included, with sha256 hashes
WORKFLOWS = ["docs/workflows/pinmatrix.yml"]  # checked by actionlint and zizmor in `lint`
WORKFLOW_LINT_CONFIG = "docs/workflows/actionlint.yaml"  # the self-hosted runner labels it uses


def _install(session: nox.Session) -> None:
    """pinmatrix's dependencies exactly as requirements/dev.lock pins them (hashes checked), then pinmatrix
    itself without resolving anything again, built by the lock's setuptools (no build isolation: nothing is
    fetched, so a session whose environment exists runs offline). Regenerate the lock with `./dev lock-deps`."""
    session.install("--require-hashes", "-r", DEV_LOCK)
    session.install("--no-deps", "--no-build-isolation", "-e", ".")


@nox.session(python=PYTHON, default=False)
def cells(session: nox.Session) -> None:
    """Expand matrix.toml into cells (pass `-- --json`, `--stack S`, `-k EXPR`, `--pruned`)."""
    _install(session)
    session.run("pinmatrix", "validate")
    session.run("pinmatrix", "cells", *session.posargs)


@nox.session(python=PYTHON, default=False)
def lock(session: nox.Session) -> None:
    """Lock every cell (or `-- --stack S`) with uv into locks/<cell-id>.txt with hashes."""
    _install(session)
    session.run("pinmatrix", "lock", *session.posargs)


@nox.session(python=PYTHON, name="build-matrix")
def build_matrix(session: nox.Session) -> None:
    """Build one image per cell: `-- --stack S -k EXPR --engine docker|podman --jobs N [--push]`.

    Progress shows cells done / cached / failed and each running cell's layer; per-cell logs go to
    .pinmatrix/logs/build/<cell-id>.log; a summary table closes the run. Cells already built (same tag and
    inputs, locally or in the registry) are skipped, so rerunning after an interruption resumes."""
    _install(session)
    session.run("pinmatrix", "build", *session.posargs)


@nox.session(python=PYTHON, default=False)
def smoke(session: nox.Session) -> None:
    """Run the smoke kernels on this host and record them: `-- --stack S --cell ID -k EXPR --runtime host|docker|podman`.

    Host runtime by default (the current environment; `--wheels DIR` adds a per-cell overlay of extra wheels
    and installed-tree patches). Without --stack/--cell it smokes this environment as the cell 'host'. Results go
    to .pinmatrix/results.sqlite (`pinmatrix results`); logs to .pinmatrix/logs/<run>/<cell>/<smoke>.log."""
    _install(session)
    session.run("pinmatrix", "smoke", *session.posargs)


@nox.session(python=PYTHON, default=False)
def bisect(session: nox.Session) -> None:
    """Find where a smoke's verdict changes: `-- param SMOKE --param M [--cell ID --wheels DIR]` (the smallest failing
    value of a declared parameter) or `-- version SMOKE --stack S --axis A --range SPEC [--runtime venv|podman|docker]`
    (the first release/variant where it changes). Every probe is recorded in the results store; a rerun resumes.
    Without arguments: the CPU demo, `param cpu-threshold --param n --timeout 5`."""
    _install(session)
    session.run("pinmatrix", "bisect", *(session.posargs or ["param", "cpu-threshold", "--param", "n", "--timeout", "5"]),
                success_codes=[0, 1])


@nox.session(python=PYTHON, default=False)
def canary(session: nox.Session) -> None:
    """Build and smoke the proposed upgrade candidates here and report what each changes against its stack's
    known-good cell: `-- --stack S [--limit N] [--set AXIS=V ...] [--bisect] [--json]`; a GPU host's imported run:
    `-- --compare-only --candidate ID --lock-dir DIR`. It fails when a smoke newly fails or a build failed."""
    _install(session)
    session.run("pinmatrix", "canary", *session.posargs)


@nox.session(python=PYTHON, default=False)
def report(session: nox.Session) -> None:
    """Write index.html, summary.md, junit.xml and report.json from the results store (`-- --stack S`).

    Output goes to .pinmatrix/report; pass `--pivot driver,torch`, `--from-json FILE`, `--screenshot PNG`."""
    _install(session)
    session.run("pinmatrix", "report", *session.posargs)


@nox.session(python=PYTHON, default=False)
def promote(session: nox.Session) -> None:
    """Promote by digest the cells whose results meet their stack's policy (`-- --stack S [--dry-run]`).

    Or `-- --cell ID`. Refusals name every unmet requirement; known-good.toml records each promotion."""
    _install(session)
    session.run("pinmatrix", "promote", *session.posargs)


@nox.session(python=PYTHON, default=False)
def tests(session: nox.Session) -> None:
    """Run the test suite (pass pytest arguments after `--`)."""
    _install(session)
    session.run("pytest", *(session.posargs or ["-q"]))


@nox.session(python=PYTHON, default=False)
def lint(session: nox.Session) -> None:
    """ruff over the code and tests; mypy over the package, the core with --strict's flags (declared in
    pyproject.toml's [[tool.mypy.overrides]]); the example workflow (docs/workflows/pinmatrix.yml) through
    actionlint (shellcheck over its `run:` scripts when shellcheck is installed) and zizmor, offline. The linters
    are in requirements/dev.lock (the lint extra)."""
    _install(session)
    session.run("ruff", "check", "src", "tests", "benchmarks", "smoke", "noxfile.py")
    session.run("mypy", "src/pinmatrix")
    session.run("actionlint", "-config-file", WORKFLOW_LINT_CONFIG, *WORKFLOWS)
    session.run("zizmor", "--offline", "--no-progress", *WORKFLOWS)


@nox.session(python=PYTHON, default=False)
def benchmarks(session: nox.Session) -> None:
    """Run the benchmarks under benchmarks/ and print their figures."""
    _install(session)
    session.run("python", "-m", "benchmarks", *session.posargs)


@nox.session(python=PYTHON, default=False)
def mutation(session: nox.Session) -> None:
    """Mutation testing of the core with mutmut: matrix/expansion, compat, lock, classification, known issues,
    promotion, pull and results, and the trust modules (signing, registry auth, boundaries, the builder's lock
    check, wheels, wheel installation, the OCI layout, arch flags and verdicts) ([tool.mutmut] in pyproject.toml
    names the modules and the tests).

    Slow (about 23,700 mutants in 57 files; each runs only the tests that cover its function): one at a time by default,
    `-- --max-children N` for more. Ends with the score per module and every surviving mutant
    (tools/mutation_score.py; equivalent mutants are named in tools/equivalent_mutants.txt); `mutmut show NAME`
    shows one. Fails below 90% killed."""
    _install(session)
    session.install("mutmut>=3.8.1,<3.9")
    session.run("mutmut", "run", *(session.posargs or ["--max-children", "1"]))
    session.run("python", "tools/mutation_score.py", "--min", "90")


# `nox -l --json` lists the selected sessions only; CI job generation wants every one of them.
if "--json" in sys.argv:
    nox.options.sessions = list(nox.registry.get())
