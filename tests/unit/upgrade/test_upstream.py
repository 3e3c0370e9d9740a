"""``pinmatrix upstream`` against a fake index (wheels whose files carry or lack a patch's change, read by byte
ranges) and a fake forge on 127.0.0.2: the release's files decide drop / keep / check for a patch and flip / keep
for the known issue it fixes; a fix merged upstream with a release since asks for a check; offline, no wheel is
read; the command prints one line per item when the forge is down, exits 0 unless --strict, and never a traceback."""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fake_forge import FakeForge, pull, serve_forge
from fake_index import FakeIndex, serve_index
from upgrade_matrix import head

import pinmatrix.upgrade.sources as sources_module
import pinmatrix.upgrade.upstream as upstream_module
from pinmatrix.cli import main
from pinmatrix.image.patch_probe import PatchFiles
from pinmatrix.index.answers import BoundedHttp
from pinmatrix.index.releases import ReleaseSource
from pinmatrix.index.wheel_metadata import MetadataCache
from pinmatrix.project.matrix_toml import Matrix, load_matrix
from pinmatrix.upgrade.forge import ForgeCache, ForgeClient
from pinmatrix.upgrade.sources import UpgradeSources
from pinmatrix.upgrade.upstream import UpstreamItem, UpstreamRun, patch_proposal, upstream_lines, upstream_report

NOW = datetime(2026, 12, 4, tzinfo=UTC)
ORIGINAL = b"def f(i):\n    return i * 4\n# end\n"
PATCHED = b"def f(i):\n    return int(i) * 4\n# end\n"
CHANGED = b"def f(i, j):\n    return j\n# end\n"
PATCH = """--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,3 +1,3 @@
 def f(i):
-    return i * 4
+    return int(i) * 4
 # end
"""
MATRIX = head() + """[patches.fix]
package = "pkg"
applies_to = ">=1.0"
upstream = "https://github.com/o/pkg/pull/7"
source = "patches/fix.patch"
sha256 = "SHA"
[[known_issues]]
id = "pkg-bug"
when = { pkg = ">=1.0" }
without_patches = ["fix"]
smokes = ["host-probe"]
note = "fixed by the patch"
upstream = "https://github.com/o/pkg/pull/7"
[[known_issues]]
id = "pkg-other"
when = { pkg = ">=1.0" }
smokes = ["host-probe"]
note = "reported upstream"
upstream = "https://github.com/o/pkg/issues/6"
[stacks.s]
gpu_required = false
smokes = ["host-probe"]
[stacks.s.packages]
pkg = ["1.0", { version = "1.0", patches = ["fix"], label = "fix" }]
[stacks.t]
gpu_required = false
smokes = ["host-probe"]
[stacks.t.packages]
six = ["1.17.0"]
"""
MERGED = pull(7, state="closed", merged=True, merged_at="2026-06-01T00:00:00Z", closed_at="2026-06-01T00:00:00Z")


def _project(tmp_path: Path) -> Matrix:
    (tmp_path / "patches").mkdir()
    (tmp_path / "patches" / "fix.patch").write_text(PATCH, encoding="utf-8")
    sha = hashlib.sha256(PATCH.encode()).hexdigest()
    (tmp_path / "matrix.toml").write_text(MATRIX.replace("SHA", sha), encoding="utf-8")
    return load_matrix(tmp_path / "matrix.toml")


def _index(newest: bytes, uploaded: str = "2026-07-01T00:00:00Z") -> FakeIndex:
    return FakeIndex({"pkg": {"1.0": ("2026-01-01T00:00:00Z", []), "1.1": (uploaded, [])}},
                     members={"pkg==1.0": {"pkg/mod.py": ORIGINAL}, "pkg==1.1": {"pkg/mod.py": newest}})


@pytest.fixture
def forge() -> Iterator[tuple[FakeForge, str]]:
    fake = FakeForge()
    fake.answer("/repos/o/pkg/pulls/7", MERGED)
    fake.answer("/repos/o/pkg/issues/6", {"state": "closed", "state_reason": "completed", "title": "t",
                                          "html_url": "u", "closed_at": "2026-06-01T00:00:00Z"})
    with serve_forge(fake) as url:
        yield fake, url


def _report(tmp_path: Path, index_url: str, forge_url: str, *, offline: bool = False) -> dict[str, UpstreamItem]:
    matrix = _project(tmp_path) if not (tmp_path / "matrix.toml").exists() else load_matrix(tmp_path / "matrix.toml")
    sources = UpgradeSources(ReleaseSource(tmp_path / "pages", BoundedHttp(timeout=5), offline=offline),
                             MetadataCache(tmp_path / "meta"), index_url, NOW)
    run = UpstreamRun(matrix, sources, ForgeClient(forge_url, timeout=5), ForgeCache(tmp_path / "forge"), PatchFiles(),
                      offline)
    return {i.id: i for i in upstream_report(run)}


