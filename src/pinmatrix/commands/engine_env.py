"""``pinmatrix engine-env``: the environment pinmatrix runs podman with, as shell lines for ``eval``."""

from __future__ import annotations

import argparse
import json
import shlex

from pinmatrix.commands._common import examples
from pinmatrix.engine.services import project_podman_env
from pinmatrix.paths import PODMAN_DIR, state_dir


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "engine-env", help="print the podman environment pinmatrix uses, for eval \"$(pinmatrix engine-env)\"",
        description="pinmatrix runs podman and buildah with the project's own containers configuration "
                    f"({PODMAN_DIR}: storage.conf with the storage driver this kernel allows, containers.conf "
                    "with runc, cgroupfs and the ulimits this host permits) unless CONTAINERS_STORAGE_CONF is set "
                    "or /etc/containers/storage.conf exists. This prints the same variables as `export` lines, so "
                    "a plain `podman run` in your shell sees the images pinmatrix built and pulled (as `eval "
                    "\"$(minikube docker-env)\"` does for docker). Nothing is printed when podman uses your own "
                    "or the system's configuration.",
        **examples('eval "$(pinmatrix engine-env)"   # this shell\'s podman and buildah use pinmatrix\'s store',
                   "podman images                    # the images pinmatrix built, loaded and pulled",
                   "pinmatrix engine-env --json      # the same variables as a JSON object"),
    )
    p.add_argument("--json", action="store_true", help="print the variables as a JSON object instead")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:

    env = project_podman_env(state_dir())
    if args.json:
        print(json.dumps(env, indent=2, sort_keys=True))
        return 0
    for key, value in sorted(env.items()):
        print(f"export {key}={shlex.quote(value)}")
    return 0
