"""Installed-tree patches: sha256 first, dry run, apply, already-applied, a failing hunk named; and the
project's xformers patch against the real xformers 0.0.35 wheel (downloaded from the package index)."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import skip_or_fail
from pinmatrix.errors import PatchError
from pinmatrix.image.assembly.patching import apply_patch, parse_patch, sha256_file

ROOT = Path(__file__).resolve().parents[4]
XFORMERS_PATCH = ROOT / "patches" / "xformers-tiled-matmul-int64.patch"
KERNEL = "xformers/ops/_triton/tiled_matmul_kernels.py"

ORIGINAL = "".join(f"line {i}\n" for i in range(1, 41))
PATCH = """A description header, ignored.

--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -2,3 +2,4 @@
 line 2
 line 3
+inserted after 3
 line 4
@@ -20,3 +21,3 @@
 line 20
-line 21
+line twenty-one
 line 22
--- a/pkg/other.py
+++ b/pkg/other.py
@@ -1,2 +1,2 @@
-alpha
+ALPHA
 beta
"""


def make_tree(root: Path, original: str = ORIGINAL) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "mod.py").write_text(original)
    (root / "pkg" / "other.py").write_text("alpha\nbeta\n")
    return root


def write_patch(tmp: Path, text: str = PATCH) -> Path:
    p = tmp / "x.patch"
    p.write_text(text)
    return p


def test_apply_dry_run_then_already_applied(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "site")
    patch = write_patch(tmp_path)
    dry = apply_patch(patch, tree, expected_sha256=sha256_file(patch), dry_run=True)
    assert dry.outcome == "would-apply" and (tree / "pkg" / "mod.py").read_text() == ORIGINAL
    done = apply_patch(patch, tree, expected_sha256="sha256:" + sha256_file(patch))
    assert done.outcome == "applied" and sorted(done.files) == ["pkg/mod.py", "pkg/other.py"]
    text = (tree / "pkg" / "mod.py").read_text()
    assert "line 3\ninserted after 3\nline 4\n" in text and "line twenty-one\n" in text and "line 21\n" not in text
    assert (tree / "pkg" / "other.py").read_text() == "ALPHA\nbeta\n"
    again = apply_patch(patch, tree)
    assert again.outcome == "already-applied"
    assert (tree / "pkg" / "mod.py").read_text() == text


def test_sha256_mismatch_is_refused_before_anything(tmp_path: Path) -> None:
    tree = make_tree(tmp_path / "site")
    patch = write_patch(tmp_path)
    with pytest.raises(PatchError, match="does not match"):
        apply_patch(patch, tree, expected_sha256="0" * 64)
    assert (tree / "pkg" / "mod.py").read_text() == ORIGINAL


def test_failed_hunk_is_named_and_nothing_is_written(tmp_path: Path) -> None:
    changed = ORIGINAL.replace("line 21\n", "line 21 was edited\n")
    tree = make_tree(tmp_path / "site", changed)
    patch = write_patch(tmp_path)
    with pytest.raises(PatchError) as err:
        apply_patch(patch, tree)
    msg = str(err.value)
    assert "pkg/mod.py: hunk #2 (@@ -20,3 +21,3 @@) does not apply" in msg
    assert (tree / "pkg" / "mod.py").read_text() == changed  # hunk #1 fitted, yet nothing was written
    assert (tree / "pkg" / "other.py").read_text() == "alpha\nbeta\n"


def test_hunks_found_at_an_offset(tmp_path: Path) -> None:
    shifted = "new first line\nanother\n" + ORIGINAL
    tree = make_tree(tmp_path / "site", shifted)
    result = apply_patch(write_patch(tmp_path), tree)
    assert result.offsets["pkg/mod.py"] == [2, 2]
    assert "line twenty-one\n" in (tree / "pkg" / "mod.py").read_text()


def test_missing_target_and_garbage(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    with pytest.raises(PatchError, match="pkg/mod.py not found"):
        apply_patch(write_patch(tmp_path), tmp_path / "site")
    with pytest.raises(PatchError, match="no unified diff"):
        parse_patch("just words\n")
    with pytest.raises(PatchError, match="truncated"):
        parse_patch("--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n a\n")


def test_new_file_and_no_newline_at_eof(tmp_path: Path) -> None:
    tree = tmp_path / "site"
    (tree / "pkg").mkdir(parents=True)
    (tree / "pkg" / "end.py").write_text("a\nb")
    text = (
        "--- /dev/null\n+++ b/pkg/new.py\n@@ -0,0 +1,2 @@\n+x = 1\n+y = 2\n"
        "--- a/pkg/end.py\n+++ b/pkg/end.py\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n"
        "\\ No newline at end of file\n"
    )
    patch = write_patch(tmp_path, text)
    assert apply_patch(patch, tree).outcome == "applied"
    assert (tree / "pkg" / "new.py").read_text() == "x = 1\ny = 2\n"
    assert (tree / "pkg" / "end.py").read_text() == "a\nc"
    assert apply_patch(patch, tree).outcome == "already-applied"


def test_project_patch_header_names_upstream_and_parses() -> None:
    text = XFORMERS_PATCH.read_text()
    assert "https://github.com/facebookresearch/xformers/pull/1346" in text
    (fp,) = parse_patch(text)
    assert fp.target(1) == KERNEL and len(fp.hunks) == 8


@pytest.fixture(scope="module")
def xformers_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The kernel file from the real xformers 0.0.35 wheel (downloaded once)."""
    dl = tmp_path_factory.mktemp("wheel")
    # nox's uv-made session venv has no pip: fall back to the repository's .venv or the system python.
    pythons = [sys.executable, str(ROOT / ".venv" / "bin" / "python"), shutil.which("python3") or "python3"]
    python = next((p for p in pythons if Path(p).exists() and subprocess.run(
        [p, "-m", "pip", "--version"], capture_output=True).returncode == 0), None)
    if python is None:
        skip_or_fail("no interpreter with pip to download the xformers wheel")
    proc = subprocess.run(
        [python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
         "--platform", "manylinux_2_28_x86_64", "-d", str(dl), "xformers==0.0.35"],
        capture_output=True, text=True, timeout=300,
    )
    wheels = list(dl.glob("xformers-0.0.35-*.whl"))
    if proc.returncode != 0 or not wheels:
        skip_or_fail(f"xformers 0.0.35 wheel not downloadable here: {proc.stderr.strip()[-200:]}")
    site = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheels[0]) as zf:
        zf.extract(KERNEL, site)
    return site


