"""Installed-tree patches: sha256 first, dry run, apply, already-applied, a failing hunk named. The project's
xformers patch against the real wheel: tests/integration/test_patching_real_wheel.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from xformers_patch import KERNEL, XFORMERS_PATCH

from pinmatrix.errors import PatchError
from pinmatrix.image.assembly.patching import apply_patch, parse_patch, sha256_file

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


