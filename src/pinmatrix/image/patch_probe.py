"""Whether a release's files already carry an installed-tree patch's change, decided by the same dry run the image
build applies patches with (``assembly/patching.plan_patch``): ``upgrade/upstream.py`` reads the files the patch
touches out of the release's wheel into a scratch folder and asks this. It lives here, on the image floor, because
the patch reader does; the upstream report takes it as a ``PatchReader``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pinmatrix.image.assembly.patching import parse_patch, plan_patch


class PatchFiles:
    """``upgrade.upstream.PatchReader`` over the image build's patch code (``-p1`` from site-packages)."""

    def targets(self, patch_file: Path) -> list[str]:
        """The files the patch changes, relative to site-packages."""
        return [fp.target(1) for fp in parse_patch(patch_file.read_text(encoding="utf-8"), patch_file.name)]

    def outcome(self, patch_file: Path, root: Path) -> Literal["would-apply", "already-applied"]:
        """"would-apply": the files lack the change; "already-applied": they carry it (PatchError: neither)."""
        return "already-applied" if plan_patch(patch_file, root)[0] == "already-applied" else "would-apply"
