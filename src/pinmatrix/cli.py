"""The ``pinmatrix`` command line. Each subcommand lives in ``pinmatrix.commands.<name>`` and exposes
``register(subparsers)``; errors of the package's own type are caught here, once, and printed as one line."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from pinmatrix import __version__
from pinmatrix.errors import MatrixError, PinmatrixError
from pinmatrix.sanitize import terminal_text  # errors may quote smoke output or imported rows

# Order is the order shown in --help.
COMMAND_MODULES: tuple[str, ...] = (
    "validate",
    "cells",
    "lock",
    "build",
    "smoke",
    "arch-scan",
    "bisect",
    "results",
    "report",
    "promote",
    "pull",
    "verify",
    "keygen",
    "ci",
    "registry",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pinmatrix",
        description=(
            "Keep GPU software stacks reproducible: expand matrix.toml into cells, lock each cell with uv, "
            "build one OCI image per cell, run smoke kernels on GPU hosts, report, and promote what passes."
        ),
    )
    parser.add_argument("--version", action="version", version=f"pinmatrix {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"pinmatrix.commands.{name.replace('-', '_')}")
        module.register(sub)
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
    if getattr(args, "max_combinations", None) is not None:
        from pinmatrix.expand import MAX_COMBINATIONS_OVERRIDE

        MAX_COMBINATIONS_OVERRIDE.set(max(1, args.max_combinations))
    from pinmatrix.localregistry import for_command

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