@pytest.mark.network
def test_xformers_patch_applies_to_the_real_wheel_like_gnu_patch(xformers_site: Path, tmp_path: Path) -> None:
    ours = tmp_path / "ours"
    shutil.copytree(xformers_site, ours)
    sha = hashlib.sha256(XFORMERS_PATCH.read_bytes()).hexdigest()
    assert apply_patch(XFORMERS_PATCH, ours, expected_sha256=sha).outcome == "applied"
    patched = (ours / KERNEL).read_text()
    assert "INT64_OFFSETS: tl.constexpr = False" in patched and "def _needs_int64_offsets" in patched
    compile(patched, KERNEL, "exec")
    assert apply_patch(XFORMERS_PATCH, ours).outcome == "already-applied"
    gnu = shutil.which("patch")
    if gnu is None:
        skip_or_fail("GNU patch not installed")
    theirs = tmp_path / "theirs"
    shutil.copytree(xformers_site, theirs)
    subprocess.run([gnu, "-p1", "--forward", "-i", str(XFORMERS_PATCH)], cwd=theirs, check=True,
                   capture_output=True)
    assert (theirs / KERNEL).read_text() == patched
    # GNU patch, like us, refuses a second application (--forward): the build's path and ours agree.
    again = subprocess.run([gnu, "-p1", "--forward", "-i", str(XFORMERS_PATCH)], cwd=theirs, capture_output=True)
    assert again.returncode != 0