def test_a_release_whose_files_carry_the_change_drops_the_patch_and_flips_its_issue(
        tmp_path: Path, forge: tuple[FakeForge, str]) -> None:
    with serve_index(_index(PATCHED)) as url:
        items = _report(tmp_path, url, forge[1])
    fix, bug = items["fix"], items["pkg-bug"]
    assert fix.release is not None and (fix.release.version, fix.release.verdict) == ("1.1", "contains")
    assert (fix.proposal, fix.reason) == ("drop-patch", "pkg 1.1's files already carry its change "
                                                        "(pkg-1.1-py3-none-manylinux_2_28_x86_64.whl)")
    assert bug.proposal == "flip-expectation" and bug.reason.startswith("pkg 1.1 carries its fix (patch fix's change")


def test_a_release_that_lacks_the_change_keeps_the_patch_even_when_upstream_merged_it(
        tmp_path: Path, forge: tuple[FakeForge, str]) -> None:
    with serve_index(_index(ORIGINAL)) as url:
        items = _report(tmp_path, url, forge[1])
    fix, bug = items["fix"], items["pkg-bug"]
    assert fix.release is not None and fix.release.verdict == "lacks"
    assert (fix.proposal, fix.reason) == ("keep", "pkg 1.1 (newest) lacks its change: the patch still applies to its "
                                                  "files though upstream merged it")
    assert (bug.proposal, bug.reason) == ("keep", "pkg 1.1 (newest) still lacks its fix (patch fix still applies to "
                                                  "its files)")
    lines = upstream_lines(list(items.values()), NOW)
    assert lines[:3] == [
        "patch fix: o/pkg PR #7: merged 2026-06-01",
        "    release pkg 1.1 (pkg-1.1-py3-none-manylinux_2_28_x86_64.whl): lacks: pkg/mod.py: the patch still applies",
        "    proposal: keep: pkg 1.1 (newest) lacks its change: the patch still applies to its files though upstream "
        "merged it"]


def test_a_release_whose_file_changed_otherwise_asks_for_a_check(tmp_path: Path, forge: tuple[FakeForge, str]) -> None:
    with serve_index(_index(CHANGED)) as url:
        fix = _report(tmp_path, url, forge[1])["fix"]
    assert fix.proposal == "check" and fix.release is not None and fix.release.verdict == "changed"
    assert fix.reason == ("pkg 1.1's files changed: fix.patch: pkg/mod.py: hunk #1 (@@ -1,3 +1,3 @@) does not apply "
                          "under pkg-1.1-py3-none-manylinux_2_28_x86_64.whl")


def test_a_fix_merged_upstream_with_a_release_since_asks_for_a_smoke(
        tmp_path: Path, forge: tuple[FakeForge, str]) -> None:
    with serve_index(_index(ORIGINAL)) as url:
        other = _report(tmp_path, url, forge[1])["pkg-other"]
    assert (other.proposal, other.reason) == ("check", "fixed upstream 2026-06-01; released since: pkg 1.1 (by upload "
                                                       "date, not by its files): smoke it, then flip the expectation")
    (tmp_path / "before").mkdir()
    with serve_index(_index(ORIGINAL, uploaded="2026-05-01T00:00:00Z")) as url:
        other = _report(tmp_path / "before", url, forge[1])["pkg-other"]
    assert (other.proposal, other.reason) == ("keep", "fixed upstream 2026-06-01; no release of pkg since")


def test_offline_reads_no_wheel_and_answers_from_the_caches_with_their_dates(
        tmp_path: Path, forge: tuple[FakeForge, str]) -> None:
    index = _index(PATCHED)
    with serve_index(index) as url:
        _report(tmp_path, url, forge[1])
        served, asked = index.served_bytes, len(forge[0].seen)
        items = _report(tmp_path, url, forge[1], offline=True)
        assert (index.served_bytes, len(forge[0].seen)) == (served, asked)
        for cached in (tmp_path / ".pinmatrix" / "cache" / "upstream-checks").iterdir():
            cached.unlink()
        unread = _report(tmp_path, url, forge[1], offline=True)["fix"]
    fix = items["fix"]
    assert fix.release is not None and fix.release.from_cache and fix.release.checked_at == NOW
    assert (fix.release.verdict, fix.proposal, items["pkg-bug"].proposal) == ("contains", "drop-patch",
                                                                              "flip-expectation")
    assert upstream_lines([fix], NOW)[:2] == [
        "patch fix: o/pkg PR #7: offline; cached answer from 2026-12-04 00:00Z (0 h old): merged 2026-06-01",
        "    release pkg 1.1 (pkg-1.1-py3-none-manylinux_2_28_x86_64.whl): contains: pkg/mod.py: every hunk is already "
        "there (cached: read 2026-12-04 00:00Z, 0 h old)"]
    assert unread.release is not None and (unread.release.verdict, unread.release.detail) == (
        "not-read", "offline: its wheel is not read, no verdict is cached")
    assert (unread.proposal, unread.reason) == ("check", "merged upstream; no release's files were read")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return int(s.getsockname()[1])


