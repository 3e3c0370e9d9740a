"""``pinmatrix ci canary``: a GitHub Actions workflow that runs the canary (``nox -s canary``) on a schedule, one
job per stack on a runner that can smoke the stack's cells (``github.runner_labels`` of its first cell: a GPU
stack's job runs on a self-hosted runner with the stack's GPU and driver labels), each uploading its comparison as
JSON. Stack names reach the shell through ``env:`` only, as in docs/workflows/pinmatrix.yml; actions are pinned
by commit."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import yaml

from pinmatrix.cell import Cell
from pinmatrix.ci.github import runner_labels
from pinmatrix.errors import PinmatrixError
from pinmatrix.names import shown, text_problem

CHECKOUT = "actions/checkout@08c6903cd8c0fde910a37f88322edcfb5dd907a8"  # v5.0.0
SETUP_PYTHON = "actions/setup-python@e797f83bcb11b83ae66e0230d6156d7c80228e7c"  # v6.0.0
UPLOAD = "actions/upload-artifact@330a01c490aca151604b8cf639adc76d48f6c5d4"  # v5.0.0
_CRON_FIELD = re.compile(r"^[0-9*/,-]+$")
INSTALL = """python3 -m venv "$RUNNER_TEMP/venv"
"$RUNNER_TEMP/venv/bin/pip" install --require-hashes --no-deps -r requirements/dev.lock
"$RUNNER_TEMP/venv/bin/pip" install --no-deps --no-build-isolation .
echo "$RUNNER_TEMP/venv/bin" >> "$GITHUB_PATH"
"""
CANARY = 'nox -s canary -- --stack "$STACK" --limit "$LIMIT" --json > "canary-$STACK.json"\n'


def check_cron(cron: str) -> str:
    fields = cron.split()
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise PinmatrixError(f"ci canary: --cron {shown(cron)}: not five cron fields (minute hour day month weekday)")
    return " ".join(fields)


def canary_workflow(cells: Sequence[Cell], *, cron: str, limit: int = 1,
                    cpu_runner: Sequence[str] = ("ubuntu-latest",)) -> dict[str, Any]:
    """The workflow, one job per stack of ``cells`` on the runner its first cell needs."""
    stacks: dict[str, list[str]] = {}
    for cell in cells:
        stacks.setdefault(cell.stack, runner_labels(cell, cpu_runner=cpu_runner))
    if not stacks:
        raise PinmatrixError("ci canary: no cells selected")
    for stack, labels in stacks.items():
        for text in (stack, *labels):
            if text_problem(text):
                raise PinmatrixError(f"ci canary: stack {shown(stack)}: {shown(text)} {text_problem(text)}")
    step_env = {"STACK": "${{ matrix.stack }}", "LIMIT": str(limit)}
    job = {
        "name": "Canary of ${{ matrix.stack }}'s next upgrade", "runs-on": "${{ matrix.runs-on }}",
        "timeout-minutes": 360,
        "strategy": {"fail-fast": False,
                     "matrix": {"include": [{"stack": s, "runs-on": labels} for s, labels in stacks.items()]}},
        "steps": [
            {"uses": CHECKOUT, "with": {"persist-credentials": False}},
            {"uses": SETUP_PYTHON, "with": {"python-version": "3.12"}},
            {"name": "Install pinmatrix from the hashed lock", "run": INSTALL},
            {"name": "Canary: build, smoke and compare the proposed candidates", "env": step_env, "run": CANARY},
            {"if": "${{ !cancelled() }}", "uses": UPLOAD,
             "with": {"name": "canary-${{ matrix.stack }}", "path": "canary-*.json"}},
        ],
    }
    return {"name": "pinmatrix-canary", "on": {"schedule": [{"cron": check_cron(cron)}], "workflow_dispatch": {}},
            "permissions": {"contents": "read"},
            "concurrency": {"group": "pinmatrix-canary", "cancel-in-progress": False},
            "jobs": {"canary": job}}


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the run: scripts) as literal blocks."""


_Dumper.add_representer(str, lambda d, s: d.represent_scalar("tag:yaml.org,2002:str", s, style="|" if "\n" in s else None))


def workflow_text(workflow: dict[str, Any]) -> str:
    return ("# Written by `pinmatrix ci canary`: the canary of the next upgrade on a schedule (docs/upgrades.md).\n"
            + yaml.dump(workflow, Dumper=_Dumper, sort_keys=False, width=120))
