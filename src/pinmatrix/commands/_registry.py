"""Which registry a parsed command talks to, declared by each command that needs one
(``parser.set_defaults(registry_need=...)``): ``registry.local.for_command`` starts the embedded registry
for it when the setting names a loopback one, and only on the address the project configures (matrix.toml's
``[matrix] registry``): another loopback address (a ``--registry``, ``--image`` or reference with a mistyped port)
must already be listening."""

from __future__ import annotations

import argparse
from pathlib import Path

from pinmatrix.errors import PinmatrixError
from pinmatrix.paths import MATRIX_FILE
from pinmatrix.project.known_good import read_known_good
from pinmatrix.project.matrix_toml import load_matrix
from pinmatrix.registry.local import loopback_endpoint

Need = tuple[Path, str, str] | None
"""(project root, the registry setting or reference the command uses, the project's configured registry)."""


def matrix_registry(args: argparse.Namespace, override: str | None = None) -> Need:
    """The matrix's registry (or ``override``), rooted at the matrix's folder."""
    path = getattr(args, "matrix", None) or Path("matrix.toml")
    if str(path) == "-":
        return None
    try:
        matrix = load_matrix(Path(path))
    except PinmatrixError:
        return None  # the command itself reports a bad matrix
    configured = matrix.settings.registry or ""
    return Path(matrix.root), (override or configured), configured


def _configured_here() -> str:
    """The registry of the matrix in the working directory (pull and verify read no matrix otherwise); "" when
    there is none or it does not load."""
    try:
        return load_matrix(Path.cwd() / MATRIX_FILE).settings.registry or ""
    except PinmatrixError:
        return ""


def pushing(args: argparse.Namespace) -> Need:
    """``build --push``, ``promote`` and ``ci k8s``: the matrix's registry or ``--registry``."""
    if not getattr(args, "push", True):
        return None
    return matrix_registry(args, getattr(args, "registry", None))


def smoking_images(args: argparse.Namespace) -> Need:
    """``smoke`` in an engine's container asks the registry which digest a cell's tag was pushed as."""
    if getattr(args, "runtime", "host") in ("docker", "podman") and (args.cell or args.stack or args.keyword):
        return matrix_registry(args, getattr(args, "image", None))
    return None


def known_good_registry(args: argparse.Namespace) -> Need:
    """``pull`` (``--print`` too: the image is verified in the registry before its reference is printed): the
    newest known-good entry of the stack on a loopback registry; pull reads no matrix, the project is where it
    runs."""
    try:
        entries = read_known_good(Path(args.known_good))
    except PinmatrixError:
        return None
    for entry in reversed(entries):
        if args.stack in (None, entry.get("stack")) and loopback_endpoint(str(entry.get("reference", ""))):
            return Path.cwd(), str(entry["reference"]), _configured_here()
    return None


def verified_reference(args: argparse.Namespace) -> Need:
    """``verify REF`` on a loopback registry."""
    if loopback_endpoint(str(getattr(args, "reference", ""))):
        return Path.cwd(), str(args.reference), _configured_here()
    return None
