"""Host-runtime honesty: where smokes run in the host's environment instead of the cell's image (a GPU machine
with no container engine), every difference between that environment and the cell's lock is recorded with each
result: the Python version, and every locked distribution installed at another version or not at all."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from pinmatrix.project.lockfile import LockFileError, parse_lock
from pinmatrix.smoke.target import SmokeTarget

_PROBE = (
    "import sys, json, importlib.metadata as m\n"
    "d = {}\n"
    "for dist in m.distributions():\n"
    "    name = dist.metadata['Name']\n"
    "    if name and name not in d: d[name] = dist.version\n"
    "print(json.dumps({'python': '%d.%d.%d' % sys.version_info[:3], 'dists': d}))\n"
)


def environment_of(python: str, extra_path: Path | None = None) -> dict[str, Any]:
    """The Python version and installed distributions the smoke interpreter sees (overlay first)."""
    env = dict(os.environ)
    if extra_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(extra_path), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([python, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=120, check=False)
    if proc.returncode != 0:
        return {"python": "unknown", "dists": {}}
    seen: dict[str, Any] = json.loads(proc.stdout)
    return seen


def differences(cell: SmokeTarget, lock_text: str | None, seen: dict[str, Any]) -> dict[str, Any]:
    """What differs between the cell (its Python and lock) and the environment ``seen``."""
    cell_python = cell.python
    out: dict[str, Any] = {"host_python": seen.get("python"), "cell_python": cell_python}
    python = str(seen.get("python") or "")
    out["python_differs"] = bool(cell_python) and not python.startswith(f"{cell_python}.")
    installed: dict[str, Any] = {str(canonicalize_name(k)): v for k, v in (seen.get("dists") or {}).items()}
    packages: list[dict[str, str | None]] = []
    if lock_text is None:
        out["lock"] = "absent: the cell has no lock here"
    else:
        try:
            entries = parse_lock(lock_text).entries
        except LockFileError as err:
            entries = ()
            out["lock"] = f"unreadable: {err}"
        for entry in entries:
            have = installed.get(entry.name)
            if have != entry.version:
                packages.append({"package": entry.name, "lock": entry.version, "host": have})
    out["packages"] = packages
    out["identical"] = not out["python_differs"] and not packages and lock_text is not None
    return out
