"""The annotations of a cell image's manifest (pinmatrix.image.annotations): source, revision, created and the
cell's pins in the manifest itself; the same SOURCE_DATE_EPOCH gives the same digest in another cache and layout,
another one changes the manifest's ``created`` and nothing else (config and layers stay), also for an image the
layout already holds; what a git checkout says (its commit, its remote without credentials) and what it does not
(no checkout: nothing); a bad SOURCE_DATE_EPOCH or ``[matrix] source`` is one line. Same fixtures as
test_assemble.py (a base written here, wheels from an index on 127.0.0.1)."""

# ruff: noqa: F811 (the fixtures index and project, imported from test_assemble, are arguments of the tests)
from __future__ import annotations

import dataclasses
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError
from test_assemble import Project, _serve, index, project  # noqa: F401 (index and project are fixtures)

from pinmatrix.errors import PinmatrixError
from pinmatrix.image.annotations import ImageOrigin, image_origin, source_date_epoch
from pinmatrix.image.assembly.assemble import Assembler
from pinmatrix.project.checkout import SourceURLError, read_checkout, source_url
from pinmatrix.project.matrix_toml import Settings

REVISION = "0123456789abcdef0123456789abcdef01234567"
SOURCE = "https://forge.example/team/stack.git"


def _with(project: Project, origin: ImageOrigin) -> Assembler:
    project.settings = dataclasses.replace(project.settings, origin=origin)
    project.assembler = Assembler(project.settings)
    return project.assembler


def _manifest(project: Project, ref: str = "localhost/rules:one") -> dict[str, Any]:
    stored = project.assembler.layout.image(ref)
    assert stored is not None
    return stored.manifest


def test_the_manifest_names_source_revision_created_and_the_cells_pins(project: Project) -> None:
    _with(project, ImageOrigin(SOURCE, REVISION, None))
    image = project.assemble()
    assert _manifest(project)["annotations"] == {
        "org.opencontainers.image.source": SOURCE,
        "org.opencontainers.image.revision": REVISION,
        "org.opencontainers.image.created": "2025-01-01T00:00:00Z",  # the cell's base's source_date_epoch
        "io.pinmatrix.cell.id": project.cell.id,
        "io.pinmatrix.cell.stack": project.cell.stack,
        "io.pinmatrix.pin.alpha": "1.0",
    }
    config = json.loads(project.assembler.layout.blob_path(image.config_digest).read_bytes())
    assert "org.opencontainers.image.revision" not in config["config"]["Labels"]  # the manifest's, not the config's


def test_without_a_source_or_revision_they_are_absent_not_invented(project: Project) -> None:
    project.assemble()
    annotations = _manifest(project)["annotations"]
    assert "org.opencontainers.image.source" not in annotations and "org.opencontainers.image.revision" not in annotations
    assert annotations["io.pinmatrix.cell.id"] == project.cell.id


def test_the_same_source_date_epoch_gives_the_same_digest_another_changes_only_created(
        project: Project, tmp_path: Path, index: tuple[str, dict[str, bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    _with(project, ImageOrigin(SOURCE, REVISION, 1_700_000_000))
    first = project.assemble()
    url, pages = index
    other = Project(tmp_path / "other", url, monkeypatch)  # another cache and layout, the same inputs
    _serve(pages, other)
    _with(other, ImageOrigin(SOURCE, REVISION, 1_700_000_000))
    assert other.assemble().digest == first.digest
    _with(other, ImageOrigin(SOURCE, REVISION, 1_800_000_000))
    steps: list[str] = []
    later = other.assemble(steps=steps)
    assert later.digest != first.digest and later.cached and steps == ["plan"]  # annotated anew, nothing rebuilt
    before, after = _manifest(project), _manifest(other)
    assert {k: v for k, v in before.items() if k != "annotations"} == {k: v for k, v in after.items()
                                                                       if k != "annotations"}
    changed = {k for k in before["annotations"] | after["annotations"]
               if before["annotations"].get(k) != after["annotations"].get(k)}
    assert changed == {"org.opencontainers.image.created"}
    assert after["annotations"]["org.opencontainers.image.created"] == "2027-01-15T08:00:00Z"
    _with(other, ImageOrigin(SOURCE, REVISION, 1_700_000_000))
    assert other.assemble().digest == first.digest  # and back


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def test_a_git_checkout_gives_its_commit_and_its_remote_without_credentials(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    assert read_checkout(repo).revision is None and read_checkout(repo).source is None  # no checkout: nothing
    _git(repo, "init", "-q")
    (repo / "matrix.toml").write_text("")
    _git(repo, "add", "matrix.toml")
    _git(repo, "commit", "-q", "-m", "one")
    _git(repo, "remote", "add", "origin", "https://ci-bot:s3cret@forge.example/team/stack.git")
    found = read_checkout(repo / "sub")  # a project in a folder of the checkout
    assert found.revision == _git(repo, "rev-parse", "HEAD") and len(found.revision) == 40
    assert found.source == SOURCE  # the token is not published
    _git(repo, "remote", "set-url", "origin", "ext::sh -c touch% /tmp/pwned")
    assert read_checkout(repo).source is None  # a remote an image cannot carry is left out
    origin = image_origin(repo, "git@forge.example:team/stack.git", {"SOURCE_DATE_EPOCH": "1700000000"})
    assert origin == ImageOrigin("ssh://git@forge.example/team/stack.git", found.revision, 1_700_000_000)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ext::sh -c id", "https://forge.example/x?token=1",
                                 "https://forge.example/x#y", "https://forge.example/x y", "https://forge.example/é",
                                 "https://" + "a" * 2100, "forge.example"])
def test_a_source_an_image_cannot_carry_is_refused(url: str) -> None:
    with pytest.raises(SourceURLError):
        source_url(url)
    with pytest.raises(ValidationError):
        Settings(source=url)


def test_credentials_are_taken_out_of_a_source_url() -> None:
    assert source_url("https://user:token@forge.example:8443/x.git") == "https://forge.example:8443/x.git"
    assert source_url("ssh://git:pw@forge.example/x.git") == "ssh://git@forge.example/x.git"
    assert Settings(source="http://u@forge.example/x").source == "http://forge.example/x"


@pytest.mark.parametrize("value", ["-1", "1.5", "soon", "99999999999999", "١٢٣"])
def test_a_bad_source_date_epoch_is_one_line(value: str) -> None:
    with pytest.raises(PinmatrixError, match=r"^SOURCE_DATE_EPOCH: .* is not a number of seconds since 1970"):
        source_date_epoch({"SOURCE_DATE_EPOCH": value})
    assert source_date_epoch({}) is None and source_date_epoch({"SOURCE_DATE_EPOCH": ""}) is None
    assert source_date_epoch({"SOURCE_DATE_EPOCH": "0"}) == 0
