"""The ``pinmatrix`` command line: the pipeline below, one thin command module per step
(``pinmatrix.commands.<name>`` with ``register(subparsers)``). Errors of the package's own type are caught here,
once, and printed as one line."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from types import ModuleType

from pinmatrix import __version__
from pinmatrix.commands import (
    arch_scan,
    bisect,
    build,
    bundle,
    cells,
    ci,
    engine_env,
    keygen,
    lock,
    promote,
    pull,
    registry,
    report,
    results,
    smoke,
    validate,
    verify,
)
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.sanitize import terminal_text  # errors may quote smoke output or imported rows

# The pipeline, in order: each step with the commands that run it. --help shows it as is.
PIPELINE: tuple[tuple[str, tuple[ModuleType, ...]], ...] = (
    ("matrix: read, check and expand matrix.toml", (validate, cells)),
    ("lock: pin every cell with hashes", (lock,)),
    ("image: assemble one OCI image per cell", (build,)),
    ("bundle: carry a cell's wheels or image, in parts, to a host without network", (bundle,)),
    ("smoke: run kernels on GPU hosts, read binaries, find boundaries", (smoke, arch_scan, bisect)),
    ("results: the store and the report", (results, report)),
    ("release: promote by digest, verify, pull", (promote, verify, pull, keygen)),
    ("ci: jobs per cell, the local registry, the engine's environment", (ci, registry, engine_env)),
)
COMMAND_MODULES: tuple[str, ...] = tuple(m.__name__.rsplit(".", 1)[1].replace("_", "-")
                                         for _, modules in PIPELINE for m in modules)


def _pipeline_text() -> str:
    return "pipeline:\n" + "\n".join(
        f"  {step}\n      " + ", ".join(m.__name__.rsplit(".", 1)[1].replace("_", "-") for m in modules)
        for step, modules in PIPELINE) + (
        "\n\nevery option can come from the environment: PINMATRIX_<COMMAND>_<OPTION>, e.g.\n"
        "  PINMATRIX_PULL_STACK=demo pinmatrix pull   (= pinmatrix pull --stack demo; the command line wins)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pinmatrix",
        description=(
            "Keep GPU software stacks reproducible: expand matrix.toml into cells, lock each cell with uv, "
            "build one OCI image per cell, run smoke kernels on GPU hosts, report, and promote what passes."
        ),
        epilog=_pipeline_text(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"pinmatrix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for _, modules in PIPELINE:
        for module in modules:
            module.register(sub)
    from pinmatrix.envdefaults import apply_environment

    try:
        apply_environment(parser, os.environ)  # PINMATRIX_<COMMAND>_<OPTION>: the command line still wins
    except ValueError as err:
        parser.error(str(err))
    return parser


def _quiet_broken_pipe() -> int:
    """stdout's reader went away (``pinmatrix cells --json | head -1``): stop quietly, as a shell tool killed by
    SIGPIPE would. Point stdout at /dev/null so the interpreter's final flush cannot complain either."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a real file (captured in tests)
        pass
    return 128 + signal.SIGPIPE


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from pinmatrix.matrix.expand import MAX_COMBINATIONS_OVERRIDE

    # --max-combinations holds for this command only (main() may run many commands in one process)
    token = MAX_COMBINATIONS_OVERRIDE.set(
        max(1, args.max_combinations) if getattr(args, "max_combinations", None) is not None else None)
    try:
        return _run(args)
    finally:
        MAX_COMBINATIONS_OVERRIDE.reset(token)


def _run(args: argparse.Namespace) -> int:
    from pinmatrix.registry.local import for_command

    try:
        with for_command(args):  # the embedded registry, for commands that talk to a loopback one
            code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows up here at the latest, not at interpreter exit
        return code
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except MatrixError as err:
        for line in err.lines():
            print(terminal_text(line), file=sys.stderr)
        return err.exit_code
    except PinmatrixError as err:
        print(terminal_text(f"pinmatrix: error: {err}"), file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("pinmatrix: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
