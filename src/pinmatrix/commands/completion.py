"""``pinmatrix completion SHELL``: a completion script for bash, zsh or tcsh, made from the command line's own
parser by shtab (every command, option and choice; files where an option takes a path)."""

from __future__ import annotations

import argparse

import shtab

from pinmatrix.cli import build_parser
from pinmatrix.commands._common import examples

SHELLS = ("bash", "zsh", "tcsh")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "completion", help="print a shell completion script (bash, zsh, tcsh) for every command and option",
        description="Print a completion script for SHELL, made from pinmatrix's own parser (shtab): commands, "
                    "options, their choices, and file names where an option takes a path. Load it in the shell, "
                    "or write it where the shell looks for completions.",
        **examples('eval "$(pinmatrix completion bash)"                     # this bash shell',
                   "pinmatrix completion bash > ~/.local/share/bash-completion/completions/pinmatrix",
                   "pinmatrix completion zsh > ~/.zfunc/_pinmatrix           # with fpath+=(~/.zfunc)"),
    )
    p.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(shtab.complete(build_parser(), shell=args.shell), end="")
    return 0
