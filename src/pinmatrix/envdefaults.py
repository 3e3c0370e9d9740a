"""Every option of every command can come from the environment, as click's ``auto_envvar_prefix`` and
cibuildwheel's ``CIBW_*`` allow: ``PINMATRIX_<COMMAND>_<OPTION>``, the command path and the option's name in
capitals with ``-`` as ``_`` (``pinmatrix pull --stack demo`` = ``PINMATRIX_PULL_STACK=demo``, ``pinmatrix ci
k8s --registry R`` = ``PINMATRIX_CI_K8S_REGISTRY=R``). The command line wins. A flag takes 1/true/yes/on or
0/false/no/off; a repeatable option takes its values separated by whitespace. A value the option would refuse
on the command line is refused the same way, naming the variable."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from typing import Any

PREFIX = "PINMATRIX_"
TRUE = frozenset({"1", "true", "yes", "on"})
FALSE = frozenset({"0", "false", "no", "off", ""})


def _commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...],
                                                                                            argparse.ArgumentParser]]:
    """Every (command path, parser) below ``parser``, nested subcommands too."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            seen: set[int] = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:  # an alias names the same parser
                    continue
                seen.add(id(sub))
                yield (*path, name), sub
                yield from _commands(sub, (*path, name))


def variable(path: tuple[str, ...], action: argparse.Action) -> str:
    return PREFIX + "_".join((*path, action.dest)).upper().replace("-", "_")


def option_actions(parser: argparse.ArgumentParser) -> Iterator[tuple[tuple[str, ...], argparse.Action]]:
    """Every option (not positionals, --help, --version or subcommands) of every command."""
    for path, sub in _commands(parser):
        for action in sub._actions:
            if not action.option_strings or isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                                                                argparse._SubParsersAction)):
                continue
            yield path, action


def _convert(action: argparse.Action, raw: str, name: str) -> Any:
    def one(text: str) -> Any:
        try:
            value = action.type(text) if callable(action.type) else text
        except (argparse.ArgumentTypeError, TypeError, ValueError) as err:
            raise ValueError(f"{name}={raw}: {err}") from None
        if action.choices is not None and value not in action.choices:
            raise ValueError(f"{name}={raw}: invalid choice {text!r} (choose from {', '.join(map(str, action.choices))})")
        return value

    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse.BooleanOptionalAction)):
        word = raw.strip().lower()
        if word not in TRUE | FALSE:
            raise ValueError(f"{name}={raw}: expected 1/true/yes/on or 0/false/no/off")
        on = word in TRUE
        return not on if isinstance(action, argparse._StoreFalseAction) else on
    if isinstance(action, argparse._CountAction):
        if not raw.strip().isdigit():
            raise ValueError(f"{name}={raw}: expected a count (0, 1, 2, ...)")
        return int(raw)
    if isinstance(action, argparse._AppendAction):
        return [one(part) for part in raw.split()]
    if action.nargs not in (None, "?"):
        return [one(part) for part in raw.split()]
    return one(raw)


def apply_environment(parser: argparse.ArgumentParser, environ: Mapping[str, str]) -> list[str]:
    """Set each option's default from its PINMATRIX_* variable; returns the variables used. ValueError (one
    line naming the variable) for a value the option refuses."""
    used = []
    for path, action in option_actions(parser):
        name = variable(path, action)
        if name in environ:
            action.default = _convert(action, environ[name], name)
            used.append(name)
    return used