def test_the_command_says_one_line_per_item_when_the_forge_is_down(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _project(tmp_path)
    down = f"http://127.0.0.2:{_closed_port()}"
    with serve_index(_index(ORIGINAL)) as url:
        monkeypatch.setattr(sources_module, "DEFAULT_INDEX", url)
        assert main(["upstream", str(tmp_path / "matrix.toml"), "--forge-url", down, "--timeout", "3"]) == 0
        out = capsys.readouterr()
        assert main(["upstream", str(tmp_path / "matrix.toml"), "--forge-url", down, "--strict"]) == 1
    heads = [line for line in out.out.splitlines() if not line.startswith("    ")]
    assert len(heads) == 3 and out.err == ""
    assert all(h.split(": ", 2)[2].startswith("forge not reachable (") and h.endswith("; unknown") for h in heads)
    assert "    release pkg 1.1 (pkg-1.1-py3-none-manylinux_2_28_x86_64.whl): lacks: pkg/mod.py: the patch still " \
           "applies" in out.out


def test_the_command_sends_the_token_to_the_forge_and_filters_by_stack(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        forge: tuple[FakeForge, str]) -> None:
    _project(tmp_path)
    monkeypatch.setenv("GITHUB_TOKEN", "s3cret")
    with serve_index(_index(PATCHED)) as url:
        monkeypatch.setattr(sources_module, "DEFAULT_INDEX", url)
        assert main(["upstream", str(tmp_path / "matrix.toml"), "--forge-url", forge[1], "--json", "--strict"]) == 0
        rows = json.loads(capsys.readouterr().out)
        assert main(["upstream", str(tmp_path / "matrix.toml"), "--forge-url", forge[1], "--stack", "t"]) == 0
        assert capsys.readouterr().out.strip() == ""
    assert {r["id"]: r["proposal"] for r in rows} == {"fix": "drop-patch", "pkg-bug": "flip-expectation",
                                                      "pkg-other": "check"}
    assert rows[0]["forge"]["answer"]["merged"] is True and rows[0]["release"]["verdict"] == "contains"
    assert {h.get("Authorization") for _, h in forge[0].seen} == {"Bearer s3cret"}


def test_an_index_that_does_not_answer_is_a_line_not_a_traceback(
        tmp_path: Path, forge: tuple[FakeForge, str]) -> None:
    fix = _report(tmp_path, f"http://127.0.0.2:{_closed_port()}/simple", forge[1])["fix"]
    assert fix.release is not None and fix.release.verdict == "not-read"
    assert fix.release.detail.startswith("http://127.0.0.2:") and "unreachable" in fix.release.detail
    assert fix.proposal == "check" and fix.reason == "merged upstream; no release's files were read"


def test_a_patch_the_matrix_marks_contained_is_dropped_once_no_stack_pins_an_older_version(tmp_path: Path) -> None:
    text = """
[matrix]
name = "t"
[patches.up]
package = "pkg"
applies_to = ">=1.0"
upstream = "https://github.com/o/pkg/pull/8"
contained_in = "1.1"
[stacks.s]
gpu_required = false
smokes = ["host-probe"]
[stacks.s.packages]
pkg = PINS
"""
    for pins, want in (('["1.1", "1.2"]', ("drop-patch", "the matrix marks it contained in pkg 1.1, and every pinned "
                                                         "version is that or newer")),
                       ('["1.0", "1.2"]', ("keep", "contained in 1.1, but the matrix still pins 1.0"))):
        matrix = load_matrix(text=text.replace("PINS", pins))
        assert patch_proposal(matrix, matrix.patches["up"], None, None) == want


def test_a_wheel_member_past_its_bound_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    forge: tuple[FakeForge, str]) -> None:
    monkeypatch.setattr(upstream_module, "MAX_MEMBER", 20)
    with serve_index(_index(PATCHED)) as url:
        fix = _report(tmp_path, url, forge[1])["fix"]
    assert fix.release is not None and (fix.release.verdict, fix.release.detail) == (
        "not-read", f"pkg-1.1-py3-none-manylinux_2_28_x86_64.whl: pkg/mod.py is {len(PATCHED)} bytes, more than 20")


def test_strict_counts_an_upstream_that_is_no_forge_url_as_unknown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        forge: tuple[FakeForge, str]) -> None:
    _project(tmp_path)
    path = tmp_path / "matrix.toml"
    path.write_text(path.read_text().replace("https://github.com/o/pkg/issues/6", "https://example.org/bugs/6"))
    with serve_index(_index(ORIGINAL)) as url:
        monkeypatch.setattr(sources_module, "DEFAULT_INDEX", url)
        assert main(["upstream", str(path), "--forge-url", forge[1]]) == 0
        assert "known-issue pkg-other: 'https://example.org/bugs/6': not a forge reference" in capsys.readouterr().out
        assert main(["upstream", str(path), "--forge-url", forge[1], "--strict"]) == 1
