"""``pinmatrix registry start|stop|status``: the embedded registry as a background service of the project."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from pinmatrix.commands._common import add_matrix_argument, examples
from pinmatrix.errors import PinmatrixError
from pinmatrix.paths import REGISTRY_DIR, STATE_DIR
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.registry import local as lr

ACTION_EXAMPLES = {
    "start": ("pinmatrix registry start         # kept until `pinmatrix registry stop`",
              "pinmatrix registry start --json"),
    "stop": ("pinmatrix registry stop",),
    "status": ("pinmatrix registry status", "pinmatrix registry status --json"),
}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "registry", help=f"start, stop or show the embedded registry (Debian's docker-registry, data in {STATE_DIR}/)",
        description="When matrix.registry is on this machine's loopback (127.0.0.1:PORT or localhost:PORT), "
                    "commands that push, smoke a pushed image, promote or pull start Debian's docker-registry "
                    f"there themselves if nothing listens, with its data in {REGISTRY_DIR}/data next to the "
                    "matrix, and stop it when they end. `registry start` keeps one running in the background "
                    f"instead (pid in {REGISTRY_DIR}/registry.json) until `registry stop`.",
        **examples("pinmatrix registry start     # keep the embedded registry running",
                   "pinmatrix registry status --json",
                   "pinmatrix registry stop"),
    )
    actions = p.add_subparsers(dest="registry_command", metavar="ACTION", required=True)
    for name, text in (("start", "start the registry in the background (kept until `registry stop`)"),
                       ("stop", "stop the registry pinmatrix started (either way)"),
                       ("status", "whether it listens, who serves it, where its data is")):
        a = actions.add_parser(name, help=text, description=text, **examples(*ACTION_EXAMPLES[name]))
        add_matrix_argument(a)
        a.add_argument("--json", action="store_true", help="print the status as JSON")
        a.set_defaults(func=run)


def _project(path: Path) -> tuple[Path, str]:

    matrix = load_matrix(path)
    return Path(matrix.root), matrix.settings.registry or ""


def run(args: argparse.Namespace) -> int:

    root, setting = _project(args.matrix)
    endpoint = lr.loopback_endpoint(setting)
    action = args.registry_command
    if action == "start":
        if endpoint is None:
            raise PinmatrixError(f"{args.matrix}: matrix.registry {setting!r} is not on this machine's loopback "
                                 "(127.0.0.1:PORT or localhost:PORT): there is nothing to start here")
        outcome, _ = lr.ensure_managed(root, endpoint)
        message = {
            "started": f"started the registry on {endpoint.address}",
            "adopted": f"the registry on {endpoint.address} is kept running now",
            "running": f"the registry on {endpoint.address} is already running",
            "foreign": f"{endpoint.address} is already served by a process pinmatrix did not start; left alone",
        }[outcome]
    elif action == "stop":
        stopped = lr.stop(root)
        message = f"stopped the registry on {stopped.address} (pid {stopped.pid})" if stopped else \
            "no registry started by pinmatrix is running"
        outcome = "stopped" if stopped else "not-running"
    else:
        outcome, message = "status", ""
    info = lr.status(root, endpoint)
    if args.json:
        print(json.dumps({"action": action, "outcome": outcome, **info}, indent=2, sort_keys=True))
        return 0
    if message:
        print(message)
    if action != "stop":
        who = {"pinmatrix": f"pinmatrix ({info['mode']}, pid {info['pid']})", "another process": "another process",
               None: "nothing"}[info["served_by"]]
        print(f"{info['address'] or '-'}: {'listening' if info['listening'] else 'not listening'}, served by {who}; "
              f"data {info['data']} ({info['data_bytes'] / 1e6:.1f} MB)")
    return 0
